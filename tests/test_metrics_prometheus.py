"""A 12-rank smoke run's metrics in real Prometheus parts (Debian's packages, started here on
127.0.0.1 with free ports, stopped at the end):

* ``envbuilder smoke --host --nproc 12`` (torch CPU, gloo) writes a textfile and pushes to
  ``prometheus-pushgateway``;
* ``promtool check metrics`` accepts the textfile; ``prometheus-node-exporter``'s textfile
  collector reads it without error;
* ``prometheus``, configured by ``monitoring.prometheus_config`` and the rendered alert rules,
  scrapes node-exporter and the Pushgateway; PromQL returns the run's busbw, every smoke metric
  the dashboard names exists, and the busbw alert fires for a floor above what this run measured.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import _free_port
from envbuilder.render import monitoring
from envbuilder.run import metrics as mx

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
FLOOR_GBPS = 50000.0  # far above a CPU gloo run: the busbw alert must fire


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("ENVBUILDER_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{tool} is not installed (scripts/test-services.sh installs it)")
        pytest.skip(f"{tool} is not installed (apt-get install prometheus prometheus-pushgateway "
                    f"prometheus-node-exporter)")
    return path


def http_get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def wait_http(url: str, proc: subprocess.Popen, log: Path, deadline: float = 60.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"{proc.args[0]} exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            http_get(url, timeout=2)
            return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"{url} did not answer in {deadline:.0f} s: {log.read_text()[-2000:]}")


class Services:
    """The processes this module started; stop() ends each by its own pid."""

    def __init__(self, root: Path):
        self.root = root
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, args: list[str], ready: str) -> subprocess.Popen:
        log = self.root / f"{name}.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, cwd=self.root,
                                    start_new_session=True)
        self.procs.append(proc)
        wait_http(ready, proc, log)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=15)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Pushgateway and node-exporter up, then the 12-rank run, then Prometheus."""
    promtool = need("promtool")
    prometheus = need("prometheus")
    pushgateway = need("prometheus-pushgateway")
    node_exporter = need("prometheus-node-exporter")
    if subprocess.run([sys.executable, "-c", "import torch.distributed"],
                      capture_output=True).returncode != 0:
        pytest.skip("torch is not installed (scripts/test.sh installs torch 2.13.0 CPU)")
    root = tmp_path_factory.mktemp("prom")
    textfiles = root / "textfiles"
    textfiles.mkdir()
    svc = Services(root)
    try:
        pg = f"127.0.0.1:{_free_port()}"
        svc.start("pushgateway", [pushgateway, f"--web.listen-address={pg}"], f"http://{pg}/-/ready")
        ne = f"127.0.0.1:{_free_port()}"
        svc.start("node-exporter", [node_exporter, f"--web.listen-address={ne}",
                                    "--collector.disable-defaults", "--collector.textfile",
                                    f"--collector.textfile.directory={textfiles}"],
                  f"http://{ne}/metrics")

        prom_file = textfiles / "envbuilder_smoke-cpu-1x12.prom"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        run = subprocess.run(
            [sys.executable, "-m", "envbuilder.cli", "smoke", "--host", "--nproc", "12",
             "--backend", "gloo", "--timeout", "60", "--metrics-file", str(prom_file),
             "--pushgateway", f"http://{pg}", "--label", "target=cpu", "--json"],
            capture_output=True, text=True, env=env, timeout=600, cwd=root)
        assert run.returncode == 0, run.stderr[-3000:]
        data = json.loads(run.stdout)

        (root / "alerts.yml").write_text(monitoring.alert_rules_yaml(FLOOR_GBPS))
        config = monitoring.prometheus_config(node_exporters=[ne], pushgateways=[pg],
                                              dcgm_exporters=[], rule_files=["alerts.yml"],
                                              scrape_interval="1s")
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        check = subprocess.run([promtool, "check", "config", "prometheus.yml"], cwd=root,
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        pm = f"127.0.0.1:{_free_port()}"
        svc.start("prometheus", [prometheus, "--config.file=prometheus.yml",
                                 f"--storage.tsdb.path={root / 'tsdb'}",
                                 f"--web.listen-address={pm}"], f"http://{pm}/-/ready")
        yield {"root": root, "prom_file": prom_file, "run": data, "promtool": promtool,
               "pushgateway": pg, "node_exporter": ne, "prometheus": pm}
    finally:
        svc.stop()


def query(stack, expr: str, *, want=lambda r: bool(r), deadline: float = 45.0) -> list[dict]:
    """An instant PromQL query, retried until ``want(result)`` (scrapes run every second)."""
    url = f"http://{stack['prometheus']}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    end = time.monotonic() + deadline
    result: list[dict] = []
    while time.monotonic() < end:
        doc = json.loads(http_get(url))
        assert doc["status"] == "success", doc
        result = doc["data"]["result"]
        if want(result):
            return result
        time.sleep(0.5)
    return result


def test_the_12_rank_run_passed_and_recorded_its_timings(stack):
    run = stack["run"]
    assert run["ok"] and run["world_size"] == 12 and run["backend"] == "gloo"
    assert len(run["ranks"]) == 12
    for rec in run["ranks"]:
        assert rec["rendezvous_seconds"] > 0
        assert len(rec["step_seconds"]) == 3 and all(s > 0 for s in rec["step_seconds"])
    assert run["metrics"]["written"] == str(stack["prom_file"])
    assert run["metrics"]["pushed"] == "/metrics/job/envbuilder_smoke/target/cpu/node/%s/layout/1x12" \
        % socket.gethostname()


def test_promtool_accepts_the_metrics_file(stack):
    r = subprocess.run([stack["promtool"], "check", "metrics"],
                       input=stack["prom_file"].read_text(), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_node_exporter_reads_the_textfile(stack):
    text = http_get(f"http://{stack['node_exporter']}/metrics").decode()
    assert "node_textfile_scrape_error 0" in text
    assert 'envbuilder_smoke_world_size{backend="gloo"' in text


def test_prometheus_returns_the_busbw_of_this_run(stack):
    from envbuilder.run.smoke import allreduce_rows

    # the all-reduce rows of the size sweep (all-gather and reduce-scatter have rows too)
    expected = {str(b["bytes"]): b["busbw_gbps"] * 1e9 for b in allreduce_rows(stack["run"]["bandwidth"])}
    assert len(expected) == 3 and all(v > 0 for v in expected.values())
    result = query(stack, 'envbuilder_smoke_allreduce_busbw_bytes_per_second'
                          '{job="node", target="cpu", layout="1x12"}',
                   want=lambda r: len(r) == len(expected))
    got = {r["metric"]["message_bytes"]: float(r["value"][1]) for r in result}
    assert got.keys() == expected.keys()
    for size, v in expected.items():
        assert got[size] == pytest.approx(v, rel=1e-9)
    for r in result:
        assert r["metric"]["backend"] == "gloo" and r["metric"]["image"] == "host"


def test_prometheus_scrapes_the_pushed_run_with_its_own_labels(stack):
    body = http_get(f"http://{stack['pushgateway']}/metrics").decode()
    assert 'envbuilder_smoke_success{backend="gloo"' in body and 'job="envbuilder_smoke"' in body
    result = query(stack, 'envbuilder_smoke_world_size{job="envbuilder_smoke", target="cpu"}')
    assert len(result) == 1 and float(result[0]["value"][1]) == 12
    ranks = query(stack, 'count(envbuilder_smoke_rank_step_seconds{job="envbuilder_smoke"})')
    assert float(ranks[0]["value"][1]) == 12


def test_every_smoke_metric_the_dashboard_names_is_in_prometheus(stack):
    wanted = {n for n in monitoring.dashboard_metric_names(json.loads(monitoring.shipped_dashboard()))
              if n.startswith("envbuilder_smoke_")}
    assert wanted
    result = query(stack, 'count by (__name__) ({job="node", __name__=~"envbuilder_smoke_.+"})',
                   want=lambda r: len(r) >= len(mx.METRICS))
    present = {r["metric"]["__name__"] for r in result}
    assert present == set(mx.METRICS)
    assert wanted <= present


def test_the_busbw_alert_fires_below_the_floor(stack):
    result = query(stack, 'ALERTS{alertname="EnvbuilderSmokeBusbwLow", alertstate="firing"}',
                   want=lambda r: len(r) >= 2)
    assert {r["metric"]["job"] for r in result} == {"node", "envbuilder_smoke"}
    assert not query(stack, 'ALERTS{alertname="EnvbuilderSmokeFailed"}', deadline=2)
