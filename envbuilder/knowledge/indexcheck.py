"""``envbuilder matrix verify``: the torch facts of the matrix against the live package indexes.

For every torch release of the matrix and each of its variants on an index this machine can
reach, the index's own data is compared with the matrix:

* the files (PEP 691 JSON or PEP 503 HTML simple index): the release exists, and the CPython
  versions with Linux x86_64 wheels are the matrix's ``python`` list;
* the wheel's metadata, read by resolving ``torch==V`` with ``uv pip compile`` for Linux x86_64
  (uv reads PEP 658 metadata or ranges of the wheel; no wheel is downloaded): the
  ``nvidia-nccl-*`` pin is the variant's ``nccl``/``nccl_package``, and on PyPI the CUDA
  runtime pin names the variant that ``pypi_default`` says;
* releases on the index that the matrix does not list are reported as new.

An index that cannot be reached is reported as skipped, never as agreement. A wheel whose
metadata names no NCCL (NCCL linked statically) cannot confirm the matrix's NCCL version:
that is reported as unverified. Disagreements name the entry, the field and both values.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Callable, Iterable, Sequence

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envbuilder.core.matrix import Matrix, TorchRelease

PYPI = "https://pypi.org/simple"
PLATFORM = "x86_64-manylinux_2_28"
HTTP_TIMEOUT_S = 20
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
class VerifyReport:
    matrix_path: str
    matrix_digest: str
    findings: list[Finding] = field(default_factory=list)
    agreed: list[str] = field(default_factory=list)  # "torch 2.6.0 cu124: nccl 2.21.5"
    indexes: dict[str, str] = field(default_factory=dict)  # url -> "reachable" | reason

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    @property
    def ok(self) -> bool:
        return not self.of("disagree")

    def to_dict(self) -> dict:
        return {"ok": self.ok,
                "matrix": {"path": self.matrix_path, "digest": self.matrix_digest},
                "indexes": dict(self.indexes),
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


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self._in = False

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "a":
            href = dict(attrs).get("href") or ""
            self.names.append(href.split("#", 1)[0].rsplit("/", 1)[-1])


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


def list_project(index: str, project: str = "torch") -> list[IndexFile]:
    """Every Linux x86_64 wheel of ``project`` on a simple index; IndexUnreachable when the
    index does not answer."""
    url = f"{index.rstrip('/')}/{project}/"
    req = urllib.request.Request(url, headers={"Accept": _ACCEPT, "User-Agent": "envbuilder"})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as r:
            ctype = r.headers.get("Content-Type", "")
            body = r.read()
    except urllib.error.HTTPError as e:
        raise IndexUnreachable(f"HTTP {e.code} for {url}") from None
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise IndexUnreachable(f"{url}: {reason}") from None
    if "json" in ctype:
        data = json.loads(body)
        names = [f["filename"] for f in data.get("files", [])]
    else:
        p = _Anchors()
        p.feed(body.decode("utf-8", "replace"))
        names = p.names
    return linux_x86_64_files(names)


# -- metadata through uv --------------------------------------------------------------------

_NET = ("error sending request", "Failed to fetch", "dns error", "Connection refused",
        "timed out", "certificate", "Could not connect", "tcp connect error")


@dataclass(frozen=True)
class Pins:
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
                 extra: Sequence[str] = ()) -> Pins:
    """``uv pip compile`` of one requirement for Linux x86_64: the pinned versions."""
    cmd = [uv, "pip", "compile", "-", "--no-config", "--no-header", "--no-annotate",
           "--python-version", python, "--python-platform", PLATFORM, "--index-url", index]
    for u in extra:
        cmd += ["--extra-index-url", u]
    if extra:
        cmd += ["--index-strategy", "unsafe-best-match"]
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", NO_COLOR="1")
    try:
        r = subprocess.run(cmd, input=requirement + "\n", capture_output=True, text=True, env=env,
                           timeout=UV_TIMEOUT_S, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        raise IndexUnreachable(f"uv pip compile {requirement} took over {UV_TIMEOUT_S} s") from None
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
    return Pins(pkgs)


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


def _compare_metadata(job: _Job, pins: Pins, on_pypi: bool, rep: VerifyReport) -> None:
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
                   rep: VerifyReport, *, local: str | None) -> str | None:
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


def verify_matrix(m: Matrix, *, pypi: str = PYPI, torch_index: str | None = None,
                  variant_indexes: bool = True, uv: str | None = None, jobs: int = 4,
                  progress: Progress | None = None) -> VerifyReport:
    """Check ``m``'s torch facts against PyPI (``pypi``: PyPI or a mirror) and, with
    ``variant_indexes``, PyTorch's index per variant (``torch_index``: a template with
    ``{variant}``, the matrix's own by default)."""
    say = progress or (lambda _msg: None)
    rep = VerifyReport(str(m.path), m.digest)
    uv_bin = find_uv(uv)
    work: list[tuple[_Job, bool]] = []
    lowest = min(t.version for t in m.torch)
    listed = {t.version for t in m.torch}

    say(f"listing torch on {pypi}")
    try:
        files = list_project(pypi)
        rep.indexes[pypi] = "reachable"
    except IndexUnreachable as e:
        rep.indexes[pypi] = f"unreachable: {e}"
        rep.findings.append(Finding("skipped", f"index {pypi}", "index", None, None, pypi,
                                    f"cannot reach it ({e}); the PyPI default variants "
                                    f"were not checked"))
        files = None
    if files is not None:
        for t in m.torch:
            if t.pypi_default is None:
                continue
            py = _compare_files(t, t.pypi_default, files, pypi, rep, local=None)
            if py:
                work.append((_Job(t, t.pypi_default, pypi, f"torch=={t.version}", py), True))
        for v in sorted({f.public for f in files}, reverse=True):
            if v not in listed and v >= lowest and not v.is_prerelease and not v.is_devrelease:
                rep.findings.append(Finding("new", f"torch {v}", "release", None, str(v), pypi))

    if variant_indexes:
        template = torch_index or m.torch_index
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
                if v not in known and v >= lowest and not v.is_prerelease and not v.is_devrelease:
                    rep.findings.append(Finding("new", f"torch {v} {vname}", "variant", None,
                                                f"{v}+{vname}", url))

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
    return rep
