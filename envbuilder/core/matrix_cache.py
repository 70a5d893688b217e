"""The loaded matrix, kept per digest in the user's cache folder, as data that cannot run code.

Parsing the matrix YAML and checking it against the schema is most of a short command's work,
and it gives the same ``Matrix`` for the same files. ``load_matrix`` still reads and digests
the files on every call; this module keeps the parsed, validated (and overlay-merged) data of
the files as JSON under

    $XDG_CACHE_HOME/envbuilder/matrix-<digest>-<version>-<code>-<python>.json   (default ~/.cache)

keyed by the files' digest, envbuilder's version and a digest of the code that shapes the
data (core/matrix.py), and rebuilds the ``Matrix`` from it (a few milliseconds). JSON, not
pickle: an entry that someone else managed to write can at worst be a wrong matrix, never
code that runs.

An entry is one line of JSON (the header: format name, FORMAT_VERSION, the digest, the
payload's SHA-256 and length) and the payload (JSON). Never trusted blindly: it must be a
regular file owned by this user and writable by no one else, opened without following links
or blocking (a FIFO in its place is a miss), at most MAX_ENTRY_BYTES, with the format and
version this code writes, a payload whose SHA-256 matches, and the expected digest; anything
else is a miss, and the matrix is loaded from the files and the entry rewritten. Entries are
written to a temporary file and moved into place (``os.replace``), so concurrent processes
see a whole entry or none. An unwritable cache folder only costs time.
``ENVBUILDER_NO_CACHE=1`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from envbuilder.core.matrix import Matrix

FORMAT = "envbuilder-matrix-cache"
FORMAT_VERSION = 2  # 1 was a pickle: never read again
KEEP = 16  # matrix entries kept in the folder (oldest removed beyond this)
MAX_ENTRY_BYTES = 16 << 20


def disabled() -> bool:
    return os.environ.get("ENVBUILDER_NO_CACHE", "") not in ("", "0")


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/envbuilder, or ~/.cache/envbuilder."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "envbuilder"


def _code_digest() -> str:
    # the data is turned into a Matrix by core/matrix.py: a change there is a new key even
    # when the version number stays (a development checkout)
    here = Path(__file__).with_name("matrix.py")
    return hashlib.sha256(here.read_bytes()).hexdigest()[:12]


def entry_path(digest: str) -> Path:
    from envbuilder import __version__

    hexd = digest.split(":", 1)[-1][:32]
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return cache_dir() / f"matrix-{hexd}-{__version__}-{_code_digest()}-{py}.json"


def load_data(digest: str) -> dict[str, Any] | None:
    """The cached entry's payload for this digest (``raw``, ``overlay``, ``path``,
    ``overlay_path``), or None (a miss) for anything short of a valid entry."""
    if disabled():
        return None
    try:
        from envbuilder.core.readfile import read_bytes_capped

        path = entry_path(digest)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_mode & 0o022
                    or (hasattr(os, "getuid") and st.st_uid != os.getuid())):
                return None
        finally:
            os.close(fd)
        data = read_bytes_capped(path, "matrix cache entry", limit=MAX_ENTRY_BYTES,
                                 follow_links=False)
        head, sep, payload = data.partition(b"\n")
        if not sep:
            return None
        header = json.loads(head)
        if (not isinstance(header, dict) or header.get("format") != FORMAT
                or header.get("version") != FORMAT_VERSION or header.get("digest") != digest
                or header.get("length") != len(payload)
                or header.get("sha256") != hashlib.sha256(payload).hexdigest()):
            return None
        doc = json.loads(payload)
        if not isinstance(doc, dict) or not isinstance(doc.get("raw"), dict) \
                or not isinstance(doc.get("overlay"), list):
            return None
        return doc
    except Exception:  # noqa: BLE001 - any failure to read an entry is a miss, never an error
        return None


def load(digest: str) -> Matrix | None:
    """The cached ``Matrix`` for this digest (rebuilt from the entry's data), or None."""
    doc = load_data(digest)
    if doc is None:
        return None
    try:
        from dataclasses import replace

        from envbuilder.core.matrix import _build

        m = _build(Path(doc["path"]), doc["raw"], digest)
        over = doc.get("overlay_path")
        if over is not None:
            m = replace(m, overlay_path=Path(over), overlay=tuple(doc["overlay"]))
        return m
    except Exception:  # noqa: BLE001 - data that does not build is a miss
        return None


def store(m: Matrix, raw: dict[str, Any], overlay: Sequence[Mapping[str, Any]] = ()) -> None:
    """Write the entry for ``m`` from the data it was built from (atomically); a folder that
    cannot be written, or data that JSON does not keep exactly, is skipped."""
    if disabled():
        return
    tmp: str | None = None
    try:
        doc = {"path": str(m.path), "raw": raw, "overlay": list(overlay),
               "overlay_path": None if m.overlay_path is None else str(m.overlay_path)}
        payload = json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode()
        if json.loads(payload) != doc:  # e.g. a YAML key that is a number: not cached
            return
        header = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "digest": m.digest,
                             "sha256": hashlib.sha256(payload).hexdigest(),
                             "length": len(payload)}).encode()
        path = entry_path(m.digest)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(header + b"\n" + payload)
        os.replace(tmp, path)
        tmp = None
        _prune(path.parent)
    except Exception:  # noqa: BLE001 - the cache is an optimisation: never fail a command
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _prune(folder: Path) -> None:
    """Keep the KEEP newest matrix entries (only files this module names and writes); the
    pickles of format 1 are removed (never read)."""
    for old in folder.glob("matrix-*.pickle"):
        try:
            old.unlink()
        except OSError:
            pass
    entries = []
    for p in folder.glob("matrix-*.json"):
        try:
            entries.append((p.stat().st_mtime, p))
        except OSError:
            continue
    if len(entries) <= KEEP:
        return
    entries.sort(reverse=True)
    for _, p in entries[KEEP:]:
        try:
            p.unlink()
        except OSError:
            pass
