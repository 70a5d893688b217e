"""The library's front door: the functions the CLI (and any program) calls.

Each takes plain arguments, returns plain typed data, and raises an EnvbuilderError with an
exit code; none prints. Heavy modules (docker, rich, jsonschema) are imported only inside the
functions that need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from envbuilder import SMOKE_TIMEOUT
from envbuilder.errors import InputError
from envbuilder.core.matrix import Matrix, load_matrix
from envbuilder.core.project import Project, ProjectTarget, find_project
from envbuilder.core import resolve
from envbuilder.core.resolve import Stack
from envbuilder.core.target import Pins, Request, apply_options, request

__all__ = ["Pins", "Project", "in_project", "load", "apptainer_available", "bake_all", "bake_project", "find_project",
           "lock_project", "project_targets", "render_project",
           "build_files", "build_many", "build_sif", "build_target", "builtin_target_names",
           "builtin_targets", "check_combination", "doctor", "explain", "github_matrix",
           "image_labels", "list_targets", "lock_target", "render_all", "render_target",
           "request", "resolve_target", "smoke", "verify_image", "write_ci", "write_report"]

if TYPE_CHECKING:
    from docker import DockerClient

    from envbuilder.diagnose.doctor import Check
    from envbuilder.diagnose.explain import Cause
    from envbuilder.render.plan import BuildPlan
    from envbuilder.run.build import BuildOptions, BuildReport
    from envbuilder.run.smoke import SmokeResult
    from envbuilder.run.verify import VerifyReport


# Heavy layers (the engine, the lock, templates) are imported when a function needs them, so
# `import envbuilder.api` stays light for the CLI; these names are the run layer's own types.
def __getattr__(name: str) -> Any:
    if name in ("BuildFailed", "BuildOptions"):
        from envbuilder.run import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_files(stack: Stack, *, lock_text: str | None = None,
                lock_source: str = "requirements.lock",
                **plan_kw: Any) -> tuple[BuildPlan, dict[str, str | bytes]]:
    """The files of a build folder for ``stack`` (see lock.requirements.build_files)."""
    from envbuilder.lock import requirements

    return requirements.build_files(stack, lock_text=lock_text, lock_source=lock_source,
                                    **plan_kw)


def build_target(target: str, opts: BuildOptions, **kw: Any) -> BuildReport:
    """Render, build, smoke-test and (with opts.push) push one target (run.build)."""
    from envbuilder.run import build

    return build.build_target(target, opts, **kw)


def build_many(targets: Sequence[str], opts: BuildOptions, **kw: Any) -> list[BuildReport]:
    """Build several targets, at most ``jobs`` at once; keep going past failures."""
    from envbuilder.run import build

    return build.build_many(targets, opts, **kw)


def resolve_target(target: str, *, matrix_dir: str | Path | None = None, pins: Pins | None = None,
                   matrix: Matrix | None = None,
                   matrix_overlay: str | Path | None = None) -> Stack:
    m = matrix or load_matrix(matrix_dir, matrix_overlay)
    return resolve.resolve_target(target, m, pins)


def builtin_targets(matrix: Matrix) -> list[str]:
    return [t.name for t in matrix.targets]


def check_combination(*, matrix_dir: str | Path | None = None, cuda: str | None = None,
                      driver: str | None = None, torch: str | None = None,
                      python: str | None = None, nccl: str | None = None,
                      deepspeed: str | None = None, horovod: str | None = None,
                      os: str | None = None, flavour: str | None = None) -> dict:
    """Judge a partial combination using only the axes given (envbuilder check)."""
    m = load_matrix(matrix_dir)
    given = {ax for ax, v in (("cuda", cuda), ("torch", torch), ("python", python),
                              ("nccl", nccl), ("deepspeed", deepspeed), ("horovod", horovod),
                              ("os", os), ("flavour", flavour)) if v is not None}
    if cuda is None and driver is not None:
        raise InputError("--driver needs --cuda: a driver is judged against a CUDA version")
    if not given:
        raise InputError("check needs at least one of --cuda, --torch, --python, --nccl, "
                         "--deepspeed, --horovod, --os, --flavour")
    req = Request(target="check")
    req = apply_options(req, m, cuda=cuda, driver=driver, torch=torch, python=python,
                        nccl=nccl, deepspeed=deepspeed, horovod=horovod, os=os, flavour=flavour)
    assignment, warnings = resolve.check(req, m, given)
    return {"ok": True,
            "given": {k: v for k, v in req.pins().items()} | ({"driver": driver} if driver else {}),
            "satisfied_by": {k: "cpu" if k == "cuda" and v is None else resolve._show(v)
                             for k, v in assignment.items() if k in given},
            "warnings": [w.to_dict() for w in warnings]}


def target_files(target: str, out: str | Path, *, matrix_dir: str | Path | None = None,
                 pins: Pins | None = None, base_image: str | None = None,
                 pip_index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                 nproc: int | None = None, layouts: Sequence[str] = (), lock: bool = False,
                 requirements_file: str | Path | None = None, image: str | None = None, gpus: bool | None = None, infiniband: bool = False,
                 min_busbw: float | None = None, matrix: Matrix | None = None,
                 builder_image: str | None = None, cuda_arch: tuple[str, ...] = (),
                 cpu_isa: str | None = None, requirements: Sequence[str] = (),
                 requirements_source: str = "requirements",
                 matrix_overlay: str | Path | None = None) -> tuple:
    """(stack, {relative path: content}, locked) of the build folder ``out`` would get.

    A ``requirements.lock`` already in ``out`` (from ``envbuilder lock``), or one made now with
    ``lock=True``, is installed with ``--require-hashes`` (see build_files). ``layouts`` (``2x8``,
    or several: ``1x16,2x8``) lay the job files out and set the smoke job's world size; ``nproc``
    alone is one node of that many plus the splits that fit 8- and 4-GPU nodes (default 12).
    The team's own requirements (``requirements_file`` and/or the lines ``requirements``, e.g. a
    project's) get a layer of their own above torch and the compiled layers; with a lock they
    are locked with the stack."""
    import json

    from envbuilder.lock.requirements import team_requirements
    from envbuilder.render.jobs import job_name, render_jobs
    from envbuilder.render.monitoring import render_monitoring

    lays, nproc = smoke_layouts(nproc, layouts)
    m = matrix or load_matrix(matrix_dir, matrix_overlay)
    stack = resolve_target(target, pins=pins, matrix=m)
    team = team_requirements(stack, requirements_file=requirements_file, lines=requirements,
                             source=requirements_source)
    out = Path(out)
    lock_text = None
    existing = out / "requirements.lock"
    if lock:
        from envbuilder.lock.requirements import resolve_lock_text

        # the file is named in the lock's header; the project's lines are locked with it
        lock_text = resolve_lock_text(
            stack, requirements_file=requirements_file, index_url=pip_index_url,
            extra_index_urls=extra_index_urls,
            team=team_requirements(stack, lines=requirements, source=requirements_source))
    elif existing.is_file():
        from envbuilder._fs import read_text_capped

        lock_text = read_text_capped(existing, "lock", follow_links=False)
    plan, files = build_files(stack, lock_text=lock_text, lock_source=str(existing),
                              base_image=base_image, pip_index_url=pip_index_url,
                              extra_index_urls=tuple(extra_index_urls), smoke_nproc=nproc,
                              builder_image=builder_image, cuda_arch=cuda_arch or None,
                              cpu_isa=cpu_isa, team_requirements=team)
    files.update(render_jobs(plan, image=image or f"envbuilder:{stack.tag}", layouts=lays,
                             gpus=stack.toolkit is not None if gpus is None else gpus,
                             infiniband=infiniband))
    stack_json = json.loads(files["stack.json"])
    stack_json["smoke"] = {"world_size": nproc, "layouts": [f"{n}x{p}" for n, p in lays],
                           "jobs": "jobs/layouts.json"}
    files["stack.json"] = json.dumps(stack_json, indent=2) + "\n"
    files.update(render_monitoring(target=target, min_busbw_gbps=min_busbw,
                                   job_names=[job_name(target, *lays[0])]))
    if lock_text is not None and not lock:
        files.pop("requirements.lock", None)  # already there: it stays `lock`'s file
    return stack, files, lock_text is not None


def smoke_layouts(nproc: int | None, layouts: Sequence[str] = ()) -> tuple[tuple, int]:
    """(the job files' layouts, the smoke job's world size) for render's ``--nproc`` and
    ``--layout`` options: layouts given set the world size (``--nproc``, when also given, must
    agree); ``--nproc N`` alone is 1xN plus the splits that fit common nodes; neither is 12."""
    from envbuilder.core import layouts as lm

    if layouts:
        lays = lm.parse_layouts(layouts)
        world = lm.world_of(lays)
        if nproc is not None and nproc != world:
            raise InputError(f"--nproc {nproc} disagrees with --layout {','.join(map(lm.fmt, lays))} "
                             f"({world} ranks): drop --nproc or give layouts of {nproc} ranks")
        return lays, world
    world = 12 if nproc is None else nproc
    return lm.default_layouts(world), world


def render_target(target: str, out: str | Path, **kw) -> dict:
    """Resolve and write the build folder (target_files' options). Returns a report (paths,
    stack). Only files envbuilder wrote are replaced (envbuilder._fs)."""
    from envbuilder._fs import write_tree

    stack, files, locked = target_files(target, out, **kw)
    dest = write_tree(out, files, group="render")
    return {"target": target, "out": str(dest), "files": sorted(files), "stack": stack.to_dict(),
            "locked": locked}


def lock_target(target: str, out: str | Path, *, matrix_dir: str | Path | None = None,
                pins: Pins | None = None, check: bool = False, upgrade: bool = False,
                requirements_file: str | Path | None = None, conda: bool = False,
                conda_channels: Sequence[str] = ("conda-forge",), sbom: bool = False,
                pip_index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                exclude_newer: str | None = None, requirements: Sequence[str] = (),
                requirements_source: str = "requirements",
                matrix_overlay: str | Path | None = None) -> dict[str, Any]:
    """Write (or with ``check`` verify offline against its inputs) the hash-pinned lock of a
    target in ``out``, and with ``conda``/``sbom`` (not with ``check``) environment.yml +
    conda-lock.yml and an SBOM, all written together or not at all
    (lock.requirements.write_locks). A lock whose inputs match is kept unless ``upgrade``.
    The team's lines (``requirements``, e.g. a project's) are locked with the stack, within
    its pins. Returns the report ``envbuilder lock --json`` prints."""
    from envbuilder.core import validate
    from envbuilder.lock import requirements as lockreq

    lockreq.parse_exclude_newer(exclude_newer)  # a bad date: exit 2 before any work
    if pip_index_url:
        validate.url(pip_index_url, "--pip-index-url")
    for u in extra_index_urls:
        validate.url(u, "--extra-index-url")
    stack = resolve_target(target, matrix_dir=matrix_dir, pins=pins, matrix_overlay=matrix_overlay)
    team = lockreq.team_requirements(stack, lines=requirements, source=requirements_source)
    res = lockreq.write_locks(stack, Path(out), requirements_file=requirements_file,
                              team=team, index_url=pip_index_url,
                              extra_index_urls=tuple(extra_index_urls), check=check,
                              upgrade=upgrade, exclude_newer=exclude_newer, conda=conda,
                              conda_channels=tuple(conda_channels), sbom=sbom)
    data: dict[str, Any] = {"lock": res["lock"].to_dict(), "target": target, "tag": stack.tag}
    if res["conda"] is not None:
        data["conda"] = res["conda"].to_dict()
    if res["sbom"] is not None:
        data["sbom"] = res["sbom"]
    return data


def render_all(out: str | Path, *, matrix_dir: str | Path | None = None,
               targets: Sequence[str] | None = None,
               matrix_overlay: str | Path | None = None,
               bake: dict[str, Any] | None = None, **kw) -> list[dict]:
    """Render every built-in target (or the given ones) into OUT/<target>/, all or nothing
    (with ``bake``, write_bake's options, OUT/docker-bake.hcl in the same transaction)."""
    from envbuilder._fs import Outputs

    m = load_matrix(matrix_dir, matrix_overlay)
    names = list(targets or builtin_targets(m))
    out = Path(out)
    reports = []
    staged: dict[str, Any] = {}
    with Outputs("render") as tx:
        for name in names:
            stack, files, locked = target_files(name, out / name, matrix=m, **kw)
            tx.add(out / name, files, group="render")
            staged[name] = files
            reports.append({"target": name, "out": str(out / name), "files": sorted(files),
                            "stack": stack.to_dict(), "locked": locked})
        _stage_bake(tx, out, reports, staged, bake)
        tx.commit()
    return reports


def _stage_bake(tx: Any, out: Path, reports: list[dict], staged: dict[str, Any],
                bake: dict[str, Any] | None) -> None:
    """OUT/docker-bake.hcl of the folders staged in ``tx``, added to the same transaction: a
    user's docker-bake.hcl in the way refuses the whole bake before any file is written."""
    if bake is None:
        return
    from envbuilder.render.bake import write_bake

    text = write_bake([(r["target"], out / r["target"]) for r in reports], out / "docker-bake.hcl",
                      staged=staged, write=False, **bake)
    tx.add(out, {"docker-bake.hcl": text}, group="bake", prune=False)


def bake_all(out: str | Path, *, matrix_dir: str | Path | None = None,
             registry: str | None = None, targets: Sequence[str] | None = None,
             **kw: Any) -> dict[str, Any]:
    """Render every built-in target (or ``targets``) into OUT/<target>/ and write
    OUT/docker-bake.hcl. Returns {"bake_file", "targets": [render reports]}."""
    from envbuilder.core import validate

    if registry is not None:
        validate.repository(registry, "--registry")
    out = Path(out)
    reports = render_all(out, matrix_dir=matrix_dir, targets=targets,
                         bake={"registry": registry}, **kw)
    return {"bake_file": str(out / "docker-bake.hcl"), "targets": reports}


def load(matrix_dir: str | Path | None = None,
         matrix_overlay: str | Path | None = None) -> Matrix:
    """The matrix (built-in, or ``matrix_dir`` in its place) with a team's overlay on top."""
    return load_matrix(matrix_dir, matrix_overlay)


def list_targets(*, matrix_dir: str | Path | None = None) -> dict[str, Any]:
    """Every built-in target and what it resolves to (or why it is refused): targets --json."""
    from envbuilder.errors import IncompatibleError

    m = load_matrix(matrix_dir)
    rows: list[dict[str, Any]] = []
    for name in builtin_targets(m):
        alias = m.alias(name)
        try:
            d = resolve_target(name, matrix=m).to_dict()
            rows.append({"name": name, "target": alias.target if alias else name,
                         "description": alias.description if alias else "", "ok": True,
                         "tag": d["tag"], "stack": {k: d[k] for k in (
                             "cuda", "cuda_toolkit", "torch", "python", "nccl", "deepspeed",
                             "horovod", "os", "base_image")}})
        except IncompatibleError as e:
            rows.append({"name": name, "target": alias.target if alias else name,
                         "description": alias.description if alias else "", "ok": False,
                         "error": str(e)})
    return {"matrix": {"path": str(m.path), "digest": m.digest}, "targets": rows}


def builtin_target_names(*, matrix_dir: str | Path | None = None) -> list[str]:
    return builtin_targets(load_matrix(matrix_dir))


def github_matrix(*, matrix_dir: str | Path | None = None) -> dict[str, Any]:
    """The GitHub Actions matrix of every built-in target (targets --github-matrix)."""
    from envbuilder.render import ci

    return ci.github_matrix(load_matrix(matrix_dir))


def write_ci(out: str | Path, *, registry: str, github: bool,
             matrix_dir: str | Path | None = None) -> Path:
    """Write the CI workflow (envbuilder ci); GitHub Actions is the one CI system so far. A
    team matrix (``matrix_dir``) is checked here and used by the workflow's commands."""
    from envbuilder.core import validate
    from envbuilder.render import ci

    if not github:
        raise InputError("ci needs a CI system: --github")
    validate.repository(registry, "--registry")
    if matrix_dir is not None:
        load_matrix(matrix_dir)  # the folder must exist and be a valid matrix
    return ci.write_github_workflow(Path(out), registry=registry, matrix=matrix_dir)


def explain(logs: Sequence[str], *, top: int = 5) -> list[Cause]:
    """The likely causes of a failed job, from its log files ("-" for stdin), best first."""
    from envbuilder.diagnose.explain import explain_files

    return explain_files(list(logs))[:top]


def write_report(path: str | Path, data: Mapping[str, Any]) -> None:
    """A JSON report written atomically (build --report)."""
    import json

    from envbuilder.render.templating import write_file_atomic

    write_file_atomic(Path(path), json.dumps(data, indent=2, default=str) + "\n", step="report")


def apptainer_available() -> bool:
    from envbuilder.run.apptainer import find_apptainer

    return find_apptainer() is not None


def build_sif(image: str, out: str | Path) -> Path:
    """apptainer build OUT.sif from a local Docker image."""
    from envbuilder.run import apptainer

    return apptainer.build_sif(image, Path(out))


def _smoke_layout(layout: str | None, nproc: int | None, nnodes: int | None,
                  progressive: bool) -> tuple[int, int, list[int] | None]:
    """(ranks per node, nodes, uneven rank counts or None) from smoke's --layout (``2x2`` or
    ``7,5``), --nproc-per-node and --nnodes; options given alongside a layout must agree."""
    from envbuilder.core import layouts as lm

    counts = None
    if layout and "x" in layout.lower():
        n, p = lm.parse_layout(layout)
        for opt, given, want in (("--nnodes", nnodes, n), ("--nproc-per-node", nproc, p)):
            if given is not None and given != want:
                raise InputError(f"{opt} {given} disagrees with --layout {n}x{p}: drop {opt}")
        return p, n, None
    if layout:
        try:
            counts = [int(x) for x in layout.split(",")]
        except ValueError:
            raise InputError(f"--layout {layout!r} is neither NNODESxNPROC_PER_NODE (e.g. 2x2) "
                             f"nor ranks per node (e.g. 7,5)") from None
        if progressive:
            raise InputError("--progressive runs even layouts: drop --layout")
        if nnodes is None:
            nnodes = len(counts)
        if nnodes != len(counts):
            raise InputError(f"--layout {layout} names {len(counts)} nodes but --nnodes is "
                             f"{nnodes}: drop --nnodes or name one count per node")
        if nnodes == 1:
            if counts[0] < 1 or (nproc is not None and nproc != counts[0]):
                raise InputError(f"--layout {layout!r} must name at least one rank per node, "
                                 f"agreeing with --nproc-per-node")
            return counts[0], 1, None
    return 12 if nproc is None else nproc, 1 if nnodes is None else nnodes, counts


def smoke(image: str | None, *, host: bool = False, nproc: int | None = None,
          nnodes: int | None = None,
          layout: str | None = None, backend: str = "auto", timeout: int = SMOKE_TIMEOUT,
          progressive: bool = False, min_busbw: float | None = None, shm_size: str = "2g",
          gpus: bool | None = None, records: str | None = None,
          metrics_file: str | Path | None = None, pushgateway: str | None = None,
          labels: Sequence[str] | None = None,
          ) -> tuple[SmokeResult, list[SmokeResult], list[dict[str, Any]], Any]:
    """Run the smoke job in ``image`` (one container, or ``nnodes`` on a private network), on
    this host, or judge a finished run from its ``records`` (a folder, a log, - for stdin); with
    ``metrics_file``/``pushgateway`` export the result as Prometheus metrics (run.metrics).
    ``layout``: ``NxM`` (N nodes of M ranks: ``--nnodes N --nproc-per-node M``) or an uneven
    split ``7,5`` (ranks on each node). ``nproc`` defaults to 12 ranks per node, ``nnodes`` to 1
    (or the nodes the layout names). Returns (the result, every size run with ``progressive``,
    likely causes of a failure, what was exported or None)."""
    from envbuilder.core.validate import image_ref
    from envbuilder.run import metrics as mx
    from envbuilder.run import smoke as sm
    from envbuilder.run.build import explain_log

    if backend not in ("auto", "nccl", "gloo"):
        raise InputError(f"--backend {backend!r} is not one of auto, nccl, gloo")
    metrics_to = mx.check_target(metrics_file, pushgateway)
    overrides = mx.parse_label_overrides(list(labels) if labels else None)
    nproc, nnodes, counts = _smoke_layout(layout, nproc, nnodes, progressive)
    if records is not None and (host or image is not None or progressive):
        raise InputError("--records judges a finished run: give no IMAGE, --host or --progressive")
    if records is None and host == (image is not None):
        raise InputError("smoke needs an IMAGE or --host (not both)")
    ref = image or ""
    if image is not None:
        image_ref(image, "IMAGE")
    client: DockerClient | None = None
    run_one: Callable[[int], SmokeResult]
    if records is not None:
        src = records

        def run_one(n: int) -> SmokeResult:
            return mx.result_from_records(src)
    elif nnodes > 1:
        if host:
            raise InputError("--nnodes > 1 runs one container per node: give an IMAGE, not --host")
        from envbuilder.run.multinode import run_smoke_multinode

        mn_backend = "gloo" if backend == "auto" and not gpus else backend

        def run_one(n: int) -> SmokeResult:
            return run_smoke_multinode(ref, nnodes=nnodes, nproc_per_node=n, layout=counts,
                                       backend=mn_backend, timeout=timeout, shm_size=shm_size,
                                       gpus=gpus)
    elif host:
        def run_one(n: int) -> SmokeResult:
            return sm.run_smoke_host(nproc=n, backend=backend, timeout=timeout)
    else:
        from envbuilder.run.engine import connect

        client = connect()
        c = client

        def run_one(n: int) -> SmokeResult:
            return sm.run_smoke_container(c, ref, nproc=n, backend=backend,
                                          timeout=timeout, gpus=gpus, shm_size=shm_size)
    runs: list[SmokeResult] = []
    if progressive:
        result, runs = sm.run_progressive(run_one, nproc)
    else:
        result = run_one(nproc)
    if min_busbw is not None:
        result = sm.check_min_busbw(result, min_busbw)
    if metrics_to.wanted and image is not None and client is None:
        from envbuilder.run.engine import connect

        client = connect()
    exported = mx.export_run(result, metrics_to, image=image, client=client, overrides=overrides)
    causes = [] if result.ok else explain_log(result.log, details=result.details)
    return result, runs, causes, exported


def verify_matrix(*, matrix_dir: str | Path | None = None, pypi: str = "https://pypi.org/simple",
                  torch_index: str | None = None,
                  progress: Callable[[str], None] | None = None) -> Any:
    """Check the matrix's torch, DeepSpeed and Horovod facts against the package indexes it can
    reach (matrix verify)."""
    from envbuilder.knowledge.indexcheck import verify_matrix as _verify

    return _verify(load_matrix(matrix_dir), pypi=pypi, torch_index=torch_index,
                   progress=progress)


def show_axis(axis: str, *, matrix_dir: str | Path | None = None) -> Any:
    """One axis of the matrix with the source of every row (matrix show)."""
    from envbuilder.knowledge.show import show_axis as _show

    return _show(load_matrix(matrix_dir), axis)


def metrics_target(metrics_file: str | Path | None, pushgateway: str | None) -> Any:
    """Where a build's smoke result goes as Prometheus metrics (checked before any work)."""
    from envbuilder.run.metrics import check_target

    return check_target(metrics_file, pushgateway)


def safe_text(value: Any) -> str:
    """User text fit for a terminal (no escape sequences)."""
    from envbuilder._safety import terminal_safe

    return terminal_safe(value)


def _parent(p: Path) -> Path:
    parent = p.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def image_labels(image: str, client: DockerClient | None = None) -> Mapping[str, str]:
    """The labels of a local image (docker SDK), for doctor --image."""
    from envbuilder.run.engine import connect, image_labels as _labels

    return _labels(client or connect(), image)


def verify_image(image: str, *, matrix_dir: str | Path | None = None,
                 client: DockerClient | None = None) -> VerifyReport:
    """Run the verification payload in ``image`` and compare with its labels (envbuilder verify)."""
    from envbuilder.core import validate
    from envbuilder.run.engine import connect, image_labels as _labels
    from envbuilder.run.verify import verify_image_labels

    validate.image_ref(image, "IMAGE")
    c = client or connect()
    m = load_matrix(matrix_dir)
    ops = {n: o.module for n, o in m.toolchains.deepspeed_ops.items() if o.module}
    return verify_image_labels(c, image, _labels(c, image), ops)


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


# -- projects (envbuilder.toml) ----------------------------------------------------------------

def project_requirements(project: Project | None,
                         requirements_file: str | Path | None = None) -> dict[str, Any]:
    """The team-requirements options of a command run inside ``project``: ``--requirements
    FILE`` when given, else the project's ``requirements`` (a file or a list of lines)."""
    if requirements_file is not None or project is None or not project.has_requirements:
        return {"requirements_file": requirements_file}
    return {"requirements_file": project.requirements_file,
            "requirements": tuple(project.requirements),
            "requirements_source": f"{project.path} requirements"}


def project_targets(project: Project, names: Sequence[str] | None = None,
                    pins: Pins | None = None) -> list[ProjectTarget]:
    """The project's targets (all, or those named): what render|lock|build|bake act on
    without a TARGET. Pin options belong to one TARGET: a project sets pins per target."""
    if pins is not None and pins != Pins():
        raise InputError(f"pin options apply to one TARGET: in the project {project.path} "
                         f"set them on the [[targets]] entry instead")
    if not project.targets:
        raise InputError(f"the project {project.path} lists no [[targets]]: add one, or give "
                         f"a TARGET")
    if not names:
        return list(project.targets)
    out = []
    for n in names:
        t = project.target(n)
        if t is None:
            raise InputError(f"{n!r} is not a target of the project {project.path}; its "
                             f"targets: {', '.join(t.name for t in project.targets)}")
        out.append(t)
    return out


def in_project(project: Project | None, target: str, pins: Pins | None,
               requirements_file: str | Path | None = None) -> tuple[str, Pins | None, dict]:
    """One TARGET run inside ``project``: a project target's name becomes its target string
    and pins; the project's requirements apply (unless ``--requirements`` is given). Returns
    (target, pins, the requirements and matrix-overlay options)."""
    if project is None:
        return target, pins, {"requirements_file": requirements_file}
    t = project.target(target)
    if t is not None and (pins is None or pins == Pins()):
        target, pins = t.target, t.pins
    req = project_requirements(project, requirements_file)
    if project.matrix_overlay is not None:
        req["matrix_overlay"] = project.matrix_overlay
    return target, pins, req


def render_project(project: Project, out: str | Path, *, names: Sequence[str] | None = None,
                   pins: Pins | None = None, matrix_dir: str | Path | None = None,
                   requirements_file: str | Path | None = None,
                   matrix_overlay: str | Path | None = None,
                   bake: dict[str, Any] | None = None, **kw: Any) -> list[dict]:
    """Render the project's targets into OUT/<name>/, all or nothing, each with the team's
    requirements in their own layer (and the project's matrix overlay, unless one is given)."""
    from envbuilder._fs import Outputs

    m = load_matrix(matrix_dir, matrix_overlay or project.matrix_overlay)
    out = Path(out)
    kw.update(project_requirements(project, requirements_file))
    if not kw.get("layouts"):
        kw["layouts"] = project.layouts  # --layout wins over the project's
    reports = []
    staged: dict[str, Any] = {}
    with Outputs("render") as tx:
        for t in project_targets(project, names, pins):
            stack, files, locked = target_files(t.target, out / t.name, matrix=m, pins=t.pins,
                                                **kw)
            tx.add(out / t.name, files, group="render")
            staged[t.name] = files
            reports.append({"target": t.name, "resolved_target": t.target,
                            "out": str(out / t.name), "files": sorted(files),
                            "stack": stack.to_dict(), "locked": locked})
        _stage_bake(tx, out, reports, staged, bake)
        tx.commit()
    return reports


def lock_project(project: Project, out: str | Path, *, names: Sequence[str] | None = None,
                 pins: Pins | None = None, requirements_file: str | Path | None = None,
                 **kw: Any) -> list[dict[str, Any]]:
    """Lock each of the project's targets into OUT/<name>/requirements.lock."""
    kw.update(project_requirements(project, requirements_file))
    kw["matrix_overlay"] = kw.get("matrix_overlay") or project.matrix_overlay
    return [{**lock_target(t.target, Path(out) / t.name, pins=t.pins, **kw), "name": t.name}
            for t in project_targets(project, names, pins)]


def bake_project(project: Project, out: str | Path, *, registry: str | None = None,
                 **kw: Any) -> dict[str, Any]:
    """Render the project's targets into OUT/<name>/ and write OUT/docker-bake.hcl (tags
    under ``registry``, else the project's)."""
    from envbuilder.core import validate

    registry = registry or project.registry
    if registry is not None:
        validate.repository(registry, "--registry" if registry != project.registry
                            else f"registry in {project.path}")
    out = Path(out)
    reports = render_project(project, out, bake={"registry": registry}, **kw)
    return {"bake_file": str(out / "docker-bake.hcl"), "targets": reports}
