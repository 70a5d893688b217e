"""What keeps every command's failure one clean line: signals, a closed stdout, oversized
arguments, the errors of the machine (full disk, no memory), text fit for a terminal.

The CLI (``cli.command`` and ``cli.main``) calls these; nothing here prints on its own except
``stdout_gone``.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, Mapping

from envbuilder.errors import EXIT_FAILED, EnvbuilderError, InputError, OperationError

MAX_ARG_CHARS = 4096  # a path may be this long; anything longer is not a real argument
EXIT_SIGPIPE = 141  # what a shell reports for a tool killed by SIGPIPE (`| head`)
MAX_MESSAGE_CHARS = 1000

_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every ``finally`` runs and children (uv, docker
    clients) are ended with their parent; the exit code is 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


LAST_SIGNAL: int | None = None  # the SIGTERM/SIGHUP that ended the command, if one did


def install_signal_handlers() -> None:
    """SIGTERM (and SIGHUP) end the command the way Ctrl-C does: cleanup runs, staged output
    is removed, child processes are killed (subprocess.run kills its child on an exception)."""

    def on_signal(signum, frame):  # noqa: ARG001
        global LAST_SIGNAL
        LAST_SIGNAL = signum
        raise Terminated(signum)

    for s in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(s, on_signal)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass


def restore_signal_handlers() -> None:
    for s in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(s, signal.SIG_DFL)
        except (ValueError, OSError):  # pragma: no cover
            pass


def interrupted_exit_code(e: BaseException | None = None) -> int:
    if isinstance(e, Terminated):
        return 128 + e.signum
    if LAST_SIGNAL is not None:  # a KeyboardInterrupt re-raised by a library (click) from ours
        return 128 + LAST_SIGNAL
    return 128 + signal.SIGINT


def stdout_gone() -> int:
    """stdout was closed by its reader (``envbuilder ... | head``): stop quietly, as Unix
    tools do; later writes (and the interpreter's final flush) go nowhere."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_SIGPIPE


def is_broken_pipe(e: BaseException) -> bool:
    return isinstance(e, BrokenPipeError) or (isinstance(e, OSError) and e.errno == errno.EPIPE)


def check_arguments(kwargs: Mapping[str, Any]) -> None:
    """Refuse an argument longer than any real one (a 100 KB target, a version of thousands
    of digits) before it reaches a parser, naming it and cutting it."""
    for name, value in kwargs.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, (str, Path)):
                s = str(v)
                if len(s) > MAX_ARG_CHARS:
                    opt = "--" + name.rstrip("_").replace("_", "-")
                    raise InputError(f"{opt} {cut(s, 60)!r} is {len(s)} characters long: at "
                                     f"most {MAX_ARG_CHARS} are accepted")
                if "\x00" in s:
                    raise InputError(f"--{name.rstrip('_').replace('_', '-')} contains a NUL byte")


def as_clean_error(e: BaseException) -> EnvbuilderError | None:
    """An error of the machine or of an oversized input as an envbuilder error (None: a bug)."""
    if isinstance(e, MemoryError):
        return OperationError("out of memory: the input is too large for envbuilder to handle "
                              "(cut it down)")
    if isinstance(e, RecursionError):
        return InputError("the input is nested too deeply (a cyclic or runaway structure)")
    if isinstance(e, OSError) and e.errno is not None:
        from envbuilder._fs import io_error

        where = e.filename or "a file"
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                       errno.ENAMETOOLONG, errno.EIO):
            err = io_error(e, where, "write")
            return err if isinstance(err, EnvbuilderError) else None
        return OperationError(f"{cut(str(where), 200)}: {e.strerror or e}")
    if isinstance(e, ValueError) and "Exceeds the limit" in str(e):  # int() of huge digits
        return InputError("a number in the input has too many digits (thousands): use a real "
                          "version or value")
    if isinstance(e, UnicodeError):
        return InputError(f"the input is not valid text: {cut(str(e), 200)}")
    return None


def cut(s: str, n: int = MAX_MESSAGE_CHARS) -> str:
    """``s`` cut to ``n`` characters, saying how much was left out."""
    return s if len(s) <= n else f"{s[:n]}... ({len(s) - n} more characters)"


def terminal_safe(s: Any) -> str:
    """Text for a terminal: control characters (ANSI/OSC escapes, NUL, bells) are shown
    escaped, never interpreted; tabs and newlines stay."""
    return _CONTROL_RE.sub(lambda m: repr(m.group(0))[1:-1], str(s))


def rich_text(s: Any):
    """A rich Text of ``s``: no markup interpreted, control characters escaped."""
    from rich.text import Text

    return Text(terminal_safe("" if s is None else s))


def exit_code_for(e: BaseException) -> int:
    return getattr(e, "exit_code", EXIT_FAILED)
