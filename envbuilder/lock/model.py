"""The lock file's format, read and written through one typed model (as conda-lock's
``lockfile/`` does: dispatch on the format version, an error for a missing or unknown one).

A lock is uv's hash-pinned entries under a comment header (pip reads it as it is). Format 4,
written now::

    # requirements.lock: every Python package of this environment, pinned with hashes.
    # lock format: 4
    # envbuilder version: ..., uv version, target, stack, matrix digest, python, index
    # made by: envbuilder lock TARGET ...
    #   which runs: uv pip compile ... <<< the requirement lines below
    # lock inputs (envbuilder lock --check compares them with the project, offline):
    #   target: ...                    (one line per input; lists repeat their key)
    # inputs digest: sha256:...        (of the record: lock.inputs.record_digest)
    # packages digest: sha256:...      (of the entries below the header)
    # install: pip install --require-hashes --no-deps -r requirements.lock

Format 3 kept its version inside the inputs record (``#   format: 3``), and so compared it
as an input; it is read (``_read_v3``) into the same model, its version out of the record.
The version is never an input: a lock whose inputs match is current whatever format wrote it.
A header without a version, or with one this envbuilder does not read, is refused (exit 2)
in one line naming the file and the fix (``LockFormatError``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from envbuilder import __version__
from envbuilder.core.resolve import Stack
from envbuilder.errors import InputError
from envbuilder.lock import uv as _uv
from envbuilder.lock.entries import INSTALL_HINT, LockedPackage, comment_safe, read_lock
from envbuilder.lock.inputs import LIST_KEYS, LockInputs, record_digest

FORMAT = 4  # 4: the version in its own header line, not an input; 3: one joint resolution
INPUTS_TITLE = "# lock inputs (envbuilder lock --check compares them with the project, offline):"
INPUTS_DIGEST = "# inputs digest: "
PACKAGES_DIGEST = "# packages digest: "
_FORMAT_LINE = "# lock format: "
_RECORD_LINE = "#   "
_WHICH_RUNS = "#   which runs: "


class LockFormatError(InputError):
    """A lock without a format version, or with one this envbuilder does not read (exit 2)."""


@dataclass(frozen=True)
class Lockfile:
    """A lock as read: its format, the inputs record of its header (``None`` when the header
    keeps none: an edited one), the digests it records, the uv command it names, and uv's
    entries (``body``) below the header."""

    format: int
    record: dict[str, Any] | None
    inputs_digest: str | None
    packages_digest: str | None
    command: str
    body: str
    record_digest: str | None  # the digest of the record as written, for its format

    @property
    def record_intact(self) -> bool:
        """The recorded inputs digest is the record's (the record was not edited)."""
        return self.record_digest is not None and self.record_digest == self.inputs_digest

    @property
    def body_intact(self) -> bool:
        """The recorded packages digest is the entries' (no entry was edited)."""
        return self.packages_digest == packages_digest(self.body)

    def packages(self) -> list[LockedPackage]:
        return read_lock(self.body)


def split(text: str) -> tuple[str, str]:
    """(header, body): the leading comment lines and one blank line; then uv's entries."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1
    if i < len(lines) and not lines[i].strip():
        i += 1
    return "".join(lines[:i]), "".join(lines[i:])


def packages_digest(body: str) -> str:
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class _Header:
    """The header's lines as written, whatever the format: the version line's value, the
    inputs record (None without one), the two digests and the uv command."""

    version: str | None
    record: dict[str, Any] | None
    inputs_digest: str | None
    packages_digest: str | None
    command: str


def _scan(header: str) -> _Header:
    lines = header.splitlines()
    record: dict[str, Any] | None = None
    version = idig = pdig = None
    command = ""
    i = 0
    while i < len(lines):
        ln = lines[i]
        i += 1
        if ln == INPUTS_TITLE:
            record = {k: [] for k in LIST_KEYS}  # lists repeat their key
            while i < len(lines) and lines[i].startswith(_RECORD_LINE):
                key, sep, val = lines[i][len(_RECORD_LINE):].partition(": ")
                i += 1
                if not sep:
                    continue
                if key in LIST_KEYS:
                    record[key].append(val)
                else:
                    record[key] = val
        elif ln.startswith(_FORMAT_LINE):
            version = ln[len(_FORMAT_LINE):].strip()
        elif ln.startswith(INPUTS_DIGEST):
            idig = ln[len(INPUTS_DIGEST):].strip()
        elif ln.startswith(PACKAGES_DIGEST):
            pdig = ln[len(PACKAGES_DIGEST):].strip()
        elif ln.startswith(_WHICH_RUNS) and not command:
            command = ln[len(_WHICH_RUNS):].split(" <<< ")[0]
    return _Header(version, record, idig, pdig, command)


def _read_v3(h: _Header, body: str) -> Lockfile:
    """Format 3: the version is the record's ``format`` input; the digest covers it."""
    assert h.record is not None
    record = {k: v for k, v in h.record.items() if k != "format"}
    return Lockfile(format=3, record=record, inputs_digest=h.inputs_digest,
                    packages_digest=h.packages_digest, command=h.command, body=body,
                    record_digest=record_digest(h.record))


def _read_v4(h: _Header, body: str) -> Lockfile:
    return Lockfile(format=4, record=h.record, inputs_digest=h.inputs_digest,
                    packages_digest=h.packages_digest, command=h.command, body=body,
                    record_digest=None if h.record is None else record_digest(h.record))


_READERS: dict[int, Callable[[_Header, str], Lockfile]] = {3: _read_v3, 4: _read_v4}


def _version(h: _Header) -> str | None:
    if h.version is not None:
        return h.version
    if h.record is not None and isinstance(h.record.get("format"), str):
        return str(h.record["format"])  # format 3: the version inside the record
    return None


def read(text: str, where: str, fix: str) -> Lockfile:
    """The lock ``text`` (from the file ``where``) in the model, dispatched on its format
    version. No version, or one not in ``_READERS``: LockFormatError (exit 2), one line
    naming ``where`` and ``fix`` (the command that writes the lock again)."""
    header, body = split(text)
    h = _scan(header)
    version = _version(h)
    if version is None:
        raise LockFormatError(
            f"{where} has no lock format version (made by an older envbuilder or by hand, "
            f"or its header was edited): {fix}")
    reader = _READERS.get(int(version)) if version.isdigit() else None
    if reader is None:
        reads = ", ".join(str(v) for v in sorted(_READERS))
        newer = version.isdigit() and int(version) > FORMAT
        raise LockFormatError(
            f"{where} is lock format {comment_safe(version[:20])!r}, which envbuilder "
            f"{__version__} does not read (it reads formats {reads}): "
            + ("upgrade envbuilder to the one that wrote it, or " if newer else "") + fix)
    return reader(h, body)


def dump(stack: Stack, cmd: str, inputs: LockInputs, uv_version: str, body: str,
         made_by_command: str | None = None) -> str:
    """The lock's text in the current format (FORMAT): the header, then uv's ``body``."""
    return header(stack, cmd, inputs, uv_version, body, made_by_command) + body


def lock_path_fix(path: str | Path) -> str:
    """The fix a LockFormatError names when the target is not known (diff): lock again."""
    return f"lock it again with envbuilder lock TARGET -o {Path(path).parent} --upgrade"


def header(stack: Stack, cmd: str, inputs: LockInputs, uv_version: str, body: str,
            made_by_command: str | None = None) -> str:
    idx = inputs.idx
    if made_by_command is not None:  # the exact invocation, pins included (core.spec)
        made_by = f"# made by: {comment_safe(made_by_command)}"
    else:
        made_by = f"# made by: envbuilder lock {stack.target}"
        if inputs.requirements_file:
            made_by += f" --requirements {comment_safe(Path(inputs.requirements_file).name)}"
        if inputs.exclude_newer:
            made_by += f" --exclude-newer {inputs.exclude_newer}"
    record_lines = []
    for key, value in inputs.record.items():
        for v in value if isinstance(value, list) else [value]:
            record_lines.append(f"#   {key}: {v}")
    extras = [_uv.public_url(u) for u in idx.extras]
    lines = [
        "# requirements.lock: every Python package of this environment, pinned with hashes.",
        f"{_FORMAT_LINE}{FORMAT}",
        f"# envbuilder version: {__version__}",
        f"# uv version: {uv_version}",
        f"# target: {stack.target}",
        f"# stack: {stack.tag}",
        f"# matrix digest: {stack.matrix.digest}",
        f"# python: {stack.python}, platform: {_uv.python_platform(stack)}",
        f"# index: {_uv.public_url(idx.index)}" + (f" (extra: {', '.join(extras)})" if extras else ""),
        f"# index strategy: {idx.strategy} (uv's --index-strategy; --index-strategy changes it)",
        made_by,
        f"#   which runs: {comment_safe(cmd)} <<< the requirement lines below",
        INPUTS_TITLE,
        *record_lines,
        f"{INPUTS_DIGEST}{inputs.digest}",
        f"{PACKAGES_DIGEST}{packages_digest(body)}",
        f"# install: {INSTALL_HINT}",
        "#   (add --index-url/--extra-index-url for the index above)",
        "",
    ]
    return "\n".join(lines) + "\n"
