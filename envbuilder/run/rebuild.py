"""``envbuilder rebuild IMAGE@DIGEST``: build an image again from what it says it was built
from, without cache, and compare the two bit for bit.

What the image was built from is its provenance attestation (``build --push --sign`` attaches
it: run.sign), read from its registry (verified with ``--key PUB``, else as stored): the target
and its options, the lock's text, the base and builder images by digest, the labels the engine
added, SOURCE_DATE_EPOCH, the matrix digest and envbuilder's version. A rebuild by another
envbuilder or against another matrix is refused before any work (exit 2, naming the version or
digest to use), as is one the provenance says was not reproducible (the legacy builder).

The rebuild runs through BuildKit into an OCI layout tar (nothing is tagged or pushed). Same
manifest digest: reproduced (exit 0). Otherwise (exit 1) the first layer that differs is named,
and the files that differ in it, each with its path, size and sha256 in both (and what else
differs: time, mode, owner, link), from the original's layer blob (read from the registry) and
the rebuilt one; when every layer is the same, the image config's fields that differ.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Mapping

from envbuilder import __version__
from envbuilder.errors import InputError, OperationError

if TYPE_CHECKING:
    from docker import DockerClient

MAX_FILES = 50  # differing files listed (their count is always given)


# -- what a layer holds ----------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One entry of a layer tar: what two builds must agree on."""

    path: str
    kind: str  # file, dir, symlink, hardlink, other
    size: int
    sha256: str | None  # a file's content
    mode: int
    owner: str  # uid:gid
    mtime: int
    link: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "size": self.size, "sha256": self.sha256, "mode": oct(self.mode),
                "owner": self.owner, "mtime": self.mtime, **({"link": self.link} if self.link else {})}


def _kind(m: tarfile.TarInfo) -> str:
    return ("file" if m.isreg() else "dir" if m.isdir() else "symlink" if m.issym()
            else "hardlink" if m.islnk() else "other")


def _content_digest(f: IO[bytes] | None) -> str:
    h = hashlib.sha256()
    while f is not None and (chunk := f.read(1 << 20)):
        h.update(chunk)
    return "sha256:" + h.hexdigest()


def layer_entries(blob: IO[bytes]) -> dict[str, Entry]:
    """The entries of a gzip-compressed layer tar (OCI whiteouts are entries like any other)."""
    out: dict[str, Entry] = {}
    with gzip.GzipFile(fileobj=blob) as gz, tarfile.open(fileobj=gz, mode="r|") as t:
        for m in t:
            digest = _content_digest(t.extractfile(m)) if m.isreg() else None
            path = m.name[2:] if m.name.startswith("./") else m.name
            out[path.rstrip("/")] = Entry(path.rstrip("/"), _kind(m), int(m.size), digest,
                                          m.mode, f"{m.uid}:{m.gid}", int(m.mtime), m.linkname)
    return out


@dataclass(frozen=True)
class FileDiff:
    """A file that differs between the original layer and the rebuilt one."""

    path: str
    differs: tuple[str, ...]  # content, size, kind, mode, owner, mtime, link; or only in one
    original: Entry | None
    rebuilt: Entry | None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "differs": list(self.differs),
                "original": self.original.to_dict() if self.original else None,
                "rebuilt": self.rebuilt.to_dict() if self.rebuilt else None}

    def line(self) -> str:
        def side(e: Entry | None) -> str:
            if e is None:
                return "absent"
            return f"{e.size} B {e.sha256[:19] + '...' if e.sha256 else e.kind}"

        return (f"{self.path}: {', '.join(self.differs)} (original {side(self.original)}; "
                f"rebuilt {side(self.rebuilt)})")


def diff_entries(a: Mapping[str, Entry], b: Mapping[str, Entry]) -> list[FileDiff]:
    """Every path whose entry differs between layer ``a`` (the original) and ``b``: those whose
    content differs, or that only one side has, first (what a user looks for the cause in),
    then those that differ in their metadata only; by path within each."""
    out: list[FileDiff] = []
    for path in sorted(set(a) | set(b)):
        x, y = a.get(path), b.get(path)
        if x is None or y is None:
            out.append(FileDiff(path, ("only in the rebuild",) if x is None else ("only in the original",), x, y))
            continue
        what = [name for name, u, v in (
            ("content", x.sha256, y.sha256), ("size", x.size, y.size), ("kind", x.kind, y.kind),
            ("mode", x.mode, y.mode), ("owner", x.owner, y.owner), ("mtime", x.mtime, y.mtime),
            ("link", x.link, y.link)) if u != v]
        if what:
            out.append(FileDiff(path, tuple(what), x, y))
    return sorted(out, key=lambda f: (not ({"content", "size", "kind", "link"} & set(f.differs)
                                           or f.original is None or f.rebuilt is None), f.path))


def config_diff(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The fields of two image configs that differ, as dotted paths (labels one by one)."""
    out: list[str] = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if x == y:
            continue
        if isinstance(x, dict) and isinstance(y, dict):
            out += config_diff(x, y, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}: {json.dumps(x)[:120]} -> {json.dumps(y)[:120]}")
    return out


# -- the report ------------------------------------------------------------------------------

@dataclass(frozen=True)
class FirstLayer:
    """The first layer that differs: its index, and its digest in each image (None where that
    image has fewer layers)."""

    index: int
    original: str | None
    rebuilt: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "original": self.original, "rebuilt": self.rebuilt}


@dataclass(frozen=True)
class Comparison:
    """What differs between the original and the rebuild: the first layer and its files, else
    the image config's fields."""

    layers: int = 0
    first_layer: FirstLayer | None = None
    files: tuple[FileDiff, ...] = ()  # the first MAX_FILES
    files_total: int = 0
    config: tuple[str, ...] = ()  # config fields that differ


@dataclass(frozen=True)
class RebuildReport:
    image: str
    digest: str
    rebuilt_digest: str | None = None
    reproduced: bool = False
    target: str | None = None
    source_date_epoch: int | None = None
    provenance_verified: bool = False
    layers: int = 0
    first_layer: FirstLayer | None = None
    files: tuple[FileDiff, ...] = ()
    files_total: int = 0
    config: tuple[str, ...] = ()  # config fields that differ
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"image": self.image, "digest": self.digest, "rebuilt_digest": self.rebuilt_digest,
                "reproduced": self.reproduced, "target": self.target,
                "source_date_epoch": self.source_date_epoch,
                "provenance_verified": self.provenance_verified, "layers": self.layers,
                "first_layer": None if self.first_layer is None else self.first_layer.to_dict(),
                "files": [f.to_dict() for f in self.files],
                "files_total": self.files_total, "config": list(self.config),
                "seconds": round(self.seconds, 3)}

    def summary(self) -> str:
        if self.reproduced:
            return f"reproduced: {self.image} is {self.digest}, bit for bit"
        if self.first_layer is not None:
            i = self.first_layer.index
            first = self.files[0].line() if self.files else "no file differs (the tar's order or headers do)"
            return (f"{self.image}: the rebuild is {self.rebuilt_digest}; layer {i + 1} of "
                    f"{self.layers} is the first that differs ({self.files_total} files): {first}")
        return (f"{self.image}: the rebuild is {self.rebuilt_digest}; every layer is the same, "
                f"the image config differs: {self.config[0] if self.config else 'its bytes'}")


# -- the rebuild -----------------------------------------------------------------------------

@dataclass(frozen=True)
class RebuildOptions:
    """What a rebuild needs that the provenance cannot hold: the wheels of an offline build,
    the CA and proxies of this network, the public key that verifies the provenance."""

    key: str | None = None
    wheelhouse: Path | None = None
    ca_cert: Path | None = None
    proxies: Mapping[str, str] = field(default_factory=dict)
    keep: Path | None = None  # keep the build folder and the rebuilt OCI tar here
    # a rebuild as if one input had changed (to see what it changes): another date
    source_date_epoch: int | None = None


def _check_ref(image: str) -> None:
    import re

    if not re.search(r"@sha256:[0-9a-f]{64}$", image):
        raise InputError(f"rebuild {image}: name the image by digest (REPO@sha256:...), as build "
                         f"--push reports it: a tag can move")


def provenance(image: str, key: str | None) -> tuple[str, str, dict[str, Any], bool]:
    """(REPO@DIGEST, DIGEST, the provenance predicate, verified) from the registry."""
    from envbuilder.run import sign

    ref, digest = sign.resolve_digest(image)
    pred, verified = sign.read_predicate(ref, digest, "provenance", key)
    if pred is None:
        how = f"signed by {key}" if key else "at all"
        raise InputError(f"{image} carries no provenance attestation {how} (envbuilder build "
                         f"--push REPO --sign attaches it): nothing says what it was built from")
    return ref, digest, pred, verified


def _inputs(image: str, pred: Mapping[str, Any], matrix_digest: str) -> dict[str, Any]:
    """The provenance's rebuild inputs, refused (exit 2) when this envbuilder or matrix is not
    the one that built it, or the build was not reproducible."""
    bd = pred.get("buildDefinition") or {}
    inner, ext = bd.get("internalParameters") or {}, bd.get("externalParameters") or {}
    rb, rep = ext.get("rebuild"), inner.get("reproducible") or {}
    if not isinstance(rb, dict):
        raise InputError(f"{image}: its provenance records no rebuild inputs (made by an envbuilder "
                         f"before 0.1.0's reproducible builds): it cannot be rebuilt")
    if inner.get("envbuilder_version") != __version__:
        raise InputError(f"{image} was built by envbuilder {inner.get('envbuilder_version')}, this is "
                         f"{__version__}: rebuild it with that version (pip install "
                         f"torch-envbuilder=={inner.get('envbuilder_version')})")
    if inner.get("matrix_digest") != matrix_digest:
        raise InputError(f"{image} was built against the matrix {inner.get('matrix_digest')}, this "
                         f"one is {matrix_digest}: rebuild with --matrix DIR of that matrix")
    if rep and not rep.get("reproducible"):
        raise InputError(f"{image} was not built reproducibly ({rep.get('why', 'no reason recorded')}): "
                         f"a rebuild cannot give its digest")
    if "***" in json.dumps(rb.get("options") or {}):
        raise InputError(f"{image} was built from a package index with credentials; rebuilding it "
                         f"needs them, which no attestation holds")
    return rb


def pin_record(pins: Any) -> dict[str, Any]:
    """``pins`` (core.target.Pins) as the provenance records them: the pins given, by the
    option table's names, as the command line spells them (lists for several), which
    ``spec_of`` gives to the cascade again."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in pins.as_options().items()
            if v not in (None, (), "")}


def spec_of(rb: Mapping[str, Any]) -> Any:
    """The TargetSpec the provenance describes, made through the one cascade (core.spec) from
    its pins and options as the command line's values (the indexes, the index strategy, the
    registry and repository among them), named as the project target it was built for."""
    from envbuilder.core.spec import make_spec

    given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                             for k, v in {**(rb.get("pins") or {}), **(rb.get("options") or {})}.items()}
    if "layouts" in given:  # (nodes, ranks per node) pairs, recorded as lists
        given["layouts"] = tuple(tuple(x) if isinstance(x, list) else x for x in given["layouts"])
    reqs = tuple(rb.get("requirements") or ())
    if reqs:
        given.update(requirements=reqs, requirements_source="the image's provenance")
    try:
        spec = make_spec(str(rb["target"]), given=given)
    except TypeError as e:
        raise InputError(f"the provenance's rebuild inputs name an option this envbuilder does not "
                         f"know: {e}") from None
    name = rb.get("name")
    if name:  # a project target's: the image's io.envbuilder.target label and tag say it
        from dataclasses import replace

        from envbuilder.core import validate

        spec = replace(spec, name=validate.tag(str(name), "the provenance's target name"),
                       from_project=True)
    return spec


def rebuild(image: str, opts: RebuildOptions, *, matrix_dir: str | Path | None = None,
            client: DockerClient | None = None,
            on_event: Callable[[str, Any], None] | None = None) -> RebuildReport:
    """Rebuild ``image`` (REPO@DIGEST) from its provenance and compare (see the module)."""
    from envbuilder.core.matrix import load_matrix
    from envbuilder.run import build as b
    from envbuilder.run import buildkit, engine

    _check_ref(image)
    started = time.monotonic()
    emit = on_event or (lambda kind, data: None)
    ref, digest, pred, verified = provenance(image, opts.key)
    matrix = load_matrix(matrix_dir)
    rb = _inputs(image, pred, matrix.digest)
    if rb.get("wheelhouse") and opts.wheelhouse is None:
        raise InputError(f"{image} was built offline from a wheelhouse: pass --wheelhouse DIR with "
                         f"the same wheels (the lock's hashes check them)")
    sde = int(rb["source_date_epoch"]) if opts.source_date_epoch is None else int(opts.source_date_epoch)
    target = str(rb["target"])
    job = b.prepare(spec_of(rb), matrix=matrix)
    client = client or engine.connect()
    if not buildkit.support(client).ok:
        raise OperationError(f"this engine cannot build reproducibly: {buildkit.support(client).why}",
                             step="rebuild")
    work = Path(tempfile.mkdtemp(prefix="envbuilder-rebuild-"))
    try:
        lock = None
        if rb.get("lock"):
            lock = work / "requirements.lock"
            lock.write_text(str(rb["lock"]), encoding="utf-8")
        bopts = b.BuildOptions(wheelhouse=opts.wheelhouse, ca_cert=opts.ca_cert, proxies=dict(opts.proxies),
                               nocache=True, lock=lock, smoke=False, verify=False, builder="buildkit",
                               source_date_epoch=sde,
                               image_args=dict(rb.get("images") or {}), labels=dict(rb.get("labels") or {}))
        ctx = (opts.keep or work) / "context"
        _, plan = b.prepare_context(job.spec, job.stack, bopts, ctx, lock=lock)
        emit("step", ("rebuild", f"building {target} again without cache"))
        oci = (opts.keep or work) / "rebuilt.oci.tar"
        args = {**b.proxy_args(bopts), **plan.index_build_args, **bopts.image_args}
        res = buildkit.build(client, ctx, oci=oci, build_args=args, labels=bopts.labels,
                             source_date_epoch=sde, nocache=True,
                             on_step=lambda i, n, t: emit("build-step", (i, n, t)),
                             on_line=lambda ln: emit("build-line", ln))
        found = Comparison()
        if res.manifest_digest != digest:
            emit("step", ("rebuild", "comparing the layers"))
            found = _compare(ref, oci, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return RebuildReport(image=ref, digest=digest, rebuilt_digest=res.manifest_digest,
                         reproduced=res.manifest_digest == digest, target=target,
                         source_date_epoch=sde, provenance_verified=verified,
                         layers=found.layers, first_layer=found.first_layer, files=found.files,
                         files_total=found.files_total, config=found.config,
                         seconds=time.monotonic() - started)


def _compare(ref: str, oci: Path, work: Path) -> Comparison:
    """The first layer that differs and its files, else the config's fields."""
    from envbuilder.run import buildkit
    from envbuilder.run.registry import RegistryClient

    client, parsed = RegistryClient.for_image(ref, timeout=3600.0, deadline=6 * 3600.0, step="rebuild")
    original = client.manifest(parsed.reference).json("manifest")
    layout = buildkit.oci_layout(oci)
    try:
        a = [str(d["digest"]) for d in original.get("layers") or []]
        b = layout.layers
        i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if i is None and len(a) != len(b):
            i = min(len(a), len(b))
        if i is None:
            cfg_a = client.blob(str(original["config"]["digest"])).json("config blob")
            cfg_b = json.loads(layout.blob(layout.config_digest).read())
            return Comparison(layers=len(a), config=tuple(config_diff(cfg_a, cfg_b)))
        first = FirstLayer(i, a[i] if i < len(a) else None, b[i] if i < len(b) else None)
        ea: dict[str, Entry] = {}
        if i < len(a):
            blob = work / "original-layer.tar.gz"
            client.blob_to(a[i], blob)
            with open(blob, "rb") as f:
                ea = layer_entries(f)
            blob.unlink()
        eb = layer_entries(layout.blob(b[i])) if i < len(b) else {}
        diffs = diff_entries(ea, eb)
        return Comparison(layers=len(a), first_layer=first, files=tuple(diffs[:MAX_FILES]),
                          files_total=len(diffs))
    finally:
        layout.close()
