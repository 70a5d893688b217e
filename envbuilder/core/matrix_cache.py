"""The loaded matrix, kept per digest in the user's cache folder.

Parsing the matrix YAML and checking it against the schema is most of a short command's work,
and it gives the same ``Matrix`` for the same files. ``load_matrix`` still reads and digests
the files on every call; this module keeps the resulting ``Matrix`` (pickled) under

    $XDG_CACHE_HOME/envbuilder/matrix-<digest>-<version>-<code>.pickle   (default ~/.cache)

keyed by the files' digest, envbuilder's version and a digest of the code that shapes the
object (core/matrix.py), so a new matrix or a new envbuilder makes a new entry.

Never trusted blindly: an entry must be a regular file owned by this user and writable by no one
else, carry a SHA-256 of its payload that matches, unpickle to a ``Matrix`` with the expected
digest; anything else (unreadable, truncated, corrupt, incompatible) is a miss, and the matrix
is loaded from the files and the entry rewritten. Entries are written to a temporary file and
moved into place (``os.replace``), so concurrent processes see a whole entry or none. An
unwritable cache folder only costs time. ``ENVBUILDER_NO_CACHE=1`` turns the cache off (this
one and the templates' bytecode cache).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envbuilder.core.matrix import Matrix

MAGIC = b"envbuilder-matrix-cache 1\n"
KEEP = 16  # matrix entries kept in the folder (oldest removed beyond this)


def disabled() -> bool:
    return os.environ.get("ENVBUILDER_NO_CACHE", "") not in ("", "0")


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/envbuilder, or ~/.cache/envbuilder."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "envbuilder"


def _code_digest() -> str:
    # the classes the pickle holds live in core/matrix.py: a change there is a new key even
    # when the version number stays (a development checkout)
    here = Path(__file__).with_name("matrix.py")
    return hashlib.sha256(here.read_bytes()).hexdigest()[:12]


def entry_path(digest: str) -> Path:
    from envbuilder import __version__

    hexd = digest.split(":", 1)[-1][:32]
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return cache_dir() / f"matrix-{hexd}-{__version__}-{_code_digest()}-{py}.pickle"


def load(digest: str) -> Matrix | None:
    """The cached ``Matrix`` for this digest, or None (a miss) for anything short of a valid
    entry."""
    if disabled():
        return None
    try:
        from envbuilder.core.matrix import Matrix

        fd = os.open(entry_path(digest), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_mode & 0o022
                    or (hasattr(os, "getuid") and st.st_uid != os.getuid())):
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
        finally:
            os.close(fd)
        if not data.startswith(MAGIC):
            return None
        head = len(MAGIC)
        want, payload = data[head:head + 32], data[head + 32:]
        if hashlib.sha256(payload).digest() != want:
            return None
        m = pickle.loads(payload)
        if not isinstance(m, Matrix) or m.digest != digest:
            return None
        return m
    except Exception:  # noqa: BLE001 - any failure to read an entry is a miss, never an error
        return None


def store(m: Matrix) -> None:
    """Write the entry for ``m`` (atomically); a folder that cannot be written is skipped."""
    if disabled():
        return
    tmp: str | None = None
    try:
        path = entry_path(m.digest)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        payload = pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL)
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
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
    """Keep the KEEP newest matrix entries (only files this module names and writes)."""
    entries = []
    for p in folder.glob("matrix-*.pickle"):
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
