"""The compatibility matrix: YAML files in one folder, schema-checked, turned into typed data.

``load_matrix(path)`` reads every file named in ``schema.FILES``, validates it (unknown keys
and missing ``source:`` are errors naming the file and the key), and returns a frozen
``Matrix``. Versions are ``packaging`` versions; specifiers are ``SpecifierSet``s.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from envbuilder.core import schema
from envbuilder.errors import MatrixError
from envbuilder.core.resources import matrices_dir

AXES = ("cuda", "torch", "python", "nccl", "deepspeed", "horovod", "os")


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
class BaseImages:
    cuda: Version
    os: tuple[str, ...]
    flavours: tuple[str, ...]
    cudnn: str | None
    cudnn_os: tuple[str, ...] | None
    removed: bool
    source: tuple[str, ...]

    def tag(self, flavour: str, os_name: str) -> str:
        cudnn = self.cudnn if flavour != "base" and (
            self.cudnn_os is None or os_name in self.cudnn_os) else None
        parts = [str(self.cuda)] + ([cudnn] if cudnn else []) + [flavour, os_name]
        return "-".join(parts)


@dataclass(frozen=True)
class NcclRelease:
    version: Version
    cuda: tuple[str, ...]
    source: tuple[str, ...]

    @property
    def cuda_majors(self) -> frozenset[int]:
        return frozenset(Version(c).major for c in self.cuda)


@dataclass(frozen=True)
class OsPython:
    version: str
    packages: tuple[str, ...]
    repo: str

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


@dataclass(frozen=True)
class ComponentRelease:
    component: str  # "deepspeed" | "horovod"
    version: Version
    line: str
    requires: Mapping[str, SpecifierSet]
    source: tuple[str, ...]


@dataclass(frozen=True)
class Component:
    name: str
    needs_nvcc: bool
    build_env: Mapping[str, str]
    releases: tuple[ComponentRelease, ...]  # newest first


@dataclass(frozen=True)
class Incompatibility:
    id: str
    when: Mapping[str, SpecifierSet | str]  # os is matched by name, the rest by specifier
    reason: str
    fix: str
    severity: str
    source: tuple[str, ...]


@dataclass(frozen=True)
class TargetAlias:
    name: str
    target: str
    description: str


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
    deepspeed: Component
    horovod: Component
    incompatibilities: tuple[Incompatibility, ...]
    targets: tuple[TargetAlias, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)

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
        found = [b for b in self.base_images if b.cuda == toolkit]
        if os_name is not None:
            found = [b for b in found if os_name in b.os] or found[:0]
        return found[0] if found else None

    def base_image_oses(self, toolkit: Version) -> list[str]:
        return [o for b in self.base_images if b.cuda == toolkit for o in b.os]

    def nccl_release(self, version: Version) -> NcclRelease | None:
        for n in self.nccl:
            if n.version == version:
                return n
        return None

    def component(self, name: str) -> Component:
        return self.deepspeed if name == "deepspeed" else self.horovod

    @cached_property
    def pythons(self) -> list[str]:
        vs = {p for t in self.torch for p in t.python}
        vs |= {p for o in self.os.values() for p in o.python}
        return sorted(vs, key=Version, reverse=True)

    def alias(self, name: str) -> TargetAlias | None:
        for t in self.targets:
            if t.name == name:
                return t
        return None


# -- loading -------------------------------------------------------------------------------

class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MatrixError(f"matrix file {path} is missing: a matrix folder needs "
                          f"{', '.join(sorted(schema.FILES))}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise MatrixError(f"cannot read matrix file {path}: {e}") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader), text
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise MatrixError(f"matrix file {path}{where} is not valid YAML: "
                          f"{getattr(e, 'problem', e)}") from None


def _validate(path: Path, data: Any, file_schema: dict[str, Any]) -> None:
    err = schema.first_error(data, file_schema)
    if err is not None:
        key = "/".join(str(p) for p in err.path) or "(top level)"
        raise MatrixError(f"matrix file {path}, key {key}: {err.message}")


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


def load_matrix(path: str | Path | None = None) -> Matrix:
    """Load and validate a matrix folder (the built-in one when ``path`` is None)."""
    root = Path(path) if path is not None else matrices_dir()
    if not root.is_dir():
        raise MatrixError(f"matrix folder {root} does not exist: pass --matrix DIR with a "
                          f"folder holding {', '.join(sorted(schema.FILES))}")
    raw: dict[str, Any] = {}
    digest = hashlib.sha256()
    for name in sorted(schema.FILES):
        data, text = _read(root / name)
        _validate(root / name, data, schema.FILES[name])
        raw[name] = data
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    return _build(root, raw, "sha256:" + digest.hexdigest())


def _build(root: Path, raw: dict[str, Any], digest: str) -> Matrix:
    cuda = raw["cuda.yaml"]
    toolkits = tuple(sorted(
        (Toolkit(Version(t["version"]), t["driver_min"], _sources(t["source"]))
         for t in cuda["toolkits"]), key=lambda t: t.version, reverse=True))
    _dupes(root / "cuda.yaml", "toolkits", (t.version for t in toolkits))
    compat = {c["major"]: MinorCompat(c["major"], c["driver_min"], _sources(c["source"]))
              for c in cuda.get("minor_compat", [])}

    bi = raw["base_images.yaml"]
    base_images = tuple(
        BaseImages(Version(b["cuda"]), tuple(b["os"]), tuple(b["flavours"]), b.get("cudnn"),
                   tuple(b["cudnn_os"]) if "cudnn_os" in b else None,
                   bool(b.get("removed", False)), _sources(b["source"]))
        for b in bi["images"])
    _dupes(root / "base_images.yaml", "images", (f"{b.cuda} on {o}" for b in base_images for o in b.os))

    nccl = tuple(sorted((NcclRelease(Version(n["version"]), tuple(n["cuda"]), _sources(n["source"]))
                         for n in raw["nccl.yaml"]["releases"]),
                        key=lambda n: n.version, reverse=True))
    _dupes(root / "nccl.yaml", "releases", (n.version for n in nccl))

    oses: dict[str, OsInfo] = {}
    for o in raw["os.yaml"]["os"]:
        if not o["name"].startswith(o["family"]):
            raise MatrixError(f"matrix file {root / 'os.yaml'}, key os/{o['name']}: the name "
                              f"must start with its family {o['family']!r}")
        py = {k: OsPython(k, tuple(v["packages"]), v["repo"]) for k, v in o["python"].items()}
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
                               v.get("nccl_package"), tuple(v.get("arch", ())))
            for name, v in r["variants"].items()}
        for ver in r["versions"]:
            v = Version(ver)
            if minor(v) != r["line"]:
                raise MatrixError(f"matrix file {root / 'torch.yaml'}, key releases/{i}/versions:"
                                  f" {ver} is not in line {r['line']}")
            releases.append(TorchRelease(v, r["line"], tuple(r["python"]), variants,
                                         r.get("pypi_default"), _sources(r["source"])))
    releases.sort(key=lambda t: t.version, reverse=True)
    _dupes(root / "torch.yaml", "releases", (t.version for t in releases))

    def component(name: str) -> Component:
        fname = f"{name}.yaml"
        data = raw[fname]
        rels: list[ComponentRelease] = []
        for i, r in enumerate(data["releases"]):
            req = {k: _spec(root / fname, f"releases/{i}/requires/{k}", s)
                   for k, s in r["requires"].items()}
            for ver in r["versions"]:
                rels.append(ComponentRelease(name, Version(ver), r["line"], req,
                                             _sources(r["source"])))
        rels.sort(key=lambda c: c.version, reverse=True)
        _dupes(root / fname, "releases", (c.version for c in rels))
        return Component(name, bool(data.get("needs_nvcc", False)),
                         dict(data.get("build_env", {})), tuple(rels))

    incompat = []
    for i, x in enumerate(raw["incompatibilities.yaml"]["incompatibilities"]):
        when: dict[str, SpecifierSet | str] = {}
        for axis, s in x["when"].items():
            when[axis] = s if axis == "os" else _spec(
                root / "incompatibilities.yaml", f"incompatibilities/{i}/when/{axis}", s)
        incompat.append(Incompatibility(x["id"], when, x["reason"], x["fix"],
                                        x.get("severity", "error"), _sources(x["source"])))
    _dupes(root / "incompatibilities.yaml", "incompatibilities", (x.id for x in incompat))

    targets = tuple(TargetAlias(t["name"], t.get("target", t["name"]), t.get("description", ""))
                    for t in raw["targets.yaml"]["targets"])
    _dupes(root / "targets.yaml", "targets", (t.name for t in targets))

    return Matrix(
        path=root, digest=digest, toolkits=toolkits, minor_compat=compat,
        base_repository=bi.get("repository", "nvidia/cuda"), base_images=base_images,
        nccl=nccl, os=oses, torch_index=tdata.get("index", "https://download.pytorch.org/whl/{variant}"),
        torch=tuple(releases), deepspeed=component("deepspeed"), horovod=component("horovod"),
        incompatibilities=tuple(incompat), targets=targets,
    )
