"""smoke: the distributed smoke job in an image, on this host, or judged from its records."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from envbuilder import SMOKE_TIMEOUT
from envbuilder.errors import InputError


from envbuilder.api.results import SmokeRun

if TYPE_CHECKING:
    from docker import DockerClient

    from envbuilder.run.smoke import SmokeResult


def _smoke_layout(layout: str | None, nproc: int | None, nnodes: int | None,
                  progressive: bool) -> tuple[int, int, list[int] | None]:
    """(ranks per node, nodes, uneven rank counts or None) from smoke's --layout (``2x2`` or
    ``7,5``), --nproc-per-node and --nnodes; options given alongside a layout must agree."""
    from envbuilder.core import layouts as lm

    counts = None
    if layout and "x" not in layout.lower():
        parsed = lm.Layout.parse(layout)
        if parsed.is_even and parsed.nnodes > 1:  # "8,8,8,8": the even layout 4x8
            layout = str(parsed)
    if layout and "x" in layout.lower():
        n, p = lm.parse_layout(layout)
        for opt, given, want in (("--nnodes", nnodes, n), ("--nproc-per-node", nproc, p)):
            if given is not None and given != want:
                raise InputError(f"{opt} {given} disagrees with --layout {n}x{p}: drop {opt}")
        return p, n, None
    if layout:
        counts = list(lm.Layout.parse(layout).counts)  # ranks on each node (core.layouts)
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


def _is_sif(image: str) -> bool:
    from envbuilder.run.apptainer import is_sif

    return is_sif(image)


def _sif_runner(sif: str, backend: str, timeout: int) -> Callable[[int], SmokeResult]:
    """The smoke job in a SIF with apptainer exec (the command %help shows)."""
    from envbuilder.components.base import HOME
    from envbuilder.run.apptainer import apptainer_command, smoke_sif

    cmd = apptainer_command()
    path = Path(sif).absolute()

    def run_one(n: int) -> SmokeResult:
        return smoke_sif(cmd, path, HOME, nproc=n, backend=backend, timeout=timeout)[0]

    return run_one


def smoke(image: str | None, *, host: bool = False, nproc: int | None = None,  # noqa: C901 - one branch per way to run the job (records, nodes, host, container)
          nnodes: int | None = None,
          layout: str | None = None, backend: str = "auto", timeout: int = SMOKE_TIMEOUT,
          progressive: bool = False, min_busbw: float | None = None, shm_size: str = "2g",
          gpus: bool | None = None, records: str | None = None,
          metrics_file: str | Path | None = None, pushgateway: str | None = None,
          labels: Sequence[str] | None = None,
          ) -> SmokeRun:
    """Run the smoke job in ``image`` (one container, or ``nnodes`` on a private network), on
    this host, or judge a finished run from its ``records`` (a folder, a log, - for stdin); with
    ``metrics_file``/``pushgateway`` export the result as Prometheus metrics (run.metrics).
    ``layout``: ``NxM`` (N nodes of M ranks: ``--nnodes N --nproc-per-node M``) or an uneven
    split ``7,5`` (ranks on each node). ``nproc`` defaults to 12 ranks per node, ``nnodes`` to 1
    (or the nodes the layout names). Returns (the result, every size run with ``progressive``,
    likely causes of a failure, what was exported or None) as a SmokeRun."""
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
    sif = image is not None and _is_sif(image)
    if image is not None and not sif:
        image_ref(image, "IMAGE")
    client: DockerClient | None = None
    run_one: Callable[[int], SmokeResult]
    if sif:
        if nnodes > 1:
            raise InputError("a SIF runs on this host: --nnodes > 1 takes an IMAGE (one container "
                             "a node); on a cluster, jobs/slurm-apptainer-NxM.sbatch runs the SIF")
        run_one = _sif_runner(ref, backend, timeout)
    elif records is not None:
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
    return SmokeRun(result=result, runs=runs, causes=causes, exported=exported)
