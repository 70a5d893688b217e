"""Tests of explain's facts (envbuilder/diagnose/facts.py), the reasoning over them, the new
failure families of issue 22 and PyTorch flight-recorder dumps (flightrecorder.py).

Logs are the real excerpts in tests/explain_corpus (sources in cases.yaml); the flight-recorder
dumps in tests/fixtures/flight_recorder were written by torch 2.13 itself from a deliberately
hung gloo rank (make_dumps.py there); test_flight_recorder_live makes fresh ones when torch is
installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envbuilder.cli import app
from envbuilder.diagnose.explain import analyse_files, explain_lines
from envbuilder.errors import InputError

CORPUS = Path(__file__).parent / "explain_corpus"
DUMPS = Path(__file__).parent / "fixtures" / "flight_recorder"


def corpus(prefix: str) -> str:
    (path,) = CORPUS.glob(f"{prefix}-*.log")
    return str(path)


# ----------------------------------------------------------------------------- facts


def test_facts_of_an_nccl_log() -> None:
    facts = analyse_files([corpus("130")]).facts
    assert facts.versions["nccl"] == "2.17.1"
    assert facts.versions["cuda_runtime"] == "12.1"
    assert facts.network == "Socket"
    assert "ens5f0np0" in facts.interfaces
    assert facts.world() == 2
    d = facts.to_dict()
    assert d["ib_configured"] and d["ib_unavailable"] and not d["ib_disabled"]
    assert d["summary"].startswith("NCCL 2.17.1, CUDA 12.1 over Socket on ens5f0np0; 2 ranks")


def test_facts_read_the_python_frames_and_exception_chain() -> None:
    facts = analyse_files([corpus("136")]).facts
    assert ("pytorch_mnist.py", 8, "<module>") in facts.frames
    assert facts.exceptions[0][0] == "ImportError"
    assert "horovod.torch has not been built" in facts.exceptions[0][1]
    assert "docker" not in " ".join(facts.container)


def test_keyword_pass_gives_the_facts_of_word_by_word_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """facts.feed names every keyword of a line in one pass (an RE2 set) and skips a line without
    one; the facts of every corpus log are those of testing each keyword with ``in``."""
    from envbuilder.diagnose import facts as facts_module

    logs = [str(p) for p in sorted(CORPUS.glob("*.log"))]
    one_pass = [analyse_files([p]).facts.to_dict() for p in logs]
    monkeypatch.setattr(facts_module, "_find_keywords", lambda lowered: frozenset(
        k for k in facts_module._KEYWORDS if k in lowered))
    word_by_word = [analyse_files([p]).facts.to_dict() for p in logs]
    assert one_pass == word_by_word
    line = "HOST1:77:88 [3] NCCL INFO NET/Socket : Using [0]ETH0:10.0.0.1<0>".lower()
    assert facts_module._find_keywords(line) >= {"nccl", "host", "using", "net/socket"}
    assert facts_module._find_keywords("epoch 3 step 200 loss 0.31") == frozenset()


# ----------------------------------------------------------------------------- RDMA fallback


@pytest.mark.parametrize("case", ["128", "129", "130", "131", "132", "133"])
def test_rdma_configured_but_unused_ranks_ib_rdma_first(case: str) -> None:
    causes = analyse_files([corpus(case)]).causes
    assert causes[0].category == "ib_rdma", [c.category for c in causes]
    assert causes[0].evidence


def test_ib_configured_and_sockets_chosen_names_both_lines() -> None:
    cause = analyse_files([corpus("129")]).causes[0]
    assert cause.category == "ib_rdma"
    assert any("configured but NCCL chose sockets" in r for r in cause.reasons)
    texts = [e.text for e in cause.evidence]
    assert any("NCCL_IB_HCA" in t for t in texts)
    assert any("NET/Socket : Using" in t or "Using network Socket" in t for t in texts)


def test_ib_disabled_on_purpose_is_not_a_fallback() -> None:
    lines = Path(corpus("129")).read_text().splitlines()
    lines = [ln.replace("NCCL_IB_DISABLE set by environment to 0", "NCCL_IB_DISABLE set by environment to 1")
             for ln in lines]
    causes = explain_lines(lines)
    assert not any("configured but NCCL chose sockets" in r for c in causes for r in c.reasons)


def test_no_rdma_device_on_a_single_host_is_not_a_cause() -> None:
    # "NET/IB : No device found" then sockets is what every machine without HCAs prints
    lines = ["ws:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
             "ws:1:1 [0] NCCL INFO NET/IB : No device found.",
             "ws:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>",
             "ws:1:1 [0] NCCL INFO Using network Socket"]
    assert not any(c.category == "ib_rdma" and c.confidence > 0.1 for c in explain_lines(lines))


OFI = ["h:1:2 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.12.1-aws",
       "h:1:2 [0] NCCL INFO NET/OFI Using Libfabric version 1.22",
       "h:1:2 [0] NCCL INFO NET/OFI Selected Provider is {p} (found 1 nics)"]


@pytest.mark.parametrize("provider", ["tcp", "sockets", "udp"])
def test_aws_ofi_nccl_on_a_socket_provider_is_an_rdma_fallback(provider: str) -> None:
    # libfabric's tcp/sockets/udp providers move data over sockets (fi_provider(7)): the OFI
    # plugin's own fallback when EFA/verbs are not usable (case 776, aws/aws-ofi-nccl#803)
    causes = explain_lines([ln.format(p=provider) for ln in OFI])
    assert causes and causes[0].category == "ib_rdma", [c.category for c in causes]
    assert any("Selected Provider is " + provider in e.text for e in causes[0].evidence)


@pytest.mark.parametrize("provider", ["efa", "verbs;ofi_rxm"])
def test_aws_ofi_nccl_on_an_rdma_provider_is_not_a_fallback(provider: str) -> None:
    causes = explain_lines([ln.format(p=provider) for ln in OFI])
    assert not any(c.category == "ib_rdma" and c.confidence > 0.1 for c in causes)


# ----------------------------------------------------------------------------- hangs


WATCHDOG = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600047 "
            "milliseconds before timing out.")


def test_hang_names_the_rank_that_never_arrived() -> None:
    lines = [f"node{r // 2}:1{r}:2{r} [{r % 2}] NCCL INFO comm 0x55d0 rank {r} nranks 4 cudaDev {r % 2} "
             f"busId 1000 commId 0x1 - Init COMPLETE" for r in range(4)]
    lines += [WATCHDOG.format(r=r) for r in (0, 1, 3)]
    causes = explain_lines(lines)
    assert causes[0].category == "nccl_timeout"
    assert any("rank(s) 2 never reached ALLREDUCE #3" in r for r in causes[0].reasons)


def test_hang_summary_line(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    lines = ["NCCL version 2.21.5+cuda12.4"]
    lines += [f"h{r // 6}:1:1 [{r % 6}] NCCL INFO comm 0x1 rank {r} nranks 12 cudaDev {r % 6} busId 1 "
              f"commId 0x2 - Init COMPLETE" for r in range(12)]
    lines += [f"h{r // 6}:1:1 [{r % 6}] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.{r // 6}<0>" for r in range(12)]
    lines += [WATCHDOG.format(r=r) for r in range(12) if r != 7]
    log.write_text("\n".join(lines) + "\n")
    facts = analyse_files([str(log)]).facts
    assert facts.summary() == ("NCCL 2.21.5, CUDA 12.4 over Socket on eth0; 12 ranks on 2 hosts; "
                               "rank 7 never reached ALLREDUCE #3")


# ----------------------------------------------------------------------------- new families


@pytest.mark.parametrize(("case", "category"), [
    ("135", "horovod_build"), ("136", "horovod_build"), ("137", "horovod_build"),
    ("138", "horovod_build"), ("139", "horovod_build"),
    ("140", "lib_shadowing"), ("141", "lib_shadowing"), ("142", "lib_shadowing"), ("143", "lib_shadowing"),
    ("055", "container_runtime"), ("144", "container_runtime"), ("145", "container_runtime"),
    ("146", "container_runtime"), ("147", "container_runtime"),
    ("148", "deepspeed_op_build"), ("149", "p2p_topology"), ("150", "p2p_topology"),
])
def test_issue22_families_from_real_logs(case: str, category: str) -> None:
    report = analyse_files([corpus(case)])
    got = [c.category for c in report.causes + report.guesses]  # 149 is told in prose: a guess
    assert got and got[0] == category, got[:3]


def test_fix_says_how_envbuilder_prevents_it() -> None:
    by_cat = {c.category: c for c in analyse_files([corpus("129")]).causes}
    assert "--fabric ib" in by_cat["ib_rdma"].fix
    ds = analyse_files([corpus("148")]).causes[0]
    assert "--ds-ops" in ds.fix


# ----------------------------------------------------------------------------- flight recorder


def test_flight_recorder_pickled_dumps_name_the_stuck_rank() -> None:
    report = analyse_files(sorted(str(p) for p in DUMPS.glob("fr_rank*.pkl")))
    (fr,) = report.facts.flight
    assert (fr.seq, fr.op, fr.missing, fr.joined) == (5, "all_reduce", (2,), (0, 1))
    assert report.causes[0].category == "nccl_timeout"
    assert "rank(s) 2 never joined all_reduce #5" in report.causes[0].reasons[0]
    assert "rank 2 never reached all_reduce #5" in report.facts.summary()


def test_flight_recorder_json_dumps_and_a_log_together(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] "
                   "Timed out waiting 8000ms for send operation to complete\n")
    paths = sorted(str(p) for p in DUMPS.glob("fr_rank*.json")) + [str(log)]
    report = analyse_files(paths)
    assert report.facts.flight[0].missing == (2,)
    assert report.causes[0].category == "nccl_timeout"
    assert report.facts.exceptions[0][0] == "RuntimeError"


def test_flight_recorder_refuses_classes_in_a_pickle(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    bad = tmp_path / "nccl_trace_rank_0"
    bad.write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [Evil()]}, protocol=2))
    with pytest.raises(InputError, match="refused to load"):
        analyse_files([str(bad)])
    assert not marker.exists()


def test_flight_recorder_dump_must_be_named_by_rank(tmp_path: Path) -> None:
    dump = tmp_path / "trace.pkl"
    shutil.copy(DUMPS / "fr_rank0.pkl", dump)
    with pytest.raises(InputError, match="named by its rank"):
        analyse_files([str(dump)])


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_flight_recorder_live(tmp_path: Path) -> None:
    """Fresh dumps from torch: 3 gloo ranks, rank 1 never joins the 4th all-reduce."""
    subprocess.run([sys.executable, str(DUMPS / "make_dumps.py"), str(tmp_path), "--stuck", "1",
                    "--timeout", "3"], check=True, capture_output=True, timeout=300)
    report = analyse_files(sorted(str(p) for p in tmp_path.glob("fr_rank*.pkl")))
    assert report.facts.flight[0].missing == (1,)
    assert report.facts.flight[0].joined == (0, 2)


# ----------------------------------------------------------------------------- CLI


def test_cli_json_carries_the_facts() -> None:
    r = CliRunner().invoke(app, ["explain", "--json", corpus("130")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["facts"]["versions"]["nccl"] == "2.17.1"
    assert doc["facts"]["network"] == "Socket"
    assert doc["causes"][0]["category"] == "ib_rdma"
    assert doc["causes"][0]["reasons"]


def test_cli_prints_one_facts_line() -> None:
    r = CliRunner().invoke(app, ["explain", *sorted(str(p) for p in DUMPS.glob("fr_rank*.pkl"))],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first == "facts: rank 2 never reached all_reduce #5"


# ----------------------------------------------------------------------------- NCCL RAS


def test_nccl_ras_mismatch_names_who_did_not_arrive() -> None:
    """A real `ncclras` report (NVIDIA/nccl#1911): RAS lists the 2 ranks that launched AllGather
    641; the other 30 stopped at 640 and are the stragglers."""
    report = analyse_files([corpus("153")])
    (ras,) = report.facts.ras
    assert ras.op == "AllGather"
    assert ras.groups == [(30, 640), (2, 641)]
    assert ras.listed == [(12, "10.137.190.124"), (13, "10.137.190.124")]
    assert ras.reading() == ("30 ranks never reached AllGather #641 "
                             "(RAS lists the 2 that did: 12, 13 on 10.137.190.124)")
    assert report.causes[0].category == "nccl_timeout"
    assert report.facts.versions["nccl"] == "2.26.2"
    assert report.facts.versions["cuda_runtime"] == "12.6"


def test_nccl_ras_listed_ranks_behind_are_named() -> None:
    lines = Path(corpus("153")).read_text().splitlines()
    lines = [ln.replace("30 ranks have launched up to operation 640", "30 ranks have launched up to operation 642")
             for ln in lines]
    (ras,) = _facts(lines).ras
    assert ras.reading() == "ranks 12, 13 on 10.137.190.124 never reached AllGather #642"


def _facts(lines: list[str]):
    from envbuilder.diagnose.facts import FactCollector

    collector = FactCollector()
    for i, line in enumerate(lines, 1):
        collector.feed(line, "log", i)
    return collector.facts
