"""lock: each spec's hash-pinned lock written, or checked offline against its inputs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from envbuilder.core import spec as spec_mod
from envbuilder.errors import InputError
from envbuilder.core.spec import Outcome, TargetSpec
from envbuilder.core.target import Pins

from envbuilder.api.results import LockResult
from envbuilder.api.specs import make_spec, out_dir, resolve_spec
from envbuilder.api.folders import spec_files

if TYPE_CHECKING:
    from envbuilder.run.wheelfetch import WheelhouseReport


def lock(specs: Sequence[TargetSpec], out: str | Path | None = None, *, single: bool = False,
         matrix_dir: str | Path | None = None, check: bool = False, upgrade: bool = False,
         conda: bool = False, conda_channels: Sequence[str] = ("conda-forge",),
         sbom: bool = False) -> list[Outcome[LockResult]]:
    """Write (or with ``check`` verify offline against its inputs) each spec's hash-pinned
    lock; keep going past a target that fails and name it (core.spec.run_each)."""
    from envbuilder.lock import requirements as lockreq
    from envbuilder.lock.write import write_locks

    if check and upgrade:  # bad input of the command: one line, once (not once per target)
        raise InputError("lock --check verifies the lock offline and --upgrade resolves it "
                         "again: give one of them")
    if check and (conda or sbom):
        raise InputError("lock --check verifies requirements.lock only: drop --conda/--sbom "
                         "(run lock without --check to rewrite them)")

    def one(s: TargetSpec) -> LockResult:
        dest = out_dir(s, out, single=single)
        stack = resolve_spec(s, matrix_dir=matrix_dir)
        team = lockreq.team_requirements(stack, lines=s.requirements, source=s.requirements_source)
        res = write_locks(stack, dest, requirements_file=s.requirements_file, team=team,
                          index_url=s.pip_index_url, extra_index_urls=s.extra_index_urls,
                          index_strategy=s.index_strategy,
                          check=check, upgrade=upgrade, exclude_newer=s.exclude_newer,
                          conda=conda, conda_channels=tuple(conda_channels), sbom=sbom,
                          command=s.invocation("lock"), compiled=s.compiled)
        rendered = _follow_lock(s, dest, check=check, matrix_dir=matrix_dir)
        return LockResult(name=s.name, target=s.name, tag=stack.tag, lock=res.lock,
                          warnings=stack.warnings, rendered=rendered, conda=res.conda, sbom=res.sbom)

    return spec_mod.run_each(specs, "lock", one)


def _follow_lock(spec: TargetSpec, dest: Path, *, check: bool,
                 matrix_dir: str | Path | None) -> bool:
    """A folder render wrote installs from the lock in it (lock.folder): ``lock`` re-renders
    its lock-dependent files; ``lock --check`` fails when its Dockerfile ignores the lock."""
    from envbuilder.lock import folder

    if check:
        folder.check_follows_lock(dest, spec.invocation("render", dest))
        return False
    if not folder.rendered_by_envbuilder(dest):
        return False
    from envbuilder._fs import write_tree

    write_tree(dest, spec_files(spec, dest, matrix_dir=matrix_dir).files, group="render")
    return True


def lock_target(target: str, out: str | Path, *, matrix_dir: str | Path | None = None,
                pins: Pins | None = None, check: bool = False, upgrade: bool = False,
                conda: bool = False, conda_channels: Sequence[str] = ("conda-forge",),
                sbom: bool = False, **fields: Any) -> LockResult:
    """One target's lock (a library shortcut for ``lock``; ``fields`` are TargetSpec fields)."""
    (o,) = lock([make_spec(target, pins=pins, **fields)], out, single=True,
                matrix_dir=matrix_dir, check=check, upgrade=upgrade, conda=conda,
                conda_channels=conda_channels, sbom=sbom)
    if o.error is not None:
        raise o.error
    assert o.value is not None
    return o.value


def wheelhouse(lock: str | Path, out: str | Path, *, check: bool = False,
               on_event: Any = None) -> WheelhouseReport:
    """``envbuilder wheelhouse LOCK -o DIR``: the lock's files for its Python and platform,
    downloaded into ``out`` and verified against its hashes, keeping those already there
    (run.wheelfetch.fill); with ``check``, offline: exit 2 naming the locked files ``out``
    lacks and the command that fetches them. A run.wheelfetch.WheelhouseReport."""
    import shlex

    from envbuilder.run import wheelfetch

    lock, out = Path(lock), Path(out)
    if check:
        fetch = f"envbuilder wheelhouse {shlex.quote(str(lock))} -o {shlex.quote(str(out))}"
        return wheelfetch.check(lock, out, fetch)
    return wheelfetch.fill(lock, out, on_event=on_event)
