"""The compatibility matrix: YAML files in one folder, schema-checked, turned into typed data.

``load_matrix(path)`` reads every file named in ``schema.FILES`` and every component file beside
them (``core.catalog``: ``<name>.yaml``, one per component), validates it (unknown keys and
missing ``source:`` are errors naming the file and the key), and returns a frozen ``Matrix``.
Versions are ``packaging`` versions; specifiers are ``SpecifierSet``s. Nothing here names a
component: each is what its file says (``Component``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from envbuilder.core import catalog, schema
from envbuilder.core.compiles import Compiles
from envbuilder.core.compiles import parse as parse_compiles
from envbuilder.errors import MatrixError
from envbuilder.core.resources import matrices_dir


def _sources(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def minor(v: Version) -> str:
    """'11.8.0' -> '11.8'."""
    return f"{v.major}.{v.minor}"


@dataclass(frozen=True)
class Toolkit:
    version: Version
    driver_min: str
    source: tuple[str, ...]
    released: str | None = None  # upload date on the index (PyPI's cuda-toolkit), ISO

    @property
    def minor(self) -> str:
        return minor(self.version)

    @property
    def variant(self) -> str:
        return f"cu{self.version.major}{self.version.minor}"


@dataclass(frozen=True)
class MinorCompat:
    major: int
    driver_min: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class DriverBranch:
    """An NVIDIA data center driver branch and its end of life (cuda.yaml driver_branches)."""

    branch: int
    designation: str  # long-term support | production | new feature
    eol: str  # YYYY-MM: supported through that month
    max_cuda_major: int | None
    source: tuple[str, ...]


@dataclass(frozen=True)
class Advisory:
    """A known-bad release (incompatibilities.yaml advisories): affected range, fix, URL."""

    id: str
    component: str  # torch | nccl | cuda | cublas | driver | a component of the matrix
    affected: SpecifierSet
    fixed: str | None
    severity: str  # critical | high | medium | low
    symptom: str
    source: tuple[str, ...]
    gpus: str | None = None

    def covers(self, version: str | Version) -> bool:
        """The version is in the affected range (prereleases included)."""
        return self.affected.contains(str(version), prereleases=True)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "component": self.component, "affected": str(self.affected),
                "fixed": self.fixed, "severity": self.severity, "symptom": self.symptom,
                "gpus": self.gpus, "source": list(self.source)}


@dataclass(frozen=True)
class RequireCuda:
    """An image set's ``NVIDIA_REQUIRE_CUDA``: ``cuda>=X.Y`` and the driver branches its brand
    clauses list (``brand=tesla,driver>=535,driver<536 ...``). nvidia-container-cli starts the
    image on a driver whose CUDA is older than X.Y only on one of those branches."""

    cuda: Version  # the cuda>=X.Y part
    branches: tuple[int, ...]
    source: tuple[str, ...]
    note: str = ""  # "unverified for this patch: ..." where it was read in another patch's image


@dataclass(frozen=True)
class BaseImages:
    cuda: Version
    os: tuple[str, ...]
    flavours: tuple[str, ...]
    cudnn: str | None
    cudnn_os: tuple[str, ...] | None
    removed: bool
    source: tuple[str, ...]
    repository: str | None = None  # this set's own repository (a team's internal images)
    platforms: tuple[str, ...] = ("linux/amd64",)  # the platforms NVIDIA builds this set for
    require_cuda: RequireCuda | None = None  # its NVIDIA_REQUIRE_CUDA, where the matrix records it

    def tag(self, flavour: str, os_name: str, *, cudnn: bool = True) -> str:
        """nvidia/cuda's tag: 12.1.1-cudnn8-runtime-ubuntu22.04 (cudnn) or 12.1.1-runtime-ubuntu22.04."""
        cudnn_part = self.cudnn if cudnn and flavour != "base" and (
            self.cudnn_os is None or os_name in self.cudnn_os) else None
        parts = [str(self.cuda)] + ([cudnn_part] if cudnn_part else []) + [flavour, os_name]
        return "-".join(parts)


@lru_cache(maxsize=256)
def _cuda_majors(cuda: tuple[str, ...]) -> frozenset[int]:
    # asked for every candidate of every search; the same few tuples each time
    return frozenset(Version(c).major for c in cuda)


@dataclass(frozen=True)
class NcclRelease:
    version: Version
    cuda: tuple[str, ...]
    source: tuple[str, ...]
    released: str | None = None  # first upload of its nvidia-nccl-cuNN wheels, ISO

    @property
    def cuda_majors(self) -> frozenset[int]:
        return _cuda_majors(self.cuda)


@dataclass(frozen=True)
class OsPython:
    version: str
    packages: tuple[str, ...]
    repo: str
    devel: tuple[str, ...] = ()  # the builder's Python headers, when not python{X.Y}-dev

    @property
    def ppa(self) -> str | None:
        return self.repo if self.repo.startswith("ppa:") else None


@dataclass(frozen=True)
class OsInfo:
    name: str
    family: str
    image: str
    codename: str | None
    python_default: str
    python: Mapping[str, OsPython]
    source: tuple[str, ...]

    @property
    def package_manager(self) -> str:
        """apt (Debian, Ubuntu) or dnf (Rocky Linux, Red Hat's UBI)."""
        return "dnf" if self.family in ("rockylinux", "ubi") else "apt"

    @property
    def sort_key(self) -> tuple[Any, ...]:
        # ubuntu24.04 > ubuntu22.04; debian sorts beside ubuntu by version
        num = self.name[len(self.family):]
        return (Version(num), self.family)


@dataclass(frozen=True)
class TorchVariant:
    name: str
    nccl: Version | None
    nccl_package: str | None
    arch: tuple[str, ...]
    cuda_toolkit: Version | None = None  # the wheel's Requires-Dist cuda-toolkit==X.Y.Z pin
    platforms: tuple[str, ...] = ("linux/amd64",)  # the platforms this variant has wheels for
    # platforms whose wheels of this variant are on PyTorch's index only: PyPI's files for them
    # are another build (torch 2.8-2.10 on aarch64: CPU-only on PyPI, CUDA on download.pytorch.org)
    index_only: tuple[str, ...] = ()
    # another platform's architecture list where it differs from ``arch`` (the amd64 build's)
    platform_arch: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    source: tuple[str, ...] = ()  # the variant's own source (its facts beyond the release's)

    def arch_for(self, platform: str) -> tuple[str, ...]:
        """The GPU architectures the build for ``platform`` carries."""
        return self.platform_arch.get(platform, self.arch)

    @property
    def cuda(self) -> str | None:
        if self.name == "cpu":
            return None
        digits = self.name[2:]
        return f"{digits[:-1]}.{digits[-1]}"


@dataclass(frozen=True)
class TorchRelease:
    version: Version
    line: str
    python: tuple[str, ...]
    variants: Mapping[str, TorchVariant]
    pypi_default: str | None
    source: tuple[str, ...]
    released: str | None = None  # upload date on PyPI, ISO
    python_ft: tuple[str, ...] = ()  # free-threaded CPythons with wheels ("3.14t": cp314t)


def free_threaded(python: str) -> bool:
    """'3.14t' is the free-threaded CPython 3.14 (wheel tag cp314t), a Python value of its own."""
    return python.endswith("t")


def python_key(python: str) -> tuple[Version, bool]:
    """Sort key of a Python value: 3.14 < 3.14t < 3.15."""
    return (Version(python.rstrip("t")), free_threaded(python))


@dataclass(frozen=True)
class ComponentRelease:
    component: str  # the name of one of the matrix's components
    version: Version
    line: str
    requires: Mapping[str, SpecifierSet]
    source: tuple[str, ...]
    released: str | None = None  # upload date on PyPI, ISO


@dataclass(frozen=True)
class ImportNeed:
    """What some releases of a component need at import time (its file's ``imports:``): a torch
    or Python range, apart from what they declare for installing (``requires:``)."""

    versions: SpecifierSet  # the releases it applies to
    requires: Mapping[str, SpecifierSet]  # torch, python
    reason: str
    source: tuple[str, ...]
    derived: str | None = None  # how `matrix refresh` derived it, where it did

    def applies(self, version: Version) -> bool:
        return self.versions.contains(version, prereleases=True)


@dataclass(frozen=True)
class ToolchainNeed:
    """What some releases of a component need of the OS's toolchain to build (``toolchain:``)."""

    versions: SpecifierSet
    gcc: SpecifierSet  # the host GCC majors it builds with
    reason: str
    source: tuple[str, ...]

    def applies(self, version: Version) -> bool:
        return self.versions.contains(version, prereleases=True)


@dataclass(frozen=True)
class TorchApi:
    """A torch API and the releases that added or removed it (torch.yaml ``apis:``)."""

    api: str  # torch.library.custom_op
    added: Version | None
    removed: Version | None
    source: tuple[str, ...]


@dataclass(frozen=True)
class Op:
    """One op a component can pre-build at install time (its file's ``ops:``)."""

    name: str  # e.g. fused_adam
    env: str  # the build variable that asks for it
    cuda: bool  # needs nvcc (False: a CPU op, g++ only)
    module: str | None  # the extension module that loads it (what verify imports)
    source: tuple[str, ...]


@dataclass(frozen=True)
class Component:
    """One component of the matrix: its identity, releases, rules and how it compiles (its file,
    ``matrices/<name>.yaml``; core.catalog reads the identity line alone)."""

    name: str
    tag: str  # the part that names its version in targets and image tags
    title: str  # its name in sentences and image descriptions
    order: int  # the resolver's and the plan's order (torch 0; the team's layers 80, 90)
    checks: str  # what verify checks of it (verify's help)
    compiles: Compiles | None  # how it compiles against torch (None: it does not)
    releases: tuple[ComponentRelease, ...]  # newest first
    ops: Mapping[str, Op] = field(default_factory=dict)  # the ops it can pre-build
    ops_default: tuple[str, ...] | None = None  # None: it has no ops; else a CUDA target's default
    ops_default_source: tuple[str, ...] = ()
    # CUDA majors in which its build accepts an nvcc of another minor than torch's CUDA; None:
    # no such check (outside them nvcc must be torch's exact minor)
    minor_mismatch_majors: tuple[int, ...] | None = None
    minor_mismatch_source: tuple[str, ...] = ()
    legacy: str | None = None  # why the component is legacy (its file's legacy:)
    legacy_source: tuple[str, ...] = ()
    source: tuple[str, ...] = ()
    imports: tuple[ImportNeed, ...] = ()  # import-time needs of some releases
    toolchain: tuple[ToolchainNeed, ...] = ()  # OS toolchain needs of some releases
    ops_default_cpu: tuple[str, ...] = ()  # a cpu target's default ops (component line)

    @property
    def has_ops(self) -> bool:
        return self.ops_default is not None

    @property
    def ops_key(self) -> str:
        """Its pre-built ops' key in stack.json, plans and diffs."""
        return f"{self.name}_ops"

    @property
    def ops_option(self) -> str:
        """The option that names its ops to pre-build (``--<tag>-ops``)."""
        return f"{self.tag}_ops"

    def compiled(self, ops: tuple[str, ...]) -> bool:
        """It compiles in a stack that carries it with ``ops`` pre-built."""
        c = self.compiles
        return c is not None and (c.when == "always" or bool(ops))

    def op_modules(self) -> dict[str, str]:
        """Each op's extension module (the ones that have one), as verify checks it."""
        return {n: o.module for n, o in self.ops.items() if o.module}


@dataclass(frozen=True)
class Incompatibility:
    id: str
    when: Mapping[str, SpecifierSet | str]  # os is matched by name, the rest by specifier
    reason: str
    fix: str
    severity: str
    source: tuple[str, ...]


FLAVOURS = ("cuda-base", "cuda-runtime", "cudnn-runtime", "os")


@dataclass(frozen=True)
class Flavour:
    """A kind of runtime base image (toolchains.yaml ``flavours``), in order of preference."""

    name: str  # cuda-base | cuda-runtime | cudnn-runtime | os
    nvidia_tag: str | None  # the nvidia/cuda tag flavour (base, runtime); None: a plain OS image
    cudnn: bool  # the tag with the cuDNN infix
    forward_compat: bool  # carries NVIDIA's cuda-compat package (forward compatibility)
    env: Mapping[str, str]  # set in the runtime image (the os flavour: NVIDIA container variables)
    description: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class GccRange:
    """The host GCC majors nvcc of a CUDA range accepts (crt/host_config.h)."""

    cuda: SpecifierSet
    gcc_max: int
    gcc_min: int | None
    source: tuple[str, ...]


@dataclass(frozen=True)
class BuilderToolkit:
    """A CUDA toolkit (nvcc) a builder stage on a plain OS image can install."""

    os: str  # an OS name, or "*" for any
    cuda: Version
    install: str  # apt | pip
    apt_components: tuple[str, ...]
    packages: tuple[str, ...]
    cuda_home: str
    gcc_max: int | None  # the distribution's own cap when it differs from NVIDIA's
    source: tuple[str, ...]

    @property
    def minor(self) -> str:
        return minor(self.cuda)


@dataclass(frozen=True)
class HostCompilers:
    os: str
    default: int
    packages: Mapping[int, tuple[str, ...]]  # GCC major -> apt packages (gcc-N, g++-N)
    source: tuple[str, ...]


@dataclass(frozen=True)
class CpuIsa:
    name: str  # x86-64-v3: a -march value every node of the fleet runs
    simd: str  # the SIMD width pre-built CPU ops compile for at that ISA
    source: tuple[str, ...]


@dataclass(frozen=True)
class Toolchains:
    flavours: tuple[Flavour, ...]  # in order of preference
    nvcc_host_gcc: tuple[GccRange, ...]
    builder_toolkits: tuple[BuilderToolkit, ...]
    host_compilers: Mapping[str, HostCompilers]
    cpu_isas: Mapping[str, CpuIsa]

    def flavour(self, name: str) -> Flavour:
        for f in self.flavours:
            if f.name == name:
                return f
        raise KeyError(name)

    def gcc_range(self, cuda: Version) -> GccRange | None:
        for r in self.nvcc_host_gcc:
            if r.cuda.contains(cuda, prereleases=True):
                return r
        return None

    def toolkits_for_os(self, os_name: str) -> list[BuilderToolkit]:
        """Toolkits a plain-OS builder can install, newest first."""
        found = [t for t in self.builder_toolkits if t.os in (os_name, "*")]
        return sorted(found, key=lambda t: t.cuda, reverse=True)


@dataclass(frozen=True)
class TargetAlias:
    name: str
    target: str
    description: str
    flavour: str | None = None  # options the alias carries (a target string cannot say them)
    ops: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # <tag>_ops -> ops to pre-build


@dataclass(frozen=True)
class Matrix:
    path: Path
    digest: str
    toolkits: tuple[Toolkit, ...]  # newest first
    minor_compat: Mapping[int, MinorCompat]
    base_repository: str
    base_images: tuple[BaseImages, ...]
    nccl: tuple[NcclRelease, ...]  # newest first
    os: Mapping[str, OsInfo]
    torch_index: str
    torch: tuple[TorchRelease, ...]  # newest first
    components: tuple[Component, ...]  # by name
    incompatibilities: tuple[Incompatibility, ...]
    targets: tuple[TargetAlias, ...]
    toolchains: Toolchains
    extra: Mapping[str, Any] = field(default_factory=dict)
    overlay_path: Path | None = None  # a team's overlay folder on top of ``path``
    overlay: tuple[Mapping[str, Any], ...] = ()  # what it added or replaced (_apply_overlay)
    driver_branches: tuple[DriverBranch, ...] = ()  # newest branch first
    advisories: tuple[Advisory, ...] = ()
    torch_apis: tuple[TorchApi, ...] = ()  # torch.yaml apis: (import-time needs are read against them)

    # -- lookups ---------------------------------------------------------------------------
    def toolkits_for(self, cuda_minor: str) -> list[Toolkit]:
        return [t for t in self.toolkits if t.minor == cuda_minor]

    @cached_property
    def cuda_minors(self) -> list[str]:
        seen: list[str] = []
        for t in self.toolkits:
            if t.minor not in seen:
                seen.append(t.minor)
        return seen

    def base_images_for(self, toolkit: Version, os_name: str | None = None) -> BaseImages | None:
        """The image set for a toolkit (on one OS when ``os_name`` is given)."""
        found = self._base_images_by_cuda.get(toolkit, [])
        if os_name is not None:
            found = [b for b in found if os_name in b.os] or found[:0]
        return found[0] if found else None

    def base_image_oses(self, toolkit: Version) -> list[str]:
        return [o for b in self.base_images if b.cuda == toolkit for o in b.os]

    def nccl_release(self, version: Version) -> NcclRelease | None:
        return self._nccl_by_version.get(version)

    # the resolver asks these for every candidate: indexed once per Matrix (equal Versions
    # hash equal, so a lookup finds what a scan with == found, the first in matrix order)
    @cached_property
    def _base_images_by_cuda(self) -> dict[Version, list[BaseImages]]:
        out: dict[Version, list[BaseImages]] = {}
        for b in self.base_images:
            out.setdefault(b.cuda, []).append(b)
        return out

    @cached_property
    def _nccl_by_version(self) -> dict[Version, NcclRelease]:
        out: dict[Version, NcclRelease] = {}
        for n in self.nccl:
            out.setdefault(n.version, n)
        return out

    def component(self, name: str) -> Component:
        """The component ``name`` (KeyError when the matrix has none of that name)."""
        try:
            return self._components_by_name[name]
        except KeyError:
            raise KeyError(name) from None

    @cached_property
    def _components_by_name(self) -> dict[str, Component]:
        return {c.name: c for c in self.components}

    @cached_property
    def component_names(self) -> tuple[str, ...]:
        """Its components' names, in the order targets, tags and stack.json list them."""
        return tuple(c.name for c in self.components)

    @cached_property
    def plan_order(self) -> tuple[str, ...]:
        """Its components in the order the resolver assigns them and the plan installs them."""
        return tuple(c.name for c in sorted(self.components, key=lambda c: (c.order, c.name)))

    @cached_property
    def ops_component(self) -> dict[str, Component]:
        """The components with pre-built ops, by the option that names them (``<tag>_ops``)."""
        return {c.ops_option: c for c in self.components if c.has_ops}

    @cached_property
    def pythons(self) -> list[str]:
        # the GIL Pythons (the resolver's candidates); free-threaded ones only when pinned
        vs = {p for t in self.torch for p in t.python}
        vs |= {p for o in self.os.values() for p in o.python if not free_threaded(p)}
        return sorted(vs, key=Version, reverse=True)

    @cached_property
    def pythons_ft(self) -> list[str]:
        """The free-threaded Pythons some torch release has wheels for ('3.14t')."""
        return sorted({p for t in self.torch for p in t.python_ft}, key=python_key, reverse=True)

    def alias(self, name: str) -> TargetAlias | None:
        for t in self.targets:
            if t.name == name:
                return t
        return None


# -- loading -------------------------------------------------------------------------------

MAX_FILE_BYTES = 2 << 20  # the built-in files are a few KB each
MAX_STRING_CHARS = 4096  # any one value (a URL, a reason); rendered fields stay small


# libyaml's C parser when PyYAML was built with it (several times faster), else pure Python.
# Either way the constructor is Python, so the duplicate-key refusal below applies to both; the
# alias refusal is done on the composed node graph (_no_aliases), which the C composer builds.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_Mixin: Any = object  # typed as Any: the methods it calls come from the loader it is mixed into


class _UniqueKeys(_Mixin):  # type: ignore[misc,valid-type]
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last) and
    any alias (``*name``): alias expansion is how a 16 KB file becomes gigabytes ("billion
    laughs"), and a matrix has no use for it."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        # the pure-Python composer only (the C one composes in C): refuse at the alias itself
        if self.check_event(yaml.events.AliasEvent):
            ev = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in matrix files: write the value "
                            "out", ev.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


class _UniqueKeyLoader(_UniqueKeys, _BaseLoader):  # type: ignore[misc,valid-type]
    """libyaml's parser and composer when available."""


class _PyUniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):  # type: ignore[misc]
    """The pure-Python variant (used when libyaml is absent, and by the tests)."""


def _no_aliases(node: Any) -> None:
    """Refuse a node graph in which a node is reached twice: that is an alias (``*name``).
    Stops at the second visit, so a "billion laughs" graph is never expanded."""
    seen: set[int] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in matrix files: write the value "
                            "out", n.start_mark)
        seen.add(id(n))
        if isinstance(n, yaml.SequenceNode):
            todo.extend(n.value)
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                todo.extend((k, v))


def _load_yaml(text: str, loader_cls: Any = None) -> Any:
    """One YAML document with the refusals of _UniqueKeyLoader (duplicate keys, aliases)."""
    loader = (loader_cls or _UniqueKeyLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _no_aliases(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _read_text(path: Path) -> str:
    """A matrix file's text, within the size limit (no parsing), through the one capped
    reader (a FIFO or a device in its place is refused without blocking)."""
    from envbuilder.core.readfile import read_text_capped

    if not path.exists() and not path.is_symlink():
        raise MatrixError(f"matrix file {path} is missing: a matrix folder needs "
                          f"{', '.join(sorted(schema.FILES))}")
    text = read_text_capped(path, "matrix file", limit=MAX_FILE_BYTES, error=MatrixError)
    if "\x00" in text:
        raise MatrixError(f"matrix file {path} holds NUL bytes: not a YAML file")
    return text


def _parse(path: Path, text: str) -> Any:
    try:
        loaded = _load_yaml(text)
        _check_sizes(path, loaded)
        return loaded
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = str(getattr(e, "problem", None) or e)
        problem = problem if len(problem) <= 200 else problem[:200] + "..."
        raise MatrixError(f"matrix file {path}{where} is not valid YAML: {problem}") from None
    except RecursionError:
        raise MatrixError(f"matrix file {path} is nested too deeply") from None


def _check_sizes(path: Path, data: Any, key: str = "") -> None:
    """No single value longer than MAX_STRING_CHARS (it would reach a rendered file)."""
    todo = [(key, data)]
    while todo:
        k, v = todo.pop()
        if isinstance(v, str):
            if len(v) > MAX_STRING_CHARS:
                raise MatrixError(f"matrix file {path}, key {k or '(top level)'}: a value of "
                                  f"{len(v)} characters (at most {MAX_STRING_CHARS})")
        elif isinstance(v, dict):
            todo.extend((f"{k}/{kk}" if k else str(kk), vv) for kk, vv in v.items())
        elif isinstance(v, list):
            todo.extend((f"{k}/{i}", vv) for i, vv in enumerate(v))


def _validate(path: Path, data: Any, file_schema: dict[str, Any]) -> None:
    err = schema.first_error(data, file_schema)
    if err is not None:
        key = "/".join(str(p) for p in err.path) or "(top level)"
        msg = err.message if len(err.message) <= 300 else err.message[:300] + "..."
        raise MatrixError(f"matrix file {path}, key {key}: {msg}")


def _spec(path: Path, key: str, text: str) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise MatrixError(f"matrix file {path}, key {key}: {text!r} is not a version "
                          f"specifier (PEP 440, e.g. '>=2.1,<2.5')") from None


def _dupes(path: Path, key: str, values: Iterable[Any]) -> None:
    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise MatrixError(f"matrix file {path}, key {key}: {v} is listed twice")
        seen.add(v)


# How entries of each list of a matrix file are matched by an overlay (add or replace by key).
OVERLAY_KEYS: dict[tuple[str, str], tuple[str, ...]] = {
    ("cuda.yaml", "toolkits"): ("version",), ("cuda.yaml", "minor_compat"): ("major",),
    ("base_images.yaml", "images"): ("cuda", "os"), ("nccl.yaml", "releases"): ("version",),
    ("os.yaml", "os"): ("name",), ("torch.yaml", "releases"): ("line",),
    ("incompatibilities.yaml", "incompatibilities"): ("id",), ("targets.yaml", "targets"): ("name",),
    ("incompatibilities.yaml", "advisories"): ("id",), ("cuda.yaml", "driver_branches"): ("branch",),
    ("toolchains.yaml", "flavours"): ("name",), ("toolchains.yaml", "nvcc_host_gcc"): ("cuda",),
    ("toolchains.yaml", "builder_toolkits"): ("os", "cuda"),
    ("toolchains.yaml", "host_compilers"): ("os",), ("toolchains.yaml", "cpu_isas"): ("name",),
    ("torch.yaml", "apis"): ("api",),
}
# ... and of a component file's lists
COMPONENT_OVERLAY_KEYS: dict[str, tuple[str, ...]] = {"releases": ("line",), "ops": ("name",),
                                                      "imports": ("versions",), "toolchain": ("versions",)}


def _overlay_fields(name: str, key: str) -> tuple[str, ...] | None:
    if name in schema.FILES:
        return OVERLAY_KEYS.get((name, key))
    return COMPONENT_OVERLAY_KEYS.get(key)


def _file_schema(name: str) -> dict[str, Any]:
    return schema.FILES.get(name, schema.COMPONENT)


def load_matrix(path: str | Path | None = None, overlay: str | Path | None = None) -> Matrix:
    """Load and validate a matrix folder (the built-in one when ``path`` is None), with a
    team's ``overlay`` folder on top (see ``_apply_overlay``).

    The files are always read and digested (the overlay's too: it is part of the digest, so
    of the cache key); the parsed, validated ``Matrix`` is kept in the user's cache folder per
    digest (core/matrix_cache.py), so a second call with the same files skips YAML parsing and
    schema validation.
    """
    from envbuilder.core import matrix_cache

    root = Path(path) if path is not None else matrices_dir()
    if not root.is_dir():
        shown = str(root) if len(str(root)) <= 200 else str(root)[:200] + "..."
        what = "is not a folder" if root.exists() else "does not exist"
        raise MatrixError(f"matrix folder {shown} {what}: pass --matrix DIR with a "
                          f"folder holding {', '.join(sorted(schema.FILES))}")
    texts: dict[str, str] = {}
    digest = hashlib.sha256()
    for name in _file_names(root):
        text = _read_text(root / name)
        texts[name] = text
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    over_root = Path(overlay) if overlay is not None else None
    over_texts = _read_overlay(over_root, digest) if over_root is not None else {}
    hexdigest = "sha256:" + digest.hexdigest()
    key = (hexdigest, root, over_root)
    seen = None if matrix_cache.disabled() else _LOADED.get(key)
    if seen is not None:  # the same files, already loaded by this process (render --all)
        return seen
    cached = matrix_cache.load(hexdigest)
    if cached is not None:
        return _keep(key, replace(cached, path=root, overlay_path=over_root))
    raw: dict[str, Any] = {}
    for name in texts:
        data = _parse(root / name, texts[name])
        _validate(root / name, data, _file_schema(name))
        raw[name] = data
    entries: list[dict[str, Any]] = []
    if over_root is not None:
        for name, text in over_texts.items():
            entries += _apply_overlay(over_root / name, _parse(over_root / name, text), raw, name)
    m = _build(root, raw, hexdigest)
    if over_root is not None:
        m = replace(m, overlay_path=over_root, overlay=tuple(entries))
    matrix_cache.store(m, raw, entries)
    return _keep(key, m)


def load_floors(path: str | Path | None = None) -> Any:
    """The bandwidth floors (``matrices/bandwidth.yaml``, schema ``schema.BANDWIDTH``) of the
    matrix folder ``path``, or of the built-in matrix when ``path`` is None or has no such file
    (a team's matrix folder may leave it out): a ``core.floors.Floors``."""
    from envbuilder.core import floors

    root = Path(path) if path is not None else matrices_dir()
    file = root / schema.BANDWIDTH_FILE
    if not file.exists() and path is not None:
        file = matrices_dir() / schema.BANDWIDTH_FILE
    data = _parse(file, _read_text(file))
    _validate(file, data, schema.BANDWIDTH)
    return floors.build(data, file)


def _file_names(root: Path) -> list[str]:
    """The matrix folder's files: the core files, then its components' (core.catalog)."""
    return sorted(schema.FILES) + [p.name for p in catalog.component_files(root) if catalog.check_name(p)]


def _read_overlay(over_root: Path, digest: Any) -> dict[str, str]:
    """The overlay folder's matrix files (name -> text), added to ``digest``."""
    if not over_root.is_dir():
        raise MatrixError(f"matrix overlay {str(over_root)[:200]} is not a folder: pass "
                          f"--matrix-overlay DIR with some of {', '.join(sorted(schema.FILES))}")
    for f in sorted(over_root.iterdir()):
        if f.suffix == ".yml":
            raise MatrixError(f"matrix overlay file {f}: name it {f.stem}.yaml (a matrix file name: one "
                              f"of {', '.join(sorted(schema.FILES))}, or a component's <name>.yaml)")
    over_texts: dict[str, str] = {}
    for name in _file_names(over_root):
        if name in schema.FILES and not (over_root / name).exists():
            continue
        over_texts[name] = _read_text(over_root / name)
        digest.update(b"overlay\0" + name.encode() + b"\0" + over_texts[name].encode() + b"\0")
    if not over_texts:
        raise MatrixError(f"matrix overlay {over_root} holds none of "
                          f"{', '.join(sorted(schema.FILES))}")
    return over_texts


# the matrices this process loaded, by (digest, folder, overlay folder): a Matrix is frozen, so
# every target of `render --all` or a project shares one (and its version-indexed lookups);
# the files are still read and digested on every call, so an edited file is a new entry
_LOADED: dict[tuple[str, Path, Path | None], Matrix] = {}


def _keep(key: tuple[str, Path, Path | None], m: Matrix) -> Matrix:
    from envbuilder.core import matrix_cache

    if matrix_cache.disabled():  # ENVBUILDER_NO_CACHE=1: every call loads the files anew
        return m
    if len(_LOADED) >= 16:  # a long-lived program that loads many matrices keeps the last few
        _LOADED.pop(next(iter(_LOADED)))
    _LOADED[key] = m
    return m


def _shown(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 80 else r[:80] + "..."


def _overlay_key(entry: dict[str, Any], fields: tuple[str, ...]) -> str:
    return ", ".join(f"{f}={'/'.join(map(str, v)) if isinstance(v, list) else v}"
                     for f in fields for v in [entry.get(f)])


def _apply_overlay(path: Path, data: Any, raw: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Merge one overlay file into the built-in file's data ``raw[name]``: every list entry
    replaces the built-in entry with the same key (OVERLAY_KEYS; base images per CUDA version
    and OS) or is added; top-level values replace the built-in ones. The overlay file has the
    built-in file's schema (partial lists allowed); each entry must name its ``source:``
    (targets.yaml entries have none). Returns what it did, for stack.json and resolve."""
    if not isinstance(data, dict):
        raise MatrixError(f"matrix overlay file {path}: expected a mapping of keys (as in the "
                          f"built-in {name})")
    if name not in raw:  # a component of the team's own: the whole file
        _validate(path, data, schema.COMPONENT)
        raw[name] = data
        src = data.get("source")
        return [{"file": name, "key": "component", "entry": f"name={Path(name).stem}", "action": "added",
                 "overlay": str(path), "source": [src] if isinstance(src, str) else list(src or [])}]
    base = raw[name]
    merged = dict(base)
    done: list[dict[str, Any]] = []
    for key, value in data.items():
        fields = _overlay_fields(name, key)
        if fields is None or not isinstance(value, list):
            merged[key] = value
            continue
        items = list(base.get(key, []))
        for i, entry in enumerate(value):
            if not isinstance(entry, dict):  # a scalar would be dropped, never checked
                raise MatrixError(f"matrix overlay file {path}, key {key}/{i}: {_shown(entry)} "
                                  f"is not an entry: each entry is a mapping of keys, as in the "
                                  f"built-in {name}")
            if name != "targets.yaml" and "source" not in entry:
                raise MatrixError(f"matrix overlay file {path}, key {key}/{i}: every overlay "
                                  f"entry needs a source: (where the fact comes from)")
            action = "added"
            if name == "base_images.yaml":  # replace per (CUDA version, OS)
                mine = set(entry.get("os", []))
                kept = []
                for b in items:
                    if str(b.get("cuda")) == str(entry.get("cuda")) and mine & set(b.get("os", [])):
                        action = "replaced"
                        rest = [o for o in b["os"] if o not in mine]
                        if rest:
                            kept.append({**b, "os": rest})
                    else:
                        kept.append(b)
                items = kept
            else:
                k = _overlay_key(entry, fields)
                n = len(items)
                items = [b for b in items if _overlay_key(b, fields) != k]
                action = "replaced" if len(items) < n else "added"
            items.append(entry)
            src = entry.get("source")
            done.append({"file": name, "key": key, "entry": _overlay_key(entry, fields),
                         "action": action, "overlay": str(path),
                         "source": [src] if isinstance(src, str) else list(src or [])})
        merged[key] = items
    _validate(path, merged, _file_schema(name))
    raw[name] = merged
    return done


def _build(root: Path, raw: dict[str, Any], digest: str) -> Matrix:
    cuda = raw["cuda.yaml"]
    toolkits = tuple(sorted(
        (Toolkit(Version(t["version"]), t["driver_min"], _sources(t["source"]),
                 _released(t, t["version"]))
         for t in cuda["toolkits"]), key=lambda t: t.version, reverse=True))
    _dupes(root / "cuda.yaml", "toolkits", (t.version for t in toolkits))
    compat = {c["major"]: MinorCompat(c["major"], c["driver_min"], _sources(c["source"]))
              for c in cuda.get("minor_compat", [])}

    bi = raw["base_images.yaml"]
    base_images = tuple(
        BaseImages(Version(b["cuda"]), tuple(b["os"]), tuple(b["flavours"]), b.get("cudnn"),
                   tuple(b["cudnn_os"]) if "cudnn_os" in b else None,
                   bool(b.get("removed", False)), _sources(b["source"]), b.get("repository"),
                   tuple(b.get("platforms", ("linux/amd64",))), _require_cuda(b.get("require_cuda")))
        for b in bi["images"])
    _dupes(root / "base_images.yaml", "images", (f"{b.cuda} on {o}" for b in base_images for o in b.os))

    nccl = tuple(sorted((NcclRelease(Version(n["version"]), tuple(n["cuda"]), _sources(n["source"]),
                                     _released(n, str(n["version"])))
                         for n in raw["nccl.yaml"]["releases"]),
                        key=lambda n: n.version, reverse=True))
    _dupes(root / "nccl.yaml", "releases", (n.version for n in nccl))

    oses: dict[str, OsInfo] = {}
    for o in raw["os.yaml"]["os"]:
        if not o["name"].startswith(o["family"]):
            raise MatrixError(f"matrix file {root / 'os.yaml'}, key os/{o['name']}: the name "
                              f"must start with its family {o['family']!r}")
        py = {k: OsPython(k, tuple(v["packages"]), v["repo"], tuple(v.get("devel", ())))
              for k, v in o["python"].items()}
        if o["python_default"] not in py:
            raise MatrixError(f"matrix file {root / 'os.yaml'}, key os/{o['name']}/python_default:"
                              f" {o['python_default']} is not among its python entries")
        oses[o["name"]] = OsInfo(o["name"], o["family"], o["image"], o.get("codename"),
                                 o["python_default"], py, _sources(o["source"]))

    tdata = raw["torch.yaml"]
    releases: list[TorchRelease] = []
    for i, r in enumerate(tdata["releases"]):
        variants = {
            name: TorchVariant(name, Version(v["nccl"]) if v.get("nccl") else None,
                               v.get("nccl_package"), tuple(v.get("arch", ())),
                               Version(v["cuda_toolkit"]) if v.get("cuda_toolkit") else None,
                               tuple(v.get("platforms", ("linux/amd64",))),
                               tuple(v.get("index_only", ())),
                               {p: tuple(a) for p, a in v.get("platform_arch", {}).items()},
                               _sources(v.get("source")))
            for name, v in r["variants"].items()}
        for ver in r["versions"]:
            v = Version(ver)
            if minor(v) != r["line"]:
                raise MatrixError(f"matrix file {root / 'torch.yaml'}, key releases/{i}/versions:"
                                  f" {ver} is not in line {r['line']}")
            releases.append(TorchRelease(v, r["line"], tuple(r["python"]), variants,
                                         r.get("pypi_default"), _sources(r["source"]),
                                         _released(r, ver), tuple(r.get("python_ft", ()))))
    releases.sort(key=lambda t: t.version, reverse=True)
    _dupes(root / "torch.yaml", "releases", (t.version for t in releases))

    incompat = []
    for i, x in enumerate(raw["incompatibilities.yaml"]["incompatibilities"]):
        when: dict[str, SpecifierSet | str] = {}
        for axis, s in x["when"].items():
            when[axis] = s if axis == "os" else _spec(
                root / "incompatibilities.yaml", f"incompatibilities/{i}/when/{axis}", s)
        incompat.append(Incompatibility(x["id"], when, x["reason"], x["fix"],
                                        x.get("severity", "error"), _sources(x["source"])))
    _dupes(root / "incompatibilities.yaml", "incompatibilities", (x.id for x in incompat))

    targets = tuple(TargetAlias(t["name"], t.get("target", t["name"]), t.get("description", ""),
                                t.get("flavour"), {k: tuple(v) for k, v in t.items() if k.endswith("_ops")})
                    for t in raw["targets.yaml"]["targets"])
    _dupes(root / "targets.yaml", "targets", (t.name for t in targets))
    _no_alias_cycles(root / "targets.yaml", targets)
    index = tdata.get("index", "https://download.pytorch.org/whl/{variant}")
    _check_index(root / "torch.yaml", index)

    branches = tuple(sorted(
        (DriverBranch(int(b["branch"]), b["designation"], b["eol"], b.get("max_cuda_major"),
                      _sources(b["source"])) for b in cuda.get("driver_branches", [])),
        key=lambda b: b.branch, reverse=True))
    _dupes(root / "cuda.yaml", "driver_branches", (b.branch for b in branches))
    advisories = []
    for i, x in enumerate(raw["incompatibilities.yaml"].get("advisories", [])):
        advisories.append(Advisory(
            x["id"], x["component"], _spec(root / "incompatibilities.yaml", f"advisories/{i}/affected",
                                           x["affected"]),
            None if x.get("fixed") is None else str(x["fixed"]), x["severity"], x["symptom"],
            _sources(x["source"]), x.get("gpus")))
    _dupes(root / "incompatibilities.yaml", "advisories", (x.id for x in advisories))

    apis = tuple(TorchApi(a["api"], Version(a["added"]) if a.get("added") else None,
                          Version(a["removed"]) if a.get("removed") else None, _sources(a["source"]))
                 for a in tdata.get("apis", ()))
    _dupes(root / "torch.yaml", "apis", (a.api for a in apis))
    components = tuple(_component(root / name, data) for name, data in sorted(raw.items())
                       if name not in schema.FILES)
    _check_components(root, components, incompat, advisories, targets)
    return Matrix(
        driver_branches=branches, advisories=tuple(advisories), torch_apis=apis,
        toolchains=_toolchains(root / "toolchains.yaml", raw["toolchains.yaml"], oses),
        path=root, digest=digest, toolkits=toolkits, minor_compat=compat,
        base_repository=bi.get("repository", "nvidia/cuda"), base_images=base_images,
        nccl=nccl, os=oses, torch_index=index,
        torch=tuple(releases), components=components,
        incompatibilities=tuple(incompat), targets=targets,
    )


def _component(path: Path, data: Mapping[str, Any]) -> Component:
    """One component file's data (checked against schema.COMPONENT) as a Component."""
    name = path.stem
    rels: list[ComponentRelease] = []
    for i, r in enumerate(data["releases"]):
        req = {k: _spec(path, f"releases/{i}/requires/{k}", s) for k, s in r["requires"].items()}
        for ver in r["versions"]:
            rels.append(ComponentRelease(name, Version(ver), r["line"], req, _sources(r["source"]),
                                         _released(r, ver)))
    rels.sort(key=lambda c: c.version, reverse=True)
    _dupes(path, "releases", (c.version for c in rels))
    ops = {o["name"]: Op(o["name"], o["env"], o["cuda"], o.get("module"), _sources(o["source"]))
           for o in data.get("ops", ())}
    _dupes(path, "ops", (o["name"] for o in data.get("ops", ())))
    ident, mm, lg = data["component"], data.get("cuda_minor_mismatch"), data.get("legacy")
    default = None if "ops_default" not in ident else tuple(ident["ops_default"])
    default_cpu = tuple(ident.get("ops_default_cpu", ()))
    for key, names in (("ops_default", default or ()), ("ops_default_cpu", default_cpu)):
        unknown = [o for o in names if o not in ops]
        if unknown:
            raise MatrixError(f"matrix file {path}, key component/{key}: {unknown[0]} is not one of "
                              f"its ops ({', '.join(ops) or 'none'})")
    comp = data.get("compiles")
    imports = tuple(ImportNeed(
        _spec(path, f"imports/{i}/versions", x["versions"]),
        {k: _spec(path, f"imports/{i}/requires/{k}", v) for k, v in x["requires"].items()},
        x["reason"], _sources(x["source"]), x.get("derived"))
        for i, x in enumerate(data.get("imports", ())))
    toolchain = tuple(ToolchainNeed(
        _spec(path, f"toolchain/{i}/versions", x["versions"]), _spec(path, f"toolchain/{i}/gcc", x["gcc"]),
        x["reason"], _sources(x["source"])) for i, x in enumerate(data.get("toolchain", ())))
    return Component(
        name, ident["tag"], ident["title"], ident["order"], ident["checks"],
        None if comp is None else parse_compiles(comp, f"matrix file {path}, key compiles"),
        tuple(rels), ops, default, _sources(data.get("ops_default_source")),
        None if mm is None else tuple(int(x) for x in mm["majors"]),
        () if mm is None else _sources(mm["source"]),
        None if lg is None else f"{lg['reason']} (since {lg['since']})",
        () if lg is None else _sources(lg["source"]), _sources(data.get("source")), imports, toolchain,
        default_cpu)


def _require_cuda(data: Mapping[str, Any] | None) -> RequireCuda | None:
    if data is None:
        return None
    return RequireCuda(Version(data["cuda"]), tuple(int(b) for b in data["branches"]), _sources(data["source"]),
                       data.get("note", ""))


def _check_components(root: Path, components: tuple[Component, ...], incompat: list[Incompatibility],
                      advisories: list[Advisory], targets: tuple[TargetAlias, ...]) -> None:
    """What the schema cannot say about the components: tags that tell them apart in a target,
    and breakages, advisories and aliases that name them."""
    tags: dict[str, str] = {"torch": "torch", "py": "python", "nccl": "nccl"}
    for c in components:
        if c.tag in tags:
            raise MatrixError(f"matrix file {root / (c.name + '.yaml')}, key component/tag: {c.tag!r} is "
                              f"{tags[c.tag]}'s already: give each component a tag of its own")
        tags[c.tag] = c.name
    names = {c.name for c in components}
    for x in incompat:
        bad = [ax for ax in x.when if ax not in schema.CORE_AXES and ax not in names]
        if bad:
            raise MatrixError(f"matrix file {root / 'incompatibilities.yaml'}, key {x.id}/when: {bad[0]} is "
                              f"not an axis (axes: {', '.join((*schema.CORE_AXES, *sorted(names)))})")
    for adv in advisories:
        if adv.component not in ("torch", "nccl", "cuda", "cublas", "driver") and adv.component not in names:
            raise MatrixError(f"matrix file {root / 'incompatibilities.yaml'}, key {adv.id}/component: "
                              f"{adv.component} is not a component of the matrix")
    ops_options = {c.ops_option: c for c in components if c.has_ops}
    for t in targets:
        for key, ops in t.ops.items():
            owner = ops_options.get(key)
            if owner is None or any(o not in owner.ops for o in ops):
                raise MatrixError(f"matrix file {root / 'targets.yaml'}, key {t.name}/{key}: not the ops of a "
                                  f"component ({', '.join(ops_options) or 'none has ops'})")


def _released(entry: Mapping[str, Any], version: str) -> str | None:
    """An entry's upload date for one of its versions: ``released:`` is one date (an entry of
    one version) or a mapping version -> date (an entry listing several)."""
    r = entry.get("released")
    if isinstance(r, dict):
        v = r.get(version)
        return None if v is None else str(v)
    return None if r is None else str(r)


def _toolchains(path: Path, data: dict[str, Any], oses: Mapping[str, OsInfo]) -> Toolchains:
    flavours = tuple(Flavour(f["name"], f["nvidia_tag"], f["cudnn"], f["forward_compat"],
                             dict(f.get("env", {})), f["description"], _sources(f["source"]))
                     for f in data["flavours"])
    _dupes(path, "flavours", (f.name for f in flavours))
    gcc = tuple(GccRange(_spec(path, f"nvcc_host_gcc/{i}/cuda", r["cuda"]), r["gcc_max"],
                         r.get("gcc_min"), _sources(r["source"]))
                for i, r in enumerate(data["nvcc_host_gcc"]))
    tks = tuple(BuilderToolkit(t["os"], Version(t["cuda"]), t["install"],
                               tuple(t.get("apt_components", ())), tuple(t["packages"]),
                               t["cuda_home"], t.get("gcc_max"), _sources(t["source"]))
                for t in data["builder_toolkits"])
    for i, t in enumerate(tks):
        if t.os != "*" and t.os not in oses:
            raise MatrixError(f"matrix file {path}, key builder_toolkits/{i}/os: {t.os} is not "
                              f"an OS of os.yaml")
    hc = {h["os"]: HostCompilers(h["os"], h["default"],
                                 {int(k): tuple(v) for k, v in h["packages"].items()},
                                 _sources(h["source"])) for h in data["host_compilers"]}
    isas = {i["name"]: CpuIsa(i["name"], i["simd"], _sources(i["source"])) for i in data["cpu_isas"]}
    return Toolchains(flavours, gcc, tks, hc, isas)


def _no_alias_cycles(path: Path, targets: tuple[TargetAlias, ...]) -> None:
    """An alias may name another alias, but never (through others) itself."""
    by = {t.name: t.target for t in targets}
    for t in targets:
        seen = [t.name]
        cur = t.target
        while cur in by and by[cur] != cur:
            if cur in seen:
                raise MatrixError(f"matrix file {path}, targets/{t.name}: the aliases form a "
                                  f"cycle ({' -> '.join(seen + [cur])}): point one at a real "
                                  f"target such as cu121-torch2.1")
            seen.append(cur)
            cur = by[cur]


def _check_index(path: Path, index: str) -> None:
    """The torch index is a URL with one ``{variant}`` field and nothing else to format."""
    import string

    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(index)
                  if f is not None]
    except ValueError as e:
        raise MatrixError(f"matrix file {path}, key index: {e}: use "
                          f"https://host/path/{{variant}}") from None
    if not fields or any(f != "variant" or spec or conv for f, spec, conv in fields):
        raise MatrixError(f"matrix file {path}, key index: only the field {{variant}} is allowed "
                          f"(no other fields, conversions or widths), e.g. "
                          f"https://download.pytorch.org/whl/{{variant}}")
