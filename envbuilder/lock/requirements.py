"""Hash-pinned locks of a resolved stack's Python packages (envbuilder lock).

What to call (the CLI and ``render --lock`` use exactly these):

* ``lock.write.lock_stack(stack, out_dir, *, requirements_file=None, index_url=None,
  extra_index_urls=(), uv=None, check=False, upgrade=False, exclude_newer=None) -> LockReport``
  ``envbuilder lock TARGET -o DIR [--requirements FILE] [--pip-index-url URL]
  [--extra-index-url URL] [--exclude-newer DATE] [--upgrade | --check]``: resolve ``stack``
  (``envbuilder.api.resolve_target``) with ``uv pip compile --generate-hashes`` and write
  ``DIR/requirements.lock`` atomically. The lock's header records its inputs (``lock_inputs``:
  the stack's facts that decide its packages, the top-level requirements, the
  ``--requirements`` file's sha256, the indexes without credentials, ``--exclude-newer``, the
  lock format) with their digest, and the digest of its package entries. ``exclude_newer``
  is a spec's (core.spec.TargetSpec: checked when the spec was made, as RFC 3339 UTC).
  Like ``uv lock``, a lock already there whose inputs match is kept as it is (uv is not run);
  it is resolved again when an input changed, and always with ``upgrade``.
  ``--check`` (``check=True``) verifies offline, never running uv nor reaching an index, that
  the lock on disk is the lock of the inputs given now (``lock_drift``): each changed input is
  named with its old and new value; an edited entry, a missing hash, an NCCL or torch pin that
  contradicts the stack, a lock without an inputs record (an older envbuilder's: lock it
  again with ``--upgrade``) fail too. A new upstream release is not drift; ``--upgrade`` takes
  it. Raises InputError (exit 2: a bad ``--requirements`` line, no lock to check), IncompatibleError (exit 3: the requirements or the resolved lock contradict
  the stack), OperationError (exit 1: index unreachable, uv failed, ``--check`` found a
  difference: LockCheckFailed, every difference in ``err.details`` and ``err.report.problems``),
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
  and checks locks) ``render_files(plan, layer_requirements=...)`` takes (keys ``torch``,
  each compiled component's ``<name>`` and ``<name>.build``, ``team`` for the layers the plan
  has): torch and its big wheels in the stack layer, whatever else last; build the plan with
  ``make_plan(stack, PlanOptions(..., hashes=True))`` so pip runs ``--no-deps --require-hashes``.
  ``layer_pins(plan, files)``: each layer's pins, for an offline build's wheelhouse split.

The lock is one joint resolution (``resolve``): the stack's own packages pinned, the rest
(torch's small dependencies included) free, together with the team's lines (see
docs/training.md).
* ``lock_digest(path) -> "sha256:<hex>"``: the digest of a lock file, for stack.json
  (``stack["lock"] = {"file": "requirements.lock", "digest": lock_digest(path)}``).
* ``read_lock(text) -> list[LockedPackage]``: the parsed entries (name, version, hashes, via).

Index choice (lock.uv.indexes). When the matrix says PyPI's default ``torch`` wheel is the
stack's variant (``stack.torch_index == PYPI``) only PyPI (or ``index_url``, its mirror) is
used. Otherwise PyTorch's index for the variant (the matrix's, or the site's
``torch_index_url`` template) is the first ``--extra-index-url``: uv asks extra indexes
*before* ``--index-url``, so torch comes from it and never from PyPI (whose torch is another
CUDA build of the same version); then the user's ``extra_index_urls``; then ``--index-url``,
PyPI or ``index_url``. The strategy is first-index unless the user asks for another
(``index_strategy``): a public index never shadows a package a private one has. The header
records the strategy. The cross-check below refuses a lock whose torch local version is not
the variant.

uv runs with ``--no-config`` (no uv.toml/pyproject from the working directory changes a
lock), ``--python-platform x86_64-manylinux_2_28`` (every OS in the matrix has glibc >= 2.31)
and ``--python-version`` of the stack; ``UV_PYTHON_DOWNLOADS=never`` unless set; uv's
resolution-changing ``UV_*`` variables removed (lock/uv.py). The lock header has no timestamp:
locking twice gives the same bytes.

The package is split by concern, as uv keeps its lock, its serialization and its export
formats apart: ``entries`` (uv's entries parsed and checked, the file's digest), ``model``
(the versioned lock file: one typed model read and written), ``inputs`` (what a lock is made
from, offline), ``team`` (the team's requirement lines), ``checks`` (the lock against its
stack), ``layers`` (the lock placed in the plan's layers); this module runs uv and compares a
lock with its inputs. The names above are importable from here as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from envbuilder.core.resolve import Stack
from envbuilder.errors import IncompatibleError, InputError, OperationError
from envbuilder.lock import uv as _uv
from envbuilder.lock.checks import cross_check, unmet
from envbuilder.lock.entries import (INSTALL_HINT, LOCK_NAME, MAX_LOCK_BYTES, LockedPackage,
                                     check_lock_text, comment_safe, lock_digest, lock_problems,
                                     read_lock)
from envbuilder.lock.inputs import LIST_KEYS, LockInputs, input_requirements, lock_inputs, stack_pins
from envbuilder.lock.layers import layer_pins, split_by_layer, stack_layer_names
from envbuilder.lock.model import Lockfile, LockFormatError, dump, packages_digest, read
from envbuilder.lock.pkgdiff import package_diff, pinned
from envbuilder.lock.team import (parse_requirement_lines, pip_args_options, pip_line_problem,
                                  team_requirements)

__all__ = ["INSTALL_HINT", "LOCK_NAME", "MAX_LOCK_BYTES", "LockFormatError", "LockInputs",
           "LockReport", "LockedPackage", "Lockfile", "check_lock", "check_lock_text",
           "cross_check", "default_command", "input_requirements", "layer_pins", "lock_digest",
           "lock_drift", "lock_inputs", "lock_problems",
           "parse_requirement_lines", "pip_args_options", "pip_line_problem", "read_lock",
           "read_lockfile", "resolve", "resolve_lock_text", "split_by_layer",
           "stack_layer_names", "stack_pins", "team_requirements", "versions_on_disk"]


@dataclass
class LockReport:
    path: str
    digest: str
    packages: dict[str, str]
    index: str
    command: str
    checked: bool = False
    extra_indexes: list[str] = field(default_factory=list)
    index_strategy: str = "first-index"  # uv's (lock.uv.indexes), as the header records it
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
                "index_strategy": self.index_strategy, "command": self.command, "checked": self.checked, "status": self.status,
                "inputs_digest": self.inputs_digest, "changed": list(self.changed),
                "problems": list(self.problems), "package_diff": self.package_diff}


def _short(digest: str | None) -> str:
    return "none" if not digest else digest[:19] + "..." if len(digest) > 19 else digest


def _changes(old: dict[str, Any], new: dict[str, Any], requirements_file: str | None) -> list[str]:
    """Each input that differs, named with its old and new value."""
    out: list[str] = []
    for key in [*new, *(k for k in old if k not in new)]:
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key in LIST_KEYS:
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
                out.append(f"--requirements {comment_safe(name)} is given now, the lock was made "
                           f"without one")
            elif b == "none":
                out.append(f"the lock was made with a --requirements file ({_short(a)}): give "
                           f"the same file to this command")
            else:
                out.append(f"requirements file {comment_safe(name)} changed ({_short(a)} -> "
                           f"{_short(b)})")
        else:
            out.append(f"{key} {a if a is not None else '(not recorded)'} -> "
                       f"{b if b is not None else '(no longer an input)'}")
    return out


def lock_drift(stack: Stack, text: str, where: str, inputs: LockInputs,
               command: str | None = None) -> list[str]:
    """Why the lock ``text`` is not the lock of ``inputs``, offline: each input that changed
    (named, old -> new), an edited inputs record or package list, an entry without hashes or
    not pinned with ``==``, a contradiction of the stack (torch, NCCL, the components), a
    top-level requirement the entries do not satisfy. Empty when the lock is current."""
    lf = read_lockfile(text, where, stack, command)  # no or an unknown format: exit 2
    if lf.record is None or lf.inputs_digest is None:
        return [f"{where} does not record its inputs (made by an older envbuilder, or its "
                f"header was edited): lock it again once with "
                f"{comment_safe(default_command(stack, Path(where).parent, command))} --upgrade"]
    problems = _changes(lf.record, inputs.record, inputs.requirements_file)
    if not lf.record_intact:
        problems.append(f"{where}: the inputs recorded in its header were edited (their digest "
                        f"is not {_short(lf.inputs_digest)})")
    if not lf.body_intact:
        problems.append(f"{where}: the package entries were edited after envbuilder lock wrote "
                        f"them (packages digest {_short(lf.packages_digest)} recorded, "
                        f"{_short(packages_digest(lf.body))} now)")
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
    problems += unmet(stack, inputs.requirements, pkgs, where)
    return list(dict.fromkeys(problems))


def read_lockfile(text: str, where: str, stack: Stack, command: str | None = None) -> Lockfile:
    """The lock ``text`` of ``stack`` in the model (lock.model.read): a missing or unknown
    format version is one line (exit 2) naming ``where`` and the command that locks again."""
    fix = (f"lock it again with "
           f"{comment_safe(default_command(stack, Path(where).parent, command))} --upgrade")
    return read(text, where, fix)


def default_command(stack: Stack, out: Path, command: str | None = None) -> str:
    """The command that writes this lock again into ``out`` (``command``: the invocation
    that made it, pins included, core.spec.TargetSpec.invocation)."""
    return f"{command or f'envbuilder lock {stack.target}'} -o {out}"


def resolve(stack: Stack, inputs: LockInputs, *, command: str | None = None, uv: str | None
             ) -> tuple[str, list[LockedPackage], str]:
    """(lock text, its entries, the uv command shown): uv resolves ``inputs`` now, the whole
    environment at once: the stack's own packages pinned (torch, the NCCL wheel, each
    component; torch pins its triton and ``nvidia-*`` wheels itself), everything else (torch's
    small dependencies included) free within what the packages declare, together with the
    team's lines. Layers are a placement of this one lock (split_by_layer): the stack layer
    holds only the big wheels the stack pins, so the team's lines never change it."""
    cmd, _, uv_bin, body = _uv.compile(stack, inputs.requirements, None,
                                       index_url=inputs.index_url,
                                       extra_index_urls=inputs.extra_index_urls, uv=uv,
                                       exclude_newer=inputs.exclude_newer,
                                       strategy=inputs.idx.strategy)
    problems = lock_problems(body, "uv's output")
    if problems:
        raise OperationError(f"uv pip compile wrote something envbuilder does not install: "
                             f"{problems[0]}", step="lock", details=problems[:20])
    pkgs = read_lock(body)
    shown = _uv.shown(cmd, LOCK_NAME)
    text = dump(stack, shown, inputs, _uv.version(uv_bin), body, command)
    return text, pkgs, shown


def resolve_lock_text(stack: Stack, *, requirements_file: str | Path | None = None,
                      index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                      uv: str | None = None, exclude_newer: str | None = None,
                      team: Sequence[str] = (), compiled: Sequence[str] = (),
                      index_strategy: str | None = None) -> str:
    """The text of a fresh requirements.lock for ``stack`` (cross-checked); nothing is
    written anywhere (uv prints the lock on its stdout)."""
    inputs = lock_inputs(stack, requirements_file=requirements_file, index_url=index_url,
                         extra_index_urls=extra_index_urls, exclude_newer=exclude_newer,
                         team=team, compiled=compiled, index_strategy=index_strategy)
    text, pkgs, _ = resolve(stack, inputs, uv=uv)
    cross_check(stack, pkgs, "uv's resolution")
    return text


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
    uv, no index. LockCheckFailed (an OperationError, exit 1) naming the first difference otherwise, every one in
    ``details`` and ``err.report.problems``; the lock is never rewritten."""
    from envbuilder._fs import read_text_capped

    # the lock in the output folder is read as itself, never through a link (a link to
    # /etc/passwd is refused, exit 2, not parsed as a lock)
    text = read_text_capped(dest, "lock", limit=MAX_LOCK_BYTES, follow_links=False)
    problems = lock_drift(stack, text, str(dest), inputs, command)
    lf = read_lockfile(text, str(dest), stack, command)
    try:
        versions = {p.name: p.version for p in read_lock(text)}
    except InputError:
        versions = {}
    report = LockReport(path=str(dest), digest=lock_digest(dest), packages=versions,
                        index=inputs.record["index"],
                        extra_indexes=list(inputs.record["extra index"]),
                        index_strategy=inputs.idx.strategy, command=lf.command, checked=True, status="checked",
                        inputs_digest=inputs.digest, problems=problems)
    if lf.record is not None:
        report.package_diff = package_diff(pinned(lf.record.get("requirement", [])),
                                           pinned(inputs.requirements)).to_dict()
    if problems:
        n = len(problems)
        fix = (f"{comment_safe(default_command(stack, dest.parent, command))} makes it "
               f"again (--upgrade also takes newer releases)")
        raise LockCheckFailed(f"{dest} does not match its inputs: {problems[0]}"
                              + (f" (and {n - 1} more)" if n > 1 else "") + f"; {fix}",
                              report=report, details=problems + [
                                  f"top-level pins: {ln}"
                                  for ln in _diff_lines(report.package_diff)])
    return report


class LockCheckFailed(OperationError):
    """``lock --check`` found differences (exit 1): ``report`` is the check's LockReport, every
    difference in its ``problems``."""

    report: LockReport

    def __init__(self, message: str, *, report: LockReport, details: list[str]) -> None:
        super().__init__(message, step="lock", details=details)
        self.report = report
