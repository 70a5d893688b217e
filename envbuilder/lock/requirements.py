"""Hash-pinned locks of a resolved stack's Python packages (envbuilder lock).

What to call (the CLI and ``render --lock`` use exactly these):

* ``lock_target(stack, out_dir, *, requirements_file=None, index_url=None,
  extra_index_urls=(), uv=None, check=False) -> LockReport``
  ``envbuilder lock TARGET -o DIR [--requirements FILE] [--pip-index-url URL]
  [--extra-index-url URL]``: resolve ``stack`` (``envbuilder.api.resolve_target``) with
  ``uv pip compile --generate-hashes`` and write ``DIR/requirements.lock`` atomically.
  ``--check`` is ``check=True``: resolve again into a temp file, compare it with the lock on
  disk and verify its hashes; nothing is written. Raises InputError (exit 2: a bad
  ``--requirements`` line, no lock to check), IncompatibleError (exit 3: the requirements or
  the resolved lock contradict the stack), OperationError (exit 1: index unreachable, uv
  failed, ``--check`` found a difference; the unified diff is in ``err.details`` and
  ``err.report.diff``), MissingExtraError (uv is not installed: ``envbuilder[lock]``).
* ``write_locks(stack, out_dir, *, ..., conda=False, conda_channels=..., sbom=False,
  check=False) -> {"lock", "conda", "sbom"}``: what ``envbuilder lock`` runs; the lock, the
  conda files and the SBOM are committed together through ``envbuilder._fs.Outputs`` (a
  failing conda solve leaves the old lock), into the output folder only (uv prints the lock on
  stdout; scratch files live in the folder's staging area).
* ``resolve_lock_text(stack, ...) -> str``: a fresh, cross-checked lock, written nowhere
  (``render --lock``).
* ``lock_problems(text, where, python=...)`` / ``check_lock_text``: a lock fit for
  ``--require-hashes``: pinned entries with well-formed hashes only, no pip options, no
  control characters, made for the stack's Python; ``render`` refuses anything else (exit 2).
  A package no index has is bad input (exit 2, naming it), not an incompatible combination.
* ``split_by_layer(lock_text, plan) -> dict[str, str]``: the lock cut into the per-layer
  files ``render_files(plan, layer_requirements=...)`` takes (keys ``torch``, ``horovod``,
  ``horovod.build``, ``deepspeed``, ``deepspeed.build`` for the layers the plan has); build
  the plan with ``make_plan(stack, hashes=True, ...)`` so pip runs with ``--require-hashes``.
* ``lock_digest(path) -> "sha256:<hex>"``: the digest of a lock file, for stack.json
  (``stack["lock"] = {"file": "requirements.lock", "digest": lock_digest(path)}``).
* ``read_lock(text) -> list[LockedPackage]``: the parsed entries (name, version, hashes, via).

Index choice. When the matrix says PyPI's default ``torch`` wheel is the stack's variant
(``stack.torch_index == PYPI``) only PyPI is used. Otherwise PyTorch's index for the variant
is ``--index-url`` and PyPI ``--extra-index-url``, with ``--index-strategy
unsafe-best-match``: uv's default (first-index) strategy looks at extra indexes *before*
``--index-url`` and would take PyPI's torch (another CUDA build) for the same version; with
best-match uv, like pip, compares every index and ``X+cu118`` beats ``X``. The cross-check
below refuses a lock whose torch local version is not the variant. ``index_url`` /
``extra_index_urls`` (mirrors) replace PyPI; a mirror of PyTorch's index goes in
``index_url``.

uv runs with ``--no-config`` (no uv.toml/pyproject from the working directory changes a
lock), ``--python-platform x86_64-manylinux_2_28`` (every OS in the matrix has glibc >= 2.31)
and ``--python-version`` of the stack; ``UV_PYTHON_DOWNLOADS=never`` unless set. The lock
header has no timestamp: locking twice gives the same bytes.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder import __version__
from envbuilder.errors import IncompatibleError, InputError, OperationError
from envbuilder.core.resolve import PYPI, Stack
from envbuilder.lock import uv as _uv
from envbuilder.render.plan import BuildPlan, make_plan
from envbuilder.render.templating import render_files
from envbuilder.lock.uv import PLATFORM

if TYPE_CHECKING:
    # imported where a requirement is parsed: render without a lock never parses one
    from packaging.requirements import Requirement

LOCK_NAME = "requirements.lock"
INSTALL_HINT = "pip install --require-hashes --no-deps -r requirements.lock"
_HASH_RE = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")
_NCCL_RE = re.compile(r"^nvidia-nccl-cu(\d+)$")
# header lines that name tool versions: ignored by --check (a newer uv or envbuilder alone
# does not make a lock stale; what it pins does)
_VOLATILE = ("# envbuilder version:", "# uv version:")


# -- data ------------------------------------------------------------------------------------

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


@dataclass
class LockReport:
    path: str
    digest: str
    packages: dict[str, str]
    index: str
    command: str
    checked: bool = False
    diff: str | None = None
    extra_indexes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"path": self.path, "digest": self.digest, "packages": dict(self.packages),
                "index": self.index, "extra_indexes": list(self.extra_indexes),
                "command": self.command, "checked": self.checked, "diff": self.diff}


# -- public helpers --------------------------------------------------------------------------

def lock_digest(path: str | Path) -> str:
    """``sha256:<hex>`` of the lock file's bytes."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"cannot read lock {path}: {e.strerror or e}") from None
    return "sha256:" + hashlib.sha256(data).hexdigest()


def apply_lock(stack: Stack, plan_kw: dict[str, Any], lock_text: str,
               where: str) -> tuple[BuildPlan, dict[str, str]]:
    """A build plan that installs ``lock_text`` with --require-hashes, and its per-layer files.

    The lock is cross-checked against the stack first (exit 3 naming the fact and lock line).
    Returns (plan, layer_requirements) for ``render_files``."""
    check_lock_text(lock_text, where, python=stack.python)
    cross_check(stack, read_lock(lock_text), where)
    plan = make_plan(stack, hashes=True, **plan_kw)
    return plan, split_by_layer(lock_text, plan)


_REQ_LINE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._ -]*\])?==[A-Za-z0-9.+!_*-]+"
                          r"( *; *[A-Za-z0-9_.<>=!~'\" ()-]+)? *\\?$")
_PYTHON_HEADER_RE = re.compile(r"^# python: ([0-9.]+)")
MAX_LOCK_BYTES = 8 << 20


def lock_problems(text: str, where: str, *, python: str | None = None) -> list[str]:
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
            problems.append(f"{where}:{entry_start}: {_cut(lines[entry_start - 1])} has no "
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
                problems.append(f"{where}:{n}: indented line outside an entry: {_cut(s_)!r}")
            elif not _HASH_RE.match(h):
                problems.append(f"{where}:{n}: not a hash line "
                                + ("(a hash cut short or malformed)" if h.startswith("--hash=")
                                   else "(pip options are not allowed in a lock)")
                                + f": {_cut(s_)!r}")
            else:
                entry_hashes += 1
            cont = s_.endswith("\\")
            continue
        close_entry(n)
        if cont:
            problems.append(f"{where}:{n - 1}: a line ends with '\\' but no hash follows")
        entry_start, entry_hashes = n, 0
        if s_.startswith("-"):
            problems.append(f"{where}:{n}: pip option {_cut(s_.split()[0], 40)!r} is not "
                            f"allowed in a lock (indexes go in --pip-index-url)")
            entry_start = None
        elif not _REQ_LINE_RE.match(s_):
            problems.append(f"{where}:{n}: not a pinned requirement 'name==version': {_cut(s_)!r}")
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


def _cut(s: str, n: int = 120) -> str:
    return s if len(s) <= n else s[:n] + "..."


def build_files(stack: Stack, *, lock_text: str | None = None,
                lock_source: str = LOCK_NAME,
                **plan_kw: Any) -> tuple[BuildPlan, dict[str, str | bytes]]:
    """The files of a build folder for ``stack``: (plan, {relative path: content}).

    With ``lock_text`` (a requirements.lock) the lock is cross-checked against the stack, cut
    into per-layer hash-pinned files installed with ``--require-hashes``, kept beside them, and
    its digest recorded in stack.json. ``plan_kw`` are make_plan's options. The one place a
    lock (or none) is applied to a build: render and build both come here."""
    import json

    if lock_text is None:
        plan = make_plan(stack, **plan_kw)
        return plan, render_files(plan)
    plan, layer_reqs = apply_lock(stack, plan_kw, lock_text, lock_source)
    files = render_files(plan, layer_requirements=layer_reqs)
    files[LOCK_NAME] = lock_text
    data = json.loads(files["stack.json"])
    data["lock"] = {"file": LOCK_NAME,
                    "digest": "sha256:" + hashlib.sha256(lock_text.encode()).hexdigest()}
    files["stack.json"] = json.dumps(data, indent=2) + "\n"
    return plan, files


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


def split_by_layer(lock_text: str, plan) -> dict[str, str]:
    """Cut a lock into per-layer requirement files, keeping hashes.

    Each package goes to the earliest layer that needs it: torch's dependency closure to
    ``torch``; for each later layer (horovod, deepspeed, in the plan's order) the closure of
    its build requirements (PipLayer.build_requirements) not already placed to ``<layer>.build``, then
    the closure of the layer's own requirements to ``<layer>``. Whatever is left (user
    extras from ``--requirements`` and their dependencies) goes to the last layer.
    """

    pkgs = read_lock(lock_text)
    by_name = {p.name: p for p in pkgs}
    children: dict[str, set[str]] = {p.name: set() for p in pkgs}
    for p in pkgs:
        for parent in p.via:
            children.setdefault(parent, set()).add(p.name)

    placed: dict[str, str] = {}

    def closure(roots: Iterable[str]) -> list[str]:
        seen: list[str] = []
        stack: list[str] = [canonicalize_name(r) for r in roots]
        while stack:
            n = stack.pop()
            if n in placed or n in seen or n not in by_name:
                continue
            seen.append(n)
            stack.extend(sorted(children.get(n, set())))
        return seen

    from packaging.requirements import Requirement

    order: list[str] = []
    layers = list(plan.layers)
    for layer in layers:
        roots = [Requirement(r).name for r in layer.requirements]
        if layer.name != layers[0].name and layer.build_requirements:
            key = f"{layer.name}.build"
            order.append(key)
            for n in closure(Requirement(r).name for r in layer.build_requirements):
                placed[n] = key
        order.append(layer.name)
        for n in closure(roots):
            placed[n] = layer.name
    last = layers[-1].name
    for p in pkgs:
        placed.setdefault(p.name, last)

    header = lock_text.split("\n")
    source = next((h for h in header if h.startswith("# target:")), None)
    out: dict[str, str] = {}
    for key in order:
        entries = [p for p in pkgs if placed[p.name] == key]
        lines = [f"# layer {key}: cut from {LOCK_NAME} by envbuilder {__version__}",
                 *([source] if source else []),
                 "# install: pip install --require-hashes -r <this file>", ""]
        out[key] = "\n".join(lines) + "".join(p.text for p in entries)
    return out


# -- inputs ----------------------------------------------------------------------------------

def _user_requirements(path: str | Path) -> list[Requirement]:
    from packaging.requirements import InvalidRequirement, Requirement

    from envbuilder._fs import read_text_capped

    p = Path(path)
    text = read_text_capped(p, "--requirements", limit=1 << 20)
    p = Path(_comment_safe(str(p)))
    out: list[Requirement] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        where = f"{p}:{n}"
        if any(ord(c) < 32 and c != "\t" for c in line):
            raise InputError(f"{where}: control characters are not allowed in --requirements")
        if line.startswith("-"):
            raise InputError(f"{where}: options such as {_cut(line.split()[0], 40)!r} are not allowed in "
                             f"--requirements (give plain 'name==version' lines; indexes go in "
                             f"--pip-index-url/--extra-index-url)")
        if line.endswith("\\"):
            raise InputError(f"{where}: line continuations are not allowed in --requirements")
        try:
            req = Requirement(line)
        except InvalidRequirement as e:
            why = str(e).splitlines()[0] if str(e) else "cannot parse"
            raise InputError(f"{where}: not a valid requirement {_cut(line)!r}: {why}") from None
        if req.url:
            raise InputError(f"{where}: direct URL requirements ({req.name} @ ...) cannot be "
                             f"hash-locked from an index; give name==version")
        out.append(req)
    return out


def _stack_versions(stack: Stack) -> dict[str, tuple[str, str]]:
    """Package -> (version, what says so) for the packages the stack pins."""
    out = {"torch": (str(stack.torch.version), f"torch {stack.torch.version} ({stack.target})")}
    if stack.deepspeed is not None:
        out["deepspeed"] = (str(stack.deepspeed.version), f"deepspeed {stack.deepspeed.version}")
    if stack.horovod is not None:
        out["horovod"] = (str(stack.horovod.version), f"horovod {stack.horovod.version}")
    nccl, pkg = _nccl_fact(stack)
    if nccl and pkg:
        out[canonicalize_name(pkg)] = (nccl, f"NCCL {nccl} bundled by torch {stack.torch.version} "
                                             f"{stack.variant}")
    return out


def _nccl_fact(stack: Stack) -> tuple[str | None, str | None]:
    tv = stack.torch_variant
    return (None if tv.nccl is None else str(tv.nccl)), tv.nccl_package


def _check_user_requirements(stack: Stack, reqs: list[Requirement], path) -> None:
    pinned = _stack_versions(stack)
    _, nccl_pkg = _nccl_fact(stack)
    nccl_major = _NCCL_RE.match(canonicalize_name(nccl_pkg)) if nccl_pkg else None
    for req in reqs:
        name = canonicalize_name(req.name)
        if name in pinned:
            version, what = pinned[name]
            candidates = [version]
            if name == "torch":
                candidates.append(f"{version}+{stack.variant}")
            if req.specifier and not any(req.specifier.contains(c, prereleases=True)
                                         for c in candidates):
                raise IncompatibleError(
                    f"--requirements {path} asks for {req} but the stack {stack.tag} has "
                    f"{what}: drop or change that line, or pick another target",
                    details=[f"requirements: {req}", f"stack: {what}",
                             f"source: {', '.join(_sources(stack, name)[:2])}"])
        m = _NCCL_RE.match(name)
        if m and nccl_major and m.group(1) != nccl_major.group(1):
            raise IncompatibleError(
                f"--requirements {path} asks for {req} but torch {stack.torch.version} "
                f"{stack.variant} bundles {nccl_pkg}: two NCCL wheels of different CUDA majors "
                f"cannot share one environment")


def _sources(stack: Stack, name: str) -> list[str]:
    if name == "deepspeed" and stack.deepspeed is not None:
        return list(stack.deepspeed.source)
    if name == "horovod" and stack.horovod is not None:
        return list(stack.horovod.source)
    return list(stack.torch.source)


def input_requirements(stack: Stack, extras: Sequence[Requirement] = ()) -> list[str]:
    """The top-level requirements a lock of ``stack`` resolves: every layer's requirements as
    the build plan states them (torch with numpy, then Horovod, DeepSpeed) plus the build
    dependencies of the layers that compile, plus the user's extras."""

    lines: list[str] = []
    for layer in make_plan(stack).layers:
        lines += list(layer.requirements)
        lines += list(layer.build_requirements)
    lines += [str(r) for r in extras]
    return list(dict.fromkeys(lines))


# -- cross-checks ----------------------------------------------------------------------------

def cross_check(stack: Stack, pkgs: list[LockedPackage], where: str) -> None:
    """The lock agrees with the stack: torch, deepspeed, horovod, the NCCL wheel."""
    by = {p.name: p for p in pkgs}

    def refuse(fact: str, source: str, p: LockedPackage | None, missing: str = "") -> None:
        shown = f"{where}:{p.lineno}: {_bare(p.line)}" if p else f"{where}: {missing}"
        raise IncompatibleError(f"the lock contradicts the stack {stack.tag}: {fact} "
                                f"(source: {source}) but {shown}",
                                details=[f"fact: {fact}", f"source: {source}", f"lock: {shown}"])

    tsrc = ", ".join(stack.torch.source[:1]) or stack.matrix.path.name
    t = by.get("torch")
    want = Version(str(stack.torch.version))
    if t is None:
        refuse(f"torch {want}", tsrc, None, "no torch line")
    else:
        v = _version(t.version)
        if v is None or Version(v.base_version) != Version(want.base_version):
            refuse(f"torch {want}", tsrc, t)
        if v is not None and v.local and v.local != stack.variant:
            refuse(f"torch {want} for {stack.variant}", tsrc, t)
        if v is not None and not v.local and stack.torch_index != PYPI:
            # PyPI's torch is another variant; PyTorch's index names its wheels X+<variant>
            refuse(f"torch {want} {stack.variant} comes from {stack.torch_index} as "
                   f"{want.base_version}+{stack.variant}", tsrc, t)
    for comp in ("deepspeed", "horovod"):
        rel = getattr(stack, comp)
        if rel is None:
            continue
        p = by.get(comp)
        src = ", ".join(rel.source[:1]) or "matrix"
        if p is None:
            refuse(f"{comp} {rel.version}", src, None, f"no {comp} line")
        elif _version(p.version) != Version(str(rel.version)):
            refuse(f"{comp} {rel.version}", src, p)
    nccl, pkg = _nccl_fact(stack)
    if nccl and pkg:
        src = f"{stack.matrix.path.name}/torch.yaml torch {stack.torch.version} {stack.variant}"
        p = by.get(canonicalize_name(pkg))
        if p is None:
            # torch wheels from PyTorch's index may link NCCL statically: only a *different*
            # NCCL wheel is a contradiction (checked below)
            pass
        elif _version(p.version) is None or \
                Version(_version(p.version).base_version) != Version(nccl):  # type: ignore[union-attr]
            refuse(f"torch {stack.torch.version} {stack.variant} bundles NCCL {nccl} ({pkg})", src, p)
    majors: dict[str, Any] = {}
    for p in pkgs:
        m = _NCCL_RE.match(p.name)
        if m:
            majors.setdefault(m.group(1)[:2], p)
    if len(majors) > 1:
        a, b = list(majors.values())[:2]
        raise IncompatibleError(
            f"the lock has NCCL wheels for two CUDA majors: {a.name}=={a.version} "
            f"({where}:{a.lineno}) and {b.name}=={b.version} ({where}:{b.lineno})",
            details=[a.line, b.line])
    want_major = _NCCL_RE.match(canonicalize_name(pkg)) if pkg else None
    for p in pkgs:
        m = _NCCL_RE.match(p.name)
        if m and want_major and m.group(1) != want_major.group(1):
            src = f"{stack.matrix.path.name}/torch.yaml torch {stack.torch.version} {stack.variant}"
            refuse(f"torch {stack.torch.version} {stack.variant} bundles {pkg}", src, p)


def _bare(line: str) -> str:
    return line.rstrip("\\").strip()


def _version(s: str) -> Version | None:
    try:
        return Version(s)
    except InvalidVersion:
        return None


# -- the lock --------------------------------------------------------------------------------

def _header(stack: Stack, cmd: str, inputs: list[str], uv_version: str, idx: _uv.Indexes,
            requirements_file: str | None) -> str:
    lines = [
        "# requirements.lock: every Python package of this environment, pinned with hashes.",
        f"# envbuilder version: {__version__}",
        f"# uv version: {uv_version}",
        f"# target: {stack.target}",
        f"# stack: {stack.tag}",
        f"# matrix digest: {stack.matrix.digest}",
        f"# python: {stack.python}, platform: {PLATFORM}",
        f"# index: {idx.index}" + (f" (extra: {', '.join(idx.extras)})" if idx.extras else ""),
        f"# made by: envbuilder lock {stack.target}"
        + (f" --requirements {_comment_safe(Path(requirements_file).name)}"
           if requirements_file else ""),
        f"#   which runs: {cmd} <<< input",
        "# input:",
        *[f"#   {_comment_safe(r)}" for r in inputs],
        f"# install: {INSTALL_HINT}",
        "#   (add --index-url/--extra-index-url for the index above)",
        "",
    ]
    return "\n".join(lines) + "\n"


def _comment_safe(s: str) -> str:
    """Text that stays inside one ``#`` comment line: control characters shown escaped."""
    return "".join(c if 32 <= ord(c) != 127 else repr(c)[1:-1] for c in s)


def _resolve(stack: Stack, *, requirements_file, index_url, extra_index_urls, uv
             ) -> tuple[str, list[LockedPackage], str, _uv.Indexes]:
    extras: list[Requirement] = []
    if requirements_file is not None:
        extras = _user_requirements(requirements_file)
        _check_user_requirements(stack, extras, requirements_file)
    inputs = input_requirements(stack, extras)
    cmd, idx, uv_bin, body = _uv.compile(stack, inputs, None, index_url=index_url,
                                         extra_index_urls=extra_index_urls, uv=uv)
    problems = lock_problems(body, "uv's output")
    if problems:
        raise OperationError(f"uv pip compile wrote something envbuilder does not install: "
                             f"{problems[0]}", step="lock", details=problems[:20])
    pkgs = read_lock(body)
    shown = _uv.shown(cmd, LOCK_NAME)
    text = _header(stack, shown, inputs, _uv.version(uv_bin), idx,
                   str(requirements_file) if requirements_file else None) + body
    return text, pkgs, shown, idx


def resolve_lock_text(stack: Stack, *, requirements_file: str | Path | None = None,
                      index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                      uv: str | None = None) -> str:
    """The text of a fresh requirements.lock for ``stack`` (cross-checked); nothing is
    written anywhere (uv prints the lock on its stdout)."""
    text, pkgs, _, _ = _resolve(stack, requirements_file=requirements_file, index_url=index_url,
                                extra_index_urls=extra_index_urls, uv=uv)
    cross_check(stack, pkgs, "uv's resolution")
    return text


def lock_target(stack: Stack, out_dir: str | Path, *, requirements_file: str | Path | None = None,
                index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                uv: str | None = None, check: bool = False) -> LockReport:
    """Write (or, with ``check``, verify) ``out_dir/requirements.lock`` for ``stack``."""
    return write_locks(stack, out_dir, requirements_file=requirements_file, index_url=index_url,
                       extra_index_urls=extra_index_urls, uv=uv, check=check)["lock"]


def write_locks(stack, out_dir: str | Path, *, requirements_file: str | Path | None = None,
                index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                uv: str | None = None, check: bool = False, conda: bool = False,
                conda_channels: Sequence[str] = ("conda-forge",), sbom: bool = False) -> dict:
    """``envbuilder lock``: requirements.lock, and with ``conda`` environment.yml +
    conda-lock.yml, with ``sbom`` sbom.cdx.json, all written together or not at all (a failing
    conda solve leaves the old requirements.lock in place). Returns {"lock": LockReport,
    "conda": CondaReport | None, "sbom": path | None}. ``check`` verifies the lock on disk
    and writes nothing; it takes neither ``conda`` nor ``sbom``."""
    out = Path(out_dir)
    dest = out / LOCK_NAME
    if check:
        if conda or sbom:
            raise InputError("lock --check verifies requirements.lock only: drop --conda/--sbom "
                             "(run lock without --check to rewrite them)")
        if not dest.is_file():
            raise InputError(f"no {LOCK_NAME} in {out} to check: run envbuilder lock "
                             f"{stack.target} -o {out} first")
    if conda:
        from envbuilder.lock.conda import _check_channel

        for c in conda_channels:
            _check_channel(c)
    text, pkgs, shown, idx = _resolve(stack, requirements_file=requirements_file,
                                      index_url=index_url, extra_index_urls=extra_index_urls, uv=uv)
    cross_check(stack, pkgs, "uv's resolution")
    versions = {p.name: p.version for p in pkgs}
    if check:
        return {"lock": _check(stack, dest, text, pkgs, shown, idx, versions), "conda": None,
                "sbom": None}
    from envbuilder._fs import Outputs

    result: dict = {"conda": None, "sbom": None}
    with Outputs("lock") as tx:
        tx.add(out, {LOCK_NAME: text}, group="lock")
        if conda or sbom:
            scratch_lock = tx.scratch(out) / LOCK_NAME
            scratch_lock.write_text(text, encoding="utf-8")
        if conda:
            from envbuilder.lock.conda import conda_outputs

            files, rep = conda_outputs(stack, out, lock_path=scratch_lock, work=tx.scratch(out),
                                       channels=tuple(conda_channels), index_url=index_url,
                                       extra_index_urls=extra_index_urls, uv=uv)
            tx.add(out, files, group="conda")
            result["conda"] = rep
        if sbom:
            import json

            from envbuilder.lock.sbom import SBOM_NAME, sbom as make_sbom

            tx.add(out, {SBOM_NAME: json.dumps(make_sbom(scratch_lock, stack), indent=2) + "\n"},
                   group="sbom")
            result["sbom"] = str(out / SBOM_NAME)
        tx.commit()
    digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    result["lock"] = LockReport(path=str(dest), digest=digest, packages=versions,
                                index=idx.index, extra_indexes=list(idx.extras), command=shown)
    return result


def _comparable(text: str) -> list[str]:
    return [ln for ln in text.splitlines(keepends=True) if not ln.startswith(_VOLATILE)]


def _check(stack: Stack, dest: Path, fresh_text: str, fresh: list[LockedPackage], shown: str,
           idx: _uv.Indexes, versions: dict[str, str]) -> LockReport:
    from envbuilder._fs import read_text_capped

    disk_text = read_text_capped(dest, "lock", limit=MAX_LOCK_BYTES)
    problems: list[str] = [p for p in lock_problems(disk_text, str(dest), python=stack.python)
                           if "cut short or malformed" not in p]
    try:
        disk = read_lock(disk_text)
    except InputError as e:
        disk = []
        problems.append(str(e))
    # every entry hashed, every hash well formed
    for p in disk:
        if not p.hashes:
            problems.append(f"{dest}:{p.lineno}: {p.name}=={p.version} has no --hash")
        for h in p.hashes:
            if not _HASH_RE.match(f"--hash={h}"):
                problems.append(f"{dest}: {p.name}=={p.version}: malformed hash {h!r}")
    fresh_by = {p.name: p for p in fresh}
    disk_by = {p.name: p for p in disk}
    for name, p in disk_by.items():
        f = fresh_by.get(name)
        if f is None:
            problems.append(f"{name}=={p.version} is in the lock but not in a fresh resolution")
        elif f.version != p.version:
            problems.append(f"{name}: lock has {p.version}, a fresh resolution {f.version}")
        elif set(p.hashes) != set(f.hashes):
            bad = sorted(set(p.hashes) - set(f.hashes))
            gone = sorted(set(f.hashes) - set(p.hashes))
            problems.append(f"{name}=={p.version}: hashes differ from the index"
                            + (f" (not on the index: {', '.join(bad)})" if bad else "")
                            + (f" (missing: {', '.join(gone)})" if gone else ""))
    for name, f in fresh_by.items():
        if name not in disk_by:
            problems.append(f"{name}=={f.version} is missing from the lock")
    diff = "".join(difflib.unified_diff(_comparable(disk_text), _comparable(fresh_text),
                                        fromfile=str(dest), tofile="fresh resolution"))
    if not problems and disk:
        try:
            cross_check(stack, disk, str(dest))
        except IncompatibleError as e:
            problems.append(str(e))
    if problems or diff:
        report = LockReport(path=str(dest), digest=lock_digest(dest), packages=versions,
                            index=idx.index, extra_indexes=list(idx.extras), command=shown,
                            checked=True, diff=diff or None)
        first = problems[0] if problems else "the header differs"
        n = len(problems)
        err = OperationError(f"{dest} is out of date or altered: {first}"
                             + (f" (and {n - 1} more)" if n > 1 else "")
                             + f"; run envbuilder lock {stack.target} -o {dest.parent} again",
                             step="lock", details=problems + (diff.splitlines() if diff else []))
        err.report = report  # type: ignore[attr-defined]
        err.diff = diff  # type: ignore[attr-defined]
        raise err
    return LockReport(path=str(dest), digest=lock_digest(dest), packages=versions,
                      index=idx.index, extra_indexes=list(idx.extras), command=shown,
                      checked=True, diff=None)
