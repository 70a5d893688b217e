"""Normalise log lines before reading them: what terminals, forums and loggers add is taken off.

Three things, each cheap enough for a multi-gigabyte log:

* ``strip_ansi``: colour and cursor codes (``\\x1b[31m``) are removed from every line;
* ``strip_prefix``: what loggers put before a message (timestamps of dmesg, syslog, ISO,
  glog, vLLM and mpirun ``--timestamp-output``; ``[rank3]:``, ``(RayWorkerWrapper pid=...)``,
  compose's ``service_1  |``, ``slurmstepd: error: pyxis:``, UCX's ``[1693920302.521306]``)
  is taken off the front of a line, for joining and for the nearest-case tokens (the
  signatures and the facts still see the line as written: NCCL's ``host:pid:tid [dev]``
  prefix and torch's ``[rankN]:`` are facts);
* ``Joiner``: a message a terminal, a forum or a logger wrapped over two lines is re-joined
  (``with CUDA capability`` / ``sm_90 is not compatible ...``) so a signature written for the
  whole message matches. Python tracebacks are kept whole: a frame line (``File "..."``), a
  ``Traceback`` header and the lines that start a new record (a timestamp, a level, a prefix)
  are never joined to the line before.
"""

from __future__ import annotations

import re
from typing import Any, cast

__all__ = ["Joiner", "lazy", "strip_ansi", "strip_prefix", "tokens"]


class _LazyPattern:
    """A regular expression compiled when it is first used (a short log uses few of the
    facts' patterns: compiling all of them cost more than reading the log). After the first
    call the compiled pattern's methods are this object's own attributes, so later calls
    cost what a compiled pattern's do."""

    _METHODS = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split")

    def __init__(self, pattern: str, flags: int) -> None:
        self._args = (pattern, flags)

    def _compile(self) -> re.Pattern[str]:
        compiled = re.compile(*self._args)
        for name in self._METHODS:
            setattr(self, name, getattr(compiled, name))
        return compiled

    def __getattr__(self, name: str) -> Any:  # the first call of a method, or .pattern, .groups
        if name.startswith("__") or name == "_args":
            raise AttributeError(name)
        return getattr(self._compile(), name)


def lazy(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile(pattern, flags)``, done at the first use of the pattern."""
    return cast("re.Pattern[str]", _LazyPattern(pattern, flags))

_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")

_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_MON = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_PREFIX = re.compile(
    r"(?:"
    r"\[\s*\d+\.\d+\]\s*"                                           # dmesg [ 1843.308145]
    rf"|\[{_DAY} {_MON} +\d+ [\d:]+ \d{{4}}\]\s*"                   # dmesg -T
    rf"|{_DAY} {_MON} +\d+ [\d:]+ \d{{4}}\s*"                       # mpirun --timestamp-output
    r"|\[\d+,\d+\]<std(?:out|err)>:\s*"                             # mpirun --tag-output
    rf"|{_MON} +\d+ \d\d:\d\d:\d\d \S+ [\w.@/-]+(?:\[\d+\])?:\s*"   # syslog / journalctl
    r"|\[?\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?(?: [A-Z]+\d*)?\]?\s*(?:-\s+)?"  # ISO
    r"|\d\d/\d\d/\d{4} \d\d:\d\d:\d\d\s*(?:-\s+)?"                  # 09/04/2024 02:49:57 -
    r"|\d\d:\d\d:\d\d(?:\.\d+)?\s+"                                  # 19:14:43
    r"|\[1\d{9}\.\d+\]\s*"                                          # UCX [1693920302.521306]
    r"|\[[\w.-]+:\s*\d+\s*:\d+\]\s*"                                 # UCX [host:pid:tid]
    r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL) \d\d-\d\d [\d:.]+(?: \[[^\]]*\])?\s*"  # vLLM
    r"|[IWEF]\d{4} [\d:.]+\s+\d+ [\w.-]+:\d+\]\s*"                   # glog
    r"|\[rank\d+\]:\s*"                                             # torch [rank3]:
    r"|\((?:RayWorkerWrapper|\w+Actor|\w+Worker|pid=)[^)]*\)\s*"     # Ray (Worker pid=1, ip=...)
    r"|[\w.-]+[_-]\d+\s+\|\s"                                        # compose service_1  |
    r"|slurmstepd: (?:error: )?(?:pyxis:\s*)?"                      # Slurm / pyxis
    r"|kernel:\s*"
    r")+")
_TRACEBACK = re.compile(r'\s*(?:File "|Traceback \(most recent call last\)|During handling of|The above exception)')
_NEW_RECORD = re.compile(r"\s*(?:[A-Z][\w.]*(?:Error|Exception|Warning)\b|[\w.-]+:\d+:\d+ \[\d+\]|NCCL |\[|\(|#|\*|-{3}|={3}|\$ |> )")
_TOKEN = re.compile(r"[a-z][a-z0-9_]*(?:[./][a-z0-9_]+)*")
_JOIN_MAX = 400  # longer lines are records of their own, not wrapped fragments


def strip_ansi(line: str) -> str:
    """``line`` without terminal escape codes (a fast path when it has none)."""
    return _ANSI.sub("", line) if "\x1b" in line else line


def strip_prefix(line: str) -> str:
    """``line`` without the timestamps and logger prefixes in front of its message."""
    m = _PREFIX.match(line)
    return line[m.end():].lstrip() if m else line.lstrip()


def tokens(text: str) -> list[str]:
    """Lower-case word tokens of a normalised line (numbers, hex and punctuation dropped)."""
    return [t for t in _TOKEN.findall(text.lower()) if len(t) > 2 and not _hexish(t)]


def _hexish(tok: str) -> bool:
    return len(tok) >= 8 and all(c in "0123456789abcdefx_" for c in tok)


class Joiner:
    """Feeds physical lines, answers the re-joined logical line a wrap split (or None).

    ``push(line)`` returns ``prev + " " + line`` (both without prefixes) when ``line`` looks
    like the continuation of the line before it: the line before did not end a sentence or a
    record, ``line`` does not start a new record (a timestamp, a level, a traceback frame, an
    exception name, an NCCL prefix), and both are short. The caller matches the joined text
    for what neither half matched alone.
    """

    __slots__ = ("_prev",)

    def __init__(self) -> None:
        self._prev: str | None = None  # the line before, as written (None: cannot be joined to)

    def restart(self, line: str) -> None:
        """``line`` starts a record (the caller saw its first character): remember it only."""
        self._prev = line if len(line) <= _JOIN_MAX and line.strip() else None

    def push(self, line: str) -> str | None:
        prev, self._prev = self._prev, line
        first = line[:1]
        # fast path: most lines start a record (a capital, a digit, a bracket, a prefix)
        if prev is None or not (first.islower() or first in " \t") or len(line) > _JOIN_MAX:
            if len(line) > _JOIN_MAX or not line.strip():
                self._prev = None
            return None
        if not line.strip():
            self._prev = None
            return None
        if _TRACEBACK.match(line) or _TRACEBACK.match(prev):
            return None
        before = strip_prefix(prev).rstrip()
        stripped = strip_prefix(line)
        if not before or not stripped or before.endswith((".", "!", "?", ";", "{", "}", ")", "]", ">")):
            return None
        if stripped[:1].islower():
            return before + " " + stripped
        if first not in " \t" or _NEW_RECORD.match(stripped):
            return None
        return before + " " + stripped
