"""Daily use (issue 23): diff, inspect, init and shell completion."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from envbuilder.errors import InputError
from envbuilder.core.matrix import Matrix, load_matrix
from envbuilder.core.project import find_project

from envbuilder.api.parts import Provenance
from envbuilder.api.results import (DiffResult, ImageSource, InitResult, InspectLines,
                                    Inspection)
from envbuilder.api.specs import make_spec, out_dir, resolve_spec

if TYPE_CHECKING:
    from docker import DockerClient

    from envbuilder.knowledge.diff import Side


def image_source(image: str, *, where: str = "auto",
                 client: DockerClient | None = None) -> ImageSource:
    """The labels of ``image`` and the provenance of the read: from the engine (``where="engine"``), from
    its registry's manifest and config blob without pulling layers (``"registry"``), or
    ``"auto"``: the engine when it holds the image, else the registry."""
    from envbuilder.core import validate
    from envbuilder.errors import OperationError

    validate.image_ref(image, "IMAGE")
    if where not in ("auto", "engine", "registry"):
        raise InputError(f"--from {where!r}: expected auto, engine or registry")
    if where in ("auto", "engine"):
        try:
            from envbuilder.run.engine import connect, image_provenance

            labels, where_read = image_provenance(client or connect(timeout=30), image)
            return ImageSource(labels, Provenance.from_dict(where_read))
        except (InputError, OperationError):
            if where == "engine":
                raise
    from envbuilder.run.registry import image_labels as registry_labels

    labels, where_read = registry_labels(image)
    return ImageSource(labels, Provenance.from_dict(where_read))


def inspect_image(image: str, *, where: str = "auto", matrix_dir: str | Path | None = None,
                  client: DockerClient | None = None) -> Inspection:
    """``envbuilder inspect``: the stack ``image``'s labels declare and its provenance
    (knowledge.inspect), the matrix digest compared with the matrix in use now."""
    from envbuilder.knowledge.inspect import stack_from_labels

    source = image_source(image, where=where, client=client)
    labels, src = source.labels, source.provenance
    try:
        now: str | None = load_matrix(matrix_dir).digest
    except InputError:
        now = None
    d = stack_from_labels(image, labels, src.to_dict(), matrix_digest_now=now)
    if src.source == "registry":  # read from the registry: what it holds beside it
        from envbuilder.errors import OperationError
        from envbuilder.run.sign import list_attestations

        try:
            d["attestations"] = list_attestations(image, digest=src.manifest_digest)
        except (InputError, OperationError):
            d["attestations"] = []
    return Inspection.from_dict(d)


def inspect_lines(inspection: Inspection) -> InspectLines:
    """The table rows and provenance lines of an inspect_image result, for printing."""
    from envbuilder.knowledge.inspect import provenance_lines, rows

    d = inspection.to_dict()
    lines = provenance_lines(d)
    lines += [f"attestation: {a['name'] or 'other'} ({a['type']}), not verified here: "
              f"envbuilder verify IMAGE@DIGEST --key PUB checks it" for a in d.get("attestations", ())]
    return InspectLines(rows=rows(d), lines=lines)


def _diff_side(arg: str, *, matrix: Matrix | None, matrix_dir: str | Path | None,
               given: Mapping[str, Any], where: str, client: DockerClient | None) -> Side:
    """One argument of ``envbuilder diff``: an existing path is a build folder or a lock
    (knowledge.diff.path_side); else a project target's name or a target (the folder render
    would write, in memory); else an image reference (engine or registry)."""
    from envbuilder.knowledge.diff import Side, facts_from_labels, files_side, path_side

    p = Path(arg)
    if p.exists():
        return path_side(p, arg)
    from envbuilder.assemble import folder_files

    spec = make_spec(arg, project=find_project(), **given)
    try:
        stack = resolve_spec(spec, matrix_dir=matrix_dir, matrix=matrix)
    except InputError:
        if not any(c in arg for c in ":/@"):
            raise
        labels = image_source(arg, where=where, client=client).labels
        return Side("image", arg, facts=facts_from_labels(labels))
    # the build folder `render` would write (inside a project: with the team's requirements
    # in their layer, and installing the lock `envbuilder lock` wrote for it, whose packages
    # are then compared)
    lock = out_dir(spec, None, single=False) / "requirements.lock"
    lock_text = None
    if lock.is_file() and not lock.is_symlink():
        from envbuilder._fs import read_text_capped

        lock_text = read_text_capped(lock, "lock", follow_links=False)
    _, files = folder_files(spec, stack, lock_text=lock_text, lock_source=str(lock))
    return files_side(arg, files)


def diff(a: str, b: str, *, matrix_dir: str | Path | None = None,
         matrix_a: str | Path | None = None, given: Mapping[str, Any] | None = None,
         where: str = "auto", client: DockerClient | None = None) -> DiffResult:
    """``envbuilder diff A B`` (knowledge.diff): A and B are targets (with the options
    ``given``, by the option table's names: pins, matrix_overlay), build folders, locks or
    images. ``matrix_a``: resolve A against another matrix (an older copy), to see what a
    matrix update moves."""
    from envbuilder.knowledge.diff import diff as _diff

    given = dict(given or {})
    overlay = given.get("matrix_overlay")
    m = load_matrix(matrix_dir, overlay) if matrix_dir or overlay else None
    ma = load_matrix(matrix_a, overlay) if matrix_a else m
    kw: dict[str, Any] = dict(matrix_dir=matrix_dir, given=given, where=where, client=client)
    return DiffResult.from_dict(_diff(_diff_side(a, matrix=ma, **kw), _diff_side(b, matrix=m, **kw)))


def diff_lines(d: DiffResult) -> list[str]:
    """The lines ``envbuilder diff`` prints after its table (packages, layers that rebuild)."""
    from envbuilder.knowledge.diff import text_lines

    return text_lines(d.to_dict())


def init_project(folder: str | Path = ".", *, driver: str | None = None,
                 gpus_per_node: int | None = None, nodes: int = 1, registry: str | None = None,
                 with_: Sequence[str] = (), name: str = "train", torch: str | None = None,
                 matrix_dir: str | Path | None = None, probe: Any = None) -> InitResult:
    """``envbuilder init``: write ``folder/envbuilder.toml`` (and a requirements.txt stub when
    there is none) for a cluster (core.init). Facts not given are read from this host the way
    doctor reads them (the driver, the GPUs and their compute capabilities); an existing
    envbuilder.toml is never overwritten (InputError)."""
    import os

    from envbuilder._fs import create_files
    from envbuilder.core import init, validate
    from envbuilder.core.project import parse_project

    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    validate.path_segment(name, "--name")  # every value checked before anything is read
    if driver is not None:
        validate.driver_version(driver)
    if torch is not None:
        validate.version(torch, "--torch")
    folder = Path(folder)
    dest = folder / init.PROJECT_FILE
    if os.path.lexists(dest):
        raise InputError(f"{dest} already exists: edit it, or remove it to start again "
                         f"(envbuilder init never overwrites it)")
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder: create it first")
    caps: list[str] = []
    source = "the options given"
    if driver is None or gpus_per_node is None:
        from envbuilder.diagnose.doctor import inventory

        inv = inventory(probe)
        if driver is None and not inv.driver:
            raise InputError("no NVIDIA driver found on this host"
                             + (f" ({inv.error})" if inv.error else "")
                             + ": give the cluster's --driver (e.g. 535.104.05) and "
                               "--gpus-per-node")
        if inv.driver:
            try:
                validate.driver_version(inv.driver)
            except InputError:
                raise InputError(f"the driver this host reports ({inv.source}: "
                                 f"{inv.driver[:60]!r}) is not a driver version: give the "
                                 f"cluster's --driver and --gpus-per-node") from None
            caps = [g["compute_cap"] for g in inv.gpus if g.get("compute_cap")]
            source = f"this host ({inv.source}: driver {inv.driver}, {len(inv.gpus)} GPUs)"
            if driver is not None or gpus_per_node is not None:
                source += " and the options given"
        driver = driver or inv.driver
        if gpus_per_node is None:
            gpus_per_node = len(inv.gpus) or 8
    assert driver is not None and gpus_per_node is not None
    m = load_matrix(matrix_dir)
    choice = init.choose(m, driver=driver, gpus_per_node=gpus_per_node, nodes=nodes,
                         registry=registry, with_=with_, compute_caps=caps, torch=torch)
    from envbuilder.core.naming import project_repository

    repository = project_repository(dest.absolute()) if registry is not None else None
    text = init.project_toml(choice, name=name, source=source, repository=repository)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="envbuilder-init-") as scratch:
        # the schema accepts what is written (read beside a stub, before anything is written)
        (Path(scratch) / init.REQUIREMENTS_FILE).write_text(init.REQUIREMENTS_STUB, "utf-8")
        parse_project(Path(scratch) / init.PROJECT_FILE, tomllib.loads(text))
    files = {init.PROJECT_FILE: text}
    req = folder / init.REQUIREMENTS_FILE
    if os.path.islink(req):
        raise InputError(f"{req} is a symbolic link: envbuilder init writes through no link "
                         f"and the project reads no requirements through one; replace it with "
                         f"the file")
    if not os.path.lexists(req):
        files[init.REQUIREMENTS_FILE] = init.REQUIREMENTS_STUB
    # both or neither, never through a link, never over a file (a link counts as one)
    written = [str(x) for x in create_files(folder, files, step="init", root=folder)]
    return InitResult(project=str(dest), written=written, source=source, name=name,
                      choice=choice, repository=repository)


def complete(kind: str, incomplete: str) -> list[str]:
    """Shell completion values (knowledge.complete): ``kind`` is "target" (built-in targets,
    cuXYZ bases, the project's target names, a target's parts after a '-'), "axis" or
    "flavour". Never raises."""
    from envbuilder.knowledge import complete as _c

    try:
        if kind == "target":
            try:
                project = find_project()
            except InputError:
                project = None
            return _c.targets(incomplete, [t.name for t in project.targets] if project else [])
        return _c.KINDS[kind](incomplete)
    except Exception:  # noqa: BLE001 - completion must never fail the shell
        return []
