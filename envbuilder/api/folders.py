"""render and bake: build folders from specs (envbuilder.assemble), written as one transaction."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from envbuilder.errors import InputError
from envbuilder.core.matrix import Matrix
from envbuilder.core import spec as spec_mod
from envbuilder.core.resolve import Stack
from envbuilder.core.spec import Outcome, TargetSpec
from envbuilder.core.target import Pins

from envbuilder.api.parts import BakeSummary, JobsImage
from envbuilder.api.results import BakeReport, FolderFiles, RenderReport
from envbuilder.api.specs import builtin_target_names, make_spec, out_dir, resolve_spec

if TYPE_CHECKING:

    pass


def spec_files(spec: TargetSpec, out: str | Path, *, matrix_dir: str | Path | None = None,
               matrix: Matrix | None = None, lock: bool = False,
               wheelhouse: bool = False, lock_from: Path | None = None) -> FolderFiles:
    """The build folder ``out`` would get (see _spec_files)."""
    return FolderFiles(*_spec_files(spec, out, matrix_dir=matrix_dir, matrix=matrix, lock=lock,
                                    wheelhouse=wheelhouse, lock_from=lock_from))


def _spec_files(spec: TargetSpec, out: str | Path, *, matrix_dir: str | Path | None = None,
                matrix: Matrix | None = None, lock: bool = False,
                wheelhouse: bool = False,
                lock_from: Path | None = None) -> tuple[Stack, dict[str, Any], bool]:
    """(stack, {relative path: content}, locked) of the build folder ``out`` would get.

    A ``requirements.lock`` already in ``out`` (from ``envbuilder lock``), or one made now with
    ``lock=True``, is installed with ``--require-hashes``; one already there stays ``lock``'s
    file (it is not rewritten by render). Without one in ``out``, the lock at ``lock_from``
    (where ``lock`` wrote it: bake -o ELSEWHERE) is installed and copied into ``out``."""
    from envbuilder.assemble import folder_files

    stack = resolve_spec(spec, matrix_dir=matrix_dir, matrix=matrix)
    if spec.image:
        check_image_stack(spec.image, stack)
    existing = Path(out) / "requirements.lock"
    lock_text = None
    source, copied = existing, False
    if not lock and not existing.is_file() and lock_from is not None \
            and lock_from.is_file() and not lock_from.is_symlink():
        source, copied = lock_from, True
    if lock:
        lock_text = _lock_text(spec, stack)
    elif source.is_file():
        from envbuilder._fs import read_text_capped

        lock_text = read_text_capped(source, "lock", follow_links=False)
    _, files = folder_files(spec, stack, lock_text=lock_text, lock_source=str(source),
                            wheelhouse=wheelhouse)
    if lock_text is not None and not lock and not copied:
        files.pop("requirements.lock", None)  # already there: it stays `lock`'s file
    files.update(_admission_files(spec))
    return stack, files, lock_text is not None


# the stack facts an image's labels must share with the target its job files are rendered for
_STACK_FACTS = ("cuda", "torch", "torch_variant", "python", "os", "nccl")
IMAGE_CHECK_TIMEOUT_S = 5.0


def check_image_stack(image: str, stack: Stack) -> str:
    """``render --image IMAGE``: when IMAGE's registry answers (within a few seconds), the
    image's ``io.envbuilder.*`` labels must name the target's stack: the job files of one stack
    pinned to another stack's image (a CPU image for cu124 files) are refused (exit 2) naming
    both. Returns what was found: "matches", "not an envbuilder image" or "not checked: WHY"
    (the registry unreachable: render works offline)."""
    from envbuilder.core import validate
    from envbuilder.errors import OperationError
    from envbuilder.labels import PREFIX, facts
    from envbuilder.run.registry import image_labels

    validate.image_ref(image, "--image")
    try:
        labels, where = image_labels(image, timeout=IMAGE_CHECK_TIMEOUT_S)
    except (OperationError, InputError) as e:  # unreachable, unknown, or no such image there
        return f"not checked: {str(e)[:200]}"
    if PREFIX + "torch" not in labels:
        return "not an envbuilder image"
    want = facts(stack)
    for name in _STACK_FACTS:
        key = PREFIX + name.replace("_", "-")
        have, expect = labels.get(key), want.get(name)
        if have != (expect if expect is not None else None):
            raise InputError(
                f"--image {image}: its label {key}={have!r} says another stack than the "
                f"target's ({name} {expect!r}, {stack.tag}); the job files would run the wrong "
                f"image: give the digest of this target's image (envbuilder build {stack.target} "
                f"--push REPO prints it)")
    return "matches"


def _admission_files(spec: TargetSpec) -> dict[str, str]:
    """With the project's ``signing_key`` and/or the keyless identity of ``[jobs] admission``:
    the admission/ policies for the spec's registry (render.admission)."""
    from envbuilder.core.project import load_project

    proj = load_project(spec.project) if spec.project is not None else None  # the spec's project
    adm = spec.jobs.admission
    keyless = adm is not None and adm.issuer is not None
    if proj is None or (proj.signing_key is None and not keyless):
        return {}
    from envbuilder.core.readfile import read_text_capped
    from envbuilder.render.admission import render_policies

    key_name = "signing_key" if proj.signing_key is not None else "jobs.admission"
    if not spec.registry:
        raise InputError(f"project file {proj.path}, key {key_name}: the admission policy "
                         f"names the images it admits: set registry too")
    key = (read_text_capped(proj.signing_key, "project file key signing_key", limit=64 << 10)
           if proj.signing_key is not None else None)
    from envbuilder.core.naming import image_names

    # the repository build --push/--publish sends the image to (core.naming; the tag is not used)
    repository = image_names(spec, "tag").repository
    return render_policies(name=spec.name, repository=repository, public_key=key,
                           issuer=adm.issuer if adm else None, subject=adm.subject if adm else None,
                           require=adm.require if adm else ())


def _lock_text(spec: TargetSpec, stack: Stack) -> str:
    from envbuilder.lock.requirements import resolve_lock_text, team_requirements

    return resolve_lock_text(
        stack, requirements_file=spec.requirements_file, index_url=spec.pip_index_url,
        extra_index_urls=spec.extra_index_urls, exclude_newer=spec.exclude_newer,
        team=team_requirements(stack, lines=spec.requirements, source=spec.requirements_source),
        compiled=spec.compiled, index_strategy=spec.index_strategy)


def _report(spec: TargetSpec, out: Path, stack: Stack, files: Mapping[str, Any],
            locked: bool) -> RenderReport:
    import json

    index = json.loads(files["jobs/layouts.json"]) if "jobs/layouts.json" in files else {}
    # the image the job files pull, and whether by digest (render says so when only a tag)
    jobs = JobsImage(image=index.get("image"), pinned=bool(index.get("pinned")))
    return RenderReport(target=spec.name, resolved_target=spec.target, out=str(out),
                        files=sorted(files), stack=stack, locked=locked, jobs=jobs)


def render(specs: Sequence[TargetSpec], out: str | Path | None = None, *, single: bool = False,
           matrix_dir: str | Path | None = None, lock: bool = False,
           take_jobs: bool = False) -> list[RenderReport]:
    """Render every spec's build folder, as one transaction: every target is resolved and
    rendered first; if any is refused nothing is written, and the error names each refused
    target. Returns one report per target. Only files envbuilder wrote are replaced; a job
    file edited by hand is refused naming the [jobs] key for the edit, or with ``take_jobs``
    kept as FILE.edited beside the new version (render.jobs.guard_edited)."""
    from envbuilder._fs import Outputs
    from envbuilder.render.jobs import guard_edited

    made = spec_mod.run_each(specs, "render", lambda s: (
        out_dir(s, out, single=single),
        *_spec_files(s, out_dir(s, out, single=single), matrix_dir=matrix_dir, lock=lock)))
    _raise_failed(made)
    # hand-edited job files: refused, or (take_jobs) kept aside by the transaction itself, so
    # a refused render changes nothing (the one output guard, _fs)
    asides = [guard_edited(o.value[0], o.value[2], take=take_jobs) for o in made
              if o.value is not None]
    with Outputs("render", root=_out_root(specs, out)) as tx:
        for o, aside in zip(made, asides):
            assert o.value is not None
            tx.add(o.value[0], o.value[2], group="render", aside=aside)
        tx.commit()
    return [_report(o.spec, *o.value) for o in made if o.value is not None]


def _out_root(specs: Sequence[TargetSpec], out: str | Path | None) -> Path:
    """The folder holding the outputs: ``-o DIR``'s parent, else the project's (or the
    working folder): no link is followed below it (_fs.open_folder)."""
    if out is not None:
        return Path(out).parent
    return specs[0].project.parent if specs and specs[0].project is not None else Path(".")


def _raise_failed(outcomes: Sequence[Outcome[Any]]) -> None:
    """One error for a set: the first failure's class and exit code, naming every target."""
    failed = [o for o in outcomes if o.error is not None]
    if not failed:
        return
    first = failed[0].error
    assert first is not None
    if len(outcomes) == 1:
        raise first
    msg = "; ".join(f"{o.spec.name}: {o.error}" for o in failed)
    err = type(first)(f"{len(failed)} of {len(outcomes)} targets refused, nothing was "
                      f"written: {msg}")
    err.details = [f"{o.spec.name}: {o.error}" for o in failed]
    raise err


def render_target(target: str, out: str | Path, *, matrix_dir: str | Path | None = None,
                  pins: Pins | None = None, lock: bool = False, matrix: Matrix | None = None,
                  **fields: Any) -> RenderReport:
    """Resolve and write one target's build folder (a library shortcut for ``render``:
    ``fields`` are TargetSpec fields; no project file is read)."""
    from envbuilder._fs import write_tree

    spec = make_spec(target, pins=pins, **fields)
    stack, files, locked = _spec_files(spec, out, matrix_dir=matrix_dir, matrix=matrix, lock=lock)
    dest = write_tree(out, files, group="render")
    return _report(spec, dest, stack, files, locked)


def render_all(out: str | Path, *, matrix_dir: str | Path | None = None,
               targets: Sequence[str] | None = None, **fields: Any) -> list[RenderReport]:
    """Render every built-in target (or the given ones) into OUT/<target>/, all or nothing."""
    names = list(targets or builtin_target_names(matrix_dir=matrix_dir))
    lock = bool(fields.pop("lock", False))
    pins = fields.pop("pins", None)
    return render([make_spec(n, pins=pins, **fields) for n in names], out,
                  matrix_dir=matrix_dir, lock=lock)


def bake(specs: Sequence[TargetSpec], out: str | Path | None = None, *,
         registry: str | None = None, matrix_dir: str | Path | None = None,
         wheelhouse: str | Path | None = None, ca_cert: str | Path | None = None,
         docker_driver: bool = False, cache_mounts: bool = False) -> BakeReport:
    """Render the specs into OUT/<name>/ and write OUT/docker-bake.hcl (tags under
    ``registry``, else the specs' own: a project's), all in one transaction: every target is
    rendered and every folder (and the bake file) checked before anything is written.
    ``wheelhouse`` and ``ca_cert`` go into each folder as ``build`` puts them in its context
    (each layer's wheels, installed offline; the CA bundle trusted in the builder stage only).
    ``docker_driver``: a file for buildx's docker driver (render.bake.bake_hcl); ``cache_mounts``:
    Dockerfiles with BuildKit cache mounts for pip and apt (render.bake.with_cache_mounts)."""
    from envbuilder.render.bake import with_cache_mounts
    from envbuilder.run.build import BuildOptions, context_extra

    from envbuilder._fs import Outputs
    from envbuilder.render.bake import bake_hcl, moving_aliases

    import dataclasses

    # each image goes under its spec's registry (the cascade's: --registry > target > project);
    # ``registry``, a library caller's, puts every one under it
    if registry is not None:
        # the job files pull the tags the bake file gives (each spec checks it, once, as made)
        specs = [dataclasses.replace(s, registry=registry, origin={**s.origin, "registry": "--registry"})
                 for s in specs]
    root = Path(out) if out is not None else (
        specs[0].project.parent / "build" if specs and specs[0].project is not None else Path("build"))
    extras = BuildOptions(wheelhouse=Path(wheelhouse) if wheelhouse is not None else None,
                          ca_cert=Path(ca_cert) if ca_cert is not None else None)
    # locked whenever a lock exists: a target without one in OUT/<name> installs the one
    # `envbuilder lock` wrote in its default folder (build/<name>), copied into OUT/<name>
    made = spec_mod.run_each(specs, "render", lambda s: (
        out_dir(s, root, single=False),
        *_spec_files(s, out_dir(s, root, single=False), matrix_dir=matrix_dir,
                     wheelhouse=wheelhouse is not None,
                     lock_from=out_dir(s, None, single=False) / "requirements.lock")))
    _raise_failed(made)
    if cache_mounts:
        for o in made:
            if o.value is not None:
                o.value[2]["Dockerfile"] = with_cache_mounts(str(o.value[2]["Dockerfile"]))
    adds = {o.spec.name: context_extra(o.spec, o.value[1], extras)
            for o in made if o.value is not None}
    from envbuilder.render.jobs import guard_edited

    for o in made:  # a hand-edited job file: refused naming the [jobs] key for the edit
        assert o.value is not None
        guard_edited(o.value[0], o.value[2])
    # the lock each folder installs, and where it came from (before the folders are written)
    locks: dict[str, tuple[str | None, str | None]] = {}
    for o in made:
        assert o.value is not None
        own = o.value[0] / "requirements.lock"
        default = out_dir(o.spec, None, single=False) / "requirements.lock"
        locks[o.spec.name] = ((str(own), None if own.is_file() else str(default)) if o.value[3]
                              else (None, None))
    path = root / "docker-bake.hcl"
    from envbuilder.assemble import image_names

    # each image's repository as build names it (core.naming): pushed ones under their registry
    names = {o.spec.name: image_names(o.spec, o.value[1]) for o in made if o.value is not None}
    text = bake_hcl([(o.spec.name, o.value[0], o.value[2]) for o in made if o.value is not None],
                    path, docker_driver=docker_driver,
                    registries={k: n.repository if n.registry else None for k, n in names.items()},
                    local={k: n.repository for k, n in names.items() if not n.registry})
    with Outputs("bake", root=root.parent) as tx:
        for o in made:
            assert o.value is not None
            files = dict(o.value[2])
            if locks[o.spec.name][1] is not None:  # the copied lock is `lock`'s file, as if it wrote it
                tx.add(o.value[0], {"requirements.lock": files.pop("requirements.lock")}, group="lock",
                       prune=False)
            tx.add(o.value[0], files, group="render")
            extra = adds[o.spec.name]
            if extra is not None:
                tx.add_with(o.value[0], extra, group="render")
        tx.add(root, {"docker-bake.hcl": text}, group="bake", prune=False)
        tx.commit()
    reports = []
    for o in made:
        if o.value is None:
            continue
        lock, lock_from = locks[o.spec.name]
        # where `envbuilder lock NAME` writes (and bake looks second)
        reports.append(dataclasses.replace(
            _report(o.spec, *o.value), lock=lock, lock_from=lock_from,
            lock_default=str(out_dir(o.spec, None, single=False))))
    return BakeReport(bake_file=str(path), targets=reports, bake=BakeSummary(moving_aliases(text)))


def bake_all(out: str | Path, *, matrix_dir: str | Path | None = None,
             registry: str | None = None, targets: Sequence[str] | None = None,
             **fields: Any) -> BakeReport:
    """Bake every built-in target (or ``targets``): a library shortcut for ``bake``."""
    names = list(targets or builtin_target_names(matrix_dir=matrix_dir))
    return bake([make_spec(n, **fields) for n in names], out, registry=registry,
                matrix_dir=matrix_dir)
