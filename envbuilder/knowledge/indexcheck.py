"""``envbuilder matrix verify``: the matrix's facts against the live package indexes.

For every torch release of the matrix and each of its variants on an index this machine can
reach, the index's own data is compared with the matrix:

* the files (PEP 691 JSON or PEP 503 HTML simple index): the release exists, and the CPython
  versions with Linux x86_64 wheels are the matrix's ``python`` list;
* the wheel's metadata, read by resolving ``torch==V`` with ``uv pip compile`` for Linux x86_64
  (uv reads PEP 658 metadata or ranges of the wheel; no wheel is downloaded): the
  ``nvidia-nccl-*`` pin is the variant's ``nccl``/``nccl_package``, and on PyPI the CUDA
  runtime pin names the variant that ``pypi_default`` says;
* releases on the index that the matrix does not list are reported as new.

For each component of the matrix (core.options.COMPONENTS), the project's page on the simple
index (PyPI or a mirror; the JSON form carries each file's ``requires-python`` and ``yanked``,
the HTML form the same as ``data-requires-python`` / ``data-yanked``) is compared with the
matrix:

* every release the matrix lists has a file there that is not yanked;
* where the files declare a ``requires-python``, it admits the same Pythons as the matrix's
  ``requires.python`` for that release; where they declare none, the matrix's constraint
  cannot be confirmed and is reported as unverified (once per matrix entry);
* releases there that the matrix does not list (from its oldest on) are reported as new.

CUDA toolkits: each toolkit patch's driver floor against Table 3 of NVIDIA's CUDA release
notes (``notes_url``), and the toolkit releases PyPI's ``cuda-toolkit`` has that the matrix
lacks. Base images: each nvidia/cuda tag the matrix lists against the registry's tag API
(``registry``). NCCL: the nvidia-nccl-cu12/cu13 releases PyPI has that the matrix lacks.

An index that cannot be reached is reported as skipped, never as agreement. A wheel whose
metadata names no NCCL (NCCL linked statically) cannot confirm the matrix's NCCL version:
that is reported as unverified. Disagreements name the entry, the field and both values.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Callable, Iterable, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename,
                             parse_wheel_filename)
from packaging.version import InvalidVersion, Version

from envbuilder.core import validate
from envbuilder.core.matrix import Component, Matrix, TorchRelease
from envbuilder.core.options import COMPONENTS
from envbuilder.errors import InputError

PYPI = "https://pypi.org/simple"
NVIDIA_NOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"
REGISTRY = "https://hub.docker.com/v2/repositories"  # {REGISTRY}/{repository}/tags/{tag}
PLATFORM = "x86_64-manylinux_2_28"
HTTP_TIMEOUT_S = 20
MAX_PAGE_BYTES = 64 << 20  # an index page (torch's simple page is a few MB)
UV_TIMEOUT_S = 180
_ACCEPT = ("application/vnd.pypi.simple.v1+json, "
           "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01")

Progress = Callable[[str], None]


class IndexUnreachable(Exception):
    """The index did not answer (network, DNS, TLS, HTTP error)."""


@dataclass(frozen=True)
class Finding:
    """One result that is not plain agreement: a disagreement, a new release, a skipped index
    or a fact the index cannot confirm."""

    kind: str  # "disagree" | "new" | "skipped" | "unverified"
    entry: str  # "torch 2.6.0 cu124" or "index https://..."
    field: str  # "nccl" | "nccl_package" | "python" | "pypi_default" | "release" | "variant" | "index"
    matrix: str | None
    index: str | None
    index_url: str
    detail: str = ""

    def __str__(self) -> str:
        if self.kind == "disagree":
            return (f"{self.entry}: {self.field} is {self.matrix} in the matrix but "
                    f"{self.index} on {self.index_url}{' (' + self.detail + ')' if self.detail else ''}")
        if self.kind == "new":
            return f"{self.entry}: on {self.index_url} but not in the matrix"
        if self.kind == "skipped":
            return f"{self.entry}: skipped, {self.detail}"
        return f"{self.entry}: {self.field} unverified ({self.detail})"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "entry": self.entry, "field": self.field,
                "matrix": self.matrix, "index": self.index, "index_url": self.index_url,
                "detail": self.detail, "text": str(self)}


@dataclass
class MatrixReport:
    matrix_path: str
    matrix_digest: str
    findings: list[Finding] = field(default_factory=list)
    agreed: list[str] = field(default_factory=list)  # "torch 2.6.0 cu124: nccl 2.21.5"
    indexes: dict[str, str] = field(default_factory=dict)  # url -> "reachable" | reason
    primary: str | None = None  # the index the user named (--pypi-index-url): it must answer

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    @property
    def unreachable(self) -> list[str]:
        """The sources (indexes, pages, registries) that did not answer."""
        return [u for u, s in self.indexes.items() if s != "reachable"]

    def headline(self) -> str:
        """The first line of the report: how much could not be reached (never silent)."""
        n = len(self.unreachable)
        return (f"{n} of {len(self.indexes)} sources could not be reached: "
                f"{len(self.of('skipped'))} groups of facts not checked" if n else
                f"all {len(self.indexes)} sources were reached")

    @property
    def error(self) -> str | None:
        """Why the verification as a whole failed without a disagreement: the index it was
        asked to check against did not answer (so nothing was verified)."""
        state = self.indexes.get(self.primary or "", "reachable")
        if state != "reachable":
            return f"cannot reach the package index {self.primary} ({state.removeprefix('unreachable: ')})"
        return None

    @property
    def ok(self) -> bool:
        return not self.of("disagree") and self.error is None

    def to_dict(self) -> dict:
        return {"ok": self.ok, "error": self.error,
                "matrix": {"path": self.matrix_path, "digest": self.matrix_digest},
                "indexes": dict(self.indexes),
                "unreachable": len(self.unreachable), "headline": self.headline(),
                "counts": {k: len(self.of(k)) for k in ("disagree", "new", "skipped", "unverified")}
                | {"agreed": len(self.agreed)},
                "disagreements": [f.to_dict() for f in self.of("disagree")],
                "new": [f.to_dict() for f in self.of("new")],
                "skipped": [f.to_dict() for f in self.of("skipped")],
                "unverified": [f.to_dict() for f in self.of("unverified")],
                "agreed": list(self.agreed)}


# -- the simple index -----------------------------------------------------------------------

@dataclass(frozen=True)
class IndexFile:
    filename: str
    version: Version  # with its local part (2.6.0+cu126)
    pythons: frozenset[str]  # "3.11" for cp311-cp311 Linux x86_64 wheels

    @property
    def public(self) -> Version:
        return Version(self.version.public)

    @property
    def local(self) -> str | None:
        return self.version.local


@dataclass(frozen=True)
class ProjectFile:
    """One file of a project's page on a simple index, with what the index says about it."""

    filename: str
    version: Version | None  # from the wheel or sdist file name; None when it names none
    requires_python: str | None  # the index's requires-python, None when it declares none
    yanked: bool | str  # False, True, or the reason the index gives
    upload_time: str | None = None

    @property
    def live(self) -> bool:
        return self.yanked is False


def _file_version(name: str) -> Version | None:
    try:
        if name.endswith(".whl"):
            return parse_wheel_filename(name)[1]
        if name.endswith((".tar.gz", ".zip")):
            return parse_sdist_filename(name)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return None


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[tuple[str, str | None, bool | str]] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "a":
            a = dict(attrs)
            href = a.get("href") or ""
            name = urllib.parse.unquote(href.split("#", 1)[0].rsplit("/", 1)[-1])
            yanked: bool | str = False
            if "data-yanked" in a:
                yanked = a["data-yanked"] or True
            self.files.append((name, a.get("data-requires-python") or None, yanked))


def _cpython(interp: str, abi: str) -> str | None:
    """'cp311','cp311' -> '3.11'; free-threaded (cp313t) and abi3 wheels are not counted."""
    m = re.fullmatch(r"cp3(\d+)", interp)
    if not m or abi not in (interp, interp + "m", interp + "mu"):
        return None
    return f"3.{m.group(1)}"


def linux_x86_64_files(names: Iterable[str]) -> list[IndexFile]:
    """The Linux x86_64 CPython wheels among an index page's file names."""
    by_version: dict[tuple[str, Version], set[str]] = {}
    for name in names:
        if not name.endswith(".whl"):
            continue
        try:
            _, version, _, tags = parse_wheel_filename(name.replace("%2B", "+"))
        except (InvalidWheelFilename, InvalidVersion):
            continue
        pys = {p for t in tags if "linux" in t.platform and t.platform.endswith("x86_64")
               for p in [_cpython(t.interpreter, t.abi)] if p}
        if pys:
            by_version.setdefault((name.split("-")[1], version), set()).update(pys)
    return [IndexFile(f"torch-{k[0]}", k[1], frozenset(v)) for k, v in by_version.items()]


def project_files(index: str, project: str) -> list[ProjectFile]:
    """Every file of ``project`` on a simple index (PEP 691 JSON or PEP 503 HTML), with its
    requires-python and yanked status; IndexUnreachable when the index does not answer."""
    url = project_url(index, project)
    body, ctype = _fetch(url, _ACCEPT)
    out: list[ProjectFile] = []
    if "json" in ctype:
        try:
            data = json.loads(body)
        except ValueError as e:
            raise IndexUnreachable(f"{url}: not a simple index page ({e})") from None
        for f in data.get("files", []):
            name = str(f.get("filename", ""))
            y = f.get("yanked", False)
            yanked: bool | str = y if isinstance(y, str) and y else bool(y)
            rp = f.get("requires-python")
            out.append(ProjectFile(name, _file_version(name), str(rp).strip() if rp else None,
                                   yanked, f.get("upload-time")))
    else:
        p = _Anchors()
        p.feed(body.decode("utf-8", "replace"))
        out = [ProjectFile(n, _file_version(n), rp.strip() if rp else None, y)
               for n, rp, y in p.files]
    return out


def project_url(index: str, project: str) -> str:
    return f"{index.rstrip('/')}/{project}/"


def list_project(index: str, project: str = "torch") -> list[IndexFile]:
    """Every Linux x86_64 wheel of ``project`` on a simple index; IndexUnreachable when the
    index does not answer."""
    return linux_x86_64_files(f.filename for f in project_files(index, project))


# -- metadata through uv --------------------------------------------------------------------

_NET = ("error sending request", "Failed to fetch", "dns error", "Connection refused",
        "timed out", "certificate", "Could not connect", "tcp connect error")


@dataclass(frozen=True)
class MetadataPins:
    """What resolving one torch wheel for Linux x86_64 pinned."""

    packages: dict[str, Version]

    @property
    def nccl(self) -> tuple[str, Version] | None:
        for name, v in self.packages.items():
            if name.startswith("nvidia-nccl-"):
                return name, v
        return None

    @property
    def cuda_variant(self) -> str | None:
        """The CUDA variant the wheel was built for, from its CUDA runtime pin."""
        for name, v in self.packages.items():
            if re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", name):
                return f"cu{v.major}{v.minor}"
        return None


def find_uv(uv: str | None = None) -> str:
    from envbuilder.lock.uv import find_uv as _find

    return _find(uv)


def resolve_pins(uv: str, requirement: str, python: str, index: str,
                 extra: Sequence[str] = ()) -> MetadataPins:
    """``uv pip compile`` of one requirement for Linux x86_64: the pinned versions.

    ``index`` is asked first, then each of ``extra`` in order, with uv's ``first-index``
    strategy: a package ``index`` has (torch and its ``nvidia-*`` wheels on PyTorch's index of
    a variant) is taken from it alone, never from a later index that offers a higher version
    (``unsafe-best-match``, open to dependency confusion, is never used here). uv asks its
    ``--extra-index-url``s before its ``--index-url``, so the last index becomes the latter."""
    order = [index, *extra]
    cmd = [uv, "pip", "compile", "-", "--no-config", "--no-header", "--no-annotate",
           "--python-version", python, "--python-platform", PLATFORM,
           "--index-url", order[-1], "--index-strategy", "first-index"]
    for u in order[:-1]:
        cmd += ["--extra-index-url", u]
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", NO_COLOR="1")
    from envbuilder import _child

    r = _child.run(cmd, input=requirement + "\n", env=env, timeout=UV_TIMEOUT_S,
                   cwd=tempfile.gettempdir(), cap=16 << 20)
    if r.timed_out:
        raise IndexUnreachable(f"uv pip compile {requirement} took over {UV_TIMEOUT_S} s")
    if r.dropped:
        raise RuntimeError(r.over_cap())
    if r.returncode != 0:
        lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
        text = " ".join(lines)
        if any(n.lower() in text.lower() for n in _NET):
            raise IndexUnreachable(lines[0] if lines else "uv failed")
        raise RuntimeError(next((ln for ln in lines if "error" in ln.lower()),
                                lines[0] if lines else f"uv exited {r.returncode}"))
    pkgs: dict[str, Version] = {}
    for ln in r.stdout.splitlines():
        m = re.match(r"^([A-Za-z0-9._-]+)==([^\s;]+)", ln.strip())
        if m:
            pkgs[m.group(1).lower().replace("_", "-")] = Version(m.group(2))
    return MetadataPins(pkgs)


# -- the comparison -------------------------------------------------------------------------

def _pyset(values: Iterable[str]) -> str:
    return ", ".join(sorted(set(values), key=Version)) or "none"


@dataclass(frozen=True)
class _Job:
    """One torch release + variant whose metadata is resolved on one index."""

    release: TorchRelease
    variant: str
    index: str
    requirement: str
    python: str
    extra: tuple[str, ...] = ()


def _compare_metadata(job: _Job, pins: MetadataPins, on_pypi: bool, rep: MatrixReport) -> None:
    t, vname = job.release, job.variant
    entry = f"torch {t.version} {vname}"
    var = t.variants.get(vname)
    if on_pypi:
        got = pins.cuda_variant
        if got is None and not pins.nccl:
            rep.findings.append(Finding("unverified", f"torch {t.version}", "pypi_default",
                                        t.pypi_default, None, job.index,
                                        "the wheel's metadata pins no CUDA runtime"))
        elif got is not None and got != t.pypi_default:
            rep.findings.append(Finding("disagree", f"torch {t.version}", "pypi_default",
                                        t.pypi_default, got, job.index,
                                        "the CUDA runtime the PyPI wheel requires"))
            return
        elif got is not None:
            rep.agreed.append(f"torch {t.version}: pypi_default {got}")
    if var is None or vname == "cpu":
        return
    have = pins.nccl
    if have is None:
        if var.nccl_package:
            rep.findings.append(Finding("disagree", entry, "nccl_package", var.nccl_package, None,
                                        job.index, "the wheel requires no nvidia-nccl package"))
        else:
            rep.findings.append(Finding("unverified", entry, "nccl",
                                        None if var.nccl is None else str(var.nccl), None, job.index,
                                        "NCCL is linked into the wheel, its metadata names none"))
        return
    pkg, ver = have
    if var.nccl_package != pkg:
        rep.findings.append(Finding("disagree", entry, "nccl_package", var.nccl_package, pkg,
                                    job.index))
    if var.nccl is None or var.nccl != ver:
        rep.findings.append(Finding("disagree", entry, "nccl",
                                    None if var.nccl is None else str(var.nccl), str(ver), job.index,
                                    f"{pkg}=={ver} in the wheel's Requires-Dist"))
    elif var.nccl_package == pkg:
        rep.agreed.append(f"{entry}: nccl {pkg}=={ver}")


def _compare_files(t: TorchRelease, vname: str, files: list[IndexFile], index: str,
                   rep: MatrixReport, *, local: str | None) -> str | None:
    """Existence and Python tags; returns the Python to resolve metadata with (or None)."""
    entry = f"torch {t.version} {vname}"
    mine = [f for f in files if f.public == t.version and f.local == local]
    if not mine:
        rep.findings.append(Finding("disagree", entry, "release", "listed", "absent", index,
                                    "no Linux x86_64 wheel of this release and variant"))
        return None
    pys = frozenset().union(*(f.pythons for f in mine))
    if pys != set(t.python):
        rep.findings.append(Finding("disagree", f"torch {t.version} ({t.line})", "python",
                                    _pyset(t.python), _pyset(pys), index,
                                    f"CPython versions with Linux x86_64 {vname} wheels"))
    else:
        rep.agreed.append(f"{entry}: python {_pyset(pys)}")
    common = sorted(pys & set(t.python), key=Version) or sorted(pys, key=Version)
    return common[-1]


# -- the matrix's components: releases and requires-python on the simple index -------------

# the interpreters a requires-python is tried on: two constraints agree when they admit the same
_PYTHON_GRID = tuple(Version(v) for v in ["2.7.0", "2.7.18"] +
                     [f"3.{m}.{p}" for m in range(0, 30) for p in (0, 50)])


def _admits(spec: SpecifierSet) -> frozenset[Version]:
    return frozenset(v for v in _PYTHON_GRID if spec.contains(v, prereleases=True))


def _span(versions: Sequence[Version]) -> str:
    vs = sorted(versions)
    return str(vs[0]) if len(vs) == 1 else f"{vs[0]}..{vs[-1]}"


def compare_component(comp: Component, files: Sequence[ProjectFile], url: str,
                      rep: MatrixReport) -> None:
    """Existence, yanked status and requires-python of ``comp``'s releases on one project page."""
    by_version: dict[Version, list[ProjectFile]] = {}
    for f in files:
        if f.version is not None:
            by_version.setdefault(f.version, []).append(f)
    undeclared: dict[tuple[str, str], list[Version]] = {}
    for rel in sorted(comp.releases, key=lambda r: r.version):
        entry = f"{comp.name} {rel.version}"
        mine = by_version.get(rel.version, [])
        live = [f for f in mine if f.live]
        if not mine:
            rep.findings.append(Finding("disagree", entry, "release", "listed", "absent", url,
                                        "no file of this release on the index"))
            continue
        if not live:
            reasons = sorted({f.yanked for f in mine if isinstance(f.yanked, str)})
            rep.findings.append(Finding("disagree", entry, "release", "listed", "yanked", url,
                                        "every file of this release is yanked"
                                        + (f": {'; '.join(reasons)}" if reasons else "")))
            continue
        first = min((f.upload_time for f in live if f.upload_time), default=None)
        rep.agreed.append(f"{entry}: release on the index"
                          + (f" (uploaded {first[:10]})" if first else ""))
        spec = rel.requires.get("python")
        matrix_py = None if spec is None else str(spec)
        declared = sorted({f.requires_python for f in live if f.requires_python})
        if not declared:
            undeclared.setdefault((rel.line, matrix_py or "none"), []).append(rel.version)
            continue
        for value in declared:
            try:
                theirs = SpecifierSet(value)
            except InvalidSpecifier:
                rep.findings.append(Finding("unverified", entry, "python", matrix_py, value, url,
                                            "the index's requires-python is not a valid "
                                            "specifier"))
                continue
            if _admits(theirs) != _admits(spec if spec is not None else SpecifierSet()):
                rep.findings.append(Finding("disagree", entry, "python", matrix_py or "none",
                                            value, url, "requires-python of its files"))
            else:
                rep.agreed.append(f"{entry}: python {value}")
    for (_line, matrix_py), versions in undeclared.items():
        rep.findings.append(Finding(
            "unverified", f"{comp.name} {_span(versions)}", "python",
            None if matrix_py == "none" else matrix_py, None, url,
            f"the index declares no requires-python for {len(versions)} release(s); the "
            f"matrix's constraint is not confirmed by it"))
    listed = {r.version for r in comp.releases}
    lowest = min(listed, default=None)
    on_index = {v for v, fs in by_version.items() if any(f.live for f in fs)}
    for v in sorted(on_index, reverse=True):
        if (v not in listed and lowest is not None and v >= lowest
                and not v.is_prerelease and not v.is_devrelease):
            first = min((f.upload_time for f in by_version[v] if f.upload_time), default=None)
            rep.findings.append(Finding("new", f"{comp.name} {v}", "release", None, str(v), url,
                                        f"uploaded {first[:10]}" if first else ""))


def verify_components(m: Matrix, rep: MatrixReport, *, pypi: str = PYPI,
                      names: Sequence[str] = COMPONENTS,
                      progress: Progress | None = None) -> None:
    """Check the matrix components' releases in ``m`` against their pages on ``pypi``."""
    say = progress or (lambda _msg: None)
    for name in names:
        comp = m.component(name)
        url = project_url(pypi, name)
        say(f"listing {name} on {url}")
        try:
            files = project_files(pypi, name)
        except IndexUnreachable as e:
            rep.indexes[url] = f"unreachable: {e}"
            rep.findings.append(Finding("skipped", f"index {url}", "index", None, None, url,
                                        f"cannot reach it ({e}); {len(comp.releases)} {name} "
                                        f"release(s) not checked"))
            continue
        rep.indexes[url] = "reachable"
        compare_component(comp, files, url, rep)


def verify_matrix(m: Matrix, *, pypi: str = PYPI, torch_index: str | None = None,
                  variant_indexes: bool = True, uv: str | None = None, jobs: int = 4,
                  progress: Progress | None = None, notes_url: str = NVIDIA_NOTES,
                  registry: str = REGISTRY) -> MatrixReport:
    """Check ``m``'s torch facts against PyPI (``pypi``: PyPI or a mirror) and, with
    ``variant_indexes``, PyTorch's index per variant (``torch_index``: a template with
    ``{variant}``, the matrix's own by default); each component's releases and
    requires-python against their pages on ``pypi``."""
    say = progress or (lambda _msg: None)
    validate.url(pypi, "--pypi-index-url")
    if torch_index is not None:
        if "{variant}" not in torch_index:
            raise InputError(f"--torch-index {torch_index!r} has no {{variant}} placeholder, "
                             f"e.g. https://download.pytorch.org/whl/{{variant}}")
        validate.url(torch_index.replace("{variant}", "cu121"), "--torch-index")
    rep = MatrixReport(str(m.path), m.digest, primary=pypi)
    verify_components(m, rep, pypi=pypi, progress=say)
    verify_toolkits(m, rep, notes_url=notes_url, pypi=pypi, progress=say)
    verify_nccl(m, rep, pypi=pypi, progress=say)
    verify_base_images(m, rep, registry=registry, progress=say)
    uv_bin = find_uv(uv)
    work = _pypi_torch(m, rep, pypi, say)
    if variant_indexes:
        work += _variant_torch(m, rep, torch_index or m.torch_index, pypi, say)
    _check_metadata(work, rep, uv_bin, jobs, say)
    return rep


def _new_release(v: Version, known: set[Version], lowest: Version) -> bool:
    """A torch release the matrix does not list yet (not older than its oldest, no pre/dev)."""
    return v not in known and v >= lowest and not v.is_prerelease and not v.is_devrelease


def _pypi_torch(m: Matrix, rep: MatrixReport, pypi: str, say: Progress) -> list[tuple[_Job, bool]]:
    """torch's files on ``pypi`` against each release's PyPI default variant; releases the
    matrix lacks are "new"; returns the metadata jobs (each on PyPI)."""
    say(f"listing torch on {pypi}")
    try:
        files = list_project(pypi)
        rep.indexes[pypi] = "reachable"
    except IndexUnreachable as e:
        rep.indexes[pypi] = f"unreachable: {e}"
        rep.findings.append(Finding("skipped", f"index {pypi}", "index", None, None, pypi,
                                    f"cannot reach it ({e}); the PyPI default variants "
                                    f"were not checked"))
        return []
    work: list[tuple[_Job, bool]] = []
    for t in m.torch:
        if t.pypi_default is None:
            continue
        py = _compare_files(t, t.pypi_default, files, pypi, rep, local=None)
        if py:
            work.append((_Job(t, t.pypi_default, pypi, f"torch=={t.version}", py), True))
    listed, lowest = {t.version for t in m.torch}, min(t.version for t in m.torch)
    for v in sorted({f.public for f in files}, reverse=True):
        if _new_release(v, listed, lowest):
            rep.findings.append(Finding("new", f"torch {v}", "release", None, str(v), pypi))
    return work


def _variant_torch(m: Matrix, rep: MatrixReport, template: str, pypi: str,
                   say: Progress) -> list[tuple[_Job, bool]]:
    """torch's files on PyTorch's index of each variant (``template`` with ``{variant}``);
    returns the metadata jobs (each off PyPI, with PyPI as the extra index)."""
    work: list[tuple[_Job, bool]] = []
    lowest = min(t.version for t in m.torch)
    variants = sorted({n for t in m.torch for n in t.variants}, key=lambda n: (len(n), n))
    for vname in variants:
        url = template.format(variant=vname)
        say(f"listing torch on {url}")
        releases = [t for t in m.torch if vname in t.variants]
        try:
            vfiles = list_project(url)
            rep.indexes[url] = "reachable"
        except IndexUnreachable as e:
            rep.indexes[url] = f"unreachable: {e}"
            rep.findings.append(Finding(
                "skipped", f"index {url}", "index", None, None, url,
                f"cannot reach it ({e}); {len(releases)} torch release(s) with {vname} "
                f"not checked there"))
            continue
        for t in releases:
            py = _compare_files(t, vname, vfiles, url, rep, local=vname)
            if py and vname != "cpu":
                work.append((_Job(t, vname, url, f"torch=={t.version}+{vname}", py,
                                  (pypi,)), False))
        known = {t.version for t in releases}
        for v in sorted({f.public for f in vfiles if f.local == vname}, reverse=True):
            if _new_release(v, known, lowest):
                rep.findings.append(Finding("new", f"torch {v} {vname}", "variant", None,
                                            f"{v}+{vname}", url))
    return work


def _check_metadata(work: list[tuple[_Job, bool]], rep: MatrixReport, uv_bin: str, jobs: int,
                    say: Progress) -> None:
    """Each job's metadata resolved with uv (``jobs`` at once) and compared with the matrix."""
    def run(item: tuple[_Job, bool]):
        job, on_pypi = item
        try:
            return item, resolve_pins(uv_bin, job.requirement, job.python, job.index, job.extra), None
        except (IndexUnreachable, RuntimeError) as e:
            return item, None, e

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for (job, on_pypi), pins, err in pool.map(run, work):
            done += 1
            say(f"metadata {done}/{len(work)}: torch {job.release.version} {job.variant}")
            if err is not None:
                kind = "skipped" if isinstance(err, IndexUnreachable) else "unverified"
                rep.findings.append(Finding(kind, f"torch {job.release.version} {job.variant}",
                                            "nccl", None, None, job.index,
                                            f"uv could not read the metadata: {err}"))
                continue
            _compare_metadata(job, pins, on_pypi, rep)


# -- CUDA toolkits, base images, NCCL ----------------------------------------------------------

def _get(url: str, accept: str = "*/*") -> bytes:
    return _fetch(url, accept)[0]


def _fetch(url: str, accept: str) -> tuple[bytes, str]:
    """(body, content type) of ``url`` through envbuilder's one HTTP client (envbuilder._http:
    http(s) only, a total deadline, bounded size, redirects by hand); a file:// index through
    the capped reader. IndexUnreachable for any failure."""
    from envbuilder import _http
    from envbuilder.errors import EnvbuilderError

    if url.startswith("file://"):
        from envbuilder.core.readfile import read_bytes_capped

        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        if path.endswith("/"):
            path += "index.html"
        try:
            return read_bytes_capped(path, "index page", limit=MAX_PAGE_BYTES), "text/html"
        except EnvbuilderError as e:
            raise IndexUnreachable(str(e)) from None
    client = _http.Client(f"the package index {url.split('/')[2] if '//' in url else url}",
                          timeout=HTTP_TIMEOUT_S, total=HTTP_TIMEOUT_S, step="matrix verify")
    try:
        r = client.request(url, {"Accept": accept}, limit=MAX_PAGE_BYTES, what="index page",
                           plain_http=True)
    except EnvbuilderError as e:
        raise IndexUnreachable(str(e)) from None
    if r.status != 200:
        raise IndexUnreachable(f"HTTP {r.status} for {url}")
    return r.body, r.headers.get("content-type", "")


_TABLE3_ROW = re.compile(r"CUDA (\d+\.\d+)(?:\.(\d+))?(?: \(\d+\.\d+\.\d+\))?\s*(?:GA|Update (\d+))?"
                         r"\s*>=\s*([0-9]{3}(?:\.[0-9]+)+)")


def table3_floors(page: str) -> dict[str, str]:
    """Toolkit patch -> minimum Linux x86_64 driver, from the text of the release notes' Table
    3 ("CUDA 13.3 Update 1 | >=610.43.02 | ..."): the first driver after each row's name is
    the Linux one. GA rows are x.y.0, "Update N" rows x.y.N."""
    import html as _html

    text = re.sub(r"\s+", " ", _html.unescape(re.sub(r"<[^>]+>", " ", page)))
    out: dict[str, str] = {}
    for m in _TABLE3_ROW.finditer(text):
        patch = m.group(2) or m.group(3) or "0"
        out.setdefault(f"{m.group(1)}.{patch}", m.group(4))
    return out


def verify_toolkits(m: Matrix, rep: MatrixReport, *, notes_url: str = NVIDIA_NOTES,
                    pypi: str = PYPI, progress: Progress | None = None) -> None:
    """Each toolkit's driver floor against Table 3; toolkit releases on PyPI's cuda-toolkit
    that the matrix lacks."""
    say = progress or (lambda _msg: None)
    say(f"reading {notes_url}")
    try:
        floors = table3_floors(_get(notes_url, "text/html").decode("utf-8", "replace"))
        rep.indexes[notes_url] = "reachable" if floors else "unreachable: no Table 3 rows on the page"
    except IndexUnreachable as e:
        rep.indexes[notes_url] = f"unreachable: {e}"
        floors = {}
    if not floors:
        rep.findings.append(Finding("skipped", f"index {notes_url}", "index", None, None, notes_url,
                                    f"cannot read Table 3 ({rep.indexes[notes_url]}); "
                                    f"{len(m.toolkits)} toolkit driver floor(s) not checked"))
    else:
        known = {str(t.version) for t in m.toolkits}
        for t in m.toolkits:
            got = floors.get(str(t.version))
            if got is None:
                rep.findings.append(Finding("unverified", f"CUDA {t.version}", "driver_min", t.driver_min,
                                            None, notes_url, "no Table 3 row for this patch"))
            elif got != t.driver_min:
                rep.findings.append(Finding("disagree", f"CUDA {t.version}", "driver_min", t.driver_min,
                                            got, notes_url))
            else:
                rep.agreed.append(f"CUDA {t.version}: driver_min {got}")
        for v in sorted(set(floors) - known, key=Version, reverse=True):
            rep.findings.append(Finding("new", f"CUDA {v}", "toolkit", None, floors[v], notes_url))
    _new_on_pypi(rep, pypi, "cuda-toolkit", {t.version for t in m.toolkits}, "CUDA", say,
                 floor=min((t.version for t in m.toolkits if t.version.major >= 12), default=None))


def _new_on_pypi(rep: MatrixReport, pypi: str, project: str, listed: set[Version], what: str,
                 say: Progress, floor: Version | None) -> None:
    url = project_url(pypi, project)
    say(f"listing {project} on {url}")
    try:
        files = project_files(pypi, project)
        rep.indexes[url] = "reachable"
    except IndexUnreachable as e:
        rep.indexes[url] = f"unreachable: {e}"
        rep.findings.append(Finding("skipped", f"index {url}", "index", None, None, url,
                                    f"cannot reach it ({e}); new {what} releases not looked for"))
        return
    # a release, without post-release suffixes and trailing zeros (13.4.1.0 is 13.4.1)
    seen = {Version(".".join(map(str, f.version.release[:3]))) for f in files
            if f.version is not None and f.live and not f.version.is_prerelease
            and not f.version.is_devrelease}
    for v in sorted(seen, reverse=True):
        if v in listed or (floor is not None and v < floor):
            continue
        rep.findings.append(Finding("new", f"{what} {v}", "release", None, str(v), url))


def verify_nccl(m: Matrix, rep: MatrixReport, *, pypi: str = PYPI,
                progress: Progress | None = None) -> None:
    """NCCL releases PyPI's nvidia-nccl-cu12/cu13 have that nccl.yaml lacks."""
    say = progress or (lambda _msg: None)
    listed = {n.version for n in m.nccl}
    floor = min((n.version for n in m.nccl if any("." not in c for c in n.cuda)), default=None)
    for project in ("nvidia-nccl-cu12", "nvidia-nccl-cu13"):
        _new_on_pypi(rep, pypi, project, listed, f"NCCL ({project})", say, floor)


def tag_exists(registry: str, repository: str, tag: str) -> bool:
    """Whether the registry's tag API knows the tag (404: it does not); IndexUnreachable when
    the registry does not answer."""
    url = f"{registry.rstrip('/')}/{repository}/tags/{tag}"
    try:
        _get(url, "application/json")
        return True
    except IndexUnreachable as e:
        if "HTTP 404" in str(e):
            return False
        raise


def verify_base_images(m: Matrix, rep: MatrixReport, *, registry: str = REGISTRY,
                       progress: Progress | None = None) -> None:
    """Every nvidia/cuda tag the matrix lists (sets not marked removed) against the registry."""
    say = progress or (lambda _msg: None)
    tags = [(b.repository or m.base_repository, b.tag(fl, o, cudnn=c), b)
            for b in m.base_images if not b.removed for o in b.os for fl in b.flavours
            for c in ((False, True) if b.cudnn and (b.cudnn_os is None or o in b.cudnn_os) else (False,))]
    for i, (repo, tag, b) in enumerate(tags):
        say(f"tag {i + 1}/{len(tags)}: {repo}:{tag}")
        try:
            ok = tag_exists(registry, repo, tag)
        except IndexUnreachable as e:
            rep.indexes[registry] = f"unreachable: {e}"
            rep.findings.append(Finding("skipped", f"index {registry}", "index", None, None, registry,
                                        f"cannot reach it ({e}); {len(tags) - i} base-image tag(s) "
                                        f"not checked"))
            return
        rep.indexes[registry] = "reachable"
        if ok:
            rep.agreed.append(f"{repo}:{tag}: exists")
        else:
            rep.findings.append(Finding("disagree", f"{repo}:{tag}", "tag", "listed", "missing",
                                        registry, f"CUDA {b.cuda} set"))
