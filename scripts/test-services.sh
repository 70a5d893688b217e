#!/usr/bin/env bash
# Installs and starts what the test suite needs, on a fresh Debian 12 machine or again on a
# prepared one (every step is idempotent):
#   - the suite's one Docker engine: Debian sid's docker.io (28.5, the containerd image store and
#     its BuildKit) with sid's containerd and Debian 12's runc, and sid's docker buildx plugin,
#     started by hand (no systemd here) on its own socket and a bridge of its own (issue 42:
#     bit-for-bit reproducible builds need BuildKit 0.13+ and the containerd image store)
#   - debootstrap + Debian's docker-registry + htpasswd, for a local base image and OCI registry
#   - Debian's prometheus (promtool), prometheus-pushgateway and prometheus-node-exporter
#   - Debian 12 and 13 base images, imported from debootstrap roots (no registry can be pulled from)
#   - CUDA wheelhouses (torch's PyPI CUDA builds with their nvidia-* wheels, Horovod and DeepSpeed
#     sdists) for the CUDA image tests, kept between runs
#   - a wheelhouse with torch 2.13.0 (CPU) and the smoke job's / DeepSpeed's dependencies
# Prints the environment to export (DOCKER_HOST, ENVBUILDER_TEST_*) on stdout, last.
#
# Where things live (each can be set, so a second instance never collides with a running one):
#   ENVBUILDER_TEST_STATE   the engine's socket, data root, exec root, pidfile, config, bridge-bound
#                           state (default /var/tmp/envbuilder-test)
#   ENVBUILDER_TEST_CACHE   downloads and base tarballs kept between runs (default ~/.cache/envbuilder-test)
#   ENVBUILDER_TEST_BRIDGE, ENVBUILDER_TEST_BRIDGE_CIDR, ENVBUILDER_TEST_ADDRESS_POOL: the engine's
#                           own bridge (never "none": a dockerd given no bridge deletes the host's
#                           docker0) and the pool its networks come from
#   ENVBUILDER_TEST_ENGINE_IPTABLES=0: the engine leaves iptables alone (a second engine beside
#                           another one's chains); this script then adds NAT and forwarding for its
#                           bridge's subnet itself
set -euo pipefail

STATE=${ENVBUILDER_TEST_STATE:-/var/tmp/envbuilder-test}
CACHE=${ENVBUILDER_TEST_CACHE:-$HOME/.cache/envbuilder-test}
SOCK=$STATE/docker.sock
BASE_TAG=envbuilder-test/debian:12
BASE_TAG_13=envbuilder-test/debian:13
BRIDGE=${ENVBUILDER_TEST_BRIDGE:-ebtest0}
BRIDGE_CIDR=${ENVBUILDER_TEST_BRIDGE_CIDR:-10.211.0.1/24}
ADDRESS_POOL=${ENVBUILDER_TEST_ADDRESS_POOL:-10.212.0.0/16}
ENGINE_IPTABLES=${ENVBUILDER_TEST_ENGINE_IPTABLES:-1}
# the engine's packages, from Debian sid (measured on Debian 12: shared/MACHINE.md); sid keeps
# only its newest versions, so when these are gone the newest are taken (and logged)
ENGINE_DEBS=(docker.io=28.5.2+dfsg4-5 containerd=2.1.9+ds1-5 docker-buildx=0.29.1+ds1-4)
mkdir -p "$STATE" "$CACHE"
log() { echo "[test-services] $*" >&2; }

need_pkgs=()
command -v runc >/dev/null || need_pkgs+=(runc)  # Debian 12's 1.1.5: sid's needs glibc 2.38
command -v iptables >/dev/null || need_pkgs+=(iptables)
command -v tini-static >/dev/null || need_pkgs+=(tini)  # docker-init (docker run --init)
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

mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

# Debian sid's packages through a private apt state (the host's apt sources and lists are not
# touched): the engine's and cosign's .debs, unpacked under $CACHE
SID=$CACHE/sid-apt
sid_apt() {  # sid_apt ARGS...: apt-get with the private sid state
  mkdir -p "$SID/lists/partial" "$SID/cache/archives/partial" "$SID/deb"
  [ -f "$SID/sid.list" ] || echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" > "$SID/sid.list"
  apt-get -o "Dir::Etc::SourceList=$SID/sid.list" -o Dir::Etc::SourceParts=/dev/null \
    -o "Dir::State::Lists=$SID/lists" -o "Dir::Cache=$SID/cache" \
    -o Acquire::Check-Valid-Until=false -o Debug::NoLocking=1 -o APT::Sandbox::User=root "$@"
}
sid_unpack() {  # sid_unpack DIR PKG=VERSION...: the packages' files under DIR (kept between runs)
  local dir=$1; shift
  [ -f "$dir/.complete" ] && return 0
  log "Debian sid's $* (private apt state $SID)"
  sid_apt -qq update >&2
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/deb"
  if ! ( cd "$dir.tmp/deb" && sid_apt -qq download "$@" >&2 ); then
    log "those versions are gone from sid: taking its newest ${*%%=*}"
    rm -f "$dir.tmp"/deb/*.deb
    ( cd "$dir.tmp/deb" && sid_apt -qq download "${@%%=*}" >&2 )
  fi
  for d in "$dir.tmp"/deb/*.deb; do dpkg -x "$d" "$dir.tmp/root"; done
  ls "$dir.tmp/deb" > "$dir.tmp/.complete"
  rm -rf "$dir.tmp/deb" "$dir" && mv "$dir.tmp" "$dir"
}

# --- the Docker engine -------------------------------------------------------------------
ENGINE=$CACHE/sid-engine
sid_unpack "$ENGINE" "${ENGINE_DEBS[@]}"
# dockerd finds its containerd, shim, docker-proxy, runc and docker-init on its PATH: $STATE/bin
mkdir -p "$STATE/bin"
for b in usr/sbin/dockerd usr/sbin/docker-proxy usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/bin/ctr; do
  ln -sfn "$ENGINE/root/$b" "$STATE/bin/"
done
ln -sfn "$(command -v runc)" "$STATE/bin/runc"
ln -sfn "$(command -v tini-static)" "$STATE/bin/docker-init"
EB_DOCKER_CONFIG=$STATE/docker-config
mkdir -p "$EB_DOCKER_CONFIG/cli-plugins"
install -m 0755 "$ENGINE/root/usr/libexec/docker/cli-plugins/docker-buildx" "$EB_DOCKER_CONFIG/cli-plugins/docker-buildx"
[ -f "$HOME/.docker/config.json" ] && [ ! -e "$EB_DOCKER_CONFIG/config.json" ] \
  && cp "$HOME/.docker/config.json" "$EB_DOCKER_CONFIG/config.json"
if ! command -v docker >/dev/null; then  # the CLI (a fresh machine has one in /usr/local/bin)
  sid_unpack "$CACHE/sid-docker-cli" docker-cli
  ln -sfn "$CACHE/sid-docker-cli/root/usr/bin/docker" "$STATE/bin/docker"
fi
export PATH=$STATE/bin:$PATH DOCKER_CONFIG=$EB_DOCKER_CONFIG

if DOCKER_HOST=unix://$SOCK docker info >/dev/null 2>&1; then
  # an engine of another kind there (an older suite's: Debian 12's dockerd 20.10) is not taken
  if ! DOCKER_HOST=unix://$SOCK docker info --format '{{json .DriverStatus}}' | grep -q io.containerd.snapshotter; then
    log "the engine answering at $SOCK ($(DOCKER_HOST=unix://$SOCK docker version --format '{{.Server.Version}}' 2>/dev/null)) has no containerd image store: it is not the suite's; stop it (kill \$(cat $STATE/docker.pid)) and run this again, or set ENVBUILDER_TEST_STATE to another folder"
    exit 1
  fi
else
  log "starting dockerd ($(tr '\n' ' ' < "$ENGINE/.complete")) on $SOCK (bridge $BRIDGE $BRIDGE_CIDR)"
  if [ -f "$STATE/docker.pid" ] && kill -0 "$(cat "$STATE/docker.pid")" 2>/dev/null; then
    kill "$(cat "$STATE/docker.pid")" || true; sleep 2
  fi
  rm -f "$SOCK" "$STATE/docker.pid"
  mkdir -p "$STATE/data" "$STATE/exec"
  # the data root ($STATE/data: the suite's engine's, kept between runs) may hold an older
  # suite's legacy store (Debian 12's dockerd 20.10: overlay2/, image/): this engine cannot use
  # it, and both do not fit on the disk, so it goes (the suite's own state; its images are
  # built again)
  if [ ! -e "$STATE/data/.containerd-store" ] && [ -n "$(ls -A "$STATE/data" 2>/dev/null)" ]; then
    log "removing the legacy engine's store from $STATE/data (this engine uses the containerd image store)"
    find "$STATE/data" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  fi
  touch "$STATE/data/.containerd-store"
  # a bridge of its own: never "none" (dockerd then deletes the host's docker0) and never
  # another engine's docker0
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
  iptables_json=true
  if [ "$ENGINE_IPTABLES" = 0 ]; then
    iptables_json=false
    net=$(ip -4 route show dev "$BRIDGE" proto kernel | awk '{print $1; exit}')
    iptables -t nat -C POSTROUTING -s "$net" ! -o "$BRIDGE" -j MASQUERADE 2>/dev/null \
      || iptables -t nat -A POSTROUTING -s "$net" ! -o "$BRIDGE" -j MASQUERADE
    iptables -C FORWARD -i "$BRIDGE" -j ACCEPT 2>/dev/null || iptables -I FORWARD 1 -i "$BRIDGE" -j ACCEPT
    iptables -C FORWARD -o "$BRIDGE" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT 2>/dev/null \
      || iptables -I FORWARD 1 -o "$BRIDGE" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
  fi
  # the containerd image store keeps BuildKit's compressed layers (the pushed digest is the
  # built one); BuildKit's cache is bounded by its own garbage collection
  cat >"$STATE/daemon.json" <<JSON
{"features": {"containerd-snapshotter": true},
 "bridge": "$BRIDGE", "iptables": $iptables_json, "ip6tables": false,
 "default-address-pools": [{"base": "$ADDRESS_POOL", "size": 24}],
 "builder": {"gc": {"enabled": true, "defaultKeepStorage": "${ENVBUILDER_TEST_BUILD_CACHE_GB:-5}GB"}}}
JSON
  setsid dockerd --config-file "$STATE/daemon.json" --data-root "$STATE/data" \
    --exec-root "$STATE/exec" -H "unix://$SOCK" --pidfile "$STATE/docker.pid" \
    >"$STATE/dockerd.log" 2>&1 < /dev/null &
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
# BuildKit's cache (the stages of earlier builds) is kept to its gc's budget (daemon.json); the
# untagged images are what the legacy builder's test builds left. Over the image budget, or
# with the disk nearly full, both go and the next run builds those stages again.
# BuildKit's gc applies its budget only after a build, and a CUDA build's stages (~15 GB) are
# left over its budget when the run ends: the budget holds from the start of every run too
docker builder prune -f --max-used-space "${ENVBUILDER_TEST_BUILD_CACHE_GB:-5}gb" >/dev/null 2>&1 || true
budget_gb=${ENVBUILDER_TEST_IMAGE_BUDGET_GB:-60}
min_free_gb=${ENVBUILDER_TEST_MIN_FREE_GB:-15}
images_gb=$(docker system df --format '{{.Type}} {{.Size}}' 2>/dev/null | awk '
  $1 == "Images" { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-zA-Z]+$/, "", v)
                   f = (u == "TB") ? 1024 : (u == "GB") ? 1 : (u == "MB") ? 1 / 1024 : 0
                   printf "%d", v * f }')
free_gb=$(df -P -k "$STATE/data" 2>/dev/null | awk 'NR == 2 {printf "%d", $4 / 1048576}')
if [ "${images_gb:-0}" -gt "$budget_gb" ] || [ "${free_gb:-999}" -lt "$min_free_gb" ]; then
  log "images ${images_gb:-?} GB (budget ${budget_gb}, ENVBUILDER_TEST_IMAGE_BUDGET_GB), ${free_gb:-?} GB free (at least ${min_free_gb}, ENVBUILDER_TEST_MIN_FREE_GB): pruning the untagged images and BuildKit's cache"
  docker image prune -f >/dev/null 2>&1 || true
  docker builder prune -af >/dev/null 2>&1 || true
fi

# --- Debian 12 and 13 base images ---------------------------------------------------------
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

# --- Apptainer (issue 28) -------------------------------------------------------------------
# Apptainer is not packaged for Debian 12; Debian sid's 1.4.x runs here as an unprivileged user
# in a container with SYS_ADMIN, no seccomp/AppArmor profile and /dev/fuse (a root user or a
# chroot is refused: docs in ../shared/MACHINE.md). An image of debootstrapped sid with apptainer,
# squashfs-tools and squashfuse is cached as a tarball under $CACHE like the other bases; the
# `apptainer` wrapper below runs it. (docker buildx comes with the engine's packages, above.)
APPTAINER_TAG=envbuilder-test/apptainer:sid
APPTAINER_BIN=$STATE/apptainer-bin
apptainer_services() {
  local tarball=$CACHE/sid-apptainer-rootfs.tar
  if ! docker image inspect "$APPTAINER_TAG" >/dev/null 2>&1; then
    if [ ! -s "$tarball" ]; then
      local root cid
      root=$(mktemp -d "$STATE/rootfs.XXXXXX")
      log "debootstrap sid from $mirror (for apptainer)"
      debootstrap --variant=minbase sid "$root" "$mirror" >"$STATE/debootstrap-sid.log" 2>&1 \
        || { tail -20 "$STATE/debootstrap-sid.log" >&2; rm -rf "$root"; exit 1; }
      rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
      tar -C "$root" -c . | docker import - envbuilder-test/sid-minbase:tmp >/dev/null
      rm -rf "$root"
      log "apt-get install apptainer squashfs-tools squashfuse in the sid image"
      cid=$(docker create envbuilder-test/sid-minbase:tmp sh -euc '
        export DEBIAN_FRONTEND=noninteractive
        apt-get -qq -o Acquire::Check-Valid-Until=false update
        apt-get -qq install -y --no-install-recommends apptainer squashfs-tools squashfuse fuse3 uidmap ca-certificates >/dev/null
        useradd -m -u 1000 -s /bin/bash eb
        echo eb:100000:65536 >/etc/subuid; echo eb:100000:65536 >/etc/subgid
        apt-get clean; rm -rf /var/lib/apt/lists/*')
      docker start -a "$cid" >"$STATE/apptainer-image.log" 2>&1 \
        || { tail -20 "$STATE/apptainer-image.log" >&2; docker rm -f "$cid" >/dev/null; exit 1; }
      docker export "$cid" >"$tarball.tmp" && mv "$tarball.tmp" "$tarball"
      docker rm -f "$cid" >/dev/null; docker rmi envbuilder-test/sid-minbase:tmp >/dev/null
    fi
    if ! docker image inspect "$APPTAINER_TAG" >/dev/null 2>&1; then
      log "docker import $APPTAINER_TAG"
      docker import "$tarball" "$APPTAINER_TAG" >/dev/null
    fi
  fi
  mkdir -p "$APPTAINER_BIN"
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
for v in \$(env | sed -n 's/^\(APPTAINERENV_[A-Za-z0-9_]*\|APPTAINER_[A-Z_]*\|SOURCE_DATE_EPOCH\)=.*/\1/p'); do
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
echo "export ENVBUILDER_TEST_DOCKER_HOST=unix://$SOCK"
echo "export PATH=$STATE/bin:\$PATH"  # the engine's dockerd, containerd and runc (a test's own engine too)
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
