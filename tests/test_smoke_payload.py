"""The smoke job itself (envbuilder/payload/ddp_smoke.py), run for real with torchrun on the CPU.

One 12-rank run proves the whole job; the fault tests use 2-3 ranks. Needs torch (CPU is fine).
"""

from __future__ import annotations

import json
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.run.payload import ddp_smoke

PAYLOAD = Path(ddp_smoke.__file__).resolve()
CPU_SKIPPED = {"gpu_uuid", "deepspeed_zero"}  # never run on the CPU
MUST_PASS = {"rendezvous", "all_reduce", "all_gather", "broadcast", "barrier", "ddp", "bandwidth"}

# found, not imported: collection stays fast (an import of torch costs seconds)
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed")


def run_job(out: Path, nproc: int, *, timeout: int = 60, inject: str | None = None,
            extra: tuple[str, ...] = (), env_extra: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(env_extra or {}))
    env.pop(ddp_smoke.INJECT_ENV, None)
    if inject:
        env[ddp_smoke.INJECT_ENV] = inject
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", str(nproc), "--max_restarts", "0", str(PAYLOAD),
           "--out", str(out), "--backend", "gloo", "--timeout", str(timeout), *extra]
    # the guard is generous: a hang shows as TimeoutExpired instead of a stuck test run
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def records(out: Path) -> dict[int, dict]:
    return {json.loads(p.read_text())["rank"]: json.loads(p.read_text())
            for p in out.glob("rank-*.json")}


def by_name(record: dict) -> dict[str, dict]:
    return {c["name"]: c for c in record["checks"]}


# ----------------------------------------------------------------------------- pure helpers

def test_busbw_factors_of_nccl_tests():
    # doc/PERFORMANCE.md: all-gather and reduce-scatter busbw = algbw * (n-1)/n
    assert ddp_smoke.bus_bandwidth_gbps(10.0, 12, "all_gather") == pytest.approx(10.0 * 11 / 12)
    assert ddp_smoke.bus_bandwidth_gbps(10.0, 8, "reduce_scatter") == pytest.approx(8.75)
    assert ddp_smoke.bus_bandwidth_gbps(10.0, 8, "all_reduce") == pytest.approx(17.5)


def test_busbw_formula():
    assert ddp_smoke.alg_bandwidth_gbps(2_000_000_000, 0.5) == pytest.approx(4.0)
    assert ddp_smoke.alg_bandwidth_gbps(1024, 0.0) == 0.0
    # nccl-tests all-reduce: busbw = algbw * 2(n-1)/n
    assert ddp_smoke.bus_bandwidth_gbps(10.0, 12) == pytest.approx(10.0 * 2 * 11 / 12)
    assert ddp_smoke.bus_bandwidth_gbps(10.0, 2) == pytest.approx(10.0)
    assert ddp_smoke.bus_bandwidth_gbps(10.0, 8) == pytest.approx(17.5)
    assert ddp_smoke.bus_bandwidth_gbps(10.0, 1) == 0.0


def test_parse_sizes_and_inject():
    assert ddp_smoke.parse_sizes("1M,8MiB,64K,4096") == [1 << 20, 8 << 20, 64 << 10, 4096]
    with pytest.raises(ValueError):
        ddp_smoke.parse_size("12 parsecs")
    assert ddp_smoke.parse_inject("all_reduce:3") == ("all_reduce", 3)
    assert ddp_smoke.parse_inject("ddp") == ("ddp", 0)
    assert ddp_smoke.parse_inject("") == (None, None)
    assert ddp_smoke.parse_inject(None) == (None, None)


def test_build_summary_merges_ranks_and_names_missing_ones():
    def rec(rank, host, **statuses):
        return {"rank": rank, "hostname": host, "bandwidth": [{"bytes": 1}] if rank == 0 else [],
                "checks": [{"name": k, "status": v, "detail": f"d{rank}", "seconds": 0.0}
                           for k, v in statuses.items()]}

    recs = [rec(0, "a", all_reduce="pass", gpu_uuid="skip"),
            rec(1, "a", all_reduce="fail", gpu_uuid="skip"),
            rec(2, "b", all_reduce="pass", gpu_uuid="skip")]
    s = ddp_smoke.build_summary(recs, world_size=4, backend="gloo", torch_version="x",
                                seconds=1.0)
    assert s["checks"]["all_reduce"] == "fail" and s["checks"]["gpu_uuid"] == "skip"
    assert s["failed"] == ["all_reduce", "rank_records"]
    assert s["details"]["all_reduce"] == "rank 1: d1"
    assert "[3]" in s["details"]["rank_records"]
    assert s["ranks_per_node"] == {"a": 2, "b": 1} and s["nnodes"] == 2
    assert s["bandwidth"] == [{"bytes": 1}] and s["ok"] is False


def test_horovod_plan_mirrors_torch_ranks():
    plan = ddp_smoke._horovod_plan(["a", "a", "b", "b"])
    assert [(p["rank"], p["local_rank"], p["cross_rank"]) for p in plan] == [
        (0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]
    assert all(p["size"] == 4 and p["local_size"] == 2 and p["cross_size"] == 2 for p in plan)


# ----------------------------------------------------------------------------- real runs

@pytest.fixture(scope="module")
def twelve_rank_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke12")
    proc = run_job(out, 12, timeout=60)
    return out, proc


@needs_torch
def test_twelve_ranks_pass_on_cpu(twelve_rank_run):
    out, proc = twelve_rank_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert sorted(recs) == list(range(12))
    for rank, rec in recs.items():
        assert rec["world_size"] == 12 and rec["backend"] == "gloo" and rec["device"] == "cpu"
        assert rec["ok"] is True and rec["local_rank"] == rank
        checks = by_name(rec)
        assert list(checks) == [c for c in ddp_smoke.CHECKS if c != "progressive"]  # on request only
        for name in MUST_PASS:
            assert checks[name]["status"] == "pass", (rank, name, checks[name])
        for name in CPU_SKIPPED:
            assert checks[name]["status"] == "skip" and checks[name]["detail"]
        assert checks["horovod_allreduce"]["status"] in ("pass", "skip")
        assert all(isinstance(c["seconds"], float) for c in rec["checks"])

    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] is True and summary["failed"] == []
    assert summary["world_size"] == 12 and summary["nnodes"] == 1
    assert sum(summary["ranks_per_node"].values()) == 12
    assert summary["backend"] == "gloo" and summary["torch_version"]
    assert {k for k, v in summary["checks"].items() if v == "pass"} >= MUST_PASS

    # nccl-tests' three collectives over the size sweep, with its algbw/busbw definitions
    bw = summary["bandwidth"]
    assert [b["collective"] for b in bw] == [c for c in ddp_smoke.COLLECTIVES
                                             for _ in ddp_smoke.DEFAULT_CPU_SIZES]
    ar = [b for b in bw if b["collective"] == "all_reduce"]
    assert [b["bytes"] for b in ar] == list(ddp_smoke.DEFAULT_CPU_SIZES)
    for b in bw:
        assert b["seconds"] > 0 and b["algbw_gbps"] > 0 and b["count"] * 4 == b["bytes"]
        assert b["algbw_gbps"] == pytest.approx(b["bytes"] / b["seconds"] / 1e9, rel=2e-3, abs=1e-3)
        factor = 2 * 11 / 12 if b["collective"] == "all_reduce" else 11 / 12
        assert b["busbw_gbps"] == pytest.approx(b["algbw_gbps"] * factor, rel=1e-3, abs=1e-3)
        if b["collective"] != "all_reduce":  # every rank's share whole, close to the size asked
            assert b["count"] % 12 == 0 and b["bytes"] in [s // 48 * 48 for s in ddp_smoke.DEFAULT_CPU_SIZES]
    from envbuilder.run.smoke import NCCL_TESTS_PERFORMANCE, bandwidth_table

    table = bandwidth_table(bw, 12)
    assert table.count(NCCL_TESTS_PERFORMANCE) == 3 and "busbw" in table and "(elements)" in table
    assert len([ln for ln in table.splitlines() if not ln.startswith("#")]) == len(bw)

    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(ddp_smoke.SUMMARY_MARKER + " ")]
    assert len(lines) == 1
    assert json.loads(lines[0].split(" ", 1)[1]) == summary

    # /dev/shm as 12 ranks meet it: every rank allocated and wrote its share at once
    shm = summary["shm"]
    need, _ = ddp_smoke.shm_needed(12, nccl=False)
    assert shm["ok"] is True and shm["needed_bytes"] == need == 12 * 2 * 2 * ddp_smoke.DATALOADER_BATCH
    assert shm["local_ranks"] == 12 and shm["free_bytes"] >= need
    assert "12 local rank(s) at once" in by_name(recs[0])["shm"]["detail"]
    assert not list(out.glob("shm-*.mark"))  # the check's markers are gone
    assert summary["device_kind"] == "cpu" and summary["gpu_names"] == [] and "nccl" not in summary


@needs_torch
def test_a_dev_shm_too_small_fails_naming_found_needed_and_fix(tmp_path):
    """The share each rank must hold at once: here 2 workers of a 4 TiB batch per rank, more
    than any /dev/shm; allocating it fails with ENOSPC and the check names the sizes."""
    proc = run_job(tmp_path, 2, timeout=30, extra=("--sizes", "4K", "--iters", "1", "--warmup", "1",
                                                     "--shm-batch", "4096G"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failed"] == ["shm"] and summary["shm"]["ok"] is False
    detail = summary["details"]["shm"]
    assert "/dev/shm: found" in detail and "needed 32768.0 GiB" in detail
    assert "No space left on device" in detail and "--shm-size" in detail and "dshm" in detail
    assert all(summary["checks"][c] == "pass" for c in MUST_PASS)  # the rest ran
    assert "shm failed" in proc.stderr


@needs_torch
def test_progressive_inside_the_job_stops_at_the_first_failing_size(tmp_path):
    """ENVBUILDER_SMOKE_PROGRESSIVE=1 (what job files set): all-reduce in ranks 0-1, then 0-3,
    before the 8-rank job; rank 2 answers wrong, so the 4-rank size fails and is named, and the
    rest of the job is not run."""
    proc = run_job(tmp_path, 8, timeout=30, inject="progressive:2",
                   extra=("--sizes", "4K", "--iters", "1", "--warmup", "1"),
                   env_extra={"ENVBUILDER_SMOKE_PROGRESSIVE": "1"})
    assert proc.returncode == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failed"] == ["progressive"], summary["failed"]
    assert summary["details"]["progressive"].split(": ", 1)[1].startswith("stopped at 4 ranks (ranks 0-3)")
    assert "it passed at [2] ranks" in summary["details"]["progressive"]
    assert summary["checks"]["all_reduce"] == "skip"
    ok = run_job(tmp_path / "ok", 4, timeout=30, extra=("--sizes", "4K", "--iters", "1", "--warmup",
                                                        "1", "--progressive"))
    assert ok.returncode == 0, ok.stderr[-2000:]
    s = json.loads((tmp_path / "ok" / "summary.json").read_text())
    assert s["checks"]["progressive"] == "pass"


@needs_torch
@pytest.mark.parametrize("inject, nproc", [("all_reduce:1", 3), ("ddp:1", 2),
                                           ("broadcast", 2)])
def test_injected_wrong_answer_is_caught_and_named(tmp_path, inject, nproc):
    check = inject.split(":")[0]
    proc = run_job(tmp_path, nproc, timeout=20, inject=inject,
                   extra=("--sizes", "4K", "--iters", "1", "--warmup", "1"))
    assert proc.returncode != 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is False
    assert summary["failed"] == [check], summary
    assert summary["details"][check]
    others = MUST_PASS - {check}
    assert all(summary["checks"][name] == "pass" for name in others), summary["checks"]
    # every rank sees the wrong answer (the results are compared collectively)
    for rec in records(tmp_path).values():
        assert by_name(rec)[check]["status"] == "fail" and rec["ok"] is False
    assert f"{check} failed" in proc.stderr


@needs_torch
def test_injected_crash_fails_the_others_instead_of_hanging(tmp_path):
    proc = run_job(tmp_path, 3, timeout=20, inject="crash:1")
    assert proc.returncode != 0
    assert "injected crash" in proc.stderr
    recs = records(tmp_path)
    assert 1 not in recs  # the crashed rank wrote nothing
    survivors = [r for r in recs.values() if r["rank"] != 1]
    assert survivors, proc.stderr[-3000:]
    for rec in survivors:
        assert rec["ok"] is False
        failed = [c for c in rec["checks"] if c["status"] == "fail"]
        assert failed and failed[0]["name"] in ddp_smoke.CHECKS and failed[0]["detail"]
        assert by_name(rec)["rendezvous"]["status"] == "pass"
    if (tmp_path / "summary.json").exists():
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["ok"] is False and "rank_records" in summary["failed"]
        assert "1" in summary["details"]["rank_records"]


@needs_torch
def test_a_rank_stopped_before_its_rendezvous_still_leaves_the_cause(tmp_path):
    """Rank 1 fails at once (gloo is told to use an interface that does not exist); rank 0 is
    still starting (``late:0``) when torchrun stops it. The cause reaches the log from rank 1
    itself and reaches rank 0's summary from rank 1's record, so explain names it."""
    import uuid

    from envbuilder.run.build import explain_log

    iface = "eb" + uuid.uuid4().hex[:12]  # 14 characters: a valid name no host has
    # late:0 waits the timeout: long, so that rank 1 fails first even on a loaded machine (the
    # test takes seconds, since torchrun stops rank 0 as soon as rank 1 has failed)
    proc = run_job(tmp_path, 2, timeout=90, inject="late:0", env_extra={"GLOO_SOCKET_IFNAME": iface})
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "envbuilder-smoke rank 1: rendezvous failed: init_process_group(gloo)" in log, log[-3000:]
    assert iface in log.split("envbuilder-smoke rank 1: rendezvous failed:")[1].splitlines()[0]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] is False
    assert {"launch", "rendezvous"} <= set(summary["failed"]), summary
    assert iface in summary["details"]["rendezvous"]
    assert "SIGTERM" in summary["details"]["launch"]
    causes = explain_log(log)
    assert causes and causes[0]["category"] == "network_interface", causes[:2]


def test_large_sizes_follow_the_device_and_max_size():
    M, G = ddp_smoke.MIB, ddp_smoke.GIB
    assert ddp_smoke.large_sizes(32 * M, True, None) == [128 * M, 1 * G, 4 * G, 16 * G]
    assert ddp_smoke.large_sizes(2 * M, False, None) == []  # CPU: only when asked
    assert ddp_smoke.large_sizes(2 * M, False, 40 * M) == [8 * M, 32 * M]


@needs_torch
def test_the_sweep_goes_on_to_max_size_and_stops_where_a_call_takes_too_long(tmp_path):
    """The large-message path of the GPU sweep, on CPU ranks with an explicit --max-size: the
    all-reduce goes on past the default sizes to 8M (the limit), all-gather and reduce-scatter
    stay on the default sweep; every rank runs the same sizes (the decisions use the slowest
    rank's time, the same on all)."""
    proc = run_job(tmp_path, 2, timeout=60, extra=("--iters", "1", "--warmup", "1", "--max-size", "8M"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    ar = [b["bytes"] for b in summary["bandwidth"] if b["collective"] == "all_reduce"]
    assert ar == list(ddp_smoke.DEFAULT_CPU_SIZES) + [8 * ddp_smoke.MIB]
    ag = [b["bytes"] for b in summary["bandwidth"] if b["collective"] == "all_gather"]
    assert len(ag) == len(ddp_smoke.DEFAULT_CPU_SIZES)
