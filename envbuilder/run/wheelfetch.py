"""``envbuilder wheelhouse LOCK -o DIR``: exactly a lock's files, downloaded and verified.

For each entry of a requirements.lock (``name==version`` with its sha256 hashes) the one file an
image of the lock's Python and platform installs: the best wheel for its tags (CPython X.Y,
``manylinux_2_N`` for N up to the lock's glibc, the architecture), else the sdist, and only a
file whose sha256 the lock holds. The indexes are the lock's own, in the order uv asked them
(its extra indexes first, then its index: the header's record), each package from the first
index that lists it (uv's first-index). An index page is read as PEP 691 JSON or PEP 503 HTML
(https://peps.python.org/pep-0691/, https://peps.python.org/pep-0503/). Credentials come from
~/.netrc (or the file ``NETRC`` names), never from a file envbuilder writes.

* Resumable: a file already in DIR with a hash the lock holds is kept (no network for it); a
  download goes to a hidden folder in DIR and is moved into place only once its hash is right.
* Verified: a file whose sha256 the lock does not hold, downloaded or found in DIR, fails
  naming it (exit 1); DIR is never overwritten.
* ``check`` (offline): which locked packages DIR lacks, exit 2 naming them and the command that
  fetches them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable, Sequence

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name,
                             parse_sdist_filename, parse_wheel_filename)
from packaging.version import InvalidVersion, Version

from envbuilder.errors import InputError, OperationError

PARTIAL = ".envbuilder-wheelhouse-partial"
CHUNK = 1 << 20
PAGE_LIMIT = 64 << 20
TIMEOUT_S = 120
_ACCEPT = ("application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
           "text/html;q=0.01")
Event = Callable[[str, str, Any], None]


@dataclass(frozen=True)
class Locked:
    """What a lock says about where and for what its files are: its entries, the image's
    Python and platform, and its indexes in the order uv asked them."""

    path: Path
    python: str
    platform: str
    indexes: tuple[str, ...]
    packages: tuple[Any, ...]  # lock.entries.LockedPackage


@dataclass
class WheelhouseReport:
    lock: str
    out: str
    python: str
    platform: str
    files: list[dict[str, str]] = field(default_factory=list)  # name, version, file, sha256, status
    missing: list[str] = field(default_factory=list)  # name==version (check)
    checked: bool = False

    @property
    def downloaded(self) -> int:
        return sum(f["status"] == "downloaded" for f in self.files)

    @property
    def kept(self) -> int:
        return sum(f["status"] == "kept" for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {"lock": self.lock, "out": self.out, "python": self.python,
                "platform": self.platform, "checked": self.checked, "files": list(self.files),
                "downloaded": self.downloaded, "kept": self.kept, "missing": list(self.missing)}


def read_locked(lock: Path) -> Locked:
    """The lock at ``lock`` (a requirements.lock, or a folder holding one) as ``Locked``: a
    lock without its inputs record cannot say its platform (exit 2, naming the fix)."""
    from envbuilder.core.readfile import read_text_capped
    from envbuilder.lock.model import read
    from envbuilder.lock.entries import LOCK_NAME, MAX_LOCK_BYTES

    path = lock / LOCK_NAME if lock.is_dir() else lock
    if not path.is_file():
        raise InputError(f"{lock} is not a requirements.lock (nor a folder with one): make it "
                         f"with envbuilder lock TARGET -o DIR")
    text = read_text_capped(path, "lock", limit=MAX_LOCK_BYTES)
    lf = read(text, str(path), f"lock it again with envbuilder lock TARGET -o {path.parent} --upgrade")
    rec = lf.record
    if rec is None or not lf.record_intact:
        raise InputError(f"{path} keeps no intact inputs record (its Python, platform and "
                         f"indexes): lock it again with envbuilder lock TARGET -o {path.parent} --upgrade")
    extras = rec.get("extra index", [])
    indexes = tuple(dict.fromkeys([*(extras if isinstance(extras, list) else [extras]),
                                   str(rec["index"])]))
    return Locked(path, str(rec["python"]), str(rec["platform"]), indexes, tuple(lf.packages()))


def supported_tags(python: str, platform: str) -> list[Tag]:
    """The wheel tags an image of ``python`` on ``platform`` (uv's ``x86_64-manylinux_2_28``)
    installs, best first (packaging.tags, as pip orders them)."""
    arch, _, libc = platform.partition("-")
    glibc = int(libc.rsplit("_", 1)[-1]) if libc.startswith("manylinux_2_") else 17
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    plats = [p for m in range(glibc, 4, -1) for p in
             ([f"manylinux_2_{m}_{arch}"] + ([f"{legacy[m]}_{arch}"] if m in legacy else []))]
    plats.append(f"linux_{arch}")
    major, minor = (int(x) for x in python.split(".")[:2])
    return [*cpython_tags((major, minor), platforms=plats),
            *compatible_tags((major, minor), f"cp{major}{minor}", plats)]


def _parse(filename: str) -> tuple[str, Version, frozenset[Tag] | None] | None:
    """(name, version, tags) of a wheel, (name, version, None) of an sdist, None otherwise."""
    try:
        if filename.endswith(".whl"):
            name, version, _, tags = parse_wheel_filename(filename)
            return canonicalize_name(name), version, tags
        if filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
            return canonicalize_name(name), version, None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return None


def _rank(filename: str, name: str, version: Version, order: dict[Tag, int]) -> int | None:
    """How good ``filename`` is for the package (lower is better; sdists last), None when it
    is not this package's or does not install here."""
    parsed = _parse(filename)
    if parsed is None or parsed[0] != name or parsed[1] != version:
        return None
    if parsed[2] is None:
        return len(order)
    ranks = [order[t] for t in parsed[2] if t in order]
    return min(ranks) if ranks else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _on_disk(out: Path, pkg: Any, order: dict[Tag, int]) -> tuple[Path, str] | None:
    """The best file of ``pkg`` already in ``out`` with a hash the lock holds, and its hash;
    a file of it with another hash fails naming it (exit 1): DIR is never overwritten."""
    version = Version(pkg.version)
    found = sorted((r, p) for p in out.iterdir() if p.is_file()
                   and (r := _rank(p.name, pkg.name, version, order)) is not None)
    for _, p in found:
        digest = _sha256(p)
        if digest not in pkg.hashes:
            raise OperationError(f"{p} has {digest}, which the lock does not hold for "
                                 f"{pkg.name}=={pkg.version}: remove it and run the command again",
                                 step="wheelhouse")
        return p, digest
    return None


def check(lock: Path, out: Path, command: str) -> WheelhouseReport:
    """Offline: which of the lock's packages ``out`` lacks (exit 2 naming them and
    ``command``, the one that fetches them), each file there verified (exit 1)."""
    locked = read_locked(lock)
    report = WheelhouseReport(str(locked.path), str(out), locked.python, locked.platform,
                              checked=True)
    if not out.is_dir():
        raise InputError(f"wheelhouse {out} is not a folder: fill it with {command}")
    order = {t: i for i, t in enumerate(supported_tags(locked.python, locked.platform))}
    for pkg in locked.packages:
        have = _on_disk(out, pkg, order)
        if have is None:
            report.missing.append(f"{pkg.name}=={pkg.version}")
        else:
            report.files.append(_row(pkg, *have, "kept"))
    if report.missing:
        n = len(report.missing)
        raise InputError(f"wheelhouse {out} lacks {n} locked file{'s' if n > 1 else ''} for "
                         f"Python {locked.python} on {locked.platform}: "
                         f"{', '.join(report.missing[:20])}{' ...' if n > 20 else ''}; {command} "
                         f"fetches them", details=report.missing)
    return report


def _row(pkg: Any, path: Path, digest: str, status: str) -> dict[str, str]:
    return {"name": pkg.name, "version": pkg.version, "file": path.name, "sha256": digest,
            "status": status}


def fill(lock: Path, out: Path, *, on_event: Event | None = None) -> WheelhouseReport:
    """Download into ``out`` every file of the lock at ``lock`` it lacks (see the module)."""
    locked = read_locked(lock)
    emit = on_event or (lambda *_: None)
    if out.exists() and not out.is_dir():
        raise InputError(f"-o {out} is not a folder: name a folder for the wheelhouse")
    out.mkdir(parents=True, exist_ok=True)
    report = WheelhouseReport(str(locked.path), str(out), locked.python, locked.platform)
    order = {t: i for i, t in enumerate(supported_tags(locked.python, locked.platform))}
    partial = out / PARTIAL
    fetcher = _Fetcher(locked.indexes)
    n = len(locked.packages)
    # what is there first, every file verified, before any network: a wrong file fails at once
    there = [_on_disk(out, pkg, order) for pkg in locked.packages]
    try:
        for i, (pkg, have) in enumerate(zip(locked.packages, there), 1):
            if have is not None:
                report.files.append(_row(pkg, *have, "kept"))
                emit("wheelhouse", "build-step", (i, n, f"kept {have[0].name}"))
                continue
            url, filename = fetcher.choose(pkg, order)
            emit("wheelhouse", "build-step", (i - 1, n, f"download {filename}"))
            partial.mkdir(exist_ok=True)
            tmp = partial / filename
            digest = fetcher.download(url, tmp)
            if digest not in pkg.hashes:
                tmp.unlink(missing_ok=True)
                raise OperationError(f"{filename} (from {_public(url)}) has {digest}, which the "
                                     f"lock {locked.path} does not hold for {pkg.name}=={pkg.version}: "
                                     f"the index serves another file than the one locked",
                                     step="wheelhouse")
            final = out / filename
            if final.exists():  # not ours (its hash was not the lock's): never overwritten
                raise OperationError(f"{final} is in the way: remove it and run the command again",
                                     step="wheelhouse")
            os.replace(tmp, final)
            report.files.append(_row(pkg, final, digest, "downloaded"))
            emit("wheelhouse", "build-step", (i, n, f"downloaded {filename}"))
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return report


def _public(url: str) -> str:
    from envbuilder.lock.uv import public_url

    return public_url(url)


class _Links(HTMLParser):
    """The ``<a href>`` of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _auth(url: str) -> str | None:
    """HTTP Basic from ~/.netrc (or ``NETRC``) for ``url``'s host, as uv and pip read it."""
    import base64
    import netrc
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    try:
        found = netrc.netrc(os.environ.get("NETRC") or None).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    if not found or found[2] is None:
        return None
    return "Basic " + base64.b64encode(f"{found[0]}:{found[2]}".encode()).decode()


class _Fetcher:
    """The lock's indexes: which file of a package to take, and its download."""

    def __init__(self, indexes: Sequence[str]) -> None:
        from envbuilder import _http

        for u in indexes:
            if not u.startswith(("http://", "https://")):
                raise InputError(f"the lock's index {u} is not http(s): envbuilder wheelhouse "
                                 f"downloads from http(s) indexes only")
        self.indexes = tuple(indexes)
        self.client = _http.Client("the package index", timeout=TIMEOUT_S, total=24 * 3600,
                                   step="wheelhouse")

    def _page(self, index: str, name: str) -> list[tuple[str, str | None]] | None:
        """(url, sha256 or None) of each file the index lists for ``name``; None: not there."""
        import json
        from urllib.parse import urldefrag, urljoin

        from envbuilder._http import origin

        url = index.rstrip("/") + f"/{name}/"
        r = self.client.request(url, {"Accept": _ACCEPT}, limit=PAGE_LIMIT, auth=_auth(url),
                                auth_origin=origin(url), what="index page", plain_http=True)
        if r.status == 404:
            return None
        if r.status != 200:
            raise OperationError(f"the index {_public(index)} answered {r.status} for {name} "
                                 f"(credentials go in ~/.netrc)", step="wheelhouse")
        out: list[tuple[str, str | None]] = []
        if r.media_type == "application/vnd.pypi.simple.v1+json":
            try:
                listed = json.loads(r.body).get("files", [])
            except (ValueError, AttributeError):
                raise OperationError(f"the index {_public(index)} answered a page for {name} that "
                                     f"is not PEP 691 JSON", step="wheelhouse") from None
            for f in listed if isinstance(listed, list) else ():
                if not isinstance(f, dict) or not isinstance(f.get("url"), str):
                    continue
                hashes = f.get("hashes")
                sha = hashes.get("sha256") if isinstance(hashes, dict) else None
                out.append((urljoin(r.url, f["url"]), f"sha256:{sha}" if isinstance(sha, str) else None))
            return out
        links = _Links()
        links.feed(r.body.decode("utf-8", "replace"))
        for href in links.hrefs:
            full, frag = urldefrag(urljoin(r.url, href))
            sha = frag[len("sha256="):] if frag.startswith("sha256=") else None
            out.append((full, f"sha256:{sha}" if sha else None))
        return out

    def choose(self, pkg: Any, order: dict[Tag, int]) -> tuple[str, str]:
        """(url, filename) of the best file of ``pkg`` for the tags in ``order``, from the first
        index that lists the package, whose listed hash (when listed) the lock holds."""
        from urllib.parse import unquote, urlsplit

        version = Version(pkg.version)
        for index in self.indexes:
            files = self._page(index, pkg.name)
            if files is None:
                continue
            ranked = []
            for url, sha in files:
                filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
                r = _rank(filename, pkg.name, version, order)
                if r is not None and (sha is None or sha in pkg.hashes):
                    ranked.append((r, filename, url))
            if not ranked:
                raise OperationError(f"the index {_public(index)} has no file of "
                                     f"{pkg.name}=={pkg.version} for this platform with a hash the "
                                     f"lock holds", step="wheelhouse")
            _, filename, url = min(ranked)
            return url, filename
        raise OperationError(f"no index of the lock lists {pkg.name} "
                             f"({', '.join(_public(i) for i in self.indexes)})", step="wheelhouse")

    def download(self, url: str, dest: Path) -> str:
        """Stream ``url`` into ``dest``; its sha256."""
        import urllib.error
        import urllib.request

        if not url.startswith(("http://", "https://")):
            raise OperationError(f"the index links {_public(url)}, not an http(s) file",
                                 step="wheelhouse")
        req = urllib.request.Request(url, headers={"User-Agent": "envbuilder"})
        auth = _auth(url)
        if auth:
            req.add_unredirected_header("Authorization", auth)  # never sent on to a redirect
        h = hashlib.sha256()
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp, dest.open("wb") as f:  # noqa: S310 (http(s) only: _Fetcher)
                for chunk in iter(lambda: resp.read(CHUNK), b""):
                    h.update(chunk)
                    f.write(chunk)
        except (urllib.error.URLError, OSError) as e:
            dest.unlink(missing_ok=True)
            raise OperationError(f"cannot download {_public(url)}: {getattr(e, 'reason', e)}",
                                 step="wheelhouse") from None
        return "sha256:" + h.hexdigest()

