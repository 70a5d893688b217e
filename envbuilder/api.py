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
from envbuilder.core.project import Project, find_project
from envbuilder.core import resolve
from envbuilder.core import spec as spec_mod
from envbuilder.core.resolve import Stack
from envbuilder.core.spec import Outcome, Overrides, TargetSpec
from envbuilder.core.target import Pins, Request, apply_options, request

__all__ = ["Outcome", "Overrides", "Pins", "Project", "TargetSpec", "apptainer_available",
           "bake", "bake_all", "build", "build_sif", "build_target", "builtin_target_names",
           "builtin_targets", "check_combination", "doctor", "explain", "explain_report", "find_project",
           "github_matrix", "image_labels", "list_targets", "load", "lock", "lock_target",
           "make_spec", "out_dir", "render", "render_all", "render_target", "request",
           "resolve_spec", "resolve_target", "smoke", "spec_files", "target_specs",
           "verify_image", "write_ci", "write_report", "diff", "diff_lines", "inspect_image",
           "inspect_lines", "image_source", "init_project", "complete"]

if TYPE_CHECKING:
    from docker import DockerClient

    from envbuilder.diagnose.doctor import Check
    from envbuilder.diagnose.explain import Cause, Report
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


# -- specs: what every command acts on (core.spec: the one cascade) --------------------------

def make_spec(target: str, *, project: Project | None = None, pins: Pins | None = None,
              **fields: Any) -> TargetSpec:
    """One target's spec through the cascade: ``fields`` are command-line values
    (core.spec.Overrides' fields: base_image, requirements_file, layouts, nproc ...)."""
    return spec_mod.make_spec(target, project=project,
                              overrides=Overrides(pins=pins or Pins(), **_overrides(fields)))


def _overrides(fields: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(fields)
    for key in ("extra_index_urls", "layouts", "cuda_arch"):
        if key in out:
            out[key] = tuple(out[key] or ())
    for key in ("matrix_overlay", "requirements_file"):
        if out.get(key) is not None:
            out[key] = Path(out[key])
    return out


def target_specs(target: str | None, *, all_: bool = False, only: Sequence[str] = (),
                 overrides: Overrides | None = None, command: str = "render",
                 matrix_dir: str | Path | None = None,
                 project: Project | None | bool = True) -> list[TargetSpec]:
    """The specs a command acts on: one TARGET (a project target's name too), ``--all``
    (narrowed by ``--only``) or, inside a project, its targets (core.spec.select)."""
    proj = find_project() if project is True else (project or None)
    builtin: list[str] = []
    if all_:
        o = overrides or Overrides()
        builtin = builtin_targets(load_matrix(matrix_dir, o.matrix_overlay))
    return spec_mod.specs(target, all_=all_, only=only, project=proj, builtin=builtin,
                          overrides=overrides, command=command)


def spec_matrix(spec: TargetSpec, matrix_dir: str | Path | None = None) -> Matrix:
    """The matrix a spec resolves against: ``--matrix`` (or the built-in) with its overlay."""
    return load_matrix(matrix_dir, spec.matrix_overlay)


def resolve_spec(spec: TargetSpec, *, matrix_dir: str | Path | None = None,
                 matrix: Matrix | None = None) -> Stack:
    m = matrix or spec_matrix(spec, matrix_dir)
    return resolve.resolve_target(spec.target, m, spec.pins)


def resolve_target(target: str, *, matrix_dir: str | Path | None = None, pins: Pins | None = None,
                   matrix: Matrix | None = None,
                   matrix_overlay: str | Path | None = None) -> Stack:
    m = matrix or load_matrix(matrix_dir, matrix_overlay)
    return resolve.resolve_target(target, m, pins)


def builtin_targets(matrix: Matrix) -> list[str]:
    return [t.name for t in matrix.targets]


def builtin_target_names(*, matrix_dir: str | Path | None = None) -> list[str]:
    return builtin_targets(load_matrix(matrix_dir))


def out_dir(spec: TargetSpec, out: str | Path | None, *, single: bool) -> Path:
    """Where a target's outputs go: ``-o DIR`` itself for one TARGET, DIR/<name> for several;
    without ``-o``, build/<name> (inside a project, its root's build/)."""
    from envbuilder.core.validate import path_segment

    if single and out is not None:
        return Path(out)
    root = Path(out) if out is not None else (
        spec.project.parent / "build" if spec.project is not None else Path("build"))
    return root / path_segment(spec.name, "target name")


def check_combination(*, matrix_dir: str | Path | None = None, cuda: str | None = None,
                      driver: str | None = None, torch: str | None = None,
                      python: str | None = None, nccl: str | None = None,
                      deepspeed: str | None = None, horovod: str | None = None,
                      os: str | None = None, flavour: str | None = None,
                      matrix_overlay: str | Path | None = None) -> dict:
    """Judge a partial combination using only the axes given (envbuilder check), against the
    matrix with the overlay given (default: the project's)."""
    if matrix_overlay is None:
        proj = find_project()
        matrix_overlay = proj.matrix_overlay if proj is not None else None
    m = load_matrix(matrix_dir, matrix_overlay)
    given = {ax for ax, v in (("cuda", cuda), ("torch", torch), ("python", python),
                              ("nccl", nccl), ("deepspeed", deepspeed), ("horovod", horovod),
                              ("os", os), ("flavour", flavour)) if v is not None}
    if cuda is None and driver is not None and torch is None:
        raise InputError("--driver needs --cuda or --torch: a driver is judged against a CUDA "
                         "version, or against the CUDA builds of a torch release")
    if not given:
        raise InputError("check needs at least one of --cuda, --torch, --python, --nccl, "
                         "--deepspeed, --horovod, --os, --flavour")
    req = Request(target="check")
    req = apply_options(req, m, cuda=cuda, driver=driver, torch=torch, python=python,
                        nccl=nccl, deepspeed=deepspeed, horovod=horovod, os=os, flavour=flavour)
    if cuda is None and driver is not None:  # driver first: which CUDA builds of torch run
        from dataclasses import replace as _replace

        resolve.check(_replace(req, driver=None), m, given)  # the other pins, as without a driver
        return resolve.driver_check(req, m)
    assignment, warnings = resolve.check(req, m, given)
    return {"ok": True,
            "given": {k: v for k, v in req.pins().items()} | ({"driver": driver} if driver else {}),
            "satisfied_by": {k: "cpu" if k == "cuda" and v is None else resolve._show(v)
                             for k, v in assignment.items() if k in given},
            "warnings": [w.to_dict() for w in warnings]}


# -- render, lock, bake: build folders from specs (envbuilder.assemble) ----------------------

def spec_files(spec: TargetSpec, out: str | Path, *, matrix_dir: str | Path | None = None,
               matrix: Matrix | None = None, lock: bool = False) -> tuple:
    """(stack, {relative path: content}, locked) of the build folder ``out`` would get.

    A ``requirements.lock`` already in ``out`` (from ``envbuilder lock``), or one made now with
    ``lock=True``, is installed with ``--require-hashes``; one already there stays ``lock``'s
    file (it is not rewritten by render)."""
    from envbuilder.assemble import folder_files

    stack = resolve_spec(spec, matrix_dir=matrix_dir, matrix=matrix)
    existing = Path(out) / "requirements.lock"
    lock_text = None
    if lock:
        lock_text = _lock_text(spec, stack)
    elif existing.is_file():
        from envbuilder._fs import read_text_capped

        lock_text = read_text_capped(existing, "lock", follow_links=False)
    _, files = folder_files(spec, stack, lock_text=lock_text, lock_source=str(existing))
    if lock_text is not None and not lock:
        files.pop("requirements.lock", None)  # already there: it stays `lock`'s file
    return stack, files, lock_text is not None


def _lock_text(spec: TargetSpec, stack: Stack) -> str:
    from envbuilder.lock.requirements import resolve_lock_text, team_requirements

    return resolve_lock_text(
        stack, requirements_file=spec.requirements_file, index_url=spec.pip_index_url,
        extra_index_urls=spec.extra_index_urls, exclude_newer=spec.exclude_newer,
        team=team_requirements(stack, lines=spec.requirements, source=spec.requirements_source))


def _report(spec: TargetSpec, out: Path, stack: Stack, files: Mapping[str, Any],
            locked: bool) -> dict[str, Any]:
    return {"target": spec.name, "resolved_target": spec.target, "out": str(out),
            "files": sorted(files), "stack": stack.to_dict(), "locked": locked}


def render(specs: Sequence[TargetSpec], out: str | Path | None = None, *, single: bool = False,
           matrix_dir: str | Path | None = None, lock: bool = False) -> list[dict]:
    """Render every spec's build folder, as one transaction: every target is resolved and
    rendered first; if any is refused nothing is written, and the error names each refused
    target. Returns one report per target. Only files envbuilder wrote are replaced."""
    from envbuilder._fs import Outputs

    made = spec_mod.run_each(specs, "render", lambda s: (
        out_dir(s, out, single=single),
        *spec_files(s, out_dir(s, out, single=single), matrix_dir=matrix_dir, lock=lock)))
    _raise_failed(made)
    with Outputs("render") as tx:
        for o in made:
            assert o.value is not None
            tx.add(o.value[0], o.value[2], group="render")
        tx.commit()
    return [_report(o.spec, *o.value) for o in made if o.value is not None]


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
                  **fields: Any) -> dict:
    """Resolve and write one target's build folder (a library shortcut for ``render``:
    ``fields`` are TargetSpec fields; no project file is read)."""
    from envbuilder._fs import write_tree

    spec = make_spec(target, pins=pins, **fields)
    stack, files, locked = spec_files(spec, out, matrix_dir=matrix_dir, matrix=matrix, lock=lock)
    dest = write_tree(out, files, group="render")
    return _report(spec, dest, stack, files, locked)


def render_all(out: str | Path, *, matrix_dir: str | Path | None = None,
               targets: Sequence[str] | None = None, **fields: Any) -> list[dict]:
    """Render every built-in target (or the given ones) into OUT/<target>/, all or nothing."""
    names = list(targets or builtin_target_names(matrix_dir=matrix_dir))
    lock = bool(fields.pop("lock", False))
    pins = fields.pop("pins", None)
    return render([make_spec(n, pins=pins, **fields) for n in names], out,
                  matrix_dir=matrix_dir, lock=lock)


def lock(specs: Sequence[TargetSpec], out: str | Path | None = None, *, single: bool = False,
         matrix_dir: str | Path | None = None, check: bool = False, upgrade: bool = False,
         conda: bool = False, conda_channels: Sequence[str] = ("conda-forge",),
         sbom: bool = False) -> list[Outcome[dict[str, Any]]]:
    """Write (or with ``check`` verify offline against its inputs) each spec's hash-pinned
    lock; keep going past a target that fails and name it (core.spec.run_each)."""
    from envbuilder.core import validate
    from envbuilder.lock import requirements as lockreq
    from envbuilder.lock.write import write_locks

    for s in specs:  # bad input: exit 2 before any work
        lockreq.parse_exclude_newer(s.exclude_newer)
        if s.pip_index_url:
            validate.url(s.pip_index_url, "--pip-index-url")
        for u in s.extra_index_urls:
            validate.url(u, "--extra-index-url")

    def one(s: TargetSpec) -> dict[str, Any]:
        dest = out_dir(s, out, single=single)
        stack = resolve_spec(s, matrix_dir=matrix_dir)
        team = lockreq.team_requirements(stack, lines=s.requirements, source=s.requirements_source)
        res = write_locks(stack, dest, requirements_file=s.requirements_file, team=team,
                                  index_url=s.pip_index_url, extra_index_urls=s.extra_index_urls,
                                  check=check, upgrade=upgrade, exclude_newer=s.exclude_newer,
                                  conda=conda, conda_channels=tuple(conda_channels), sbom=sbom,
                                  command=s.invocation("lock"))
        data: dict[str, Any] = {"name": s.name, "target": s.name, "tag": stack.tag,
                                "lock": res["lock"].to_dict(),
                                "warnings": [w for w in stack.to_dict()["warnings"]]}
        for extra in ("conda", "sbom"):
            if res[extra] is not None:
                data[extra] = res[extra].to_dict() if hasattr(res[extra], "to_dict") else res[extra]
        return data

    return spec_mod.run_each(specs, "lock", one)


def lock_target(target: str, out: str | Path, *, matrix_dir: str | Path | None = None,
                pins: Pins | None = None, check: bool = False, upgrade: bool = False,
                conda: bool = False, conda_channels: Sequence[str] = ("conda-forge",),
                sbom: bool = False, **fields: Any) -> dict[str, Any]:
    """One target's lock (a library shortcut for ``lock``; ``fields`` are TargetSpec fields)."""
    (o,) = lock([make_spec(target, pins=pins, **fields)], out, single=True,
                matrix_dir=matrix_dir, check=check, upgrade=upgrade, conda=conda,
                conda_channels=conda_channels, sbom=sbom)
    if o.error is not None:
        raise o.error
    assert o.value is not None
    return o.value


def bake(specs: Sequence[TargetSpec], out: str | Path | None = None, *,
         registry: str | None = None, matrix_dir: str | Path | None = None) -> dict[str, Any]:
    """Render the specs into OUT/<name>/ and write OUT/docker-bake.hcl (tags under
    ``registry``, else the specs' own: a project's), all in one transaction: every target is
    rendered and every folder (and the bake file) checked before anything is written."""
    from envbuilder._fs import Outputs
    from envbuilder.core import validate
    from envbuilder.render.bake import bake_hcl, summary

    registry = registry or next((s.registry for s in specs if s.registry), None)
    if registry is not None:
        validate.repository(registry, "--registry")
        # the job files pull the tags the bake file gives
        import dataclasses

        specs = [dataclasses.replace(s, registry=registry) for s in specs]
    root = Path(out) if out is not None else (
        specs[0].project.parent / "build" if specs and specs[0].project is not None else Path("build"))
    made = spec_mod.run_each(specs, "render", lambda s: (
        out_dir(s, root, single=False),
        *spec_files(s, out_dir(s, root, single=False), matrix_dir=matrix_dir)))
    _raise_failed(made)
    path = root / "docker-bake.hcl"
    text = bake_hcl([(o.spec.name, o.value[0], o.value[2]) for o in made if o.value is not None],
                    path, registry=registry)
    with Outputs("bake") as tx:
        for o in made:
            assert o.value is not None
            tx.add(o.value[0], o.value[2], group="render")
        tx.add(root, {"docker-bake.hcl": text}, group="bake", prune=False)
        tx.commit()
    return {"bake_file": str(path), "targets": [_report(o.spec, *o.value) for o in made if o.value],
            "bake": summary(text)}


def bake_all(out: str | Path, *, matrix_dir: str | Path | None = None,
             registry: str | None = None, targets: Sequence[str] | None = None,
             **fields: Any) -> dict[str, Any]:
    """Bake every built-in target (or ``targets``): a library shortcut for ``bake``."""
    names = list(targets or builtin_target_names(matrix_dir=matrix_dir))
    return bake([make_spec(n, **fields) for n in names], out, registry=registry,
                matrix_dir=matrix_dir)


def build(specs: Sequence[TargetSpec], opts: BuildOptions, *, jobs: int = 1,
          matrix_dir: str | Path | None = None, client: DockerClient | None = None,
          on_event: Callable[[str, str, Any], None] | None = None) -> list[BuildReport]:
    """Build, verify, smoke-test and (with opts.push) push every spec, at most ``jobs`` at
    once; keep going past failures; one report per target (run.build)."""
    from envbuilder.run import build as b

    opts.validate()
    return b.build_many(specs, opts, jobs=jobs, matrix_dir=matrix_dir, client=client,
                        on_event=on_event)


def preflight(specs: Sequence[TargetSpec], *, matrix_dir: str | Path | None = None) -> None:
    """Bad input or a refused combination, before any build starts: one line, exit 2 or 3
    (for one TARGET; a set reports each target's failure and goes on)."""
    from envbuilder.run.build import validate_spec

    for s in specs:
        validate_spec(s)
        resolve_spec(s, matrix_dir=matrix_dir)


def build_target(spec: TargetSpec | str, opts: BuildOptions, **kw: Any) -> BuildReport:
    """Render, build, smoke-test and (with opts.push) push one target (run.build)."""
    from envbuilder.run import build as b

    return b.build_target(spec if isinstance(spec, TargetSpec) else make_spec(spec), opts, **kw)


def list_targets(specs: Sequence[TargetSpec] | None = None, *,
                 matrix_dir: str | Path | None = None) -> dict[str, Any]:
    """What each target (the built-in ones, or ``specs``: a project's) resolves to, or why it
    is refused: targets --json."""
    from envbuilder.errors import IncompatibleError

    m = load_matrix(matrix_dir)
    if specs is None:
        specs = [make_spec(n) for n in builtin_targets(m)]
    rows: list[dict[str, Any]] = []
    for s in specs:
        alias = m.alias(s.target)
        row = {"name": s.name, "target": alias.target if alias else s.target,
               "description": alias.description if alias else ""}
        try:
            d = resolve_spec(s, matrix_dir=matrix_dir,
                             matrix=m if s.matrix_overlay is None else None).to_dict()
            rows.append(row | {"ok": True, "tag": d["tag"], "warnings": d["warnings"],
                               "stack": {k: d[k] for k in (
                                   "cuda", "cuda_toolkit", "torch", "python", "nccl",
                                   "deepspeed", "horovod", "os", "base_image")}})
        except IncompatibleError as e:
            rows.append(row | {"ok": False, "error": str(e)})
    return {"matrix": {"path": str(m.path), "digest": m.digest}, "targets": rows}


def github_matrix(specs: Sequence[TargetSpec] | None = None, *,
                  matrix_dir: str | Path | None = None) -> dict[str, Any]:
    """The GitHub Actions matrix of the targets (built-in, or a project's): targets
    --github-matrix."""
    from envbuilder.render import ci

    m = load_matrix(matrix_dir)
    return ci.github_matrix(m, targets=None if specs is None else [
        (s.name, resolve_spec(s, matrix_dir=matrix_dir)) for s in specs])


def write_ci(out: str | Path, *, registry: str | None, github: bool,
             matrix_dir: str | Path | None = None) -> Path:
    """Write the CI workflow (envbuilder ci); GitHub Actions is the one CI system so far. The
    registry defaults to the project's; a team matrix (``matrix_dir``) is checked here."""
    from envbuilder.core import validate
    from envbuilder.render import ci

    if not github:
        raise InputError("ci needs a CI system: --github")
    proj = find_project()
    if registry is None and proj is not None:
        registry = proj.registry
    if registry is None:
        raise InputError("ci needs --registry (or a project file with registry = ...)")
    validate.repository(registry, "--registry")
    if matrix_dir is not None:
        load_matrix(matrix_dir)  # the folder must exist and be a valid matrix
    return ci.write_github_workflow(Path(out), registry=registry, matrix=matrix_dir)


def explain(logs: Sequence[str], *, top: int = 5) -> list[Cause]:
    """The likely causes of a failed job, from its log files ("-" for stdin), best first."""
    from envbuilder.diagnose.explain import explain_files

    return explain_files(list(logs))[:top]


def explain_report(logs: Sequence[str], *, top: int = 5) -> Report:
    """The facts read from the logs (and flight-recorder dumps) and the likely causes, best
    first (``report.to_dict()`` is the ``explain --json`` document)."""
    from dataclasses import replace

    from envbuilder.diagnose.explain import analyse_files

    report = analyse_files(list(logs))
    return replace(report, causes=report.causes[:top])


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


def doctor(*, spec: TargetSpec | None = None, image: str | None = None, nproc: int | None = None,
           matrix_dir: str | Path | None = None) -> list[Check]:
    """Check this host, and judge it against a target's stack or an image's labels."""
    from envbuilder import labels
    from envbuilder.core.validate import image_ref
    from envbuilder.diagnose.doctor import run_doctor

    if spec is not None and image:
        raise InputError("doctor takes --target or --image, not both")
    facts = None
    if spec is not None:
        facts = labels.StackFacts.from_stack(resolve_spec(spec, matrix_dir=matrix_dir))
    elif image:
        facts = labels.read(image_labels(image_ref(image, "--image")))
    return run_doctor(stack=facts, nproc=nproc)


def load(matrix_dir: str | Path | None = None,
         matrix_overlay: str | Path | None = None) -> Matrix:
    """The matrix (built-in, or ``matrix_dir`` in its place) with a team's overlay on top."""
    return load_matrix(matrix_dir, matrix_overlay)


def build_options(*, lock: str | Path | None = None, lock_legacy: str | Path | None = None,
                  fmt: str = "docker", metrics_file: str | Path | None = None,
                  pushgateway: str | None = None, several: bool = False,
                  proxies: Mapping[str, str | None] | None = None, **kw: Any) -> BuildOptions:
    """The build's own options (run.build.BuildOptions), checked before any work: bad input is
    one line (exit 2) before any progress display starts."""
    from envbuilder.run.build import BuildOptions

    if fmt not in ("docker", "apptainer"):
        raise InputError(f"--format {fmt!r} is not one of docker, apptainer")
    if fmt == "apptainer" and several:
        raise InputError("--format apptainer builds one SIF: name one TARGET")
    if fmt == "apptainer" and not apptainer_available():
        raise InputError("--format apptainer needs apptainer (or singularity) on PATH; without "
                         "it, build envbuilder.def on your cluster: apptainer build X.sif envbuilder.def")
    if lock_legacy is not None:  # the old `build --lock PATH`: --lock is render's flag
        if lock is not None:
            raise InputError("give the lock once: --lock-file PATH (--lock PATH is its old name)")
        lock = lock_legacy
    if several and (metrics_file is not None or kw.get("context") is not None):
        raise InputError("--metrics-file and --context hold one build: name one TARGET (with "
                         "several, use --pushgateway: one group per target)")
    opts = BuildOptions(lock=Path(lock) if lock is not None else None,
                        proxies={k: v for k, v in (proxies or {}).items() if v},
                        metrics=metrics_target(metrics_file, pushgateway), **kw)
    opts.validate()
    return opts


def build_summary(reports: Sequence[BuildReport], *, single: bool,
                  fmt: str = "docker") -> dict[str, Any]:
    """What build prints and writes with --report: one target's report, or for several each
    report and the manifest of everything published (what a registry now serves, and why)."""
    if single:
        (r,) = reports
        data = r.to_dict()
        if r.ok and fmt == "apptainer":
            sif = Path(f"{r.tag}.sif")
            build_sif(r.local_tags[0], sif)
            data["sif"] = str(sif)
        return data
    proj = find_project()
    return {"ok": all(r.ok for r in reports), "project": str(proj.path) if proj else None,
            "builds": [r.to_dict() for r in reports],
            "published": [{"target": r.target, "tag": r.tag,
                           "digest": r.pushed[0]["digest"] if r.pushed else None,
                           "tags": [p["tag"] for p in r.pushed],
                           "smoke": None if r.smoke is None else {
                               "ok": r.smoke["ok"], "world_size": r.smoke["world_size"]}}
                          for r in reports if r.pushed]}


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
    from envbuilder.assemble import folder_files

    spec = make_spec(arg, project=find_project(), pins=pins, matrix_overlay=matrix_overlay)
    try:
        stack = resolve_spec(spec, matrix_dir=matrix_dir, matrix=matrix)
    except InputError:
        if not any(c in arg for c in ":/@"):
            raise
        labels, _ = image_source(arg, where=where, client=client)
        return Side("image", arg, facts=facts_from_labels(labels))
    # the build folder `render` would write (inside a project: with the team's requirements
    # in their layer)
    _, files = folder_files(spec, stack)

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
