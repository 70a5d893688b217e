"""The library's front door: the functions the CLI (and any program) calls.

Each takes plain arguments, returns plain typed data, and raises an EnvbuilderError with an
exit code; none prints. Heavy modules (docker, rich, jsonschema) are imported only inside the
functions that need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from envbuilder.errors import InputError
from envbuilder.core.matrix import Matrix, load_matrix
from envbuilder.core import resolve
from envbuilder.core.resolve import Stack
from envbuilder.core.target import Pins, Request, apply_options, request
from envbuilder.lock.requirements import build_files

__all__ = ["Pins", "bake_all", "build_files", "builtin_targets", "check_combination", "doctor",
           "image_labels", "render_all", "render_target", "request", "resolve_target"]

if TYPE_CHECKING:
    from docker import DockerClient

    from envbuilder.diagnose.doctor import Check


def resolve_target(target: str, *, matrix_dir: str | Path | None = None, pins: Pins | None = None,
                   matrix: Matrix | None = None) -> Stack:
    m = matrix or load_matrix(matrix_dir)
    return resolve.resolve_target(target, m, pins)


def builtin_targets(matrix: Matrix) -> list[str]:
    return [t.name for t in matrix.targets]


def check_combination(*, matrix_dir: str | Path | None = None, cuda: str | None = None,
                      driver: str | None = None, torch: str | None = None,
                      python: str | None = None, nccl: str | None = None,
                      deepspeed: str | None = None, horovod: str | None = None,
                      os: str | None = None) -> dict:
    """Judge a partial combination using only the axes given (envbuilder check)."""
    m = load_matrix(matrix_dir)
    given = {ax for ax, v in (("cuda", cuda), ("torch", torch), ("python", python),
                              ("nccl", nccl), ("deepspeed", deepspeed), ("horovod", horovod),
                              ("os", os)) if v is not None}
    if cuda is None and driver is not None:
        raise InputError("--driver needs --cuda: a driver is judged against a CUDA version")
    if not given:
        raise InputError("check needs at least one of --cuda, --torch, --python, --nccl, "
                         "--deepspeed, --horovod, --os")
    req = Request(target="check")
    req = apply_options(req, m, cuda=cuda, driver=driver, torch=torch, python=python,
                        nccl=nccl, deepspeed=deepspeed, horovod=horovod, os=os)
    assignment, warnings = resolve.check(req, m, given)
    return {"ok": True,
            "given": {k: v for k, v in req.pins().items()} | ({"driver": driver} if driver else {}),
            "satisfied_by": {k: "cpu" if k == "cuda" and v is None else resolve._show(v)
                             for k, v in assignment.items() if k in given},
            "warnings": [w.to_dict() for w in warnings]}


def render_target(target: str, out: str | Path, *, matrix_dir: str | Path | None = None,
                  pins: Pins | None = None, base_image: str | None = None,
                  pip_index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                  nproc: int = 12, lock: bool = False, requirements_file: str | Path | None = None,
                  image: str | None = None, gpus: bool | None = None, infiniband: bool = False,
                  matrix: Matrix | None = None) -> dict:
    """Resolve and write the build folder. Returns a report (paths, stack).

    A ``requirements.lock`` already in ``out`` (from ``envbuilder lock``), or one made now with
    ``lock=True``, is installed with ``--require-hashes`` (see build_files).
    """
    import tempfile

    from envbuilder.render.jobs import render_jobs
    from envbuilder.render.templating import write_tree

    m = matrix or load_matrix(matrix_dir)
    stack = resolve_target(target, pins=pins, matrix=m)
    out = Path(out)
    lock_text = None
    existing = out / "requirements.lock"
    if lock:
        from envbuilder.lock.requirements import lock_target

        with tempfile.TemporaryDirectory(prefix=".envbuilder-lock-") as d:
            lock_target(stack, d, requirements_file=requirements_file, index_url=pip_index_url,
                        extra_index_urls=extra_index_urls)
            lock_text = (Path(d) / "requirements.lock").read_text(encoding="utf-8")
    elif existing.is_file():
        lock_text = existing.read_text(encoding="utf-8")
    plan, files = build_files(stack, lock_text=lock_text, lock_source=str(existing),
                              base_image=base_image, pip_index_url=pip_index_url,
                              extra_index_urls=tuple(extra_index_urls), smoke_nproc=nproc)
    files.update(render_jobs(plan, image=image or f"envbuilder:{stack.tag}",
                             gpus=stack.toolkit is not None if gpus is None else gpus,
                             infiniband=infiniband))
    dest = write_tree(out, files)
    return {"target": target, "out": str(dest), "files": sorted(files), "stack": stack.to_dict(),
            "locked": lock_text is not None}


def render_all(out: str | Path, *, matrix_dir: str | Path | None = None,
               targets: Sequence[str] | None = None, **kw) -> list[dict]:
    """Render every built-in target (or the given ones) into OUT/<target>/, all or nothing."""
    import shutil
    import tempfile

    from envbuilder.render.templating import write_tree

    m = load_matrix(matrix_dir)
    names = list(targets or builtin_targets(m))
    out = Path(out)
    staging = Path(tempfile.mkdtemp(prefix=".render-all-", dir=_parent(out)))
    reports = []
    try:
        for name in names:
            reports.append(render_target(name, staging / name, matrix=m, **kw))

        def move(tmp: Path) -> None:
            for name in names:
                (staging / name).rename(tmp / name)
        write_tree(out, {}, extra=move)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for r in reports:
        r["out"] = str(out / r["target"])
    return reports


def bake_all(out: str | Path, *, matrix_dir: str | Path | None = None,
             registry: str | None = None, targets: Sequence[str] | None = None,
             **kw: Any) -> dict[str, Any]:
    """Render every built-in target (or ``targets``) into OUT/<target>/ and write
    OUT/docker-bake.hcl. Returns {"bake_file", "targets": [render reports]}."""
    from envbuilder.core import validate
    from envbuilder.render.bake import write_bake

    if registry is not None:
        validate.repository(registry, "--registry")
    out = Path(out)
    reports = render_all(out, matrix_dir=matrix_dir, targets=targets, **kw)
    write_bake([(r["target"], out / r["target"]) for r in reports], out / "docker-bake.hcl",
               registry=registry)
    return {"bake_file": str(out / "docker-bake.hcl"), "targets": reports}


def _parent(p: Path) -> Path:
    parent = p.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def image_labels(image: str, client: DockerClient | None = None) -> Mapping[str, str]:
    """The labels of a local image (docker SDK), for doctor --image."""
    from envbuilder.run.engine import connect, image_labels as _labels

    return _labels(client or connect(), image)


def doctor(*, target: str | None = None, image: str | None = None, nproc: int | None = None,
           matrix_dir: str | Path | None = None) -> list[Check]:
    """Check this host, and judge it against a target's stack or an image's labels."""
    from envbuilder import labels
    from envbuilder.core.validate import image_ref
    from envbuilder.diagnose.doctor import run_doctor

    if target and image:
        raise InputError("doctor takes --target or --image, not both")
    facts = None
    if target:
        facts = labels.StackFacts.from_stack(resolve_target(target, matrix_dir=matrix_dir))
    elif image:
        facts = labels.read(image_labels(image_ref(image, "--image")))
    return run_doctor(stack=facts, nproc=nproc)
