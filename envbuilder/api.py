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
                 matrix_overlay: str | Path | None = None,
                 registry: str | None = None) -> tuple:
    """(stack, {relative path: content}, locked) of the build folder ``out`` would get.

    A ``requirements.lock`` already in ``out`` (from ``envbuilder lock``), or one made now with
    ``lock=True``, is installed with ``--require-hashes`` (see build_files). ``layouts`` (``2x8``,
    or several: ``1x16,2x8``) lay the job files out and set the smoke job's world size; ``nproc``
    alone is one node of that many plus the splits that fit 8- and 4-GPU nodes (default 12).
    The team's own requirements (``requirements_file`` and/or the lines ``requirements``, e.g. a
    project's) get a layer of their own above torch and the compiled layers; with a lock they
    are locked with the stack. Without ``image`` the job files pull ``registry:<tag>`` (the
    tag ``build --push registry`` and ``bake --registry`` give it), else the local
    ``envbuilder:<tag>``."""
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

        lock_text = read_text_capped(existing, "lock")
    plan, files = build_files(stack, lock_text=lock_text, lock_source=str(existing),
                              base_image=base_image, pip_index_url=pip_index_url,
                              extra_index_urls=tuple(extra_index_urls), smoke_nproc=nproc,
                              builder_image=builder_image, cuda_arch=cuda_arch or None,
                              cpu_isa=cpu_isa, team_requirements=team)
    if registry is not None:
        from envbuilder.core import validate

        validate.repository(registry, "--registry")
    default_image = f"{registry}:{stack.tag}" if registry else f"envbuilder:{stack.tag}"
    files.update(render_jobs(plan, image=image or default_image, layouts=lays,
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
               matrix_overlay: str | Path | None = None, **kw) -> list[dict]:
    """Render every built-in target (or the given ones) into OUT/<target>/, all or nothing."""
    from envbuilder._fs import Outputs

    m = load_matrix(matrix_dir, matrix_overlay)
    names = list(targets or builtin_targets(m))
    out = Path(out)
    reports = []
    with Outputs("render") as tx:
        for name in names:
            stack, files, locked = target_files(name, out / name, matrix=m, **kw)
            tx.add(out / name, files, group="render")
            reports.append({"target": name, "out": str(out / name), "files": sorted(files),
                            "stack": stack.to_dict(), "locked": locked})
        tx.commit()
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
    reports = render_all(out, matrix_dir=matrix_dir, targets=targets, registry=registry, **kw)
    write_bake([(r["target"], out / r["target"]) for r in reports], out / "docker-bake.hcl",
               registry=registry)
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


def show_axis(axis: str, *, matrix_dir: str | Path | None = None,
              filters: Mapping[str, str | None] | None = None) -> Any:
    """One axis of the matrix with the source of every row (matrix show); ``filters``
    (``{"torch": "2.6", "cuda": "12.4"}``) keep the rows they match."""
    from envbuilder.knowledge.show import filter_rows, show_axis as _show

    t = _show(load_matrix(matrix_dir), axis)
    given = {k: v for k, v in (filters or {}).items() if v}
    return filter_rows(t, given) if given else t


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
                   matrix_overlay: str | Path | None = None, **kw: Any) -> list[dict]:
    """Render the project's targets into OUT/<name>/, all or nothing, each with the team's
    requirements in their own layer (and the project's matrix overlay, unless one is given)."""
    from envbuilder._fs import Outputs

    m = load_matrix(matrix_dir, matrix_overlay or project.matrix_overlay)
    out = Path(out)
    kw.update(project_requirements(project, requirements_file))
    if not kw.get("layouts"):
        kw["layouts"] = project.layouts  # --layout wins over the project's
    if not kw.get("registry"):
        kw["registry"] = project.registry  # the job files pull the project's images
    reports = []
    with Outputs("render") as tx:
        for t in project_targets(project, names, pins):
            stack, files, locked = target_files(t.target, out / t.name, matrix=m, pins=t.pins,
                                                **kw)
            tx.add(out / t.name, files, group="render")
            reports.append({"target": t.name, "resolved_target": t.target,
                            "out": str(out / t.name), "files": sorted(files),
                            "stack": stack.to_dict(), "locked": locked})
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
    from envbuilder.render.bake import write_bake

    registry = registry or project.registry
    if registry is not None:
        validate.repository(registry, "--registry" if registry != project.registry
                            else f"registry in {project.path}")
    out = Path(out)
    reports = render_project(project, out, registry=registry, **kw)  # job files pull the baked tags
    write_bake([(r["target"], out / r["target"]) for r in reports], out / "docker-bake.hcl",
               registry=registry)
    return {"bake_file": str(out / "docker-bake.hcl"), "targets": reports}


# -- daily use: diff, inspect, init (issue 23) -------------------------------------------------

def image_source(image: str, *, where: str = "auto",
                 client: DockerClient | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """(labels, provenance of the read) of ``image``: from the engine (``where="engine"``), from
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

            return image_provenance(client or connect(timeout=30), image)
        except (InputError, OperationError):
            if where == "engine":
                raise
    from envbuilder.run.registry import image_labels as registry_labels

    return registry_labels(image)


def inspect_image(image: str, *, where: str = "auto", matrix_dir: str | Path | None = None,
                  client: DockerClient | None = None) -> dict[str, Any]:
    """``envbuilder inspect``: the stack ``image``'s labels declare and its provenance
    (knowledge.inspect), the matrix digest compared with the matrix in use now."""
    from envbuilder.knowledge.inspect import stack_from_labels

    labels, src = image_source(image, where=where, client=client)
    try:
        now: str | None = load_matrix(matrix_dir).digest
    except InputError:
        now = None
    return stack_from_labels(image, labels, src, matrix_digest_now=now)


def inspect_lines(d: Mapping[str, Any]) -> tuple[list[list[str]], list[str]]:
    """(table rows, provenance lines) of an inspect_image result, for printing."""
    from envbuilder.knowledge.inspect import provenance_lines, rows

    return rows(d), provenance_lines(d)


def _diff_side(arg: str, *, matrix: Matrix | None, matrix_dir: str | Path | None,
               matrix_overlay: str | Path | None, pins: Pins | None,
               where: str, client: DockerClient | None) -> Any:
    """One argument of ``envbuilder diff`` read into a knowledge.diff.Side: an existing path is
    a build folder (with stack.json) or a lock; else a project target's name or a target; else
    an image reference (engine or registry)."""
    import json

    from envbuilder._fs import read_text_capped
    from envbuilder.knowledge.diff import Side, facts_from_labels, facts_from_lock_record, \
        facts_from_stack
    from envbuilder.lock.requirements import read_header, read_lock

    p = Path(arg)
    if p.exists():
        folder = p if p.is_dir() else p.parent if p.name == "stack.json" else None
        if folder is not None:
            if not (folder / "stack.json").is_file():
                raise InputError(f"{arg} is a folder without stack.json: give a build folder "
                                 f"(envbuilder render writes one) or a requirements.lock")
            sj = json.loads(read_text_capped(folder / "stack.json", "stack.json"))
            lock = folder / "requirements.lock"
            pkgs = ({x.name: x.version for x in read_lock(read_text_capped(lock, "lock"))}
                    if lock.is_file() else None)

            def read(rel: str, root: Path = folder) -> bytes | None:
                f = (root / rel).resolve()
                if not str(f).startswith(str(root.resolve())):
                    return None
                if f.is_dir():
                    return b"".join(x.relative_to(f).as_posix().encode() + b"\0" + x.read_bytes()
                                    for x in sorted(f.rglob("*")) if x.is_file())
                return f.read_bytes() if f.is_file() else None

            df = folder / "Dockerfile"
            return Side("build", arg, facts=facts_from_stack(sj), packages=pkgs,
                        dockerfile=df.read_text() if df.is_file() else None, read=read)
        text = read_text_capped(p, "lock")
        locked = read_lock(text)
        if not locked:
            raise InputError(f"{arg} holds no pinned package: give a requirements.lock "
                             f"(envbuilder lock writes one), a build folder or a target")
        record, _, _ = read_header(text)
        return Side("lock", arg, facts=facts_from_lock_record(record or {}),
                    packages={x.name: x.version for x in locked},
                    via={x.name: x.via for x in locked})
    project = find_project()
    target, tpins, req = in_project(project, arg, pins)
    try:
        m = matrix or load_matrix(matrix_dir, matrix_overlay or req.get("matrix_overlay"))
        stack = resolve.resolve_target(target, m, tpins)
    except InputError:
        if not any(c in arg for c in ":/@"):
            raise
        labels, _ = image_source(arg, where=where, client=client)
        return Side("image", arg, facts=facts_from_labels(labels))
    # the image part of the build folder `render` would write (inside a project: with the
    # team's requirements in their layer)
    from envbuilder.lock.requirements import team_requirements

    team = team_requirements(stack, requirements_file=req.get("requirements_file"),
                             lines=req.get("requirements", ()),
                             source=req.get("requirements_source", "requirements"))
    _, files = build_files(stack, team_requirements=team)

    blobs = {k: v.encode() if isinstance(v, str) else v for k, v in files.items()}

    def mem(rel: str, blobs: Mapping[str, bytes] = blobs) -> bytes | None:
        rel = rel.rstrip("/")
        if rel in blobs:
            return blobs[rel]
        inner = sorted(k for k in blobs if k.startswith(rel + "/"))
        if not inner:
            return None
        return b"".join(k[len(rel) + 1:].encode() + b"\0" + blobs[k] for k in inner)

    sj = json.loads(files["stack.json"])
    dockerfile = files.get("Dockerfile")
    return Side("target", arg, facts=facts_from_stack(sj),
                dockerfile=dockerfile if isinstance(dockerfile, str) else None, read=mem)


def diff(a: str, b: str, *, matrix_dir: str | Path | None = None,
         matrix_a: str | Path | None = None, matrix_overlay: str | Path | None = None,
         pins: Pins | None = None, where: str = "auto",
         client: DockerClient | None = None) -> dict[str, Any]:
    """``envbuilder diff A B`` (knowledge.diff): A and B are targets (with ``pins``), build
    folders, locks or images. ``matrix_a``: resolve A against another matrix (an older copy),
    to see what a matrix update moves."""
    from envbuilder.knowledge.diff import diff as _diff

    m = load_matrix(matrix_dir, matrix_overlay) if matrix_dir or matrix_overlay else None
    ma = load_matrix(matrix_a, matrix_overlay) if matrix_a else m
    kw: dict[str, Any] = dict(matrix_dir=matrix_dir, matrix_overlay=matrix_overlay, pins=pins,
                              where=where, client=client)
    return _diff(_diff_side(a, matrix=ma, **kw), _diff_side(b, matrix=m, **kw))


def diff_lines(d: Mapping[str, Any]) -> list[str]:
    """The lines ``envbuilder diff`` prints after its table (packages, layers that rebuild)."""
    from envbuilder.knowledge.diff import text_lines

    return text_lines(d)


def init_project(folder: str | Path = ".", *, driver: str | None = None,
                 gpus_per_node: int | None = None, nodes: int = 1, registry: str | None = None,
                 with_: Sequence[str] = (), name: str = "train", torch: str | None = None,
                 matrix_dir: str | Path | None = None, probe: Any = None) -> dict[str, Any]:
    """``envbuilder init``: write ``folder/envbuilder.toml`` (and a requirements.txt stub when
    there is none) for a cluster (core.init). Facts not given are read from this host the way
    doctor reads them (the driver, the GPUs and their compute capabilities); an existing
    envbuilder.toml is never overwritten (InputError)."""
    import os
    import tomllib

    from envbuilder.core import init
    from envbuilder.core.project import parse_project

    folder = Path(folder)
    dest = folder / init.PROJECT_FILE
    if dest.exists():
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
    text = init.project_toml(choice, name=name, source=source)
    written: list[str] = []
    req = folder / init.REQUIREMENTS_FILE
    tmp = folder / f".{init.PROJECT_FILE}.{os.getpid()}.tmp"
    try:
        if not req.exists():
            req.write_text(init.REQUIREMENTS_STUB, encoding="utf-8")
            written.append(str(req))
        parse_project(dest, tomllib.loads(text))  # the schema accepts what is written
        tmp.write_text(text, encoding="utf-8")
        os.link(tmp, dest)  # fails if a file appeared meanwhile: never overwrites
    except BaseException as e:
        for w in written:  # nothing half-written
            Path(w).unlink(missing_ok=True)
        if isinstance(e, FileExistsError):
            raise InputError(f"{dest} already exists: edit it, or remove it to start again "
                             f"(envbuilder init never overwrites it)") from None
        raise
    finally:
        tmp.unlink(missing_ok=True)
    written.insert(0, str(dest))
    return {"project": str(dest), "written": written, "source": source, "name": name,
            **choice.to_dict()}


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
