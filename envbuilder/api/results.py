"""The front door's typed results: one frozen dataclass per answer, whose ``to_dict()`` is the
``--json`` document (the same keys, in the same order, as before the types came in).

Fields whose shape another layer owns (a stack's ``to_dict()``, a lock report's, a package
diff) stay that layer's plain data; the results themselves are typed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envbuilder.core.resolve import Stack
    from envbuilder.run.metrics import MetricsReport
    from envbuilder.run.smoke import SmokeResult

JSON = dict[str, Any]


@dataclass(frozen=True)
class CheckResult:
    """``envbuilder check``: the combination can work; what satisfies the axes given.
    ``runs``: how a CUDA version runs on ``--driver`` (native, minor-compat, forward-compat);
    ``driver``: with ``--driver`` and ``--torch`` (no ``--cuda``), each CUDA build of torch and
    how it runs."""

    given: dict[str, str]
    satisfied_by: dict[str, Any]
    warnings: list[JSON]
    runs: str | None = None
    driver: list[JSON] | None = None
    ok: bool = True
    # the facts (rule, message, source) that decided an acceptance at an edge
    evidence: list[JSON] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: JSON) -> CheckResult:
        return cls(given=d["given"], satisfied_by=d["satisfied_by"], warnings=d["warnings"],
                   runs=d.get("runs"), driver=d.get("driver"), ok=d["ok"],
                   evidence=d.get("evidence", []))

    def to_dict(self) -> JSON:
        out: JSON = {"runs": self.runs} if self.runs is not None else {}
        out |= {"ok": self.ok, "given": self.given, "satisfied_by": self.satisfied_by}
        if self.driver is not None:
            out["driver"] = self.driver
        return out | {"warnings": self.warnings} | ({"evidence": self.evidence} if self.evidence else {})


@dataclass(frozen=True)
class FolderFiles:
    """The build folder a spec would get: the resolved stack, ``{relative path: content}``,
    and whether it installs from a lock."""

    stack: Stack
    files: dict[str, Any]
    locked: bool


@dataclass(frozen=True)
class RenderReport:
    """One target's rendered build folder (``render``/``bake``)."""

    target: str
    resolved_target: str
    out: str
    files: list[str]
    stack: JSON
    locked: bool
    jobs: JSON  # {"image": the image the job files pull, "pinned": by digest}
    # bake only: the lock the folder installs, where it was copied from (None: its own), and
    # where `envbuilder lock NAME` writes (bake looks there second)
    lock: str | None = None
    lock_from: str | None = None
    lock_default: str | None = None

    def to_dict(self) -> JSON:
        d = {"target": self.target, "resolved_target": self.resolved_target,
             "out": self.out, "files": list(self.files), "stack": self.stack,
             "locked": self.locked, "jobs": self.jobs}
        if self.lock_default is not None:
            d.update(lock=self.lock, lock_from=self.lock_from, lock_default=self.lock_default)
        return d


@dataclass(frozen=True)
class BakeReport:
    """``envbuilder bake``: the bake file, each target's folder, the bake file's summary."""

    bake_file: str
    targets: list[RenderReport]
    bake: JSON

    def to_dict(self) -> JSON:
        return {"bake_file": self.bake_file, "targets": [t.to_dict() for t in self.targets],
                "bake": self.bake}


@dataclass(frozen=True)
class LockResult:
    """One target's ``envbuilder lock``: its lock report (lock.requirements.LockReport's
    dict), whether a rendered folder was re-rendered from it, and the conda files and SBOM
    when asked for."""

    name: str
    target: str
    tag: str
    lock: JSON
    warnings: list[JSON]
    rendered: bool = False
    conda: JSON | None = None
    sbom: str | None = None

    def to_dict(self) -> JSON:
        out: JSON = {"name": self.name, "target": self.target, "tag": self.tag,
                     "lock": self.lock, "warnings": self.warnings, "rendered": self.rendered}
        for extra in ("conda", "sbom"):
            if getattr(self, extra) is not None:
                out[extra] = getattr(self, extra)
        return out


@dataclass(frozen=True)
class TargetRow:
    """One row of ``envbuilder targets``: what a target resolves to, or why it is refused."""

    name: str
    target: str
    description: str
    ok: bool
    tag: str | None = None
    warnings: list[JSON] = field(default_factory=list)
    stack: JSON | None = None
    error: str | None = None

    def to_dict(self) -> JSON:
        out: JSON = {"name": self.name, "target": self.target,
                     "description": self.description, "ok": self.ok}
        if self.ok:
            return out | {"tag": self.tag, "warnings": self.warnings, "stack": self.stack}
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

    include: list[JSON]

    def to_dict(self) -> JSON:
        return {"include": self.include}


@dataclass(frozen=True)
class CiWorkflow:
    """``envbuilder ci``: the workflow written, what it installs as envbuilder, and what the
    user must change before it runs (``warnings``: printed on stderr)."""

    workflow: str
    install: str
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> JSON:
        return {"workflow": self.workflow, "install": self.install, "warnings": self.warnings}


@dataclass(frozen=True)
class BuildSummary:
    """What ``build`` prints and writes with ``--report``: one target's report
    (``single``), or every report and the manifest of what was published."""

    ok: bool
    builds: list[JSON]
    published: list[JSON] = field(default_factory=list)
    project: str | None = None
    single: bool = False

    @classmethod
    def from_dict(cls, d: JSON, *, single: bool) -> BuildSummary:
        if single:
            return cls(ok=bool(d.get("ok")), builds=[d], single=True)
        return cls(ok=d["ok"], builds=d["builds"], published=d["published"],
                   project=d["project"])

    def to_dict(self) -> JSON:
        if self.single:
            return self.builds[0]
        return {"ok": self.ok, "project": self.project, "builds": self.builds,
                "published": self.published}


@dataclass(frozen=True)
class SmokeRun:
    """``envbuilder smoke``: the result, every size run with ``--progressive``, the likely
    causes of a failure, and what was exported as metrics (None when nothing was)."""

    result: SmokeResult
    runs: list[SmokeResult]
    causes: list[JSON]
    exported: MetricsReport | None

    def to_dict(self, *, progressive: bool = False) -> JSON:
        data = self.result.to_dict()
        data.pop("log", None)
        data["causes"] = self.causes
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
    provenance: JSON


@dataclass(frozen=True)
class Inspection:
    """``envbuilder inspect``: the stack an image's labels declare, and its provenance."""

    image: str
    target: str | None
    tag: str | None
    driver_minor_compat: Any
    stack: JSON
    provenance: JSON
    labels: dict[str, str]
    attestations: list[JSON] | None = None  # read from a registry: what it holds beside it

    @classmethod
    def from_dict(cls, d: JSON) -> Inspection:
        return cls(image=d["image"], target=d["target"], tag=d["tag"],
                   driver_minor_compat=d["driver_minor_compat"], stack=d["stack"],
                   provenance=d["provenance"], labels=d["labels"],
                   attestations=d.get("attestations"))

    def to_dict(self) -> JSON:
        out: JSON = {"image": self.image, "target": self.target, "tag": self.tag,
                     "driver_minor_compat": self.driver_minor_compat, "stack": self.stack,
                     "provenance": self.provenance, "labels": self.labels}
        if self.attestations is not None:
            out["attestations"] = self.attestations
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

    a: JSON
    b: JSON
    facts: list[JSON]
    packages: JSON | None
    rebuild: list[JSON]
    rebuild_from: str
    same: bool

    @classmethod
    def from_dict(cls, d: JSON) -> DiffResult:
        return cls(a=d["a"], b=d["b"], facts=d["facts"], packages=d["packages"],
                   rebuild=d["rebuild"], rebuild_from=d["rebuild_from"], same=d["same"])

    def to_dict(self) -> JSON:
        return {"a": self.a, "b": self.b, "facts": self.facts, "packages": self.packages,
                "rebuild": self.rebuild, "rebuild_from": self.rebuild_from, "same": self.same}


@dataclass(frozen=True)
class InitResult:
    """``envbuilder init``: the project file written (and the requirements stub), what the
    facts were read from, and the choice made (core.init.Choice's dict)."""

    project: str
    written: list[str]
    source: str
    name: str
    choice: JSON

    def to_dict(self) -> JSON:
        return {"project": self.project, "written": self.written, "source": self.source,
                "name": self.name, **self.choice}
