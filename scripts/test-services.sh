#!/usr/bin/env bash
# Installs and starts what the test suite needs, on a fresh Debian 12 machine or again on a
# prepared one (every step is idempotent):
#   - a Docker engine (Debian's docker.io), started by hand (no systemd here), on its own socket
#   - debootstrap + Debian's docker-registry + htpasswd, for a local base image and OCI registry
#   - Debian's prometheus (promtool), prometheus-pushgateway and prometheus-node-exporter
#   - Debian 12 and 13 base images, imported from debootstrap roots (no registry can be pulled from)
#   - CUDA wheelhouses (torch's PyPI CUDA builds with their nvidia-* wheels, Horovod and DeepSpeed
#     sdists) for the CUDA image tests, kept between runs
#   - a wheelhouse with torch 2.13.0 (CPU) and the smoke job's / DeepSpeed's dependencies
# Prints the environment to export (DOCKER_HOST, ENVBUILDER_TEST_*) on stdout, last.
set -euo pipefail

STATE=${ENVBUILDER_TEST_STATE:-/var/tmp/envbuilder-test}
CACHE=${ENVBUILDER_TEST_CACHE:-$HOME/.cache/envbuilder-test}
SOCK=$STATE/docker.sock
BASE_TAG=envbuilder-test/debian:12
BASE_TAG_13=envbuilder-test/debian:13
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
# bounded disk across runs: stopped containers and untagged images (builder and layer stages of
# earlier runs, several GB each for CUDA images) go; tagged images (the base images, the CUDA
# test images the suite reuses when their build context is unchanged) stay
docker container prune -f >/dev/null 2>&1 || true
# tags the push tests left for registries of earlier runs (127.0.0.1:PORT/...): each kept a
# ~1.2 GB CPU image of its run alive
docker images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null \
  | grep -E '^(127\.0\.0\.1|localhost):[0-9]+/' | grep -v ':<none>$' \
  | xargs -r docker rmi >/dev/null 2>&1 || true
docker image prune -f >/dev/null 2>&1 || true

# --- Debian 12 and 13 base images ---------------------------------------------------------
mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
base_image() {  # base_image TAG SUITE ROOTFS-NAME
  local tag=$1 suite=$2 tarball=$CACHE/$3
  docker image inspect "$tag" >/dev/null 2>&1 && return 0
  if [ ! -s "$tarball" ]; then
    log "debootstrap $suite from $mirror"
    local root
    root=$(mktemp -d "$STATE/rootfs.XXXXXX")
    debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$STATE/debootstrap-$suite.log" 2>&1 \
      || { tail -20 "$STATE/debootstrap-$suite.log" >&2; rm -rf "$root"; exit 1; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  log "docker import $tag"
  docker import "$tarball" "$tag" >/dev/null
}
base_image "$BASE_TAG" bookworm debian12-rootfs.tar
base_image "$BASE_TAG_13" trixie debian13-rootfs.tar

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

# --- CUDA wheelhouses: PyPI's default CUDA variant of torch and what each test image builds
# (about 9 GB, downloaded once and kept between runs: a warm run downloads nothing) ----------
plat() {  # pip download flags for CPython $1 (e.g. 3.13) on Linux x86_64
  local v=${1/./}
  echo --only-binary=:all: --python-version "$1" --implementation cp --abi "cp$v" \
    --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_25_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_18_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_12_x86_64 --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 \
    --platform manylinux1_x86_64 --platform linux_x86_64 --platform any
}
cuda_wheels() {  # cuda_wheels NAME PYTHON "REQS" "SDISTS" "EXTRA (wheels taken without their deps)"
  local d=$CACHE/wh-$1 py=$2
  [ -f "$d/.complete" ] && return 0
  log "filling the CUDA wheelhouse $d (python $py): $3 ${4:-}"
  mkdir -p "$d"
  # shellcheck disable=SC2046,SC2086
  python3 -m pip download -q -d "$d" $(plat "$py") $3 >&2
  if [ -n "${4:-}" ]; then
    # shellcheck disable=SC2086
    python3 -m pip download -q -d "$d" --no-deps --no-binary=:all: $4 >&2
  fi
  if [ -n "${5:-}" ]; then
    # shellcheck disable=SC2046,SC2086
    python3 -m pip download -q -d "$d" --no-deps $(plat "$py") $5 >&2
  fi
  touch "$d/.complete"
}
DS_DEPS="setuptools wheel hjson ninja packaging psutil py-cpuinfo pydantic>=2 msgpack tqdm einops nvidia-ml-py"
all_cuda_wheels() {  # the four wheelhouses at once (about 9 GB): pip downloads one file at a time
  # cu124-torch2.6-debian12 (os flavour), and the wrong-NCCL image forced over it
  cuda_wheels cu124-py311 3.11 "torch==2.6.0 numpy" "" "nvidia-nccl-cu12==2.20.5" &
  # cu130-torch2.11-debian12: a second CUDA major line
  cuda_wheels cu130-py311 3.11 "torch==2.11.0 numpy" &
  # cu124-torch2.6-ds0.16-debian13 with pre-built DeepSpeed ops (Debian 13 ships Python 3.13)
  cuda_wheels cu124-py313 3.13 "torch==2.6.0 numpy $DS_DEPS" "deepspeed==0.16.9" &
  # cu117-torch2.0-hvd0.28-debian12: Horovod against torch 2.0.1's nvidia-nccl-cu11 2.14.3; the
  # newest cmake (4.x, as torch 2.0.1's triton pulls it from PyPI); another NCCL for the mismatch test
  cuda_wheels cu117-py311 3.11 "torch==2.0.1 numpy<2 setuptools wheel cloudpickle psutil pyyaml packaging cffi" \
    "horovod==0.28.1" "cmake nvidia-nccl-cu11==2.19.3" &
  local failed=0
  for job in $(jobs -p); do wait "$job" || failed=1; done
  return $failed
}
# Cold, they download while the rest of the suite runs (tests/conftest.py runs the CUDA tests
# last; tests/test_cuda_images.py waits for each wheelhouse's .complete): in the background,
# logged to $STATE/cuda-wheels.log, its pid in $STATE/cuda-wheels.pid. Warm, nothing to do.
if ls "$CACHE"/wh-cu124-py311/.complete "$CACHE"/wh-cu130-py311/.complete \
     "$CACHE"/wh-cu124-py313/.complete "$CACHE"/wh-cu117-py311/.complete >/dev/null 2>&1; then
  rm -f "$STATE/cuda-wheels.pid"
elif [ -f "$STATE/cuda-wheels.pid" ] && kill -0 "$(cat "$STATE/cuda-wheels.pid")" 2>/dev/null; then
  log "the CUDA wheelhouses are still being filled (pid $(cat "$STATE/cuda-wheels.pid"))"
else
  log "filling the CUDA wheelhouses in the background (log: $STATE/cuda-wheels.log)"
  ( all_cuda_wheels ) >"$STATE/cuda-wheels.log" 2>&1 </dev/null &
  echo $! > "$STATE/cuda-wheels.pid"
fi

echo "export DOCKER_HOST=unix://$SOCK"
echo "export ENVBUILDER_TEST_BASE_IMAGE=$BASE_TAG"
echo "export ENVBUILDER_TEST_WHEELHOUSE=$WHEELS"
echo "export ENVBUILDER_TEST_BASE_IMAGE_13=$BASE_TAG_13"
echo "export ENVBUILDER_TEST_CACHE=$CACHE"
echo "export ENVBUILDER_TEST_STATE=$STATE"
echo "export ENVBUILDER_TEST_CUDA_WHEELS_PID=$(cat "$STATE/cuda-wheels.pid" 2>/dev/null || true)"
