"""The library's front door: the functions the CLI (and any program) calls.

Each takes plain arguments, returns plain typed data, and raises an EnvbuilderError with an
exit code; none prints. Heavy modules (docker, rich, jsonschema) are imported only inside the
functions that need them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from envbuilder.errors import InputError
from envbuilder.core.matrix import Matrix, load_matrix
from envbuilder.core.target import Request, apply_options, parse_target

if TYPE_CHECKING:
    from docker import DockerClient

    from envbuilder.diagnose.doctor import Check


@dataclass(frozen=True)
class Pins:
    """Options that pin axes (the same axes a target's parts pin)."""

    torch: str | None = None
    python: str | None = None
    deepspeed: str | None = None
    horovod: str | None = None
    nccl: str | None = None
    os: str | None = None
    driver: str | None = None
    with_: tuple[str, ...] = ()
    without: tuple[str, ...] = ()

    def components(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for raw, on in ((self.with_, True), (self.without, False)):
            for item in raw:
                for name in item.split(","):
                    name = name.strip()
                    if name:
                        if name in out and out[name] != on:
                            raise InputError(f"--with {name} and --without {name} contradict each other")
                        out[name] = on
        return out


def request(target: str, matrix: Matrix, pins: Pins | None = None) -> Request:
    pins = pins or Pins()
    req = parse_target(target, matrix)
    return apply_options(req, matrix, torch=pins.torch, python=pins.python,
                         deepspeed=pins.deepspeed, horovod=pins.horovod, nccl=pins.nccl,
                         os=pins.os, driver=pins.driver, with_=pins.components())


def resolve_target(target: str, *, matrix_dir: str | Path | None = None, pins: Pins | None = None,
                   matrix: Matrix | None = None):
    from envbuilder.core.resolve import resolve

    m = matrix or load_matrix(matrix_dir)
    return resolve(request(target, m, pins), m)


def builtin_targets(matrix: Matrix) -> list[str]:
    return [t.name for t in matrix.targets]


def check_combination(*, matrix_dir: str | Path | None = None, cuda: str | None = None,
                      driver: str | None = None, torch: str | None = None,
                      python: str | None = None, nccl: str | None = None,
                      deepspeed: str | None = None, horovod: str | None = None,
                      os: str | None = None) -> dict:
    """Judge a partial combination using only the axes given (envbuilder check)."""
    from envbuilder.core.resolve import check

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
    assignment, warnings = check(req, m, given)
    from envbuilder.core.resolve import _show
    return {"ok": True,
            "given": {k: v for k, v in req.pins().items()} | ({"driver": driver} if driver else {}),
            "satisfied_by": {k: "cpu" if k == "cuda" and v is None else _show(v)
                             for k, v in assignment.items() if k in given},
            "warnings": [w.to_dict() for w in warnings]}


def build_files(stack, *, lock_text: str | None = None, lock_source: str = "requirements.lock",
                **plan_kw) -> tuple:
    """The files of a build folder for ``stack``: (plan, {relative path: content}).

    With ``lock_text`` (a requirements.lock) the lock is cross-checked against the stack, cut
    into per-layer hash-pinned files installed with ``--require-hashes``, kept beside them, and
    its digest recorded in stack.json. ``plan_kw`` are make_plan's options."""
    import hashlib
    import json

    from envbuilder.render.plan import make_plan
    from envbuilder.render.templating import render_files

    if lock_text is None:
        plan = make_plan(stack, **plan_kw)
        return plan, render_files(plan)
    from envbuilder.lock.requirements import apply_lock

    plan, layer_reqs = apply_lock(stack, plan_kw, lock_text, lock_source)
    files = render_files(plan, layer_requirements=layer_reqs)
    files["requirements.lock"] = lock_text
    data = json.loads(files["stack.json"])
    data["lock"] = {"file": "requirements.lock",
                    "digest": "sha256:" + hashlib.sha256(lock_text.encode()).hexdigest()}
    files["stack.json"] = json.dumps(data, indent=2) + "\n"
    return plan, files


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
