"""The command line: parse, build the target specs, call the library (envbuilder.api), format.

Exit codes: 0 ok; 1 an operation failed; 2 bad input or usage; 3 an incompatible combination
was refused. Every command takes --json (one JSON document on stdout); those that read the
matrix take --matrix DIR. Options that feed a target's spec are declared once
(envbuilder.ui.options) and merged in one cascade (envbuilder.core.spec): the command line >
the project's target > the project > the defaults. Output lives in envbuilder.ui.output.
No traceback reaches a user (set ENVBUILDER_DEBUG=1 to see one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from envbuilder import SMOKE_TIMEOUT
from envbuilder.errors import EXIT_FAILED, EXIT_INCOMPATIBLE
from envbuilder.ui import daily
from envbuilder.ui import diagnose as diagnose_ui
from envbuilder.ui import knowledge as knowledge_ui
from envbuilder.ui import rebuild as rebuild_ui
from envbuilder.ui.options import (CASCADE, COMPONENT_CHECKED, COMPONENTS, BackendOpt, DriverOpt, FlavourOpt,
                                   JsonOpt, MatrixOpt, NcclOpt, OsOpt, PythonOpt, ShmOpt,
                                   SmokeTimeoutOpt, TorchOpt, complete_target,
                                   spec_options)
from envbuilder.ui.output import (Progress, argument_types_off, command, echo_json,
                                  exit_for_failures, print_build, print_lock, print_warnings, print_wheelhouse, print_smoke, print_stack, readable_metavars, run_app, say,
                                  table, evidence, warn)

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
TargetArg = typer.Argument(None, autocompletion=complete_target, help="A target (cu121, cu121-torch2.3-ds) or a project target's name; omit for --all or the project's targets.")
AllOpt = typer.Option(False, "--all", help="Every built-in target (each into OUT/<target>/).")
OnlyOpt = typer.Option(None, "--only", help="With --all or a project's targets: only targets containing this text (repeatable).")
OutOpt = typer.Option(None, "-o", "--out", help="Output folder: one TARGET's own, else OUT/<name>/ for each (default build/; inside a project, its root's build/).")


def _version(value: bool) -> None:
    if value:
        from envbuilder import __version__

        say(f"envbuilder {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print the version and exit.")) -> None:
    # the options of `envbuilder` itself (the help text is the Typer app's)
    pass


def _specs(target: Optional[str], over: Any, *, all_: bool = False, only: Optional[List[str]] = None,
           command: str, matrix: Optional[str] = None) -> list:
    from envbuilder.api import target_specs

    from envbuilder.api import naming_warnings

    specs = target_specs(target, all_=all_, only=tuple(only or ()), given=over,
                         command=command, matrix_dir=matrix)
    for w in naming_warnings(specs):
        say(f"envbuilder: {w}", err=True)
    return specs


# -- targets, resolve, check, render ---------------------------------------------------------

@app.command()
@command
def targets(matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt,
            all_: bool = typer.Option(False, "--all", help="The built-in targets, also inside a project."),
            github_matrix: bool = typer.Option(False, "--github-matrix", help="Print the JSON a GitHub Actions matrix consumes.")) -> None:
    """List the targets (inside a project: its targets; else the built-in ones) and what each resolves to."""
    from envbuilder import api

    chosen = api.target_specs(None, all_=all_, command="targets", matrix_dir=matrix, or_builtin=True)
    specs = chosen if any(s.from_project for s in chosen) else None  # the built-in ones: by name
    if github_matrix:
        return echo_json(api.github_matrix(specs, matrix_dir=matrix).to_dict())
    data = api.list_targets(specs, matrix_dir=matrix).to_dict()
    if as_json:
        echo_json(data)
    else:
        table("envbuilder targets", ["target", "cuda", "torch", "python", "os", "extras", "base image"],
              [[r["name"], r["stack"]["cuda_toolkit"] or "cpu", r["stack"]["torch"], r["stack"]["python"],
                r["stack"]["os"], " ".join(f"{k} {r['stack'][k]}" for k in COMPONENTS
                                           if r["stack"][k]), r["stack"]["base_image"]]
               if r["ok"] else [r["name"], "refused", r["error"], "", "", "", ""] for r in data["targets"]])
    if not all(r["ok"] for r in data["targets"]):  # a refused target: exit 3, as resolve does
        raise typer.Exit(EXIT_INCOMPATIBLE)


@app.command(help="Print the resolved stack, or why none exists (exit 3)." + CASCADE)
@command
@spec_options("pins", "overlay", "exclude_newer")
def resolve(target: Optional[str] = typer.Argument(None, autocompletion=complete_target, help="e.g. cu118, cu121-torch2.1-py310, cpu, or a project target's name; omit inside a project: its targets"),
            over: Any = None, matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    from envbuilder.api import resolve_each

    outcomes = resolve_each(_specs(target, over, command="resolve"), matrix_dir=matrix)
    if target is not None and outcomes[0].error is not None:
        raise outcomes[0].error  # one TARGET: its one line and exit code
    stacks = [(o, o.value.to_dict()) for o in outcomes if o.value is not None]
    if as_json:
        echo_json(stacks[0][1] if target is not None else {"ok": all(o.ok for o in outcomes), "resolved": [
            {"name": o.spec.name, **d} for o, d in stacks],
            "failed": [{"target": o.spec.name, "error": o.error.to_dict()} for o in outcomes if o.error is not None]})
    for o, d in stacks if not as_json else ():
        if target is None:
            say(f"{o.spec.name}:")
        print_stack(d)
    exit_for_failures(outcomes)


@app.command()
@command
@spec_options(*COMPONENTS, before="os_")  # each component's pin (--NAME VERSION), into over
def check(cuda: Optional[str] = typer.Option(None, "--cuda", help="CUDA version, e.g. 11.8."),
          driver: Optional[str] = DriverOpt, torch: Optional[str] = TorchOpt,
          python: Optional[str] = PythonOpt, nccl: Optional[str] = NcclOpt,
          os_: Optional[str] = OsOpt, flavour: Optional[str] = FlavourOpt, over: Any = None,
          matrix_overlay: Optional[Path] = typer.Option(None, "--matrix-overlay", metavar="DIR", help="A team's matrix folder added to the matrix (default: the project's matrix_overlay)."),
          matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Judge a (partial) combination; explain every violated rule (exit 3)."""
    from envbuilder.api import check_combination

    r = check_combination(matrix_dir=matrix, cuda=cuda, driver=driver, torch=torch,
                          python=python, nccl=nccl, os=os_, flavour=flavour, matrix_overlay=matrix_overlay,
                          **{c: over.get(c) for c in COMPONENTS}).to_dict()
    if as_json:
        return echo_json(r)
    given = ", ".join(f"{k} {v}" for k, v in r["given"].items())
    sat = {k: v for k, v in r["satisfied_by"].items() if k not in r["given"] or v != r["given"][k]}
    say(f"ok: {given} can work together"
        + (f" (e.g. {', '.join(f'{k} {v}' for k, v in sat.items())})" if sat else ""))
    for d in r.get("driver", ()):  # driver first (--driver with --torch, no --cuda)
        say(f"  torch {d['torch']}+{d['variant']}: driver >= {d['driver_min']} (CUDA {d['toolkit']}): {d['runs']}")
    for e in r.get("evidence", ()):
        evidence(e)
    for w in r["warnings"]:
        warn(w)


@app.command(help="Write the Dockerfile, envbuilder.def, requirements, stack.json, smoke job and job files: one TARGET, --all, or the project's targets (all or nothing)." + CASCADE)
@command
@spec_options("pins", "overlay", "requirements", "images", "index", "exclude_newer", "jobs", "registry")
def render(target: Optional[str] = TargetArg, out: Optional[Path] = OutOpt,
           all_: bool = AllOpt, only: Optional[List[str]] = OnlyOpt,
           lock: bool = typer.Option(False, "--lock", help="Lock first (uv, hashes) and install with --require-hashes."),
           quiet: bool = typer.Option(False, "-q", "--quiet", help="Print only warnings, not the files written."),
           take_jobs: bool = typer.Option(False, "--take-jobs", help="Write envbuilder's new jobs/ files over hand-edited ones, keeping each edited file as FILE.edited."),
           over: Any = None, matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    from envbuilder.api import render as render_specs

    specs = _specs(target, over, all_=all_, only=only, command="render", matrix=matrix)
    reports = [r.to_dict() for r in render_specs(specs, out, single=target is not None, matrix_dir=matrix,
                                                 lock=lock, take_jobs=take_jobs)]
    if as_json:
        return echo_json(reports[0] if target is not None else {"rendered": reports})
    for r in reports if not quiet else ():
        d = r["stack"]
        say(f"{r['target']}: {d['tag']} (base {d['base_image']}) -> {r['out']}")
        if not r["jobs"]["pinned"]:
            say(f"  jobs/ pull {r['jobs']['image']} by tag: `build --push REPO --context DIR` pins them to the digest")
        if target is not None:
            say(*(f"  {Path(r['out']) / f}" for f in r["files"]))
    print_warnings(reports)


# -- lock, bake, ci -------------------------------------------------------------------------

@app.command(help="Write each target's hash-pinned lock (kept when its inputs are unchanged; --upgrade resolves again); --check verifies it offline (the CI gate)." + CASCADE)
@command
@spec_options("pins", "overlay", "requirements", "index", "exclude_newer", "base_image", "builder_image")
def lock(target: Optional[str] = TargetArg, out: Optional[Path] = OutOpt,
         all_: bool = AllOpt, only: Optional[List[str]] = OnlyOpt,
         check_: bool = typer.Option(False, "--check", help="Verify offline that the lock matches its inputs (exit 1 naming what changed); never reaches an index."),
         upgrade: bool = typer.Option(False, "--upgrade", help="Resolve again even when the inputs are unchanged (takes newer releases)."),
         conda: bool = typer.Option(False, "--conda", help="Also write environment.yml and conda-lock.yml (extra: conda)."),
         conda_channel: Optional[List[str]] = typer.Option(None, "--conda-channel", help="Conda channel (default conda-forge)."),
         sbom: bool = typer.Option(False, "--sbom", help="Also write a CycloneDX SBOM (sbom.cdx.json)."),
         system: bool = typer.Option(False, "--system", help="Also pin the base and builder images by digest and every apt package by version, resolved in those images through the Docker engine; with --check, compare them with the images and the mirror now (online)."),
         over: Any = None, matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    from envbuilder.api import lock as lock_specs

    specs = _specs(target, over, all_=all_, only=only, command="lock", matrix=matrix)
    outcomes = lock_specs(specs, out, single=target is not None, matrix_dir=matrix, check=check_,
                          upgrade=upgrade, conda=conda, sbom=sbom, system=system,
                          conda_channels=tuple(conda_channel or ("conda-forge",)))
    done = [o.value.to_dict() for o in outcomes if o.value is not None]
    if as_json and (target is None or done):
        echo_json(done[0] if target is not None else {
            "ok": all(o.ok for o in outcomes), "locks": done,
            "failed": [{"target": o.spec.name, "step": o.step, "error": o.error.to_dict()}
                       for o in outcomes if o.error is not None]})
    elif not as_json:
        for d in done:
            print_lock(d, check_, len(outcomes) > 1)
        print_warnings(done)
    if target is not None and outcomes[0].error is not None:
        raise outcomes[0].error
    exit_for_failures(outcomes)


@app.command(help="Download exactly the files of a lock (requirements.lock, or its folder) for its Python and platform into DIR, each checked against the lock's hashes; files already there with a right hash are kept. --check: offline, exit 2 naming the files DIR lacks.")
@command
def wheelhouse(lock: Path = typer.Argument(..., help="A requirements.lock from envbuilder lock, or the folder holding it."),
               out: Path = typer.Option(..., "--out", "-o", help="The wheelhouse folder to fill (build --wheelhouse DIR installs from it)."),
               check_: bool = typer.Option(False, "--check", help="Only check, offline, that DIR holds every locked file (exit 2 naming the missing)."),
               as_json: bool = JsonOpt) -> None:
    from envbuilder import api

    with Progress(not as_json) as prog:
        rep = api.wheelhouse(lock, out, check=check_, on_event=prog.event)
    echo_json(rep.to_dict()) if as_json else print_wheelhouse(rep.to_dict())


@app.command(help="Render the project's targets (else every built-in target) and write a docker-bake.hcl for docker buildx bake." + CASCADE)
@command
@spec_options("overlay", "requirements", "images", "index", "exclude_newer", "registry")
def bake(out: Optional[Path] = OutOpt, all_: bool = AllOpt, only: Optional[List[str]] = OnlyOpt,
         wheelhouse: Optional[Path] = typer.Option(None, "--wheelhouse", help="Put each layer's wheels from this folder in its build folder: the bake builds offline."),
         ca_cert: Optional[Path] = typer.Option(None, "--ca-cert", help="A PEM CA bundle trusted in the builder stage only."),
         docker_driver: bool = typer.Option(False, "--docker-driver", help="For buildx's docker driver (an engine's built-in BuildKit): no cache export, no named contexts."),
         cache_mounts: bool = typer.Option(False, "--cache-mounts", help="BuildKit cache mounts for pip and apt in the Dockerfiles (BuildKit only)."),
         over: Any = None, matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    from envbuilder.api import bake as bake_specs, target_specs

    specs = target_specs(None, all_=all_, only=tuple(only or ()), given=over, command="bake",
                         matrix_dir=matrix, or_builtin=True)
    r = bake_specs(specs, out, matrix_dir=matrix, wheelhouse=wheelhouse, ca_cert=ca_cert,
                   docker_driver=docker_driver, cache_mounts=cache_mounts).to_dict()
    if as_json:
        return echo_json(r)
    folder = Path(r["bake_file"]).parent
    say(f"{r['bake_file']}: run `docker buildx bake -f docker-bake.hcl` in {folder}")
    if r["bake"].get("aliases"):
        say(f"  moving aliases (pushed by `envbuilder build --push` after the smoke job): {', '.join(r['bake']['aliases'])}")
    for t in r["targets"]:  # locked whenever a lock exists: say which targets have none
        said = ("installs from its requirements.lock" + (f" (copied from {t['lock_from']})" if t["lock_from"] else "")
                if t["locked"] else f"no lock in {t['out']} (unlocked; `envbuilder lock {t['target']}` writes one in {t['lock_default']})")
        say(f"  {t['target']}: {said}")
    print_warnings(r["targets"])


@app.command()
@command
def ci(github: bool = typer.Option(False, "--github", help="Write a GitHub Actions workflow."),
       out: Path = typer.Option(Path("."), "-o", "--out", help="Repository root to write .github/workflows/ into."),
       registry: Optional[str] = typer.Option(None, "--registry", help="The registry and namespace, e.g. ghcr.io/org: the workflow pushes to REGISTRY/REPOSITORY (the project's name; default: the project's registry)."),
       install: Optional[str] = typer.Option(None, "--install", help="What the workflow pip-installs as envbuilder (default: this envbuilder as CI can install it: the checkout, its git commit, or its version on the index)."),
       matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Write CI that locks, renders, builds, smoke-tests and pushes every target (inside a project: its targets)."""
    from envbuilder.api import write_ci

    res = write_ci(out, registry=registry, github=github, matrix_dir=matrix, install=install)
    for w in res.warnings:  # what the user must change: on stderr, under --json too
        say(f"warning: {w}", err=True)
    echo_json(res.to_dict()) if as_json else say(res.workflow)


# -- build and smoke ------------------------------------------------------------------------

@app.command(help="Build each image with the Docker engine, verify it against its labels, run the smoke job in it, optionally push it: one TARGET, --all, or the project's targets (keeps going past a failure)." + CASCADE)
@command
@spec_options("pins", "overlay", "requirements", "images", "index", "exclude_newer", "nproc", "registry")
def build(target: Optional[str] = TargetArg, all_: bool = AllOpt, only: Optional[List[str]] = OnlyOpt,
          jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="With several targets: builds at once."),
          no_verify: bool = typer.Option(False, "--no-verify", help="Skip checking the image against its labels."),
          ca_cert: Optional[Path] = typer.Option(None, "--ca-cert", help="A PEM CA bundle trusted in the builder stage only."),
          wheelhouse: Optional[Path] = typer.Option(None, "--wheelhouse", help="Install Python packages from this folder of wheels, offline."),
          http_proxy: Optional[str] = typer.Option(None, "--http-proxy", help="HTTP proxy for the build's downloads (a build argument, not kept in the image)."),
          https_proxy: Optional[str] = typer.Option(None, "--https-proxy", help="HTTPS proxy for the build's downloads (a build argument, not kept in the image)."),
          no_proxy: Optional[str] = typer.Option(None, "--no-proxy", help="Hosts the build reaches without the proxy, comma-separated."),
          tag: Optional[List[str]] = typer.Option(None, "-t", "--tag", help="Also tag the image NAME[:TAG], as docker does (e.g. myrepo/train:dev); a bare TAG goes on the image's own repository (envbuilder:TAG outside a project). With --push, the TAG part is pushed too. Repeatable."),
          push: Optional[str] = typer.Option(None, "--push", help="Push to this repository (registry/name) and record the digest."),
          publish: bool = typer.Option(False, "--publish", help="Push to the image's own name, REGISTRY/REPOSITORY:<tag> (the project's registry or --registry), and record the digest."),
          no_alias: bool = typer.Option(False, "--no-alias", help="Do not move the alias tag named after the target (e.g. cu121)."),
          no_smoke: bool = typer.Option(False, "--no-smoke", help="Skip the smoke job."),
          backend: str = BackendOpt, smoke_timeout: int = SmokeTimeoutOpt, shm_size: str = ShmOpt,
          context: Optional[Path] = typer.Option(None, "--context", help="Keep the build context in this folder (one TARGET)."),
          lock_file: Optional[Path] = typer.Option(None, "--lock-file", help="Install from this requirements.lock (from envbuilder lock) with --require-hashes."),
          lock_legacy: Optional[Path] = typer.Option(None, "--lock", hidden=True, help="The old name of --lock-file."),
          report: Optional[Path] = typer.Option(None, "--report", help="Also write the JSON report here."),
          fmt: str = typer.Option("docker", "--runtime", "--format", help="docker (the image), apptainer (a SIF from envbuilder.def: built, verified and smoke-tested with apptainer), or both."),
          sif: Optional[Path] = typer.Option(None, "--sif", help="With --runtime apptainer|both: write the SIF here (default ./<tag>.sif)."),
          apptainer: Optional[str] = typer.Option(None, "--apptainer", envvar="ENVBUILDER_APPTAINER", help="The apptainer command (default: apptainer or singularity on PATH; a wrapper works)."),
          metrics_file: Optional[Path] = typer.Option(None, "--metrics-file", help="Write the smoke result as Prometheus metrics here (*.prom; one TARGET)."),
          pushgateway: Optional[str] = typer.Option(None, "--pushgateway", help="Push the smoke result as Prometheus metrics to this Pushgateway URL."),
          sign: bool = typer.Option(False, "--sign", help="After verify, the smoke job and the push passed: sign the pushed digest with cosign and attach the verify, smoke, SBOM and provenance attestations."),
          key: Optional[str] = typer.Option(None, "--key", help="--sign's key: a cosign key file or KMS URI (default ENVBUILDER_COSIGN_KEY; its password from COSIGN_PASSWORD)."),
          keyless: bool = typer.Option(False, "--keyless", help="--sign without a key: Sigstore's public Fulcio and Rekor (needs their network)."),
          builder: str = typer.Option("auto", "--builder", help="auto (BuildKit when the engine builds reproducibly: SOURCE_DATE_EPOCH, timestamps rewritten; else the legacy builder, the report says why), buildkit, or legacy."),
          reproducible: bool = typer.Option(True, "--reproducible/--no-reproducible", help="BuildKit rewrites every layer's file times so the same inputs build the same digest; --no-reproducible skips that for a faster local image with less disk (the report then says reproducible: false)."),
          over: Any = None, matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    from envbuilder import api

    if lock_legacy is not None and lock_file is None:
        say("envbuilder: warning: build --lock PATH is now --lock-file PATH (--lock is render's flag: lock first)", err=True)
    opts = api.build_options(
        verify=not no_verify, ca_cert=ca_cert, wheelhouse=wheelhouse, tags=tuple(tag or ()),
        proxies={"HTTP_PROXY": http_proxy, "HTTPS_PROXY": https_proxy, "NO_PROXY": no_proxy},
        push=push, publish=publish, smoke=not no_smoke, backend=backend, smoke_timeout=smoke_timeout,
        shm_size=shm_size, context=context, alias=not no_alias, lock=lock_file, lock_legacy=lock_legacy,
        fmt=fmt, sif=sif, apptainer=apptainer, metrics_file=metrics_file, pushgateway=pushgateway, several=target is None,
        sign=sign, key=key, keyless=keyless, builder=builder, reproducible=reproducible)
    specs = _specs(target, over, all_=all_, only=only, command="build", matrix=matrix)
    todo = api.preflight(specs, matrix_dir=matrix) if target is not None else specs
    with Progress(not as_json) as prog:
        reports = api.build(todo, opts, jobs=jobs, matrix_dir=matrix, on_event=prog.event)
    cause = reports[0].cause if target is not None else None
    if cause is not None and not isinstance(cause, api.BuildFailed):
        raise cause  # bad input or refused, for one TARGET: one line, its exit code
    data = api.build_summary(reports, single=target is not None, fmt=fmt,
                             project=next((s.project for s in specs if s.project), None)).to_dict()
    if report is not None:
        api.write_report(report, data)
    if cause is not None:  # one TARGET's failed step: the report, then the error (with it)
        if not as_json:
            print_build(data)
        raise cause
    if as_json:
        echo_json(data)
    elif target is not None:
        print_build(data)
    else:
        table("envbuilder build", ["target", "tag", "render", "build", "verify", "smoke", "push", "error"],
              [[r["target"], r["tag"], *[r["steps"][s] for s in ("render", "build", "verify", "smoke", "push")],
                (r["error"] or "")[:80]] for r in data["builds"]])
    if not data["ok"]:
        raise typer.Exit(next(r.exit_code for r in reports if not r.ok) or EXIT_FAILED)


@app.command()
@command
def smoke(image: Optional[str] = typer.Argument(None, help="The image (or an X.sif, run with apptainer) to test (omit with --host)."),
          host: bool = typer.Option(False, "--host", help="Run on this host with its torch, not in a container."),
          nproc: Optional[int] = typer.Option(None, "--nproc", "--nproc-per-node", min=1, help="Ranks per node (default 12)."),
          nnodes: Optional[int] = typer.Option(None, "--nnodes", min=1, help="Nodes (one container each, on a private network; default 1)."),
          layout: Optional[str] = typer.Option(None, "--layout", help="NNODESxNPROC_PER_NODE, e.g. 2x2, or ranks on each node for an uneven split, e.g. 7,5."),
          backend: str = BackendOpt,
          timeout: int = typer.Option(SMOKE_TIMEOUT, "--timeout", min=5, help="Seconds before a collective counts as hung (build --smoke-timeout)."),
          progressive: bool = typer.Option(False, "--progressive", help="Run 2, 4, 8 ... then all ranks; stop at the first failing size and name it."),
          min_busbw: Optional[str] = typer.Option(None, "--min-busbw", help="GB/s the all-reduce busbw must reach, or auto (the default on GPUs): each size against its published floor (matrices/bandwidth.yaml)."),
          fabric: Optional[str] = typer.Option(None, "--fabric", help="The fabric NCCL must use between nodes: ib, efa, roce, or socket (sockets intended); check transport."),
          max_size: Optional[str] = typer.Option(None, "--max-size", help="Largest all-reduce of the GPU sweep (default 16G; also bounded by free GPU memory)."),
          shm_size: str = ShmOpt,
          gpus: Optional[bool] = typer.Option(None, "--gpus/--no-gpus", help="Request GPUs (default: when the engine has the NVIDIA runtime)."),
          records: Optional[str] = typer.Option(None, "--records", help="Judge a finished run from its records folder or log (- for stdin) instead of running one."),
          metrics_file: Optional[Path] = typer.Option(None, "--metrics-file", help="Write the result as Prometheus metrics here (*.prom, for node-exporter's textfile collector)."),
          pushgateway: Optional[str] = typer.Option(None, "--pushgateway", help="Push the result as Prometheus metrics to this Pushgateway URL."),
          label: Optional[List[str]] = typer.Option(None, "--label", help="A metrics label KEY=VALUE (target, image, image_digest, node)."),
          matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Run the distributed smoke job in an image (or --host) and report every check."""
    from envbuilder.api import safe_text
    from envbuilder.api import smoke as run_smoke

    run = run_smoke(
        image, host=host, nproc=nproc, nnodes=nnodes, layout=layout, backend=backend,
        timeout=timeout, progressive=progressive, min_busbw=min_busbw, shm_size=shm_size,
        gpus=gpus, records=records, metrics_file=metrics_file, pushgateway=pushgateway,
        labels=label, fabric=fabric, max_size=max_size, matrix_dir=matrix)
    result, runs, exported = run.result, run.runs, run.exported
    data = run.to_dict(progressive=progressive)
    causes = data["causes"]
    if as_json:
        echo_json(data)
    else:
        print_smoke(f"smoke {image or 'host'}", result, runs if progressive else [], causes,
                    exported, pushgateway)
    if not result.ok:
        msg = f"the smoke job failed at world size {result.world_size}: {', '.join(result.failed)}"
        first = result.failed[0] if result.failed else None
        if first and result.details.get(first):
            msg += f" ({result.details[first].splitlines()[0][:200]})"
        say(f"envbuilder: error: {safe_text(msg)}", err=True)
        raise typer.Exit(EXIT_FAILED)


@app.command(help=f"Check that an image is what its labels say: torch, CUDA, the one NCCL loaded, "
                  f"cuDNN, Python, {COMPONENT_CHECKED}, the NVIDIA variables (no GPU needed; exit 1 "
                  f"on a mismatch).")
@command
def verify(image: str = typer.Argument(..., help="An image built by envbuilder (its labels say what it holds), or its X.sif."),
           key: Optional[str] = typer.Option(None, "--key", help="A cosign public key: check IMAGE's signature and attestations in its registry instead (no layer pulled; exit 1 when one is missing or does not match its digest)."),
           require: Optional[List[str]] = typer.Option(None, "--require", help="With --key: a field the smoke attestation must hold, FIELD=VALUE or FIELD>=N (backend=nccl, device=cuda, transport=ib, world_size>=16, floor_pct>=80); exit 1 when it does not."),
           matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Check that an image is what its labels say (the help above names each check)."""
    from envbuilder.api import is_sif, safe_text, verify_image
    from envbuilder.ui.signing import sif_verdict

    if is_sif(image):  # an Apptainer SIF: its labels, the digest it came from, --key its attestation
        return sif_verdict(image, key, as_json, require)
    if key is not None or require:
        from envbuilder.ui.signing import signed_verdict

        return signed_verdict(image, key, as_json, require)
    r = verify_image(image, matrix_dir=matrix)
    d = r.to_dict()
    if as_json:
        echo_json(d)
    else:
        table(f"envbuilder verify {image}", ["check", "ok", "detail"],
               [[c["name"], "ok" if c["ok"] else "FAIL", c["detail"]] for c in d["checks"]])
    if not r.ok:
        if not as_json:
            say(f"envbuilder: error: {safe_text(image)} is not what its labels say: "
                             f"{safe_text(r.summary())}", err=True)
        raise typer.Exit(EXIT_FAILED)


# -- doctor and explain ---------------------------------------------------------------------

@app.command()
@command
@spec_options("pins", "overlay")
def doctor(target: Optional[str] = typer.Option(None, "--target", help="Also judge this host against a target's stack (a project target's name too)."),
           image: Optional[str] = typer.Option(None, "--image", help="Also judge this host against an envbuilder image (its labels)."),
           nproc: Optional[int] = typer.Option(None, "--nproc", min=1, help="Ranks the job will run on this host."),
           key: Optional[str] = typer.Option(None, "--key", help="With --image: verify its smoke attestation with this cosign public key."),
           record: Optional[Path] = typer.Option(None, "--record", help="Also write what the checks read into this folder (replayable: attach it to a bug report; only the NCCL_*, GLOO_*, *_VISIBLE_DEVICES and PATH variables are kept)."),
           from_: Optional[Path] = typer.Option(None, "--from", help="Check the host this `doctor --record` folder recorded instead of this one (the same checks)."),
           over: Any = None, matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Check this host (or a recorded one, --from DIR): driver, GPUs, topology, /dev/shm, InfiniBand, NCCL settings, container."""
    from envbuilder.api import doctor as run_doctor

    spec = _specs(target, over, command="doctor")[0] if target else None
    checks = run_doctor(spec=spec, image=image, nproc=nproc, matrix_dir=matrix, key=key,
                        record=record, from_=from_)
    failed = [c for c in checks if c.status == "fail"]
    if as_json:
        echo_json({"ok": not failed, "checks": [c.to_dict() for c in checks]})
    else:
        table("envbuilder doctor", ["check", "status", "value", "detail / fix"],
               [[c.name, c.status, c.value, c.detail + (f" Fix: {c.fix}" if c.fix and c.status != "ok" else "")]
                for c in checks])
    if failed:
        if not as_json:
            say(f"envbuilder: error: {len(failed)} check(s) failed: "
                             f"{', '.join(c.name for c in failed)}", err=True)
        raise typer.Exit(EXIT_FAILED)


diagnose_ui.register(app)  # explain (envbuilder.ui.diagnose), in its place in --help


# -- matrix: the knowledge itself (envbuilder.ui.knowledge; logic in envbuilder.knowledge) ------
knowledge_ui.register(app)


daily.register(app)
rebuild_ui.register(app)
readable_metavars(app)
argument_types_off()


def main() -> None:  # console-script entry point
    """Run the CLI (envbuilder.ui.output.run_app: usage errors as one line, exit 2)."""
    run_app(app)


if __name__ == "__main__":  # pragma: no cover
    main()
