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


def lock_problems(text: str, where: str, *, python: str | None = None) -> list[str]:  # noqa: C901, PLR0912 - one line scanner, one branch per kind of line
    """What makes ``text`` unfit to install with --require-hashes: pip options, stray or
    unpinned lines, control characters, an entry without hashes, a hash cut short, a lock
    made for another Python. Empty when the lock is well formed."""
    problems: list[str] = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    entry_start: int | None = None
    entry_hashes = 0
    cont = False  # the previous line ended with a backslash

    def close_entry(n: int) -> None:
        if entry_start is not None and entry_hashes == 0:
            problems.append(f"{where}:{entry_start}: {cut(lines[entry_start - 1])} has no "
                            f"--hash (every entry needs one)")

    for n, raw in enumerate(lines, 1):
        if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in raw.rstrip("\r")):
            problems.append(f"{where}:{n}: control characters in the lock")
            continue
        s_ = raw.strip()
        indented = raw[:1].isspace()
        if not s_:
            if cont:
                problems.append(f"{where}:{n}: the entry above ends with '\\' but nothing follows")
            close_entry(n)
            entry_start, entry_hashes, cont = None, 0, False
            continue
        if s_.startswith("#"):
            m = _PYTHON_HEADER_RE.match(s_)
            if m and python is not None and not indented and m.group(1) != python:
                problems.append(f"{where}:{n}: the lock was made for Python {m.group(1)}, "
                                f"the stack uses Python {python}: lock again for this target")
            cont = False
            continue
        if indented:
            h = s_.rstrip("\\").strip()
            if not cont or entry_start is None:
                problems.append(f"{where}:{n}: indented line outside an entry: {cut(s_)!r}")
            elif not _HASH_RE.match(h):
                problems.append(f"{where}:{n}: not a hash line "
                                + ("(a hash cut short or malformed)" if h.startswith("--hash=")
                                   else "(pip options are not allowed in a lock)")
                                + f": {cut(s_)!r}")
            else:
                entry_hashes += 1
            cont = s_.endswith("\\")
            continue
        close_entry(n)
        if cont:
            problems.append(f"{where}:{n - 1}: a line ends with '\\' but no hash follows")
        entry_start, entry_hashes = n, 0
        if s_.startswith("-"):
            problems.append(f"{where}:{n}: pip option {cut(s_.split()[0], 40)!r} is not "
                            f"allowed in a lock (indexes go in --pip-index-url)")
            entry_start = None
        elif not _REQ_LINE_RE.match(s_):
            problems.append(f"{where}:{n}: not a pinned requirement 'name==version': {cut(s_)!r}")
            entry_start = None
        cont = s_.endswith("\\")
    if cont:
        problems.append(f"{where}:{len(lines)}: the lock ends in the middle of an entry "
                        f"(cut short?)")
    close_entry(len(lines))
    return problems


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
