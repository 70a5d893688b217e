"""The one way envbuilder reads a file it was given or finds: capped, regular files only.

Every input file (a matrix file, a project file, a lock, a CA bundle, a requirements file, a
manifest, a cache entry) is opened with ``O_NONBLOCK`` (a FIFO opens at once instead of
waiting for a writer) and judged by ``os.fstat`` of the open descriptor *before* one byte is
read: a folder, a FIFO, a socket or a device is refused, and so is a file larger than the cap
(a 3 GiB sparse ``envbuilder.toml`` costs one ``fstat``, not 3 GiB of memory). With
``follow_links=False`` a symbolic link is refused too (``O_NOFOLLOW``): files in envbuilder's
own output folders are never read through a link.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Callable

from envbuilder.errors import EnvbuilderError, InputError

ErrorType = Callable[[str], EnvbuilderError]


def _short(s: str, n: int = 300) -> str:
    return s if len(s) <= n else f"{s[:n]}... ({len(s)} characters)"


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def read_bytes_capped(path: str | Path, what: str, *, limit: int,
                      follow_links: bool = True, error: ErrorType = InputError) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``), or ``error`` (InputError by
    default, exit 2) with one line naming ``what`` and the path."""
    shown = _short(str(path))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{what} {shown} does not exist") from None
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_links:
            raise error(f"{what} {shown} is a symbolic link: envbuilder does not read its "
                        f"outputs through links (replace it with the file itself)") from None
        if e.errno == errno.ENXIO:  # a socket
            raise error(f"{what} {shown} is not a regular file") from None
        raise error(f"cannot read {what} {shown}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{what} {shown} is a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else
                    "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                    "not a regular file")
            raise error(f"{what} {shown} is {kind}, not a regular file: envbuilder reads "
                        f"regular files only")
        if st.st_size > limit:
            raise error(f"{what} {shown} is larger than {_size(limit)} ({st.st_size} bytes): "
                        f"not a file envbuilder reads")
        chunks = []
        got = 0
        while got <= limit:  # a file that grows while read is cut at the cap too
            b = os.read(fd, min(1 << 20, limit + 1 - got))
            if not b:
                break
            chunks.append(b)
            got += len(b)
    except OSError as e:
        raise error(f"cannot read {what} {shown}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise error(f"{what} {shown} is larger than {_size(limit)}: not a file envbuilder reads")
    return data


def read_text_capped(path: str | Path, what: str, *, limit: int = 8 << 20,
                     follow_links: bool = True, error: ErrorType = InputError) -> str:
    """``read_bytes_capped`` as UTF-8 text (a BOM-less UTF-8 file; anything else refused)."""
    data = read_bytes_capped(path, what, limit=limit, follow_links=follow_links, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{what} {_short(str(path))} is not UTF-8 text (byte {e.start}): save it "
                    f"as UTF-8") from None
