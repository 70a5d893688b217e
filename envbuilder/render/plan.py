"""The format-neutral build plan: one description that the Dockerfile and the Apptainer
definition are two views of.

A plan says which images to start from, which OS packages and Python to install, which Python
packages go into which layer (torch first, then Horovod, then DeepSpeed, so bumping DeepSpeed
never rebuilds torch), the environment, the labels, the files to copy and the smoke command.
Everything in it is validated data: templates only format it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from packaging.version import Version

from envbuilder import labels as image_labels
from envbuilder.core import validate
from envbuilder.errors import InputError
from envbuilder.core.resolve import PYPI, Stack

VENV = "/opt/venv"
HOME = "/opt/envbuilder"
USER = "envbuilder"
UID = 1000

# Defaults a user overrides with `docker run -e` / `apptainer --env`: the Dockerfile sets them
# with ENV, Apptainer's %environment with ${VAR:-default}. NCCL_SOCKET_IFNAME and
# GLOO_SOCKET_IFNAME are chosen at container start by files/nccl-defaults.sh (exclude docker0,
# lo and veth when another interface exists; use lo when it is the only one).
RUNTIME_ENV: dict[str, str] = {
    "NCCL_DEBUG": "WARN",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


LAYER_BUILD_DEPS: dict[str, tuple[str, ...]] = {
    # what each compiled layer's setup.py imports while building (no build isolation: they
    # import torch, which must come from the torch layer, not a fresh build environment)
    # Horovod's setup.py adds cffi>=1.4.0 to its requirements at build time (PyTorch support);
    # its sdist metadata lists none, so they are named here for offline wheelhouses too
    "horovod": ("setuptools", "wheel", "packaging", "cmake", "psutil", "pyyaml", "cloudpickle",
                "cffi>=1.4.0"),
    "deepspeed": ("setuptools", "wheel", "packaging", "ninja", "py-cpuinfo", "psutil"),
}


@dataclass(frozen=True)
class PipLayer:
    """One group of Python packages installed in its own stage and layer."""

    name: str  # torch | horovod | deepspeed | team (a project's own requirements, last)
    requirements: tuple[str, ...]  # PEP 508 lines, e.g. "torch==2.5.1"
    index_url: str | None  # None: the PIP_INDEX_URL build argument
    extra_index_url: bool = True  # also look at PIP_INDEX_URL (deps not on the torch index)
    build_env: Mapping[str, str] = field(default_factory=dict)
    no_build_isolation: bool = False  # builds that import torch (Horovod, DeepSpeed)
    extra_build: tuple[str, ...] = ()  # more build requirements (e.g. the NCCL wheel Horovod links)
    pre_install: tuple[str, ...] = ()  # shell lines between the build requirements and the build

    @property
    def build_requirements(self) -> tuple[str, ...]:
        """What the layer's build imports or links, installed before it (compiled layers)."""
        return LAYER_BUILD_DEPS.get(self.name, ()) + self.extra_build

    @property
    def stage(self) -> str:
        return f"layer-{self.name}"

    @property
    def file(self) -> str:
        return f"requirements/{self.name}.txt"


@dataclass(frozen=True)
class BuilderSetup:
    """What the builder stage installs to compile (Horovod, DeepSpeed ops) beyond Python."""

    apt_components: tuple[str, ...] = ()  # enabled on the OS's apt sources (builder only): non-free
    pip_toolkit: tuple[str, ...] = ()  # NVIDIA's CUDA 13 wheels, installed into PIP_TOOLKIT_DIR
    cuda_home: str | None = None
    gcc: int | None = None  # host GCC major given to nvcc and the C++ compiles
    cc: str | None = None  # gcc-11 when it is not the OS default
    cxx: str | None = None
    cpu_isa: str | None = None  # -march for compiled CPU code (DeepSpeed CPU ops)
    cpu_simd: str | None = None


# The RDMA user space NCCL's IB transport opens (libibverbs.so.1, librdmacm.so.1, the verbs
# providers that drive the HCA) and ibv_devinfo, from the OS's own rdma-core packages. The
# -utils packages are named so that the library packages come as their dependencies under the
# names each release gives them (librdmacm1 on Debian 12, librdmacm1t64 on Ubuntu 24.04).
# https://packages.debian.org/bookworm/ibverbs-providers
# https://packages.debian.org/bookworm/ibverbs-utils  https://packages.debian.org/bookworm/rdmacm-utils
# https://packages.ubuntu.com/noble/rdmacm-utils
RDMA_APT = ("ibverbs-providers", "ibverbs-utils", "rdmacm-utils")
# EFA (--fabric efa): libfabric from the OS (its efa provider) and AWS's OFI NCCL plugin, built
# in the builder stage from its pinned, checksummed release tarball
# https://github.com/aws/aws-ofi-nccl/releases/tag/v1.20.0 (sha256 as NixOS/nixpkgs
# pkgs/by-name/aw/aws-ofi-nccl/package.nix records it); https://packages.debian.org/bookworm/libfabric1
EFA_APT_RUNTIME = ("libfabric1", "libhwloc15")
EFA_APT_BUILD = ("libfabric-dev", "libhwloc-dev", "curl", "build-essential")
OFI_NCCL_VERSION = "1.20.0"
OFI_NCCL_URL = (f"https://github.com/aws/aws-ofi-nccl/releases/download/v{OFI_NCCL_VERSION}/"
                f"aws-ofi-nccl-{OFI_NCCL_VERSION}.tar.gz")
OFI_NCCL_SHA256 = "2f723c4af5fc1fa4b3efd2025822b31b3af0c340f75a312a37e932b77b824250"
OFI_NCCL_PREFIX = "/opt/amazon/ofi-nccl"
PIP_TOOLKIT_DIR = "/opt/cuda-pip"
TEAM_LAYER = "team"  # the layer of a project's own requirements (envbuilder.toml), always last
CXX_WRAPPER = "/usr/local/libexec/envbuilder/c++"  # files/cxx-isa.sh in the builder stage only
DEFAULT_CPU_ISA = "x86-64-v3"


@dataclass(frozen=True)
class BuildPlan:
    target: str
    stack: Stack
    builder_image: str
    runtime_image: str
    os_family: str
    python: str
    python_apt: tuple[str, ...]  # runtime apt packages for Python
    builder_apt: tuple[str, ...]  # builder apt packages (Python dev, compilers, CUDA toolkit)
    ppa: str | None  # e.g. ppa:deadsnakes/ppa
    layers: tuple[PipLayer, ...]
    env: Mapping[str, str]
    labels: Mapping[str, str]
    wheelhouse: bool = False  # install offline from wheels/ in the build context
    hashes: bool = False  # requirements files carry hashes: --require-hashes
    pip_index_url: str = PYPI
    extra_index_urls: tuple[str, ...] = ()
    venv: str = VENV
    home: str = HOME
    user: str = USER
    uid: int = UID
    smoke_nproc: int = 12
    builder: BuilderSetup = field(default_factory=BuilderSetup)
    cuda_arch: tuple[str, ...] = ()  # TORCH_CUDA_ARCH_LIST entries compiled code is built for
    fabric: str = "none"  # the RDMA user space in the runtime stage: ib | efa | none

    @property
    def rdma_apt(self) -> tuple[str, ...]:
        """Runtime OS packages of the fabric (verbs, rdmacm, ibv_devinfo; + libfabric for EFA)."""
        if self.fabric == "none":
            return ()
        return RDMA_APT + (EFA_APT_RUNTIME if self.fabric == "efa" else ())

    @property
    def platform(self) -> str | None:
        """The image platform when it is not the default linux/amd64 (FROM --platform)."""
        p = self.stack.platform
        return None if p == "linux/amd64" else p

    @property
    def pip_index_default(self) -> str | None:
        """PIP_INDEX_URL's default in the rendered files: the index, unless it carries
        credentials; then none (the build argument must be given, and no file holds them)."""
        return None if validate.has_credentials(self.pip_index_url) else self.pip_index_url

    @property
    def index_build_args(self) -> dict[str, str]:
        """The build arguments that carry an index URL with credentials: PIP_INDEX_URL and
        PIP_EXTRA_INDEX_URL_<n> (the n-th --extra-index-url). ``envbuilder build`` passes
        them; the rendered files only name them."""
        out = {}
        if validate.has_credentials(self.pip_index_url):
            out["PIP_INDEX_URL"] = self.pip_index_url
        for i, u in enumerate(self.extra_index_urls, 1):
            if validate.has_credentials(u):
                out[f"PIP_EXTRA_INDEX_URL_{i}"] = u
        return out

    @property
    def extra_index_args(self) -> tuple[str, ...]:
        """Names of the PIP_EXTRA_INDEX_URL_<n> build arguments (declared, no default)."""
        return tuple(k for k in self.index_build_args if k != "PIP_INDEX_URL")

    @property
    def torch_layer(self) -> PipLayer:
        return self.layers[0]

    @property
    def extra_layers(self) -> tuple[PipLayer, ...]:
        return self.layers[1:]

    @property
    def site_packages(self) -> str:
        return f"{self.venv}/lib/python{self.python}/site-packages"

    @property
    def compiles(self) -> bool:
        return self.stack.compiles

    def requirements_in(self) -> str:
        lines = [f"# {self.target}: the top-level requirements envbuilder resolved",
                 f"# (lock them with: envbuilder lock {self.target})"]
        for layer in self.layers:
            lines += list(layer.requirements)
        return "\n".join(lines) + "\n"


def make_plan(stack: Stack, *, base_image: str | None = None, builder_image: str | None = None,
              pip_index_url: str | None = None, extra_index_urls: tuple[str, ...] = (),
              wheelhouse: bool = False, hashes: bool = False,
              labels: Mapping[str, str] | None = None, smoke_nproc: int = 12,
              cuda_arch: tuple[str, ...] | None = None, cpu_isa: str | None = None,
              team_requirements: tuple[str, ...] = ()) -> BuildPlan:
    """Turn a resolved stack and the build options into a plan.

    ``team_requirements`` (PEP 508 lines, validated by the caller) are a team's own packages:
    they get a layer of their own (``team``), installed after torch and the compiled layers
    with those layers' versions as constraints, so changing them rebuilds that layer only.

    ``base_image`` replaces the runtime base (and the builder when the builder is a plain OS
    image that installs its own toolkit, or nothing compiles); an nvidia/cuda devel builder is
    replaced only by ``builder_image``. ``cuda_arch`` narrows the CUDA architectures compiled
    code is built for (a subset of torch's own); ``cpu_isa`` is the -march of compiled CPU code.
    """
    if base_image is not None:
        validate.image_ref(base_image, "--base-image")
    if stack.ds_jit:
        _refuse_jit_without_nvcc(stack, base_image)
    if builder_image is not None:
        validate.image_ref(builder_image, "--builder-image")
    index = validate.url(pip_index_url, "--pip-index-url") if pip_index_url else PYPI
    extras = tuple(validate.url(u, "--extra-index-url") for u in extra_index_urls)

    m = stack.matrix
    os_py = stack.os.python.get(stack.python)
    if os_py is None:  # the resolver's os_python rule makes this unreachable
        raise InputError(f"{stack.os.name} cannot install Python {stack.python}")
    py = stack.python
    gpu = stack.toolkit is not None
    b = stack.builder
    arch = _narrow_arch(_arch_list(stack.torch_variant.arch), cuda_arch) if gpu else ()
    isa = m.toolchains.cpu_isas.get(cpu_isa or DEFAULT_CPU_ISA)
    if isa is None:
        raise InputError(f"--cpu-isa {cpu_isa!r} is not known{validate.suggest(cpu_isa or '', m.toolchains.cpu_isas)};"
                         f" known: {', '.join(m.toolchains.cpu_isas)}")

    builder_apt = [*os_py.packages, "ca-certificates"]
    setup = BuilderSetup()
    if b is not None:
        builder_apt += [f"python{py}-dev", "build-essential", "git"]
        cc = cxx = None
        if b.gcc is not None and not b.gcc_is_default:
            builder_apt += list(b.gcc_packages)
            cc, cxx = f"gcc-{b.gcc}", f"g++-{b.gcc}"
        tk = b.toolkit
        if tk is not None and tk.install == "apt":
            builder_apt += list(tk.packages)
        cpu_ops = any(not m.toolchains.deepspeed_ops[o].cuda for o in stack.ds_ops)
        setup = BuilderSetup(
            apt_components=tk.apt_components if tk is not None and tk.install == "apt" else (),
            pip_toolkit=tk.packages if tk is not None and tk.install == "pip" else (),
            cuda_home=b.cuda_home, gcc=b.gcc, cc=cc, cxx=cxx,
            cpu_isa=isa.name if cpu_ops else None, cpu_simd=isa.simd if cpu_ops else None)
    if stack.horovod is not None:
        builder_apt += ["cmake"]

    # numpy belongs with torch: torch.distributed's object collectives (all_gather_object,
    # broadcast_object_list) fail with "Numpy is not available" without it (found by the smoke
    # job). Wheels before torch 2.3 were built against NumPy 1.x and break under NumPy 2
    # (https://github.com/pytorch/pytorch/issues/107302, fixed for 2.3: https://github.com/pytorch/pytorch/releases/tag/v2.3.0).
    numpy = "numpy" if stack.torch.version >= Version("2.3") else "numpy<2"
    torch_req = [f"torch=={stack.torch.version}", numpy]
    torch_index = None if wheelhouse else stack.torch_index
    if torch_index == PYPI or torch_index == index:
        torch_index = None
    layers = [PipLayer("torch", tuple(torch_req), torch_index,
                       extra_index_url=torch_index is not None)]
    site = f"{VENV}/lib/python{py}/site-packages"
    compile_env = _compile_env(setup)
    if stack.horovod is not None:
        layers.append(_horovod_layer(stack, setup, compile_env, arch, site))
    if stack.deepspeed is not None:
        env = {"DS_BUILD_OPS": "0"}
        if stack.ds_ops:
            # DeepSpeed picks its accelerator at build time from the GPUs it sees: the builder
            # has none, so the CUDA op builders are chosen explicitly (else CPU ops are built)
            env["DS_ACCELERATOR"] = "cuda" if gpu else "cpu"
            env.update({m.toolchains.deepspeed_ops[o].env: "1" for o in stack.ds_ops})
            env.update(compile_env)
            if gpu:
                env["TORCH_CUDA_ARCH_LIST"] = ";".join(arch)
            if setup.cpu_isa:
                env.update({"ENVBUILDER_CPU_ISA": setup.cpu_isa, "ENVBUILDER_CPU_SIMD": setup.cpu_simd or "",
                            "ENVBUILDER_REAL_CXX": setup.cxx or "g++", "CXX": CXX_WRAPPER})
        pre: list[str] = []
        for tool in m.toolchains.build_tools:
            if tool.applies("deepspeed", stack.deepspeed.version) and (stack.ds_ops or not tool.hide_modules):
                env.update(tool.env)
                pre += _hide_modules(tool.hide_modules)
        if pre:
            env["PYTHONPATH"] = HIDE_DIR
        # with DS_ACCELERATOR=cuda DeepSpeed's setup.py adds nvidia-ml-py to its requirements
        # (its sdist metadata does not list it): named here so offline wheelhouses carry it
        extra = ("nvidia-ml-py",) if stack.ds_ops and gpu else ()
        layers.append(PipLayer("deepspeed", (f"deepspeed=={stack.deepspeed.version}",), None,
                               build_env=env, no_build_isolation=True, pre_install=tuple(pre),
                               extra_build=extra))
    if team_requirements or hashes:
        # a locked plan always has the top layer: it holds whatever the lock places above the
        # stack's layers (torch's small dependencies, the team's lines), so the stack layer
        # holds the same few big wheels with or without a team's requirements
        layers.append(PipLayer(TEAM_LAYER, tuple(team_requirements), None))
    for layer in layers:
        for k, v in layer.build_env.items():
            validate.env_pair(k, v, "build environment")

    runtime_env = dict(RUNTIME_ENV)
    if gpu:
        runtime_env.update(stack.base_flavour.env)
    if b is not None and b.image_kind == "devel":
        builder = builder_image or stack.builder_image
    else:
        builder = builder_image or base_image or stack.builder_image
    return BuildPlan(
        target=stack.target,
        stack=stack,
        builder_image=builder,
        runtime_image=base_image or stack.runtime_image,
        os_family=stack.os.family,
        python=py,
        python_apt=tuple(os_py.packages),
        builder_apt=tuple(dict.fromkeys(builder_apt)),
        ppa=os_py.ppa,
        layers=tuple(layers),
        env=runtime_env,
        labels=_labels(stack, labels or {}, base_image, setup=setup,
                       arch=arch if b is not None and b.nvcc is not None else ()),
        wheelhouse=wheelhouse,
        hashes=hashes,
        pip_index_url=index,
        extra_index_urls=extras,
        smoke_nproc=smoke_nproc,
        builder=setup,
        cuda_arch=tuple(arch),
        fabric=stack.fabric,
    )


def _refuse_jit_without_nvcc(stack: Stack, base_image: str | None) -> None:
    """--ds-ops none on CUDA leaves DeepSpeed's ops to JIT at the first optimizer step: the
    runtime must carry an nvcc of torch's CUDA (an nvidia/cuda devel image given with
    --base-image); envbuilder's runtime flavours carry none, so anything else is refused."""
    from envbuilder.errors import IncompatibleError

    tk = stack.toolkit
    assert tk is not None
    want = f"{tk.version.major}.{tk.version.minor}"
    ref = base_image or stack.runtime_image
    tag = ref.rsplit(":", 1)[-1] if ":" in ref.rsplit("/", 1)[-1] else ""
    if "devel" in tag.split("-") and tag.startswith(want):
        return
    raise IncompatibleError(
        f"--ds-ops none leaves DeepSpeed's ops (FusedAdam...) to be compiled at the first "
        f"optimizer step, and the runtime {ref} has no nvcc for CUDA {want}: drop --ds-ops none "
        f"(fused_adam,cpu_adam are pre-built by default) or give --base-image "
        f"nvidia/cuda:{want}.x-devel-<os>")


HIDE_DIR = "/tmp/envbuilder/hide"


def _hide_modules(names: tuple[str, ...]) -> list[str]:
    """Shell lines that make ``import NAME`` fail for the build step (PYTHONPATH=HIDE_DIR)."""
    out = []
    for name in names:
        out += [f"mkdir -p {HIDE_DIR}/{name}",
                f"echo 'raise ImportError(\"{name} is hidden from this build by envbuilder\")' "
                f"> {HIDE_DIR}/{name}/__init__.py"]
    return out


def _compile_env(setup: BuilderSetup) -> dict[str, str]:
    env: dict[str, str] = {}
    if setup.cuda_home:
        env["CUDA_HOME"] = setup.cuda_home
    if setup.cc and setup.cxx:
        # CC also becomes nvcc's -ccbin in torch.utils.cpp_extension; CMake reads CUDAHOSTCXX
        env.update({"CC": setup.cc, "CXX": setup.cxx, "CUDAHOSTCXX": setup.cxx})
    return env


def _horovod_layer(stack: Stack, setup: BuilderSetup, compile_env: dict[str, str],
                   arch: tuple[str, ...] | list[str], site: str) -> PipLayer:
    m = stack.matrix
    gpu = stack.toolkit is not None
    env = dict(m.horovod.build_env)
    hvd = stack.horovod
    assert hvd is not None
    env.setdefault("HOROVOD_WITH_PYTORCH", "1")
    env.update({"HOROVOD_WITHOUT_TENSORFLOW": "1", "HOROVOD_WITHOUT_MXNET": "1",
                "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1"})
    for tool in m.toolchains.build_tools:
        if tool.applies("horovod", hvd.version):
            env.update(tool.env)
    reqs = [f"horovod=={hvd.version}"]
    extra_build: list[str] = []
    pre: list[str] = []
    if not gpu:
        env.pop("HOROVOD_GPU_OPERATIONS", None)
    else:
        env.update(compile_env)
        tv = stack.torch_variant
        # link Horovod against the NCCL torch loads: the nvidia-nccl wheel in the venv (for torch
        # builds that link NCCL statically, the wheel of exactly that NCCL version)
        if tv.nccl_package is None and tv.nccl is not None and stack.toolkit is not None:
            extra_build.append(f"nvidia-nccl-cu{stack.toolkit.version.major}=={tv.nccl}")
        # the wheel ships only libnccl.so.2; Horovod's CMake looks for libnccl.so
        pre.append(f"ln -sf libnccl.so.2 {site}/nvidia/nccl/lib/libnccl.so")
        env.update({"HOROVOD_GPU_OPERATIONS": "NCCL", "HOROVOD_NCCL_HOME": f"{site}/nvidia/nccl",
                    "HOROVOD_NCCL_LINK": "SHARED"})
        if setup.cuda_home:
            env["HOROVOD_CUDA_HOME"] = setup.cuda_home
        if arch:
            env["HOROVOD_BUILD_CUDA_CC_LIST"] = ",".join(a.split("+")[0].replace(".", "") for a in arch)
    return PipLayer("horovod", tuple(reqs), None, build_env=env, no_build_isolation=True,
                    extra_build=tuple(extra_build), pre_install=tuple(pre))


def _narrow_arch(archs: list[str], want: tuple[str, ...] | None) -> tuple[str, ...]:
    if not want:
        return tuple(archs)
    bare = {a.split("+")[0]: a for a in archs}
    out = []
    for w in want:
        key = w.replace("sm_", "").replace("compute_", "")
        key = key if "." in key else (f"{key[:-1]}.{key[-1]}" if key.isdigit() and len(key) >= 2 else key)
        if key not in bare:
            raise InputError(f"--cuda-arch {w[:20]!r}: torch {'' if not archs else 'was built for ' + ', '.join(bare)}"
                             f"; choose among those (e.g. --cuda-arch 8.0,9.0)")
        out.append(bare[key])
    return tuple(dict.fromkeys(out))


def _arch_list(arch: tuple[str, ...]) -> list[str]:
    """torch's sm_86 / compute_90 names -> TORCH_CUDA_ARCH_LIST entries 8.6 / 9.0+PTX."""
    out = []
    for a in arch:
        kind, num = a.split("_", 1)
        digits = "".join(ch for ch in num if ch.isdigit())
        suffix = num[len(digits):]
        v = f"{digits[:-1]}.{digits[-1]}{suffix}"
        out.append(v + "+PTX" if kind == "compute" else v)
    return out or ["7.0", "8.0", "9.0"]


def _labels(stack: Stack, extra: Mapping[str, str], base_image: str | None = None, *,
            setup: BuilderSetup | None = None, arch: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
    return image_labels.write(stack, extra, base_image, cuda_arch_list=";".join(arch) or None,
                              cpu_isa=setup.cpu_isa if setup else None)
