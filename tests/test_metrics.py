"""The smoke job's metrics (envbuilder/run/metrics.py) and the monitoring/ folder
(envbuilder/render/monitoring.py), checked with Debian's real promtool where it matters.

Fast tests: records shaped as the payload writes them (``ddp_smoke.build_summary`` makes the
summary). The 12-rank run, a real Prometheus, node-exporter and Pushgateway are in
tests/test_metrics_prometheus.py (marked slow).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from envbuilder.cli import app
from envbuilder.errors import InputError
from envbuilder.render import monitoring
from envbuilder.run import metrics as mx
from envbuilder.run import smoke
from envbuilder.run.payload import ddp_smoke

ROOT = Path(__file__).resolve().parent.parent


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("ENVBUILDER_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{tool} is not installed (scripts/test-services.sh installs it)")
        pytest.skip(f"{tool} is not installed (apt-get install prometheus)")
    return path


def rank_record(rank: int, world: int, host: str, *, fail: str | None = None) -> dict:
    checks = [{"name": n, "status": "fail" if n == fail else "pass", "detail": "",
               "seconds": round(0.01 * (rank + 1) + i * 0.001, 4)}
              for i, n in enumerate(("rendezvous", "all_reduce", "ddp", "bandwidth"))]
    bw = [{"bytes": 65536, "seconds": 0.001, "algbw_gbps": 0.0655, "busbw_gbps": 0.1201},
          {"bytes": 2097152, "seconds": 0.01, "algbw_gbps": 0.2097, "busbw_gbps": 0.3845}]
    return {"rank": rank, "local_rank": rank % (world // 2 or 1), "world_size": world,
            "hostname": host, "backend": "gloo", "torch_version": "2.13.0+cpu",
            "checks": checks, "bandwidth": bw if rank == 0 else [],
            "rendezvous_seconds": 0.5 + rank / 100, "step_seconds": [0.02, 0.03, 0.04],
            "ok": fail is None}


def records(world: int = 4, hosts=("node-a", "node-b"), fail_rank: int | None = None):
    per = world // len(hosts)
    recs = [rank_record(r, world, hosts[r // per],
                        fail="ddp" if r == fail_rank else None) for r in range(world)]
    summary = ddp_smoke.build_summary(recs, world_size=world, backend="gloo",
                                      torch_version="2.13.0+cpu", seconds=12.5)
    return summary, recs


def result(world: int = 4, fail_rank: int | None = None) -> smoke.SmokeResult:
    summary, recs = records(world, fail_rank=fail_rank)
    return smoke.build_result(summary=summary, ranks=recs, log="", exit_code=0 if fail_rank is None else 1,
                              nproc_per_node=world // 2, nnodes=2, backend="gloo", seconds=13.0,
                              where="host")


def samples(reg) -> dict[tuple[str, tuple], float]:
    out = {}
    for m in reg.collect():
        for s in m.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(reg, name: str, **labels) -> float:
    found = [v for (n, ls), v in samples(reg).items()
             if n == name and all(dict(ls).get(k) == str(w) for k, w in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


LABELS = mx.MetricLabels(target="cpu", image="reg.example/ml/train:cpu", image_digest="sha256:ab",
                         node="node-a", layout="2x2", backend="gloo")


# ----------------------------------------------------------------------------- the registry

def test_registry_holds_every_metric_with_the_run_figures():
    reg = mx.smoke_registry(result(), LABELS, now=1700000000.0)
    names = {m.name for m in reg.collect()}
    assert names == set(mx.METRICS)
    assert value(reg, "envbuilder_smoke_success") == 1
    assert value(reg, "envbuilder_smoke_world_size") == 4
    assert value(reg, "envbuilder_smoke_nodes") == 2
    # busbw in bytes per second, one series per message size
    assert value(reg, "envbuilder_smoke_allreduce_busbw_bytes_per_second",
                 message_bytes=2097152) == pytest.approx(0.3845e9)
    assert value(reg, "envbuilder_smoke_allreduce_algbw_bytes_per_second",
                 message_bytes=65536) == pytest.approx(0.0655e9)
    # rendezvous: the slowest rank; per-rank series name rank and host
    assert value(reg, "envbuilder_smoke_rendezvous_seconds") == pytest.approx(0.53)
    assert value(reg, "envbuilder_smoke_rank_rendezvous_seconds", rank=2, host="node-b") == pytest.approx(0.52)
    assert value(reg, "envbuilder_smoke_rank_step_seconds", rank=3, host="node-b") == pytest.approx(0.03)
    # a phase's duration is its slowest rank's
    assert value(reg, "envbuilder_smoke_phase_duration_seconds", phase="rendezvous") == pytest.approx(0.04)
    assert value(reg, "envbuilder_smoke_check_status", check="ddp", status="pass") == 1
    assert value(reg, "envbuilder_smoke_check_status", check="ddp", status="fail") == 0
    assert value(reg, "envbuilder_smoke_last_run_timestamp_seconds") == 1700000000.0
    for (_, ls), _v in samples(reg).items():
        assert {k: v for k, v in ls if k in mx.LABELS} == LABELS.as_dict()


def test_a_failed_run_is_success_0_and_names_the_failed_check():
    reg = mx.smoke_registry(result(fail_rank=1), LABELS)
    assert value(reg, "envbuilder_smoke_success") == 0
    assert value(reg, "envbuilder_smoke_check_status", check="ddp", status="fail") == 1


def test_timings_come_from_the_summary_when_there_are_no_rank_records():
    summary, _ = records()
    r = smoke.build_result(summary=summary, ranks=[], log="", exit_code=0, nproc_per_node=2,
                           nnodes=2, backend="gloo", seconds=1.0, where="x")
    reg = mx.smoke_registry(r, LABELS)
    assert value(reg, "envbuilder_smoke_rank_step_seconds", rank=1, host="node-a") == pytest.approx(0.03)


def test_label_values_are_escaped_by_the_library():
    labels = mx.MetricLabels(target='x"y', image="a\\b", node="n\nm", layout="1x4", backend="gloo")
    text = mx.exposition(mx.smoke_registry(result(), labels))
    assert 'target="x\\"y"' in text and 'node="n\\nm"' in text and 'image="a\\\\b"' in text


def test_exposition_passes_promtool_check_metrics():
    promtool = need("promtool")
    text = mx.exposition(mx.smoke_registry(result(), LABELS))
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_rejects_a_broken_exposition():
    """The check above can fail: promtool refuses a metric family written twice."""
    promtool = need("promtool")
    text = mx.exposition(mx.smoke_registry(result(), LABELS))
    bad = text + "# TYPE envbuilder_smoke_success gauge\nenvbuilder_smoke_success 1\n"
    r = subprocess.run([promtool, "check", "metrics"], input=bad, capture_output=True, text=True)
    assert r.returncode != 0


@pytest.mark.parametrize("per_node,layout", [({"a": 6, "b": 6}, "2x6"), ({"a": 7, "b": 5}, "7,5"),
                                             ({"a": 12}, "1x12")])
def test_layout_label(per_node, layout):
    r = smoke.SmokeResult(ok=True, world_size=12, nproc_per_node=6, nnodes=2, backend="gloo",
                          checks={}, failed=[], bandwidth=[], summary={"ranks_per_node": per_node},
                          ranks=[], log="", exit_code=0, seconds=1.0, where="host")
    assert mx.layout_label(r) == layout


# ----------------------------------------------------------------------------- inputs

def test_metrics_file_must_be_prom_and_ours(tmp_path):
    with pytest.raises(InputError, match=r"\.prom"):
        mx.check_target(tmp_path / "m.txt", None)
    with pytest.raises(InputError, match="folder"):
        (tmp_path / "d.prom").mkdir()
        mx.check_target(tmp_path / "d.prom", None)
    foreign = tmp_path / "node.prom"
    foreign.write_text("# HELP other_metric x\nother_metric 1\n")
    with pytest.raises(InputError, match="not written by envbuilder"):
        mx.check_target(foreign, None)
    assert foreign.read_text().startswith("# HELP other_metric")
    ours = tmp_path / "ours.prom"
    mx.write_textfile(mx.smoke_registry(result(), LABELS), ours)
    assert mx.check_target(ours, None).metrics_file == ours  # rewriting our own file is fine


@pytest.mark.parametrize("url", ["pushgateway:9091", "ftp://h:1", "http://", "http://h:1/?a=b",
                                 "http://h:1/$(id)"])
def test_bad_pushgateway_urls(url):
    with pytest.raises(InputError, match="--pushgateway"):
        mx.check_target(None, url)


@pytest.mark.parametrize("pair", ["layout=1x2", "target", "=x", "node=a\nb"])
def test_bad_labels(pair):
    with pytest.raises(InputError, match="--label"):
        mx.parse_label_overrides([pair])


def test_label_overrides_win():
    labels = mx.labels_for(result(), image="img", overrides=mx.parse_label_overrides(
        ["target=cu121", "node=gpu-07", "image_digest=sha256:cd"]))
    assert (labels.target, labels.node, labels.image_digest, labels.layout) == \
        ("cu121", "gpu-07", "sha256:cd", "2x2")


def test_push_to_a_closed_port_is_an_operation_error():
    from conftest import _free_port
    from envbuilder.errors import OperationError

    with pytest.raises(OperationError, match="Pushgateway"):
        mx.push(mx.smoke_registry(result(), LABELS), f"http://127.0.0.1:{_free_port()}", LABELS,
                timeout=3)


# ----------------------------------------------------------------------------- records

def write_records(folder: Path, world: int = 4, fail_rank: int | None = None) -> dict:
    summary, recs = records(world, fail_rank=fail_rank)
    folder.mkdir(parents=True, exist_ok=True)
    for rec in recs:
        (folder / f"rank-{rec['rank']}.json").write_text(json.dumps(rec))
    (folder / "summary.json").write_text(json.dumps(summary))
    return summary


def test_result_from_a_records_folder_and_from_a_log(tmp_path):
    summary = write_records(tmp_path / "out")
    r = mx.result_from_records(str(tmp_path / "out"))
    assert r.ok and r.world_size == 4 and len(r.ranks) == 4 and mx.layout_label(r) == "2x2"
    log = tmp_path / "master-0.log"
    log.write_text("some torchrun noise\n%s %s\n" % (ddp_smoke.SUMMARY_MARKER, json.dumps(summary)))
    r2 = mx.result_from_records(str(log))
    assert r2.ok and r2.bandwidth == r.bandwidth and r2.ranks == []
    reg = mx.smoke_registry(r2, LABELS)
    assert value(reg, "envbuilder_smoke_rank_step_seconds", rank=0, host="node-a") == pytest.approx(0.03)


def test_records_errors(tmp_path):
    with pytest.raises(InputError, match="no such"):
        mx.result_from_records(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="summary.json"):
        mx.result_from_records(str(tmp_path / "empty"))
    (tmp_path / "x.log").write_text("nothing here\n")
    with pytest.raises(InputError, match="ENVBUILDER_SMOKE_SUMMARY"):
        mx.result_from_records(str(tmp_path / "x.log"))


def test_cli_records_to_metrics_file(tmp_path):
    write_records(tmp_path / "out")
    prom = tmp_path / "tf" / "smoke.prom"
    r = CliRunner().invoke(app, ["smoke", "--records", str(tmp_path / "out"), "--metrics-file",
                                 str(prom), "--label", "target=cpu", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["ok"] and data["metrics"]["written"] == str(prom)
    text = prom.read_text()
    assert 'envbuilder_smoke_success{backend="gloo",image="",image_digest="",layout="2x2"' in text
    assert 'target="cpu"' in text


def test_cli_records_of_a_failed_run_write_metrics_and_exit_1(tmp_path):
    write_records(tmp_path / "out", fail_rank=2)
    prom = tmp_path / "smoke.prom"
    r = CliRunner().invoke(app, ["smoke", "--records", str(tmp_path / "out"), "--metrics-file",
                                 str(prom)])
    assert r.exit_code == 1
    assert "envbuilder_smoke_success{" in prom.read_text() and "} 0.0" in prom.read_text()


@pytest.mark.parametrize("args,msg", [
    (["--metrics-file", "m.txt", "--host"], ".prom"),
    (["--pushgateway", "nope", "--host"], "--pushgateway"),
    (["--records", "x", "--host"], "--records"),
    (["--label", "bogus=1", "--host"], "--label"),
])
def test_cli_bad_metrics_input_is_exit_2(args, msg):
    r = CliRunner().invoke(app, ["smoke", *args])
    assert r.exit_code == 2 and msg in r.output


# ----------------------------------------------------------------------------- monitoring/

def test_promql_metric_names():
    names = monitoring.promql_metric_names(
        'max without (message_bytes) (rate(foo_total{a="b",c=~"$x"}[5m])) / on (x) bar > 3 '
        'and time() - baz offset 5m')
    assert names == {"foo_total", "bar", "baz"}


def test_dashboard_names_only_smoke_and_dcgm_default_metrics():
    dash = json.loads(monitoring.shipped_dashboard())
    names = monitoring.dashboard_metric_names(dash)
    assert names <= monitoring.known_metrics(), names - monitoring.known_metrics()
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS",
            "envbuilder_smoke_allreduce_busbw_bytes_per_second",
            "envbuilder_smoke_success"} <= names
    # the check can fail: a made-up metric is caught
    dash["panels"][1]["targets"][0]["expr"] = "DCGM_FI_PROF_NVLINK_TX_BYTES"
    assert not monitoring.dashboard_metric_names(dash) <= monitoring.known_metrics()


def test_dcgm_counters_are_sourced():
    c = monitoring.dcgm_counters()
    assert c.source.startswith("https://github.com/NVIDIA/dcgm-exporter/blob/")
    assert c.source.endswith("/etc/default-counters.csv")
    assert "DCGM_FI_DEV_XID_ERRORS" in c.enabled and len(c.enabled) == len(set(c.enabled))


def test_dashboard_loads_in_the_sdk_model_and_is_up_to_date():
    pytest.importorskip("grafana_foundation_sdk")
    text = monitoring.shipped_dashboard()
    model = monitoring.load_dashboard_model(text)
    assert model.title == "envbuilder: smoke job and GPUs" and model.uid == monitoring.DASHBOARD_UID
    assert len(model.panels) == len(json.loads(text)["panels"])
    # the shipped JSON is what scripts/gen-dashboard.py builds now
    assert monitoring.dashboard_text(monitoring.build_dashboard()) == text, \
        "templates/monitoring/dashboard.json is stale: run python scripts/gen-dashboard.py"


def test_rules_pass_promtool_check(tmp_path):
    promtool = need("promtool")
    for floor in (None, 80.0):
        f = tmp_path / f"alerts-{floor}.yml"
        f.write_text(monitoring.alert_rules_yaml(floor))
        r = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        n = 4 if floor else 3
        assert f"SUCCESS: {n} rules found" in r.stdout
    rule = yaml.safe_load(monitoring.prometheus_rule_yaml(80.0))
    assert rule["kind"] == "PrometheusRule" and rule["spec"]["groups"] == monitoring.alert_groups(80.0)


RULE_TESTS = """
rule_files: [alerts.yml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  # node-a's busbw halves after a driver update; node-b stays healthy
  - series: 'envbuilder_smoke_allreduce_busbw_bytes_per_second{target="cu121",node="a",layout="1x8",backend="nccl",image="i",image_digest="d",message_bytes="33554432"}'
    values: '150e9x4 70e9x5'
  - series: 'envbuilder_smoke_allreduce_busbw_bytes_per_second{target="cu121",node="a",layout="1x8",backend="nccl",image="i",image_digest="d",message_bytes="1048576"}'
    values: '20e9x9'
  - series: 'envbuilder_smoke_allreduce_busbw_bytes_per_second{target="cu121",node="b",layout="1x8",backend="nccl",image="i",image_digest="d",message_bytes="33554432"}'
    values: '150e9x9'
  - series: 'envbuilder_smoke_success{target="cu121",node="a",layout="1x8",backend="nccl",image="i",image_digest="d"}'
    values: '1x4 0x5'
  - series: 'envbuilder_smoke_last_run_timestamp_seconds{target="cu121",node="a",layout="1x8",backend="nccl",image="i",image_digest="d"}'
    values: '0x9'
  - series: 'DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-abc",modelName="NVIDIA H100 80GB HBM3",Hostname="a",instance="a:9400",job="dcgm"}'
    values: '0x3 79x5'
  alert_rule_test:
  - eval_time: 3m
    alertname: EnvbuilderSmokeBusbwLow
    exp_alerts: []
  - eval_time: 7m
    alertname: EnvbuilderSmokeBusbwLow
    exp_alerts:
    - exp_labels: {severity: warning, target: cu121, node: a, layout: 1x8, backend: nccl, image: i, image_digest: d}
      exp_annotations:
        summary: 'all-reduce bus bandwidth below 100 GB/s: cu121 on a (1x8, nccl)'
        description: "The smoke job's best all-reduce busbw is 70GB/s, under the floor of 100 GB/s set with --min-busbw: a degraded link, a driver or NCCL change, or a rank on the wrong interface."
  - eval_time: 3m
    alertname: EnvbuilderSmokeFailed
    exp_alerts: []
  - eval_time: 6m
    alertname: EnvbuilderSmokeFailed
    exp_alerts:
    - exp_labels: {severity: critical, target: cu121, node: a, layout: 1x8, backend: nccl, image: i, image_digest: d}
      exp_annotations:
        summary: 'envbuilder smoke job failed: cu121 on a (1x8, nccl)'
        description: 'The last smoke run of image i (d) failed a check; query envbuilder_smoke_check_status{status="fail"} == 1 for which, and run envbuilder explain on its log.'
  - eval_time: 2m
    alertname: GpuXidError
    exp_alerts: []
  - eval_time: 5m
    alertname: GpuXidError
    exp_alerts:
    - exp_labels: {severity: critical, gpu: "3", UUID: GPU-abc, modelName: NVIDIA H100 80GB HBM3, Hostname: a, instance: "a:9400", job: dcgm}
      exp_annotations:
        summary: 'GPU 3 on a reported XID 79'
        description: "NVIDIA XID 79 on GPU 3 (GPU-abc, NVIDIA H100 80GB HBM3); see NVIDIA's XID catalogue for the action (reset, drain, RMA). Jobs on this GPU may hang in collectives."
  - eval_time: 9m
    alertname: EnvbuilderSmokeStale
    exp_alerts: []
- interval: 1h
  input_series:
  - series: 'envbuilder_smoke_last_run_timestamp_seconds{target="cu121",node="a",layout="1x8",backend="nccl",image="i",image_digest="d"}'
    values: '0x60'
  alert_rule_test:
  - eval_time: 47h
    alertname: EnvbuilderSmokeStale
    exp_alerts: []
  - eval_time: 49h
    alertname: EnvbuilderSmokeStale
    exp_alerts:
    - exp_labels: {severity: info, target: cu121, node: a, layout: 1x8, backend: nccl, image: i, image_digest: d}
      exp_annotations:
        summary: 'no envbuilder smoke run for 2 days: cu121 on a (1x8, nccl)'
        description: 'The smoke metrics of this target and node are older than 48 h: the scheduled smoke job stopped running.'
"""


def test_rules_pass_promtool_test_rules(tmp_path):
    promtool = need("promtool")
    (tmp_path / "alerts.yml").write_text(monitoring.alert_rules_yaml(100.0))
    (tmp_path / "tests.yml").write_text(RULE_TESTS)
    r = subprocess.run([promtool, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # and the same tests fail against rules with a floor below node a's 70 GB/s
    (tmp_path / "alerts.yml").write_text(monitoring.alert_rules_yaml(50.0))
    r = subprocess.run([promtool, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "EnvbuilderSmokeBusbwLow" in r.stdout + r.stderr


def test_render_writes_monitoring_and_prometheus_config_checks(tmp_path):
    out = tmp_path / "cpu"
    r = CliRunner().invoke(app, ["render", "cpu", "-o", str(out), "--min-busbw", "25", "--json"])
    assert r.exit_code == 0, r.output
    mon = out / "monitoring"
    assert sorted(p.name for p in mon.iterdir()) == sorted([
        "README.md", "alerts.yml", "dashboard.json", "prometheus.yml", "prometheusrule.yaml",
        "podmonitor-dcgm-exporter.yaml", "servicemonitor-pushgateway.yaml"])
    assert (mon / "dashboard.json").read_text() == monitoring.shipped_dashboard()
    assert "< 25000000000" in (mon / "alerts.yml").read_text()
    for f in ("podmonitor-dcgm-exporter.yaml", "servicemonitor-pushgateway.yaml"):
        doc = yaml.safe_load((mon / f).read_text())
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    pod_monitor = yaml.safe_load((mon / "podmonitor-dcgm-exporter.yaml").read_text())
    # gpu-operator's DaemonSet names its container port "metrics" (the Service's is gpu-metrics)
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert yaml.safe_load((mon / "servicemonitor-pushgateway.yaml").read_text())[
        "spec"]["endpoints"][0]["honorLabels"] is True
    readme = (mon / "README.md").read_text()
    assert all(name in readme for name in mx.METRICS)
    promtool = need("promtool")
    r = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=mon,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("floor", ["0", "-3", "1e9"])
def test_render_bad_floor_is_exit_2(tmp_path, floor):
    r = CliRunner().invoke(app, ["render", "cpu", "-o", str(tmp_path / "o"), "--min-busbw", floor])
    assert r.exit_code == 2 and "--min-busbw" in r.output
    assert not (tmp_path / "o").exists()


def test_slurm_scripts_write_the_textfile():
    from envbuilder.api import resolve_target
    from envbuilder.render.jobs import render_jobs
    from envbuilder.render.plan import make_plan

    files = render_jobs(make_plan(resolve_target("cpu")), image="envbuilder:cpu", gpus=False)
    script = files["jobs/slurm-pyxis-2x6.sbatch"]
    assert '--records "$out" --metrics-file "$metrics_dir/envbuilder_smoke-smoke-cpu-2x6.prom"' in script
    assert "ENVBUILDER_PUSHGATEWAY" in script and 'exit "$rc"' in script
    for kind in ("trainjob", "jobset", "indexed-job"):
        text = files[f"jobs/{kind}-2x6.yaml"]
        assert "envbuilder smoke --records - --pushgateway" in text
        assert '"envbuilder.io/layout": "2x6"' in text


# ----------------------------------------------------------------------------- in an image

@pytest.mark.docker
def test_build_writes_the_smoke_metrics_with_the_image_digest(cpu_build, docker_client, base_image,
                                                              wheelhouse, ca_bundle, tmp_path):
    """envbuilder build --metrics-file: the (cached) cpu build, a 2-rank smoke in the image."""
    from conftest import CPU_TARGET
    from envbuilder.api import make_spec
    from envbuilder.run.build import BuildOptions, build_target

    prom = tmp_path / "build.prom"
    opts = BuildOptions(wheelhouse=wheelhouse, ca_cert=ca_bundle,
                        backend="gloo", smoke_timeout=60, context=tmp_path / "ctx",
                        metrics=mx.check_target(prom, None))
    report = build_target(make_spec(CPU_TARGET, base_image=base_image, nproc=2), opts,
                          client=docker_client)
    assert report.smoke["ok"] and report.smoke["metrics"]["written"] == str(prom)
    text = prom.read_text()
    image_id = docker_client.images.get(report.image_id).id
    assert f'image_digest="{image_id}"' in text and f'target="{CPU_TARGET}"' in text
    assert f'image="envbuilder:{report.tag}"' in text and 'layout="1x2"' in text
    promtool = need("promtool")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.docker
def test_smoke_image_labels_come_from_the_image(smoke_image, docker_client, tmp_path):
    prom = tmp_path / "smoke.prom"
    r = CliRunner().invoke(app, ["smoke", smoke_image, "--nproc", "2", "--backend", "gloo",
                                 "--metrics-file", str(prom), "--label", "node=gpu-07", "--json"])
    assert r.exit_code == 0, r.output
    labels = docker_client.images.get(smoke_image).labels
    text = prom.read_text()
    assert f'target="{labels["io.envbuilder.target"]}"' in text
    assert f'image="{smoke_image}"' in text and 'node="gpu-07"' in text
    assert f'image_digest="{docker_client.images.get(smoke_image).id}"' in text


@pytest.mark.parametrize("floor", [None, 0.001, 1.0, 3.5, 25.0, 100.0, 1234.5678, 99999.99])
def test_monitoring_yaml_through_the_one_emitter_is_pyyamls_for_plain_documents(floor):
    # render writes monitoring/ through the one YAML emitter (render.yamlemit); for documents
    # of visible text it writes exactly what PyYAML's SafeDumper writes (and libyaml's)
    docs = [{"groups": monitoring.alert_groups(floor)}, monitoring.prometheus_config(),
            monitoring._podmonitor_dcgm(), monitoring._servicemonitor_pushgateway()]
    for doc in docs:
        kw = dict(sort_keys=False, default_flow_style=False, width=100, allow_unicode=True)
        assert monitoring._yaml(doc) == yaml.dump(doc, Dumper=yaml.SafeDumper, **kw)
        if hasattr(yaml, "CSafeDumper"):
            assert monitoring._yaml(doc) == yaml.dump(doc, Dumper=yaml.CSafeDumper, **kw)
