"""Hash-pinned locks of a resolved stack's Python packages (envbuilder lock).

What to call (the CLI and ``render --lock`` use exactly these):

* ``lock_target(stack, out_dir, *, requirements_file=None, index_url=None,
  extra_index_urls=(), uv=None, check=False, upgrade=False, exclude_newer=None) -> LockReport``
  ``envbuilder lock TARGET -o DIR [--requirements FILE] [--pip-index-url URL]
  [--extra-index-url URL] [--exclude-newer DATE] [--upgrade | --check]``: resolve ``stack``
  (``envbuilder.api.resolve_target``) with ``uv pip compile --generate-hashes`` and write
  ``DIR/requirements.lock`` atomically. The lock's header records its inputs (``lock_inputs``:
  the stack's facts that decide its packages, the top-level requirements, the
  ``--requirements`` file's sha256, the indexes without credentials, ``--exclude-newer``, the
  lock format) with their digest, and the digest of its package entries.
  Like ``uv lock``, a lock already there whose inputs match is kept as it is (uv is not run);
  it is resolved again when an input changed, and always with ``upgrade``.
  ``--check`` (``check=True``) verifies offline, never running uv nor reaching an index, that
  the lock on disk is the lock of the inputs given now (``lock_drift``): each changed input is
  named with its old and new value; an edited entry, a missing hash, an NCCL or torch pin that
  contradicts the stack, a lock without an inputs record (an older envbuilder's: lock it
  again with ``--upgrade``) fail too. A new upstream release is not drift; ``--upgrade`` takes
  it. Raises InputError (exit 2: a bad ``--requirements`` line or ``--exclude-newer`` date, no
  lock to check), IncompatibleError (exit 3: the requirements or the resolved lock contradict
  the stack), OperationError (exit 1: index unreachable, uv failed, ``--check`` found a
  difference; every difference in ``err.details`` and ``err.report.problems``),
  MissingExtraError (uv is not installed: ``envbuilder[lock]``).
* ``lock.write.write_locks(stack, out_dir, *, ..., conda=False, conda_channels=..., sbom=False,
  check=False, upgrade=False) -> {"lock", "conda", "sbom"}``: what ``envbuilder lock`` runs; the lock, the
  conda files and the SBOM are committed together through ``envbuilder._fs.Outputs`` (a
  failing conda solve leaves the old lock), into the output folder only (uv prints the lock on
  stdout; scratch files live in the folder's staging area).
* ``resolve_lock_text(stack, ...) -> str``: a fresh, cross-checked lock, written nowhere
  (``render --lock``).
* ``lock_problems(text, where, python=...)`` / ``check_lock_text``: a lock fit for
  ``--require-hashes``: pinned entries with well-formed hashes only, no pip options, no
  control characters, made for the stack's Python; ``render`` refuses anything else (exit 2).
  A package no index has is bad input (exit 2, naming it), not an incompatible combination.
* ``split_by_layer(lock_text, plan) -> dict[str, str]``: the one lock placed in the per-layer
  files (``envbuilder.assemble`` applies a lock to a build folder; this package only makes
  and checks locks) ``render_files(plan, layer_requirements=...)`` takes (keys ``torch``, ``horovod``,
  ``horovod.build``, ``deepspeed``, ``deepspeed.build``, ``team`` for the layers the plan
  has): torch and its big wheels in the stack layer, whatever else last; build the plan with
  ``make_plan(stack, hashes=True, ...)`` so pip runs ``--no-deps --require-hashes``.
  ``layer_pins(plan, files)``: each layer's pins, for an offline build's wheelhouse split.

The lock is one joint resolution (``_resolve``): the stack's own packages pinned, the rest
(torch's small dependencies included) free, together with the team's lines (see
docs/training.md).
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
and ``--python-version`` of the stack; ``UV_PYTHON_DOWNLOADS=never`` unless set; uv's
resolution-changing ``UV_*`` variables removed (lock/uv.py). The lock header has no timestamp:
locking twice gives the same bytes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder import __version__
from envbuilder.errors import IncompatibleError, InputError, OperationError
from envbuilder.core import validate
from envbuilder.core.resolve import PYPI, Stack
from envbuilder.lock import uv as _uv
from envbuilder.render.plan import make_plan
from envbuilder.lock.pkgdiff import package_diff, pinned

if TYPE_CHECKING:
    # imported where a requirement is parsed: render without a lock never parses one
    from packaging.requirements import Requirement

LOCK_NAME = "requirements.lock"
INSTALL_HINT = "pip install --require-hashes --no-deps -r requirements.lock"
_HASH_RE = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")
_NCCL_RE = re.compile(r"^nvidia-nccl-cu(\d+)$")


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
    extra_indexes: list[str] = field(default_factory=list)
    status: str = "resolved"  # "resolved" (uv ran), "unchanged" (kept: inputs match), "checked"
    inputs_digest: str | None = None
    changed: list[str] = field(default_factory=list)  # why a kept lock was resolved again
    problems: list[str] = field(default_factory=list)  # what --check found
    # the package diff (lock.pkgdiff.PackageDiff.to_dict): from the lock that was there to the
    # one resolved now; with --check, of the top-level pins from the lock's inputs to today's
    package_diff: dict | None = None

    def to_dict(self) -> dict:
        return {"path": self.path, "digest": self.digest, "packages": dict(self.packages),
                "index": self.index, "extra_indexes": list(self.extra_indexes),
                "command": self.command, "checked": self.checked, "status": self.status,
                "inputs_digest": self.inputs_digest, "changed": list(self.changed),
                "problems": list(self.problems), "package_diff": self.package_diff}


# -- public helpers --------------------------------------------------------------------------

def lock_digest(path: str | Path) -> str:
    """``sha256:<hex>`` of the lock file's bytes."""
    from envbuilder.core.readfile import read_bytes_capped

    data = read_bytes_capped(path, "lock", limit=MAX_LOCK_BYTES)
    return "sha256:" + hashlib.sha256(data).hexdigest()


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


_BIG_WHEEL_RE = re.compile(r"^(torch|triton|pytorch-triton(-[a-z0-9]+)?|nvidia-(?!ml-py$).+)$")


def stack_layer_names(pkgs: Sequence[LockedPackage]) -> set[str]:
    """The packages of the stack layer: torch and the large, stable wheels it pins (its
    ``nvidia-*`` CUDA wheels, triton) as the lock's dependency graph shows them, plus any NCCL
    wheel (Horovod links one). Their versions are fixed by torch itself: no team requirement
    moves them (one that tries is refused), so this layer's file is the same whatever the
    team asks for."""
    by_name = {p.name: p for p in pkgs}
    children: dict[str, set[str]] = {}
    for p in pkgs:
        for parent in p.via:
            children.setdefault(parent, set()).add(p.name)
    seen: set[str] = set()
    todo = ["torch"] if "torch" in by_name else []
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(children.get(n, ()))
    return {n for n in seen if _BIG_WHEEL_RE.match(n)} | \
        {p.name for p in pkgs if _NCCL_RE.match(p.name)}


def _entry_text(p: LockedPackage) -> str:
    """An entry as a layer file holds it: the pin and its hashes, without uv's ``# via``
    comments (which name whoever else needs it: they would change with the team's lines)."""
    keep = [ln for ln in p.text.splitlines() if not ln.strip().startswith("#")]
    if keep:
        keep[-1] = keep[-1].rstrip().rstrip("\\").rstrip()
    return "\n".join(keep) + "\n"


def split_by_layer(lock_text: str, plan) -> dict[str, str]:
    """Place the packages of one lock in the plan's layers, keeping hashes; every layer
    installs its file with ``--no-deps`` (the lock is already the whole environment).

    * ``torch`` (the stack layer): torch and the big wheels it pins (stack_layer_names);
    * for each compiled layer (Horovod, DeepSpeed, in the plan's order): ``<layer>.build``
      gets the closure of its build requirements not placed yet (the first one also gets
      what ``import torch`` needs: torch's small dependencies and numpy), then ``<layer>``
      the closure of its own requirements;
    * the last layer (the top one: the team's, which a locked plan always has) gets
      everything else: the team's lines and their dependencies, torch's small dependencies
      when nothing compiles.
    """
    from packaging.requirements import Requirement

    pkgs = read_lock(lock_text)
    by_name = {p.name: p for p in pkgs}
    children: dict[str, set[str]] = {p.name: set() for p in pkgs}
    for p in pkgs:
        for parent in p.via:
            children.setdefault(parent, set()).add(p.name)

    placed: dict[str, str] = {}

    def closure(roots: Iterable[str]) -> list[str]:
        seen: list[str] = []
        todo: list[str] = [canonicalize_name(r) for r in roots]
        while todo:
            n = todo.pop()
            if n in placed or n in seen or n not in by_name:
                continue
            seen.append(n)
            todo.extend(sorted(children.get(n, set())))
        return seen

    layers = list(plan.layers)
    first, rest = layers[0], layers[1:]
    order: list[str] = [first.name]
    for n in stack_layer_names(pkgs):
        placed[n] = first.name
    # what importing torch needs beyond the big wheels (compiled layers import it to build)
    stack_layer = [n for n in placed]
    torch_deps = closure([*(c for n in sorted(stack_layer) for c in sorted(children.get(n, ()))),
                          *(Requirement(r).name for r in first.requirements)])
    compiled = [la for la in rest if la.build_requirements or la.no_build_isolation]
    for layer in rest:
        if layer in compiled:
            key = f"{layer.name}.build"
            order.append(key)
            roots = [Requirement(r).name for r in layer.build_requirements]
            if layer is compiled[0]:
                roots = [*torch_deps, *roots]
            for n in closure(roots):
                placed[n] = key
        order.append(layer.name)
        for n in closure(Requirement(r).name for r in layer.requirements):
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
                 "# install: pip install --no-deps --require-hashes -r <this file>", ""]
        out[key] = "\n".join(lines) + "".join(_entry_text(p) for p in entries)
    return out


def layer_pins(plan, files: dict[str, str | bytes]) -> dict[str, list[str]]:
    """Per layer of a locked build folder (``files`` from build_files), the ``name==version``
    pins its requirement files hold (``<layer>.build`` with its layer): what an offline build
    takes from a wheelhouse for each layer (run.wheelhouse.split with ``deps=False``)."""
    out: dict[str, list[str]] = {}
    for layer in plan.layers:
        pins: list[str] = []
        for path in (f"requirements/{layer.name}.build.txt", layer.file):
            text = files.get(path)
            if isinstance(text, str):
                pins += [f"{p.name}=={p.version}" for p in read_lock(text)]
        out[layer.name] = pins
    return out


# -- inputs ----------------------------------------------------------------------------------

def _user_requirements(path: str | Path, text: str | None = None) -> list[Requirement]:
    from envbuilder._fs import read_text_capped

    p = Path(path)
    if text is None:
        text = read_text_capped(p, "--requirements", limit=1 << 20)
    return parse_requirement_lines(text.splitlines(), _comment_safe(str(p)))


def parse_requirement_lines(lines: Sequence[str], source: str) -> list[Requirement]:
    """Plain ``name[extras] op version`` lines (a requirements file's, or a project file's
    ``requirements`` list); comments and blank lines skipped. ``source`` names them in errors."""
    from packaging.requirements import InvalidRequirement, Requirement

    out: list[Requirement] = []
    for n, raw in enumerate(lines, 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        where = f"{source}:{n}"
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


def team_requirements(stack: Stack, *, requirements_file: str | Path | None = None,
                      lines: Sequence[str] = (), source: str = "requirements") -> tuple[str, ...]:
    """A team's own requirements (``--requirements FILE`` and/or a project's list), checked
    against the stack (exit 3 when one contradicts it): the ``team`` layer's lines."""
    reqs: list[Requirement] = []
    if requirements_file is not None:
        reqs += _user_requirements(requirements_file)
        _check_user_requirements(stack, reqs, requirements_file)
    if lines:
        more = parse_requirement_lines(list(lines), _comment_safe(source))
        _check_user_requirements(stack, more, source)
        reqs += more
    return tuple(dict.fromkeys(str(r) for r in reqs))


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
    the build plan states them (torch with numpy and the NCCL wheel it bundles, then Horovod,
    DeepSpeed) plus the build dependencies of the layers that compile, plus the user's
    extras, all resolved together (one ``uv pip compile``)."""

    lines: list[str] = []
    for layer in make_plan(stack).layers:
        lines += list(layer.requirements)
        if layer.name == "torch":
            lines += stack_pins(stack)
        lines += list(layer.build_requirements)
    lines += [str(r) for r in extras]
    return list(dict.fromkeys(lines))


def stack_pins(stack: Stack) -> list[str]:
    """The stack's own pins beyond its layers' lines: the NCCL wheel torch bundles (``==``).
    torch pins its triton and other ``nvidia-*`` wheels itself (``==`` in its metadata)."""
    nccl, pkg = _nccl_fact(stack)
    return [f"{canonicalize_name(pkg)}=={nccl}"] if nccl and pkg else []


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


# -- the inputs a lock is made from ----------------------------------------------------------

LOCK_FORMAT = "3"  # 3: one joint resolution, layers a placement of it
_INPUTS_TITLE = "# lock inputs (envbuilder lock --check compares them with the project, offline):"
_INPUTS_DIGEST = "# inputs digest: "
_PACKAGES_DIGEST = "# packages digest: "
_LIST_KEYS = ("extra index", "requirement")


@dataclass(frozen=True)
class LockInputs:
    """What a lock of a stack is made from, computed offline (no uv, no index): the record
    the lock's header keeps (key -> value; ``extra index`` and ``requirement`` are lists) and
    its digest, and what uv is given (the top-level requirement lines, the indexes as given,
    with any credentials, and the upload cut-off)."""

    record: dict[str, Any]
    digest: str
    requirements: list[str]
    idx: _uv.Indexes
    index_url: str | None
    extra_index_urls: tuple[str, ...]
    exclude_newer: str | None
    requirements_file: str | None
    stack_requirements: list[str] = field(default_factory=list)  # the stack's alone
    team: tuple[str, ...] = ()  # the team's lines, resolved together with the stack's


def parse_exclude_newer(value: str | None) -> str | None:
    """``--exclude-newer``: an ISO date (``2024-06-01``: midnight UTC at its start) or an
    ISO/RFC 3339 time (``2024-06-01T12:00:00Z``; without an offset, UTC), as the RFC 3339 UTC
    timestamp uv is given and the lock records. Anything else is bad input (exit 2). The
    resolver reads the same value (core.validate.exclude_newer)."""
    return validate.exclude_newer(value)


def _record_digest(record: dict[str, Any]) -> str:
    import json

    canon = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canon.encode("ascii")).hexdigest()


def lock_inputs(stack: Stack, *, requirements_file: str | Path | None = None,
                index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                exclude_newer: str | None = None, team: Sequence[str] = ()) -> LockInputs:
    """The inputs of a lock of ``stack``, offline: the stack's facts that decide its packages
    (target, Python, platform, torch and its variant, the NCCL wheel, Horovod, DeepSpeed), the
    top-level requirement lines, the ``--requirements`` file's sha256, the indexes (without
    credentials) and their strategy, ``--exclude-newer`` and the lock format. Tool versions
    (uv, envbuilder) are not inputs. A bad ``--requirements`` file is refused here (exit 2,
    or 3 when it contradicts the stack)."""
    from packaging.requirements import Requirement

    from envbuilder._fs import read_text_capped

    extras: list[Requirement] = []
    file_digest = "none"
    if requirements_file is not None:
        text = read_text_capped(Path(requirements_file), "--requirements", limit=1 << 20)
        extras = _user_requirements(requirements_file, text)
        _check_user_requirements(stack, extras, requirements_file)
        file_digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    extras += [Requirement(t) for t in team]  # a project's list, checked by team_requirements
    when = parse_exclude_newer(exclude_newer)
    stack_reqs = input_requirements(stack)
    reqs = list(dict.fromkeys([*stack_reqs, *(str(r) for r in extras)]))
    idx = _uv.indexes(stack, index_url, extra_index_urls)
    nccl, pkg = _nccl_fact(stack)
    record: dict[str, Any] = {
        "format": LOCK_FORMAT,
        "target": stack.target,
        "python": stack.python,
        "platform": _uv.python_platform(stack),
        "torch": f"{stack.torch.version} ({stack.variant})",
        "nccl": "none" if nccl is None else (f"{nccl} ({pkg})" if pkg else nccl),
        "horovod": str(stack.horovod.version) if stack.horovod is not None else "none",
        "deepspeed": str(stack.deepspeed.version) if stack.deepspeed is not None else "none",
        "index": _uv.public_url(idx.index),
        "extra index": [_uv.public_url(u) for u in idx.extras],
        "index strategy": "unsafe-best-match" if idx.best_match else "first-index",
        "exclude newer": when or "none",
        "requirements file": file_digest,
        "requirement": reqs,
    }
    record = {k: [_comment_safe(x) for x in v] if isinstance(v, list) else _comment_safe(v)
              for k, v in record.items()}
    return LockInputs(record=record, digest=_record_digest(record), requirements=reqs, idx=idx,
                      index_url=index_url, extra_index_urls=tuple(extra_index_urls),
                      exclude_newer=when,
                      requirements_file=str(requirements_file) if requirements_file else None,
                      stack_requirements=stack_reqs,
                      team=tuple(dict.fromkeys(str(r) for r in extras)))


def _split(text: str) -> tuple[str, str]:
    """(header, body): the leading comment lines and one blank line; then uv's entries."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1
    if i < len(lines) and not lines[i].strip():
        i += 1
    return "".join(lines[:i]), "".join(lines[i:])


def _packages_digest(body: str) -> str:
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


def read_header(text: str) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(inputs record, inputs digest, packages digest) from a lock's header; None where a
    lock (one made before envbuilder recorded its inputs, or an edited one) has none."""
    header, _ = _split(text)
    lines = header.splitlines()
    record: dict[str, Any] | None = None
    idig = pdig = None
    i = 0
    while i < len(lines):
        ln = lines[i]
        i += 1
        if ln == _INPUTS_TITLE:
            record = {k: [] for k in _LIST_KEYS}
            while i < len(lines) and lines[i].startswith("#   "):
                key, sep, val = lines[i][4:].partition(": ")
                i += 1
                if not sep:
                    continue
                if key in _LIST_KEYS:
                    record[key].append(val)
                else:
                    record[key] = val
        elif ln.startswith(_INPUTS_DIGEST):
            idig = ln[len(_INPUTS_DIGEST):].strip()
        elif ln.startswith(_PACKAGES_DIGEST):
            pdig = ln[len(_PACKAGES_DIGEST):].strip()
    return record, idig, pdig


def _short(digest: str | None) -> str:
    return "none" if not digest else digest[:19] + "..." if len(digest) > 19 else digest


def _changes(old: dict[str, Any], new: dict[str, Any], requirements_file: str | None) -> list[str]:
    """Each input that differs, named with its old and new value."""
    out: list[str] = []
    for key in [*new, *(k for k in old if k not in new)]:
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key in _LIST_KEYS:
            a, b = list(a or []), list(b or [])
            added = [x for x in b if x not in a]
            removed = [x for x in a if x not in b]
            what = "top-level requirements" if key == "requirement" else "extra indexes"
            parts = ([f"added {', '.join(added)}"] if added else []) + \
                    ([f"removed {', '.join(removed)}"] if removed else [])
            out.append(f"{what} changed: {'; '.join(parts) or 'reordered'}")
        elif key == "requirements file":
            name = Path(requirements_file).name if requirements_file else ""
            if a in (None, "none"):
                out.append(f"--requirements {_comment_safe(name)} is given now, the lock was made "
                           f"without one")
            elif b == "none":
                out.append(f"the lock was made with a --requirements file ({_short(a)}): give "
                           f"the same file to this command")
            else:
                out.append(f"requirements file {_comment_safe(name)} changed ({_short(a)} -> "
                           f"{_short(b)})")
        elif key == "format":
            newer = str(a).isdigit() and str(b).isdigit() and int(str(a)) > int(str(b))
            out.append(f"lock format {a or 'none'} -> {b} (made by "
                       f"{'a newer' if newer else 'another'} envbuilder)")
        else:
            out.append(f"{key} {a if a is not None else '(not recorded)'} -> "
                       f"{b if b is not None else '(no longer an input)'}")
    return out


_MARKER_ENV = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
               "platform_machine": "x86_64", "implementation_name": "cpython",
               "platform_python_implementation": "CPython", "extra": ""}


def _unmet(stack: Stack, reqs: Sequence[str], pkgs: list[LockedPackage], where: str) -> list[str]:
    """Top-level requirements the lock's entries do not satisfy (missing or another version)."""
    from packaging.requirements import InvalidRequirement, Requirement

    by = {p.name: p for p in pkgs}
    env = dict(_MARKER_ENV, python_version=stack.python, python_full_version=f"{stack.python}.0")
    out: list[str] = []
    for line in reqs:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        p = by.get(canonicalize_name(req.name))
        if p is None:
            out.append(f"{where}: the top-level requirement {line} has no entry in the lock")
        elif req.specifier and not req.specifier.contains(p.version, prereleases=True):
            out.append(f"{where}:{p.lineno}: {p.name}=={p.version} does not satisfy the top-level "
                       f"requirement {line}")
    return out


def lock_drift(stack: Stack, text: str, where: str, inputs: LockInputs,
               command: str | None = None) -> list[str]:
    """Why the lock ``text`` is not the lock of ``inputs``, offline: each input that changed
    (named, old -> new), an edited inputs record or package list, an entry without hashes or
    not pinned with ``==``, a contradiction of the stack (torch, NCCL, Horovod, DeepSpeed), a
    top-level requirement the entries do not satisfy. Empty when the lock is current."""
    record, idig, pdig = read_header(text)
    if record is None or idig is None:
        return [f"{where} does not record its inputs (made by an older envbuilder, or its "
                f"header was edited): lock it again once with "
                f"{_comment_safe(_default_command(stack, Path(where).parent, command))} --upgrade"]
    problems = _changes(record, inputs.record, inputs.requirements_file)
    if _record_digest(record) != idig:
        problems.append(f"{where}: the inputs recorded in its header were edited (their digest "
                        f"is not {_short(idig)})")
    _, body = _split(text)
    actual = _packages_digest(body)
    if pdig != actual:
        problems.append(f"{where}: the package entries were edited after envbuilder lock wrote "
                        f"them (packages digest {_short(pdig)} recorded, {_short(actual)} now)")
    problems += lock_problems(text, where, python=stack.python)
    try:
        pkgs = read_lock(text)
    except InputError as e:
        return problems + [str(e)]
    if pkgs:
        try:
            cross_check(stack, pkgs, where)
        except IncompatibleError as e:
            problems.append(str(e))
    problems += _unmet(stack, inputs.requirements, pkgs, where)
    return list(dict.fromkeys(problems))


# -- the lock --------------------------------------------------------------------------------

def _default_command(stack: Stack, out: Path, command: str | None = None) -> str:
    """The command that writes this lock again into ``out`` (``command``: the invocation
    that made it, pins included, core.spec.TargetSpec.invocation)."""
    return f"{command or f'envbuilder lock {stack.target}'} -o {out}"


def _header(stack: Stack, cmd: str, inputs: LockInputs, uv_version: str, body: str,
            made_by_command: str | None = None) -> str:
    idx = inputs.idx
    if made_by_command is not None:  # the exact invocation, pins included (core.spec)
        made_by = f"# made by: {_comment_safe(made_by_command)}"
    else:
        made_by = f"# made by: envbuilder lock {stack.target}"
        if inputs.requirements_file:
            made_by += f" --requirements {_comment_safe(Path(inputs.requirements_file).name)}"
        if inputs.exclude_newer:
            made_by += f" --exclude-newer {inputs.exclude_newer}"
    record_lines = []
    for key, value in inputs.record.items():
        for v in value if isinstance(value, list) else [value]:
            record_lines.append(f"#   {key}: {v}")
    extras = [_uv.public_url(u) for u in idx.extras]
    lines = [
        "# requirements.lock: every Python package of this environment, pinned with hashes.",
        f"# envbuilder version: {__version__}",
        f"# uv version: {uv_version}",
        f"# target: {stack.target}",
        f"# stack: {stack.tag}",
        f"# matrix digest: {stack.matrix.digest}",
        f"# python: {stack.python}, platform: {_uv.python_platform(stack)}",
        f"# index: {_uv.public_url(idx.index)}" + (f" (extra: {', '.join(extras)})" if extras else ""),
        made_by,
        f"#   which runs: {_comment_safe(cmd)} <<< the requirement lines below",
        _INPUTS_TITLE,
        *record_lines,
        f"{_INPUTS_DIGEST}{inputs.digest}",
        f"{_PACKAGES_DIGEST}{_packages_digest(body)}",
        f"# install: {INSTALL_HINT}",
        "#   (add --index-url/--extra-index-url for the index above)",
        "",
    ]
    return "\n".join(lines) + "\n"


def _comment_safe(s: str) -> str:
    """Text that stays inside one ``#`` comment line: control characters shown escaped."""
    return "".join(c if 32 <= ord(c) != 127 else repr(c)[1:-1] for c in s)


def _resolve(stack: Stack, inputs: LockInputs, *, command: str | None = None, uv: str | None
             ) -> tuple[str, list[LockedPackage], str]:
    """(lock text, its entries, the uv command shown): uv resolves ``inputs`` now, the whole
    environment at once: the stack's own packages pinned (torch, the NCCL wheel, Horovod,
    DeepSpeed; torch pins its triton and ``nvidia-*`` wheels itself), everything else (torch's
    small dependencies included) free within what the packages declare, together with the
    team's lines. Layers are a placement of this one lock (split_by_layer): the stack layer
    holds only the big wheels the stack pins, so the team's lines never change it."""
    cmd, _, uv_bin, body = _uv.compile(stack, inputs.requirements, None,
                                       index_url=inputs.index_url,
                                       extra_index_urls=inputs.extra_index_urls, uv=uv,
                                       exclude_newer=inputs.exclude_newer)
    problems = lock_problems(body, "uv's output")
    if problems:
        raise OperationError(f"uv pip compile wrote something envbuilder does not install: "
                             f"{problems[0]}", step="lock", details=problems[:20])
    pkgs = read_lock(body)
    shown = _uv.shown(cmd, LOCK_NAME)
    text = _header(stack, shown, inputs, _uv.version(uv_bin), body, command) + body
    return text, pkgs, shown


def resolve_lock_text(stack: Stack, *, requirements_file: str | Path | None = None,
                      index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                      uv: str | None = None, exclude_newer: str | None = None,
                      team: Sequence[str] = ()) -> str:
    """The text of a fresh requirements.lock for ``stack`` (cross-checked); nothing is
    written anywhere (uv prints the lock on its stdout)."""
    inputs = lock_inputs(stack, requirements_file=requirements_file, index_url=index_url,
                         extra_index_urls=extra_index_urls, exclude_newer=exclude_newer,
                         team=team)
    text, pkgs, _ = _resolve(stack, inputs, uv=uv)
    cross_check(stack, pkgs, "uv's resolution")
    return text


def _recorded_command(text: str) -> str:
    for ln in text.splitlines():
        if ln.startswith("#   which runs: "):
            return ln[len("#   which runs: "):].split(" <<< ")[0]
        if not ln.startswith("#"):
            break
    return ""


def _diff_lines(d: dict | None) -> list[str]:
    if not d:
        return []
    from envbuilder.lock.pkgdiff import PackageDiff

    return PackageDiff(added=d["added"], removed=d["removed"],
                       changed={k: (v["from"], v["to"]) for k, v in d["changed"].items()}).lines()


def versions_on_disk(dest: Path) -> dict[str, str] | None:
    """{name: version} of the lock at ``dest``; None when there is none (or it is unreadable)."""
    from envbuilder._fs import read_text_capped

    if not dest.is_file():
        return None
    try:
        return {p.name: p.version for p in read_lock(read_text_capped(dest, "lock",
                                                                      limit=MAX_LOCK_BYTES))}
    except (InputError, OSError):
        return None


def check_lock(stack: Stack, dest: Path, inputs: LockInputs,
               command: str | None = None) -> LockReport:
    """``lock --check``: the lock on disk is the lock of ``inputs`` (lock_drift), offline: no
    uv, no index. OperationError (exit 1) naming the first difference otherwise, every one in
    ``details`` and ``err.report.problems``; the lock is never rewritten."""
    from envbuilder._fs import read_text_capped

    # the lock in the output folder is read as itself, never through a link (a link to
    # /etc/passwd is refused, exit 2, not parsed as a lock)
    text = read_text_capped(dest, "lock", limit=MAX_LOCK_BYTES, follow_links=False)
    problems = lock_drift(stack, text, str(dest), inputs, command)
    try:
        versions = {p.name: p.version for p in read_lock(text)}
    except InputError:
        versions = {}
    report = LockReport(path=str(dest), digest=lock_digest(dest), packages=versions,
                        index=inputs.record["index"],
                        extra_indexes=list(inputs.record["extra index"]),
                        command=_recorded_command(text), checked=True, status="checked",
                        inputs_digest=inputs.digest, problems=problems)
    record, _, _ = read_header(text)
    if record is not None:
        report.package_diff = package_diff(pinned(record.get("requirement", [])),
                                           pinned(inputs.requirements)).to_dict()
    if problems:
        n = len(problems)
        fix = (f"{_comment_safe(_default_command(stack, dest.parent, command))} makes it "
               f"again (--upgrade also takes newer releases)")
        err = OperationError(f"{dest} does not match its inputs: {problems[0]}"
                             + (f" (and {n - 1} more)" if n > 1 else "") + f"; {fix}",
                             step="lock", details=problems + [
                                 f"top-level pins: {ln}"
                                 for ln in _diff_lines(report.package_diff)])
        err.report = report  # type: ignore[attr-defined]
        raise err
    return report
