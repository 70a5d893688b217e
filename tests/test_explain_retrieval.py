"""Issue 33: normalisation before reading, nearest known cases, Xid facts, a team's own cases.

The logs are real corpus excerpts (tests/explain_corpus) or small logs made here; the retrieval
index is the packaged one (envbuilder/data/explain_cases.json), measured without the query's own
repository where a corpus case is the query.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from envbuilder.cli import app
from envbuilder.diagnose import retrieval
from envbuilder.diagnose.explain import analyse_files, explain_files, explain_lines, load_signatures
from envbuilder.diagnose.normalise import Joiner, strip_ansi, strip_prefix

CORPUS = Path(__file__).parent / "explain_corpus"
ROOT = Path(__file__).resolve().parent.parent


def corpus(name: str) -> str:
    return str(CORPUS / name)


def without_own(url_part: str) -> retrieval.CaseIndex:
    """The packaged index without the cases of the repository whose URL contains url_part."""
    return retrieval.default_index().without(lambda c: url_part.lower() in c.url.lower())


def run(args: list[str], cwd: Path):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, args, catch_exceptions=False)
    finally:
        os.chdir(old)


# ----------------------------------------------------------------------------- normalisation


def test_ansi_codes_and_logger_prefixes_are_taken_off() -> None:
    assert strip_ansi("\x1b[31mNCCL WARN\x1b[0m x") == "NCCL WARN x"
    assert strip_ansi("plain") == "plain"
    assert strip_prefix("[Wed Jun 24 15:44:20 2026] NVRM: Xid (PCI:0000:70:00): 13") == "NVRM: Xid (PCI:0000:70:00): 13"
    assert strip_prefix("(RayWorkerWrapper pid=1890, ip=10.41.0.8) [rank8]:[E ProcessGroupGloo.cpp:144] Gloo") \
        == "[E ProcessGroupGloo.cpp:144] Gloo"
    assert strip_prefix("qna-transformers_1  |     torch._C._cuda_init()") == "torch._C._cuda_init()"
    assert strip_prefix("Sun Oct  1 17:01:10 2017[1,30]<stdout>:[1506866470.744682] [clx-065:1411 :0]  x.c:6 UCX") \
        == "x.c:6 UCX"
    assert strip_prefix("Sep 14 06:46:52 athena kernel: NVRM: Xid 79") == "NVRM: Xid 79"


def test_a_wrapped_message_is_rejoined_and_a_traceback_is_not() -> None:
    j = Joiner()
    assert j.push("NVIDIA H100 PCIe with CUDA capability") is None
    assert j.push("sm_90 is not compatible with the current PyTorch installation.") == \
        "NVIDIA H100 PCIe with CUDA capability sm_90 is not compatible with the current PyTorch installation."
    j = Joiner()
    for line in ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
                 "    main()", '  File "train.py", line 2, in main']:
        assert j.push(line) is None  # frames stay frames: never glued together


def test_the_wrapped_arch_warning_is_read_by_the_signature_itself() -> None:
    """Case 441 (Open-AnimateAnyone#114, posted wrapped): the arch signature matches the
    re-joined lines, with nearest cases switched off."""
    causes = explain_files([corpus("441-arch-animateanyone114-wrapped-sm90.log")], cases=None)
    assert causes and causes[0].category == "arch_mismatch"
    assert "sm_90 is not compatible" in causes[0].evidence[0].text


def test_ansi_coloured_lines_match() -> None:
    line = "\x1b[1;31mRuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error\x1b[0m"
    assert explain_lines([line], cases=None)[0].category == "network_interface"


# ----------------------------------------------------------------------------- nearest cases


def test_packaged_corpus_is_current() -> None:
    """envbuilder/data/explain_cases.json is what scripts/make-explain-cases.py makes from
    tests/explain_corpus (a case added to the corpus is shipped)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_explain_cases", ROOT / "scripts" / "make-explain-cases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (ROOT / "envbuilder" / "data" / "explain_cases.json").read_text(encoding="utf-8") == mod.render()
    cases = yaml.safe_load((CORPUS / "cases.yaml").read_text())["cases"]
    shipped = retrieval.default_index().cases
    assert len(shipped) == len(cases)
    for c in shipped:
        assert c.url.startswith("https://github.com/") and c.category and c.cause and c.excerpt and c.terms


def test_packaged_signatures_follow_the_schema() -> None:
    """The packaged signatures load trusted (no schema pass at run time): checked here."""
    from envbuilder.diagnose import explain

    strict = load_signatures()  # the full validation a user's file gets
    trusted = load_signatures(trusted=True)
    assert [s.id for s in strict.signatures] == [s.id for s in trusted.signatures]
    assert explain._default_signatures().path == strict.path


def test_a_log_no_signature_matches_is_explained_by_its_nearest_case() -> None:
    """Held-out case 326 (efeslab/Nanoflow#22: "peer access is not supported between these two
    device", a one-line report no signature names), searched with no held-out case in the
    index: its nearest case, another repository's cudaIpc/peer-access failure, says P2P."""
    held = {r.lower() for r in yaml.safe_load((CORPUS / "heldout.yaml").read_text())["repositories"]}
    index = retrieval.default_index().without(lambda c: c.repository in held)
    log = [corpus("326-p2p-nanoflow22-3090-peer.log")]
    assert explain_files(log, cases=None) == []  # the signatures alone: nothing matched
    causes = explain_files(log, cases=index)
    top = causes[0]
    assert top.category == "p2p_topology" and top.basis == "similar cases"
    assert top.reasons[0].startswith("like ") and "https://github.com/" in top.reasons[0]
    assert top.similar[0].case.repository not in held
    assert top.evidence and 0 < top.confidence <= 0.95


def test_a_learned_like_case_in_a_small_index() -> None:
    """The mechanism on its own: a log no signature matches is given the family of its near
    case, with that case's fix, and a log near no case gets nothing."""
    case = retrieval.case_from_log(["widgetd: FATAL: frobnicator pool exhausted on /srv/pool, cannot continue"],
                                   id="team:x", category="shm", cause="the pool is /dev/shm-backed",
                                   fix="grow /dev/shm", url="", team=True)
    index = retrieval.CaseIndex([case])
    got = explain_lines(["widgetd: FATAL: frobnicator pool exhausted on /srv/pool2, cannot continue"], cases=index)
    assert [c.category for c in got] == ["shm"] and got[0].fix == "grow /dev/shm" and got[0].team_match
    assert explain_lines(["ERROR: the printer is on fire"], cases=index) == []


def test_a_signature_cause_carries_its_nearest_case_as_evidence() -> None:
    """Case 417 (pytorch/examples#540), measured without its own repository: the
    rendezvous_host_unresolved signature names it, and a near case of another repository
    says how it went there."""
    causes = explain_files([corpus("417-rdzv-examples540-host-not-found.log")], cases=without_own("pytorch/examples"))
    top = causes[0]
    assert top.category == "rendezvous" and top.basis == "signatures"
    like = [r for r in top.reasons if r.startswith("like ")]
    assert like and "pytorch/examples" not in like[0]
    d = top.to_dict()
    assert d["similar_cases"] and d["similar_cases"][0]["url"].startswith("https://github.com/")


@pytest.mark.parametrize("log", [
    ["[2024-05-01 10:00:00] epoch 1 step 100 loss 2.31 lr 1e-4",
     "[2024-05-01 10:05:00] epoch 1 step 200 loss 2.02 lr 1e-4",
     "[2024-05-01 10:10:00] saved checkpoint to /ckpt/step200.pt"],
    ["Collecting numpy", "  Downloading numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.whl (18.3 MB)",
     "Installing collected packages: numpy", "Successfully installed numpy-1.26.4"],
    ["h1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>", "h1:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
     "h1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x2 - Init COMPLETE",
     "# Avg bus bandwidth    : 180.52"],
    ["ERROR: the frobnicator quota on /srv/cache was exceeded, cannot rotate the widget log"],
])
def test_nothing_matched_stays_honest(log: list[str]) -> None:
    """Logs with no failure, or a failure no known case is near: the nearest cases add no
    cause (what the signatures and facts say, if anything, is all)."""
    with_cases = explain_lines(log)
    assert [c.category for c in with_cases] == [c.category for c in explain_lines(log, cases=None)]
    assert all(c.basis == "signatures" and c.confidence < 0.1 for c in with_cases)


def test_calibration_floor() -> None:
    assert retrieval.confidence(retrieval.MIN_SIMILARITY - 0.01) == 0.0
    assert 0 < retrieval.confidence(retrieval.MIN_SIMILARITY) < retrieval.confidence(0.6) <= 0.85


def test_retrieval_is_deterministic() -> None:
    terms = retrieval.terms_of_lines((CORPUS / "415-net-simdino15-gloo-fullmesh.log").read_text().splitlines())
    a = [(n.case.id, round(n.similarity, 9)) for n in retrieval.default_index().nearest(terms)]
    b = [(n.case.id, round(n.similarity, 9)) for n in retrieval.default_index().nearest(terms)]
    assert a == b and len(a) == 5


# ----------------------------------------------------------------------------- Xid and ranks


def test_xid_codes_are_read_with_nvidias_catalogue() -> None:
    report = analyse_files([corpus("431-xid-ogkm1150-xid149-nvlink.log")], cases=None)
    codes = {x["code"] for x in report.facts.to_dict()["xids"]}
    assert codes == {45, 145, 149}
    top = report.causes[0]
    assert top.category == "gpu_xid"
    # the follow-up Xid 45 is not named as the root: the NVLink error it followed is
    assert any(r.startswith("Xid 149") and "NVLink" in r and "docs.nvidia.com/deploy/xid-errors" in r
               for r in top.reasons)


def test_fallen_off_the_bus_without_a_number_is_xid_79() -> None:
    report = analyse_files([corpus("424-xid-nvsentinel155-fallen-off-bus.log")], cases=None)
    assert [x["code"] for x in report.facts.to_dict()["xids"]] == [79]
    assert "Xid 79 (GPU has fallen off the bus)" in report.facts.summary()


def test_rank_summary_names_only_ranks_in_the_log(tmp_path: Path) -> None:
    """Ranks 0 and 3 report a timeout at #5, rank 1 (in the log) at #4; ranks 2 and 4-7 never
    appear in the log: they are counted, not named as behind."""
    wd = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, "
          "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.")
    lines = [f"h0:1:1 [{r}] NCCL INFO comm 0x1 rank {r} nranks 8 cudaDev {r} busId 1 commId 0x2 - Init COMPLETE"
             for r in (0, 1, 3)]
    lines += [wd.format(r=0, s=5), wd.format(r=3, s=5), wd.format(r=1, s=4)]
    log = tmp_path / "job.log"
    log.write_text("\n".join(lines) + "\n")
    summary = analyse_files([str(log)]).facts.summary()
    assert "rank 1 never reached ALLREDUCE #5 (5 other ranks not in the log)" in summary
    assert "2," not in summary.split("never reached")[0]


# ----------------------------------------------------------------------------- team cases

TEAM_LOG = """epoch 12 step 4000 loss 1.92
[2026-11-30 03:12:01] ckptd: FATAL: lustre project quota for /lustre/proj/llm exceeded, cannot write shard 3
[2026-11-30 03:12:01] ckptd: giving up after 5 retries
"""
LATER_LOG = """epoch 40 step 9000 loss 1.41
[2026-12-01 22:40:17] ckptd: FATAL: lustre project quota for /lustre/proj/vision exceeded, cannot write shard 11
[2026-12-01 22:40:17] ckptd: giving up after 5 retries
"""


def test_a_log_matching_nothing_is_explained_after_learning_a_team_case(tmp_path: Path) -> None:
    team = tmp_path / "team"
    team.mkdir()
    (team / "envbuilder.toml").write_text('registry = "registry.example/team"\n')
    (team / "first.log").write_text(TEAM_LOG)
    (team / "later.log").write_text(LATER_LOG)
    before = run(["explain", "--json", "later.log"], team)
    assert before.exit_code == 1 and json.loads(before.stdout)["causes"] == []  # nothing matched

    learned = run(["explain", "--learn", "first.log", "--category", "container_build",
                   "--fix", "lfs setquota -p on /lustre/proj, or checkpoint to /scratch", "--json"], team)
    assert learned.exit_code == 0, learned.stdout
    case = json.loads(learned.stdout)["learned"]
    stored = Path(case["path"])
    assert stored.parent == team / ".envbuilder" / "explain-cases" and stored.is_file()

    after = run(["explain", "--json", "later.log"], team)
    assert after.exit_code == 0, after.stdout
    top = json.loads(after.stdout)["causes"][0]
    assert top["category"] == "container_build"
    assert top["similar_cases"][0]["team"] is True and top["fix"].startswith("lfs setquota")
    human = run(["explain", "later.log"], team)
    assert "[team case]" in human.stdout and "like team case container_build-" in human.stdout

    other = tmp_path / "other"  # another project never sees the team's cases
    other.mkdir()
    (other / "envbuilder.toml").write_text('registry = "registry.example/other"\n')
    (other / "later.log").write_text(LATER_LOG)
    assert run(["explain", "--json", "later.log"], other).exit_code == 1


def test_learn_refuses_bad_input(tmp_path: Path) -> None:
    (tmp_path / "envbuilder.toml").write_text('registry = "r.example/x"\n')
    (tmp_path / "first.log").write_text(TEAM_LOG)
    (tmp_path / "quiet.log").write_text("epoch 1 loss 2.0\nepoch 2 loss 1.9\n")
    r = run(["explain", "--learn", "first.log", "--category", "flaky_disks", "--fix", "x"], tmp_path)
    assert r.exit_code == 2 and "unknown category 'flaky_disks'" in r.stderr
    r = run(["explain", "--learn", "first.log", "--category", "shm"], tmp_path)
    assert r.exit_code == 2 and "--fix" in r.stderr
    r = run(["explain", "--learn", "quiet.log", "--category", "shm", "--fix", "x"], tmp_path)
    assert r.exit_code == 2 and "nothing in quiet.log looks like an error" in r.stderr
    assert not (tmp_path / ".envbuilder").exists()  # nothing half-written


def test_learn_outside_a_project_says_where_cases_go(tmp_path: Path) -> None:
    (tmp_path / "first.log").write_text(TEAM_LOG)
    r = run(["explain", "--learn", "first.log", "--category", "shm", "--fix", "x"], tmp_path)
    assert r.exit_code == 2 and "envbuilder.toml" in r.stderr


def test_the_project_names_its_cases_folder(tmp_path: Path) -> None:
    (tmp_path / "envbuilder.toml").write_text('explain_cases = "ops/explain"\n')
    (tmp_path / "first.log").write_text(TEAM_LOG)
    r = run(["explain", "--learn", "first.log", "--category", "container_build", "--fix", "quota", "--json"], tmp_path)
    assert r.exit_code == 0, r.stderr
    assert Path(json.loads(r.stdout)["learned"]["path"]).parent == tmp_path / "ops" / "explain"
