"""What keeps every command's failure one clean line: signals, a closed stdout, oversized
arguments, the errors of the machine (full disk, no memory), text fit for a terminal.

The CLI (``cli.command`` and ``cli.main``) calls these; nothing here prints on its own except
``stdout_gone``.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from pathlib import Path
from typing import Any, Mapping

from envbuilder.errors import EnvbuilderError, InputError, OperationError

MAX_ARG_CHARS = 4096  # a path may be this long; anything longer is not a real argument
EXIT_SIGPIPE = 141  # what a shell reports for a tool killed by SIGPIPE (`| head`)
MAX_MESSAGE_CHARS = 1000



class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every ``finally`` runs and children (uv, docker
    clients) are ended with their parent; the exit code is 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


LAST_SIGNAL: int | None = None  # the SIGTERM/SIGHUP that ended the command, if one did
STDOUT_CLOSED = False  # the command was started with stdout closed (`>&-`)
_EARLY_DONE = False


def guard_streams() -> None:
    """Make stdin, stdout and stderr usable whatever state the caller left them in.

    A descriptor 0-2 that is closed (``envbuilder targets >&-``) is taken by /dev/null at once,
    so no file envbuilder opens later lands on it (a child's output would go into that file).
    stdout takes /dev/null *read-only*: every write to it (ours, rich's, a child's) fails with
    EBADF, which the CLI turns into exit 141 with nothing printed, as for a closed pipe. stderr
    takes /dev/null for writing: messages go nowhere and the exit code stays the command's own
    (``resolve cu999 2>&-`` exits 2). Python leaves ``sys.stdout``/``sys.stderr`` as None for a
    closed descriptor: they are made text streams again."""
    global STDOUT_CLOSED
    import fcntl

    for fd, flags in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:  # open, and for 1 and 2 open for writing (a closed descriptor may have been
            # taken by something read-only on the way, e.g. the script of a shell wrapper)
            access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
            if fd == 0 or access != os.O_RDONLY:
                continue
        except OSError as e:
            if e.errno != errno.EBADF:
                continue
        try:
            new = os.open(os.devnull, flags)
            if new != fd:
                os.dup2(new, fd)
                os.close(new)
        except OSError:  # pragma: no cover - no /dev/null
            continue
        if fd == 1:
            STDOUT_CLOSED = True
    # (sys.stdin stays None when stdin was closed: `explain -` says so instead of reading an
    # empty /dev/null)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        if getattr(sys, name, None) is None:  # Python found the descriptor closed
            try:
                stream = open(fd, "w", encoding="utf-8", errors="backslashreplace",
                              closefd=False, buffering=1)
                setattr(sys, name, stream)
            except OSError:  # pragma: no cover
                pass


def install_early() -> None:
    """What the entry point does before anything heavy is imported: the stream guard, and
    SIGTERM/SIGHUP ending the command as Ctrl-C does (Python's own SIGINT handler raises
    KeyboardInterrupt from the first instruction on; the entry point catches it). Idempotent."""
    global _EARLY_DONE
    if _EARLY_DONE:
        return
    _EARLY_DONE = True
    guard_streams()
    install_signal_handlers()


def leaving() -> None:
    """The command is done: a Ctrl-C or SIGTERM that lands from here on exits with the
    signal's code at once, without a traceback from wherever it landed."""

    def on_late_signal(signum, frame):  # noqa: ARG001
        try:
            os.write(2, b"envbuilder: interrupted\n")
        except OSError:
            pass
        os._exit(128 + signum)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(s) is not signal.SIG_IGN:
                signal.signal(s, on_late_signal)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass


def finish(code: int) -> int:
    """What the interpreter's exit would do, for ``os._exit``: the exit handlers (atexit),
    then stdout and stderr flushed (a reader gone by then makes it 141, quietly)."""
    import atexit

    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - a handler's failure does not change the result
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError) as e:
            if stream is sys.stdout and isinstance(e, OSError) and is_broken_pipe(e):
                code = stdout_gone()
    return code


INTERRUPT_SAID = False  # "interrupted" was printed for this command


def say(text: str) -> None:
    """Write one line to stderr, never raising (stderr may be a closed pipe)."""
    global INTERRUPT_SAID
    INTERRUPT_SAID = INTERRUPT_SAID or "interrupted" in text
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        quiet_stream(2)


def quiet_stream(fd: int) -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:  # pragma: no cover
        pass


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
    if sys.unraisablehook is not _on_unraisable:
        global _PREVIOUS_UNRAISABLEHOOK
        _PREVIOUS_UNRAISABLEHOOK = sys.unraisablehook
        sys.unraisablehook = _on_unraisable


_PREVIOUS_UNRAISABLEHOOK = sys.__unraisablehook__
REDELIVERY_DELAY = 0.05  # seconds: long enough for the main thread to leave the callback


def _on_unraisable(unraisable: Any) -> None:
    """A signal that landed inside a callback Python cannot raise from (a weakref callback such
    as importlib's module-lock ``cb``, a ``__del__``) is printed as "Exception ignored in ..."
    and lost: the command would go on as if nothing happened. It is sent again instead, a
    moment later, from a helper thread, so that it lands in ordinary code and ends the command
    the usual way. Every other unraisable exception goes to the previous hook."""
    e = unraisable.exc_value
    if not isinstance(e, KeyboardInterrupt):
        _PREVIOUS_UNRAISABLEHOOK(unraisable)
        return
    signum = e.signum if isinstance(e, Terminated) else signal.SIGINT
    import threading
    import time

    def again() -> None:
        time.sleep(REDELIVERY_DELAY)  # not at once: the main thread is still in this hook
        os.kill(os.getpid(), signum)

    threading.Thread(target=again, name="envbuilder-signal-again", daemon=True).start()


def restore_signal_handlers() -> None:
    for s in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(s, signal.SIG_DFL)
        except (ValueError, OSError):  # pragma: no cover
            pass


def interrupt_in(e: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM (``Terminated``) behind ``e``, when ``e`` only wraps it: Python
    3.11 turns an exception raised while a class is being made (a dataclass's ``__set_name__``,
    as a module is imported) into ``RuntimeError("Error calling __set_name__ ...")`` whose
    cause is the signal's exception. Such an error is an interruption, not a bug."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def interrupted_exit_code(e: BaseException | None = None) -> int:
    if isinstance(e, Terminated):
        return 128 + e.signum
    if LAST_SIGNAL is not None:  # a KeyboardInterrupt re-raised by a library (click) from ours
        return 128 + LAST_SIGNAL
    return 128 + signal.SIGINT


def stdout_gone() -> int:
    """stdout (or stderr) was closed by its reader (``envbuilder ... | head``) or at start
    (``>&-``): stop quietly, as Unix tools do; later writes (and the interpreter's final
    flush) go nowhere."""
    for fd in (1, 2):
        try:
            os.fstat(fd)
            if fd == 1 or not _writable(fd):
                quiet_stream(fd)
        except OSError:
            quiet_stream(fd)
    return EXIT_SIGPIPE


def _writable(fd: int) -> bool:
    import fcntl
    import stat

    try:
        st = os.fstat(fd)
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
            import select

            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            for _, ev in poller.poll(0):
                if ev & (select.POLLERR | select.POLLHUP):
                    return False
        return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY
    except OSError:
        return False


def guard_rich() -> None:
    """Every rich Console (ours, typer's help and errors, progress) hands a broken pipe to the
    one output guard: rich's own ``on_broken_pipe`` exits 1; this one raises the
    BrokenPipeError that the CLI turns into a quiet 141.

    rich is not imported for this (a command that prints JSON or one line never loads it):
    the patch is applied when ``rich.console`` is first imported, whoever imports it."""
    module = sys.modules.get("rich.console")
    if module is not None:
        _guard_console(module)
    elif not any(isinstance(f, _OnRichConsole) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnRichConsole())


def _guard_console(module: Any) -> None:
    def on_broken_pipe(self: Any) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of envbuilder's output went away")

    module.Console.on_broken_pipe = on_broken_pipe


class _OnRichConsole:
    """A meta path finder that finds nothing itself: it asks the finders after it for
    ``rich.console`` and guards the module's Console once the module has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "rich.console":
            return None
        sys.meta_path.remove(self)  # once: the module is imported once
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader: Any = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _guard_console(module)

        loader.exec_module = exec_module  # this module's own loader (one per file)
        return spec


def click_saw_broken_pipe() -> bool:
    """click (inside typer) answers EPIPE by wrapping the streams in its PacifyFlushWrapper
    and exiting 1; the wrapper is the sign that the reader went away."""
    return type(sys.stdout).__name__ == "PacifyFlushWrapper"


def is_broken_pipe(e: BaseException) -> bool:
    """The reader of our output is gone: EPIPE (a closed pipe), or EBADF on a stdout that was
    closed when the command started (see ``guard_streams``)."""
    if not isinstance(e, OSError):
        return False
    return isinstance(e, BrokenPipeError) or e.errno == errno.EPIPE or (
        e.errno == errno.EBADF and (STDOUT_CLOSED or not _writable(1)))


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


# Unicode categories of characters a reader cannot see or that act on the text: controls (C0,
# DEL, C1: ESC starts a terminal sequence, U+0085 is a line break), format characters (the
# bidi controls that reorder what a terminal shows, U+FEFF, zero-width ones, tags),
# surrogates, private use, unassigned, and the line and paragraph separators
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def hidden(ch: str) -> bool:
    """Whether the character ``ch`` must be shown escaped: a line break, a control character or
    one a reader cannot see (the one rule of the terminal writer and of the YAML emitter)."""
    import unicodedata

    o = ord(ch)
    if 0x20 <= o < 0x7F:
        return False
    return unicodedata.category(ch) in _HIDDEN or (o & 0xFFFE) == 0xFFFE


def terminal_safe(s: Any) -> str:
    """Text for a terminal, on one line: every control character (ANSI/OSC escapes, NUL, bells),
    line break (LF, CR, U+2028 ...) and invisible character (bidi controls) is shown escaped as
    Python writes it (``\\x1b``, ``\\n``, ``\\u202e``), never interpreted; tabs stay. A string
    from data can neither move the cursor nor start a line of its own (a fake
    ``envbuilder: error:`` line)."""
    text = str(s)
    if text.isascii() and text.isprintable():
        return text
    return "".join(repr(ch)[1:-1] if ch != "\t" and hidden(ch) else ch for ch in text)


def rich_text(s: Any):
    """A rich Text of ``s``: no markup interpreted, shown by ``terminal_safe``."""
    from rich.text import Text

    return Text(terminal_safe("" if s is None else s))
