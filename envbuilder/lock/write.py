"""``envbuilder lock``'s writer: requirements.lock, and with it the conda files and the SBOM,
committed together through ``envbuilder._fs.Outputs`` (the top of lock/: it uses
``requirements``, ``conda`` and ``sbom``; none of them imports it)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from envbuilder.core.resolve import Stack
from envbuilder.errors import InputError
from envbuilder.lock.checks import cross_check
from envbuilder.lock.entries import LOCK_NAME, MAX_LOCK_BYTES, read_lock
from envbuilder.lock.inputs import LockInputs, lock_inputs
from envbuilder.lock.requirements import (LockReport, check_lock, default_command, lock_drift,
                                          read_lockfile, resolve, versions_on_disk)
from envbuilder.lock.pkgdiff import package_diff

if TYPE_CHECKING:
    from envbuilder.lock.conda import CondaReport


def _check_flags(stack: Stack, out: Path, *, check: bool, upgrade: bool, conda: bool, sbom: bool,
                 conda_channels: Sequence[str], command: str | None) -> None:
    """The flags that cannot go together, and what --check needs, before any work (exit 2)."""
    if check and upgrade:
        raise InputError("lock --check verifies the lock offline and --upgrade resolves it "
                         "again: give one of them")
    if check:
        if conda or sbom:
            raise InputError("lock --check verifies requirements.lock only: drop --conda/--sbom "
                             "(run lock without --check to rewrite them)")
        if not (out / LOCK_NAME).is_file():
            raise InputError(f"no {LOCK_NAME} in {out} to check: run "
                             f"{default_command(stack, out, command)} first")
    if conda:
        from envbuilder.lock.conda import check_channel

        for c in conda_channels:
            check_channel(c)


def _lock_to_keep(stack: Stack, dest: Path, inputs: LockInputs,
                  command: str | None) -> tuple[str | None, list[str]]:
    """(the lock on disk when it is kept as it is, else None; why it is not kept): a lock
    whose inputs match and which is consistent is kept (uv is not run)."""
    if not dest.is_file():
        return None, []
    from envbuilder._fs import read_text_capped

    try:
        disk = read_text_capped(dest, "lock", limit=MAX_LOCK_BYTES, follow_links=False)
    except InputError as e:
        return None, [str(e)]
    changed = lock_drift(stack, disk, str(dest), inputs, command)
    return (None if changed else disk), changed


@dataclass(frozen=True)
class Locks:
    """What ``write_locks`` wrote (or checked): the lock's report, the conda files' (None when
    not asked for) and the SBOM's path (None when not asked for)."""

    lock: LockReport
    conda: CondaReport | None = None
    sbom: str | None = None


def write_locks(stack: Stack, out_dir: str | Path, *, requirements_file: str | Path | None = None,
                index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                uv: str | None = None, check: bool = False, upgrade: bool = False,
                exclude_newer: str | None = None, conda: bool = False,
                conda_channels: Sequence[str] = ("conda-forge",), sbom: bool = False,
                team: Sequence[str] = (), command: str | None = None,
                compiled: Sequence[str] = (), index_strategy: str | None = None) -> Locks:
    """``envbuilder lock``: requirements.lock, and with ``conda`` environment.yml +
    conda-lock.yml, with ``sbom`` sbom.cdx.json, all written together or not at all (a failing
    conda solve leaves the old requirements.lock in place).

    * ``check``: verify the lock on disk against its inputs, offline (``check_lock``); nothing
      is written; takes neither ``conda`` nor ``sbom``.
    * neither: a lock already there whose inputs match and which is consistent is kept as it
      is (uv is not run; ``status`` "unchanged"); otherwise uv resolves and the lock is written
      (``status`` "resolved", ``changed`` says why when there was a lock).
    * ``upgrade``: uv resolves again whatever is there (newer releases come in)."""
    out = Path(out_dir)
    dest = out / LOCK_NAME
    _check_flags(stack, out, check=check, upgrade=upgrade, conda=conda, sbom=sbom,
                 conda_channels=conda_channels, command=command)
    inputs = lock_inputs(stack, requirements_file=requirements_file, index_url=index_url,
                         extra_index_urls=extra_index_urls, exclude_newer=exclude_newer,
                         team=team, compiled=compiled, index_strategy=index_strategy)
    if check:
        return Locks(check_lock(stack, dest, inputs, command))
    from envbuilder._fs import Outputs

    before = versions_on_disk(dest)
    kept, changed = (None, []) if upgrade else _lock_to_keep(stack, dest, inputs, command)
    if kept is not None:
        text, pkgs, shown = kept, read_lock(kept), read_lockfile(kept, str(dest), stack).command
    else:
        text, pkgs, shown = resolve(stack, inputs, uv=uv, command=command)
        cross_check(stack, pkgs, "uv's resolution")
    versions = {p.name: p.version for p in pkgs}
    conda_report: CondaReport | None = None
    sbom_path: str | None = None
    if kept is None or conda or sbom:
        with Outputs("lock") as tx:
            if kept is None:
                tx.add(out, {LOCK_NAME: text}, group="lock")
            if conda or sbom:
                scratch_lock = tx.scratch(out) / LOCK_NAME
                scratch_lock.write_text(text, encoding="utf-8")
            if conda:
                from envbuilder.lock.conda import conda_outputs

                files, rep = conda_outputs(stack, out, lock_path=scratch_lock,
                                           work=tx.scratch(out), channels=tuple(conda_channels),
                                           index_url=index_url,
                                           extra_index_urls=extra_index_urls, uv=uv)
                tx.add(out, files, group="conda")
                conda_report = rep
            if sbom:
                import json

                from envbuilder.lock.sbom import SBOM_NAME, sbom as make_sbom

                tx.add(out, {SBOM_NAME: json.dumps(make_sbom(scratch_lock, stack), indent=2)
                             + "\n"}, group="sbom")
                sbom_path = str(out / SBOM_NAME)
            tx.commit()
    digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    report = LockReport(path=str(dest), digest=digest, packages=versions,
                                index=inputs.record["index"],
                                extra_indexes=list(inputs.record["extra index"]),
                                index_strategy=inputs.idx.strategy, command=shown,
                                status="unchanged" if kept is not None else "resolved",
                                inputs_digest=inputs.digest,
                                changed=[] if kept is not None else changed,
                                package_diff=None if before is None else
                                package_diff(before, versions).to_dict())
    return Locks(report, conda_report, sbom_path)



def lock_stack(stack: Stack, out_dir: str | Path, *, requirements_file: str | Path | None = None,
                index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                uv: str | None = None, check: bool = False, upgrade: bool = False,
                exclude_newer: str | None = None, compiled: Sequence[str] = (),
                index_strategy: str | None = None) -> LockReport:
    """Write (or, with ``check``, verify offline) ``out_dir/requirements.lock`` for ``stack``."""
    return write_locks(stack, out_dir, requirements_file=requirements_file, index_url=index_url,
                       extra_index_urls=extra_index_urls, uv=uv, check=check, upgrade=upgrade,
                       exclude_newer=exclude_newer, compiled=compiled,
                       index_strategy=index_strategy).lock
