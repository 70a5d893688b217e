"""Writing outputs without ever losing a user's file.

Every folder envbuilder writes into carries a manifest, ``.envbuilder-output`` (JSON), naming
each file envbuilder wrote there, the command group that wrote it (``render``, ``lock``,
``conda``, ``sbom``, ``bake``, ``ci``, ``report``, ``build``) and its sha256. The rules:

* envbuilder replaces or removes only files its manifest lists, and only while they still
  hold what it wrote. Any other file in the folder is left alone; a file in the way that
  envbuilder did not write (or that a user edited) is refused with exit 2, naming it. A
  foreign file whose bytes equal what would be written is adopted (nothing is lost).
* A command replaces only its own group: ``render`` never removes ``lock``'s
  ``requirements.lock`` nor ``--sbom``'s ``sbom.cdx.json``; files a group wrote last time and
  no longer writes are removed (if unmodified).
* Atomic: everything is first written into a hidden staging folder inside the output folder
  (same file system), directories are created, then files are moved into place with
  ``os.replace`` while SIGINT/SIGTERM are held back, and the manifest is replaced last. A
  failure before that (full disk, read-only folder, Ctrl-C, SIGTERM) leaves the old output
  untouched and removes the staging folder. Concurrent runs into one folder are serialised
  with ``flock`` on the folder itself (no lock file is left behind). A staging folder left by
  a SIGKILL is removed by the next run.
* A file that already holds exactly the bytes (and mode) to be written is left in place, not
  staged and replaced: re-rendering an unchanged target creates no files (creating a file is
  most of the cost of writing a folder). Its manifest entry is written as for any other.

``Outputs`` is the transaction (several folders at once: ``render --all``, ``lock --conda
--sbom``); ``write_tree`` and ``write_file_atomic`` are the one-folder and one-file forms.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from envbuilder.errors import EnvbuilderError, InputError, OperationError, redact

MANIFEST = ".envbuilder-output"
STAGE_PREFIX = ".envbuilder-stage-"
_INPUT_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG, errno.ENOTDIR,
                 errno.EISDIR, errno.ELOOP}
MAX_PATH_CHARS = 4096


# -- signals held back while files move into place --------------------------------------------

_pending: list[int] = []


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP for a few renames or a cleanup; deliver them afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old: dict[int, Any] = {}
    got: list[int] = []

    def hold(signum, frame):  # noqa: ARG001
        got.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, hold)
        except (ValueError, OSError):  # pragma: no cover
            pass
    try:
        yield
    finally:
        for num, handler in old.items():
            signal.signal(num, handler)
        for s in got[:1]:
            h = old.get(s)
            if callable(h):
                h(s, None)
            elif h == signal.SIG_DFL:
                if s == signal.SIGINT:
                    raise KeyboardInterrupt
                os.kill(os.getpid(), s)


# -- errors --------------------------------------------------------------------------------

def io_error(e: OSError, path: Path | str, step: str) -> Exception:
    """An OSError on ``path`` as an envbuilder error: exit 2 when the user's choice of path is
    the problem (read-only, no permission, too long), exit 1 otherwise (full disk, I/O)."""
    why = e.strerror or str(e)
    shown = _short(str(path))
    if e.errno == errno.ENOSPC or e.errno == errno.EDQUOT:
        return OperationError(f"cannot write {shown}: {why} (free some space, or choose "
                              f"another -o)", step=step)
    if e.errno in _INPUT_ERRNOS:
        return InputError(f"cannot write {shown}: {why}: choose a writable output folder (-o)")
    return OperationError(f"cannot write {shown}: {why}", step=step)


def _short(s: str, n: int = 300) -> str:
    return s if len(s) <= n else f"{s[:n]}... ({len(s)} characters)"


# -- the manifest --------------------------------------------------------------------------

@dataclass
class _Entry:
    group: str
    sha256: str
    prev: str | None = None  # the old content's hash while a commit is in flight

    def to_dict(self) -> dict:
        d = {"group": self.group, "sha256": self.sha256}
        if self.prev:
            d["prev"] = self.prev
        return d


def read_manifest(folder: Path) -> dict[str, _Entry]:
    """The files envbuilder wrote in ``folder`` (empty when it has no manifest)."""
    from envbuilder.core.readfile import read_bytes_capped

    p = Path(folder) / MANIFEST
    try:  # a link, a FIFO or a device in its place is no manifest (and never blocks)
        raw = read_bytes_capped(p, "manifest", limit=1 << 22, follow_links=False)
        data = json.loads(raw.decode("utf-8"))
        files = data["files"]
        return {str(k): _Entry(str(v["group"]), str(v["sha256"]), v.get("prev"))
                for k, v in files.items() if _safe_rel(str(k))}
    except (EnvbuilderError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}  # no (readable) manifest: envbuilder owns nothing here


def owned(folder: Path) -> list[str]:
    """Relative paths of the files envbuilder wrote in ``folder``."""
    return sorted(read_manifest(folder))


def _manifest_text(entries: Mapping[str, _Entry]) -> bytes:
    from envbuilder import __version__

    doc = {"written_by": "envbuilder", "envbuilder_version": __version__, "format": 1,
           "note": "files envbuilder wrote here; it replaces or removes only these",
           "files": {k: entries[k].to_dict() for k in sorted(entries)}}
    return (_dumps_indent2(doc) + "\n").encode()


def _dumps_indent2(doc: Mapping[str, Any]) -> str:
    """``json.dumps(doc, indent=2)`` for a manifest, without json's pure-Python indenting
    encoder (it is most of writing a manifest): objects of strings and ints are laid out
    here, every scalar is encoded by json's C encoder. Anything else goes to json.dumps."""
    def lay(v: Any, pad: str) -> str:
        if isinstance(v, dict):
            if not v:
                return "{}"
            inner = pad + "  "
            items = []
            for k, x in v.items():
                if not isinstance(k, str):
                    raise TypeError(k)
                items.append(f"{inner}{_json_str(k)}: {lay(x, inner)}")
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(v, str):
            return _json_str(v)
        if type(v) is int:
            return str(v)
        raise TypeError(v)

    try:
        return lay(doc, "")
    except TypeError:
        return json.dumps(doc, indent=2)


_json_str = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


BIG_FILE = 32 << 20  # wheels in a build context: fingerprinted by size and mtime, not hashed


def _file_sha(p: Path) -> str | None:
    try:  # never through a link, never a FIFO or a device (it would block or never end)
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    return _fd_sha(fd)


def _fd_sha(fd: int) -> str | None:
    """The SHA-256 of the regular file open at ``fd`` (closed here); a big one is fingerprinted
    by size and mtime; None for anything else."""
    h = hashlib.sha256()
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > BIG_FILE:
            return f"stat:{st.st_size}:{st.st_mtime_ns}"
        with os.fdopen(fd, "rb", closefd=False) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return h.hexdigest()


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _mode(rel: str) -> int:
    return 0o755 if rel.endswith(".sh") else 0o644


def _holds(path: Path, data: bytes, mode: int) -> bool:
    """Whether ``path`` is a regular file of ours (not a link, one name, this user's) that
    holds exactly ``data`` with permissions ``mode``: writing it again would change nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    return _fd_holds(fd, data, mode)


def _fd_holds(fd: int, data: bytes, mode: int) -> bool:
    """``_holds`` for the file open at ``fd`` (closed here)."""
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != mode
                or st.st_nlink != 1 or st.st_size != len(data)
                or (hasattr(os, "getuid") and st.st_uid != os.getuid())):
            return False
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(len(data) + 1) == data
    except OSError:
        return False
    finally:
        os.close(fd)


def _holds_at(root_fd: int, rel: str, data: bytes, mode: int) -> bool:
    """``_holds`` for ``rel`` under the folder ``root_fd``, reached without following a link
    on the way (the folders and the file itself)."""
    pfd = _parent_fd(root_fd, rel)
    if pfd is None:
        return False
    try:
        fd = os.open(rel.rpartition("/")[2], os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0), dir_fd=pfd)
    except OSError:
        return False
    finally:
        os.close(pfd)
    return _fd_holds(fd, data, mode)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _parent_fd(root_fd: int, rel: str, *, make: bool = False) -> int | None:
    """A descriptor of the folder that holds ``rel`` under the folder ``root_fd``, reached one
    component at a time with ``O_NOFOLLOW`` (openat-style): None when a component is a
    symbolic link, not a folder, or missing (``make`` creates missing ones). No manifest entry
    and no link planted in the output folder can make envbuilder read, write or delete
    anything outside it. The caller closes the descriptor."""
    fd = os.dup(root_fd)
    try:
        for part in rel.split("/")[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    os.close(fd)
                    return None
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    os.close(fd)
                    return None
                raise
            os.close(fd)
            fd = nxt
    except BaseException:  # Ctrl-C too: the folder's descriptor is closed, the error goes on
        os.close(fd)
        raise
    return fd


def _file_sha_at(dir_fd: int, name: str) -> str | None:
    """``_file_sha`` of ``name`` in the folder ``dir_fd``: a regular file, never a link."""
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0),
                     dir_fd=dir_fd)
    except OSError:
        return None
    return _fd_sha(fd)


def read_owned(folder: str | Path, rel: str, limit: int) -> tuple[str, bytes] | None:
    """What a check needs of the file ``rel`` in the output folder ``folder``, reached without
    following a link (the folder's own path is the caller's): (its SHA-256, or a size-and-mtime
    fingerprint over 32 MiB; its first ``limit`` bytes). None when it is absent, not a regular
    file, or behind a link. Nothing is read beyond ``limit`` bytes (a 3 GiB file costs one
    ``fstat`` for its fingerprint)."""
    try:
        root = os.open(folder, _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        pfd = _parent_fd(root, rel)
    finally:
        os.close(root)
    if pfd is None:
        return None
    try:
        fd = os.open(rel.rpartition("/")[2], os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0), dir_fd=pfd)
    except OSError:
        return None
    finally:
        os.close(pfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        head = os.pread(fd, limit, 0) if limit else b""
    except OSError:
        os.close(fd)
        return None
    sha = _fd_sha(fd)  # closes fd
    return (sha, head) if sha is not None else None


def free_name(folder: str | Path, rel: str) -> str:
    """``rel``, or ``rel.2``, ``rel.3`` ...: the first name nothing (not even a dangling link)
    has in the output folder (reached without following a link)."""
    n, cand = 1, rel
    try:
        root = os.open(folder, _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return rel
    try:
        while _lstat_at(root, cand) is not None:
            n += 1
            cand = f"{rel}.{n}"
    finally:
        os.close(root)
    return cand


def _lstat_at(root_fd: int, rel: str) -> os.stat_result | None:
    """lstat of ``rel`` under ``root_fd`` without following a link on the way (None: absent,
    or a component on the way is a link or not a folder)."""
    pfd = _parent_fd(root_fd, rel)
    if pfd is None:
        return None
    try:
        return os.stat(rel.rpartition("/")[2], dir_fd=pfd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(pfd)


def _safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return (bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)
            and _CONTROL.search(rel) is None and parts[0] != MANIFEST
            and not parts[0].startswith(STAGE_PREFIX))


# -- output folders, reached without a link ---------------------------------------------------

# the option that named the output, for the advice in an error ("choose another -o")
_OPTION: contextvars.ContextVar[str] = contextvars.ContextVar("envbuilder_output_option", default="-o")


def _in_the_way(p: Path, why: str) -> InputError:
    return InputError(f"output {_short(str(p))} {why}: envbuilder writes into no folder through "
                      f"a link or over a file; remove it, or choose another {_OPTION.get()}")


def _existing_folder(root: Path) -> Path:
    """The innermost existing folder at or above ``root``: the user's folders, followed as
    named; a link to nothing or a file on the way is refused (exit 2)."""
    base = root
    while not os.path.isdir(base):
        if os.path.lexists(base):
            raise _in_the_way(base, "is a symbolic link to nothing or not a folder"
                              if os.path.islink(base) else "exists and is not a folder")
        if base.parent == base:
            break
        base = base.parent
    return base


def _open_or_make(fd: int, part: str, cur: Path, made: list[Path]) -> int:
    """A descriptor of the folder ``part`` in the folder ``fd`` (shown as ``cur``), made when
    missing (recorded in ``made``, innermost first), never through a link (exit 2)."""
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        try:
            os.mkdir(part, 0o755, dir_fd=fd)
        except FileExistsError:
            # another run made it between our open and our mkdir (concurrent runs into one
            # folder: they take turns once it is open), or a dangling link stands there
            return _open_existing(fd, part, cur)
        made.insert(0, cur)
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as e:
        raise _not_a_folder(e, fd, part, cur) from None


def _open_existing(fd: int, part: str, cur: Path) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:  # a dangling link: O_NOFOLLOW saw nothing to open
        raise _in_the_way(cur, "is a symbolic link") from None
    except OSError as e:
        raise _not_a_folder(e, fd, part, cur) from None


def _not_a_folder(e: OSError, fd: int, part: str, cur: Path) -> Exception:
    """The error for ``part`` that could not be opened as a folder: a link or a file in the
    way (exit 2), else the OS error itself."""
    if e.errno in (errno.ELOOP, errno.ENOTDIR):  # Linux: ENOTDIR for a link too
        try:
            link = stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode)
        except OSError:
            link = e.errno == errno.ELOOP
        return _in_the_way(cur, "is a symbolic link" if link else "exists and is not a folder")
    return e


def open_folder(path: Path, root: str | Path | None, created: list[Path], *, step: str,
                shown: str | None = None) -> int:
    """A descriptor of the output folder ``path`` (absolute), creating what is missing: every
    component below ``root`` (default: ``path``'s parent, so ``path`` itself is never a link)
    is opened or made one at a time with ``O_NOFOLLOW`` from a descriptor of its parent, so a
    symbolic link (dangling or not) or a file anywhere below the output root is refused
    (exit 2) before anything is written, and nothing lands outside. ``root`` and its parents
    are the user's: reached by path. ``created`` gets the folders made (innermost first)."""
    rootp = Path(os.path.abspath(os.path.expanduser(str(root)))) if root is not None else path.parent
    if not path.is_relative_to(rootp):
        rootp = path.parent
    base = _existing_folder(rootp)
    made: list[Path] = []
    try:
        if base != rootp:  # the missing part of the root: envbuilder makes it
            os.makedirs(rootp, exist_ok=True)
            probe = rootp
            while probe != base:
                made.append(probe)
                probe = probe.parent
        fd = os.open(rootp, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        Outputs._remove_created(made)
        raise io_error(e, shown or path, step) from None
    cur = rootp
    try:
        for part in path.relative_to(rootp).parts:
            cur = cur / part
            nxt = _open_or_make(fd, part, cur, made)
            os.close(fd)
            fd = nxt
    except BaseException as e:  # Ctrl-C too: the descriptor closed, the folders made removed, then raised
        os.close(fd)
        Outputs._remove_created(made)
        if isinstance(e, OSError):
            raise io_error(e, shown or path, step) from None
        raise
    created[:0] = made
    return fd


def create_files(folder: str | Path, files: Mapping[str, str], *, step: str,
                 root: str | Path | None = None) -> list[Path]:
    """Create new files in ``folder`` (reached as ``open_folder`` does), all or none: each is
    written and synced under a temporary name, then linked to its name, which fails when
    anything (a file, a link even dangling) already has it: nothing is ever replaced, and a
    full disk leaves no file, empty or half. Returns the paths made."""
    path = Path(os.path.abspath(os.path.expanduser(str(folder))))
    created: list[Path] = []
    fd = open_folder(path, root, created, step=step, shown=str(folder))
    done: list[str] = []
    try:
        for name, text in files.items():
            if "/" in name or name in ("", ".", ".."):
                raise InputError(f"refusing to write {name!r}: not a file name")
            tmp = f".{name}.{os.getpid()}.tmp"
            try:
                wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                              | getattr(os, "O_CLOEXEC", 0), 0o644, dir_fd=fd)
                try:
                    with os.fdopen(wfd, "wb", closefd=False) as f:
                        f.write(text.encode("utf-8"))
                        f.flush()
                        os.fsync(f.fileno())
                finally:
                    os.close(wfd)
                try:
                    os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    raise InputError(f"{_short(str(Path(str(folder)) / name))} already exists (a "
                                     f"file or a link): envbuilder never replaces it; move it "
                                     f"away") from None
                done.append(name)
            except OSError as e:
                raise io_error(e, Path(str(folder)) / name, step) from None
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
    except BaseException:  # Ctrl-C too: the files already placed are removed, then raised
        with held_signals():
            for name in done:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
            Outputs._remove_created(created)
        raise
    finally:
        os.close(fd)
    return [Path(str(folder)) / n for n in done]


# -- one folder of a transaction -------------------------------------------------------------

@dataclass
class _Dest:
    path: Path  # absolute
    shown: str  # as the user gave it
    fd: int
    stage: Path
    created: list[Path]
    files: dict[str, tuple[bytes | None, str]] = field(default_factory=dict)  # rel -> (data, group)
    # rel -> SHA-256 of what add() staged, taken from the bytes it wrote (no read back);
    # forgotten when add_with's writer may have changed the staging folder
    shas: dict[str, str] = field(default_factory=dict)
    staged_dirs: set[str] = field(default_factory=set)  # folders made in the staging folder
    # rel -> data of files whose target already holds these bytes: not staged, not moved
    unchanged: dict[str, bytes] = field(default_factory=dict)
    prune_groups: set[str] = field(default_factory=set)
    extras: list[tuple[Callable[[Path], None], str]] = field(default_factory=list)
    # rel -> the name the user's edited file at rel is kept under (render --take-jobs): linked
    # there at commit, before the new file replaces rel; ``linked`` are the links made
    aside: dict[str, str] = field(default_factory=dict)
    linked: list[tuple[str, str]] = field(default_factory=list)


class Outputs:
    """A transaction over output folders: add files, then ``commit()`` all or nothing.

    Use as a context manager; leaving it without ``commit()`` (an error, Ctrl-C) removes every
    staged file and any folder it created, and leaves the old outputs as they were."""

    def __init__(self, step: str = "write", *, root: str | Path | None = None,
                 option: str = "-o") -> None:
        self.step = step
        self.option = option  # the option that named the outputs, for the errors' advice
        self._option_token: contextvars.Token[str] | None = None
        # the folder the user named holds the outputs: no link below it (see open_folder)
        self.root = root
        self._dests: dict[Path, _Dest] = {}
        self._done = False

    # -- building up --------------------------------------------------------------------
    def folder(self, dest: str | Path) -> _Dest:
        shown = str(dest)
        if len(shown) > MAX_PATH_CHARS or "\x00" in shown:
            raise InputError(f"output folder {_short(shown)!r} is not a usable path "
                             f"(at most {MAX_PATH_CHARS} characters, no NUL)")
        path = Path(os.path.abspath(os.path.expanduser(shown)))
        if path in self._dests:
            return self._dests[path]
        created: list[Path] = []
        fd = open_folder(path, self.root, created, step=self.step, shown=shown)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # concurrent runs into one folder take turns
            for stale in path.glob(STAGE_PREFIX + "*"):  # left by a SIGKILL: we hold the lock
                shutil.rmtree(stale, ignore_errors=True)
            # a signal between creating the staging folder and recording it would leak it
            with held_signals():
                stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=path))
                d = _Dest(path, shown, fd, stage, created)
                self._dests[path] = d
        except BaseException as e:  # Ctrl-C too: an unrecorded folder is closed and removed, then raised
            if path not in self._dests:
                os.close(fd)
                self._remove_created(created)
            if isinstance(e, OSError):
                raise io_error(e, shown, self.step) from None
            raise
        return d

    def add(self, dest: str | Path, files: Mapping[str, str | bytes], *, group: str,
            prune: bool = True, aside: Mapping[str, str] | None = None) -> Path:
        """Stage ``files`` (relative path -> content) for ``dest``, owned by ``group``.
        With ``prune``, files ``group`` wrote there before and does not write now go away.
        ``aside``: rel -> a new name in the same folder: the file at rel (one a user edited) is
        kept under that name, and envbuilder's new one takes rel. Checked with everything else
        before any change; done by ``commit`` (a refused or failed commit leaves both as they
        were)."""
        d = self.folder(dest)
        for rel, new in (aside or {}).items():
            if not (_safe_rel(rel) and _safe_rel(new)) or rel.rpartition("/")[0] != new.rpartition("/")[0]:
                raise InputError(f"refusing to keep {rel!r} as {new!r}: not a name beside it")
            d.aside[rel] = new
        if prune:
            d.prune_groups.add(group)
        for rel, content in files.items():
            if not _safe_rel(rel):
                raise InputError(f"refusing to write {rel!r}: not a plain relative path")
            # text envbuilder writes never holds a URL's credentials (the net under the
            # renderers, which pass them as build arguments)
            data = content if isinstance(content, bytes) else redact(content).encode("utf-8")
            if rel not in d.files and _holds(d.path / rel, data, _mode(rel)):
                d.unchanged[rel] = data
            else:
                d.unchanged.pop(rel, None)
                self._stage_file(d, rel, data)
            d.files[rel] = (None, group)
            d.shas[rel] = _sha(data)
        return d.path

    def add_with(self, dest: str | Path, fn: Callable[[Path], None], *, group: str) -> None:
        """Let ``fn(folder)`` write more files (wheels, a CA bundle) into the staging folder;
        they are owned by ``group`` like the rest."""
        d = self.folder(dest)
        for rel, data in d.unchanged.items():  # fn sees (and may rewrite) every file
            self._stage_file(d, rel, data)
        d.unchanged.clear()
        before = set(self._walk(d.stage))
        d.shas.clear()  # fn may rewrite any staged file: hash them from disk
        d.staged_dirs.clear()
        try:
            fn(d.stage)
        except OSError as e:
            raise io_error(e, d.shown, self.step) from None
        for rel in sorted(set(self._walk(d.stage)) - before):
            if not _safe_rel(rel):
                raise InputError(f"refusing to write {rel!r}: not a plain relative path")
            d.files[rel] = (None, group)

    def scratch(self, dest: str | Path) -> Path:
        """A private folder inside ``dest``'s staging area for intermediate files (never
        committed; removed with the staging folder)."""
        d = self.folder(dest)
        p = d.stage / ".scratch"
        p.mkdir(exist_ok=True)
        return p

    def _stage_file(self, d: _Dest, rel: str, data: bytes) -> None:
        p = d.stage / rel
        try:
            folder = rel.rpartition("/")[0]
            if folder and folder not in d.staged_dirs:  # each folder once, not once per file
                p.parent.mkdir(parents=True, exist_ok=True)
                d.staged_dirs.add(folder)
            with open(p, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(p, _mode(rel))
        except OSError as e:
            raise io_error(e, Path(d.shown) / rel, self.step) from None

    @staticmethod
    def _walk(root: Path) -> Iterator[str]:
        for dirpath, dirnames, filenames in os.walk(root):
            if Path(dirpath) == root and ".scratch" in dirnames:
                dirnames.remove(".scratch")
            for fn in filenames:
                rel = os.path.relpath(os.path.join(dirpath, fn), root).replace(os.sep, "/")
                if rel != MANIFEST:
                    yield rel

    # -- checking and committing --------------------------------------------------------
    def _plan(self, d: _Dest) -> tuple[dict[str, _Entry], list[str], dict[str, _Entry]]:
        """(new manifest, files to remove, manifest to write before the moves)."""
        old = read_manifest(d.path)
        new: dict[str, _Entry] = {}
        for rel, (_, group) in d.files.items():
            staged = d.stage / rel
            sha = d.shas.get(rel) or _file_sha(staged) or ""
            if rel in d.unchanged:
                # still ours and as it would be written (read through descriptors, no link on
                # the way): it holds `sha`, nothing to check further or to move
                if _holds_at(d.fd, rel, d.unchanged[rel], _mode(rel)):
                    new[rel] = _Entry(group, sha, None)
                    continue
                self._stage_file(d, rel, d.unchanged.pop(rel))  # changed since add(): write it
            self._check_parents(d, rel)
            prev = None
            st = _lstat_at(d.fd, rel)
            if st is not None and rel in d.aside:  # the user's file is kept aside, not replaced
                if not stat.S_ISREG(st.st_mode) or _lstat_at(d.fd, d.aside[rel]) is not None:
                    raise InputError(f"{_short(str(Path(d.shown) / rel))} cannot be kept as "
                                     f"{d.aside[rel].rpartition('/')[2]}: that name is taken, or "
                                     f"it is not a file; move it away")
                new[rel] = _Entry(group, sha, None)
                continue
            if st is not None:
                if not stat.S_ISREG(st.st_mode):
                    raise InputError(f"{_short(str(Path(d.shown) / rel))} is in the way and "
                                     f"envbuilder did not write it: move it away or choose another {_OPTION.get()}")
                have = self._sha_in(d, rel)
                ent = old.get(rel)
                if have != sha and (ent is None or have not in (ent.sha256, ent.prev)):
                    why = "was changed since envbuilder wrote it" if ent else \
                        "exists and envbuilder did not write it"
                    raise InputError(f"{_short(str(Path(d.shown) / rel))} {why}: envbuilder never "
                                     f"overwrites such files; move it away or choose another {_OPTION.get()}")
                prev = have
            new[rel] = _Entry(group, sha, prev if prev != sha else None)
        remove: list[str] = []
        for rel, ent in old.items():
            if rel in new:
                continue
            if ent.group in d.prune_groups:
                # only a regular file reached without a link on the way, holding what we wrote
                if self._sha_in(d, rel) in (ent.sha256, ent.prev):
                    remove.append(rel)
                # an edited or vanished file (or one behind a link) is the user's now: forget it
                continue
            if _lstat_at(d.fd, rel) is not None:
                new[rel] = _Entry(ent.group, ent.sha256, ent.prev)
        inflight = {**{k: v for k, v in old.items()}, **new}
        final = {k: _Entry(v.group, v.sha256) for k, v in new.items()}
        return final, remove, inflight

    @staticmethod
    def _sha_in(d: _Dest, rel: str) -> str | None:
        pfd = _parent_fd(d.fd, rel)
        if pfd is None:
            return None
        try:
            return _file_sha_at(pfd, rel.rpartition("/")[2])
        finally:
            os.close(pfd)

    def _check_parents(self, d: _Dest, rel: str) -> None:
        cur = d.path
        for part in rel.split("/")[:-1]:
            cur = cur / part
            if os.path.lexists(cur) and (cur.is_symlink() or not cur.is_dir()):
                raise InputError(f"{_short(str(cur))} is in the way (envbuilder needs a folder "
                                 f"there): move it away or choose another {_OPTION.get()}")

    def commit(self) -> None:
        plans: dict[Path, tuple[dict[str, _Entry], list[str]] | None] = {}
        # every folder is checked (and may refuse) before anything is made in any of them:
        # a refusal in the last target leaves no folder of the first behind
        planned = {d.path: self._plan(d) for d in self._dests.values()}
        # everything that needs space happens before the first move
        for d in self._dests.values():
            final, remove, inflight = planned[d.path]
            texts = {"manifest.final": _manifest_text(final)}
            if not remove and all(rel in d.unchanged for rel in d.files) and \
                    _holds(d.path / MANIFEST, texts["manifest.final"], 0o644):
                plans[d.path] = None  # every file and the manifest already as they would be
                continue
            texts["manifest.inflight"] = _manifest_text(inflight)
            try:
                self._make_folders(d, final)
                self._link_aside(d)
                for name, text in texts.items():
                    p = d.stage / name
                    with open(p, "wb") as f:
                        f.write(text)
                        f.flush()
                        os.fsync(f.fileno())
                    os.chmod(p, 0o644)
            except OSError as e:
                raise io_error(e, d.shown, self.step) from None
            plans[d.path] = (final, remove)
        with held_signals():
            try:
                for d in self._dests.values():
                    plan = plans[d.path]
                    if plan is not None:
                        self._apply(d, plan[1])
            except OSError as e:
                raise io_error(e, d.shown, self.step) from None
            self._done = True

    @staticmethod
    def _link_aside(d: _Dest) -> None:
        """The user's files kept aside get their new name as a second link (nothing is
        replaced: a name someone took since the check fails the commit); the rename of the
        new file over the old name then leaves them only there."""
        for rel, new in d.aside.items():
            pfd = _parent_fd(d.fd, rel)
            if pfd is None:
                raise InputError(f"{_short(str(Path(d.shown) / rel))}: a folder on the way is a "
                                 f"link or a file: move it away or choose another {_OPTION.get()}")
            try:
                try:
                    os.link(rel.rpartition("/")[2], new.rpartition("/")[2], src_dir_fd=pfd,
                            dst_dir_fd=pfd, follow_symlinks=False)
                except FileExistsError:
                    raise InputError(f"{_short(str(Path(d.shown) / new))} appeared while "
                                     f"envbuilder wrote: move it away") from None
                d.linked.append((rel, new))
            finally:
                os.close(pfd)

    @staticmethod
    def _unlink_aside(d: _Dest) -> None:
        """A commit that did not finish: the second names go, where the first still names the
        same file (the user's file is then where it was)."""
        for rel, new in d.linked:
            pfd = _parent_fd(d.fd, rel)
            if pfd is None:
                continue
            try:
                a = os.stat(rel.rpartition("/")[2], dir_fd=pfd, follow_symlinks=False)
                b = os.stat(new.rpartition("/")[2], dir_fd=pfd, follow_symlinks=False)
                if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
                    os.unlink(new.rpartition("/")[2], dir_fd=pfd)
            except OSError:
                pass
            finally:
                os.close(pfd)
        d.linked.clear()

    @staticmethod
    def _make_folders(d: _Dest, final: Mapping[str, _Entry]) -> None:
        """The folders ``final``'s files go into, made one component at a time, never through
        a link; what is made is recorded in ``d.created`` (removed on failure)."""
        for folder in dict.fromkeys(rel.rpartition("/")[0] for rel in final):
            if not folder:
                continue
            probe = d.path / folder
            made: list[Path] = []
            while probe != d.path and not os.path.lexists(probe):
                made.append(probe)  # innermost first
                probe = probe.parent
            d.created[:0] = made
            pfd = _parent_fd(d.fd, folder + "/x", make=True)
            if pfd is None:
                raise InputError(f"{_short(str(Path(d.shown) / folder))} is in the "
                                 f"way (envbuilder needs a folder there): move it "
                                 f"away or choose another {_OPTION.get()}")
            os.close(pfd)

    def _apply(self, d: _Dest, remove: list[str]) -> None:
        """Move ``d``'s staged files in and ``remove`` out, between the in-flight manifest and
        the final one (a crash in between leaves a manifest that names both)."""
        os.replace(d.stage / "manifest.inflight", MANIFEST, dst_dir_fd=d.fd)
        for rel in d.files:
            if rel not in d.unchanged:
                self._move_in(d, rel)
        for rel in remove:
            pfd = _parent_fd(d.fd, rel)
            if pfd is None:  # a link appeared on the way: not ours to follow
                continue
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(rel.rpartition("/")[2], dir_fd=pfd)
            finally:
                os.close(pfd)
            self._prune_dirs(d.fd, rel)
        os.replace(d.stage / "manifest.final", MANIFEST, dst_dir_fd=d.fd)

    @staticmethod
    def _move_in(d: _Dest, rel: str) -> None:
        """Move the staged ``rel`` into place through descriptors: the folders on the way
        are opened without following links, so the file lands inside the output folder."""
        pfd = _parent_fd(d.fd, rel, make=True)
        if pfd is None:
            raise InputError(f"{_short(str(Path(d.shown) / rel))}: a folder on the way is a "
                             f"link or a file: move it away or choose another {_OPTION.get()}")
        try:
            os.replace(d.stage / rel, rel.rpartition("/")[2], dst_dir_fd=pfd)
        finally:
            os.close(pfd)

    @staticmethod
    def _prune_dirs(root_fd: int, rel: str) -> None:
        """Remove the folders of ``rel`` that are now empty, innermost first, each through a
        descriptor of its parent reached without following links."""
        parts = rel.split("/")[:-1]
        while parts:
            pfd = _parent_fd(root_fd, "/".join(parts))
            if pfd is None:
                return
            try:
                os.rmdir(parts[-1], dir_fd=pfd)  # only when empty: a user's file keeps its folder
            except OSError:
                return
            finally:
                os.close(pfd)
            parts.pop()

    # -- cleanup -------------------------------------------------------------------------
    @staticmethod
    def _remove_created(created: list[Path]) -> None:
        for p in created:  # innermost first
            try:
                p.rmdir()
            except OSError:
                pass

    def close(self) -> None:
        # a Ctrl-C in the middle of removing the staging folder would leave half of it:
        # signals wait until the cleanup is over (it is quick), then take effect
        with held_signals():
            for d in self._dests.values():
                shutil.rmtree(d.stage, ignore_errors=True)
                if not self._done:
                    self._unlink_aside(d)
                    self._remove_created(d.created)
                with contextlib.suppress(OSError):
                    os.close(d.fd)
            self._dests.clear()

    def __enter__(self) -> Outputs:
        self._option_token = _OPTION.set(self.option)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.close()
        finally:
            if self._option_token is not None:
                _OPTION.reset(self._option_token)
                self._option_token = None


def write_tree(dest: str | Path, files: Mapping[str, str | bytes], *, group: str = "render",
               extra: Callable[[Path], None] | None = None, step: str = "render",
               prune: bool = True, root: str | Path | None = None, option: str = "-o") -> Path:
    """Write ``files`` into ``dest`` (one transaction); ``extra(folder)`` may add more.
    ``root``: the folder the user named, no link below it (default ``dest``'s parent);
    ``option``: the option that named ``dest``, as errors advise choosing another."""
    with Outputs(step, root=root, option=option) as out:
        path = out.add(dest, files, group=group, prune=prune)
        if extra is not None:
            out.add_with(dest, extra, group=group)
        out.commit()
    return Path(dest) if not Path(dest).is_absolute() else path


def write_file_atomic(path: str | Path, content: str | bytes, *, step: str = "write",
                      group: str | None = None, root: str | Path | None = None,
                      option: str = "-o") -> Path:
    """Write one file: a reader sees the old file or the new one, never half of it, and a
    file envbuilder did not write is never replaced (see the module docstring)."""
    path = Path(path)
    if len(str(path)) > MAX_PATH_CHARS:
        raise InputError(f"output path {_short(str(path))!r} is too long")
    if path.name in ("", ".", ".."):
        raise InputError(f"output {path} is not a file name")
    with Outputs(step, root=root, option=option) as out:
        out.add(path.parent, {path.name: content}, group=group or step, prune=False)
        out.commit()
    return path


def read_text_capped(path: str | Path, what: str, *, limit: int = 8 << 20,
                     follow_links: bool = True) -> str:
    """Read a small UTF-8 input file: refuse a folder, a FIFO, a device, more than ``limit``
    bytes (judged before reading), or bytes that are not UTF-8, with one line naming the
    input (exit 2). See envbuilder.core.readfile, the one reader."""
    from envbuilder.core.readfile import read_text_capped as read

    return read(path, what, limit=limit, follow_links=follow_links)
