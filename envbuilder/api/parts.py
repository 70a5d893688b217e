"""The parts of the typed results (api.results): small frozen dataclasses for the shapes
the ``--json`` documents nest, each with the ``to_dict()`` that writes it (the same keys, in
the same order, as the plain data they replace). A part another layer already types (a
rule's ``Violation``, a ``Stack``, a ``LockReport``, a ``BuildReport``, explain's ``Cause``)
is used as it is; a part that a lower layer hands over as plain data (knowledge.diff's facts,
knowledge.inspect's provenance, the registry's attestations) is read into one of these once,
by ``from_dict``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from envbuilder.core.resolve import DriverFit

JSON = dict[str, Any]
# a label's or a stack row's value: text, or None when the image or stack has none
Value = str | None


@dataclass(frozen=True)
class DriverRun:
    """``check --driver X --torch Y``: how one CUDA build of torch runs on the driver."""

    fit: DriverFit
    runs: str  # the mode in words (core.resolve.MODES)

    def to_dict(self) -> JSON:
        return self.fit.to_dict() | {"runs": self.runs}


@dataclass(frozen=True)
class JobsImage:
    """The image a build folder's job files pull, and whether by digest."""

    image: str | None
    pinned: bool

    def to_dict(self) -> JSON:
        return {"image": self.image, "pinned": self.pinned}


@dataclass(frozen=True)
class BakeSummary:
    """A bake file's summary: the moving aliases it lists apart (build moves them)."""

    aliases: tuple[str, ...]

    def to_dict(self) -> JSON:
        return {"aliases": list(self.aliases)}


@dataclass(frozen=True)
class MatrixEntry:
    """One entry of the GitHub Actions matrix (render.ci.github_matrix)."""

    target: str
    tag: str
    cuda: str
    runs_on: str | tuple[str, ...]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MatrixEntry:
        runs_on = d["runs_on"]
        return cls(d["target"], d["tag"], d["cuda"],
                   runs_on if isinstance(runs_on, str) else tuple(runs_on))

    def to_dict(self) -> JSON:
        return {"target": self.target, "tag": self.tag, "cuda": self.cuda,
                "runs_on": self.runs_on if isinstance(self.runs_on, str) else list(self.runs_on)}


@dataclass(frozen=True)
class PublishedSmoke:
    ok: bool
    world_size: int

    def to_dict(self) -> JSON:
        return {"ok": self.ok, "world_size": self.world_size}


@dataclass(frozen=True)
class Published:
    """What a registry serves after a build of several targets: one target's image."""

    target: str
    tag: str | None
    digest: str | None
    tags: tuple[str, ...]
    smoke: PublishedSmoke | None

    def to_dict(self) -> JSON:
        return {"target": self.target, "tag": self.tag, "digest": self.digest,
                "tags": list(self.tags), "smoke": None if self.smoke is None else self.smoke.to_dict()}


@dataclass(frozen=True)
class Provenance:
    """Where an image's labels were read: the engine (its image ID, repo digests) or its
    registry (the reference, the manifest, config and index digests); when it was created."""

    source: str  # engine | registry
    created: str | None = None
    id: str | None = None  # the engine's
    repo_digests: tuple[str, ...] = ()
    reference: str | None = None  # the registry's
    manifest_digest: str | None = None
    config_digest: str | None = None
    index_digest: str | None = None  # a multi-platform image's index

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Provenance:
        known = {"source", "created", "id", "repo_digests", "reference", "manifest_digest",
                 "config_digest", "index_digest"}
        unknown = set(d) - known
        if unknown:  # a new key must get its field (and its place in to_dict)
            raise KeyError(f"Provenance: no field for {', '.join(sorted(unknown))}")
        return cls(source=d["source"], created=d.get("created"), id=d.get("id"),
                   repo_digests=tuple(d.get("repo_digests") or ()), reference=d.get("reference"),
                   manifest_digest=d.get("manifest_digest"), config_digest=d.get("config_digest"),
                   index_digest=d.get("index_digest"))

    def to_dict(self, *, created: bool = True) -> JSON:
        """As run.engine / run.registry write it (``created=False``: without the date)."""
        when = {"created": self.created} if created else {}
        if self.source == "engine":
            return {"source": self.source, "id": self.id, "repo_digests": list(self.repo_digests)} | when
        return ({"source": self.source, "reference": self.reference,
                 "manifest_digest": self.manifest_digest, "config_digest": self.config_digest}
                | when | ({"index_digest": self.index_digest} if self.index_digest else {}))


@dataclass(frozen=True)
class ImageProvenance:
    """``inspect``'s provenance: what the labels say made the image, the matrix then and
    now, and where the labels were read (``where``, without its date: ``built``)."""

    envbuilder_version: Value
    matrix_digest: Value
    matrix_digest_now: Value
    matrix_current: bool | None
    lock_digest: Value
    base_digest: Value
    built: Value
    where: Provenance

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ImageProvenance:
        own = ("envbuilder_version", "matrix_digest", "matrix_digest_now", "matrix_current",
               "lock_digest", "base_digest", "built")
        where = {k: v for k, v in d.items() if k not in own}
        return cls(envbuilder_version=d["envbuilder_version"], matrix_digest=d["matrix_digest"],
                   matrix_digest_now=d["matrix_digest_now"], matrix_current=d["matrix_current"],
                   lock_digest=d["lock_digest"], base_digest=d["base_digest"], built=d["built"],
                   where=Provenance.from_dict({**where, "created": d["built"]}))

    def to_dict(self) -> JSON:
        return {"envbuilder_version": self.envbuilder_version, "matrix_digest": self.matrix_digest,
                "matrix_digest_now": self.matrix_digest_now, "matrix_current": self.matrix_current,
                "lock_digest": self.lock_digest, "base_digest": self.base_digest,
                "built": self.built, **self.where.to_dict(created=False)}


@dataclass(frozen=True)
class Attestation:
    """What a registry holds beside an image (read, not verified: verify --key checks it)."""

    type: str
    name: str | None
    verified: bool
    digest: str | None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Attestation:
        return cls(d["type"], d["name"], d["verified"], d["digest"])

    def to_dict(self) -> JSON:
        return {"type": self.type, "name": self.name, "verified": self.verified, "digest": self.digest}


@dataclass(frozen=True)
class DiffSide:
    """One side of ``diff``: what it is (target, build folder, lock, image) and its name."""

    kind: str
    name: str

    def to_dict(self) -> JSON:
        return {"kind": self.kind, "name": self.name}


@dataclass(frozen=True)
class DiffFact:
    """A fact that differs from A to B (``unknown`` where a side does not say)."""

    fact: str
    title: str
    a: Value  # "unknown" where the side does not say
    b: Value

    def to_dict(self) -> JSON:
        return {"fact": self.fact, "title": self.title, "a": self.a, "b": self.b}


@dataclass(frozen=True)
class Rebuild:
    """A stage of the image and whether it rebuilds from A to B: from which instruction,
    how many steps, and why."""

    stage: str
    rebuilds: bool
    from_: str | None
    steps: int | None
    why: str | None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Rebuild:
        return cls(d["stage"], d["rebuilds"], d["from"], d["steps"], d["why"])

    def to_dict(self) -> JSON:
        return {"stage": self.stage, "rebuilds": self.rebuilds, "from": self.from_,
                "steps": self.steps, "why": self.why}
