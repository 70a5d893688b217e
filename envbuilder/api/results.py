"""The front door's typed results: one frozen dataclass per answer, whose ``to_dict()`` is the
``--json`` document (the same keys, in the same order, as before the types came in).

Typed all the way down: a nested value is the type its layer already has (a rule's
``Violation``, the ``Stack``, the ``LockReport``, a ``BuildReport``, explain's ``Cause``,
init's ``Choice``, the ``PackageDiff``) or one of the small parts in api.parts; a map whose keys
are the matrix's axes (components come and go with the matrix) is a ``dict`` of text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol

from envbuilder.api.parts import (Attestation, BakeSummary, DiffFact, DiffSide, DriverRun,
                                  ImageProvenance, JobsImage, MatrixEntry, Provenance, Published,
                                  Rebuild, SystemLock, Value)

if TYPE_CHECKING:
    from envbuilder.core.init import Choice
    from envbuilder.core.resolve import Stack
    from envbuilder.core.rules import Violation
    from envbuilder.diagnose.explain import Cause
    from envbuilder.lock.conda import CondaReport
    from envbuilder.lock.pkgdiff import PackageDiff
    from envbuilder.lock.requirements import LockReport
    from envbuilder.run.build import BuildReport
    from envbuilder.run.metrics import MetricsReport
    from envbuilder.run.smoke import SmokeResult

JSON = dict[str, Any]


class _ToDict(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


def _dicts(items: Iterable[_ToDict]) -> list[JSON]:
    return [i.to_dict() for i in items]


@dataclass(frozen=True)
class CheckResult:
    """``envbuilder check``: the combination can work; what satisfies the axes given.
    ``runs``: how a CUDA version runs on ``--driver`` (native, minor-compat, forward-compat);
    ``driver``: with ``--driver`` and ``--torch`` (no ``--cuda``), each CUDA build of torch and
    how it runs."""

    given: dict[str, str]
    satisfied_by: dict[str, Value]  # by axis: the value that satisfies it (cuda: "cpu" for none)
    warnings: tuple[Violation, ...]
    runs: str | None = None
    driver: tuple[DriverRun, ...] | None = None
    ok: bool = True
    # the facts (rule, message, source) that decided an acceptance at an edge
    evidence: tuple[Violation, ...] = ()

    def to_dict(self) -> JSON:
        out: JSON = {"runs": self.runs} if self.runs is not None else {}
        out |= {"ok": self.ok, "given": dict(self.given), "satisfied_by": dict(self.satisfied_by)}
        if self.driver is not None:
            out["driver"] = _dicts(self.driver)
        return out | {"warnings": _dicts(self.warnings)} | (
            {"evidence": _dicts(self.evidence)} if self.evidence else {})


@dataclass(frozen=True)
class FolderFiles:
    """The build folder a spec would get: the resolved stack, ``{relative path: content}``,
    and whether it installs from a lock."""

    stack: Stack
    files: dict[str, str | bytes]
    locked: bool


@dataclass(frozen=True)
class RenderReport:
    """One target's rendered build folder (``render``/``bake``)."""

    target: str
    resolved_target: str
    out: str
    files: list[str]
    stack: Stack
    locked: bool
    jobs: JobsImage  # the image the job files pull, and whether by digest
    # bake only: the lock the folder installs, where it was copied from (None: its own), and
    # where `envbuilder lock NAME` writes (bake looks there second)
    lock: str | None = None
    lock_from: str | None = None
    lock_default: str | None = None

    def to_dict(self) -> JSON:
        d = {"target": self.target, "resolved_target": self.resolved_target,
             "out": self.out, "files": list(self.files), "stack": self.stack.to_dict(),
             "locked": self.locked, "jobs": self.jobs.to_dict()}
        if self.lock_default is not None:
            d.update(lock=self.lock, lock_from=self.lock_from, lock_default=self.lock_default)
        return d


@dataclass(frozen=True)
class BakeReport:
    """``envbuilder bake``: the bake file, each target's folder, the bake file's summary."""

    bake_file: str
    targets: list[RenderReport]
    bake: BakeSummary

    def to_dict(self) -> JSON:
        return {"bake_file": self.bake_file, "targets": [t.to_dict() for t in self.targets],
                "bake": self.bake.to_dict()}


@dataclass(frozen=True)
class LockResult:
    """One target's ``envbuilder lock``: its lock report, the stack's warnings, whether a
    rendered folder was re-rendered from it, the conda files and SBOM when asked for, and
    what lock --system pinned (or --check --system found unchanged)."""

    name: str
    target: str
    tag: str
    lock: LockReport
    warnings: tuple[Violation, ...]
    rendered: bool = False
    conda: CondaReport | None = None
    sbom: str | None = None
    system: SystemLock | None = None  # lock --system: the images and apt pins (and what --check found)

    def to_dict(self) -> JSON:
        out: JSON = {"name": self.name, "target": self.target, "tag": self.tag,
                     "lock": self.lock.to_dict(), "warnings": _dicts(self.warnings),
                     "rendered": self.rendered}
        if self.conda is not None:
            out["conda"] = self.conda.to_dict()
        if self.sbom is not None:
            out["sbom"] = self.sbom
        if self.system is not None:
            out["system"] = self.system.to_dict()
        return out


@dataclass(frozen=True)
class TargetRow:
    """One row of ``envbuilder targets``: what a target resolves to, or why it is refused."""

    name: str
    target: str
    description: str
    ok: bool
    tag: str | None = None
    warnings: tuple[Violation, ...] = ()
    # the stack's axes (cuda, cuda_toolkit, torch, python, nccl, each component, os,
    # base_image): the value each resolved to, None where none
    stack: dict[str, Value] | None = None
    error: str | None = None

    def to_dict(self) -> JSON:
        out: JSON = {"name": self.name, "target": self.target,
                     "description": self.description, "ok": self.ok}
        if self.ok:
            return out | {"tag": self.tag, "warnings": _dicts(self.warnings),
                          "stack": None if self.stack is None else dict(self.stack)}
        return out | {"error": self.error}


@dataclass(frozen=True)
class TargetsTable:
    """``envbuilder targets --json``: the matrix used and one row per target."""

    matrix_path: str
    matrix_digest: str
    targets: list[TargetRow]

    def to_dict(self) -> JSON:
        return {"matrix": {"path": self.matrix_path, "digest": self.matrix_digest},
                "targets": [t.to_dict() for t in self.targets]}


@dataclass(frozen=True)
class GithubMatrix:
    """``envbuilder targets --github-matrix``: the ``include`` list GitHub Actions reads."""

    include: tuple[MatrixEntry, ...]

    def to_dict(self) -> JSON:
        return {"include": _dicts(self.include)}


@dataclass(frozen=True)
class CiWorkflow:
    """``envbuilder ci``: the workflow written, what it installs as envbuilder, and what the
    user must change before it runs (``warnings``: printed on stderr)."""

    workflow: str
    install: str
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> JSON:
        return {"workflow": self.workflow, "install": self.install, "warnings": list(self.warnings)}


@dataclass(frozen=True)
class BuildSummary:
    """What ``build`` prints and writes with ``--report``: one target's report
    (``single``), or every report and the manifest of what was published."""

    ok: bool
    builds: tuple[BuildReport, ...]
    published: tuple[Published, ...] = ()
    project: str | None = None
    single: bool = False

    def to_dict(self) -> JSON:
        if self.single:
            return self.builds[0].to_dict()
        return {"ok": self.ok, "project": self.project, "builds": _dicts(self.builds),
                "published": _dicts(self.published)}


@dataclass(frozen=True)
class SmokeRun:
    """``envbuilder smoke``: the result, every size run with ``--progressive``, the likely
    causes of a failure, and what was exported as metrics (None when nothing was)."""

    result: SmokeResult
    runs: list[SmokeResult]
    causes: tuple[Cause, ...]
    exported: MetricsReport | None

    def to_dict(self, *, progressive: bool = False) -> JSON:
        data = self.result.to_dict()
        data.pop("log", None)
        data["causes"] = _dicts(self.causes)
        data["metrics"] = self.exported.to_dict() if self.exported else None
        if progressive:
            data["progressive"] = [{"world_size": r.world_size, "ok": r.ok, "failed": r.failed}
                                   for r in self.runs]
        return data


@dataclass(frozen=True)
class LearnedCase:
    """``explain --learn``: the team case written."""

    name: str
    path: str
    category: str
    fix: str
    cause: str | None
    lines: int

    def to_dict(self) -> JSON:
        return {"name": self.name, "path": self.path, "category": self.category,
                "fix": self.fix, "cause": self.cause, "lines": self.lines}


@dataclass(frozen=True)
class ImageSource:
    """An image's labels and where they were read (the engine or its registry)."""

    labels: dict[str, str]
    provenance: Provenance


@dataclass(frozen=True)
class Inspection:
    """``envbuilder inspect``: the stack an image's labels declare, and its provenance."""

    image: str
    target: str | None
    tag: str | None
    driver_minor_compat: Value  # the driver floor by minor-version compatibility (its label)
    stack: dict[str, Value]  # by row (knowledge.inspect.ROWS): the label's value
    provenance: ImageProvenance
    labels: dict[str, str]
    attestations: tuple[Attestation, ...] | None = None  # read from a registry: what it holds beside it

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Inspection:
        """From knowledge.inspect.stack_from_labels' plain data (and the attestations)."""
        att = d.get("attestations")
        return cls(image=d["image"], target=d["target"], tag=d["tag"],
                   driver_minor_compat=d["driver_minor_compat"], stack=dict(d["stack"]),
                   provenance=ImageProvenance.from_dict(d["provenance"]), labels=dict(d["labels"]),
                   attestations=None if att is None else tuple(Attestation.from_dict(a) for a in att))

    def to_dict(self) -> JSON:
        out: JSON = {"image": self.image, "target": self.target, "tag": self.tag,
                     "driver_minor_compat": self.driver_minor_compat, "stack": dict(self.stack),
                     "provenance": self.provenance.to_dict(), "labels": dict(self.labels)}
        if self.attestations is not None:
            out["attestations"] = _dicts(self.attestations)
        return out


@dataclass(frozen=True)
class InspectLines:
    """What ``inspect`` prints: the table's rows, then the provenance lines."""

    rows: list[list[str]]
    lines: list[str]


@dataclass(frozen=True)
class DiffResult:
    """``envbuilder diff A B`` (knowledge.diff.diff): the facts that differ, the package diff
    (both sides with packages), the stages that rebuild and how that was found."""

    a: DiffSide
    b: DiffSide
    facts: tuple[DiffFact, ...]
    packages: PackageDiff | None
    rebuild: tuple[Rebuild, ...]
    rebuild_from: str
    same: bool

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DiffResult:
        """From knowledge.diff.diff's plain data."""
        from envbuilder.lock.pkgdiff import PackageDiff

        p = d["packages"]
        pkgs = None if p is None else PackageDiff(
            added=dict(p["added"]), removed=dict(p["removed"]), unchanged=p["unchanged"],
            changed={k: (v["from"], v["to"]) for k, v in p["changed"].items()})
        return cls(a=DiffSide(**d["a"]), b=DiffSide(**d["b"]),
                   facts=tuple(DiffFact(**f) for f in d["facts"]), packages=pkgs,
                   rebuild=tuple(Rebuild.from_dict(r) for r in d["rebuild"]),
                   rebuild_from=d["rebuild_from"], same=d["same"])

    def to_dict(self) -> JSON:
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "facts": _dicts(self.facts),
                "packages": None if self.packages is None else self.packages.to_dict(),
                "rebuild": _dicts(self.rebuild), "rebuild_from": self.rebuild_from,
                "same": self.same}


@dataclass(frozen=True)
class InitResult:
    """``envbuilder init``: the project file written (and the requirements stub), what the
    facts were read from, and the choice made (core.init.Choice)."""

    project: str
    written: list[str]
    source: str
    name: str
    choice: Choice
    # the images' repository under the registry (the project folder's name); None without one
    repository: str | None = None

    def to_dict(self) -> JSON:
        return {"project": self.project, "written": self.written, "source": self.source,
                "name": self.name, **self.choice.to_dict(), "repository": self.repository}
