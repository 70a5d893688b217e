"""What a component is: one object that owns what the plan, the image, its checks and the lock
need to know about one part of the stack (as Spack keeps a package in one class and hpccm a
building block: build steps plus what the runtime stage needs).

A ``Component`` answers, for a resolved ``Stack`` it is ``active`` in:

- resolution: its matrix ``axis`` (the resolver in ``core`` stays generic: components with an
  axis are the matrix's component files, resolved by the rules in ``core.rules``);
- refusals the plan adds (``refuse``), its builder needs (``builder_apt``, ``compiles_cpu``);
- its layer: requirements, build requirements, build environment and pre-install steps
  (``layer``, a ``PipLayer``), installed in its own stage so bumping it rebuilds only it;
- the runtime stage: OS packages (``runtime_apt``), a build stage of its own and what the
  runtime copies from it (``build_stage``, ``runtime_copies``, ``runtime_steps``);
- the image: extra labels (``labels``) and the checks ``verify`` runs against them
  (``verify_checks``);
- the lock: the versions it pins (``lock_pins``);
- the smoke job: its check in the smoke payload (``smoke_check``) and a launcher of its own
  (``launcher``), if any.

Every hook has a neutral default, so a component overrides only what it needs. Components are
listed, in plan order, by ``registry``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from packaging.version import InvalidVersion, Version

from envbuilder.components.instructions import Copy, Run, Stage

if TYPE_CHECKING:
    from envbuilder.components.team_compiled import TeamSplit
    from envbuilder.core.builder import Builder
    from envbuilder.core.matrix import Component as MatrixComponent
    from envbuilder.core.matrix import Matrix
    from envbuilder.core.resolve import Stack

VENV = "/opt/venv"
HOME = "/opt/envbuilder"
CXX_WRAPPER = "/usr/local/libexec/envbuilder/c++"  # files/cxx-isa.sh in the builder stage only
HIDE_DIR = "/tmp/envbuilder/hide"
# the x86-64 psABI microarchitecture levels, each a superset of the one before
# (https://gcc.gnu.org/onlinedocs/gcc/x86-Options.html)
PSABI_LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")


@dataclass(frozen=True)
class PipLayer:
    """One group of Python packages installed in its own stage and layer."""

    name: str  # the component's layer: torch, a compiled component's, team-compiled, team (last)
    requirements: tuple[str, ...]  # PEP 508 lines, e.g. "torch==2.5.1"
    index_url: str | None  # None: the PIP_INDEX_URL build argument
    extra_index_url: bool = True  # also look at PIP_INDEX_URL (deps not on the torch index)
    build_env: Mapping[str, str] = field(default_factory=dict)
    no_build_isolation: bool = False  # builds that import torch (compiled components)
    extra_build: tuple[str, ...] = ()  # more build requirements (e.g. an NCCL wheel to link)
    pre_install: tuple[str, ...] = ()  # shell lines between the build requirements and the build
    build_deps: tuple[str, ...] = ()  # what the component's setup.py imports while building

    @property
    def build_requirements(self) -> tuple[str, ...]:
        """What the layer's build imports or links, installed before it (compiled layers)."""
        return self.build_deps + self.extra_build

    @property
    def stage(self) -> str:
        return f"layer-{self.name}"

    @property
    def file(self) -> str:
        return f"requirements/{self.name}.txt"


@dataclass(frozen=True)
class BuilderSetup:
    """What the builder stage installs to compile (compiled components) beyond Python."""

    apt_components: tuple[str, ...] = ()  # enabled on the OS's apt sources (builder only): non-free
    pip_toolkit: tuple[str, ...] = ()  # NVIDIA's CUDA 13 wheels, installed into PIP_TOOLKIT_DIR
    cuda_home: str | None = None
    gcc: int | None = None  # host GCC major given to nvcc and the C++ compiles
    cc: str | None = None  # gcc-11 when it is not the OS default
    cxx: str | None = None
    cpu_isa: str | None = None  # -march for compiled CPU code
    cpu_simd: str | None = None

    @property
    def compile_env(self) -> dict[str, str]:
        """The environment every compiled layer's build gets: CUDA_HOME and the compilers."""
        env: dict[str, str] = {}
        if self.cuda_home:
            env["CUDA_HOME"] = self.cuda_home
        if self.cc and self.cxx:
            # CC also becomes nvcc's -ccbin in torch.utils.cpp_extension; CMake reads CUDAHOSTCXX
            env.update({"CC": self.cc, "CXX": self.cxx, "CUDAHOSTCXX": self.cxx})
        return env

    @property
    def isa_env(self) -> dict[str, str]:
        """Compiled CPU code at the plan's -march (files/cxx-isa.sh wraps the C++ compiler)."""
        if not self.cpu_isa:
            return {}
        return {"ENVBUILDER_CPU_ISA": self.cpu_isa, "ENVBUILDER_CPU_SIMD": self.cpu_simd or "",
                "ENVBUILDER_REAL_CXX": self.cxx or "g++", "CXX": CXX_WRAPPER}


@dataclass(frozen=True)
class PlanContext:
    """What a component sees while the plan is made."""

    stack: Stack
    team: TeamSplit | None = None  # the team's requirement lines, cut by team_compiled.split_team
    team_lines: tuple[str, ...] = ()  # the team's requirement lines as given
    hashes: bool = False  # a locked plan
    wheelhouse: bool = False
    index: str | None = None  # PIP_INDEX_URL
    builder: Builder | None = None  # the builder stage's compilers (None: nothing compiles)
    setup: BuilderSetup = field(default_factory=BuilderSetup)
    arch: tuple[str, ...] = ()  # TORCH_CUDA_ARCH_LIST entries compiled code is built for

    @property
    def gpu(self) -> bool:
        return self.stack.toolkit is not None

    @property
    def site(self) -> str:
        return f"{VENV}/lib/python{self.stack.python}/site-packages"

    @property
    def compile_env(self) -> dict[str, str]:
        return self.setup.compile_env


@dataclass(frozen=True)
class VerifyCheck:
    """One fact of an image judged against its labels (envbuilder verify)."""

    name: str
    ok: bool
    expected: Any
    actual: Any
    detail: str = ""


@dataclass(frozen=True)
class VerifyContext:
    """What a component's checks read beside its own facts: the labels (without the
    ``io.envbuilder.`` prefix), torch's facts, the NCCL libraries the process loaded."""

    labels: Mapping[str, str]
    torch: Mapping[str, Any]
    nccl: tuple[Mapping[str, Any], ...] = ()
    matrix: Matrix | None = None  # the matrix the image was made from (a component's own facts)

    @property
    def gpu(self) -> bool:
        return self.labels.get("cuda", "cpu") != "cpu"


def hide_modules(names: tuple[str, ...]) -> list[str]:
    """Shell lines that make ``import NAME`` fail for the build step (PYTHONPATH=HIDE_DIR)."""
    out = []
    for name in names:
        out += [f"mkdir -p {HIDE_DIR}/{name}",
                f"echo 'raise ImportError(\"{name} is hidden from this build by envbuilder\")' "
                f"> {HIDE_DIR}/{name}/__init__.py"]
    return out


def public(v: str | None) -> str | None:
    """'2.6.0+cu124' -> '2.6.0' (the local version names the variant, checked separately)."""
    if v is None:
        return None
    try:
        return Version(v).public
    except InvalidVersion:
        return v


def eq(name: str, what: str, expected: Any, actual: Any) -> VerifyCheck:
    ok = expected == actual
    detail = f"{what} is {actual}" if ok else f"the label says {what} {expected}, the image has {actual}"
    return VerifyCheck(name, ok, expected, actual, detail)


class Component:
    """One part of the stack. Subclasses set ``name`` and override the hooks they need."""

    name: str = ""
    axis: str | None = None  # the matrix axis it resolves on (its file matrices/<axis>.yaml), if any
    facts_key: str | None = None  # its entry in the verification payload's facts
    # the smoke payload's check of it (run/payload/ddp_smoke.py CHECKS): the payload runs in
    # any image without envbuilder, so the check itself lives there, named here
    smoke_check: str | None = None

    def active(self, stack: Stack) -> bool:
        """Whether ``stack`` carries the component."""
        return self.axis is not None and stack.assignment.get(self.axis) is not None

    def release(self, stack: Stack) -> Any:
        """Its resolved release (a ComponentRelease for an axis), None when not in the stack."""
        return stack.assignment.get(self.axis) if self.axis else None

    def facts(self, matrix: Matrix) -> MatrixComponent:
        """What its matrix file says (identity, order, how it compiles, its ops): the component
        with an axis only."""
        assert self.axis is not None, f"component {self.name} has no matrix file"
        return matrix.component(self.axis)

    def order(self, stack: Stack) -> int:
        """Where its layer goes (registry): its matrix file's order for a component with an
        axis, else its module's ORDER."""
        if self.axis is not None and self.axis in stack.matrix.component_names:
            return self.facts(stack.matrix).order
        return self.module_order

    module_order: int = 50  # set by the registry from the module's ORDER (no axis: its place)

    def ops(self, stack: Stack) -> tuple[str, ...]:
        """The ops it pre-builds in ``stack`` (its ``--<tag>-ops``, or its default on CUDA)."""
        return stack.ops.get(self.axis or self.name, ())

    def compiled_layer(self, ctx: PlanContext, requirements: tuple[str, ...],
                       env: Mapping[str, str], *, compiles: bool = True,
                       extra_build: tuple[str, ...] = (), pre_install: tuple[str, ...] = ()) -> PipLayer:
        """Its layer when it compiles against the image's torch (core.compiles, its matrix file):
        no build isolation, the build requirements its file names, ``env`` with the settings its
        file's ``tools`` give for its version, and the modules they hide from the build (only
        when something ``compiles``: a tool that hides a module is about compiling)."""
        facts = self.facts(ctx.stack.matrix)
        assert facts.compiles is not None
        rel = self.release(ctx.stack)
        out = dict(env)
        pre: list[str] = []
        for tool in facts.compiles.tools_for(rel.version):
            if compiles or not tool.hide_modules:
                out.update(tool.env)
                pre += hide_modules(tool.hide_modules)
        if pre:
            out["PYTHONPATH"] = HIDE_DIR
        return PipLayer(self.name, requirements, None, build_env=out, no_build_isolation=True,
                        extra_build=extra_build, pre_install=tuple(pre) + pre_install,
                        build_deps=facts.compiles.build)

    # -- the plan ------------------------------------------------------------------------
    def refuse(self, stack: Stack, base_image: str | None) -> None:
        """Raise IncompatibleError (exit 3) for a stack the plan cannot build for it."""

    def builder_apt(self, stack: Stack) -> tuple[str, ...]:
        """OS packages the builder stage needs for it (beyond compilers), named for the OS's
        package manager (``stack.os.package_manager``: apt or dnf)."""
        return ()

    def compiles_cpu(self, ctx: PlanContext) -> bool:
        """It compiles CPU code (the plan's -march applies to the builder)."""
        return False

    def layer(self, ctx: PlanContext) -> PipLayer | None:
        """Its layer of Python packages, None when it has none."""
        return None

    # -- the runtime stage ---------------------------------------------------------------
    def runtime_apt(self, stack: Stack) -> tuple[str, ...]:
        """OS packages the runtime stage needs for it, named for the OS's package manager."""
        return ()

    def build_stage(self, stack: Stack, site_packages: str) -> Stage | None:
        """A build stage of its own after the torch layer, if any."""
        return None

    def runtime_copies(self, stack: Stack) -> tuple[Copy, ...]:
        """What the runtime stage copies from that build stage."""
        return ()

    def runtime_steps(self, stack: Stack) -> Run:
        """Commands the runtime stage runs after its copies."""
        return Run()

    # -- the image and its checks --------------------------------------------------------
    def labels(self, ctx: PlanContext) -> dict[str, str]:
        """Labels beyond the stack's own (envbuilder.labels)."""
        return {}

    def payload_args(self, ctx: VerifyContext) -> list[str]:
        """Arguments of the verification payload (run/payload/verify_image.py) that ask for its
        facts, from the image's labels."""
        return []

    def verify_checks(self, facts: Mapping[str, Any], ctx: VerifyContext) -> list[VerifyCheck]:
        """The image's facts about it against its labels."""
        return []

    # -- the lock and the smoke job ------------------------------------------------------
    def lock_pins(self, stack: Stack) -> dict[str, tuple[str, str]]:
        """Package -> (version, what says so) for the packages it pins."""
        rel = self.release(stack)
        if rel is None or self.axis is None:
            return {}
        return {self.axis: (str(rel.version), f"{self.axis} {rel.version}")}

    def source(self, stack: Stack) -> tuple[str, ...]:
        """Where its facts come from (the matrix entry's ``source:``), for refusals."""
        rel = self.release(stack)
        return tuple(rel.source) if rel is not None else ()

    def launcher(self, stack: Stack) -> str | None:
        """A launcher of its own the jobs get: jobs/<launcher>-NxM.sh from the template
        jobs/<launcher>.sh.j2 (given ``launcher_program``), if any."""
        return None

    def launcher_program(self, program: list[str]) -> list[str]:
        """The team's command (torchrun's program words) as that launcher runs it per rank."""
        return program
