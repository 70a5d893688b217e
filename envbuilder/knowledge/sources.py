"""Parsers of the primary sources ``matrix refresh`` reads: each turns one response (a page, a
file) into facts, with no network of its own.

* ``wheel_files``: a PEP 691 JSON or PEP 503 HTML project page of a package index (PyPI's,
  PyTorch's per-variant one): each wheel's version, CPython tag and platform, its
  ``requires-python`` and where its metadata (PEP 658) is.
* ``metadata_pins``: a wheel's METADATA: the ``nvidia-nccl-*`` pin, the CUDA runtime or
  ``cuda-toolkit`` pin (so the CUDA variant), for one machine (markers evaluated).
* ``release_tables``: PyTorch's RELEASE.md: the release compatibility matrix (Python range,
  stable and experimental CUDA per release) and the CUDA support matrix (architectures per
  CUDA version for Linux x86 and for Linux aarch64 builds, for the releases it names).
* ``supported_tags``: NVIDIA's ``doc/supported-tags.md`` of gitlab.com/nvidia/container-images/cuda:
  the tags per OS and CUDA version.
* ``require_cuda``: an nvidia/cuda Dockerfile's ``NVIDIA_REQUIRE_CUDA``: ``cuda>=X.Y`` and the
  driver branches its brand clauses list.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass, field
from email.parser import HeaderParser
from typing import Any

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}
MACHINES = {v: k for k, v in PLATFORMS.items()}


@dataclass(frozen=True)
class WheelFile:
    """One wheel of a project page."""

    filename: str
    version: Version  # with its local part (2.9.1+cu128)
    python: str | None  # "3.11", "3.14t"; None for other interpreters or abi3
    platform: str | None  # linux/amd64 | linux/arm64; None for other platforms
    url: str
    metadata_url: str | None  # PEP 658 ({url}.metadata), when the index says it has one
    requires_python: str | None = None
    size: int | None = None  # bytes, when the index says

    @property
    def public(self) -> Version:
        return Version(self.version.public)

    @property
    def local(self) -> str | None:
        return self.version.local


def _python_tag(interp: str, abi: str) -> str | None:
    m = re.fullmatch(r"cp3(\d+)", interp)
    if not m:
        return None
    if abi == interp + "t":
        return f"3.{m.group(1)}t"
    if abi in (interp, interp + "m", interp + "mu"):
        return f"3.{m.group(1)}"
    return None


def _platform(tag_platform: str) -> str | None:
    if not tag_platform.startswith(("manylinux", "linux")):
        return None
    return next((p for machine, p in PLATFORMS.items() if tag_platform.endswith(machine)), None)


def _wheel(name: str, url: str, meta: bool, requires_python: str | None,
           size: int | None = None) -> WheelFile | None:
    try:
        _, version, _, tags = parse_wheel_filename(name)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    tag = next(iter(sorted(tags, key=str)), None)
    if tag is None:
        return None
    return WheelFile(name, version, _python_tag(tag.interpreter, tag.abi), _platform(tag.platform),
                     url, url + ".metadata" if meta else None, requires_python, size)


def wheel_files(body: bytes, page_url: str, content_type: str = "") -> list[WheelFile]:
    """The wheels of a project page (PEP 691 JSON when it parses as JSON, else PEP 503 HTML with
    ``data-dist-info-metadata``/``data-core-metadata`` and ``data-requires-python``)."""
    text = body.decode("utf-8", "replace")
    if "json" in content_type or text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            out = []
            for f in doc.get("files", []):
                name = str(f.get("filename", ""))
                if not name.endswith(".whl") or f.get("yanked"):
                    continue
                meta = f.get("core-metadata") or f.get("dist-info-metadata")
                size = f.get("size")
                w = _wheel(name, urllib.parse.urljoin(page_url, str(f.get("url", name))), bool(meta),
                           f.get("requires-python"), size if isinstance(size, int) else None)
                if w is not None:
                    out.append(w)
            return out
    from html.parser import HTMLParser

    found: list[WheelFile] = []

    class _A(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag != "a":
                return
            a = dict(attrs)
            href = (a.get("href") or "").split("#", 1)[0]
            name = urllib.parse.unquote(href.rsplit("/", 1)[-1])
            if not name.endswith(".whl") or "data-yanked" in a:
                return
            meta = bool(a.get("data-core-metadata") or a.get("data-dist-info-metadata"))
            w = _wheel(name, urllib.parse.urljoin(page_url, href), meta, a.get("data-requires-python"))
            if w is not None:
                found.append(w)

    _A().feed(text)
    return found


@dataclass(frozen=True)
class Pins:
    """What one wheel's metadata pins, on one machine."""

    nccl: tuple[str, Version] | None  # ("nvidia-nccl-cu12", 2.27.5)
    cuda_runtime: Version | None  # nvidia-cuda-runtime(-cuNN)'s version
    cuda_toolkit: Version | None  # cuda-toolkit==X.Y.Z
    nvidia: tuple[str, ...] = ()  # every nvidia-* / cuda-* requirement that applies

    @property
    def variant(self) -> str | None:
        """The CUDA variant the wheel's pins say (None: it pins no CUDA runtime; older CUDA wheels
        linked CUDA statically, so that alone does not make it a CPU build)."""
        v = self.cuda_toolkit or self.cuda_runtime
        if v is not None:
            return f"cu{v.major}{v.minor}"
        return None


def _pinned(req: Requirement) -> Version | None:
    for s in req.specifier:
        if s.operator in ("==", "===") and not s.version.endswith("*"):
            try:
                return Version(s.version)
            except InvalidVersion:
                return None
        if s.operator == "==" and s.version.endswith(".*"):
            try:
                return Version(s.version[:-2])
            except InvalidVersion:
                return None
    return None


def metadata_pins(text: str, platform: str, python: str = "3.12") -> Pins:
    """The pins of a wheel's METADATA that apply on ``platform`` (markers evaluated for Linux on
    that machine and ``python``)."""
    env = {"platform_system": "Linux", "sys_platform": "linux", "os_name": "posix",
           "platform_machine": MACHINES.get(platform, "x86_64"), "python_version": python.rstrip("t"),
           "python_full_version": python.rstrip("t") + ".0", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "extra": ""}
    headers = HeaderParser().parsestr(text)
    nccl = runtime = toolkit = None
    nvidia: list[str] = []
    for line in headers.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        try:
            if req.marker is not None and not req.marker.evaluate(env):
                continue
        except UndefinedEnvironmentName:
            continue
        name = req.name.lower().replace("_", "-")
        if not name.startswith(("nvidia-", "cuda-")):
            continue
        nvidia.append(name)
        v = _pinned(req)
        if name.startswith("nvidia-nccl") and v is not None:
            nccl = (name, v)
        elif re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", name) and v is not None:
            runtime = v
        elif name == "cuda-toolkit" and v is not None:
            toolkit = v
    return Pins(nccl, runtime, toolkit, tuple(nvidia))


# -- RELEASE.md ---------------------------------------------------------------------------------

@dataclass
class ReleaseTables:
    """What PyTorch's RELEASE.md says per release line."""

    python: dict[str, str] = field(default_factory=dict)  # line -> ">=3.10, <=(3.14, ...)"
    cuda: dict[str, list[str]] = field(default_factory=dict)  # line -> ["12.6", "13.0", ...] (stable + experimental)
    arch_lines: list[str] = field(default_factory=list)  # the lines the arch tables are for
    arch: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # platform -> CUDA x.y -> [sm_80, ...]


def _rows(block: list[str]) -> list[list[str]]:
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in block
            if ln.strip().startswith("|") and not re.fullmatch(r"\|?[\s|:-]+\|?", ln.strip())]


def _tables(text: str) -> list[list[list[str]]]:
    """The markdown tables of a text, each a list of rows (header first)."""
    out: list[list[list[str]]] = []
    block: list[str] = []
    for ln in text.splitlines() + [""]:
        if ln.strip().startswith("|"):
            block.append(ln)
        elif block:
            out.append(_rows(block))
            block = []
    return out


def _sm(cell: str) -> list[str]:
    """"Turing(7.5), Ampere(8.0, 8.6), Blackwell(10.0, 12.0+PTX)" -> sm_75 ... sm_120."""
    return [f"sm_{a}{b}" for a, b in re.findall(r"(\d+)\.(\d+)", cell)]


def release_tables(text: str) -> ReleaseTables:
    """RELEASE.md's release compatibility matrix and CUDA support matrix."""
    out = ReleaseTables()
    m = re.search(r"For Release ([0-9., and]+?) PyTorch Supports", text)
    if m:
        out.arch_lines = re.findall(r"\d+\.\d+", m.group(1))
    for table in _tables(text):
        head = [h.lower() for h in table[0]]
        if head and head[0].startswith("pytorch version"):
            col = {h: i for i, h in enumerate(head)}
            for row in table[1:]:
                if not re.fullmatch(r"\d+\.\d+", row[0]):
                    continue
                line = row[0]
                out.python[line] = row[col.get("python", 1)] if len(row) > 1 else ""
                cells = [row[i] for h, i in col.items() if "cuda" in h and i < len(row)]
                out.cuda[line] = [f"{a}.{b}" for c in cells for a, b in re.findall(r"CUDA (\d+)\.(\d+)", c)]
        elif len(head) >= 2 and head[0] == "cuda" and "architectures" in head[1]:
            platform = "linux/arm64" if "aarch64" in head[1] else "linux/amd64"
            rows = out.arch.setdefault(platform, {})
            for row in table[1:]:
                v = re.match(r"(\d+)\.(\d+)", row[0])
                if v and len(row) > 1:
                    rows[f"{v.group(1)}.{v.group(2)}"] = _sm(row[1])
    return out


# -- NVIDIA's image sources --------------------------------------------------------------------

_TAG = re.compile(r"`(\d+\.\d+\.\d+)-(?:(cudnn\d*)-)?(base|runtime|devel)-([a-z0-9.]+)`")


def supported_tags(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(CUDA version, OS) -> {"flavours": {...}, "cudnn": infix or None} from supported-tags.md."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for ver, cudnn, flavour, os_name in _TAG.findall(text):
        e = out.setdefault((ver, os_name), {"flavours": set(), "cudnn": None})
        e["flavours"].add(flavour)
        if cudnn:
            e["cudnn"] = cudnn
    return out


_REQUIRE = re.compile(r'NVIDIA_REQUIRE_CUDA[= ]"?cuda>=(\d+\.\d+)([^"\n]*)')


def require_cuda(dockerfile: str) -> tuple[Version, tuple[int, ...]] | None:
    """``cuda>=X.Y`` and the sorted driver branches of a Dockerfile's NVIDIA_REQUIRE_CUDA."""
    m = _REQUIRE.search(dockerfile)
    if m is None:
        return None
    branches = sorted({int(b) for b in re.findall(r"driver>=(\d+)", m.group(2))})
    return Version(m.group(1)), tuple(branches)


def dist_dir(os_name: str) -> str:
    """The folder of an OS in the image sources' dist/<version>/ (ubuntu24.04 -> ubuntu2404)."""
    return os_name.replace(".", "") if os_name.startswith("ubuntu") else os_name
