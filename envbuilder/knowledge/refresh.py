"""``envbuilder matrix refresh``: the matrix's facts read again from the sources that publish
them, compared with the matrix, and written (only when asked) as a reviewed overlay.

Each source is read through one ``Fetch`` (the live network, or a folder of recorded responses:
``Replay``) and its parser (``knowledge.sources``, ``knowledge.imports``):

* ``pypi``: PyPI's JSON page of torch (files per release: CPython tags per platform) and the
  metadata of one wheel per release and machine (PEP 658): the default variant, its NCCL and
  cuda-toolkit pins, and whether PyPI's aarch64 wheel is that CUDA build or another one;
* ``pytorch-index``: PyTorch's page per variant (download.pytorch.org/whl/<variant>/torch/):
  which releases have the variant, for which platforms;
* ``release-md``: PyTorch's RELEASE.md: each release's CUDA versions and the architecture lists
  of its x86 and aarch64 builds;
* ``nvidia-images``: NVIDIA's supported-tags.md (the tags per OS and CUDA version) and each
  listed set's base Dockerfile (its NVIDIA_REQUIRE_CUDA driver branches);
* ``components``: each component's sources at a release tag (its file's ``sources:``): the
  torch range it imports with (torch APIs used while importing, read against torch.yaml's
  ``apis:``), the Python its grammar needs, and its requirements file's torch specifier.

A fact agrees, differs, or cannot be confirmed from what the source gave (unverified, never
agreement); a source that cannot be reached is said first. Nothing is written unless asked:
``write_overlay`` turns the differing facts into overlay entries, each with the URL it was read
from and the date.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from envbuilder.core.matrix import Component, Matrix, TorchRelease
from envbuilder.errors import InputError
from envbuilder.knowledge import sources as src
from envbuilder.knowledge.indexcheck import IndexUnreachable

PYPI = "https://pypi.org/simple"
RELEASE_MD = "https://raw.githubusercontent.com/pytorch/pytorch/main/RELEASE.md"
NVIDIA_RAW = "https://gitlab.com/nvidia/container-images/cuda/-/raw/master"
SOURCES = ("pypi", "pytorch-index", "release-md", "nvidia-images", "components")
_JSON = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
Progress = Callable[[str], None]


class NotFound(IndexUnreachable):
    """The source answered: this file does not exist (HTTP 404)."""


class Fetch:
    """The live network through envbuilder's one HTTP client (``indexcheck._fetch``)."""

    name = "network"

    def get(self, url: str, accept: str = "*/*") -> tuple[bytes, str]:
        from envbuilder.knowledge.indexcheck import _fetch

        try:
            return _fetch(url, accept)
        except IndexUnreachable as e:
            if "HTTP 404" in str(e):
                raise NotFound(str(e)) from None
            raise


class Replay(Fetch):
    """Recorded responses: ``DIR/index.json`` lists ``{"url", "file", "status", "content_type",
    "recorded"}`` entries (``file`` relative to DIR; ``status`` 404 for a file the source does
    not have). A URL the recording does not hold is unreachable, except under a ``partial``
    prefix of the index (``{"partial": [prefix, ...]}``), where it reads as absent: a recording
    of the files one question needs, not of a whole tree."""

    def __init__(self, folder: str | Path) -> None:
        from envbuilder.core.readfile import read_text_capped

        self.folder = Path(folder)
        index = self.folder / "index.json"
        if not index.is_file():
            raise InputError(f"--replay {folder}: no index.json there (a folder of recorded responses)")
        try:
            doc = json.loads(read_text_capped(index, "index.json", limit=4 << 20, error=InputError))
        except ValueError as e:
            raise InputError(f"--replay {folder}: index.json is not JSON ({e})") from None
        self.name = f"replay of {folder}"
        self.responses = {r["url"]: r for r in doc.get("responses", [])}
        self.partial = tuple(doc.get("partial", ()))

    def get(self, url: str, accept: str = "*/*") -> tuple[bytes, str]:
        from envbuilder.core.readfile import read_bytes_capped

        r = self.responses.get(url)
        if r is None:
            if url.startswith(self.partial) and self.partial:
                raise NotFound(f"not in the recording of {url}")
            raise IndexUnreachable(f"no recorded response for {url} in {self.folder}")
        if r.get("status", 200) == 404:
            raise NotFound(f"HTTP 404 for {url} (recorded)")
        body = read_bytes_capped(self.folder / r["file"], "recorded response", limit=64 << 20, error=InputError)
        if r.get("encoding") == "gzip":
            import gzip

            body = gzip.decompress(body)
        return body, r.get("content_type", "")


class Recorder(Fetch):
    """Another fetch whose every answer (a body, or a 404) is kept, for ``save(DIR)`` to write
    as a folder ``Replay`` reads (``matrix refresh --record DIR``)."""

    def __init__(self, inner: Fetch) -> None:
        self.inner = inner
        self.name = inner.name
        self.kept: list[tuple[str, bytes | None, str]] = []

    def get(self, url: str, accept: str = "*/*") -> tuple[bytes, str]:
        try:
            body, ctype = self.inner.get(url, accept)
        except NotFound:
            self.kept.append((url, None, ""))
            raise
        self.kept.append((url, body, ctype))
        return body, ctype

    def files(self, read: str) -> dict[str, bytes]:
        """The folder's files: each response (gzip-compressed) and index.json."""
        import gzip
        import hashlib

        out: dict[str, bytes] = {}
        index = []
        for url, body, ctype in self.kept:
            entry: dict[str, Any] = {"url": url, "recorded": f"{self.name}, {read}"}
            if body is None:
                entry["status"] = 404
            else:
                name = "r-" + hashlib.sha256(url.encode()).hexdigest()[:16] + ".gz"
                out[name] = gzip.compress(body, 9, mtime=0)
                entry |= {"file": name, "content_type": ctype, "encoding": "gzip"}
            index.append(entry)
        out["index.json"] = (json.dumps({"responses": index}, indent=1) + "\n").encode()
        return out


@dataclass(frozen=True)
class Fact:
    """One fact of the matrix read again: what the matrix says, what the source says, where."""

    source: str  # pypi | pytorch-index | release-md | nvidia-images | components
    file: str  # torch.yaml
    entry: str  # "torch 2.9.1 cu128"
    field: str  # "platforms"
    matrix: Any  # None: the matrix has nothing
    found: Any  # None: the source has nothing
    url: str
    kind: str = ""  # "" (compare matrix with found) | "unverified"
    detail: str = ""
    patch: tuple[Any, ...] | None = None  # how write_overlay applies it (see _apply)
    # "equal": the two values are the same; "at_least": the matrix's (a floor) is at least the
    # source's (the oldest Python a release's grammar parses on bounds the floor from below)
    mode: str = "equal"

    @property
    def agrees(self) -> bool:
        if self.kind == "unverified":
            return False
        if self.mode == "at_least":
            return self.matrix is not None and self.found is not None and \
                Version(str(self.matrix)) >= Version(str(self.found))
        return _norm(self.matrix) == _norm(self.found)

    @property
    def status(self) -> str:
        return "unverified" if self.kind == "unverified" else "agree" if self.agrees else "differ"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "source": self.source, "file": self.file, "entry": self.entry,
                "field": self.field, "matrix": _norm(self.matrix), "found": _norm(self.found),
                "url": self.url, "detail": self.detail}

    def lines(self, read: str) -> list[str]:
        """The fact as a reviewed diff: the matrix's value, then the source's."""
        head = f"{self.file}: {self.entry}: {self.field}"
        if self.kind == "unverified":
            return [f"? {head}: not confirmed by {self.url} ({self.detail})"]
        tail = f" ({self.detail})" if self.detail else ""
        return [head, f"  - matrix: {_show(self.matrix)}",
                f"  + {self.url} (read {read}): {_show(self.found)}{tail}"]


def _norm(v: Any) -> Any:
    if isinstance(v, (list, tuple, set, frozenset)):
        items = [_norm(x) for x in v]
        try:  # versions in version order (2.4 before 2.10), anything else as text
            return sorted(items, key=lambda x: Version(str(x).rstrip("t")))
        except (InvalidVersion, TypeError):
            return sorted(items, key=str)
    if isinstance(v, Version):
        return str(v)
    return v


def _show(v: Any) -> str:
    if v is None:
        return "(none)"
    if isinstance(v, (list, tuple, set, frozenset)):
        return "[" + ", ".join(str(x) for x in _norm(v)) + "]"
    return str(v)


@dataclass
class RefreshReport:
    matrix_path: str
    matrix_digest: str
    read: str  # the date the sources were read, YYYY-MM-DD
    fetch: str  # network | replay of DIR
    facts: list[Fact] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # name -> "read" | "unreachable: ..."
    urls: dict[str, list[str]] = field(default_factory=dict)  # name -> URLs it read
    asked: tuple[str, ...] = ()  # the sources named on the command line

    def of(self, status: str) -> list[Fact]:
        return [f for f in self.facts if f.status == status]

    @property
    def unreachable(self) -> list[str]:
        return [n for n, s in self.sources.items() if s != "read"]

    def headline(self) -> str:
        bad = self.unreachable
        if bad:
            return (f"{len(bad)} of {len(self.sources)} sources could not be read "
                    f"({', '.join(bad)}): their facts were not compared")
        return f"all {len(self.sources)} sources were read ({self.fetch})"

    @property
    def error(self) -> str | None:
        """A source the command line named, or PyPI, that could not be read: nothing of it was
        compared, so the refresh as a whole failed."""
        for name in self.unreachable:
            if name in self.asked or name == "pypi":
                return f"cannot read source {name}: {self.sources[name].removeprefix('unreachable: ')}"
        return None

    @property
    def ok(self) -> bool:
        return not self.of("differ") and self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "error": self.error, "read": self.read, "fetch": self.fetch,
                "matrix": {"path": self.matrix_path, "digest": self.matrix_digest},
                "headline": self.headline(), "sources": dict(self.sources), "urls": dict(self.urls),
                "counts": {s: len(self.of(s)) for s in ("agree", "differ", "unverified")},
                "differ": [f.to_dict() for f in self.of("differ")],
                "unverified": [f.to_dict() for f in self.of("unverified")],
                "agree": [f.to_dict() for f in self.of("agree")]}


@dataclass
class _Run:
    m: Matrix
    fetch: Fetch
    rep: RefreshReport
    say: Progress
    name: str = ""

    def get(self, url: str, accept: str = "*/*") -> bytes:
        self.say(f"{self.name}: {url}")
        body, _ = self.fetch.get(url, accept)
        self.rep.urls.setdefault(self.name, []).append(url)
        return body

    def get_typed(self, url: str, accept: str) -> tuple[bytes, str]:
        self.say(f"{self.name}: {url}")
        out = self.fetch.get(url, accept)
        self.rep.urls.setdefault(self.name, []).append(url)
        return out

    def add(self, *args: Any, **kw: Any) -> None:
        self.rep.facts.append(Fact(self.name, *args, **kw))


def refresh(m: Matrix, *, sources: Sequence[str] = SOURCES, fetch: Fetch | None = None,
            pypi: str = PYPI, component_versions: dict[str, list[str]] | None = None,
            progress: Progress | None = None, today: dt.date | None = None,
            asked: Sequence[str] = ()) -> RefreshReport:
    """Read ``sources`` (see the module's docstring) and compare them with ``m``."""
    bad = [s for s in sources if s not in SOURCES]
    if bad:
        raise InputError(f"--source {bad[0]}: not a source; sources: {', '.join(SOURCES)}")
    f = fetch or Fetch()
    rep = RefreshReport(str(m.path), m.digest, (today or dt.date.today()).isoformat(), f.name,
                        asked=tuple(asked))
    run = _Run(m, f, rep, progress or (lambda _m: None))
    readers: dict[str, Callable[[_Run], None]] = {
        "pypi": lambda r: _pypi(r, pypi), "pytorch-index": _pytorch_index,
        "release-md": _release_md, "nvidia-images": _nvidia_images,
        "components": lambda r: _components(r, component_versions or {})}
    for name in sources:
        run.name = name
        try:
            readers[name](run)
            rep.sources[name] = "read"
        except NotFound as e:
            rep.sources[name] = f"unreachable: {e}"
        except IndexUnreachable as e:
            rep.sources[name] = f"unreachable: {e}"
    return rep


# -- pypi ---------------------------------------------------------------------------------------

def _wheel_pins(run: _Run, files: Iterable[src.WheelFile], platform: str,
                tries: int = 4) -> tuple[src.WheelFile | None, src.Pins | None]:
    """A wheel of ``platform`` and its pins, from its PEP 658 metadata file (``{url}.metadata``:
    PyPI serves it even where its JSON page does not say so, but not for every old upload): the
    newest GIL CPython's that has one, trying a few."""
    cand = [w for w in files if w.platform == platform and w.python and not w.python.endswith("t")]
    cand.sort(key=lambda w: Version(w.python or "0"), reverse=True)
    for w in cand[:tries]:
        try:
            text = run.get(w.metadata_url or w.url + ".metadata").decode("utf-8", "replace")
        except NotFound:
            continue
        return w, src.metadata_pins(text, platform, w.python or "3.12")
    return (cand[0] if cand else None), None


def _pypi(run: _Run, index: str) -> None:
    m = run.m
    url = f"{index.rstrip('/')}/torch/"
    body, ctype = run.get_typed(url, _JSON)
    files = src.wheel_files(body, url, ctype)
    by_version: dict[Version, list[src.WheelFile]] = {}
    for w in files:
        if w.local is None:
            by_version.setdefault(w.public, []).append(w)
    for t in m.torch:
        _pypi_release(run, t, by_version.get(t.version, []), url)


def _pypi_release(run: _Run, t: TorchRelease, mine: list[src.WheelFile], url: str) -> None:
    entry = f"torch {t.version}"
    if not mine:
        run.add("torch.yaml", entry, "release", "listed", None, url,
                detail="no wheel of this release on the index")
        return
    x86 = [w for w in mine if w.platform == "linux/amd64"]
    run.add("torch.yaml", entry, "python", list(t.python),
            sorted({w.python for w in x86 if w.python and not w.python.endswith("t")}, key=Version),
            url, detail="CPython versions with manylinux x86_64 wheels",
            patch=("torch", t, ("python",)))
    ft = sorted({w.python for w in x86 if w.python and w.python.endswith("t")}, key=lambda p: Version(p[:-1]))
    if t.python_ft or ft:
        run.add("torch.yaml", entry, "python_ft", list(t.python_ft), ft, url,
                detail="free-threaded CPythons with manylinux x86_64 wheels", patch=("torch", t, ("python_ft",)))
    w, pins = _wheel_pins(run, mine, "linux/amd64")
    if pins is None or w is None or pins.variant is None:
        run.add("torch.yaml", entry, "pypi_default", t.pypi_default, None, url, kind="unverified",
                detail="no x86_64 wheel with metadata on the index" if pins is None else
                f"{w.filename if w else 'its wheel'} pins no CUDA runtime (CUDA linked into the wheel)")
        _pypi_arm64(run, t, mine, url)
        return
    murl = w.metadata_url or w.url + ".metadata"
    run.add("torch.yaml", entry, "pypi_default", t.pypi_default, pins.variant, murl,
            detail=f"the CUDA pins of {w.filename}", patch=("torch", t, ("pypi_default",)))
    var = t.variants.get(t.pypi_default or "")
    if var is not None and pins.variant == var.name:
        vname = f"{entry} {var.name}"
        if pins.nccl is not None or var.nccl_package:
            run.add("torch.yaml", vname, "nccl",
                    None if var.nccl_package is None else f"{var.nccl_package}=={var.nccl}",
                    None if pins.nccl is None else f"{pins.nccl[0]}=={pins.nccl[1]}", murl,
                    detail="the wheel's Requires-Dist", patch=("torch", t, ("variants", var.name, "nccl")))
        if var.cuda_toolkit is not None or pins.cuda_toolkit is not None:
            run.add("torch.yaml", vname, "cuda_toolkit", var.cuda_toolkit, pins.cuda_toolkit, murl,
                    detail="Requires-Dist cuda-toolkit==", patch=("torch", t, ("variants", var.name, "cuda_toolkit")))
    _pypi_arm64(run, t, mine, url)


def _pypi_arm64(run: _Run, t: TorchRelease, mine: list[src.WheelFile], url: str) -> None:
    """Whether PyPI's aarch64 wheel is the default variant's CUDA build, another build, or none:
    against the matrix's platforms/index_only of the default variant."""
    var = t.variants.get(t.pypi_default or "")
    if var is None:
        return
    on_pypi = "linux/arm64" in var.platforms and "linux/arm64" not in var.index_only
    expect = var.name if on_pypi else f"not {var.name}"
    w, pins = _wheel_pins(run, mine, "linux/arm64")
    if w is None:
        found = f"not {var.name}"
        detail = "no manylinux aarch64 wheel on PyPI"
    else:
        if pins is None:
            size = f", {w.size / 1e6:.0f} MB" if w.size else ""
            run.add("torch.yaml", f"torch {t.version} {var.name}", "linux/arm64 on PyPI", expect, None, url,
                    kind="unverified", detail=f"{w.filename} ({w.python}{size}) has no metadata on the index: "
                                              f"what it requires was not read")
            return
        found = var.name if pins.variant == var.name else f"not {var.name}"
        detail = f"{w.filename} requires {', '.join(pins.nvidia) or 'no CUDA library'} ({pins.variant})"
    run.add("torch.yaml", f"torch {t.version} {var.name}", "linux/arm64 on PyPI", expect, found,
            (w.metadata_url or w.url + ".metadata") if w is not None else url, detail=detail,
            patch=("torch", t, ("variants", var.name, "pypi_arm64")))


# -- PyTorch's index ------------------------------------------------------------------------------

def _pytorch_index(run: _Run) -> None:
    m = run.m
    variants = sorted({n for t in m.torch for n in t.variants if n != "cpu"}, key=lambda n: (len(n), n))
    for vname in variants:
        url = m.torch_index.format(variant=vname).rstrip("/") + "/torch/"
        try:
            body, ctype = run.get_typed(url, "text/html")
        except NotFound as e:
            run.add("torch.yaml", f"variant {vname}", "index page", "listed", None, url, kind="unverified",
                    detail=f"no page read: {e}")
            continue
        files = [w for w in src.wheel_files(body, url, ctype) if w.local == vname]
        on: dict[Version, set[str | None]] = {}
        for w in files:
            on.setdefault(w.public, set()).add(w.platform)
        for t in m.torch:
            var = t.variants.get(vname)
            platforms = on.get(t.version)
            entry = f"torch {t.version} {vname}"
            if platforms is None:
                if var is not None:
                    run.add("torch.yaml", entry, "platforms", list(var.platforms), None, url, kind="unverified",
                            detail="the page lists no file of this release")
                continue
            found = sorted(p for p in platforms if p is not None)
            run.add("torch.yaml", entry, "platforms", None if var is None else list(var.platforms), found, url,
                    detail="manylinux wheels on PyTorch's index",
                    patch=("torch", t, ("variants", vname, "platforms")))


# -- RELEASE.md -----------------------------------------------------------------------------------

def _release_md(run: _Run) -> None:
    m = run.m
    text = run.get(RELEASE_MD).decode("utf-8", "replace")
    tables = src.release_tables(text)
    lines = {t.line: t for t in m.torch}  # the newest release of each line
    for line, cudas in tables.cuda.items():
        t = lines.get(line)
        if t is None:
            continue
        for cuda in cudas:
            vname = "cu" + cuda.replace(".", "")
            run.add("torch.yaml", f"torch {line}", f"variant {vname}", vname if vname in t.variants else None,
                    vname, RELEASE_MD, detail="RELEASE.md's release compatibility matrix",
                    patch=("torch", t, ("variants", vname)))
    for line in tables.arch_lines:
        t = lines.get(line)
        if t is None:
            continue
        for platform, rows in tables.arch.items():
            for cuda, arch in rows.items():
                vname = "cu" + cuda.replace(".", "")
                var = t.variants.get(vname)
                mine = None if var is None or platform not in var.platforms else list(var.arch_for(platform))
                run.add("torch.yaml", f"torch {line} {vname}", f"arch ({platform})", mine, arch, RELEASE_MD,
                        detail=f"RELEASE.md's CUDA support matrix for {', '.join(tables.arch_lines)}",
                        patch=("torch", t, ("variants", vname, f"arch:{platform}")))


# -- NVIDIA's images ------------------------------------------------------------------------------

def _nvidia_images(run: _Run) -> None:
    m = run.m
    url = f"{NVIDIA_RAW}/doc/supported-tags.md"
    tags = src.supported_tags(run.get(url).decode("utf-8", "replace"))
    versions = {v for v, _ in tags}
    for b in m.base_images:
        if b.removed or b.repository:
            continue
        v = str(b.cuda)
        for os_name in b.os:
            entry = f"nvidia/cuda {v} {os_name}"
            doc = tags.get((v, os_name))
            if v not in versions:
                run.add("base_images.yaml", entry, "tags", sorted(b.flavours), None, url, kind="unverified",
                        detail="this copy of supported-tags.md lists no tag of this CUDA version")
                continue
            run.add("base_images.yaml", entry, "flavours", sorted(b.flavours),
                    None if doc is None else sorted(doc["flavours"]), url, detail="tags in supported-tags.md")
            if doc is None:
                continue
            df = f"{NVIDIA_RAW}/dist/{v}/{src.dist_dir(os_name)}/base/Dockerfile"
            try:
                got = src.require_cuda(run.get(df).decode("utf-8", "replace"))
            except NotFound as e:
                run.add("base_images.yaml", entry, "require_cuda", _req(b), None, df, kind="unverified",
                        detail=f"no Dockerfile read: {e}")
                continue
            run.add("base_images.yaml", entry, "require_cuda", _req(b),
                    None if got is None else {"cuda": str(got[0]), "branches": list(got[1])}, df,
                    detail="NVIDIA_REQUIRE_CUDA of the base image", patch=("image", b, os_name))


def _req(b: Any) -> dict[str, Any] | None:
    r = b.require_cuda
    return None if r is None else {"cuda": str(r.cuda), "branches": list(r.branches)}


# -- components -----------------------------------------------------------------------------------

def _components(run: _Run, versions: dict[str, list[str]]) -> None:
    from envbuilder.knowledge.imports import FetchedTree, import_needs

    m = run.m
    for comp in m.components:
        info = _sources_of(m, comp)
        if not info or (versions and comp.name not in versions):
            continue  # named releases (--component-version): only their components are read
        wanted = versions.get(comp.name) or _default_versions(comp)
        for v in wanted:
            rel = next((r for r in comp.releases if str(r.version) == v), None)
            if rel is None:
                raise InputError(f"--component-version {comp.name}=={v}: not a {comp.name} release of the matrix")
            base = info["raw"].format(version=v)
            missing: list[str] = []
            tree = FetchedTree(base, functools.partial(_body_or_none, run, missing=missing))
            needs = import_needs(tree, info["package"], m.torch_apis)
            if not needs.modules:
                run.add(f"{comp.name}.yaml", f"{comp.name} {v}", "imports", None, None, base, kind="unverified",
                        detail=f"{info['package']}/__init__.py not read: {missing[-1] if missing else 'empty'}")
                continue
            derived = needs.torch_spec()
            why = needs.why() or "no torch API of torch.yaml's apis: is used while importing"
            bound = needs.torch_floor or needs.torch_ceiling
            url = bound.url if bound is not None else base
            run.add(f"{comp.name}.yaml", f"{comp.name} {v}", "imports torch", _admitted(m, _import_spec(comp, rel, "torch")),
                    _admitted(m, derived), url, detail=f"{derived or 'any torch'}: {why}",
                    patch=("imports", comp, v, derived, why, url))
            if needs.python_floor is not None:
                mine = rel.requires.get("python")
                floor = _floor(mine)
                run.add(f"{comp.name}.yaml", f"{comp.name} {v}", "python floor (at least the grammar's)", floor,
                        str(needs.python_floor[0]), base, mode="at_least",
                        detail=f"the oldest CPython whose grammar parses every module `import {info['package']}` "
                               f"reads ({len(needs.modules)} modules; {needs.python_floor[1]} decides)")
            req = info.get("requirements")
            if req:
                _requirements(run, comp, rel, base + req)


def _sources_of(m: Matrix, comp: Component) -> dict[str, Any] | None:
    import yaml

    path = m.path / f"{comp.name}.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return data.get("sources") if isinstance(data, dict) else None


def _default_versions(comp: Component) -> list[str]:
    """The newest release of each line (one sdist or tag each)."""
    seen: dict[str, str] = {}
    for r in comp.releases:  # newest first
        seen.setdefault(r.line, str(r.version))
    return list(seen.values())


def _body_or_none(run: _Run, url: str, missing: list[str] | None = None) -> bytes | None:
    try:
        return run.get(url)
    except NotFound as e:
        if missing is not None:
            missing.append(str(e))
        return None


def _import_spec(comp: Component, rel: Any, axis: str) -> str | None:
    specs = [str(s) for n in comp.imports if n.applies(rel.version) and (s := n.requires.get(axis)) is not None]
    return ",".join(specs) or None


def _admitted(m: Matrix, spec: str | None) -> list[str]:
    """The torch lines of the matrix a specifier admits (how two ranges are compared)."""
    s = SpecifierSet(spec or "")
    return sorted({t.line for t in m.torch if s.contains(t.version, prereleases=True)}, key=Version)


def _floor(spec: Any) -> str | None:
    if spec is None:
        return None
    for minor_ in range(0, 30):
        if spec.contains(f"3.{minor_}.0", prereleases=True):
            return f"3.{minor_}"
    return None


def _requirements(run: _Run, comp: Component, rel: Any, url: str) -> None:
    from packaging.requirements import InvalidRequirement, Requirement

    body = _body_or_none(run, url)
    if body is None:
        return
    spec = None
    for ln in body.decode("utf-8", "replace").splitlines():
        try:
            r = Requirement(ln.split("#", 1)[0].strip())
        except InvalidRequirement:
            continue
        if r.name.lower() == "torch":
            spec = str(r.specifier) or None
    if spec is None:
        return
    mine = rel.requires.get("torch")
    run.add(f"{comp.name}.yaml", f"{comp.name} {rel.version}", "requires torch",
            _admitted(run.m, None if mine is None else str(mine)), _admitted(run.m, spec), url,
            detail=f"torch{spec} in the requirements file at the tag")


# -- the reviewed overlay -------------------------------------------------------------------------

def overlay_files(rep: RefreshReport, m: Matrix) -> dict[str, str]:
    """The differing facts that have a place in the matrix as overlay files (name -> YAML)."""
    import yaml

    note = f"written by envbuilder matrix refresh on {rep.read}: review before merging"
    torch_raw = yaml.safe_load((m.path / "torch.yaml").read_text(encoding="utf-8"))
    images_raw = yaml.safe_load((m.path / "base_images.yaml").read_text(encoding="utf-8"))
    lines: dict[str, list[dict[str, Any]]] = {}
    images: list[dict[str, Any]] = []
    imports: dict[str, list[dict[str, Any]]] = {}
    for f in rep.of("differ"):
        if f.patch is None:
            continue
        kind = f.patch[0]
        if kind == "torch":
            _patch_torch(lines, torch_raw["releases"], f, note)
        elif kind == "image" and f.found is not None:
            b, os_name = f.patch[1], f.patch[2]
            raw = next(x for x in images_raw["images"] if str(x["cuda"]) == str(b.cuda) and os_name in x["os"])
            e = copy.deepcopy(raw)
            e["os"] = [os_name]
            e["require_cuda"] = {"cuda": f.found["cuda"], "branches": f.found["branches"], "source": f.url,
                                 "note": f"read {rep.read}"}
            e["source"] = [*_srcs(e.get("source")), f.url]
            e["note"] = note
            images.append(e)
        elif kind == "imports":
            comp, v, spec, why, url = f.patch[1:]
            if spec:
                imports.setdefault(comp.name, []).append({
                    "versions": f"=={v}", "requires": {"torch": spec}, "reason": why, "derived": note,
                    "source": url})
    out: dict[str, str] = {}
    if lines:
        out["torch.yaml"] = yaml.safe_dump({"schema_version": 1, "releases": [e for es in lines.values() for e in es]},
                                           sort_keys=False, width=100)
    if images:
        out["base_images.yaml"] = yaml.safe_dump({"schema_version": 1, "images": images}, sort_keys=False, width=100)
    for name, items in imports.items():
        comp_raw = yaml.safe_load((m.path / f"{name}.yaml").read_text(encoding="utf-8"))
        comp_raw["imports"] = [*comp_raw.get("imports", []), *items]
        comp_raw["note"] = note
        out[f"{name}.yaml"] = yaml.safe_dump(comp_raw, sort_keys=False, width=100)
    return {k: f"# {note}\n{v}" for k, v in out.items()}


def _srcs(value: Any) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _patch_torch(lines: dict[str, list[dict[str, Any]]], base: list[dict[str, Any]], f: Fact, note: str) -> None:
    t: TorchRelease = f.patch[1]  # type: ignore[index]
    path: tuple[str, ...] = f.patch[2]  # type: ignore[index]
    entries = lines.get(t.line)
    if entries is None:
        entries = lines[t.line] = [copy.deepcopy(e) for e in base if str(e["line"]) == t.line]
    e = next((x for x in entries if str(t.version) in [str(v) for v in x["versions"]]), None)
    if e is None:
        return
    e["source"] = [*_srcs(e.get("source")), *([f.url] if f.url not in _srcs(e.get("source")) else [])]
    e["note"] = f"{e.get('note', '')} [{note}: {f.field} from {f.url}]".strip()
    _apply(e, path, f.found)


def _apply(e: dict[str, Any], path: tuple[str, ...], found: Any) -> None:
    if path[0] != "variants":
        e[path[0]] = found
        return
    variants = e.setdefault("variants", {})
    if len(path) == 2:  # a variant RELEASE.md names that the matrix lacks
        variants.setdefault(path[1], {"note": "named by RELEASE.md; its NCCL and arch not read"})
        return
    var = variants.setdefault(path[1], {})
    key = path[2]
    if key == "nccl" and found:
        var["nccl_package"], var["nccl"] = found.split("==", 1)
    elif key == "platforms":
        var["platforms"] = list(found or ["linux/amd64"])
    elif key.startswith("arch:"):
        platform = key.split(":", 1)[1]
        if platform == "linux/amd64":
            var["arch"] = list(found)
        else:
            var.setdefault("platform_arch", {})[platform] = list(found)
    elif key == "pypi_arm64":
        plats = set(var.get("platforms", ["linux/amd64"]))
        if found and not str(found).startswith("not "):
            var["platforms"] = sorted(plats | {"linux/arm64"})
            var.pop("index_only", None)
        elif "linux/arm64" in plats:
            var["index_only"] = ["linux/arm64"]
    else:
        var[key] = None if found is None else str(found)


def write_overlay(rep: RefreshReport, m: Matrix, dest: str | Path) -> list[str]:
    """Write the overlay of the differing facts into ``dest`` (atomically, never over a file
    envbuilder did not write); returns the names written."""
    from envbuilder._fs import write_tree

    files = overlay_files(rep, m)
    if files:
        write_tree(dest, files, group="overlay", step="matrix refresh --write-overlay", prune=False,
                   option="--write-overlay")
    return sorted(files)

