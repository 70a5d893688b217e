"""Issue 40: the transport NCCL really used, read from its own INFO lines, judged against the
declared fabric; bus bandwidth against the published floors.

The NCCL lines are real output from public issue threads (tests/fixtures/nccl_info/, each with
its URL in SOURCES.yaml) and the H200 recording (tests/fixtures/gpu_runs/h200-1gpu/), fed through
the real parser (run/payload/nccl_info.py), the real check (run/transport.py) and, for the
command line, `envbuilder smoke --records`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envbuilder.core import floors as fl
from envbuilder.core.matrix import load_floors
from envbuilder.run import smoke as sm
from envbuilder.run import transport as tr
from envbuilder.run.payload import nccl_info

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "nccl_info"
H200 = ROOT / "tests" / "fixtures" / "gpu_runs" / "h200-1gpu"
SOURCES = yaml.safe_load((FIX / "SOURCES.yaml").read_text())


def info(name: str) -> dict:
    return nccl_info.parse_lines((FIX / name).read_text().splitlines())


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_every_fixture_has_its_public_source():
    files = sorted(p.name for p in FIX.glob("*.log"))
    assert files == sorted(s["file"] for s in SOURCES)
    for s in SOURCES:
        assert s["source"].startswith("https://github.com/"), s
        assert "NCCL INFO" in (FIX / s["file"]).read_text() or "Using network" in (FIX / s["file"]).read_text()


# ----------------------------------------------------------------------------- the parser

def test_parser_reads_the_socket_fallback_of_two_nodes():
    i = info("nccltests179-2x2-socket-fallback.log")
    assert i["networks"] == ["Socket"] and "ib_no_device" in i["reasons"]
    assert i["socket_ifaces"] == ["eno1", "enp1s0"]
    assert {r: v["host"] for r, v in i["ranks"].items()} == {
        "0": "manolinux", "1": "manolinux", "2": "manolinux1", "3": "manolinux1"}
    assert {r: v["network"] for r, v in i["ranks"].items()} == dict.fromkeys("0123", "Socket")


def test_parser_reads_channel_transports():
    assert info("aksrdma30-2x8-ib.log")["links"][:2] == [[3, 10, "NET/IB"], [7, 14, "NET/IB"]]
    assert info("aksrdma30-2x8-ib.log")["gdrdma"] is True
    kinds = {k for _, _, k in info("nccl1412-2x8-ib.log")["links"]}
    assert kinds == {"NET/IB", "P2P/direct"}
    assert info("nccl1412-2x8-ib.log")["nnodes"] == 2
    assert {k for _, _, k in info("nccl1232-2x2-socket-shm.log")["links"]} == {"NET/Socket", "SHM"}
    ring = info("awsofinccl24-4x8-efa-ring.log")  # NCCL 2.4's "Ring" lines, mpirun's prefixes
    assert [7, 8, "NET/OFI"] in ring["links"] and [26, 30, "P2P/IPC"] in ring["links"]
    assert ring["warnings"] == ["NET/OFI Couldn't open AV. RC: -22, ERROR: Invalid argument"]


def test_parser_reads_versions_plugins_and_nvls():
    roce = info("nccltests185-2x1-roce.log")
    assert roce["nccl_version"] == "2.19.3" and roce["networks"] == ["IB"]
    assert roce["ib_devices"] == ["mlx5_10:1", "mlx5_11:1"] and roce["ib_links"] == ["RoCE"]
    assert roce["net_plugin"] == "internal" and set(roce["hosts"]) == {"dgxh100-3", "dgxh100-4"}
    efa = info("nccl1597-2node-efa.log")
    assert efa["ofi_provider"] == "efa" and efa["networks"] == ["OFI"]
    nvls = info("nccl1584-1x8-nvls-sharp.log")  # no host:pid prefixes
    assert nvls["nvls_available"] and nvls["nvlink"] and nvls["collnet_plugin"] == "SHARP"
    assert nvls["net_plugin"].endswith("libnccl-net.so") and nvls["nccl_version"] == "2.24.3"
    assert nvls["env"]["NCCL_SOCKET_IFNAME"] == "eth0"


def test_parser_reads_the_h200_recording():
    i = nccl_info.parse_lines((H200 / "smoke-nccl-1.log").read_text().splitlines())
    assert i["nccl_version"] == "2.28.9" and i["networks"] == ["Socket"] and i["nnodes"] == 1
    assert {"ib_no_device", "ib_init_failed"} <= set(i["reasons"])
    assert i["ranks"] == {"0": {"host": "vm", "local_ranks": 1, "network": "Socket"}}


def test_merge_of_ranks_keeps_every_link_once():
    a, b = info("nccl1412-2x8-ib.log"), info("aksrdma30-2x8-ib.log")
    m = nccl_info.merge([a, a, b])
    union = {tuple(x) for x in a["links"]} | {tuple(x) for x in b["links"]}
    assert sorted(map(tuple, m["links"])) == sorted(union) and len(m["links"]) == len(union)
    assert m["nnodes"] == 2


# ----------------------------------------------------------------------------- the check

def test_socket_fallback_under_ib_fails_naming_ranks_cause_and_fix():
    t = tr.judge(info("nccltests179-2x2-socket-fallback.log"), backend="nccl", fabric="ib")
    assert t.status == "fail"
    assert t.detail.startswith("ranks 0-1 (manolinux), 2-3 (manolinux1) used NET/Socket")
    assert "NET/IB : No device found" in t.detail and "--device /dev/infiniband" in t.detail
    assert "rdma/ib" in t.detail and t.record["fabric_used"] == "socket"
    t8 = tr.judge(info("nccl952-2x8-socket-fallback.log"), backend="nccl", fabric="ib")
    assert t8.status == "fail" and "ranks 6, 15 used NET/Socket" in t8.detail
    assert t8.record["intra_node"] == ["P2P/IPC"] and t8.record["inter_node"] == ["NET/Socket"]


def test_ib_passes_and_sockets_can_be_declared():
    for name in ("aksrdma30-2x8-ib.log", "nccl1412-2x8-ib.log"):
        t = tr.judge(info(name), backend="nccl", fabric="ib")
        assert t.status == "pass" and t.record["fabric_used"] == "ib", t.detail
    t = tr.judge(info("nccltests179-2x2-socket-fallback.log"), backend="nccl", fabric="socket")
    assert t.status == "pass" and "sockets declared as intended" in t.detail
    t = tr.judge(info("nccltests179-2x2-socket-fallback.log"), backend="nccl", fabric=None)
    assert t.status == "pass" and "no fabric declared" in t.detail


def test_roce_and_efa():
    roce = info("nccltests185-2x1-roce.log")
    assert tr.judge(roce, backend="nccl", fabric="roce").status == "pass"
    ib = tr.judge(roce, backend="nccl", fabric="ib")
    assert ib.status == "pass" and "over RoCE" in ib.detail and ib.record["fabric_used"] == "roce"
    for name in ("nccl1597-2node-efa.log", "awsofinccl24-4x8-efa-ring.log"):
        assert tr.judge(info(name), backend="nccl", fabric="efa").status == "pass"
        wrong = tr.judge(info(name), backend="nccl", fabric="ib")
        assert wrong.status == "fail" and "NET/OFI" in wrong.detail
    t = tr.judge(info("aksrdma30-2x8-ib.log"), backend="nccl", fabric="efa")
    assert t.status == "fail" and "vpc.amazonaws.com/efa" in t.detail


def test_one_node_has_no_inter_node_peer_to_check():
    t = tr.judge(info("nccl1584-1x8-nvls-sharp.log"), backend="nccl", fabric="ib")
    assert t.status == "pass" and "one node" in t.detail
    assert t.record["nvls"] is True and t.record["collnet"] == "SHARP"


def test_gloo_claims_nothing_and_no_lines_claim_nothing():
    g = tr.judge(None, backend="gloo", fabric="ib")
    assert g.status == "pass" and g.record["summary"] == "gloo over TCP"
    s = tr.judge(None, backend="nccl", fabric="ib")
    assert s.status == "skip" and "NCCL_DEBUG=INFO" in s.detail


def test_nvlink_peers_on_shm_warn():
    """No public log holds both NVLink in NCCL's topology and SHM channels within a node: the
    warning is checked on the real 2x2 socket/SHM log with NCCL's NVLink topology line of the
    real H20 log of NVIDIA/nccl#1189 added (the two facts NCCL would print together)."""
    shm = info("nccl1232-2x2-socket-shm.log")
    assert tr.judge(shm, backend="nccl").warnings == ()  # NCCL saw no NVLink there
    h20 = ("H20-GPU-05:1789224:1789735 [0] NCCL INFO                             "
           "+ NVL[370.8] - NVS/0")  # https://github.com/NVIDIA/nccl/issues/1189
    both = nccl_info.parse_lines([h20], shm)
    w = tr.judge(both, backend="nccl").warnings
    assert len(w) == 1 and "share NVLink" in w[0] and "rank 2 -> rank 0 via SHM" in w[0]


# ----------------------------------------------------------------------------- smoke --records

def test_records_of_a_socket_fallback_exit_1_naming_ranks_and_fix():
    p = cli("smoke", "--records", str(FIX / "nccltests179-2x2-socket-fallback.log"), "--fabric", "ib")
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and "transport" in p.stderr and "Traceback" not in p.stderr
    assert "ranks 0-1 (manolinux), 2-3 (manolinux1)" in p.stderr
    assert "--device /dev/infiniband" in p.stdout  # the fix, in full below the table
    j = cli("smoke", "--records", str(FIX / "nccltests179-2x2-socket-fallback.log"), "--fabric", "ib",
            "--json")
    d = json.loads(j.stdout)
    assert j.returncode == 1 and d["failed"] == ["transport"] and d["world_size"] == 4
    assert d["transport"]["fabric_used"] == "socket" and d["nnodes"] == 2


def test_records_on_ib_pass():
    for name in ("aksrdma30-2x8-ib.log", "nccl1412-2x8-ib.log"):
        p = cli("smoke", "--records", str(FIX / name), "--fabric", "ib", "--json")
        assert p.returncode == 0, p.stdout + p.stderr
        d = json.loads(p.stdout)
        assert d["checks"]["transport"] == "pass" and d["transport"]["inter_node"] == ["NET/IB"]


def test_records_refuse_a_log_without_any_record(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("hello\nworld\n")
    p = cli("smoke", "--records", str(log))
    assert p.returncode == 2 and "NCCL INFO" in p.stderr
    p = cli("smoke", "--records", str(FIX / "nccl1412-2x8-ib.log"), "--fabric", "infiniband")
    assert p.returncode == 2 and "--fabric 'infiniband'" in p.stderr


# ----------------------------------------------------------------------------- floors

def test_the_floor_matrix_has_sourced_rows():
    f = load_floors()
    assert f.size >= 12 and 0 < f.fraction < 1
    for row in f.rows:
        assert row.source and all(s.startswith("https://") for s in row.source)
        assert row.busbw and all(v > 0 for v in row.busbw.values())
    data = yaml.safe_load((ROOT / "matrices" / "bandwidth.yaml").read_text())
    assert all("source" in r for r in data["floors"])


def test_floor_lookup_and_comparison_with_published_runs():
    """The published 8x H200 sweep itself, fed through as if measured: 100% of its floor at each
    size; the same sizes at a socket-like tenth fail."""
    f = load_floors()
    entry, why = f.lookup(["NVIDIA H200"], fabric="none", nodes=1, gpus_per_node=8)
    assert entry is not None and why == ""
    rows = [{"collective": "all_reduce", "bytes": n, "busbw_gbps": v} for n, v in entry.busbw.items()]
    got = fl.compare(rows, entry, f.fraction)
    assert len(got) == len(entry.busbw) and all(r["ok"] and r["percent"] == 100.0 for r in got)
    slow = fl.compare([dict(r, busbw_gbps=r["busbw_gbps"] / 10) for r in rows], entry, f.fraction)
    assert not any(r["ok"] for r in slow) and slow[0]["percent"] == 10.0
    none, why = f.lookup(["NVIDIA L4"], fabric="none", nodes=1, gpus_per_node=1)
    assert none is None and why.startswith("unknown hardware")
    none, why = f.lookup(["NVIDIA H200"], fabric="none", nodes=1, gpus_per_node=2)
    assert none is None and "no published figure for 1 node(s) x 2 NVIDIA H200" in why


def test_check_floors_on_a_result():
    f = load_floors()
    entry, _ = f.lookup(["NVIDIA H200"], fabric="none", nodes=1, gpus_per_node=8)
    bw = [{"collective": "all_reduce", "bytes": 1 << 20, "busbw_gbps": 38.0},
          {"collective": "all_reduce", "bytes": 32 << 20, "busbw_gbps": 100.0}]
    r = sm.SmokeResult(ok=True, world_size=8, nproc_per_node=8, nnodes=1, backend="nccl",
                       checks={}, failed=[], bandwidth=bw, summary={"gpu_names": ["NVIDIA H200"]},
                       ranks=[], log="", exit_code=0, seconds=1.0, where="host")
    out = sm.check_floors(r, f, None)
    assert not out.ok and out.checks["min_busbw"] == "fail" and "32MiB" in out.details["min_busbw"]
    assert [row["percent"] for row in out.floors["rows"]] == [95.2, 36.3]


def test_the_h200_recording_says_why_it_has_no_percentage():
    """The recording is one rank on one H200 (the machine lent had one GPU): its all-reduce busbw
    is 0 by nccl-tests' definition and its records name no GPU model (an older envbuilder), so
    --min-busbw auto says why instead of guessing."""
    p = cli("smoke", "--records", str(H200 / "smoke-nccl-1.log"), "--min-busbw", "auto", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["checks"]["min_busbw"] == "skip" and d["checks"]["transport"] == "pass"
    assert "0 by definition" in d["floors"]["why"] and d["transport"]["nccl_version"] == "2.28.9"


def test_min_busbw_takes_a_number_or_auto():
    p = cli("smoke", "--records", str(H200 / "smoke-nccl-1.log"), "--min-busbw", "fast")
    assert p.returncode == 2 and "--min-busbw 'fast'" in p.stderr


@pytest.mark.parametrize("key", ["9637888"])
def test_shm_segment_size_is_ncclss_own(key):
    """The segment size the /dev/shm check budgets is the one NCCL's own messages name."""
    from envbuilder.run.payload import ddp_smoke

    corpus = ROOT / "tests" / "explain_corpus"
    assert ddp_smoke.NCCL_SHM_SEGMENT == int(key)
    assert any(f"(size {key})" in p.read_text(errors="replace") for p in corpus.glob("*shm*.log"))
