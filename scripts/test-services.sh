#!/usr/bin/env bash
# Installs and starts what the test suite needs, on a fresh Debian 12 machine or again on a
# prepared one (every step is idempotent):
#   - a Docker engine (Debian's docker.io), started by hand (no systemd here), on its own socket
#   - debootstrap + Debian's docker-registry + htpasswd, for a local base image and OCI registry
#   - Debian's prometheus (promtool), prometheus-pushgateway and prometheus-node-exporter
#   - a Debian 12 base image, imported from a debootstrap root (no registry can be pulled from)
#   - a wheelhouse with torch 2.13.0 (CPU) and the smoke job's / DeepSpeed's dependencies
# Prints the environment to export (DOCKER_HOST, ENVBUILDER_TEST_*) on stdout, last.
set -euo pipefail

STATE=${ENVBUILDER_TEST_STATE:-/var/tmp/envbuilder-test}
CACHE=${ENVBUILDER_TEST_CACHE:-$HOME/.cache/envbuilder-test}
SOCK=$STATE/docker.sock
BASE_TAG=envbuilder-test/debian:12
mkdir -p "$STATE" "$CACHE"
log() { echo "[test-services] $*" >&2; }

need_pkgs=()
command -v dockerd >/dev/null || need_pkgs+=(docker.io)
command -v debootstrap >/dev/null || need_pkgs+=(debootstrap)
command -v docker-registry >/dev/null || need_pkgs+=(docker-registry)
command -v htpasswd >/dev/null || need_pkgs+=(apache2-utils)
command -v shellcheck >/dev/null || need_pkgs+=(shellcheck)
command -v promtool >/dev/null || need_pkgs+=(prometheus)
command -v prometheus-pushgateway >/dev/null || need_pkgs+=(prometheus-pushgateway)
command -v prometheus-node-exporter >/dev/null || need_pkgs+=(prometheus-node-exporter)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "apt-get install ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${need_pkgs[@]}" >&2
fi

# --- the Docker engine -------------------------------------------------------------------
if ! DOCKER_HOST=unix://$SOCK docker info >/dev/null 2>&1; then
  log "starting dockerd on $SOCK"
  if [ -f "$STATE/docker.pid" ] && kill -0 "$(cat "$STATE/docker.pid")" 2>/dev/null; then
    kill "$(cat "$STATE/docker.pid")" || true; sleep 2
  fi
  rm -f "$SOCK" "$STATE/docker.pid"
  mkdir -p "$STATE/data" "$STATE/exec"
  setsid dockerd --data-root "$STATE/data" --exec-root "$STATE/exec" -H "unix://$SOCK" \
    --pidfile "$STATE/docker.pid" >"$STATE/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    DOCKER_HOST=unix://$SOCK docker info >/dev/null 2>&1 && break
    sleep 1
  done
  DOCKER_HOST=unix://$SOCK docker info >/dev/null 2>&1 || { tail -20 "$STATE/dockerd.log" >&2; log "dockerd did not start"; exit 1; }
fi
export DOCKER_HOST=unix://$SOCK

# --- a Debian 12 base image ---------------------------------------------------------------
if ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
  if [ ! -s "$CACHE/debian12-rootfs.tar" ]; then
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
    log "debootstrap bookworm from $mirror"
    root=$(mktemp -d "$STATE/rootfs.XXXXXX")
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$STATE/debootstrap.log" 2>&1 \
      || { tail -20 "$STATE/debootstrap.log" >&2; exit 1; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$CACHE/debian12-rootfs.tar.tmp" . && mv "$CACHE/debian12-rootfs.tar.tmp" "$CACHE/debian12-rootfs.tar"
    rm -rf "$root"
  fi
  log "docker import $BASE_TAG"
  docker import "$CACHE/debian12-rootfs.tar" "$BASE_TAG" >/dev/null
fi

# --- a wheelhouse for offline image builds -------------------------------------------------
WHEELS=$CACHE/wheelhouse
if [ ! -f "$WHEELS/.complete" ]; then
  log "filling the wheelhouse $WHEELS"
  mkdir -p "$WHEELS"
  plat=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform linux_x86_64 --platform any)
  python3 -m pip download -q -d "$WHEELS" "${plat[@]}" torch==2.13.0 numpy >&2
  # DeepSpeed is an sdist only; its build needs setuptools/wheel from the wheelhouse too
  python3 -m pip download -q -d "$WHEELS" "${plat[@]}" setuptools wheel \
    hjson ninja packaging psutil py-cpuinfo 'pydantic>=2' msgpack tqdm einops >&2
  for ds in 0.16.9 0.17.6; do
    python3 -m pip download -q -d "$WHEELS" --no-deps --no-binary=:all: "deepspeed==$ds" >&2
  done
  touch "$WHEELS/.complete"
fi

echo "export DOCKER_HOST=unix://$SOCK"
echo "export ENVBUILDER_TEST_BASE_IMAGE=$BASE_TAG"
echo "export ENVBUILDER_TEST_WHEELHOUSE=$WHEELS"
echo "export ENVBUILDER_TEST_STATE=$STATE"
