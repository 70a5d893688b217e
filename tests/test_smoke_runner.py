"""The smoke runner (envbuilder/smoke.py): host runs for real, policies, and container runs.

Container tests use the ``docker_client`` and ``smoke_image`` fixtures from tests/conftest.py
(a real engine and a Debian 12 image with python3 + torch CPU) and are marked ``docker``.
"""

from __future__ import annotations

import json
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.run import smoke
from envbuilder.errors import OperationError
from envbuilder.run.payload import ddp_smoke

SMALL = ("--sizes", "4K,64K", "--iters", "2", "--warmup", "1", "--ddp-steps", "2")
MUST_PASS = {"rendezvous", "all_reduce", "all_gather", "broadcast", "barrier", "ddp", "bandwidth"}

# found, not imported: collection stays fast (an import of torch costs seconds)
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed")


@pytest.fixture(autouse=True)
def _no_inherited_injection(monkeypatch):
    monkeypatch.delenv(ddp_smoke.INJECT_ENV, raising=False)


def fake_result(n: int, ok: bool = True, bandwidth=None) -> smoke.SmokeResult:
    return smoke.SmokeResult(
        ok=ok, world_size=n, nproc_per_node=n, nnodes=1, backend="gloo",
        checks={"all_reduce": "pass" if ok else "fail"}, failed=[] if ok else ["all_reduce"],
        bandwidth=list(bandwidth or []), summary=None, ranks=[], log="", exit_code=0 if ok else 1,
        seconds=1.0, where="host")


# ----------------------------------------------------------------------------- command line

def test_payload_path_is_the_packaged_script():
    p = smoke.payload_path()
    assert p.name == "ddp_smoke.py" and p.is_file()
    assert "ENVBUILDER_SMOKE_SUMMARY" in p.read_text()


def test_torchrun_command_single_node():
    cmd = smoke.torchrun_command("python3", "/x/ddp_smoke.py", nproc_per_node=12, out="/o",
                                 backend="auto", timeout=60)
    assert cmd[:4] == ["python3", "-m", "torch.distributed.run", "--standalone"]
    assert cmd[cmd.index("--nproc_per_node") + 1] == "12"
    assert cmd[cmd.index("--max_restarts") + 1] == "0"
    script = cmd.index("/x/ddp_smoke.py")
    assert cmd.index("--nproc_per_node") < script  # launcher flags before the script
    assert cmd[script + 1:] == ["--out", "/o", "--backend", "auto", "--timeout", "60"]
    assert "--rdzv_endpoint" not in cmd


def test_torchrun_command_multi_node():
    cmd = smoke.torchrun_command("python", "s.py", nproc_per_node=8, nnodes=2, out="/o",
                                 backend="nccl", timeout=30, rdzv_endpoint="node0:29400")
    assert "--standalone" not in cmd
    assert cmd[cmd.index("--nnodes") + 1] == "2"
    assert cmd[cmd.index("--rdzv_backend") + 1] == "c10d"
    assert cmd[cmd.index("--rdzv_endpoint") + 1] == "node0:29400"
    assert cmd[cmd.index("--rdzv_id") + 1] == "envbuilder-smoke"
    static = smoke.torchrun_command("python", "s.py", nproc_per_node=8, nnodes=2, out="/o",
                                    backend="nccl", timeout=30, rdzv_endpoint="10.0.0.1:29500",
                                    node_rank=1)
    assert static[static.index("--node_rank") + 1] == "1"
    assert static[static.index("--master_addr") + 1] == "10.0.0.1"
    assert static[static.index("--master_port") + 1] == "29500"
    with pytest.raises(ValueError):
        smoke.torchrun_command("python", "s.py", nproc_per_node=8, nnodes=2, out="/o",
                               backend="nccl", timeout=30)


@needs_torch
def test_torchrun_accepts_the_flag_spellings():
    cmd = smoke.torchrun_command(sys.executable, "s.py", nproc_per_node=2, out="/o",
                                 backend="gloo", timeout=5)
    proc = subprocess.run(cmd[:3] + ["--help"], capture_output=True, text=True)
    flags = [c for c in cmd[3:cmd.index("s.py")] if c.startswith("--")]
    flags += ["--rdzv_endpoint", "--rdzv_backend", "--rdzv_id", "--nnodes", "--node_rank",
              "--master_addr", "--master_port"]
    for flag in flags:
        assert flag in proc.stdout, flag  # underscore spellings: what torch 1.12 knows


def test_import_is_light():
    code = ("import sys, envbuilder.run.smoke; "
            "print(sorted(m for m in ('docker', 'torch', 'requests') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1],
                         env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    assert out.stdout.strip() == "[]", out.stderr


# ----------------------------------------------------------------------------- verdicts

def test_no_records_names_import_torch_with_the_log_tail():
    log = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n"
    r = smoke.build_result(summary=None, ranks=[], log=log, exit_code=1, nproc_per_node=4,
                           nnodes=1, backend="auto", seconds=0.5, where="img:tag")
    assert not r.ok and r.failed == ["import_torch"] and r.checks == {"import_torch": "fail"}
    assert "No module named 'torch'" in r.details["import_torch"]
    assert r.where == "img:tag" and r.world_size == 4 and r.summary is None


def test_no_records_otherwise_is_a_launch_failure():
    r = smoke.build_result(summary=None, ranks=[], log="sh: 1: exec: bad\n", exit_code=2,
                           nproc_per_node=2, nnodes=1, backend="gloo", seconds=0.1, where="host")
    assert r.failed == ["launch"] and "exec: bad" in r.details["launch"]


def test_summary_line_in_the_log_is_used_when_files_are_missing():
    summary = {"ok": True, "world_size": 2, "nnodes": 1, "checks": {"ddp": "pass"},
               "failed": [], "backend": "gloo", "bandwidth": [{"busbw_gbps": 1.5}]}
    log = "noise\nENVBUILDER_SMOKE_SUMMARY " + json.dumps(summary) + "\nmore noise\n"
    r = smoke.build_result(summary=None, ranks=[], log=log, exit_code=0, nproc_per_node=2,
                           nnodes=1, backend="auto", seconds=1, where="host")
    assert r.ok and r.checks == {"ddp": "pass"} and r.backend == "gloo"
    assert r.max_busbw_gbps == 1.5


def test_nonzero_exit_without_a_failed_check_is_a_failure():
    summary = {"ok": True, "world_size": 2, "checks": {"ddp": "pass"}, "failed": []}
    r = smoke.build_result(summary=summary, ranks=[], log="boom", exit_code=139,
                           nproc_per_node=2, nnodes=1, backend="gloo", seconds=1, where="host")
    assert not r.ok and r.failed == ["exit_code"] and "139" in r.details["exit_code"]


def test_wrong_world_size_is_a_failure():
    summary = {"ok": True, "world_size": 2, "checks": {"ddp": "pass"}, "failed": []}
    r = smoke.build_result(summary=summary, ranks=[], log="", exit_code=0, nproc_per_node=4,
                           nnodes=1, backend="gloo", seconds=1, where="host")
    assert not r.ok and "world_size" in r.failed


# ----------------------------------------------------------------------------- policies

def test_progressive_sizes():
    # 2, 4, 8 ... then all ranks (issue 40: the seed's bisection, doubling)
    assert smoke.progressive_sizes(12) == [2, 4, 8, 12]
    assert smoke.progressive_sizes(32) == [2, 4, 8, 16, 32]
    assert smoke.progressive_sizes(8) == [2, 4, 8]
    assert smoke.progressive_sizes(4) == [2, 4]
    assert smoke.progressive_sizes(3) == [2, 3]
    assert smoke.progressive_sizes(2) == [2]
    assert smoke.progressive_sizes(1) == [1]


def test_run_progressive_runs_all_sizes_when_they_pass():
    seen = []

    def run_one(n):
        seen.append(n)
        return fake_result(n)

    final, results = smoke.run_progressive(run_one, 12)
    assert seen == [2, 4, 8, 12]
    assert final.world_size == 12 and final.ok
    assert [r.world_size for r in results] == [2, 4, 8, 12]


def test_run_progressive_stops_at_the_first_failing_size():
    seen = []

    def run_one(n):
        seen.append(n)
        return fake_result(n, ok=n < 4)

    final, results = smoke.run_progressive(run_one, 12)
    assert seen == [2, 4]
    assert not final.ok and final.world_size == 4 and final.failed == ["all_reduce"]
    assert len(results) == 2


def test_min_busbw_gate():
    bw = [{"bytes": 1 << 20, "seconds": 0.1, "algbw_gbps": 2.0, "busbw_gbps": 3.5},
          {"bytes": 8 << 20, "seconds": 0.1, "algbw_gbps": 5.0, "busbw_gbps": 9.0}]
    ok = smoke.check_min_busbw(fake_result(12, bandwidth=bw), 8.0)
    assert ok.ok and ok.checks["min_busbw"] == "pass" and "min_busbw" not in ok.failed
    low = smoke.check_min_busbw(fake_result(12, bandwidth=bw), 50.0)
    assert not low.ok and low.checks["min_busbw"] == "fail" and low.failed == ["min_busbw"]
    assert "9.000" in low.details["min_busbw"] and "50" in low.details["min_busbw"]
    none = smoke.check_min_busbw(fake_result(12), 1.0)
    assert not none.ok and "no bandwidth" in none.details["min_busbw"]
    already = smoke.check_min_busbw(fake_result(12, ok=False, bandwidth=bw), 1.0)
    assert not already.ok and already.failed == ["all_reduce"]


def test_to_dict_is_json_serialisable():
    d = fake_result(2).to_dict()
    assert json.loads(json.dumps(d))["world_size"] == 2 and d["where"] == "host"


# ----------------------------------------------------------------------------- host runs

@needs_torch
def test_run_smoke_host_passes():
    r = smoke.run_smoke_host(nproc=3, backend="gloo", timeout=30, script_args=SMALL)
    assert r.ok, (r.failed, r.details, r.log[-3000:])
    assert r.exit_code == 0 and r.where == "host" and r.backend == "gloo"
    assert r.world_size == 3 and r.nproc_per_node == 3 and r.nnodes == 1
    assert {k for k, v in r.checks.items() if v == "pass"} >= MUST_PASS
    assert r.checks["gpu_uuid"] == "skip" and r.failed == []
    # all-reduce at the sizes asked; all-gather and reduce-scatter at whole shares of 3 ranks
    assert [(b["collective"], b["bytes"]) for b in r.bandwidth] == [
        ("all_reduce", 4096), ("all_reduce", 65536), ("all_gather", 4092),
        ("all_gather", 65532), ("reduce_scatter", 4092), ("reduce_scatter", 65532)]
    assert all(b["busbw_gbps"] > 0 for b in r.bandwidth)
    assert [x["rank"] for x in r.ranks] == [0, 1, 2]
    assert r.summary and r.summary["world_size"] == 3
    assert "ENVBUILDER_SMOKE_SUMMARY" in r.log
    json.dumps(r.to_dict())


@needs_torch
def test_run_smoke_host_names_a_wrong_collective():
    r = smoke.run_smoke_host(nproc=2, backend="gloo", timeout=20, script_args=SMALL,
                             env={ddp_smoke.INJECT_ENV: "all_gather:1"})
    assert not r.ok and r.exit_code != 0
    assert r.failed == ["all_gather"] and r.checks["all_gather"] == "fail"
    assert "slot 1" in r.details["all_gather"]
    assert r.checks["ddp"] == "pass"


@needs_torch
def test_run_smoke_host_crash_ends_and_is_named():
    r = smoke.run_smoke_host(nproc=2, backend="gloo", timeout=20, script_args=SMALL,
                             env={ddp_smoke.INJECT_ENV: "crash:1"})
    assert not r.ok and r.exit_code not in (0, 124)
    assert "rank_records" in r.failed and "[1]" in r.details["rank_records"]
    assert [x["rank"] for x in r.ranks] == [0]
    assert "timeout" not in r.failed


def test_run_smoke_host_without_torch_raises(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(OperationError, match="torch is not importable"):
        smoke.run_smoke_host(nproc=2, python=str(fake))
    with pytest.raises(OperationError):
        smoke.run_smoke_host(nproc=2, python=str(tmp_path / "no-such-python"))


# ----------------------------------------------------------------------------- containers

def test_run_smoke_container_unreachable_engine():
    import docker

    # a pinned API version: the client is built without talking to the (absent) engine
    client = docker.DockerClient(base_url="unix:///nonexistent.sock", version="1.41")
    with pytest.raises(OperationError, match="DOCKER_HOST"):
        smoke.run_smoke_container(client, "envbuilder/whatever:1", nproc=2, gpus=False)


def test_run_smoke_container_unreachable_engine_from_env(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    with pytest.raises(OperationError, match="unix:///nonexistent.sock"):
        smoke.run_smoke_container(None, "envbuilder/whatever:1", nproc=2)


def _leftovers(client):
    return client.containers.list(all=True, filters={"label": smoke.SMOKE_LABEL})


@pytest.mark.docker
def test_container_smoke_passes(docker_client, smoke_image):
    before = {c.id for c in _leftovers(docker_client)}
    r = smoke.run_smoke_container(docker_client, smoke_image, nproc=3, backend="gloo",
                                  timeout=30, gpus=False, script_args=SMALL)
    assert r.ok, (r.failed, r.details, r.log[-3000:])
    assert r.where == smoke_image and r.exit_code == 0
    assert r.world_size == 3 and len(r.ranks) == 3 and r.summary
    assert {k for k, v in r.checks.items() if v == "pass"} >= MUST_PASS
    assert r.summary["torch_version"].startswith("2.13.0")
    # all-reduce at the sizes asked; all-gather and reduce-scatter at whole shares of 3 ranks
    assert [(b["collective"], b["bytes"]) for b in r.bandwidth] == [
        ("all_reduce", 4096), ("all_reduce", 65536), ("all_gather", 4092),
        ("all_gather", 65532), ("reduce_scatter", 4092), ("reduce_scatter", 65532)]
    assert {c.id for c in _leftovers(docker_client)} <= before  # the container is gone


@pytest.mark.docker
def test_container_smoke_names_a_wrong_collective(docker_client, smoke_image):
    r = smoke.run_smoke_container(docker_client, smoke_image, nproc=2, backend="gloo",
                                  timeout=20, gpus=False, script_args=SMALL,
                                  env={ddp_smoke.INJECT_ENV: "all_reduce:1"})
    assert not r.ok and r.failed == ["all_reduce"] and r.exit_code != 0


@pytest.mark.docker
def test_container_smoke_crash_is_named(docker_client, smoke_image):
    r = smoke.run_smoke_container(docker_client, smoke_image, nproc=2, backend="gloo",
                                  timeout=20, gpus=False, script_args=SMALL,
                                  env={ddp_smoke.INJECT_ENV: "crash:1"})
    assert not r.ok and "rank_records" in r.failed and "timeout" not in r.failed


@pytest.mark.docker
def test_container_without_a_working_python_reports_launch(docker_client, smoke_image):
    # PYTHONHOME pointing nowhere: the interpreter cannot start, so no record comes back
    r = smoke.run_smoke_container(docker_client, smoke_image, nproc=2, backend="gloo",
                                  timeout=20, gpus=False, env={"PYTHONHOME": "/nonexistent"})
    assert not r.ok and r.exit_code != 0 and r.ranks == []
    assert r.failed in (["launch"], ["import_torch"]) and r.details[r.failed[0]]


@pytest.mark.docker
def test_container_missing_image_raises(docker_client):
    image = "envbuilder-test/does-not-exist:never"
    with pytest.raises(OperationError, match="does-not-exist:never") as err:
        smoke.run_smoke_container(docker_client, image, nproc=2, gpus=False)
    assert "\n" not in str(err.value)
