"""The smoke job's results as Prometheus metrics: a textfile for node-exporter, or a push to a
Pushgateway.

Where the metrics are made: here, on the host that ran (or collected) the smoke job, from the
job's JSON records, with the official ``prometheus_client``. The payload inside the image
(``run/payload/ddp_smoke.py``) stays standard library + torch: images carry no metrics library,
and every figure a metric needs is in the records (``rank-N.json``, ``summary.json``) or in the
one ``ENVBUILDER_SMOKE_SUMMARY`` line rank 0 prints, so a cluster run is converted by whoever
holds its records (``envbuilder smoke --records DIR|LOG|-``): the Slurm script after ``srun``,
a CI step after ``kubectl logs``.

Every series carries the labels ``target``, ``image``, ``image_digest``, ``node`` (the host that
wrote the metrics), ``layout`` (``1x12``, ``2x6``, or ``7,5`` for an uneven split) and
``backend``; per-rank series add ``rank`` and ``host`` (the rank's node). Units follow
Prometheus' conventions (seconds, bytes per second). ``envbuilder.core.smoke_metrics.METRICS``
lists every name, so the dashboard and the alert rules can be checked against it.
"""

from __future__ import annotations

import os

import dataclasses
import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import urlsplit

from envbuilder.core.smoke_metrics import (CHECK_STATES, GROUPING, JOB, LABELS, METRICS,
                                            OVERRIDABLE)
from envbuilder.errors import InputError, MissingExtraError, OperationError

if TYPE_CHECKING:  # pragma: no cover
    from prometheus_client import CollectorRegistry

    from envbuilder.run.smoke import SmokeResult


@dataclass(frozen=True)
class MetricLabels:
    """The labels every series of one smoke run carries."""

    target: str = ""
    image: str = ""
    image_digest: str = ""
    node: str = ""
    layout: str = ""
    backend: str = ""

    def as_dict(self) -> dict[str, str]:
        return {k: str(getattr(self, k)) for k in LABELS}

    def grouping_key(self) -> dict[str, str]:
        return {k: str(getattr(self, k)) for k in GROUPING}


@dataclass(frozen=True)
class MetricsTarget:
    """Where to send the metrics: a node-exporter textfile and/or a Pushgateway."""

    metrics_file: Path | None = None
    pushgateway: str | None = None

    @property
    def wanted(self) -> bool:
        return self.metrics_file is not None or self.pushgateway is not None


@dataclass(frozen=True)
class MetricsReport:
    written: str | None
    pushed: str | None
    series: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _client():
    try:
        import prometheus_client
    except ImportError:  # pragma: no cover - a dependency of envbuilder
        raise MissingExtraError("prometheus_client", "metrics") from None
    return prometheus_client


# ----------------------------------------------------------------------------- inputs

def check_target(metrics_file: str | Path | None, pushgateway: str | None) -> MetricsTarget:
    """Validate ``--metrics-file`` / ``--pushgateway`` before any work is done."""
    path = None
    if metrics_file is not None:
        path = Path(metrics_file)
        if path.suffix != ".prom":
            raise InputError(f"--metrics-file {metrics_file}: node-exporter's textfile collector "
                             f"reads only *.prom files; name it e.g. {path.with_suffix('.prom').name}")
        if path.is_dir():
            raise InputError(f"--metrics-file {metrics_file} is a folder: give a file path "
                             f"inside it, e.g. {path / (JOB + '.prom')}")
        if path.exists() and not _written_by_us(path):
            raise InputError(f"--metrics-file {metrics_file} exists and was not written by "
                             f"envbuilder: choose another path (envbuilder never overwrites it)")
    if pushgateway is not None:
        parts = urlsplit(pushgateway)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
                or parts.fragment or any(c in pushgateway for c in " \n\r\"'`$"):
            raise InputError(f"--pushgateway {pushgateway!r} is not a Pushgateway URL: use "
                             f"http(s)://HOST:PORT, e.g. http://pushgateway:9091")
    return MetricsTarget(metrics_file=path, pushgateway=pushgateway)


def _written_by_us(path: Path) -> bool:
    try:  # only its head: a metrics file of ours is small; a FIFO or device is not ours
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
        try:
            import stat as _stat

            if not _stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            head = os.read(fd, 4096).decode("utf-8", errors="replace")
        finally:
            os.close(fd)
    except OSError:
        return False
    return "# HELP envbuilder_smoke_" in head or not head.strip()


def parse_label_overrides(pairs: list[str] | tuple[str, ...] | None) -> dict[str, str]:
    """``["target=cu121", "node=gpu-07"]`` -> a dict; only ``OVERRIDABLE`` keys."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or key not in OVERRIDABLE:
            raise InputError(f"--label {pair!r} is not KEY=VALUE with KEY one of "
                             f"{', '.join(OVERRIDABLE)}")
        if len(value) > 256 or any(c in value for c in "\n\r\0"):
            raise InputError(f"--label {pair!r}: the value must be one line of at most 256 characters")
        out[key] = value
    return out


def layout_label(result: SmokeResult) -> str:
    """``1x12``, ``2x6``, or ``7,5`` for an uneven split (ranks per node, in node order)."""
    from envbuilder.core.layouts import Layout

    per_node = (result.summary or {}).get("ranks_per_node") or {}
    counts = tuple(int(v) for _, v in sorted(per_node.items(), key=lambda kv: str(kv[0])))
    if counts and sum(counts) == result.world_size:
        try:
            return str(Layout(counts))
        except InputError:  # counts a run recorded beyond the caps: shown as they are
            return ",".join(str(c) for c in counts)
    return f"{result.nnodes}x{result.nproc_per_node}"


def labels_for(result: SmokeResult, *, image: str = "", image_digest: str = "",
               target: str = "", node: str | None = None,
               overrides: Mapping[str, str] | None = None) -> MetricLabels:
    values = {"target": target, "image": image, "image_digest": image_digest,
              "node": node if node is not None else socket.gethostname(),
              "layout": layout_label(result), "backend": result.backend or ""}
    values.update(overrides or {})
    return MetricLabels(**values)


def image_identity(client, image: str) -> tuple[str, str]:
    """(digest, target) of a local image: its repo digest (else its ID) and the
    ``io.envbuilder.target`` label it carries (empty when it has none)."""
    try:
        img = client.images.get(image)
    except Exception as exc:  # the smoke run reports a missing image itself
        raise OperationError(f"cannot read image {image} for its digest: {exc}",
                             step="metrics") from None
    digests = img.attrs.get("RepoDigests") or []
    labels = (img.attrs.get("Config") or {}).get("Labels") or {}
    return (digests[0].rpartition("@")[2] if digests else img.id), labels.get("io.envbuilder.target", "")


def sif_identity(sif: str | Path) -> tuple[str, str]:
    """(digest, target) of a SIF file: the sha256 of the file (as ``build --runtime apptainer``
    records it) and the ``io.envbuilder.target`` label its definition set (empty when apptainer
    cannot be run here to read it)."""
    from envbuilder.errors import EnvbuilderError
    from envbuilder.run import apptainer

    digest = apptainer.file_digest(Path(sif))
    try:
        target = apptainer.sif_labels(apptainer.apptainer_command(), Path(sif)).get(
            "io.envbuilder.target", "")
    except EnvbuilderError:
        target = ""
    return digest, target


# ----------------------------------------------------------------------------- the registry

def smoke_registry(result: SmokeResult, labels: MetricLabels, *,
                   now: float | None = None) -> CollectorRegistry:
    """A fresh ``CollectorRegistry`` holding every metric of one smoke run."""
    pc = _client()
    reg = pc.CollectorRegistry(auto_describe=True)
    common = labels.as_dict()
    names = list(common)

    def gauge(name: str) -> Any:
        help_, extra = METRICS[name]
        return pc.Gauge(name, help_, names + list(extra), registry=reg)

    gauge("envbuilder_smoke_success").labels(**common).set(1 if result.ok else 0)
    check = gauge("envbuilder_smoke_check_status")
    for name, status in result.checks.items():
        status = status if status in CHECK_STATES else "fail"
        for state in CHECK_STATES:
            check.labels(**common, check=name, status=state).set(1 if state == status else 0)
    gauge("envbuilder_smoke_duration_seconds").labels(**common).set(float(result.seconds))
    gauge("envbuilder_smoke_world_size").labels(**common).set(result.world_size)
    gauge("envbuilder_smoke_nodes").labels(**common).set(result.nnodes)

    timings = _rank_timings(result)
    phases: dict[str, float] = {}
    for t in timings:
        for phase, secs in (t.get("checks") or {}).items():
            phases[phase] = max(phases.get(phase, 0.0), float(secs or 0.0))
    phase_g = gauge("envbuilder_smoke_phase_duration_seconds")
    for phase, secs in phases.items():
        phase_g.labels(**common, phase=phase).set(secs)

    rdzv = gauge("envbuilder_smoke_rendezvous_seconds")
    rank_rdzv = gauge("envbuilder_smoke_rank_rendezvous_seconds")
    rank_step = gauge("envbuilder_smoke_rank_step_seconds")
    slowest = None
    for t in timings:
        who = {"rank": str(t.get("rank")), "host": str(t.get("hostname") or "")}
        if t.get("rendezvous_seconds") is not None:
            secs = float(t["rendezvous_seconds"])
            rank_rdzv.labels(**common, **who).set(secs)
            slowest = secs if slowest is None else max(slowest, secs)
        steps = [float(s) for s in t.get("step_seconds") or []]
        if steps:
            rank_step.labels(**common, **who).set(sum(steps) / len(steps))
    if slowest is not None:
        rdzv.labels(**common).set(slowest)

    busbw = gauge("envbuilder_smoke_allreduce_busbw_bytes_per_second")
    algbw = gauge("envbuilder_smoke_allreduce_algbw_bytes_per_second")
    from envbuilder.run.smoke import allreduce_rows

    for row in allreduce_rows(result.bandwidth):
        size = {"message_bytes": str(int(row["bytes"]))}
        busbw.labels(**common, **size).set(float(row.get("busbw_gbps", 0.0)) * 1e9)
        algbw.labels(**common, **size).set(float(row.get("algbw_gbps", 0.0)) * 1e9)
    gauge("envbuilder_smoke_last_run_timestamp_seconds").labels(**common).set(
        time.time() if now is None else now)
    return reg


def _rank_timings(result: SmokeResult) -> list[dict]:
    """Per-rank timings: from the rank records when we have them, else from the summary."""
    if result.ranks:
        return [{"rank": r.get("rank"), "hostname": r.get("hostname"),
                 "rendezvous_seconds": r.get("rendezvous_seconds"),
                 "step_seconds": r.get("step_seconds") or [],
                 "checks": {c["name"]: c.get("seconds", 0.0) for c in r.get("checks", [])}}
                for r in result.ranks]
    return list((result.summary or {}).get("rank_timings") or [])


def exposition(registry: CollectorRegistry) -> str:
    """The registry in the Prometheus text format (prometheus_client's own writer)."""
    return _client().generate_latest(registry).decode("utf-8")


# ----------------------------------------------------------------------------- outputs

def write_textfile(registry: CollectorRegistry, path: Path) -> Path:
    """Write for node-exporter's textfile collector. prometheus_client writes a temp file
    beside it and renames it into place, so the collector never reads half a file."""
    pc = _client()
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        pc.write_to_textfile(str(path), registry)
    except OSError as exc:
        raise OperationError(f"cannot write the metrics file {path}: {exc.strerror or exc}",
                             step="metrics") from None
    return path


def push(registry: CollectorRegistry, url: str, labels: MetricLabels, *,
         timeout: float = 10.0) -> str:
    """PUT the run to the Pushgateway: job ``envbuilder_smoke``, grouped by target, node and
    layout (a new run of the same group replaces the old one). Returns the group's URL path."""
    pc = _client()
    key = labels.grouping_key()
    try:
        pc.push_to_gateway(url, job=JOB, registry=registry, grouping_key=key, timeout=timeout)
    except OSError as exc:  # URLError, HTTPError, ConnectionError are OSErrors
        reason = getattr(exc, "reason", None) or exc
        raise OperationError(f"cannot push the smoke metrics to the Pushgateway at {url}: "
                             f"{reason}", step="metrics") from None
    return f"/metrics/job/{JOB}/" + "/".join(f"{k}/{v}" for k, v in key.items())


def export(result: SmokeResult, where: MetricsTarget, labels: MetricLabels, *,
           now: float | None = None) -> MetricsReport:
    """Write and/or push one run's metrics, as ``where`` asks."""
    registry = smoke_registry(result, labels, now=now)
    written = pushed = None
    if where.metrics_file is not None:
        written = str(write_textfile(registry, where.metrics_file))
    if where.pushgateway is not None:
        pushed = push(registry, where.pushgateway, labels)
    series = sum(len(m.samples) for m in registry.collect())
    return MetricsReport(written=written, pushed=pushed, series=series)


# ----------------------------------------------------------------------------- records

def result_from_records(source: str) -> SmokeResult:
    """A finished run's ``SmokeResult`` from what it left: a folder of records (``rank-N.json``,
    ``summary.json``), a log holding the ``ENVBUILDER_SMOKE_SUMMARY`` line, or ``-`` (that log
    on stdin, e.g. ``kubectl logs JOB-master-0 | envbuilder smoke --records -``)."""
    from envbuilder.run import smoke as sm

    if source == "-":
        log = sys.stdin.read()
        summary: dict[str, Any] | None = None
        ranks: list[dict[str, Any]] = []
    else:
        path = Path(source)
        if path.is_dir():
            summary, ranks = sm._read_out_dir(str(path))
            log = ""
            if summary is None and not ranks:
                raise InputError(f"--records {source}: no summary.json or rank-N.json in it; "
                                 f"give the smoke job's --out folder or its log")
        elif path.is_file():
            from envbuilder.core.readfile import read_bytes_capped

            log = read_bytes_capped(path, f"--records {source}:", limit=256 << 20).decode(
                "utf-8", errors="replace")
            summary, ranks = None, []
        else:
            raise InputError(f"--records {source}: no such file or folder; give the smoke job's "
                             f"--out folder, its log, or - for stdin")
    if summary is None and not ranks:
        summary = sm.summary_from_log(log)
        if summary is None:
            only_nccl = sm.result_from_nccl_log(log, source)
            if only_nccl is not None:  # a job's own log: what NCCL says it used
                return only_nccl
            raise InputError(f"--records {source}: no {sm.SUMMARY_MARKER} line and no NCCL INFO "
                             f"line in it: give the log of rank 0 (node rank 0) of an envbuilder "
                             f"smoke job, its --out folder, or a job's log run with NCCL_DEBUG=INFO")
    ref = summary or ranks[0]
    world = int(ref.get("world_size") or len(ranks) or 1)
    nnodes = int((summary or {}).get("nnodes") or len({r.get("hostname") for r in ranks}) or 1)
    ok = bool(summary.get("ok")) if summary is not None else all(r.get("ok") for r in ranks)
    return sm.build_result(summary=summary, ranks=ranks, log=log, exit_code=0 if ok else 1,
                           nproc_per_node=max(1, world // nnodes), nnodes=nnodes,
                           backend=str(ref.get("backend") or ""),
                           seconds=float((summary or {}).get("seconds") or 0.0),
                           where=source, world_size=world)


def textfile_name(labels: MetricLabels) -> str:
    """A stable file name per target and layout (a new run replaces the old file)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{JOB}-{labels.target or 'host'}-{labels.layout}")
    return stem.strip("-") + ".prom"


__all__ = ["METRICS", "MetricLabels", "MetricsTarget", "MetricsReport", "check_target",
           "parse_label_overrides", "labels_for", "layout_label", "image_identity", "smoke_registry",
           "exposition", "write_textfile", "push", "export", "result_from_records",
           "textfile_name", "export_run", "sif_identity"]


def export_run(result: SmokeResult, where: MetricsTarget, *, image: str | None = None,
               client=None, target: str = "", overrides: Mapping[str, str] | None = None,
               image_digest: str = "") -> MetricsReport | None:
    """What ``envbuilder smoke`` / ``build`` do after a run: label it (the image's digest and
    target read from the engine when ``client`` is given) and write/push it. None when
    ``where`` asks for nothing."""
    if not where.wanted:
        return None
    overrides = dict(overrides or {})
    if client is not None and image and not ({"image_digest", "target"} <= set(overrides)):
        try:
            digest, image_target = image_identity(client, image)
        except OperationError:
            digest, image_target = "", ""
        image_digest = image_digest or digest
        target = target or image_target
    elif image and not ({"image_digest", "target"} <= set(overrides)):
        from envbuilder.run.apptainer import is_sif

        if is_sif(image):  # a SIF: its file's digest, and its target label when apptainer reads it
            digest, image_target = sif_identity(image)
            image_digest = image_digest or digest
            target = target or image_target
    if not image:
        image = "host" if result.where == "host" else ""  # --records: say it with --label image=
    labels = labels_for(result, image=image, image_digest=image_digest,
                        target=target, overrides=overrides)
    return export(result, where, labels)
