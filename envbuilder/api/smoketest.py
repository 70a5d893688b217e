"""smoke: the distributed smoke job in an image, on this host, or judged from its records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from envbuilder import SMOKE_TIMEOUT
from envbuilder.errors import InputError


from envbuilder.api.results import SmokeRun

if TYPE_CHECKING:
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


@dataclass(frozen=True)
class SmokeAsk:
    """What ``smoke`` was asked to run: where (records, nodes, this host, a container) and how."""

    image: str | None
    host: bool
    records: str | None
    nnodes: int
    counts: list[int] | None
    backend: str
    timeout: int
    shm_size: str
    gpus: bool | None
    script_args: tuple[str, ...] = ()  # the payload's own options (--max-size)


RunOne = Callable[[int], "SmokeResult"]  # one run of the job at a world size


@dataclass(frozen=True)
class Runner:
    """One way to run the smoke job: when it applies, and what runs it (and the engine client
    it opened, which the metrics export reuses)."""

    name: str
    applies: Callable[[SmokeAsk], bool]
    make: Callable[[SmokeAsk], tuple[RunOne, Any]]


def _is_sif(image: str | None) -> bool:
    from envbuilder.run.apptainer import is_sif

    return image is not None and is_sif(image)


def _sif(ask: SmokeAsk) -> tuple[RunOne, Any]:
    """The smoke job in a SIF with apptainer exec (the command %help shows)."""
    from envbuilder.components.base import HOME
    from envbuilder.run.apptainer import apptainer_command, smoke_sif

    if ask.script_args:
        raise InputError("--max-size is not passed to a SIF's smoke job (it runs the SIF's "
                         "smoke/run.sh): drop --max-size, or smoke the image it was built from")
    if ask.nnodes > 1:
        raise InputError("a SIF runs on this host: --nnodes > 1 takes an IMAGE (one container "
                         "a node); on a cluster, jobs/slurm-apptainer-NxM.sbatch runs the SIF")
    cmd = apptainer_command()
    path = Path(ask.image or "").absolute()
    return (lambda n: smoke_sif(cmd, path, HOME, nproc=n, backend=ask.backend,
                                timeout=ask.timeout)[0]), None


def _records(ask: SmokeAsk) -> tuple[RunOne, Any]:
    from envbuilder.run import metrics as mx

    src = ask.records or ""
    return (lambda n: mx.result_from_records(src)), None


def _nodes(ask: SmokeAsk) -> tuple[RunOne, Any]:
    if ask.host:
        raise InputError("--nnodes > 1 runs one container per node: give an IMAGE, not --host")
    from envbuilder.run.multinode import run_smoke_multinode

    backend = "gloo" if ask.backend == "auto" and not ask.gpus else ask.backend
    return (lambda n: run_smoke_multinode(ask.image or "", nnodes=ask.nnodes, nproc_per_node=n,
                                          layout=ask.counts, backend=backend, timeout=ask.timeout,
                                          shm_size=ask.shm_size, gpus=ask.gpus,
                                          script_args=ask.script_args)), None


def _host(ask: SmokeAsk) -> tuple[RunOne, Any]:
    from envbuilder.run import smoke as sm

    return (lambda n: sm.run_smoke_host(nproc=n, backend=ask.backend, timeout=ask.timeout,
                                        script_args=ask.script_args)), None


def _container(ask: SmokeAsk) -> tuple[RunOne, Any]:
    from envbuilder.run import smoke as sm
    from envbuilder.run.engine import connect

    client = connect()
    return (lambda n: sm.run_smoke_container(client, ask.image or "", nproc=n, backend=ask.backend,
                                             timeout=ask.timeout, gpus=ask.gpus,
                                             shm_size=ask.shm_size,
                                             script_args=ask.script_args)), client


# the ways to run the job, asked in order: the first that applies runs it
RUNNERS: tuple[Runner, ...] = (
    Runner("records", lambda a: a.records is not None, _records),
    Runner("sif", lambda a: _is_sif(a.image), _sif),
    Runner("nodes", lambda a: a.nnodes > 1, _nodes),
    Runner("host", lambda a: a.host, _host),
    Runner("container", lambda a: True, _container),
)


def runner_for(ask: SmokeAsk) -> Runner:
    return next(r for r in RUNNERS if r.applies(ask))


def _check_ask(image: str | None, host: bool, records: str | None, progressive: bool) -> None:
    from envbuilder.core.validate import image_ref

    if records is not None and (host or image is not None or progressive):
        raise InputError("--records judges a finished run: give no IMAGE, --host or --progressive")
    if records is None and host == (image is not None):
        raise InputError("smoke needs an IMAGE or --host (not both)")
    if image is not None and not _is_sif(image):
        image_ref(image, "IMAGE")


def smoke(image: str | None, *, host: bool = False, nproc: int | None = None,
          nnodes: int | None = None,
          layout: str | None = None, backend: str = "auto", timeout: int = SMOKE_TIMEOUT,
          progressive: bool = False, min_busbw: float | str | None = None, shm_size: str = "2g",
          fabric: str | None = None, max_size: str | None = None, matrix_dir: str | None = None,
          gpus: bool | None = None, records: str | None = None,
          metrics_file: str | Path | None = None, pushgateway: str | None = None,
          labels: Sequence[str] | None = None,
          ) -> SmokeRun:
    """Run the smoke job in ``image`` (one container, or ``nnodes`` on a private network), on
    this host, or judge a finished run from its ``records`` (a folder, a log, - for stdin); with
    ``metrics_file``/``pushgateway`` export the result as Prometheus metrics (run.metrics).
    ``layout``: ``NxM`` (N nodes of M ranks: ``--nnodes N --nproc-per-node M``) or an uneven
    split ``7,5`` (ranks on each node). ``nproc`` defaults to 12 ranks per node, ``nnodes`` to 1
    (or the nodes the layout names). The way it runs is the first of RUNNERS that applies.
    Returns (the result, every size run with ``progressive``, likely causes of a failure, what
    was exported or None) as a SmokeRun. ``fabric`` (ib, efa, roce, socket) is the fabric the run
    must use between nodes (check ``transport``); ``min_busbw`` a number of GB/s, or ``auto``
    (the default on GPUs): each size against the published floor of matrices/bandwidth.yaml
    (``matrix_dir``'s when it has one); ``max_size`` the largest all-reduce of the sweep."""
    from envbuilder.run import metrics as mx
    from envbuilder.run import smoke as sm
    from envbuilder.run.build import explain_causes

    if backend not in ("auto", "nccl", "gloo"):
        raise InputError(f"--backend {backend!r} is not one of auto, nccl, gloo")
    metrics_to = mx.check_target(metrics_file, pushgateway)
    overrides = mx.parse_label_overrides(list(labels) if labels else None)
    nproc, nnodes, counts = _smoke_layout(layout, nproc, nnodes, progressive)
    script_args = _payload_args(max_size)
    gate = _busbw_gate(min_busbw)
    _check_fabric(fabric)
    _check_ask(image, host, records, progressive)
    ask = SmokeAsk(image, host, records, nnodes, counts, backend, timeout, shm_size, gpus,
                   tuple(script_args))
    run_one, client = runner_for(ask).make(ask)
    runs: list[SmokeResult] = []
    if progressive:
        result, runs = sm.run_progressive(run_one, nproc)
    else:
        result = run_one(nproc)
    result = sm.judge(result, fabric=fabric, min_busbw=gate, matrix_dir=matrix_dir)
    if metrics_to.wanted and image is not None and client is None:
        from envbuilder.run.engine import connect

        client = connect()
    exported = mx.export_run(result, metrics_to, image=image, client=client, overrides=overrides)
    causes = () if result.ok else tuple(explain_causes(result.log, details=result.details))
    return SmokeRun(result=result, runs=runs, causes=causes, exported=exported)


def _payload_args(max_size: str | None) -> list[str]:
    """The smoke payload's arguments for the options of ``smoke`` it takes itself."""
    if max_size is None:
        return []
    from envbuilder.run.payload.ddp_smoke import parse_size

    try:
        n = parse_size(max_size)
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"--max-size {max_size[:40]!r} is not a size: bytes or a K/M/G suffix, e.g. 4G")
    return ["--max-size", str(n)]


def _busbw_gate(value: float | str | None) -> float | str | None:
    """--min-busbw: a number of GB/s, ``auto`` (the published floors), or None (auto on GPUs)."""
    if value is None or isinstance(value, (int, float)):
        return value
    if str(value).strip().lower() == "auto":
        return "auto"
    try:
        gbps = float(value)
    except ValueError:
        gbps = -1.0
    if not gbps >= 0:
        raise InputError(f"--min-busbw {str(value)[:40]!r} is not a bandwidth: GB/s (e.g. 40) or auto "
                         f"(the published floor of matrices/bandwidth.yaml)")
    return gbps


def _check_fabric(fabric: str | None) -> None:
    from envbuilder.run.transport import FABRICS

    if fabric is not None and fabric not in FABRICS:
        raise InputError(f"--fabric {fabric[:40]!r} is not one of {', '.join(FABRICS)} (the fabric "
                         f"the run must use between nodes)")
