"""A lock's package entries: uv's ``pip compile --generate-hashes`` output parsed
(``read_lock``) and checked fit for ``pip install --require-hashes`` (``lock_problems``), the
lock file's digest, and the text helpers the other lock modules share."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from envbuilder.errors import InputError


LOCK_NAME = "requirements.lock"


INSTALL_HINT = "pip install --require-hashes --no-deps -r requirements.lock"


MAX_LOCK_BYTES = 8 << 20


_HASH_RE = re.compile(r"^--hash=sha256:[0-9a-f]{64}\Z")


NCCL_WHEEL_RE = re.compile(r"^nvidia-nccl-cu(\d+)\Z")


@dataclass(frozen=True)
class LockedPackage:
    """One entry of a lock: ``name==version`` with its hashes, ``# via`` parents and text."""

    name: str  # canonical (PEP 503) name
    version: str
    hashes: tuple[str, ...]  # "sha256:<hex>"
    via: tuple[str, ...]  # canonical names of the packages that need it
    text: str  # the entry as uv wrote it (requirement line, hash lines, via comments)
    line: str  # the requirement line alone, e.g. "torch==2.1.2 \\"
    lineno: int  # 1-based line number of ``line`` in the lock


def lock_digest(path: str | Path) -> str:
    """``sha256:<hex>`` of the lock file's bytes."""
    from envbuilder.core.readfile import read_bytes_capped

    data = read_bytes_capped(path, "lock", limit=MAX_LOCK_BYTES)
    return "sha256:" + hashlib.sha256(data).hexdigest()


_REQ_LINE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._ -]*\])?==[A-Za-z0-9.+!_*-]+"
                          r"( *; *[A-Za-z0-9_.<>=!~'\" ()-]+)? *\\?\Z")


_PYTHON_HEADER_RE = re.compile(r"^# python: ([0-9.]+)")


class _LockScanner:
    """The line scanner of ``lock_problems``: one method per kind of line (blank, comment, an
    entry's hash line, an entry), the open entry and whether the line before continues."""

    def __init__(self, lines: list[str], where: str, python: str | None) -> None:
        self.lines, self.where, self.python = lines, where, python
        self.problems: list[str] = []
        self.entry_start: int | None = None
        self.entry_hashes = 0
        self.cont = False  # the previous line ended with a backslash

    def say(self, n: int, what: str) -> None:
        self.problems.append(f"{self.where}:{n}: {what}")

    def close_entry(self) -> None:
        if self.entry_start is not None and self.entry_hashes == 0:
            self.say(self.entry_start, f"{cut(self.lines[self.entry_start - 1])} has no --hash (every "
                                       f"entry needs one)")

    def line(self, n: int, raw: str) -> None:
        if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in raw.rstrip("\r")):
            self.say(n, "control characters in the lock")
            return
        s_ = raw.strip()
        if not s_:
            self.blank(n)
        elif s_.startswith("#"):
            self.comment(n, s_, raw[:1].isspace())
        elif raw[:1].isspace():
            self.hash_line(n, s_)
        else:
            self.entry(n, s_)

    def blank(self, n: int) -> None:
        if self.cont:
            self.say(n, "the entry above ends with '\\' but nothing follows")
        self.close_entry()
        self.entry_start, self.entry_hashes, self.cont = None, 0, False

    def comment(self, n: int, s_: str, indented: bool) -> None:
        m = _PYTHON_HEADER_RE.match(s_)
        if m and self.python is not None and not indented and m.group(1) != self.python:
            self.say(n, f"the lock was made for Python {m.group(1)}, the stack uses Python "
                        f"{self.python}: lock again for this target")
        self.cont = False

    def hash_line(self, n: int, s_: str) -> None:
        h = s_.rstrip("\\").strip()
        if not self.cont or self.entry_start is None:
            self.say(n, f"indented line outside an entry: {cut(s_)!r}")
        elif not _HASH_RE.match(h):
            self.say(n, "not a hash line " + ("(a hash cut short or malformed)" if h.startswith("--hash=")
                                              else "(pip options are not allowed in a lock)")
                     + f": {cut(s_)!r}")
        else:
            self.entry_hashes += 1
        self.cont = s_.endswith("\\")

    def entry(self, n: int, s_: str) -> None:
        self.close_entry()
        if self.cont:
            self.say(n - 1, "a line ends with '\\' but no hash follows")
        self.entry_start, self.entry_hashes = n, 0
        if s_.startswith("-"):
            self.say(n, f"pip option {cut(s_.split()[0], 40)!r} is not allowed in a lock (indexes go "
                        f"in --pip-index-url)")
            self.entry_start = None
        elif not _REQ_LINE_RE.match(s_):
            self.say(n, f"not a pinned requirement 'name==version': {cut(s_)!r}")
            self.entry_start = None
        self.cont = s_.endswith("\\")

    def finish(self) -> list[str]:
        if self.cont:
            self.say(len(self.lines), "the lock ends in the middle of an entry (cut short?)")
        self.close_entry()
        return self.problems


def lock_problems(text: str, where: str, *, python: str | None = None) -> list[str]:
    """What makes ``text`` unfit to install with --require-hashes: pip options, stray or
    unpinned lines, control characters, an entry without hashes, a hash cut short, a lock
    made for another Python. Empty when the lock is well formed."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    scan = _LockScanner(lines, where, python)
    for n, raw in enumerate(lines, 1):
        scan.line(n, raw)
    return scan.finish()


def check_lock_text(text: str, where: str, *, python: str | None = None) -> None:
    """Refuse (exit 2) a lock lock_problems finds fault with, naming the first problem."""
    problems = lock_problems(text, where, python=python)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(f"{problems[0]}{more}: not a lock envbuilder installs; make it again "
                         f"with envbuilder lock", details=problems[:20])


def cut(s: str, n: int = 120) -> str:
    return s if len(s) <= n else s[:n] + "..."


def comment_safe(s: str) -> str:
    """Text that stays inside one ``#`` comment line: control characters shown escaped."""
    return "".join(c if 32 <= ord(c) != 127 else repr(c)[1:-1] for c in s)


def read_lock(text: str) -> list[LockedPackage]:
    """Parse uv's ``pip compile --generate-hashes`` output (and envbuilder's header)."""
    out: list[LockedPackage] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        raw = lines[i]
        s = raw.strip()
        if not s or s.startswith("#") or raw[:1].isspace():
            i += 1
            continue
        start = i
        req_line = s
        body = [raw]
        i += 1
        while i < len(lines) and lines[i][:1].isspace() and lines[i].strip():
            body.append(lines[i])
            i += 1
        spec = req_line.rstrip("\\").strip().split(";")[0].strip()
        if "==" not in spec:
            raise InputError(f"lock line {start + 1} is not pinned with '==': {req_line!r}")
        name, version = spec.split("==", 1)
        hashes: list[str] = []
        via: list[str] = []
        in_via = False
        for b in body[1:]:
            t = b.strip().rstrip("\\").strip()
            if t.startswith("--hash="):
                hashes.append(t[len("--hash="):])
            elif t.startswith("# via"):
                rest = t[len("# via"):].strip()
                in_via = True
                if rest:
                    via.append(rest)
                    in_via = False
            elif t.startswith("#") and in_via:
                via.append(t.lstrip("#").strip())
        out.append(LockedPackage(
            name=canonicalize_name(name.strip()), version=version.strip(),
            hashes=tuple(hashes),
            via=tuple(canonicalize_name(v.split()[0]) for v in via if v and not v.startswith("-")),
            text="\n".join(body) + "\n", line=req_line, lineno=start + 1))
    return out
