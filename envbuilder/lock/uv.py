"""The one way envbuilder runs uv: find it, build a ``uv pip compile`` command for a stack's
Python and platform from its indexes, run it, and turn its failures into one sentence.

The hash-pinned lock (lock/requirements.py) and conda's pylock of pinned wheels (lock/conda.py)
both go through ``compile``; only the output flags (``mode``) differ. uv runs with
``--no-config`` (no uv.toml or pyproject from the working directory changes a lock),
``UV_PYTHON_DOWNLOADS=never`` and ``NO_COLOR``; the ``UV_*`` variables that would change a
resolution behind the lock's recorded inputs (indexes, ``UV_EXCLUDE_NEWER``, constraints,
strategies: ``RESOLUTION_ENV``) are removed from uv's environment, so a lock depends on what
its header records and nothing else. ``--exclude-newer`` is passed only when given.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from envbuilder.core.resolve import PYPI
from envbuilder.errors import IncompatibleError, InputError, MissingExtraError, OperationError

if TYPE_CHECKING:
    from envbuilder.core.resolve import Stack

PLATFORM = "x86_64-manylinux_2_28"
PLATFORMS = {"linux/amd64": PLATFORM, "linux/arm64": "aarch64-manylinux_2_28"}


def python_platform(stack: Stack) -> str:
    """uv's --python-platform for the stack's image platform."""
    return PLATFORMS.get(stack.platform, PLATFORM)
TIMEOUT_S = 1800
OUTPUT_CAP = 64 << 20  # what uv may print (a lock on stdout, its messages)
HASHES = ("--generate-hashes",)  # the mode of a hash-pinned lock
# uv reads these when the matching flag is absent: each would change a lock without the lock
# recording it (the indexes and the upload cut-off are recorded, and passed as flags)
RESOLUTION_ENV = ("UV_INDEX", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL",
                  "UV_FIND_LINKS", "UV_INDEX_STRATEGY", "UV_EXCLUDE_NEWER",
                  "UV_EXCLUDE_NEWER_PACKAGE", "UV_PRERELEASE", "UV_RESOLUTION", "UV_CONSTRAINT",
                  "UV_OVERRIDE", "UV_BUILD_CONSTRAINT", "UV_TORCH_BACKEND", "UV_NO_BINARY",
                  "UV_NO_BUILD", "UV_NO_INDEX")
_NET_MARKERS = ("Failed to fetch", "error sending request", "dns error", "Connect",
                "connection", "timed out", "Could not connect", "tcp connect error",
                "certificate", "Network is unreachable")


def find_uv(uv: str | None = None) -> str:
    """The uv executable: ``uv`` when given, else the one the ``uv`` package ships, else PATH."""
    if uv:
        if not (Path(uv).is_file() or shutil.which(uv)):
            raise InputError(f"uv executable {uv!r} not found")
        return uv
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found:
        return found
    raise MissingExtraError("uv", "lock")


def version(uv_bin: str) -> str:
    from envbuilder import _child

    try:
        r = _child.run([uv_bin, "--version"], timeout=60, cap=64 << 10)
    except OSError:
        return "unknown"
    return (r.stdout.strip() if r.ok and not r.dropped else "") or "unknown"


DEFAULT_STRATEGY = "first-index"


@dataclass(frozen=True)
class Indexes:
    """The indexes of a lock, as uv is given them: ``index`` (``--index-url``: PyPI or the site's
    mirror, the last one uv asks) and ``extras`` (``--extra-index-url``, asked first, in order:
    PyTorch's index for the variant, then the user's), and the strategy uv picks by."""

    index: str
    extras: tuple[str, ...]
    strategy: str = DEFAULT_STRATEGY

    @property
    def best_match(self) -> bool:
        return self.strategy == "unsafe-best-match"


def indexes(stack: Stack, index_url: str | None, extra_index_urls: Sequence[str],
            strategy: str | None = None) -> Indexes:
    """Where a stack's packages come from (the URLs a spec checked when it was made:
    core.spec.TargetSpec): PyTorch's index for the variant (``stack.torch_index``: the matrix's,
    or the site's ``--torch-index-url``) first, then the user's extra indexes, then PyPI or its
    mirror (``--pip-index-url``). uv's strategy is the one asked for (``--index-strategy``),
    else first-index: each package from the first index that has it, so a public index cannot
    shadow a private one (dependency confusion); nothing switches it by itself."""
    mirrors = tuple(extra_index_urls)
    base = index_url or PYPI
    torch_index = stack.torch_index
    first = () if torch_index in (PYPI, base) else (torch_index,)
    extras = tuple(dict.fromkeys((*first, *mirrors)))
    return Indexes(base, tuple(u for u in extras if u != base), strategy or DEFAULT_STRATEGY)


def compile_command(uv_bin: str, stack: Stack, idx: Indexes, out: Path | None,
                    mode: Sequence[str] = HASHES, exclude_newer: str | None = None,
                    constraints: Path | None = None) -> list[str]:
    """``uv pip compile`` for this stack's Python and platform from ``idx``; ``mode`` adds the
    output flags (hashes for a lock; ``--no-deps`` for conda's pylock of pinned wheels). With
    ``out`` None uv prints the result on its stdout (nothing is written anywhere).
    ``exclude_newer`` (an RFC 3339 timestamp, checked by the caller) leaves out files uploaded
    after it."""
    cmd = [uv_bin, "pip", "compile", "-", "--no-config", *mode, "--no-header",
           "--python-version", stack.python, "--python-platform", python_platform(stack),
           "--index-url", idx.index]
    for u in idx.extras:
        cmd += ["--extra-index-url", u]
    cmd += ["--index-strategy", idx.strategy]
    if exclude_newer:
        cmd += ["--exclude-newer", exclude_newer]
    if constraints is not None:
        cmd += ["--constraint", str(Path(constraints).absolute())]
    if out is not None:
        cmd += ["-o", str(Path(out).absolute())]
    return cmd


def public_url(url: str) -> str:
    """``url`` without credentials (``https://user:token@host/simple`` -> ``https://host/simple``):
    what a lock's header shows and records (a new token is not a new input)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def shown(cmd: list[str], out_name: str) -> str:
    """The command as a lock's header shows it: 'uv', a relative output name, URLs without
    credentials."""
    parts = ["uv", *(public_url(c) if "://" in c else c for c in cmd[1:])]
    if "-o" in parts:
        parts[-1] = out_name
    else:
        parts += ["-o", out_name]
    return shlex.join(parts)


def run_compile(cmd: list[str], inputs: Sequence[str], stack: Stack, idx: Indexes,
                cwd: str | Path | None = None) -> str:
    """Run a ``compile_command`` with ``inputs`` (requirement lines) on stdin; uv's stdout.
    uv is a child of this process: an interrupt (SIGINT/SIGTERM, see envbuilder._safety) ends it
    with envbuilder: it runs through the one child runner (envbuilder._child: output capped, a
    deadline, the signal forwarded)."""
    from envbuilder import _child

    env = {k: v for k, v in os.environ.items() if k not in RESOLUTION_ENV}
    env.setdefault("UV_PYTHON_DOWNLOADS", "never")
    env.setdefault("NO_COLOR", "1")
    env["COLUMNS"] = "1000"  # uv wraps its messages to this width: keep each one on one line
    try:
        r = _child.run(cmd, input="\n".join(inputs) + "\n", env=env, timeout=TIMEOUT_S,
                       cwd=str(cwd or tempfile.gettempdir()), cap=OUTPUT_CAP)
    except OSError as e:
        raise OperationError(f"cannot run uv ({cmd[0]}): {e.strerror or e}", step="lock") from None
    if r.timed_out:
        raise OperationError(f"uv pip compile for {stack.target} took over {TIMEOUT_S} s "
                             f"(index {idx.index})", step="lock")
    if r.dropped:
        raise OperationError(f"uv pip compile for {stack.target}: {r.over_cap()}", step="lock")
    if r.returncode == 0:
        return r.stdout
    raise failure(r.stderr, stack, idx)


def compile(stack: Stack, inputs: Sequence[str], out: Path | None, *, index_url: str | None = None,
            extra_index_urls: Sequence[str] = (), uv: str | None = None,
            mode: Sequence[str] = HASHES, exclude_newer: str | None = None,
            constraints: Path | None = None,
            strategy: str | None = None) -> tuple[list[str], Indexes, str, str]:
    """Resolve ``inputs`` for ``stack`` (into ``out``, or onto uv's stdout when None), within
    the pins of a ``constraints`` file when given: (the command, its indexes, uv's binary,
    uv's stdout)."""
    idx = indexes(stack, index_url, extra_index_urls, strategy)
    uv_bin = find_uv(uv)
    cmd = compile_command(uv_bin, stack, idx, out, mode, exclude_newer, constraints)
    text = run_compile(cmd, inputs, stack, idx, cwd=None if out is None else Path(out).parent)
    return cmd, idx, uv_bin, text


def failure(stderr: str, stack: Stack, idx: Indexes) -> Exception:
    """uv's stderr as one error: a refusal (exit 3), an unreachable index, or uv's own line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("warning:")]
    details = lines[:40]
    text = "\n".join(lines)
    # uv wraps its messages to the terminal's width (80 columns without one): match words, not lines
    flat = " ".join(text.replace("╰─▶", " ").split())
    denied = re.search(r"index URL \((\S+?)\) could not be queried due to a lack of valid "
                       r"authentication credentials \((\d{3})", flat)
    if denied:
        return OperationError(
            f"the package index {public_url(denied.group(1))} refused the lock ({denied.group(2)}: "
            f"no valid credentials): put them in ~/.netrc (machine HOST login USER password TOKEN) "
            f"or the file NETRC names; envbuilder writes them nowhere", step="lock", details=details)
    missing = re.search(r"\b([A-Za-z0-9][A-Za-z0-9._-]*) was not found in the (?:package registry|"
                        r"provided package locations)", flat)
    if missing:
        name = missing.group(1)
        name = name if len(name) <= 100 else name[:100] + "..."
        return InputError(f"the package {name} is not on the index {idx.index}: check its name "
                          f"(in --requirements) or use --pip-index-url / --extra-index-url for an "
                          f"index that has it", details=details)
    if "No solution found" in flat or "unsatisfiable" in flat:
        because = re.search(r"\b(Because .+?)(?: hint: |$)", flat)
        why = because.group(1) if because else (lines[0] if lines else "")
        why = why if len(why) <= 600 else why[:600] + "..."
        return IncompatibleError(
            f"the Python packages of {stack.tag} cannot be resolved together: {why}",
            details=details)
    if any(m in text for m in _NET_MARKERS):
        url = None
        for ln in lines:
            m = re.search(r"(https?://\S+|file://\S+)", ln)
            if m:
                url = m.group(1).rstrip(")").rstrip(".")
                break
        index = _which_index(url, idx) if url else idx.index
        reason = _net_reason(lines)
        mirror = ("--torch-index-url URL (a reachable mirror of PyTorch's index, a template "
                  "with {variant}) or " if index == stack.torch_index else "")
        return OperationError(
            f"cannot reach the package index {index} ({reason}{' for ' + url if url else ''}): "
            f"use {mirror}--pip-index-url URL (a reachable mirror) or build from a wheelhouse",
            step="lock", details=details)
    first = next((ln for ln in lines if ln.startswith("error:")), lines[0] if lines else "")
    return OperationError(f"uv pip compile failed for {stack.target}: {first}", step="lock",
                          details=details)


def _which_index(url: str, idx: Indexes) -> str:
    for u in (idx.index, *idx.extras):
        if url.startswith(u.rstrip("/")):
            return u
    m = re.match(r"(https?://[^/]+)", url)
    return m.group(1) if m else url


def _net_reason(lines: list[str]) -> str:
    for key, what in (("dns", "DNS lookup failed"), ("certificate", "TLS certificate rejected"),
                      ("timed out", "timed out"), ("Connect", "connection failed")):
        if any(key.lower() in ln.lower() for ln in lines):
            return what
    return "request failed"
