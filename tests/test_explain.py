"""Tests of envbuilder.explain: the engine, the input handling and accuracy on a real corpus.

Run with ``PYTHONPATH=/work/main python -m pytest tests/test_explain.py -q`` (``-s`` prints the
corpus accuracy).
"""

from __future__ import annotations

import io
import os
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuilder.errors import InputError
from envbuilder.diagnose.explain import (
    CATEGORIES,
    Cause,
    Evidence,
    analyse_files,
    analyse_lines,
    explain_files,
    explain_lines,
    load_signatures,
)
from envbuilder.diagnose.ranking import default_model

CORPUS = Path(__file__).parent / "explain_corpus"
# Thresholds of the development split (test_corpus_accuracy, measured 1.00 on it: the signatures
# were written against it, so it is a regression check, not an accuracy figure).
TOP1_THRESHOLD = 0.95
TOP3_THRESHOLD = 0.98
# The held-out split (by source repository, frozen since issue 33): 0.944 / 0.953 on 107 cases
# from 104 repositories before issue 33, 0.963 / 0.981 after (nearest cases searched without
# any held-out case); issue 33 requires it to stay >= 0.94.
HELDOUT_TOP1 = 0.94
HELDOUT_TOP3 = 0.95
# Batch 2026-12-01 (issue 33): 0.170 before any change, >= 0.85 required after (a development
# figure: the changes were made while reading it).
BATCH_TOP1 = 0.85

UNHANDLED = ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:825,"
             " unhandled system error, NCCL version 2.7.8")
WATCHDOG_SEQ1 = ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
                 "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600047 "
                 "milliseconds before timing out.")
BLIND = ("-unseen", "-fresh")  # batches measured with no case of such a batch in the index
WATCHDOG_LATE = WATCHDOG_SEQ1.replace("SeqNum=1,", "SeqNum=48213,")


def categories(causes: list[Cause]) -> list[str]:
    return [c.category for c in causes]


def answer(report) -> list[str]:
    """explain's answer: its causes, then its low-confidence guesses."""
    return categories(report.causes + report.guesses)


def load_cases() -> list[dict]:
    return yaml.safe_load((CORPUS / "cases.yaml").read_text())["cases"]


def repository(source: str) -> str:
    """owner/name (lower case) of a https://github.com/owner/name/... source."""
    return "/".join(source.split("/")[3:5]).lower()


def load_heldout() -> tuple[set[str], int]:
    """The held-out split (tests/explain_corpus/heldout.yaml lists source repositories): the
    case files from those repositories, and the minimum."""
    data = yaml.safe_load((CORPUS / "heldout.yaml").read_text())
    repos = {r.lower() for r in data["repositories"] or ()}
    return {c["file"] for c in load_cases() if repository(c["source"]) in repos}, int(data["minimum"])


_MEASURING: dict[tuple[str, bool], object] = {}
_SPLITS: list[set[str]] = []


def measuring_index(case: dict) -> object:
    """The nearest-case index a corpus case is measured with (as benchmarks/
    explain_accuracy.py does): never its own repository's cases, and for a held-out case no
    held-out case at all."""
    from envbuilder.diagnose.retrieval import default_index

    if not _SPLITS:
        data = yaml.safe_load((CORPUS / "heldout.yaml").read_text())
        _SPLITS.append({r.lower() for r in data["repositories"] or ()})
        _SPLITS.append({repository(c["source"]) for c in load_cases()
                        if str(c.get("batch", "")).endswith(BLIND)})
    held, unseen = _SPLITS
    repo = repository(case["source"])
    strict = repo in held
    blind = str(case.get("batch", "")).endswith(BLIND)
    if (repo, blind) not in _MEASURING:
        _MEASURING[(repo, blind)] = default_index().without(
            lambda k: k.repository == repo or (strict and k.repository in held) or (blind and k.repository in unseen))
    return _MEASURING[(repo, blind)]


def accuracy(cases: list[dict]) -> tuple[float, float, str]:
    """top-1/top-3 of explain's answer (causes, then guesses: what the figures meant before
    issue 45); the report also gives the share whose first *confident* cause is right."""
    top1 = top3 = confident = 0
    misses = []
    for case in cases:
        report = analyse_files([str(CORPUS / case["file"])], cases=measuring_index(case))
        got = answer(report)
        top1 += got[:1] == [case["category"]]
        top3 += case["category"] in got[:3]
        confident += categories(report.causes)[:1] == [case["category"]]
        if got[:1] != [case["category"]]:
            misses.append(f"{case['file']}: expected {case['category']}, got {got[:3]} ({report.verdict})")
    n = len(cases)
    report = (f"{n} cases: top-1 {top1 / n:.3f}, top-3 {top3 / n:.3f}, confident top-1 {confident / n:.3f}; "
              f"misses: {misses}")
    print(report)
    return top1 / n, top3 / n, report


# ----------------------------------------------------------------------------- corpus


def test_corpus_is_well_formed() -> None:
    cases = load_cases()
    assert len(cases) >= 45
    per_category = Counter(c["category"] for c in cases)
    assert set(per_category) == set(CATEGORIES), set(CATEGORIES) - set(per_category)
    assert min(per_category.values()) >= 2, per_category
    files = {p.name for p in CORPUS.iterdir()} - {"cases.yaml", "heldout.yaml"}
    assert files == {c["file"] for c in cases}
    heldout, _ = load_heldout()
    assert heldout <= files, heldout - files
    for case in cases:
        assert case["source"].startswith("https://github.com/"), case
        assert case["note"].strip(), case
        assert (CORPUS / case["file"]).stat().st_size > 0, case


def test_corpus_accuracy() -> None:
    """The development split (the cases the signatures were written against): a regression
    check, not an accuracy figure."""
    heldout, _ = load_heldout()
    top1, top3, report = accuracy([c for c in load_cases()
                                   if c["file"] not in heldout and not c.get("batch")])
    assert top1 >= TOP1_THRESHOLD, report
    assert top3 >= TOP3_THRESHOLD, report


def test_heldout_accuracy() -> None:
    """The accuracy thresholds, measured on cases the signatures were not written against."""
    heldout, minimum = load_heldout()
    if len(heldout) < minimum:
        pytest.skip(f"the held-out split has {len(heldout)} case(s), fewer than {minimum}: "
                    "add new cases to tests/explain_corpus/heldout.yaml before tuning on them")
    top1, top3, report = accuracy([c for c in load_cases() if c["file"] in heldout])
    assert top1 >= HELDOUT_TOP1, report
    assert top3 >= HELDOUT_TOP3, report


def test_batch_accuracy() -> None:
    """Issue 33's batch (cases with `batch:`), measured with nearest cases from other
    repositories only."""
    batch = [c for c in load_cases() if c.get("batch") == "2026-12-01"]
    assert len(batch) >= 40
    assert len({repository(c["source"]) for c in batch}) >= 40
    top1, _, report = accuracy(batch)
    assert top1 >= BATCH_TOP1, report


def test_unseen_batch_accuracy() -> None:
    """Batch 2026-12-01-unseen: gathered after issue 33's changes, measured once (0.867, both
    misses "nothing matched"), never tuned on; nearest cases searched without any of it."""
    batch = [c for c in load_cases() if c.get("batch") == "2026-12-01-unseen"]
    assert len(batch) >= 15
    top1, _, report = accuracy(batch)
    assert top1 >= 0.80, report


def test_second_unseen_batch_of_forty_from_new_repositories():
    """Batch 2026-12-02-unseen (issue 33's done-when): 40 real logs from 40 repositories that
    had no case in the corpus, measured once before any change (1.000 on 2026-12-02, commit
    5363da1; docs/explain.md says how they were chosen and why that figure flatters), never
    tuned on; nearest cases searched without any unseen case."""
    batch = [c for c in load_cases() if c.get("batch") == "2026-12-02-unseen"]
    assert len(batch) >= 40
    repos = {repository(c["source"]) for c in batch}
    assert len(repos) >= 40
    earlier = {repository(c["source"]) for c in load_cases() if c.get("batch") != "2026-12-02-unseen"}
    assert not repos & earlier, repos & earlier
    top1, _, report = accuracy(batch)
    assert top1 >= 0.85, report


def test_unseen_batch_after_issue_45_is_forty_five_logs_from_new_repositories():
    """Batch 2026-12-05-unseen (issue 45's done-when, second round): 45 real logs from 45
    repositories with no other case in the corpus, gathered after issue 45's first round and
    measured once before any change for them (0.933 / 0.956 on 2026-12-05, commit f73bee8;
    docs/explain.md), never tuned on; nearest cases searched without any unseen/fresh case."""
    batch = [c for c in load_cases() if c.get("batch") == "2026-12-05-unseen"]
    assert len(batch) >= 40
    repos = {repository(c["source"]) for c in batch}
    assert len(repos) == len(batch)
    earlier = {repository(c["source"]) for c in load_cases() if c.get("batch") != "2026-12-05-unseen"}
    assert not repos & earlier, repos & earlier
    assert all(c.get("note") and c.get("family") for c in batch)
    top1, _, report = accuracy(batch)
    assert top1 >= 0.85, report


# ----------------------------------------------------------------------------- engine


def test_generic_error_weighs_fallocate_context_as_shm() -> None:
    lines = [
        "node1:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : "
        "No space left on device",
        UNHANDLED,
    ]
    assert categories(explain_lines(lines))[0] == "shm"


def test_generic_error_weighs_socket_context_as_network() -> None:
    lines = [
        "node1:1:1 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.2<0>",
        "node1:1:1 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.2<0>",
        UNHANDLED,
    ]
    assert categories(explain_lines(lines))[0] == "network_interface"


def test_generic_error_alone_is_unsure() -> None:
    """A lone generic message names no cause: its candidates are low-confidence guesses (issue 45)."""
    report = analyse_lines([UNHANDLED])
    assert report.causes == [] and report.verdict == "low confidence"
    assert report.guesses, "a generic NCCL error still yields candidates"
    assert all(g.confidence < default_model().threshold for g in report.guesses)


def test_first_collective_timeout_points_to_setup_not_slow_op() -> None:
    first = answer(analyse_lines([WATCHDOG_SEQ1]))
    late = categories(explain_lines([WATCHDOG_LATE]))
    assert first[0] == "network_interface"
    assert "nccl_timeout" in first
    assert late[0] == "nccl_timeout"


def test_seqnum_modifier_needs_a_timeout() -> None:
    # SeqNum=1 alone (e.g. in a flight-recorder dump) is not evidence of anything.
    assert explain_lines(["WorkNCCL(SeqNum=1, OpType=BROADCAST) completed"]) == []


@pytest.mark.parametrize(("line", "expected"), [
    ("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000", "duplicate_gpu"),
    ("RuntimeError: CUDA driver version is insufficient for CUDA runtime version", "driver_mismatch"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device",
     "arch_mismatch"),
    ("NVIDIA H100 with CUDA capability sm_90 is not compatible with the current PyTorch "
     "installation.", "arch_mismatch"),
    ("RuntimeError: CUDA error: invalid device ordinal", "invalid_device_ordinal"),
    ("RuntimeError: No CUDA GPUs are available", "gpu_visibility"),
    ("cudaErrorSystemNotReady: system not yet initialized", "fabric_manager"),
    ("ImportError: libtorch_cuda.so: undefined symbol: ncclCommRegister", "undefined_symbol"),
    ("RuntimeError: Error building extension 'fused_adam'", "deepspeed_op_build"),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
    ("misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
     "ib_rdma"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the "
     "C10d store has failed.", "rendezvous"),
    ("ORTE was unable to reliably start one or more daemons.", "mpi_mismatch"),
    ('ERROR: failed to solve: process "/bin/sh -c pip install ." did not complete successfully: '
     "exit code: 1", "container_build"),
    ("NCCL WARN failed to open CUDA IPC handle : 217 peer access is not supported between these "
     "two devices", "p2p_topology"),
    ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9120, "
     "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600321 milliseconds before timing out.",
     "nccl_timeout"),
])
def test_single_messages(line: str, expected: str) -> None:
    causes = explain_lines(["some unrelated line", line, "another unrelated line"])
    assert causes[0].category == expected
    assert causes[0].evidence[0] == Evidence("<stdin>", 2, line.strip())


def test_ranking_is_sorted_and_confidences_in_range() -> None:
    lines = [
        "NCCL WARN Call to posix_fallocate failed : No space left on device",
        "NCCL INFO NET/Socket : Using [0]docker0:172.17.0.2<0>",
        UNHANDLED,
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]
    causes = explain_lines(lines)
    confidences = [c.confidence for c in causes]
    assert confidences == sorted(confidences, reverse=True)
    assert all(0.0 <= c <= 1.0 for c in confidences)
    assert sum(confidences) <= 1.0 + 1e-6
    assert len(set(categories(causes))) == len(causes)


def test_clear_log_is_confident_and_ambiguous_log_is_not() -> None:
    clear = explain_lines(["Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000"])
    mixed = explain_lines([
        "RuntimeError: CUDA error: invalid device ordinal",
        "RuntimeError: No CUDA GPUs are available",
    ])
    assert clear[0].confidence >= 0.8
    assert mixed[0].confidence < 0.6


def test_unrelated_log_matches_nothing() -> None:
    assert explain_lines(["epoch 1 step 10 loss 2.31", "epoch 1 step 20 loss 2.12"]) == []


def test_to_dict_shape() -> None:
    cause = explain_lines(["x", "RuntimeError: CUDA error: invalid device ordinal"], name="r0.log")[0]
    d = cause.to_dict()
    assert list(d) == ["category", "title", "confidence", "evidence", "check", "fix", "source", "reasons",
                       "basis", "similar_cases"]
    assert d["category"] == "invalid_device_ordinal"
    assert d["evidence"] == [{"file": "r0.log", "line": 2,
                              "text": "RuntimeError: CUDA error: invalid device ordinal"}]
    assert d["source"].startswith("https://")
    assert all(isinstance(d[k], str) and d[k] for k in ("title", "check", "fix"))


def test_evidence_is_capped_per_signature() -> None:
    lines = ["RuntimeError: CUDA error: invalid device ordinal"] * 1000
    cause = explain_lines(lines)[0]
    sigs = load_signatures()
    assert len(cause.evidence) <= sigs.setting("max_evidence_per_signature")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=30))
def test_arbitrary_text_never_crashes(lines: list[str]) -> None:
    for cause in explain_lines(lines):
        assert 0.0 <= cause.confidence <= 1.0
        assert cause.category in CATEGORIES


# ----------------------------------------------------------------------------- signatures file


def test_packaged_signatures_cover_every_category() -> None:
    sigs = load_signatures()
    assert set(sigs.categories) == set(CATEGORIES)
    for cat in CATEGORIES:
        assert any(cat in s.adds for s in sigs.signatures), cat
        assert sigs.categories[cat]["source"].startswith("https://")


def test_packaged_patterns_compile_with_re2() -> None:
    """The packaged signatures' RE2 patterns are compiled on first use: each must compile."""
    re2 = pytest.importorskip("re2")
    sigs = load_signatures()
    linear = [s for s in sigs.signatures if s.linear]
    assert len(linear) > 100
    for s in linear:
        for rx in (s.regex, s.unless):
            if rx is not None:
                assert re2.compile(rx.pattern) is not None, s.id


def test_the_packaged_json_twin_is_the_yaml_and_current() -> None:
    """signatures.json holds exactly what signatures.yaml says (regenerate it with
    python -m envbuilder.diagnose.signature_data)."""
    from envbuilder.diagnose import signature_data

    text = signature_data.SOURCE.read_text(encoding="utf-8")
    assert signature_data.twin(text) == yaml.safe_load(text), \
        "stale: run python -m envbuilder.diagnose.signature_data"
    assert signature_data.main(["--check"]) == 0


def test_a_stale_or_damaged_twin_is_not_used(tmp_path: Path, monkeypatch) -> None:
    """An edited YAML (a checkout) or a damaged JSON: the YAML is read, so what explain uses
    is always the YAML's content."""
    from envbuilder.diagnose import signature_data

    text = signature_data.SOURCE.read_text(encoding="utf-8")
    twin = tmp_path / "signatures.json"
    monkeypatch.setattr(signature_data, "TWIN", twin)
    twin.write_text(signature_data.make(text))
    assert signature_data.twin(text) is not None
    assert signature_data.twin(text + "\n# edited\n") is None
    for damaged in ("", "not json", "[]", '{"format": "other"}'):
        twin.write_text(damaged)
        assert signature_data.twin(text) is None
    twin.unlink()
    assert signature_data.twin(text) is None
    # and the packaged signatures still load, from the YAML
    assert set(load_signatures().categories) == set(CATEGORIES)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sigs.yaml"
    path.write_text(text)
    return path


MINIMAL = """
categories:
  oom: {title: t, check: c, fix: f, source: "https://example.org"}
signatures:
  - {id: a, pattern: 'out of memory', adds: {oom: 5}}
"""


def test_custom_signatures_file(tmp_path: Path) -> None:
    sigs = load_signatures(write(tmp_path, MINIMAL))
    causes = explain_lines(["CUDA out of memory"], signatures=sigs)
    assert categories(causes) == ["oom"]


@pytest.mark.parametrize(("text", "key"), [
    ("categories: [", "not valid YAML"),
    ("- 1\n- 2\n", "top level"),
    (MINIMAL.replace("'out of memory'", "'out of (memory'"), "signatures[0] (a).pattern"),
    (MINIMAL.replace("oom: 5", "nope: 5"), "signatures[0] (a).adds.nope"),
    (MINIMAL.replace("oom: 5", "oom: high"), "signatures[0] (a).adds.oom"),
    (MINIMAL.replace("https://example.org", "example.org"), "categories.oom.source"),
    (MINIMAL.replace("fix: f, ", ""), "categories.oom.fix"),
    (MINIMAL.replace("  oom:", "  ufo:"), "categories.ufo"),
    (MINIMAL + "  - {id: a, pattern: x, adds: {oom: 1}}\n", "duplicate id"),
    (MINIMAL.replace("adds: {oom: 5}", "adds: {oom: 5}, requires: [zzz]"), "requires"),
    (MINIMAL.replace("adds: {oom: 5}", "adds: {oom: 5}, colour: red"), "colour"),
    (MINIMAL + "settings: {repeat_cap: -1}\n", "settings.repeat_cap"),
])
def test_bad_signatures_file_names_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_signatures(path)
    assert str(path) in str(err.value)
    assert key in str(err.value)
    assert err.value.exit_code == 2


def test_missing_signatures_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_signatures(tmp_path / "nope.yaml")


# ----------------------------------------------------------------------------- inputs


def test_stdin_dash() -> None:
    data = b"hello\nRuntimeError: CUDA error: invalid device ordinal\n"
    causes = explain_files(["-"], stdin=io.BytesIO(data))
    assert causes[0].category == "invalid_device_ordinal"
    assert causes[0].evidence[0] == Evidence("<stdin>", 2,
                                             "RuntimeError: CUDA error: invalid device ordinal")


def test_multiple_files_combine_evidence(tmp_path: Path) -> None:
    rank0 = tmp_path / "rank0.log"
    rank1 = tmp_path / "rank1.log"
    rank0.write_text(f"starting\n{UNHANDLED}\n")
    rank1.write_text("a\nb\nNCCL WARN Error: failed to extend /dev/shm/nccl-ab12 to 9637892 bytes\n")
    causes = explain_files([str(rank0), str(rank1)])
    assert causes[0].category == "shm"
    files = {(e.file, e.line_no) for e in causes[0].evidence}
    assert (str(rank1), 3) in files
    assert (str(rank0), 2) in files


def test_binary_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "core.bin"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + os.urandom(256))
    with pytest.raises(InputError, match="looks binary") as err:
        explain_files([str(path)])
    assert str(path) in str(err.value)


def test_empty_file_gives_no_causes(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    assert explain_files([str(path)]) == []


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.log"
    with pytest.raises(InputError) as err:
        explain_files([str(path)])
    assert str(path) in str(err.value)
    assert err.value.exit_code == 2


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory") as err:
        explain_files([str(tmp_path)])
    assert str(tmp_path) in str(err.value)


def test_latin1_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.log"
    path.write_bytes("Ã©tape d\xe9marr\xe9e\nRuntimeError: No CUDA GPUs are available\n"
                     .encode("latin-1"))
    causes = explain_files([str(path)])
    assert causes[0].category == "gpu_visibility"
    assert causes[0].evidence[0].line_no == 2


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_utf16_file_with_bom(tmp_path: Path, encoding: str) -> None:
    text = "démarrage\r\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000\r\n"
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    path = tmp_path / "u16.log"
    path.write_bytes(data)
    causes = explain_files([str(path)])
    assert causes[0].category == "duplicate_gpu"
    assert causes[0].evidence[0] == Evidence(
        str(path), 2, "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000")


def test_very_long_line_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "long.log"
    with path.open("w") as fh:
        fh.write("x" * 3_000_000 + "\n")
        fh.write("RuntimeError: CUDA error: invalid device ordinal\n")
    causes = explain_files([str(path)])
    assert causes[0].category == "invalid_device_ordinal"
    assert causes[0].evidence[0].line_no == 2


def test_large_log_streams_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    noise = "".join(
        f"[rank{i % 8}]:[I1204 10:{i % 60:02d}:00] step {i} loss=2.{i % 97:02d} lr=3e-4 "
        f"grad_norm=1.{i % 13} tokens/s=41234 mem=61.2GiB NCCL INFO comm 0x55 rank {i % 8}\n"
        for i in range(2000)
    ).encode()
    target = 60 * 1024 * 1024
    with path.open("wb") as fh:
        written = 0
        while written < target:
            fh.write(noise)
            written += len(noise)
        fh.write(b"[rank3]: RuntimeError: CUDA error: invalid device ordinal\n")
        fh.write(noise[:5000])
    size = path.stat().st_size
    tracemalloc.start()
    try:
        causes = explain_files([str(path)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert causes[0].category == "invalid_device_ordinal"
    assert causes[0].evidence[0].line_no > 500_000
    assert peak < 8 * 1024 * 1024, f"peak {peak} bytes for a {size} byte log"
    assert peak < size / 10


# ----------------------------------------------------------------------------- issue 13 families


def test_stack_frames_name_the_timeout_without_the_watchdog_line():
    frames = [
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::"
        "duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in libtorch_cuda.so)",
        "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x1554e9e1871c in libtorch_cuda.so)",
    ]
    assert not any("Watchdog caught" in f for f in frames)
    assert categories(explain_lines(frames))[:1] == ["nccl_timeout"]


def test_nccl_setup_lines_alone_are_no_failure_but_a_watchdog_is_read_with_them():
    """Channels set up, then nothing: a healthy run prints the same (issue 45: NCCL's INFO
    lines are not evidence of a failure); with a watchdog timeout the transport is read too."""
    p2p = [f"host:1:2 [{r}] NCCL INFO Channel 0{c}/0 : {r}[{r}] -> {(r + 1) % 4}[{(r + 1) % 4}] via P2P/IPC"
           for r in range(4) for c in range(2)] + ["host:1:2 [0] NCCL INFO Connected all rings"]
    report = analyse_lines(p2p)
    assert report.verdict == "no failure found" and not report.causes and not report.guesses
    ib = [ln.replace("via P2P/IPC", "via NET/IB/0/GDRDMA") for ln in p2p]
    assert analyse_lines(ib).verdict == "no failure found"
    # a real error: the timeout first, the transport read beside it
    hung = analyse_lines(p2p + [WATCHDOG_LATE])
    assert answer(hung)[0] == "nccl_timeout" and hung.facts.transports() == ["P2P/IPC"]


@pytest.mark.parametrize("line, category", [
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 803: system has unsupported "
     "display driver / cuda driver combination", "driver_mismatch"),
    ("W: GPG error: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2004/x86_64  "
     "InRelease: The following signatures couldn't be verified because the public key is not "
     "available: NO_PUBKEY A4B469963BF863CC", "container_build"),
    ("ValueError: Horovod MPI support has not been built.", "mpi_mismatch"),
    ("node1:12:34 [0] transport/nvls.cc:153 NCCL WARN Cuda failure 1 'invalid argument'", "fabric_manager"),
])
def test_issue13_families(line, category):
    assert categories(explain_lines([line]))[:1] == [category]


def test_second_and_third_causes_when_the_evidence_supports_them():
    log = ["[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
           "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.",
           "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via NET/IB/0/GDRDMA",
           "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via NET/Socket/0"]
    got = answer(analyse_lines(log))
    assert len(got) >= 2 and {"network_interface", "nccl_timeout"} <= set(got[:3])


def test_heldout_manifest_names_corpus_cases():
    names, minimum = load_heldout()
    assert len(names) >= max(20, minimum) and names <= {c["file"] for c in load_cases()}
    data = yaml.safe_load((CORPUS / "heldout.yaml").read_text())
    assert data["split"] == "repository"
    repos = {r.lower() for r in data["repositories"]}
    used = {repository(c["source"]) for c in load_cases()}
    assert repos <= used, repos - used  # every listed repository has cases


def test_heldout_split_is_by_repository():
    """No development case comes from a held-out repository (by construction of the split),
    and the held-out part spans many projects."""
    held, _ = load_heldout()
    cases = load_cases()
    held_repos = {repository(c["source"]) for c in cases if c["file"] in held}
    dev_repos = {repository(c["source"]) for c in cases if c["file"] not in held}
    assert not held_repos & dev_repos
    assert len(held_repos) >= 30


def test_heldout_split_is_frozen():
    """Issue 33: a case measured once never moves; the held-out cases of 2026-12-01 stay."""
    data = yaml.safe_load((CORPUS / "heldout.yaml").read_text())
    held, _ = load_heldout()
    assert len(data["frozen"]) >= 107 and set(data["frozen"]) <= held, set(data["frozen"]) - held


def test_issue33_families_have_three_real_cases_each_found():
    """Each family issue 33 names has at least three real cases (both batches) and explain
    names their family first on at least three of them (measured without the own repository)."""
    cases = [c for c in load_cases() if str(c.get("batch", "")).startswith("2026-12-01")]
    for family in ("gpu_access", "launcher", "xid", "ucx_libfabric", "link_symbol", "arch_wrapped"):
        members = [c for c in cases if c.get("family") == family]
        assert len(members) >= 3, family
        found = [c for c in members
                 if categories(explain_files([str(CORPUS / c["file"])], cases=measuring_index(c)))[:1] == [c["category"]]]
        assert len(found) >= 3, (family, [c["file"] for c in members if c not in found])


def test_new_patterns_are_re2_compatible():
    """Patterns added for issue 13 avoid lookaround and backreferences (google-re2 syntax)."""
    import re as _re
    sigs = load_signatures()
    new = {"driver_system_mismatch_803", "driver_error_803_code", "cuda_compat_libs", "apt_no_pubkey_cuda",
           "apt_no_pubkey", "apt_repo_not_signed", "apt_nvidia_repo", "horovod_mpi_not_built",
           "horovod_controller_not_built", "horovod_extension_not_built", "nvls_cuda_failure",
           "nvls_multicast_failure", "nvls_context", "frame_check_timeout", "frame_watchdog",
           "frame_flight_recorder", "hang_setup_p2p", "hang_setup_net_ib", "hang_setup_net_socket",
           "hang_setup_done"}
    found = {s.id: s.regex.pattern for s in sigs.signatures if s.id in new}
    assert set(found) == new
    for sid, pat in found.items():
        assert not _re.search(r"\(\?[=!<]|\\[1-9]", pat), sid
