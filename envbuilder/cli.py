"""The command line: parse, call the library (envbuilder.api and friends), format.

Exit codes: 0 ok; 1 an operation failed; 2 bad input or usage; 3 an incompatible combination
was refused. Every command takes --json (one JSON document on stdout); those that read the
matrix take --matrix DIR. The pin options are declared once (``with_pins``).
No traceback reaches a user (set ENVBUILDER_DEBUG=1 to see one).
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from envbuilder import SMOKE_TIMEOUT
from envbuilder.errors import EXIT_FAILED, EnvbuilderError

app = typer.Typer(
    name="envbuilder",
    help="Multi-GPU PyTorch training environments that work the first time: a sourced "
         "compatibility matrix, a resolver, Dockerfile/Apptainer renderers, builds with a "
         "12-rank smoke job, locks, and diagnosis of failed jobs.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# -- shared options -------------------------------------------------------------------------
MatrixOpt = typer.Option(None, "--matrix", help="A matrix folder to use instead of the built-in one (replaces it entirely).",
                         metavar="DIR")
OverlayOpt = typer.Option(None, "--matrix-overlay", help="A team's matrix folder whose entries are added to (or replace) the matrix's (default: the project's matrix_overlay).",
                          metavar="DIR")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document for machines.")
TorchOpt = typer.Option(None, "--torch", help="Pin torch: a line (2.1) or a version (2.1.2).")
PythonOpt = typer.Option(None, "--python", help="Pin Python, e.g. 3.10.")
DsOpt = typer.Option(None, "--deepspeed", help="Pin DeepSpeed (and include it).")
HvdOpt = typer.Option(None, "--horovod", help="Pin Horovod (and include it).")
NcclOpt = typer.Option(None, "--nccl", help="Pin NCCL (must be the one torch bundles).")
OsOpt = typer.Option(None, "--os", help="Pin the base OS, e.g. ubuntu22.04.")
DriverOpt = typer.Option(None, "--driver", help="The driver of the hosts the image must run on, e.g. 525.60.13.")
WithOpt = typer.Option(None, "--with", help="Include components: deepspeed,horovod.")
WithoutOpt = typer.Option(None, "--without", help="Exclude components: deepspeed,horovod.")
FlavourOpt = typer.Option(None, "--flavour", metavar="NAME",
                          help="Runtime base flavour: cuda-base (default), cuda-runtime, cudnn-runtime or os.")
DsOpsOpt = typer.Option(None, "--ds-ops", metavar="OPS",
                        help="DeepSpeed ops to pre-build, e.g. fused_adam,cpu_adam (default on CUDA: "
                             "fused_adam,cpu_adam); none: JIT (needs nvcc in the runtime).")
FabricOpt = typer.Option(None, "--fabric", metavar="FABRIC",
                         help="RDMA user space in CUDA images and the job files' RDMA settings: "
                              "ib (default: verbs, rdmacm, ibv_devinfo), efa (+ libfabric, aws-ofi-nccl), none.")
BuilderImageOpt = typer.Option(None, "--builder-image", metavar="IMAGE",
                               help="The builder stage's image (a CUDA devel image when something compiles).")
CudaArchOpt = typer.Option(None, "--cuda-arch", metavar="LIST",
                           help="Narrow the CUDA archs compiled code is built for, e.g. 8.0,9.0 (default: torch's own).")
CpuIsaOpt = typer.Option(None, "--cpu-isa", metavar="ISA",
                         help="-march of compiled CPU code (DeepSpeed CPU ops): x86-64-v3 (default), x86-64-v4, x86-64-v2.")
BaseImageOpt = typer.Option(None, "--base-image",
                            help="The runtime base image (and the builder's, unless it is a CUDA devel image).")


def _version(value: bool) -> None:
    if value:
        from envbuilder import __version__

        sys.stdout.write(f"envbuilder {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print the version and exit.")) -> None:
    # the options of `envbuilder` itself (the help text is the Typer app's)
    pass


def _console(stderr: bool = False) -> Any:
    """A rich Console that honours NO_COLOR (no escapes at all, not even bold) and the
    terminal's width, or COLUMNS; tables on stdout get 200 columns in a file or a pipe (rows
    stay whole for grep), progress on stderr rich's default."""
    from rich.console import Console

    sized = stderr or sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    plain = bool(os.environ.get("NO_COLOR"))  # https://no-color.org: set and not empty
    kw: dict[str, Any] = {"color_system": None} if plain else {}
    return Console(stderr=stderr, width=None if sized else 200, **kw)


def _build_dir(project: Any) -> Path:
    """Where outputs go without -o: build/ here, or inside a project its root's build/ (so
    running from a subfolder writes where the team expects, as cargo's target/ does)."""
    return Path("build") if project is None else project.root / "build"


def _echo_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _fail(err: EnvbuilderError, as_json: bool) -> None:
    from envbuilder._safety import cut, terminal_safe

    if as_json:
        doc = err.to_dict()
        doc["message"] = cut(doc["message"])
        doc["details"] = [cut(str(d), 500) for d in doc["details"][:40]]
        _echo_json(doc)
    msg = terminal_safe(cut(str(err).replace("\n", " ")))
    sys.stderr.write(f"envbuilder: error: {msg}\n")
    if not as_json:
        for line in err.details[:40]:
            sys.stderr.write(f"  {terminal_safe(cut(str(line), 500))}\n")
    raise typer.Exit(err.exit_code)


def command(fn: Callable) -> Callable:
    """Turn library errors into one line and an exit code; Ctrl-C into exit 130."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from envbuilder import _safety

        as_json = bool(kwargs.get("as_json"))
        try:
            _safety.check_arguments(kwargs)
            return fn(*args, **kwargs)
        except EnvbuilderError as e:
            _fail(e, as_json)
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (_safety.Terminated)
            sys.stderr.write("envbuilder: interrupted; nothing was recorded for the step in progress\n")
            raise typer.Exit(_safety.interrupted_exit_code(e)) from None
        except typer.Exit:
            raise
        except Exception as e:  # a bug: one line, the trace only on request
            if _safety.is_broken_pipe(e):
                raise typer.Exit(_safety.stdout_gone()) from None
            clean = _safety.as_clean_error(e)
            if clean is not None and not os.environ.get("ENVBUILDER_DEBUG"):
                _fail(clean, as_json)
            if os.environ.get("ENVBUILDER_DEBUG"):
                raise
            sys.stderr.write(f"envbuilder: internal error: {type(e).__name__}: {e} "
                             f"(set ENVBUILDER_DEBUG=1 for the traceback)\n")
            raise typer.Exit(EXIT_FAILED) from None

    return wrapper


# The pin options, declared once: ``@with_pins`` adds them to a command and hands the command
# one ``pins: Pins`` (core.target.Pins) instead of nine parameters.
_PIN_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("torch", Optional[str], TorchOpt), ("python", Optional[str], PythonOpt),
    ("deepspeed", Optional[str], DsOpt), ("horovod", Optional[str], HvdOpt),
    ("nccl", Optional[str], NcclOpt), ("os_", Optional[str], OsOpt),
    ("driver", Optional[str], DriverOpt), ("with_", Optional[List[str]], WithOpt),
    ("without", Optional[List[str]], WithoutOpt),
    ("flavour", Optional[str], FlavourOpt), ("ds_ops", Optional[str], DsOpsOpt),
    ("fabric", Optional[str], FabricOpt),
)


def with_pins(fn: Callable) -> Callable:
    """Add the pin options to a command that takes ``pins``."""
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.name != "pins"]
    at = next((i for i, p in enumerate(params) if p.name in ("base_image", "matrix", "as_json")),
              len(params))
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann)
             for name, ann, opt in _PIN_OPTIONS]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from envbuilder.api import Pins  # on call: `--help` does not load the library

        v = {name: kwargs.pop(name, None) for name, _, _ in _PIN_OPTIONS}
        kwargs["pins"] = Pins(torch=v["torch"], python=v["python"], deepspeed=v["deepspeed"],
                              horovod=v["horovod"], nccl=v["nccl"], os=v["os_"],
                              driver=v["driver"], with_=tuple(v["with_"] or ()),
                              without=tuple(v["without"] or ()), flavour=v["flavour"],
                              ds_ops=v["ds_ops"], fabric=v["fabric"])
        return fn(*args, **kwargs)

    wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[:at]]
        + added + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[at:]])
    wrapper.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "pins"}
    return wrapper


def _arch(value: Optional[str]) -> tuple[str, ...]:
    return tuple(a.strip() for a in (value or "").replace(";", ",").split(",") if a.strip())


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, no_wrap=i == 0)  # names stay whole, so they can be grepped
    from envbuilder._safety import rich_text

    for r in rows:
        t.add_row(*[rich_text(v) for v in r])  # user text: never markup, never escapes
    _console().print(t)


def _warn(w: dict) -> None:
    from envbuilder._safety import terminal_safe

    sys.stdout.write(terminal_safe(f"warning: {w['rule']}: {w['message']}. {w['fix']}") + "\n")


def _print_stack(d: dict) -> None:
    rows = [[k, d[k] if not isinstance(d[k], dict) else d[k].get("version"),
             d["choices"].get(k, {}).get("reason", "") if k in d["choices"] else ""]
            for k in ("cuda_toolkit", "driver_min", "torch", "torch_variant", "python", "nccl",
                      "deepspeed", "horovod", "os", "base_image", "builder_image")]
    rows[0][2] = d["choices"]["cuda"]["reason"]
    _table(f"{d['target']} -> {d['tag']}", ["axis", "value", "why"], rows)
    for e in d.get("overlay", ()):
        sys.stdout.write(f"overlay{' (used)' if e['used'] else ''}: {e['file']} {e['key']} "
                         f"{e['entry']} {e['action']} from {e['overlay']} (source: {', '.join(e['source'])})\n")
    for w in d["warnings"]:
        _warn(w)


# -- targets, resolve, check, render ---------------------------------------------------------

@app.command()
@command
def targets(matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt,
            github_matrix: bool = typer.Option(False, "--github-matrix",
                                               help="Print the JSON a GitHub Actions matrix consumes.")) -> None:
    """List the built-in targets and what each resolves to."""
    from envbuilder import api

    if github_matrix:
        _echo_json(api.github_matrix(matrix_dir=matrix))
        return
    data = api.list_targets(matrix_dir=matrix)
    rows = data["targets"]
    if as_json:
        _echo_json(data)
        return
    _table("envbuilder targets", ["target", "cuda", "torch", "python", "os", "extras", "base image"],
           [[r["name"], r["stack"]["cuda_toolkit"] or "cpu", r["stack"]["torch"], r["stack"]["python"],
             r["stack"]["os"], " ".join(f"{k} {r['stack'][k]}" for k in ("deepspeed", "horovod")
                                        if r["stack"][k]), r["stack"]["base_image"]]
            if r["ok"] else [r["name"], "refused", r["error"], "", "", "", ""] for r in rows])


@app.command()
@command
@with_pins
def resolve(target: str = typer.Argument(..., help="e.g. cu118, cu121-torch2.1-py310, cpu"),
            pins: Any = None,
            matrix: Optional[str] = MatrixOpt, matrix_overlay: Optional[str] = OverlayOpt,
            as_json: bool = JsonOpt) -> None:
    """Print the resolved stack, or why none exists (exit 3)."""
    from envbuilder.api import find_project, in_project, resolve_target

    target, pins, req = in_project(find_project(), target, pins)
    st = resolve_target(target, matrix_dir=matrix, pins=pins,
                        matrix_overlay=matrix_overlay or req.get("matrix_overlay"))
    d = st.to_dict()
    if as_json:
        _echo_json(d)
    else:
        _print_stack(d)


@app.command()
@command
def check(cuda: Optional[str] = typer.Option(None, "--cuda", help="CUDA version, e.g. 11.8."),
          driver: Optional[str] = DriverOpt, torch: Optional[str] = TorchOpt,
          python: Optional[str] = PythonOpt, nccl: Optional[str] = NcclOpt,
          deepspeed: Optional[str] = DsOpt, horovod: Optional[str] = HvdOpt,
          os_: Optional[str] = OsOpt, flavour: Optional[str] = FlavourOpt,
          matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Judge a (partial) combination; explain every violated rule (exit 3)."""
    from envbuilder.api import check_combination

    r = check_combination(matrix_dir=matrix, cuda=cuda, driver=driver, torch=torch,
                          python=python, nccl=nccl, deepspeed=deepspeed, horovod=horovod, os=os_,
                          flavour=flavour)
    if as_json:
        _echo_json(r)
        return
    given = ", ".join(f"{k} {v}" for k, v in r["given"].items())
    sys.stdout.write(f"ok: {given} can work together")
    sat = {k: v for k, v in r["satisfied_by"].items() if k not in r["given"] or v != r["given"][k]}
    sys.stdout.write(f" (e.g. {', '.join(f'{k} {v}' for k, v in sat.items())})\n" if sat else "\n")
    for w in r["warnings"]:
        _warn(w)


@app.command()
@command
@with_pins
def render(target: Optional[str] = typer.Argument(None, help="The target; omit with --all."),
           out: Optional[Path] = typer.Option(None, "-o", "--out", help="Output folder (default build/<target>; inside a project, its root's build/<name>)."),
           all_: bool = typer.Option(False, "--all", help="Render every built-in target into OUT/<target>/."),
           pins: Any = None,
           base_image: Optional[str] = BaseImageOpt,
           builder_image: Optional[str] = BuilderImageOpt, cuda_arch: Optional[str] = CudaArchOpt,
           cpu_isa: Optional[str] = CpuIsaOpt,
           pip_index_url: Optional[str] = typer.Option(None, "--pip-index-url", help="PyPI mirror."),
           extra_index_url: Optional[List[str]] = typer.Option(None, "--extra-index-url"),
           nproc: Optional[int] = typer.Option(None, "--nproc", min=1, help="Ranks of the smoke job (default 12): job files for one node of N plus splits for 8- and 4-GPU nodes."),
           layout: Optional[List[str]] = typer.Option(None, "--layout", help="Job files for NNODESxNPROC_PER_NODE, e.g. 2x8 (repeat or comma-separate; one world size)."),
           lock: bool = typer.Option(False, "--lock", help="Lock first (uv, hashes) and install with --require-hashes."),
           requirements: Optional[Path] = typer.Option(None, "--requirements", help="With --lock: extra requirements to lock."),
           image: Optional[str] = typer.Option(None, "--image", help="The image the jobs/ files run (by digest when known)."),
           infiniband: bool = typer.Option(False, "--infiniband", help="Job files request IPC_LOCK for RDMA."),
           min_busbw: Optional[float] = typer.Option(None, "--min-busbw", help="monitoring/ alerts when the smoke job's all-reduce busbw falls below this (GB/s)."),
           matrix: Optional[str] = MatrixOpt, matrix_overlay: Optional[str] = OverlayOpt,
           as_json: bool = JsonOpt) -> None:
    """Write the Dockerfile, envbuilder.def, requirements, stack.json, smoke job and job files."""
    from envbuilder.api import render_all, render_target
    from envbuilder.errors import InputError

    kw = dict(matrix_dir=matrix, pins=pins, base_image=base_image, pip_index_url=pip_index_url,
              extra_index_urls=tuple(extra_index_url or ()), nproc=nproc,
              layouts=tuple(layout or ()), lock=lock,
              requirements_file=requirements, image=image, infiniband=infiniband,
              builder_image=builder_image, cuda_arch=_arch(cuda_arch), cpu_isa=cpu_isa,
              min_busbw=min_busbw, matrix_overlay=matrix_overlay)
    if image is not None and all_:
        raise InputError("--image names one image: use it without --all")
    if all_:
        if target is not None:
            raise InputError("render --all takes no TARGET: it renders every built-in target")
        reports = render_all(out or Path("build"), **kw)
        if as_json:
            _echo_json({"rendered": reports})
        else:
            for r in reports:
                sys.stdout.write(f"{r['target']}: {r['stack']['tag']} -> {r['out']}\n")
        return
    from envbuilder.api import find_project, in_project, render_project

    project = find_project()
    if target is None and project is not None:  # the project's targets (envbuilder.toml)
        reports = render_project(project, out or _build_dir(project), **kw)
        if as_json:
            _echo_json({"project": str(project.path), "rendered": reports})
        else:
            for r in reports:
                sys.stdout.write(f"{r['target']}: {r['stack']['tag']} -> {r['out']}\n")
        return
    if target is None:
        raise InputError("render needs a TARGET (e.g. cu118), --all, or a project file "
                         "(envbuilder.toml) in this folder or above")
    name = target
    target, kw["pins"], req = in_project(project, target, pins, requirements)
    kw.update(req)
    kw["matrix_overlay"] = matrix_overlay or req.get("matrix_overlay")
    if project is not None and not kw.get("layouts"):
        kw["layouts"] = project.layouts  # the project's job layouts (--layout wins; none: the defaults)
    r = render_target(target, out or _build_dir(project) / name, **kw)
    if as_json:
        _echo_json(r)
        return
    d = r["stack"]
    sys.stdout.write(f"{target}: {d['tag']} (base {d['base_image']})\n")
    for f in r["files"]:
        sys.stdout.write(f"  {Path(r['out']) / f}\n")
    for w in d["warnings"]:
        _warn(w)


# -- lock, bake, ci -------------------------------------------------------------------------

@app.command()
@command
@with_pins
def lock(target: Optional[str] = typer.Argument(None, help="The target to lock (omit inside a project: its targets)."),
         out: Optional[Path] = typer.Option(None, "-o", "--out", help="Folder for requirements.lock (default build/<target>; inside a project, its root's build/<name>)."),
         check_: bool = typer.Option(False, "--check", help="Verify offline that the lock matches its inputs (exit 1 naming what changed); never reaches an index."),
         upgrade: bool = typer.Option(False, "--upgrade", help="Resolve again even when the inputs are unchanged (takes newer releases)."),
         exclude_newer: Optional[str] = typer.Option(None, "--exclude-newer", metavar="DATE", help="Leave out files uploaded after DATE (ISO date = 00:00 UTC, or time); recorded in the lock."),
         requirements: Optional[Path] = typer.Option(None, "--requirements", help="Extra requirements to lock with the stack."),
         conda: bool = typer.Option(False, "--conda", help="Also write environment.yml and conda-lock.yml (extra: conda)."),
         conda_channel: Optional[List[str]] = typer.Option(None, "--conda-channel", help="Conda channel (default conda-forge)."),
         sbom: bool = typer.Option(False, "--sbom", help="Also write a CycloneDX SBOM (sbom.cdx.json)."),
         pip_index_url: Optional[str] = typer.Option(None, "--pip-index-url", help="Index (mirror) to lock from."),
         extra_index_url: Optional[List[str]] = typer.Option(None, "--extra-index-url"),
         pins: Any = None,
         matrix: Optional[str] = MatrixOpt, matrix_overlay: Optional[str] = OverlayOpt,
         as_json: bool = JsonOpt) -> None:
    """Write the hash-pinned lock for a target (kept when its inputs are unchanged; --upgrade resolves again); --check verifies it offline (the CI gate)."""
    from envbuilder.api import find_project, in_project, lock_project, lock_target
    from envbuilder.errors import InputError

    kw: dict[str, Any] = dict(matrix_dir=matrix, check=check_, upgrade=upgrade,
                              exclude_newer=exclude_newer, conda=conda,
                              conda_channels=tuple(conda_channel or ("conda-forge",)), sbom=sbom,
                              pip_index_url=pip_index_url,
                              extra_index_urls=tuple(extra_index_url or ()),
                              matrix_overlay=matrix_overlay)
    project = find_project()
    if target is None:
        if project is None:
            raise InputError("lock needs a TARGET (e.g. cu121), or a project file "
                             "(envbuilder.toml) in this folder or above")
        locks = lock_project(project, out or _build_dir(project), pins=pins,
                             requirements_file=requirements, **kw)
        if as_json:
            _echo_json({"project": str(project.path), "locks": locks})
        else:
            for d in locks:
                sys.stdout.write(f"{d['name']}: {d['lock']['path']}: {d['lock'].get('status', 'resolved')}, "
                                 f"{len(d['lock']['packages'])} packages, {d['lock']['digest']}\n")
        return
    name = target
    target, pins, req = in_project(project, target, pins, requirements)
    kw["matrix_overlay"] = matrix_overlay or req.pop("matrix_overlay", None)
    data = lock_target(target, out or _build_dir(project) / name, pins=pins, **req, **kw)
    rep = data["lock"]
    if as_json:
        _echo_json(data)
        return
    if check_:
        sys.stdout.write(f"ok: {rep['path']} matches its inputs ({len(rep['packages'])} packages, each pinned with hashes; checked offline)\n")
    elif rep["status"] == "unchanged":
        sys.stdout.write(f"{rep['path']}: unchanged, its inputs match ({len(rep['packages'])} packages, {rep['digest']}); --upgrade resolves again\n")
    else:
        sys.stdout.write(f"{rep['path']}: {len(rep['packages'])} packages, {rep['digest']}\n")
        if rep["changed"]:
            sys.stdout.write(f"  resolved again: {rep['changed'][0]}" + (f" (and {len(rep['changed']) - 1} more)" if len(rep["changed"]) > 1 else "") + "\n")
        for extra in ("conda", "sbom"):
            if extra in data:
                sys.stdout.write(f"{extra}: {data[extra] if isinstance(data[extra], str) else ', '.join(str(v) for k, v in data[extra].items() if k.endswith('path') or k.endswith('file'))}\n")


@app.command()
@command
def bake(out: Optional[Path] = typer.Option(None, "-o", "--out", help="Folder for the targets and docker-bake.hcl (default build/, inside a project its root's build/)."),
         registry: Optional[str] = typer.Option(None, "--registry", help="Repository the tags go under."),
         matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Render every built-in target (inside a project: its targets) and write a docker-bake.hcl
    for docker buildx bake."""
    from envbuilder.api import bake_all, bake_project, find_project

    project = find_project()
    out = out or _build_dir(project)
    if project is not None and project.targets:  # the project's targets (envbuilder.toml)
        r = bake_project(project, out, matrix_dir=matrix, registry=registry)
    else:
        r = bake_all(out, matrix_dir=matrix, registry=registry)
    if as_json:
        _echo_json(r)
    else:
        sys.stdout.write(f"{Path(out) / 'docker-bake.hcl'}: run `docker buildx bake -f docker-bake.hcl` in {out}\n")


@app.command()
@command
def ci(github: bool = typer.Option(False, "--github", help="Write a GitHub Actions workflow."),
       out: Path = typer.Option(Path("."), "-o", "--out", help="Repository root to write .github/workflows/ into."),
       registry: str = typer.Option(..., "--registry", help="Repository to push to, e.g. ghcr.io/org/train."),
       matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Write CI that locks, renders, builds, smoke-tests and pushes every target."""
    from envbuilder.api import write_ci

    path = write_ci(out, registry=registry, github=github, matrix_dir=matrix)
    if as_json:
        _echo_json({"workflow": str(path)})
    else:
        sys.stdout.write(f"{path}\n")


# -- build and smoke ------------------------------------------------------------------------

class _Progress:
    """Build progress on stderr with rich (a bar over Dockerfile steps); silent under --json."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.progress: Any = None
        self.tasks: dict[str, int] = {}

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total}"),
                                     TimeElapsedColumn(), console=_console(stderr=True),
                                     transient=False)
            self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def event(self, target: str, kind: str, data: Any) -> None:
        if self.progress is None:
            return
        if kind == "build-step":
            i, n, text = data
            if target not in self.tasks:
                self.tasks[target] = self.progress.add_task(f"{target}: build", total=n)
            from rich.markup import escape

            from envbuilder._safety import terminal_safe

            self.progress.update(self.tasks[target], completed=i, total=n,
                                 description=escape(terminal_safe(f"{target}: {text[:60]}")))
        elif kind == "step":
            from envbuilder._safety import rich_text

            name, state = data
            self.progress.console.print(rich_text(f"{target}: {name} {state}"))


def _build_opts(base_image, ca_cert, pip_index_url, extra_index_url, wheelhouse, http_proxy,
                https_proxy, no_proxy, tag, push, no_smoke, nproc, backend, smoke_timeout,
                shm_size, context, no_alias, lock=None):
    from envbuilder.api import BuildOptions

    proxies = {k: v for k, v in (("HTTP_PROXY", http_proxy), ("HTTPS_PROXY", https_proxy),
                                 ("NO_PROXY", no_proxy)) if v}
    return BuildOptions(base_image=base_image, ca_cert=ca_cert, pip_index_url=pip_index_url,
                        extra_index_urls=tuple(extra_index_url or ()), wheelhouse=wheelhouse,
                        proxies=proxies, tags=tuple(tag or ()), push=push, smoke=not no_smoke,
                        nproc=nproc, backend=backend, smoke_timeout=smoke_timeout,
                        shm_size=shm_size, context=context, alias=not no_alias, lock=lock)


@app.command()
@command
@with_pins
def build(target: Optional[str] = typer.Argument(None, help="The target; omit with --all."),
          all_: bool = typer.Option(False, "--all", help="Build every built-in target; keep going past failures."),
          only: Optional[List[str]] = typer.Option(None, "--only", help="With --all: only targets containing this text."),
          jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="With --all: builds at once."),
          pins: Any = None,
          base_image: Optional[str] = BaseImageOpt,
          builder_image: Optional[str] = BuilderImageOpt, cuda_arch: Optional[str] = CudaArchOpt,
          cpu_isa: Optional[str] = CpuIsaOpt,
          no_verify: bool = typer.Option(False, "--no-verify", help="Skip checking the image against its labels."),
          ca_cert: Optional[Path] = typer.Option(None, "--ca-cert", help="A PEM CA bundle trusted in the builder stage only."),
          pip_index_url: Optional[str] = typer.Option(None, "--pip-index-url"),
          extra_index_url: Optional[List[str]] = typer.Option(None, "--extra-index-url"),
          wheelhouse: Optional[Path] = typer.Option(None, "--wheelhouse", help="Install Python packages from this folder of wheels, offline."),
          http_proxy: Optional[str] = typer.Option(None, "--http-proxy"),
          https_proxy: Optional[str] = typer.Option(None, "--https-proxy"),
          no_proxy: Optional[str] = typer.Option(None, "--no-proxy"),
          tag: Optional[List[str]] = typer.Option(None, "-t", "--tag", help="Also tag the image NAME[:TAG], as docker does (e.g. myrepo/train:dev); a bare TAG is envbuilder:TAG. With --push, the TAG part is pushed too. Repeatable."),
          push: Optional[str] = typer.Option(None, "--push", help="Push to this repository (registry/name) and record the digest."),
          no_alias: bool = typer.Option(False, "--no-alias", help="Do not move the alias tag named after the target (e.g. cu121)."),
          no_smoke: bool = typer.Option(False, "--no-smoke", help="Skip the smoke job."),
          nproc: int = typer.Option(12, "--nproc", min=1, help="Ranks of the smoke job."),
          backend: str = typer.Option("auto", "--backend", help="auto, nccl or gloo."),
          smoke_timeout: int = typer.Option(SMOKE_TIMEOUT, "--smoke-timeout", min=5, help="Seconds before a collective of the smoke job counts as hung (smoke --timeout)."),
          shm_size: str = typer.Option("2g", "--shm-size"),
          context: Optional[Path] = typer.Option(None, "--context", help="Keep the build context in this folder."),
          lock_file: Optional[Path] = typer.Option(None, "--lock-file", help="Install from this requirements.lock (from envbuilder lock) with --require-hashes."),
          lock_legacy: Optional[Path] = typer.Option(None, "--lock", hidden=True),
          requirements: Optional[Path] = typer.Option(None, "--requirements", help="The team's own requirements, installed in their own layer (default: the project's)."),
          report: Optional[Path] = typer.Option(None, "--report", help="Also write the JSON report here."),
          fmt: str = typer.Option("docker", "--format", help="docker, or apptainer: also build a SIF from the image (needs apptainer)."),
          metrics_file: Optional[Path] = typer.Option(None, "--metrics-file", help="Write the smoke result as Prometheus metrics here (*.prom)."),
          pushgateway: Optional[str] = typer.Option(None, "--pushgateway", help="Push the smoke result as Prometheus metrics to this Pushgateway URL."),
          matrix: Optional[str] = MatrixOpt, matrix_overlay: Optional[str] = OverlayOpt,
          as_json: bool = JsonOpt) -> None:
    """Build the image with the Docker engine, verify it against its labels, run the smoke job
    in it, optionally push it."""
    from envbuilder.api import BuildFailed, build_many, build_target
    from envbuilder.errors import InputError

    if backend not in ("auto", "nccl", "gloo"):
        raise InputError(f"--backend {backend!r} is not one of auto, nccl, gloo")
    if fmt not in ("docker", "apptainer"):
        raise InputError(f"--format {fmt!r} is not one of docker, apptainer")
    if fmt == "apptainer":
        from envbuilder.api import apptainer_available

        if not apptainer_available():
            raise InputError("--format apptainer needs apptainer (or singularity) on PATH; "
                             "without it, build envbuilder.def on your cluster: apptainer build X.sif envbuilder.def")
    if lock_legacy is not None:  # the old `build --lock PATH`: one meaning per name, `--lock` is render's flag
        if lock_file is not None:
            raise InputError("give the lock once: --lock-file PATH (--lock PATH is its old name)")
        sys.stderr.write("envbuilder: warning: build --lock PATH is now --lock-file PATH "
                         "(--lock is render's flag: lock first)\n")
        lock_file = lock_legacy
    opts = _build_opts(base_image, ca_cert, pip_index_url, extra_index_url, wheelhouse,
                       http_proxy, https_proxy, no_proxy, tag, push, no_smoke, nproc, backend,
                       smoke_timeout, shm_size, context, no_alias, lock_file)
    opts.builder_image, opts.cuda_arch, opts.cpu_isa = builder_image, _arch(cuda_arch), cpu_isa
    opts.verify = not no_verify
    opts.validate()  # every path: bad input is one line before any progress display starts
    if all_ and metrics_file is not None:
        raise InputError("--metrics-file holds one run: with --all use --pushgateway (one group per target)")
    from envbuilder.api import metrics_target

    opts.metrics = metrics_target(metrics_file, pushgateway)
    if all_:
        if target is not None:
            raise InputError("build --all takes no TARGET")
        from envbuilder.api import builtin_target_names

        names = [t for t in builtin_target_names(matrix_dir=matrix)
                 if not only or any(o in t for o in only)]
        with _Progress(not as_json) as prog:
            reports = build_many(names, opts, jobs=jobs, matrix_dir=matrix, pins=pins,
                                 on_event=prog.event)
        data = {"ok": all(r.ok for r in reports), "builds": [r.to_dict() for r in reports],
                # the manifest of everything published: what a registry now serves, and why
                "published": [{"target": r.target, "tag": r.tag,
                               "digest": r.pushed[0]["digest"] if r.pushed else None,
                               "tags": [p["tag"] for p in r.pushed],
                               "smoke": None if r.smoke is None else {
                                   "ok": r.smoke["ok"], "world_size": r.smoke["world_size"]}}
                              for r in reports if r.pushed]}
        _write_report(report, data)
        if as_json:
            _echo_json(data)
        else:
            _table("envbuilder build --all", ["target", "tag", "render", "build", "verify", "smoke", "push", "error"],
                   [[r.target, r.tag, *[r.steps[s] for s in ("render", "build", "verify", "smoke", "push")],
                     (r.error or "")[:80]] for r in reports])
        if not data["ok"]:
            raise typer.Exit(EXIT_FAILED)
        return
    from envbuilder.api import find_project, in_project, load, project_targets

    project = find_project()
    if target is None and project is not None:  # the project's targets, one after another
        if fmt == "apptainer" or metrics_file is not None:
            raise InputError("--format apptainer and --metrics-file hold one target: name it")
        results = []
        for t in project_targets(project, pins=pins):
            _, _, req = in_project(project, t.name, None, requirements)
            opts.requirements_file = req.get("requirements_file")
            opts.requirements = tuple(req.get("requirements", ()))
            opts.requirements_source = req.get("requirements_source", "requirements")
            try:
                with _Progress(not as_json) as prog:
                    rep = build_target(t.target, opts, pins=t.pins,
                                       matrix=load(matrix, matrix_overlay or req.get("matrix_overlay")),
                                       on_event=lambda k, d, n=t.name: prog.event(n, k, d))
            except BuildFailed as e:
                rep = e.report
            results.append(rep.to_dict() | {"name": t.name})
        data = {"ok": all(d["ok"] for d in results), "project": str(project.path), "builds": results}
        _write_report(report, data)
        if as_json:
            _echo_json(data)
        else:
            for d in results:
                _print_build(d)
        if not data["ok"]:
            raise typer.Exit(EXIT_FAILED)
        return
    if target is None:
        raise InputError("build needs a TARGET (e.g. cu121), --all, or a project file "
                         "(envbuilder.toml) in this folder or above")
    name = target
    target, pins, req = in_project(project, target, pins, requirements)
    opts.requirements_file = req.get("requirements_file")
    opts.requirements = tuple(req.get("requirements", ()))
    opts.requirements_source = req.get("requirements_source", "requirements")
    try:
        with _Progress(not as_json) as prog:
            r = build_target(target, opts, pins=pins,
                             matrix=load(matrix, matrix_overlay or req.get("matrix_overlay")),
                             on_event=lambda k, d: prog.event(name, k, d))
    except BuildFailed as e:
        _write_report(report, e.report.to_dict())
        if not as_json:
            _print_build(e.report.to_dict())
        raise
    data = r.to_dict()
    if fmt == "apptainer":
        from envbuilder.api import build_sif

        sif = Path(f"{r.tag}.sif")
        build_sif(r.local_tags[0], sif)
        data["sif"] = str(sif)
    _write_report(report, data)
    if as_json:
        _echo_json(data)
    else:
        _print_build(data)


def _write_report(path: Optional[Path], data: dict) -> None:
    if path is None:
        return
    from envbuilder.api import write_report

    write_report(path, data)


def _print_build(d: dict) -> None:
    out = sys.stdout
    out.write(f"{d['target']}: {d.get('tag')}\n")
    for step, state in d["steps"].items():
        secs = d["seconds"].get(step)
        out.write(f"  {step:7} {state}{f' ({secs:.1f} s)' if secs else ''}\n")
    if d.get("image_id"):
        out.write(f"  image   {d['image_id'][:19]} {' '.join(d['local_tags'])}\n")
    s = d.get("smoke")
    if s:
        bw = max((b.get("busbw_gbps", 0) for b in s.get("bandwidth") or []
                  if b.get("collective", "all_reduce") == "all_reduce"), default=None)
        out.write(f"  smoke   world size {s['world_size']} ({s['backend']}), "
                  f"{sum(v == 'pass' for v in s['checks'].values())} checks passed"
                  + (f", failed: {', '.join(s['failed'])}" if s["failed"] else "")
                  + (f", busbw {bw:.2f} GB/s" if bw else "") + "\n")
    for p in d.get("pushed") or []:
        out.write(f"  pushed  {p['repository']}:{p['tag']} {p['digest']}\n")
    for c in d.get("causes") or []:
        out.write(f"  cause   {c['category']} ({c['confidence']:.2f}): {c['title']} -> {c['fix']}\n")


@app.command()
@command
def smoke(image: Optional[str] = typer.Argument(None, help="The image to test (omit with --host)."),
          host: bool = typer.Option(False, "--host", help="Run on this host with its torch, not in a container."),
          nproc: Optional[int] = typer.Option(None, "--nproc", "--nproc-per-node", min=1, help="Ranks per node (default 12)."),
          nnodes: Optional[int] = typer.Option(None, "--nnodes", min=1, help="Nodes (one container each, on a private network; default 1)."),
          layout: Optional[str] = typer.Option(None, "--layout", help="NNODESxNPROC_PER_NODE, e.g. 2x2, or ranks on each node for an uneven split, e.g. 7,5."),
          backend: str = typer.Option("auto", "--backend", help="auto, nccl or gloo."),
          timeout: int = typer.Option(SMOKE_TIMEOUT, "--timeout", min=5, help="Seconds before a collective counts as hung (build --smoke-timeout)."),
          progressive: bool = typer.Option(False, "--progressive", help="Run 2, then 4, then all ranks; stop at the first failing size."),
          min_busbw: Optional[float] = typer.Option(None, "--min-busbw", help="Fail below this all-reduce bus bandwidth (GB/s)."),
          shm_size: str = typer.Option("2g", "--shm-size"),
          gpus: Optional[bool] = typer.Option(None, "--gpus/--no-gpus", help="Request GPUs (default: when the engine has the NVIDIA runtime)."),
          records: Optional[str] = typer.Option(None, "--records", help="Judge a finished run from its records folder or log (- for stdin) instead of running one."),
          metrics_file: Optional[Path] = typer.Option(None, "--metrics-file", help="Write the result as Prometheus metrics here (*.prom, for node-exporter's textfile collector)."),
          pushgateway: Optional[str] = typer.Option(None, "--pushgateway", help="Push the result as Prometheus metrics to this Pushgateway URL."),
          label: Optional[List[str]] = typer.Option(None, "--label", help="A metrics label KEY=VALUE (target, image, image_digest, node)."),
          as_json: bool = JsonOpt) -> None:
    """Run the distributed smoke job in an image (or --host) and report every check."""
    from envbuilder.api import safe_text
    from envbuilder.api import smoke as run_smoke

    result, runs, causes, exported = run_smoke(
        image, host=host, nproc=nproc, nnodes=nnodes, layout=layout, backend=backend,
        timeout=timeout, progressive=progressive, min_busbw=min_busbw, shm_size=shm_size,
        gpus=gpus, records=records, metrics_file=metrics_file, pushgateway=pushgateway,
        labels=label)
    data = result.to_dict()
    data.pop("log", None)
    data["causes"] = causes
    data["metrics"] = exported.to_dict() if exported else None
    if progressive:
        data["progressive"] = [{"world_size": r.world_size, "ok": r.ok, "failed": r.failed} for r in runs]
    if as_json:
        _echo_json(data)
    else:
        if progressive:
            for r in runs:
                sys.stdout.write(f"{r.world_size:3d} ranks: {'ok' if r.ok else 'FAILED ' + ', '.join(r.failed)}\n")
        _table(f"smoke {image or 'host'}: world size {result.world_size}, {result.backend}",
               ["check", "status", "detail"],
               [[k, v, result.details.get(k, "")[:100]] for k, v in result.checks.items()])
        sys.stdout.write(result.bandwidth_table())
        for c in causes:
            sys.stdout.write(f"likely cause: {c['category']} ({c['confidence']:.2f}): {c['title']}\n  fix: {c['fix']}\n")
        if exported:
            sys.stdout.write(f"metrics: {exported.series} series"
                             + (f", written to {exported.written}" if exported.written else "")
                             + (f", pushed to {pushgateway}{exported.pushed}" if exported.pushed else "") + "\n")
    if not result.ok:
        msg = f"the smoke job failed at world size {result.world_size}: {', '.join(result.failed)}"
        first = result.failed[0] if result.failed else None
        if first and result.details.get(first):
            msg += f" ({result.details[first].splitlines()[0][:200]})"
        sys.stderr.write(f"envbuilder: error: {safe_text(msg)}\n")
        raise typer.Exit(EXIT_FAILED)


@app.command()
@command
def verify(image: str = typer.Argument(..., help="An image built by envbuilder (its labels say what it holds)."),
           matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Check that an image is what its labels say: torch, CUDA, the one NCCL loaded, cuDNN,
    Python, Horovod's NCCL, DeepSpeed ops, the NVIDIA variables (no GPU needed; exit 1 on a
    mismatch)."""
    from envbuilder.api import safe_text, verify_image

    r = verify_image(image, matrix_dir=matrix)
    d = r.to_dict()
    if as_json:
        _echo_json(d)
    else:
        _table(f"envbuilder verify {image}", ["check", "ok", "detail"],
               [[c["name"], "ok" if c["ok"] else "FAIL", c["detail"]] for c in d["checks"]])
    if not r.ok:
        if not as_json:
            sys.stderr.write(f"envbuilder: error: {safe_text(image)} is not what its labels say: "
                             f"{safe_text(r.summary())}\n")
        raise typer.Exit(EXIT_FAILED)


# -- doctor and explain ---------------------------------------------------------------------

@app.command()
@command
def doctor(target: Optional[str] = typer.Option(None, "--target", help="Also judge this host against a target's stack."),
           image: Optional[str] = typer.Option(None, "--image", help="Also judge this host against an envbuilder image (its labels)."),
           nproc: Optional[int] = typer.Option(None, "--nproc", min=1, help="Ranks the job will run on this host."),
           matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Check this host: driver, GPUs, topology, /dev/shm, InfiniBand, NCCL settings, container."""
    from envbuilder.api import doctor as run_doctor

    checks = run_doctor(target=target, image=image, nproc=nproc, matrix_dir=matrix)
    failed = [c for c in checks if c.status == "fail"]
    if as_json:
        _echo_json({"ok": not failed, "checks": [c.to_dict() for c in checks]})
    else:
        _table("envbuilder doctor", ["check", "status", "value", "detail / fix"],
               [[c.name, c.status, c.value, c.detail + (f" Fix: {c.fix}" if c.fix and c.status != "ok" else "")]
                for c in checks])
    if failed:
        if not as_json:
            sys.stderr.write(f"envbuilder: error: {len(failed)} check(s) failed: "
                             f"{', '.join(c.name for c in failed)}\n")
        raise typer.Exit(EXIT_FAILED)


@app.command()
@command
def explain(logs: Optional[List[str]] = typer.Argument(None, help="Log files, or - for stdin (the default when stdin is a pipe or a file)."),
            top: int = typer.Option(5, "--top", min=1, help="How many causes to show."),
            as_json: bool = JsonOpt) -> None:
    """Name the likely causes of a failed distributed job from its logs, with fixes."""
    from envbuilder.api import explain, safe_text
    from envbuilder.errors import InputError

    if not logs:
        if sys.stdin is None or sys.stdin.isatty():
            raise InputError("explain needs a LOG file, - for stdin, or a log piped in "
                             "(envbuilder explain < job.log)")
        logs = ["-"]
    causes = explain(logs, top=top)
    if as_json:
        _echo_json({"causes": [c.to_dict() for c in causes]})
    else:
        for i, c in enumerate(causes, 1):
            sys.stdout.write(f"{i}. {c.category} ({c.confidence:.0%}): {c.title}\n")
            for ev in c.evidence[:3]:
                sys.stdout.write(safe_text(f"   {ev.file}:{ev.line_no}: {ev.text.strip()[:160]}") + "\n")
            sys.stdout.write(f"   check: {c.check}\n   fix:   {c.fix}\n   see:   {c.source}\n")
    if not causes:
        sys.stderr.write("envbuilder: nothing in the log matched a known failure\n")
        raise typer.Exit(EXIT_FAILED)


# -- matrix: the knowledge itself (logic in envbuilder.knowledge) ----------------------------
matrix_app = typer.Typer(help="Read the matrix (show) or check it against the package indexes (verify).",
                         no_args_is_help=True)
app.add_typer(matrix_app, name="matrix")


@matrix_app.command("verify")
@command
def matrix_verify(pypi: str = typer.Option("https://pypi.org/simple", "--pypi-index-url", help="PyPI or a mirror."),
                  torch_index: Optional[str] = typer.Option(None, "--torch-index", help="PyTorch's index template with {variant}."),
                  matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Check torch releases, variants, NCCL pins and Python tags, and DeepSpeed/Horovod releases and requires-python, against the reachable indexes (exit 1 on a disagreement)."""
    from envbuilder.api import verify_matrix

    con = _console(stderr=True)
    con.quiet = as_json
    with con.status("verify") as st:
        rep = verify_matrix(matrix_dir=matrix, pypi=pypi, torch_index=torch_index,
                            progress=lambda msg: st.update(msg))
    if as_json:
        _echo_json(rep.to_dict())
    else:
        for f in rep.findings:
            sys.stdout.write(f"{f.kind}: {f}\n")
        sys.stdout.write(f"{len(rep.agreed)} facts agree; {len(rep.of('disagree'))} disagreements, "
                         f"{len(rep.of('new'))} new, {len(rep.of('skipped'))} skipped, {len(rep.of('unverified'))} unverified\n")
    if not rep.ok:
        raise typer.Exit(EXIT_FAILED)


@matrix_app.command("show")
@command
def matrix_show(axis: str = typer.Argument(..., help="cuda, torch, nccl, os, base_images, deepspeed, horovod or incompatibilities."),
                matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Print one axis of the matrix with the source of every row."""
    from envbuilder.api import show_axis

    t = show_axis(axis, matrix_dir=matrix)
    if as_json:
        return _echo_json(t.to_dict())
    _table(f"matrix: {axis}", [*t.columns, "source"], [[*r, " ".join(s)] for r, s in zip(t.rows, t.sources)])


# -- readable metavars ---------------------------------------------------------------------
# typer shows Python types (<str>, <list[str]>, <int range>) where a value goes; the help shows
# what to write instead. By parameter name first, then by type; a parameter with its own
# metavar keeps it. tests/test_cli.py scans every command's --help for Python types.
_METAVARS = {
    "target": "TARGET", "logs": "LOG", "axis": "AXIS",
    "image": "IMAGE", "base_image": "IMAGE", "push": "REPO", "registry": "REPO",
    "tag": "NAME[:TAG]", "label": "KEY=VALUE", "layout": "N,N,...",
    "torch": "VERSION", "python": "VERSION", "deepspeed": "VERSION", "horovod": "VERSION",
    "nccl": "VERSION", "driver": "VERSION", "cuda": "VERSION", "os_": "OS",
    "with_": "NAME,...", "without": "NAME,...", "only": "TEXT", "conda_channel": "CHANNEL",
    "pip_index_url": "URL", "extra_index_url": "URL", "pushgateway": "URL", "pypi": "URL",
    "torch_index": "URL", "http_proxy": "URL", "https_proxy": "URL", "no_proxy": "HOSTS",
    "out": "DIR", "wheelhouse": "DIR", "context": "DIR", "records": "PATH",
    "backend": "auto|nccl|gloo", "fmt": "docker|apptainer", "shm_size": "SIZE",
    "min_busbw": "GB/S", "timeout": "SECONDS", "smoke_timeout": "SECONDS",
}
_METAVAR_BY_TYPE = {str: "TEXT", int: "N", float: "NUMBER", Path: "FILE"}


def _readable_metavars(group: typer.Typer) -> None:
    from typing import get_args

    from typer.models import ArgumentInfo, OptionInfo
    from typer.utils import get_params_from_function

    for info in group.registered_commands:
        if info.callback is None:
            continue
        declared = inspect.signature(info.callback).parameters  # the objects typer will copy
        for name, p in get_params_from_function(info.callback).items():  # resolved annotations
            d = declared[name].default
            if not isinstance(d, (OptionInfo, ArgumentInfo)) or d.metavar is not None:
                continue
            ann = p.annotation
            while get_args(ann):  # Optional[X], List[X] -> X
                ann = next(a for a in get_args(ann) if a is not type(None))
            if ann is bool:
                continue
            d.metavar = _METAVARS.get(name) or _METAVAR_BY_TYPE.get(ann, "TEXT")
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _readable_metavars(sub.typer_instance)


_readable_metavars(app)


def _argument_types_off() -> None:
    """typer prints an argument as ``TARGET <str>`` even with a metavar: the metavar alone."""
    from typer.core import TyperArgument

    shown = getattr(TyperArgument, "display_type_rich", None)
    if shown is None:  # pragma: no cover - a typer without per-argument types
        return

    def display_type_rich(self: Any, ctx: Any) -> Any:
        return None if self.metavar else shown(self, ctx)

    TyperArgument.display_type_rich = display_type_rich  # type: ignore[method-assign]


_argument_types_off()


def main() -> None:  # console-script entry point
    """Run the CLI; usage errors (unknown option, missing argument) become one line, exit 2."""
    try:
        from typer._click.exceptions import NoArgsIsHelpError, UsageError
    except ImportError:  # pragma: no cover - typer before it vendored click
        from click.exceptions import UsageError  # type: ignore[assignment]

        NoArgsIsHelpError = ()  # type: ignore[assignment,misc]
    import typer.main

    from envbuilder import _safety

    _safety.install_signal_handlers()
    try:  # building the command is inside: Ctrl-C there is "interrupted" too, not a traceback
        rv = typer.main.get_command(app).main(prog_name="envbuilder", standalone_mode=False)
    except KeyboardInterrupt as e:  # outside a command (while parsing)
        sys.stderr.write("envbuilder: interrupted\n")
        rv = _safety.interrupted_exit_code(e)

    except OSError as e:
        if not _safety.is_broken_pipe(e):
            raise
        rv = _safety.stdout_gone()
    except NoArgsIsHelpError as e:  # type: ignore[misc]
        sys.stdout.write(e.ctx.get_help() + "\n")
        rv = 0
    except UsageError as e:
        where = e.ctx.command_path if e.ctx else "envbuilder"
        msg = " ".join(e.format_message().split())
        if "--json" in sys.argv[1:]:
            _echo_json({"error": "UsageError", "message": msg, "details": [], "exit_code": 2})
        sys.stderr.write(f"envbuilder: error: {msg} (see: {where} --help)\n")
        rv = 2
    except typer.Abort:
        sys.stderr.write("envbuilder: interrupted\n")
        rv = EXIT_FAILED
    if rv == 130 and _safety.LAST_SIGNAL is not None:
        # typer turns a signal that lands while it parses into exit 130: say which signal
        sys.stderr.write("envbuilder: interrupted\n")
        rv = _safety.interrupted_exit_code()
    _safety.restore_signal_handlers()  # the work is done: a late signal just ends us
    try:
        sys.stdout.flush()
    except OSError as e:
        if not _safety.is_broken_pipe(e):
            raise
        rv = _safety.stdout_gone()
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
