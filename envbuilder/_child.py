"""The one way envbuilder runs a child process: ``nvidia-smi`` (doctor), ``apptainer``,
``cosign``, ``uv`` and ``conda-lock``.

* **Output capped, the tail kept.** Each stream is read as it comes (a thread per pipe, no
  deadlock on a full pipe) into a buffer of at most ``cap`` bytes: past it the oldest bytes go
  and are counted (``Result.dropped``), so a child that prints without end costs ``cap`` bytes
  of memory, and the tail (where the error is) is what a report shows. A caller that parses the
  whole output (XML, JSON, a lock) asks for ``whole()``: an output over the cap is then one
  error naming the cap, never a parse of half of it.
* **A deadline.** Each command has its own (``timeout``) and may share one with the commands
  around it (``Deadline``: verify's cosign calls, all together). Past it the child's whole
  process group is stopped (SIGTERM, then SIGKILL) and the result says ``timed_out``
  (exit status 124, as timeout(1) reports it).
* **Signals forwarded.** The child runs in its own session (a terminal's Ctrl-C reaches only
  envbuilder); when envbuilder is interrupted (Ctrl-C, or SIGTERM/SIGHUP, which
  ``_safety`` raises as ``Terminated``) the same signal goes to the child's group, then SIGKILL
  after a grace period, and the interruption goes on up: the command exits 130 (143 for
  SIGTERM) with its usual clean-up.

``run(argv, timeout=..., cap=...)`` answers a ``Result``; a program that cannot be started is
``OSError`` for the caller to word (not found, not executable).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import IO, Callable, Mapping, Sequence

DEFAULT_CAP = 8 << 20  # bytes of output kept per stream
GRACE_S = 5.0  # after the first signal, before SIGKILL
TIMED_OUT = 124  # the exit status of a command stopped at its deadline (timeout(1)'s)
_LINE_MAX = 64 << 10  # a line longer than this reaches on_line in pieces


class Deadline:
    """One deadline shared by several commands (``left()`` seconds remain)."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds, self.what = seconds, what
        self.ends = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.ends - time.monotonic())

    def passed(self) -> bool:
        return self.left() <= 0.0


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int  # TIMED_OUT (124) when it was stopped at its deadline
    stdout: str  # the last ``cap`` bytes of it (all of it unless ``dropped``)
    stderr: str  # likewise ("" with ``merge``: stderr went into stdout)
    timed_out: bool = False
    dropped: int = 0  # bytes of output left out (the oldest), both streams together
    cap: int = DEFAULT_CAP

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def over_cap(self) -> str | None:
        """The sentence for an output that did not fit (None when it did)."""
        if not self.dropped:
            return None
        return (f"`{os.path.basename(self.argv[0])}` printed more than {_size(self.cap)} "
                f"({self.dropped} bytes past it were left out)")


class _Tail:
    """The last ``cap`` bytes written to it, and how many went before them."""

    def __init__(self, cap: int, on_line: Callable[[str], None] | None) -> None:
        self.cap, self.on_line = cap, on_line
        self.chunks: deque[bytes] = deque()
        self.size = self.dropped = 0
        self.partial = b""

    def add(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        while self.size > self.cap and self.chunks:
            first = self.chunks[0]
            extra = self.size - self.cap
            if len(first) <= extra:
                self.chunks.popleft()
                self.size -= len(first)
                self.dropped += len(first)
            else:
                self.chunks[0] = first[extra:]
                self.size -= extra
                self.dropped += extra
        if self.on_line is not None:
            self._lines(data)

    def _lines(self, data: bytes) -> None:
        assert self.on_line is not None
        buf = self.partial + data
        *lines, self.partial = buf.split(b"\n")
        while len(self.partial) > _LINE_MAX:
            lines.append(self.partial[:_LINE_MAX])
            self.partial = self.partial[_LINE_MAX:]
        for line in lines:
            self.on_line(line.decode("utf-8", "replace").rstrip("\r"))

    def close(self) -> None:
        if self.on_line is not None and self.partial:
            self.on_line(self.partial.decode("utf-8", "replace"))
            self.partial = b""

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")


def _pump(stream: IO[bytes], tail: _Tail) -> None:
    fd = stream.fileno()
    try:
        while True:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            tail.add(data)
    except OSError:
        pass
    finally:
        tail.close()


def _feed(stream: IO[bytes], data: bytes) -> None:
    try:
        stream.write(data)
    except OSError:  # the child stopped reading (it ended, or does not read stdin)
        pass
    finally:
        try:
            stream.close()
        except OSError:
            pass


def _signal_group(proc: subprocess.Popen, signum: int) -> bool:
    """Send ``signum`` to the child's process group; False when it is gone."""
    try:
        os.killpg(proc.pid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop(proc: subprocess.Popen, first: int = signal.SIGTERM, grace: float = GRACE_S) -> None:
    """End the child's whole group: ``first``, then SIGKILL after ``grace`` seconds."""
    if proc.poll() is not None and not _signal_group(proc, 0):
        return
    if _signal_group(proc, first):
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc, signal.SIGKILL)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL cannot end
        pass


def _forwarded(e: BaseException) -> int:
    """The signal to send the child for the interruption ``e`` (SIGINT for Ctrl-C)."""
    num = getattr(e, "signum", None)
    return int(num) if isinstance(num, int) else signal.SIGINT


def run(argv: Sequence[str], *, timeout: float, cap: int = DEFAULT_CAP,
        input: bytes | str | None = None, env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None, merge: bool = False,
        on_line: Callable[[str], None] | None = None,
        deadline: Deadline | None = None) -> Result:
    """Run ``argv`` (see the module docstring); ``timeout`` seconds for this command, within
    ``deadline`` when given; ``merge`` sends stderr into stdout (one log, in order);
    ``on_line`` gets each line of stdout as it comes."""
    limit = timeout if deadline is None else min(timeout, deadline.left())
    data = input.encode("utf-8") if isinstance(input, str) else input
    proc = subprocess.Popen(list(argv), cwd=cwd, env=None if env is None else dict(env),
                            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                            start_new_session=True, close_fds=True)
    out, err = _Tail(cap, on_line), _Tail(cap, None)
    threads = [threading.Thread(target=_pump, args=(proc.stdout, out), daemon=True)]
    if not merge:
        threads.append(threading.Thread(target=_pump, args=(proc.stderr, err), daemon=True))
    if data is not None:
        threads.append(threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True))
    for t in threads:
        t.start()
    timed_out = False
    try:
        proc.wait(max(limit, 0.0))
    except subprocess.TimeoutExpired:
        timed_out = True
        stop(proc)
    except BaseException as e:  # Ctrl-C or SIGTERM: forwarded, then the interruption goes on
        stop(proc, _forwarded(e) if isinstance(e, KeyboardInterrupt) else signal.SIGTERM)
        raise
    finally:
        if proc.poll() is None:  # pragma: no cover - stopped above; never left behind
            stop(proc)
        for t in threads:
            t.join(GRACE_S)
        for s in (proc.stdout, proc.stderr):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
    code = TIMED_OUT if timed_out else (proc.returncode if proc.returncode is not None else -1)
    return Result(tuple(argv), code, out.text(), err.text(), timed_out,
                  out.dropped + err.dropped, cap)


__all__ = ["run", "Result", "Deadline", "stop", "DEFAULT_CAP", "TIMED_OUT"]
