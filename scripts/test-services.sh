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
# bounded disk across runs: stopped containers go; tagged images (the base images, the CUDA test
# images the suite reuses when their build context is unchanged) stay
docker container prune -f >/dev/null 2>&1 || true
# tags the push tests left for registries of earlier runs (127.0.0.1:PORT/...): each kept a
# ~1.2 GB CPU image of its run alive
docker images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null \
  | grep -E '^(127\.0\.0\.1|localhost):[0-9]+/' | grep -v ':<none>$' \
  | xargs -r docker rmi >/dev/null 2>&1 || true
# and the ones left without a tag (REPO@sha256:..., or only an id): `image prune` keeps them
docker images --format '{{.Repository}}@{{.Digest}} {{.Tag}} {{.ID}}' 2>/dev/null \
  | awk '$2 == "<none>" && $1 ~ /^(127\.0\.0\.1|localhost):[0-9]+\// {print ($1 ~ /@$/ ? $3 : $1)}' \
  | xargs -r docker rmi >/dev/null 2>&1 || true
# untagged images are mostly the builder and layer stages of earlier runs: the legacy builder's
# cache (each CPU variant's torch layer is a minute to install again; the CUDA image tests remove
# the stages they make, tests/engine_stages.py). They stay while the engine's images fit a
# budget, as BuildKit's gc keeps its cache to keep-storage; over it, or with the disk nearly
# full, every untagged image goes and the next run builds those stages again.
budget_gb=${ENVBUILDER_TEST_IMAGE_BUDGET_GB:-60}
min_free_gb=${ENVBUILDER_TEST_MIN_FREE_GB:-15}
images_gb=$(docker system df --format '{{.Type}} {{.Size}}' 2>/dev/null | awk '
  $1 == "Images" { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-zA-Z]+$/, "", v)
                   f = (u == "TB") ? 1024 : (u == "GB") ? 1 : (u == "MB") ? 1 / 1024 : 0
                   printf "%d", v * f }')
free_gb=$(df -P -k "$STATE/data" 2>/dev/null | awk 'NR == 2 {printf "%d", $4 / 1048576}')
if [ "${images_gb:-0}" -gt "$budget_gb" ] || [ "${free_gb:-999}" -lt "$min_free_gb" ]; then
  log "images ${images_gb:-?} GB (budget ${budget_gb}, ENVBUILDER_TEST_IMAGE_BUDGET_GB), ${free_gb:-?} GB free (at least ${min_free_gb}, ENVBUILDER_TEST_MIN_FREE_GB): pruning the untagged images (build stages of earlier runs)"
  docker image prune -f >/dev/null 2>&1 || true
fi

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
# .complete holds what the wheelhouse was filled for: a warm machine whose list is older gets
# what is missing (pip download skips the files already there)
DS_CPU="0.16.9 0.17.6 0.19.7 0.19.8"  # 0.19.6+ for torch 2.12+ (C++20 headers): the CPU DeepSpeed tests
WHEELS_KEY="torch==2.13.0 deepspeed $DS_CPU"
if [ "$(cat "$WHEELS/.complete" 2>/dev/null)" != "$WHEELS_KEY" ]; then
  log "filling the wheelhouse $WHEELS"
  mkdir -p "$WHEELS"
  plat=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform linux_x86_64 --platform any)
  python3 -m pip download -q -d "$WHEELS" "${plat[@]}" torch==2.13.0 numpy >&2
  # DeepSpeed is an sdist only; its build needs setuptools/wheel from the wheelhouse too
  python3 -m pip download -q -d "$WHEELS" "${plat[@]}" setuptools wheel \
    hjson ninja packaging psutil py-cpuinfo 'pydantic>=2' msgpack tqdm einops >&2
  for ds in $DS_CPU; do
    python3 -m pip download -q -d "$WHEELS" --no-deps --no-binary=:all: "deepspeed==$ds" >&2
  done
  echo "$WHEELS_KEY" > "$WHEELS/.complete"
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

# --- Apptainer and docker buildx (issue 28) -------------------------------------------------
# Apptainer is not packaged for Debian 12; Debian sid's 1.4.x runs here as an unprivileged user
# in a container with SYS_ADMIN, no seccomp/AppArmor profile and /dev/fuse (a root user or a
# chroot is refused: docs in ../shared/MACHINE.md). An image of debootstrapped sid with apptainer,
# squashfs-tools and squashfuse is cached as a tarball under $CACHE like the other bases; the
# `apptainer` wrapper below runs it. Debian sid's docker-buildx plugin binary (from its .deb,
# downloaded in that image: the host's apt sources stay untouched) goes into a DOCKER_CONFIG
# cli-plugins folder so `docker buildx` uses the engine's built-in BuildKit.
APPTAINER_TAG=envbuilder-test/apptainer:sid
APPTAINER_BIN=$STATE/apptainer-bin
EB_DOCKER_CONFIG=$STATE/docker-config
apptainer_services() {
  local tarball=$CACHE/sid-apptainer-rootfs.tar plugin=$CACHE/docker-buildx
  if ! docker image inspect "$APPTAINER_TAG" >/dev/null 2>&1 || [ ! -s "$plugin" ]; then
    if [ ! -s "$tarball" ] || [ ! -s "$plugin" ]; then
      local root cid
      root=$(mktemp -d "$STATE/rootfs.XXXXXX")
      log "debootstrap sid from $mirror (for apptainer)"
      debootstrap --variant=minbase sid "$root" "$mirror" >"$STATE/debootstrap-sid.log" 2>&1 \
        || { tail -20 "$STATE/debootstrap-sid.log" >&2; rm -rf "$root"; exit 1; }
      rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
      tar -C "$root" -c . | docker import - envbuilder-test/sid-minbase:tmp >/dev/null
      rm -rf "$root"
      log "apt-get install apptainer squashfs-tools squashfuse in the sid image"
      mkdir -p "$STATE/buildx-deb"
      cid=$(docker create -v "$STATE/buildx-deb:/out" envbuilder-test/sid-minbase:tmp sh -euc '
        export DEBIAN_FRONTEND=noninteractive
        apt-get -qq -o Acquire::Check-Valid-Until=false update
        apt-get -qq install -y --no-install-recommends apptainer squashfs-tools squashfuse fuse3 uidmap ca-certificates >/dev/null
        cd /out && apt-get -qq download docker-buildx && dpkg -x docker-buildx_*.deb x \
          && cp x/usr/libexec/docker/cli-plugins/docker-buildx /out/docker-buildx && rm -rf x ./*.deb
        useradd -m -u 1000 -s /bin/bash eb
        echo eb:100000:65536 >/etc/subuid; echo eb:100000:65536 >/etc/subgid
        apt-get clean; rm -rf /var/lib/apt/lists/*')
      docker start -a "$cid" >"$STATE/apptainer-image.log" 2>&1 \
        || { tail -20 "$STATE/apptainer-image.log" >&2; docker rm -f "$cid" >/dev/null; exit 1; }
      docker export "$cid" >"$tarball.tmp" && mv "$tarball.tmp" "$tarball"
      docker rm -f "$cid" >/dev/null; docker rmi envbuilder-test/sid-minbase:tmp >/dev/null
      cp "$STATE/buildx-deb/docker-buildx" "$plugin.tmp" && mv "$plugin.tmp" "$plugin"
      rm -rf "$STATE/buildx-deb"
    fi
    if ! docker image inspect "$APPTAINER_TAG" >/dev/null 2>&1; then
      log "docker import $APPTAINER_TAG"
      docker import "$tarball" "$APPTAINER_TAG" >/dev/null
    fi
  fi
  mkdir -p "$EB_DOCKER_CONFIG/cli-plugins" "$APPTAINER_BIN"
  install -m 0755 "$plugin" "$EB_DOCKER_CONFIG/cli-plugins/docker-buildx"
  [ -f "$HOME/.docker/config.json" ] && [ ! -e "$EB_DOCKER_CONFIG/config.json" ] \
    && cp "$HOME/.docker/config.json" "$EB_DOCKER_CONFIG/config.json"
  # the wrapper: apptainer ARGS in a container of $APPTAINER_TAG as uid 1000 (eb), each existing path
  # among ARGS and APPTAINER_BIND (or the folder of a path to be written; SRC of SRC:DEST) and the
  # working folder bind-mounted at the same place; APPTAINER_WRAPPER_BINDS adds more (space-separated). Files it writes belong to
  # uid 1000, so the folders it writes to must be writable by that user.
  cat >"$APPTAINER_BIN/apptainer.tmp" <<WRAPPER
#!/usr/bin/env bash
# apptainer in a container (scripts/test-services.sh, issue 28): Apptainer is not packaged for Debian 12
set -euo pipefail
binds=(-v "\$PWD:\$PWD")
for a in "\$@" \${APPTAINER_BIND:+\${APPTAINER_BIND//,/ }} \${APPTAINER_WRAPPER_BINDS:-}; do
  p=\${a#--*=}; p=\${p#*://}; p=\${p%%:*}  # --opt=PATH, docker-archive://PATH, SRC:DEST[:ro]
  case \$p in /*) ;; *) continue ;; esac
  if [ -e "\$p" ]; then binds+=(-v "\$p:\$p")
  elif [ -d "\$(dirname "\$p")" ]; then binds+=(-v "\$(dirname "\$p"):\$(dirname "\$p")"); fi
done
envs=()
for v in \$(env | sed -n 's/^\(APPTAINERENV_[A-Za-z0-9_]*\|APPTAINER_[A-Z_]*\)=.*/\1/p'); do
  case \$v in APPTAINER_WRAPPER_*) ;; *) envs+=(-e "\$v") ;; esac
done
tty=(); [ -t 0 ] && tty=(-t)
# root only to open the container's own /dev/fuse node to its user (the host's may be 0600), then
# apptainer runs as the unprivileged user eb (uid 1000): Apptainer refuses root in a container
exec docker run --rm -i "\${tty[@]}" --user 0:0 --cap-add SYS_ADMIN --security-opt seccomp=unconfined \\
  --security-opt apparmor=unconfined --security-opt systempaths=unconfined --device /dev/fuse --shm-size 2g -e HOME=/home/eb \\
  "\${envs[@]}" "\${binds[@]}" -w "\$PWD" $APPTAINER_TAG \\
  sh -c 'chmod 0666 /dev/fuse && exec setpriv --reuid=1000 --regid=1000 --init-groups -- apptainer "\$@"' apptainer "\$@"
WRAPPER
  chmod 0755 "$APPTAINER_BIN/apptainer.tmp" && mv "$APPTAINER_BIN/apptainer.tmp" "$APPTAINER_BIN/apptainer"
}
apptainer_services
# --- cosign (sign): Debian sid's cosign binary, from its .deb, through a private apt state
# (the host's apt sources and lists are not touched); cached under $CACHE/cosign ----------------
cosign_from_sid() {
  local dir=$CACHE/cosign sid=$CACHE/sid-apt
  [ -x "$dir/usr/bin/cosign" ] && return 0
  log "cosign from Debian sid's .deb (private apt state $sid)"
  mkdir -p "$sid/lists/partial" "$sid/cache/archives/partial" "$sid/deb"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" > "$sid/sid.list"
  local apt=(-o "Dir::Etc::SourceList=$sid/sid.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$sid/lists" -o "Dir::Cache=$sid/cache"
             -o Acquire::Check-Valid-Until=false -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  apt-get "${apt[@]}" -qq update >&2
  ( cd "$sid/deb" && rm -f cosign_*.deb && apt-get "${apt[@]}" -qq download cosign >&2 )
  rm -rf "$dir.tmp" && dpkg -x "$sid"/deb/cosign_*.deb "$dir.tmp"
  "$dir.tmp/usr/bin/cosign" version >/dev/null 2>&1 || { log "cosign from sid does not run"; exit 1; }
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
}
cosign_from_sid

echo "export DOCKER_HOST=unix://$SOCK"
echo "export ENVBUILDER_TEST_BASE_IMAGE=$BASE_TAG"
echo "export ENVBUILDER_TEST_WHEELHOUSE=$WHEELS"
echo "export ENVBUILDER_TEST_BASE_IMAGE_13=$BASE_TAG_13"
echo "export ENVBUILDER_TEST_CACHE=$CACHE"
echo "export ENVBUILDER_TEST_STATE=$STATE"
echo "export ENVBUILDER_TEST_CUDA_WHEELS_PID=$(cat "$STATE/cuda-wheels.pid" 2>/dev/null || true)"
echo "export PATH=$APPTAINER_BIN:\$PATH"
echo "export DOCKER_CONFIG=$EB_DOCKER_CONFIG"
echo "export ENVBUILDER_TEST_APPTAINER_IMAGE=$APPTAINER_TAG"
echo "export PATH=$CACHE/cosign/usr/bin:\$PATH"
