"""The ``monitoring/`` folder of a render: a Grafana dashboard with the smoke job's metrics beside
NVIDIA's DCGM exporter GPU panels, Prometheus alert rules, and the scrape wiring (plain
Prometheus, and the Prometheus Operator's PodMonitor / ServiceMonitor / PrometheusRule).

The dashboard is built with ``grafana-foundation-sdk`` (Grafana's typed builders), which is an
extra (``envbuilder[monitoring]``): ``scripts/gen-dashboard.py`` writes
``templates/monitoring/dashboard.json`` with it, and ``envbuilder render`` ships that file, so the
default install renders without the SDK. ``tests/test_metrics_monitoring.py`` regenerates it and
fails when the shipped file drifted.

Metric names come from two places only: ``envbuilder.core.smoke_metrics.METRICS`` (what the
smoke job's metrics writer, ``envbuilder.run.metrics``, emits) and ``templates/monitoring/dcgm-default-counters.yaml`` (the counters
NVIDIA's dcgm-exporter enables by default, with its source URL).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

import yaml

from envbuilder import __version__
from envbuilder.core.resources import templates_dir
from envbuilder.render import precompiled
from envbuilder.render.bccache import environment
from envbuilder.errors import MissingExtraError
from envbuilder.core.smoke_metrics import JOB, METRICS

DASHBOARD_UID = "envbuilder-smoke-gpu"
DASHBOARD_FILE = "monitoring/dashboard.json"
# gpu-operator's dcgm-exporter DaemonSet: pods labelled app=nvidia-dcgm-exporter, container port
# 9400 named "metrics" (its Service names the same port gpu-metrics), DCGM_EXPORTER_KUBERNETES=true
# https://github.com/NVIDIA/gpu-operator/blob/main/assets/state-dcgm-exporter/0900_daemonset.yaml
# https://github.com/NVIDIA/gpu-operator/blob/main/assets/state-dcgm-exporter/0600_service.yaml
DCGM_PORT = 9400
DCGM_POD_PORT = "metrics"
STALE_SECONDS = 2 * 86400


@dataclass(frozen=True)
class DcgmCounters:
    source: str
    enabled: tuple[str, ...]


def dcgm_counters() -> DcgmCounters:
    """The dcgm-exporter counters enabled by default (data file, with its source URL)."""
    doc = yaml.load((templates_dir() / "monitoring" / "dcgm-default-counters.yaml")
                    .read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return DcgmCounters(source=doc["source"], enabled=tuple(doc["enabled"]))


def known_metrics() -> set[str]:
    """Every metric name the dashboard and rules may use."""
    return set(METRICS) | set(dcgm_counters().enabled)


# ----------------------------------------------------------------------------- PromQL names

_PROMQL_WORDS = {
    # functions and aggregations are followed by "(" and are skipped by the parser below; these
    # are the words that are not
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan",
}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (a small lexer: label matchers, strings, ranges,
    grouping lists and function names are skipped; Grafana's $variables are not names)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for m in re.finditer(r"(?<![\w$:.])([A-Za-z_:][A-Za-z0-9_:]*)\s*(\()?", text):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in _PROMQL_WORDS:
            continue
        names.add(word)
    return names


def dashboard_metric_names(dashboard: dict) -> set[str]:
    names: set[str] = set()
    for expr in dashboard_exprs(dashboard):
        names |= promql_metric_names(expr)
    return names


def dashboard_exprs(dashboard: dict) -> list[str]:
    exprs = []
    panels = list(dashboard.get("panels") or [])
    for p in list(panels):
        panels.extend(p.get("panels") or [])  # collapsed rows hold their panels
    for p in panels:
        for t in p.get("targets") or []:
            if t.get("expr"):
                exprs.append(t["expr"])
    for v in (dashboard.get("templating") or {}).get("list") or []:
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if isinstance(q, str) and v.get("type") == "query":
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", q)
            exprs.append(m.group(1) if m else q)
    return exprs


# ----------------------------------------------------------------------------- alert rules

def alert_groups(min_busbw_gbps: float | None = None) -> list[dict[str, Any]]:
    """The rule groups (Prometheus rule-file syntax). The busbw rule exists when a floor is set
    (a spec's ``--min-busbw``: checked when the spec was made, core.options)."""
    floor = min_busbw_gbps
    where = "{{ $labels.target }} on {{ $labels.node }} ({{ $labels.layout }}, {{ $labels.backend }})"
    smoke: list[dict[str, Any]] = [{
        "alert": "EnvbuilderSmokeFailed",
        "expr": "envbuilder_smoke_success == 0",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": f"envbuilder smoke job failed: {where}",
            "description": "The last smoke run of image {{ $labels.image }} "
                           "({{ $labels.image_digest }}) failed a check; query "
                           "envbuilder_smoke_check_status{status=\"fail\"} == 1 for which, and run "
                           "envbuilder explain on its log.",
        },
    }]
    if floor is not None:
        smoke.append({
            "alert": "EnvbuilderSmokeBusbwLow",
            # the best message size: a small size is latency-bound, the floor is for the largest
            "expr": ("max without (message_bytes) "
                     f"(envbuilder_smoke_allreduce_busbw_bytes_per_second) < {floor * 1e9:.0f}"),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"all-reduce bus bandwidth below {floor:g} GB/s: {where}",
                "description": "The smoke job's best all-reduce busbw is "
                               "{{ $value | humanize }}B/s, under the floor of "
                               f"{floor:g} GB/s set with --min-busbw: a degraded link, a driver "
                               "or NCCL change, or a rank on the wrong interface.",
            },
        })
    smoke.append({
        "alert": "EnvbuilderSmokeStale",
        "expr": f"time() - envbuilder_smoke_last_run_timestamp_seconds > {STALE_SECONDS}",
        "labels": {"severity": "info"},
        "annotations": {
            "summary": f"no envbuilder smoke run for {STALE_SECONDS // 86400} days: {where}",
            "description": "The smoke metrics of this target and node are older than "
                           f"{STALE_SECONDS // 3600} h: the scheduled smoke job stopped running.",
        },
    })
    dcgm = [{
        "alert": "GpuXidError",
        # dcgm-exporter's DCGM_FI_DEV_XID_ERRORS is the value of the last XID (0: none)
        "expr": "DCGM_FI_DEV_XID_ERRORS != 0",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "GPU {{ $labels.gpu }} on {{ $labels.hostname }}{{ $labels.Hostname }} "
                       "reported XID {{ $value }}",
            "description": "NVIDIA XID {{ $value }} on GPU {{ $labels.gpu }} "
                           "({{ $labels.UUID }}, {{ $labels.modelName }}); see NVIDIA's XID "
                           "catalogue for the action (reset, drain, RMA). Jobs on this GPU may "
                           "hang in collectives.",
        },
    }]
    return [{"name": "envbuilder-smoke", "rules": smoke},
            {"name": "envbuilder-dcgm", "rules": dcgm}]


def alert_rules_yaml(min_busbw_gbps: float | None = None) -> str:
    head = (f"# Rendered by envbuilder {__version__}: Prometheus alert rules for the smoke job's "
            f"metrics and DCGM XID errors.\n# Check: promtool check rules alerts.yml\n")
    if min_busbw_gbps is None:
        head += ("# No busbw floor: render with --min-busbw GBPS to add EnvbuilderSmokeBusbwLow.\n")
    return head + _yaml({"groups": alert_groups(min_busbw_gbps)})


def prometheus_rule_yaml(min_busbw_gbps: float | None = None) -> str:
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "envbuilder-smoke",
                        "labels": {"app.kubernetes.io/part-of": "envbuilder"}},
           "spec": {"groups": alert_groups(min_busbw_gbps)}}
    return (f"# Rendered by envbuilder {__version__}: the alert rules of alerts.yml for the "
            f"Prometheus Operator.\n# Apply in the namespace your Prometheus selects rules from "
            f"(add the labels its ruleSelector wants).\n") + _yaml(doc)


def _yaml(doc: Any) -> str:
    """The one YAML emitter (render.yamlemit): the files are made once per busbw floor."""
    from envbuilder.render.yamlemit import dump

    return dump(doc, width=100)


# ----------------------------------------------------------------------------- scrape wiring

def prometheus_config(*, node_exporters: Iterable[str] = ("NODE:9100",),
                      pushgateways: Iterable[str] = ("PUSHGATEWAY:9091",),
                      dcgm_exporters: Iterable[str] = (f"NODE:{DCGM_PORT}",),
                      rule_files: Iterable[str] = ("alerts.yml",),
                      scrape_interval: str = "30s") -> dict[str, Any]:
    """A plain Prometheus configuration that scrapes all three sources (no operator)."""
    jobs: list[dict[str, Any]] = []
    if list(node_exporters):
        jobs.append({"job_name": "node", "static_configs": [{"targets": list(node_exporters)}]})
    if list(pushgateways):
        # honor_labels: keep the pushed job/instance labels instead of the gateway's own
        jobs.append({"job_name": "pushgateway", "honor_labels": True,
                     "static_configs": [{"targets": list(pushgateways)}]})
    if list(dcgm_exporters):
        jobs.append({"job_name": "dcgm-exporter",
                     "static_configs": [{"targets": list(dcgm_exporters)}]})
    return {"global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "rule_files": list(rule_files), "scrape_configs": jobs}


def _podmonitor_dcgm() -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": {"name": "envbuilder-dcgm-exporter",
                         "labels": {"app.kubernetes.io/part-of": "envbuilder"}},
            "spec": {"namespaceSelector": {"matchNames": ["gpu-operator"]},
                     "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
                     "podMetricsEndpoints": [{"port": DCGM_POD_PORT, "path": "/metrics",
                                              "interval": "15s"}]}}


def _servicemonitor_pushgateway() -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "envbuilder-pushgateway",
                         "labels": {"app.kubernetes.io/part-of": "envbuilder"}},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "prometheus-pushgateway"}},
                     "endpoints": [{"port": "http", "honorLabels": True, "interval": "30s"}]}}


# ----------------------------------------------------------------------------- dashboard

def _sdk():
    try:
        from grafana_foundation_sdk.builders import common, dashboard, prometheus, stat, table, timeseries
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.models import common as cmodel, dashboard as model
    except ImportError:
        raise MissingExtraError("grafana_foundation_sdk", "monitoring") from None
    return common, cmodel, dashboard, prometheus, stat, table, timeseries, JSONEncoder, model


SMOKE_SEL = 'target=~"$target", node=~"$node", layout=~"$layout"'
DCGM_SEL = 'instance=~"$gpu_instance"'


def build_dashboard() -> dict[str, Any]:
    """The dashboard as Grafana JSON (a dict), built with grafana-foundation-sdk."""
    common, cmodel, dashboard, prometheus, stat, table, timeseries, JSONEncoder, model = _sdk()
    ds = model.DataSourceRef(type_val="prometheus", uid="${datasource}")

    ids = iter(range(1, 1000))

    def q(expr: str, legend: str = "", ref: str = "A", instant: bool = False):
        b = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(ds)
        if legend:
            b = b.legend_format(legend)
        if instant:
            b = b.instant()
        return b

    def legend():
        return (common.VizLegendOptions().show_legend(True).display_mode(cmodel.LegendDisplayMode.TABLE)
                .placement(cmodel.LegendPlacement.BOTTOM).calcs(["lastNotNull", "min", "max"]))

    def ts(title: str, desc: str, unit: str, *queries, x: int, y: int, w: int = 12, h: int = 8):
        p = (timeseries.Panel().id(next(ids)).title(title).description(desc).unit(unit).datasource(ds)
             .legend(legend()).grid_pos(model.GridPos(h=h, w=w, x=x, y=y)))
        for qq in queries:
            p = p.with_target(qq)
        return p

    def st(title: str, desc: str, unit: str, query, *, x: int, y: int, w: int = 6, h: int = 4):
        return (stat.Panel().id(next(ids)).title(title).description(desc).unit(unit).datasource(ds)
                .with_target(query).grid_pos(model.GridPos(h=h, w=w, x=x, y=y)))

    def var(name: str, label: str, query: str):
        return (dashboard.QueryVariable(name).label(label).datasource(ds).query(query)
                .include_all(True).all_value(".*").multi(True)
                .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED))

    b = (dashboard.Dashboard("envbuilder: smoke job and GPUs").uid(DASHBOARD_UID)
         .description("The envbuilder smoke job's results (pass/fail, all-reduce bus bandwidth, "
                      "rendezvous and step times) beside NVIDIA DCGM exporter GPU metrics.")
         .tags(["envbuilder", "gpu", "dcgm", "nccl"]).refresh("1m").time("now-7d", "now")
         .timezone("browser").editable()
         .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus")
                        .type("prometheus"))
         .with_variable(var("target", "target", "label_values(envbuilder_smoke_success, target)"))
         .with_variable(var("node", "node", "label_values(envbuilder_smoke_success, node)"))
         .with_variable(var("layout", "layout", "label_values(envbuilder_smoke_success, layout)"))
         .with_variable(var("gpu_instance", "DCGM exporter",
                            "label_values(DCGM_FI_DEV_GPU_UTIL, instance)")))

    b = b.with_row(dashboard.Row("Smoke job").id(next(ids)).grid_pos(model.GridPos(h=1, w=24, x=0, y=0)))
    b = b.with_panel(st("Last run passed", "1: every check passed; 0: a check failed.", "none",
                        q(f"min(envbuilder_smoke_success{{{SMOKE_SEL}}})", instant=True), x=0, y=1))
    b = b.with_panel(st("Best all-reduce busbw", "Largest bus bandwidth over message sizes.", "Bps",
                        q(f"max(envbuilder_smoke_allreduce_busbw_bytes_per_second{{{SMOKE_SEL}}})",
                          instant=True), x=6, y=1))
    b = b.with_panel(st("World size", "Ranks of the last run.", "none",
                        q(f"max(envbuilder_smoke_world_size{{{SMOKE_SEL}}})", instant=True), x=12, y=1))
    b = b.with_panel(st("Hours since last run", "A scheduled smoke job that stopped shows here.", "h",
                        q(f"(time() - max(envbuilder_smoke_last_run_timestamp_seconds{{{SMOKE_SEL}}})) / 3600",
                          instant=True), x=18, y=1))
    b = b.with_panel(ts("All-reduce bus bandwidth per message size",
                        "busbw = algbw x 2(n-1)/n, as nccl-tests report it.", "Bps",
                        q(f"envbuilder_smoke_allreduce_busbw_bytes_per_second{{{SMOKE_SEL}}}",
                          "{{target}} {{node}} {{layout}} {{message_bytes}} B"), x=0, y=5))
    b = b.with_panel(ts("Smoke pass / fail", "1 passed, 0 failed, per target, node and layout.", "none",
                        q(f"envbuilder_smoke_success{{{SMOKE_SEL}}}", "{{target}} {{node}} {{layout}}"),
                        x=12, y=5))
    b = b.with_panel(ts("Time to rendezvous", "init_process_group on the slowest rank.", "s",
                        q(f"envbuilder_smoke_rendezvous_seconds{{{SMOKE_SEL}}}",
                          "{{target}} {{node}} {{layout}}"), x=0, y=13))
    b = b.with_panel(ts("Phase durations", "Each check on its slowest rank.", "s",
                        q(f"envbuilder_smoke_phase_duration_seconds{{{SMOKE_SEL}}}",
                          "{{target}} {{layout}} {{phase}}"), x=12, y=13))
    b = b.with_panel(ts("DDP step time per rank", "Mean step (forward, backward, optimizer); a slow "
                        "rank or node stands out.", "s",
                        q(f"envbuilder_smoke_rank_step_seconds{{{SMOKE_SEL}}}",
                          "rank {{rank}} on {{host}}"), x=0, y=21))
    b = b.with_panel(table.Panel().id(next(ids)).title("Failed checks").description(
        "Checks that failed in the last run of each target, node and layout.").datasource(ds)
        .with_target(q(f'envbuilder_smoke_check_status{{{SMOKE_SEL}, status="fail"}} == 1',
                       instant=True))
        .grid_pos(model.GridPos(h=8, w=12, x=12, y=21)))

    b = b.with_row(dashboard.Row("GPUs (NVIDIA DCGM exporter)").id(next(ids))
                   .grid_pos(model.GridPos(h=1, w=24, x=0, y=29)))
    gpu = "{{instance}} GPU {{gpu}}"
    b = b.with_panel(ts("GPU utilisation", "DCGM_FI_DEV_GPU_UTIL", "percent",
                        q(f"DCGM_FI_DEV_GPU_UTIL{{{DCGM_SEL}}}", gpu), x=0, y=30))
    b = b.with_panel(ts("Framebuffer memory used", "DCGM_FI_DEV_FB_USED (MiB)", "decmbytes",
                        q(f"DCGM_FI_DEV_FB_USED{{{DCGM_SEL}}}", gpu), x=12, y=30))
    b = b.with_panel(ts("GPU temperature", "DCGM_FI_DEV_GPU_TEMP", "celsius",
                        q(f"DCGM_FI_DEV_GPU_TEMP{{{DCGM_SEL}}}", gpu), x=0, y=38))
    b = b.with_panel(ts("Power draw", "DCGM_FI_DEV_POWER_USAGE", "watt",
                        q(f"DCGM_FI_DEV_POWER_USAGE{{{DCGM_SEL}}}", gpu), x=12, y=38))
    b = b.with_panel(ts("NVLink traffic", "rate of DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (all lanes)",
                        "Bps", q(f"rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{{DCGM_SEL}}}[5m])", gpu),
                        x=0, y=46))
    b = b.with_panel(ts("PCIe replays", "rate of DCGM_FI_DEV_PCIE_REPLAY_COUNTER: a flaky PCIe link",
                        "ops", q(f"rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{DCGM_SEL}}}[5m])", gpu),
                        x=12, y=46))
    b = b.with_panel(ts("XID errors", "DCGM_FI_DEV_XID_ERRORS: the last XID a GPU reported (0: none)",
                        "none", q(f"DCGM_FI_DEV_XID_ERRORS{{{DCGM_SEL}}}", gpu), x=0, y=54, w=24))
    built = b.build()
    return json.loads(JSONEncoder(sort_keys=True, indent=2).encode(built))


def dashboard_text(dashboard: dict) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def shipped_dashboard() -> str:
    """The pre-generated dashboard that ``render`` writes (scripts/gen-dashboard.py makes it)."""
    path = templates_dir() / "monitoring" / "dashboard.json"
    return path.read_text(encoding="utf-8")


def load_dashboard_model(text: str):
    """Parse dashboard JSON into grafana-foundation-sdk's Dashboard model (needs the extra)."""
    *_, model = _sdk()
    return model.Dashboard.from_json(json.loads(text))


# ----------------------------------------------------------------------------- the folder

@functools.lru_cache(maxsize=8)
def _static_files(floor: float | None) -> tuple[tuple[str, str], ...]:
    """The files that depend only on the busbw floor (render --all writes them per target)."""
    return tuple(_static_dict(floor).items())


@functools.lru_cache(maxsize=1)
def _dcgm_counters_once() -> DcgmCounters:
    return dcgm_counters()


def _static_dict(floor: float | None) -> dict[str, str]:
    return {
        DASHBOARD_FILE: shipped_dashboard(),
        "monitoring/alerts.yml": alert_rules_yaml(floor),
        "monitoring/prometheusrule.yaml": prometheus_rule_yaml(floor),
        "monitoring/prometheus.yml": (
            f"# Rendered by envbuilder {__version__}: a plain Prometheus configuration for the "
            f"smoke job's metrics and DCGM.\n# Replace NODE / PUSHGATEWAY with your hosts "
            f"(or use file_sd / kubernetes_sd); check with: promtool check config prometheus.yml\n"
            + _yaml(prometheus_config())),
        "monitoring/podmonitor-dcgm-exporter.yaml": (
            "# The Prometheus Operator scrapes gpu-operator's DCGM exporter (skip if its own\n"
            "# ServiceMonitor is on: helm --set dcgmExporter.serviceMonitor.enabled=true)\n"
            + _yaml(_podmonitor_dcgm())),
        "monitoring/servicemonitor-pushgateway.yaml": (
            "# The Prometheus Operator scrapes the Pushgateway the smoke results are pushed to;\n"
            "# honorLabels keeps the pushed labels (target, node, layout, image)\n"
            + _yaml(_servicemonitor_pushgateway())),
    }


def make_env(loader):
    """The environment of monitoring/'s templates (precompiled.SETS declares its options)."""
    return precompiled.make_env("monitoring", loader)


precompiled.register("monitoring", make_env)


def render_monitoring(*, target: str, job_names: Iterable[str],
                      min_busbw_gbps: float | None = None) -> dict[str, str]:
    """Every file of the ``monitoring/`` folder, as relative path -> content (``min_busbw_gbps``:
    a spec's, checked when it was made)."""
    floor = min_busbw_gbps
    files = dict(_static_files(floor))
    counters = _dcgm_counters_once()
    env = environment(("monitoring",), lambda: make_env(precompiled.loader("monitoring")))
    files["monitoring/README.md"] = env.get_template("monitoring/README.md.j2").render(
        version=__version__, target=target, jobs=list(job_names), floor=floor,
        metrics=METRICS, dcgm_source=counters.source, job=JOB, dcgm_port=DCGM_PORT,
        dcgm_pod_port=DCGM_POD_PORT)
    return files


__all__ = ["render_monitoring", "build_dashboard", "alert_groups", "alert_rules_yaml",
           "prometheus_config", "promql_metric_names", "dashboard_metric_names",
           "known_metrics", "dcgm_counters", "load_dashboard_model", "shipped_dashboard",
           "dashboard_text"]
