"""A team's compiled packages: the packages of a project's requirements that build C++/CUDA
extensions against the image's torch (flash-attn, apex, xformers ... or the project's own,
named in its ``compiled`` list), placed in a layer of their own.

That layer (``team-compiled``) comes after torch and the stack's compiled components' layers
and before the team's plain packages. It installs in the builder stage with
``--no-build-isolation`` (an isolated build environment has no torch, or another one), a real
nvcc of torch's CUDA (the builder ``core.builder`` chooses for the stack), TORCH_CUDA_ARCH_LIST
from the target, MAX_JOBS bounded by the builder's memory and compiled CPU code at the
plan's portable ISA; what it builds is collected into the layer the runtime stage copies, so
the runtime has no compiler. A target whose stack cannot build them is refused (exit 3)
before anything builds: no nvcc for torch's CUDA on that OS, or a CUDA-only package on a CPU
target. Which packages are known to compile, and how each is told to, is data:
``envbuilder/data/compiled_packages.yaml``, each package described as a matrix component's
``compiles:`` is (core.compiles: one description of "compiles against torch").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

from packaging.utils import canonicalize_name

from envbuilder.components.base import (BuilderSetup, Component, PipLayer, PlanContext, VerifyCheck,
                                        VerifyContext)
from envbuilder.core import compiles
from envbuilder.core.builder import Builder, NoBuilder, builder_for
from envbuilder.core.compiles import Compiles
from envbuilder.core.schema import first_error
from envbuilder.core.resolve import Stack
from envbuilder.core.resources import data_path
from envbuilder.core.rules import Violation
from envbuilder.errors import IncompatibleError, InputError, MatrixError
from envbuilder.labels import PREFIX

LAYER = "team-compiled"
DATA = "compiled_packages.yaml"


@dataclass(frozen=True)
class Catalog:
    packages: Mapping[str, Compiles]  # by canonical name
    default_build: tuple[str, ...]
    gib_per_job: int
    gib_per_job_source: str


@lru_cache(maxsize=1)
def catalog() -> Catalog:
    import yaml

    # libyaml's loader where PyYAML has it: every render reads this file (0.3 ms instead of
    # 3.6 ms in pure Python)
    raw: dict[str, Any] = yaml.load(data_path(DATA).read_text(),
                                    Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    pkgs: dict[str, Compiles] = {}
    for name, d in raw["packages"].items():
        where = f"{DATA}, key packages/{name}"
        err = first_error(d, compiles.SCHEMA)
        if err is not None:
            raise MatrixError(f"{where}/{'/'.join(map(str, err.path))}: {err.message}")
        pkgs[canonicalize_name(name)] = compiles.parse(d, where)
    return Catalog(pkgs, tuple(raw["default_build"]), int(raw["gib_per_job"]),
                   str(raw["gib_per_job_source"]))


@dataclass(frozen=True)
class TeamSplit:
    """A team's requirement lines cut in two: those that compile against torch, and the rest."""

    compiled: tuple[str, ...] = ()  # PEP 508 lines of the team-compiled layer
    plain: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # canonical names of the compiled ones, in order
    why: Mapping[str, str] = field(default_factory=dict)  # name -> what says it compiles

    def __bool__(self) -> bool:
        return bool(self.compiled)


def _name(line: str) -> str:
    # packaging.requirements compiles its tokenizer's patterns on import (3 ms): only a
    # target with team packages pays it
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:  # lines were validated by lock.requirements; be safe
        return canonicalize_name(line.split("=")[0].split("<")[0].split(">")[0].strip())


def explicit_names(entries: Sequence[str], where: str = "compiled") -> tuple[str, ...]:
    """A project's ``compiled`` list as canonical names; each entry is a package name."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for e in entries:
        e = str(e).strip()
        if e.startswith((".", "/")):
            raise InputError(f"{where}: {e[:80]!r} is a local path; envbuilder locks and builds a "
                             f"team's compiled packages from an index or wheelhouse by hash: build an "
                             f"sdist of it (python -m build --sdist), serve it with --extra-index-url "
                             f"or --wheelhouse, and name the package here")
        try:
            req = Requirement(e)
        except InvalidRequirement:
            raise InputError(f"{where}: {e[:80]!r} is not a package name") from None
        if req.specifier or req.url or req.marker:
            raise InputError(f"{where}: give bare package names ({req.name}); versions belong in requirements")
        out.append(canonicalize_name(req.name))
    return tuple(dict.fromkeys(out))


def split_team(lines: Sequence[str], explicit: Sequence[str] = (),
               detected: Mapping[str, str] | None = None) -> TeamSplit:
    """Cut a team's lines: a line compiles when its package is known to (the data), named in the
    project's ``compiled`` list, or ``detected`` from its metadata (lock.compiled: build
    requirements naming torch, a setup.py importing it)."""
    known = catalog().packages
    want = set(explicit)
    names = {_name(ln): ln for ln in lines}
    missing = [n for n in explicit if n not in names]
    if missing:
        raise InputError(f"compiled: {', '.join(missing)} is not among the team's requirements; add "
                         f"'{missing[0]}==VERSION' to requirements (the lock pins it by hash)")
    comp: list[str] = []
    plain: list[str] = []
    why: dict[str, str] = {}
    for ln in lines:
        n = _name(ln)
        if n in want:
            why[n] = "the project's compiled list"
        elif n in known:
            why[n] = "known to compile against torch"
        elif detected and n in detected:
            why[n] = detected[n]
        else:
            plain.append(ln)
            continue
        comp.append(ln)
    return TeamSplit(tuple(comp), tuple(plain), tuple(_name(ln) for ln in comp), why)


def refuse_unbuildable(stack: Stack, split: TeamSplit) -> Builder:
    """The builder that compiles the team's packages for ``stack``, or IncompatibleError (exit 3)
    naming the package and what would build it."""
    known = catalog().packages
    if stack.toolkit is None:
        cuda_only = [n for n in split.names if n in known and known[n].cuda_only]
        if cuda_only:
            k = known[cuda_only[0]]
            raise IncompatibleError(
                f"{', '.join(cuda_only)} builds only as a CUDA extension, and {stack.target} is a CPU "
                f"target (CPU torch, no nvcc): use a CUDA target, or drop it from this target's "
                f"requirements", details=[f"source: {k.source[0]}"])
    try:
        b = builder_for(stack.assignment, stack.matrix, stack.ops, extensions=split.names)
    except NoBuilder as e:
        raise IncompatibleError(f"{stack.target} cannot build {', '.join(split.names)}: {e}; {e.fix}",
                                details=[f"source: {s}" for s in e.source[:2]]) from None
    assert b is not None  # extensions always compile
    return b


def labels(split: TeamSplit, b: Builder | None) -> dict[str, str]:
    """The image's labels for its compiled team packages: their names (verify imports each and
    checks its extension links against the image's torch) and the builder's nvcc."""
    if not split or b is None:
        return {}
    out = {PREFIX + "compiled": ",".join(split.names)}
    if b.nvcc is not None:
        out[PREFIX + "builder-nvcc"] = str(b.nvcc)
    return out


def builder_image(stack: Stack, b: Builder) -> str:
    """The builder stage's image for ``b``: NVIDIA's devel image, else the runtime base (an OS
    builder installs its toolkit itself)."""
    if b.image_kind == "devel":
        return stack._nvidia("devel", stack.base_flavour.cudnn)
    return stack.runtime_image


def max_jobs_lines(gib_per_job: int | None = None) -> tuple[str, ...]:
    """Shell lines that export MAX_JOBS: the builder's available memory over ``gib_per_job``
    GiB, at most its CPUs, at least 1 (torch.utils.cpp_extension and ninja read MAX_JOBS)."""
    g = gib_per_job or catalog().gib_per_job
    return ("MAX_JOBS=$(awk -v cpus=\"$(nproc)\" '/^MemAvailable:/ {j = int($2 / "
            f"({g} * 1048576)); if (j > cpus) j = cpus; if (j < 1) j = 1; print j}}' /proc/meminfo)",
            "export MAX_JOBS", f"echo \"MAX_JOBS=$MAX_JOBS (builder memory / {g} GiB, at most its CPUs)\"")


def layer_env(stack: Stack, split: TeamSplit, compile_env: Mapping[str, str],
              arch: Sequence[str], cpu_isa: Mapping[str, str]) -> dict[str, str]:
    """The build environment of the team-compiled layer."""
    known = catalog().packages
    gpu = stack.toolkit is not None
    env: dict[str, str] = {}
    for n in split.names:
        k = known.get(n)
        if k is not None:
            env.update(k.env_for(gpu))
    env.update(compile_env)
    if gpu:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(arch)
    else:
        env["FORCE_ONLY_CPU"] = "1"  # torch-scatter/-sparse: no CUDA kernels on a CPU target
    env.update(cpu_isa)
    return env


def build_requirements(split: TeamSplit) -> tuple[str, ...]:
    """What the compiled packages' setup.py files import beyond torch."""
    known = catalog().packages
    out: list[str] = []
    for n in split.names:
        out += list(known[n].build) if n in known else list(catalog().default_build)
    return tuple(dict.fromkeys(out))


def warnings(stack: Stack, split: TeamSplit, b: Builder, arch: Sequence[str],
             index: str | None = None) -> list[Violation]:
    """What resolve/render say about compiling the team's packages (one warning each)."""
    out = []
    nvcc = "a C++ compiler, no nvcc (CPU extension)" if b.nvcc is None else f"nvcc {b.nvcc} ({b.image_kind} builder)"
    for n in split.names:
        k = catalog().packages.get(n)
        out.append(Violation(
            "team_compiled",
            f"{n} is compiled against torch {stack.torch.version} in the builder stage ({split.why.get(n, '')}): "
            f"{nvcc}, --no-build-isolation" + (f", TORCH_CUDA_ARCH_LIST={';'.join(arch)}" if arch else "")
            + ", MAX_JOBS from the builder's memory; a CUDA build can take long",
            k.source[:1] if k is not None else ("https://pytorch.org/docs/stable/cpp_extension.html",),
            f"a prebuilt {n} wheel of the same version for torch {stack.torch.version} {stack.variant} "
            f"cp{stack.python.replace('.', '')} on the team's index" + (f" ({index})" if index else "")
            + " is installed instead of compiling (pip prefers a wheel)",
            severity="warning"))
    return out


def layer(stack: Stack, split: TeamSplit, setup: BuilderSetup, compile_env: Mapping[str, str],
          arch: Sequence[str]) -> PipLayer:
    """The team-compiled PipLayer: the compiled lines, their build requirements, the compile
    environment, MAX_JOBS from the builder's memory."""
    return PipLayer(LAYER, split.compiled, None, build_env=layer_env(stack, split, compile_env, arch, setup.isa_env),
                    no_build_isolation=True, extra_build=build_requirements(split),
                    pre_install=max_jobs_lines())


class TeamCompiled(Component):
    """The team's packages that compile against torch: a layer after the stack's compiled
    components, the builder that can build them, their labels and verify's import/link check."""

    name = LAYER
    facts_key = "compiled"

    def active(self, stack: Stack) -> bool:
        return True  # the plan's team requirements decide (layer() is None without them)

    def compiles_cpu(self, ctx: PlanContext) -> bool:
        return bool(ctx.team)

    def layer(self, ctx: PlanContext) -> PipLayer | None:
        if not ctx.team:
            return None
        return layer(ctx.stack, ctx.team, ctx.setup, ctx.compile_env, ctx.arch)

    def labels(self, ctx: PlanContext) -> dict[str, str]:
        return labels(ctx.team, ctx.builder) if ctx.team else {}

    def payload_args(self, ctx: VerifyContext) -> list[str]:
        names = [n for n in (ctx.labels.get("compiled") or "").split(",")
                 if re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,99}", n)]
        return [a for n in names for a in ("--compiled", n)]

    def verify_checks(self, facts: Mapping[str, Any], ctx: VerifyContext) -> list[VerifyCheck]:
        return compiled_checks(facts.get("compiled"), ctx.labels.get("compiled"), ctx.torch)


def compiled_checks(c: Mapping[str, Any] | None, label: str | None,
                    t: Mapping[str, Any]) -> list[VerifyCheck]:
    """Each compiled team package (the ``compiled`` label) is installed, imports, and every
    shared object it installed is there and links against the image's torch: its torch/c10
    libraries resolve to torch's own lib folder, nothing is not found, no symbol is undefined
    (read with ``ldd``)."""
    names = [n for n in (label or "").split(",") if n]
    if not names:
        return []
    torch_lib = os.path.join(os.path.dirname(t.get("file") or ""), "lib")
    out = []
    for n in names:
        rec = (c or {}).get(n) or {"error": "the verification payload reported nothing"}
        if "error" in rec:
            out.append(VerifyCheck(f"compiled_{n}", False, "installed", None,
                                   f"compiled package {n}: {rec['error']}"))
            continue
        problems = [f"import {m} failed: {e}" for m, e in (rec.get("imports") or {}).items() if e]
        exts = rec.get("extensions") or []
        if not exts:
            problems.append("it installed no shared object (its extension was not built)")
        for e in exts:
            f = os.path.basename(str(e.get("file")))
            if not e.get("exists"):
                problems.append(f"{e.get('file')} is missing")
                continue
            if e.get("error"):
                problems.append(f"ldd {f}: {e['error']}")
            if e.get("not_found"):
                problems.append(f"{f} needs {', '.join(e['not_found'])}: not found")
            if e.get("undefined"):
                problems.append(f"{f} has undefined symbols ({', '.join(e['undefined'][:3])}): built "
                                f"against another torch")
            elsewhere = {k: v for k, v in (e.get("torch_libs") or {}).items()
                         if os.path.dirname(os.path.normpath(str(v))) != os.path.normpath(torch_lib)}
            if elsewhere:
                problems.append(f"{f} resolves {', '.join(f'{k} to {v}' for k, v in elsewhere.items())}, "
                                f"not the image's torch ({torch_lib})")
        detail = (f"compiled package {n} {rec.get('version')} imports ({', '.join(rec.get('modules') or [])}) "
                  f"and its {len(exts)} extension(s) link against the image's torch" if not problems else
                  f"compiled package {n} {rec.get('version')}: " + "; ".join(problems[:4]))
        out.append(VerifyCheck(f"compiled_{n}", not problems, "imports and links against torch",
                               {"version": rec.get("version"), "extensions": [e.get("file") for e in exts]},
                               detail))
    return out


COMPONENT = TeamCompiled()
ORDER = 80
