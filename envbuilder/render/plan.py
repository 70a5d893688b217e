"""The format-neutral build plan: one description that the Dockerfile and the Apptainer
definition are two views of.

A plan says which images to start from, which OS packages and Python to install, which Python
packages go into which layer (one per component, in the registry's order: torch first, so
bumping a later component never rebuilds torch), the environment, the labels, the files to copy
and the smoke command. What each component needs is its own module's (envbuilder.components);
``make_plan`` loops over them. Everything in it is validated data: templates only format it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from envbuilder import labels as image_labels
from envbuilder.components import os_packages, registry
from envbuilder.components.base import CXX_WRAPPER, HOME, VENV, BuilderSetup, Component, PipLayer, PlanContext
from envbuilder.components.fabric import (EFA_APT_BUILD, EFA_APT_RUNTIME, OFI_NCCL_PREFIX, OFI_NCCL_SHA256,
                                          OFI_NCCL_URL, RDMA_APT)
from envbuilder.components.team import LAYER as TEAM_LAYER
from envbuilder.components.team_compiled import LAYER as TEAM_COMPILED_LAYER
from envbuilder.core import validate
from envbuilder.errors import InputError
from envbuilder.core.matrix import CpuIsa, OsPython
from envbuilder.core.resolve import PYPI, Stack
from envbuilder.core.spec import TargetSpec

__all__ = ["BuildPlan", "BuilderSetup", "Pinned", "PipLayer", "PlanOptions", "make_plan", "stack_epoch", "CXX_WRAPPER", "EFA_APT_BUILD",
           "EFA_APT_RUNTIME", "OFI_NCCL_PREFIX", "OFI_NCCL_SHA256", "OFI_NCCL_URL", "RDMA_APT", "TEAM_LAYER",
           "TEAM_COMPILED_LAYER"]
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


PIP_TOOLKIT_DIR = "/opt/cuda-pip"
DEFAULT_CPU_ISA = "x86-64-v3"
CONSTRAINTS_FILE = f"{HOME}/constraints.txt"  # a locked image's pins: PIP_CONSTRAINT


@dataclass(frozen=True)
class BuildPlan:
    target: str
    stack: Stack
    builder_image: str
    runtime_image: str
    os_family: str
    python: str
    python_apt: tuple[str, ...]  # runtime OS packages for Python (the OS's package manager's names)
    builder_apt: tuple[str, ...]  # builder OS packages (Python dev, compilers, CUDA toolkit)
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
    # ranks of the single-host smoke job (build, smoke/run.sh): one node of the layouts
    host_ranks: int | None = None
    builder: BuilderSetup = field(default_factory=BuilderSetup)
    cuda_arch: tuple[str, ...] = ()  # TORCH_CUDA_ARCH_LIST entries compiled code is built for
    fabric: str = "none"  # the RDMA user space in the runtime stage: ib | efa | none
    compiled_packages: tuple[str, ...] = ()  # the team's packages compiled against torch (canonical)
    # reproducible builds: the date of every file and of the image (a lock's, else the stack's:
    # stack_epoch), and with a lock's system pins the images by digest (stage -> NAME@sha256:...)
    # and each stage's apt packages by version (stage -> name -> version)
    source_date_epoch: int = 0
    image_digests: Mapping[str, str] = field(default_factory=dict)
    apt_pins: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    apt_snapshot: os_packages.Snapshot | None = None  # --apt-snapshot: the mirror as of a date

    @property
    def host_nproc(self) -> int:
        """Ranks the smoke job starts on one host: the layouts' GPUs per node, else the world."""
        return self.host_ranks or self.smoke_nproc

    @property
    def rdma_apt(self) -> tuple[str, ...]:
        """Runtime OS packages of the components (the fabric's verbs, rdmacm, ibv_devinfo; +
        libfabric for EFA), for the OS's package manager."""
        return tuple(p for c in registry.active(self.stack) for p in c.runtime_apt(self.stack))

    @property
    def package_manager(self) -> os_packages.PackageManager:
        """How both stages install OS packages and trust CA certificates: apt or dnf."""
        return os_packages.of(self.stack.os)

    @property
    def ca_bundle(self) -> str:
        """The OS's CA bundle (pip's PIP_CERT)."""
        return self.package_manager.ca_bundle

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
        return self.stack.compiles or any(la.name == TEAM_COMPILED_LAYER for la in self.layers)

    def requirements_in(self) -> str:
        lines = [f"# {self.target}: the top-level requirements envbuilder resolved",
                 f"# (lock them with: envbuilder lock {self.target})"]
        for layer in self.layers:
            lines += list(layer.requirements)
        return "\n".join(lines) + "\n"


def stack_epoch(stack: Stack) -> int:
    """The newest release date among the stack's torch, NCCL and CUDA toolkit (the matrix's
    ``released:``), as SOURCE_DATE_EPOCH: an unlocked build's date (a lock keeps its own,
    lock.system); 0 when the matrix dates none of them. Not the components layered on top
    (DeepSpeed, Horovod): every layer is dated by it, so a component's bump would change the
    bits of, and rebuild, the torch layer below it."""
    from datetime import datetime

    layered = set(stack.matrix.component_names)
    epochs = []
    for key, rel in stack.assignment.items():
        if key in layered:
            continue
        d = getattr(rel, "released", None)
        if isinstance(d, str) and d:
            try:
                epochs.append(int(datetime.fromisoformat(d.replace("Z", "+00:00")).timestamp()))
            except ValueError:
                continue
    return max(epochs, default=0)


@dataclass(frozen=True)
class Pinned:
    """What a lock pins beyond Python, for the plan (lock.system, as plain data): the date,
    the images by digest (stage -> NAME@sha256:...), each stage's apt packages (stage -> name
    -> version), and ``--apt-snapshot``'s archive root with the date it reads."""

    source_date_epoch: int | None = None
    image_digests: Mapping[str, str] = field(default_factory=dict)
    apt_pins: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    apt_snapshot: str | None = None
    snapshot_date: str | None = None  # YYYYMMDDTHHMMSSZ


@dataclass(frozen=True)
class PlanOptions:
    """What a plan is made with besides its stack: the spec's build options (``spec``, checked
    when the spec was made: core.spec.TargetSpec; ``PlanOptions.of`` makes one from values) and
    what the caller adds (a lock's hashes and labels, the smoke job's ranks, the team's lines).

    ``team_requirements`` (PEP 508 lines, validated by the caller) are a team's own packages:
    they get a layer of their own (``team``), installed after torch and the compiled layers
    with those layers' versions as constraints, so changing them rebuilds that layer only.
    Those that compile against torch (known ones, or named in ``compiled``) get the
    ``team-compiled`` layer before it (components.team_compiled); a stack that cannot build
    them is refused (exit 3)."""

    spec: TargetSpec | None = None  # None: no build option given
    wheelhouse: bool = False
    hashes: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    smoke_nproc: int = 12
    host_nproc: int | None = None
    team_requirements: tuple[str, ...] = ()
    compiled: tuple[str, ...] = ()
    pinned: Pinned | None = None  # what a lock pins beyond Python, and --apt-snapshot (Pinned)

    @classmethod
    def of(cls, *, base_image: str | None = None, builder_image: str | None = None,
           pip_index_url: str | None = None, extra_index_urls: tuple[str, ...] = (),
           cuda_arch: tuple[str, ...] = (), cpu_isa: str | None = None, **rest: Any) -> PlanOptions:
        """Options from values (a library caller's, a test's): the build options become a
        TargetSpec's, checked there as every spec's are."""
        spec = TargetSpec(name="plan", target="plan", base_image=base_image, builder_image=builder_image,
                          pip_index_url=pip_index_url, extra_index_urls=tuple(extra_index_urls),
                          cuda_arch=tuple(cuda_arch or ()), cpu_isa=cpu_isa)
        return cls(spec=spec, **rest)

    def _get(self, name: str) -> Any:
        return getattr(self.spec, name) if self.spec is not None else None

    @property
    def base_image(self) -> str | None:
        return self._get("base_image")  # type: ignore[no-any-return]

    @property
    def builder_image(self) -> str | None:
        return self._get("builder_image")  # type: ignore[no-any-return]

    @property
    def index(self) -> str:
        return self._get("pip_index_url") or PYPI

    @property
    def extra_index_urls(self) -> tuple[str, ...]:
        return self._get("extra_index_urls") or ()

    @property
    def cuda_arch(self) -> tuple[str, ...]:
        return self._get("cuda_arch") or ()

    @property
    def cpu_isa(self) -> str:
        return self._get("cpu_isa") or DEFAULT_CPU_ISA


def make_plan(stack: Stack, options: PlanOptions | None = None) -> BuildPlan:
    """Turn a resolved stack and the build options into a plan.

    ``base_image`` replaces the runtime base (and the builder when the builder is a plain OS
    image that installs its own toolkit, or nothing compiles); an nvidia/cuda devel builder is
    replaced only by ``builder_image``. ``cuda_arch`` narrows the CUDA architectures compiled
    code is built for (a subset of torch's own); ``cpu_isa`` is the -march of compiled CPU code.
    """
    o = options or PlanOptions()
    components = tuple(registry.active(stack))
    for c in components:
        c.refuse(stack, o.base_image)
    os_py = stack.os.python.get(stack.python)
    if os_py is None:  # the resolver's os_python rule makes this unreachable
        raise InputError(f"{stack.os.name} cannot install Python {stack.python}")
    from envbuilder.components import team_compiled

    split = team_compiled.split_team(o.team_requirements, o.compiled)
    b = team_compiled.refuse_unbuildable(stack, split) if split else stack.builder
    gpu = stack.toolkit is not None
    arch = _narrow_arch(_arch_list(stack.torch_variant.arch), o.cuda_arch) if gpu else ()
    ctx = PlanContext(stack, team=split, team_lines=tuple(o.team_requirements), hashes=o.hashes,
                      wheelhouse=o.wheelhouse, index=o.index, builder=b, arch=tuple(arch))
    builder_apt, setup = _builder(ctx, components, os_py, _cpu_isa(stack, o.cpu_isa))
    ctx = replace(ctx, setup=setup)
    layers = [la for c in components if (la := c.layer(ctx)) is not None]
    for layer in layers:
        for k, v in layer.build_env.items():
            validate.env_pair(k, v, "build environment")
    extra_labels = {k: v for c in components for k, v in c.labels(ctx).items()}
    builder, runtime_image = _builder_image(stack, o, split, b), o.base_image or stack.runtime_image
    pin = o.pinned or Pinned()
    digests = _pinned_images(pin, builder, runtime_image)
    sde = pin.source_date_epoch if pin.source_date_epoch is not None else stack_epoch(stack)
    if "runtime" in digests:  # the OCI annotation of the base's digest, as a label
        extra_labels["org.opencontainers.image.base.digest"] = digests["runtime"].split("@", 1)[1]
    return BuildPlan(
        target=stack.target, stack=stack, builder_image=digests.get("builder", builder),
        runtime_image=digests.get("runtime", runtime_image), os_family=stack.os.family,
        python=stack.python, python_apt=tuple(os_py.packages), builder_apt=builder_apt,
        ppa=os_py.ppa, layers=tuple(layers), env=_runtime_env(stack, o.hashes),
        labels=_labels(stack, {**o.labels, **extra_labels}, o.base_image, setup=setup,
                       arch=arch if b is not None and b.nvcc is not None else ()),
        wheelhouse=o.wheelhouse, hashes=o.hashes, pip_index_url=o.index,
        extra_index_urls=o.extra_index_urls, smoke_nproc=o.smoke_nproc,
        host_ranks=o.host_nproc if o.host_nproc != o.smoke_nproc else None,
        builder=setup, cuda_arch=tuple(arch), fabric=stack.fabric, compiled_packages=split.names,
        source_date_epoch=sde, image_digests=digests,
        apt_pins={k: dict(v) for k, v in pin.apt_pins.items()} if stack.os.package_manager == "apt" else {},
        apt_snapshot=_snapshot(pin, stack, sde),
    )


def _pinned_images(pin: Pinned, builder: str, runtime: str) -> dict[str, str]:
    """The lock's images by digest for this plan's images: a pin made for another image (the
    lock predates a --base-image) is refused, naming both (exit 2)."""
    out: dict[str, str] = {}
    for stage, image in (("builder", builder), ("runtime", runtime)):
        ref = pin.image_digests.get(stage)
        if ref is None:
            continue
        validate.image_ref(ref, f"the lock's {stage} image")
        name = ref.split("@", 1)[0]
        if name != image.split("@", 1)[0]:
            raise InputError(f"the lock pins the {stage} image {name} by digest, and this build's "
                             f"{stage} image is {image}: lock again with --system for it")
        out[stage] = ref
    return out


def _snapshot(pin: Pinned, stack: Stack, sde: int) -> os_packages.Snapshot | None:
    """--apt-snapshot URL: the archive as of the lock's system pins (``snapshot_date``), else
    as of the plan's date."""
    if pin.apt_snapshot is None:
        return None
    if stack.os.package_manager != "apt":
        raise InputError(f"--apt-snapshot points apt at a snapshot archive; {stack.os.name} "
                         f"installs with {stack.os.package_manager}")
    if not os_packages.SNAPSHOT_URL_RE.fullmatch(pin.apt_snapshot):
        raise InputError(f"--apt-snapshot {pin.apt_snapshot!r} is not an http(s) URL of letters, "
                         f"digits and ._~:/- (a snapshot archive's root, e.g. "
                         f"http://snapshot.debian.org/archive)")
    from datetime import datetime, timezone

    date = pin.snapshot_date or datetime.fromtimestamp(sde, tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return os_packages.Snapshot(pin.apt_snapshot, date)


def _cpu_isa(stack: Stack, name: str) -> CpuIsa:
    isas = stack.matrix.toolchains.cpu_isas
    isa = isas.get(name)
    if isa is None:
        raise InputError(f"--cpu-isa {name!r} is not known{validate.suggest(name, isas)}; known: {', '.join(isas)}")
    return isa


def _runtime_env(stack: Stack, hashes: bool) -> dict[str, str]:
    env = dict(RUNTIME_ENV)
    if hashes:  # a later `pip install` in the image keeps the locked versions
        env["PIP_CONSTRAINT"] = CONSTRAINTS_FILE
    if stack.toolkit is not None:
        env.update(stack.base_flavour.env)
    return env


def _builder_image(stack: Stack, o: PlanOptions, split: Any, b: Any) -> str:
    """The builder stage's image: an nvidia/cuda devel image when the builder compiles with
    NVIDIA's toolkit (replaced only by --builder-image), else --base-image's or the runtime's."""
    if split and b is not None and b.image_kind == "devel":
        from envbuilder.components import team_compiled

        return o.builder_image or team_compiled.builder_image(stack, b)
    if b is not None and b.image_kind == "devel":
        return o.builder_image or stack.builder_image
    return o.builder_image or o.base_image or stack.builder_image


def _builder(ctx: PlanContext, components: tuple[Component, ...], os_py: OsPython,
             isa: CpuIsa) -> tuple[tuple[str, ...], BuilderSetup]:
    """The builder stage's OS packages and compilers: Python's, and when something compiles the
    builder's GCC and toolkit, then what each component asks for (e.g. cmake); the names are
    the OS's package manager's (components.os_packages)."""
    b, py, pm = ctx.builder, ctx.stack.python, os_packages.of(ctx.stack.os)
    builder_apt = [*os_py.packages, "ca-certificates"]
    setup = BuilderSetup()
    if b is not None:
        builder_apt += [*pm.python_devel(py, os_py), *pm.build_tools]
        cc = cxx = None
        if b.gcc is not None and not b.gcc_is_default and not pm.versioned_gcc:
            raise InputError(f"{ctx.stack.os.name}: a builder with GCC {b.gcc} (not the OS's own) is not supported yet")
        if b.gcc is not None and not b.gcc_is_default:
            builder_apt += list(b.gcc_packages)
            cc, cxx = f"gcc-{b.gcc}", f"g++-{b.gcc}"
        tk = b.toolkit
        if tk is not None and tk.install == "apt":
            builder_apt += list(tk.packages)
        cpu_ops = any(c.compiles_cpu(ctx) for c in components)
        setup = BuilderSetup(
            apt_components=tk.apt_components if tk is not None and tk.install == "apt" else (),
            pip_toolkit=tk.packages if tk is not None and tk.install == "pip" else (),
            cuda_home=b.cuda_home, gcc=b.gcc, cc=cc, cxx=cxx,
            cpu_isa=isa.name if cpu_ops else None, cpu_simd=isa.simd if cpu_ops else None)
    for c in components:
        builder_apt += list(c.builder_apt(ctx.stack))
    return tuple(dict.fromkeys(builder_apt)), setup


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
