"""explain's verdicts (issue 45): no cause for healthy logs, guesses shown as such, causes with
fixes that name the setting, the learned weighing current and deterministic, and the fresh batch
of real logs from repositories the corpus had never seen.

Healthy logs: tests/fixtures/healthy_runs (passing smoke runs of the host runner on this machine,
healthy NCCL output quoted in public threads; SOURCE.md says where each comes from) and the real
H200 recordings of tests/fixtures/gpu_runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envbuilder.diagnose.explain import CATEGORIES, analyse_files, analyse_lines, load_signatures
from envbuilder.diagnose.ranking import FEATURES, default_model, features, fit

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "explain_corpus"
H200 = ROOT / "tests" / "fixtures" / "gpu_runs" / "h200-1gpu"
HEALTHY = sorted((ROOT / "tests" / "fixtures" / "healthy_runs").glob("*.log")) + \
    [H200 / "smoke-gloo-12.log", H200 / "smoke-nccl-1.log"]


def test_there_are_at_least_twenty_healthy_logs_of_every_kind() -> None:
    names = [p.name for p in HEALTHY]
    assert len(HEALTHY) >= 20, names
    assert any(n.startswith("host-") for n in names)  # the host runner's passing smoke runs
    assert any(n.startswith("smoke-nccl") for n in names)  # the real H200, NCCL_DEBUG=INFO
    assert sum(n.startswith(("nccl", "nccltests")) for n in names) >= 3  # healthy NCCL output
    assert sum(n.startswith("docker-") for n in names) >= 3  # the docker runner in the suite's CPU images


def test_what_a_healthy_run_says_of_itself_is_not_a_failure() -> None:
    """Two lines of passing docker-runner smoke runs that read as failures before: DeepSpeed's
    "built successfully" for its shm_comm op, and DDP's configuration dump naming gloo_socket_ifname."""
    built = "DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully"
    dump = ["[rank0]:[I1205 10:28:56.809956438 logger.cpp:223] [Rank 0]: DDP Initialized with: ",
            "backend_name: gloo", "gloo_device_transport: N/A", "gloo_socket_ifname: eth0", "world_size: 2"]
    for lines in ([built], dump):
        report = analyse_lines(lines)
        assert report.verdict == "no failure found", [(c.category, c.confidence) for c in report.causes]
    # the failures they resemble are still read
    failed = analyse_lines(["RuntimeError: Error building extension 'deepspeed_shm_comm'"]).causes
    assert failed and failed[0].category == "deepspeed_op_build"
    gloo = analyse_lines(["RuntimeError: [enforce fail at gloo/transport/tcp/device.cc:83] ifa != nullptr. "
                          "Unable to find address for: eth0", "export GLOO_SOCKET_IFNAME=eth0"]).causes
    assert gloo and gloo[0].category == "network_interface"


@pytest.mark.parametrize("log", HEALTHY, ids=lambda p: p.name)
def test_a_healthy_log_gets_no_cause_and_no_guess(log: Path) -> None:
    """Warnings, deprecation notices, launcher banners and NCCL INFO lines are not evidence."""
    report = analyse_files([str(log)])
    assert report.verdict == "no failure found", [(c.category, c.confidence) for c in report.causes + report.guesses]
    assert report.causes == [] and report.guesses == []
    assert report.to_dict()["verdict"] == "no failure found"


def test_the_cli_says_no_failure_found_and_exits_1_on_a_healthy_log() -> None:
    """The issue's example: a passing smoke log with torch's FutureWarnings got `1. ib_rdma (35%)`
    and exit 0; now no cause, exit 1, one line on stderr (both the fast path and typer)."""
    log = ROOT / "tests" / "fixtures" / "healthy_runs" / "host-gloo-4.log"
    assert "FutureWarning" in log.read_text()
    for fast in ("", "1"):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ENVBUILDER_NO_FAST_PATH": fast}
        done = subprocess.run([sys.executable, "-m", "envbuilder", "explain", str(log)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stderr
        assert "1." not in done.stdout and "?" not in done.stdout
        assert done.stderr.strip() == ("envbuilder: no failure found in the log (warnings, deprecation notices, "
                                       "banners and INFO lines are not evidence of one)")


def test_low_confidence_guesses_are_shown_as_such_with_exit_1(tmp_path: Path) -> None:
    log = tmp_path / "generic.log"
    log.write_text("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:825,"
                   " unhandled system error, NCCL version 2.7.8\n")
    report = analyse_files([str(log)])
    assert report.verdict == "low confidence" and not report.causes and report.guesses
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "envbuilder", "explain", str(log)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "low-confidence guesses (too little evidence to name a cause):" in done.stdout
    assert done.stdout.count("\n?  ") + done.stdout.startswith("?  ") == len(report.guesses)
    assert "no cause found with confidence" in done.stderr


def test_the_dataloader_shm_message_ranks_shm_first_with_high_confidence() -> None:
    """torch's DataLoader worker message (as issue 45 quotes it) with the wrapper torch prints
    around a worker's exception: shm first, confident, and the DataLoader's own fix."""
    report = analyse_lines([
        "RuntimeError: Caught RuntimeError in DataLoader worker process 0.",
        "Original Traceback (most recent call last):",
        "[rank0]: RuntimeError: unable to allocate shared memory(shm) for file </torch_4304_2962414746_0>: "
        "No space left on device (28)",
    ])
    assert report.causes and report.causes[0].category == "shm", [(c.category, c.confidence) for c in report.causes]
    assert report.causes[0].confidence >= 0.8
    assert all(c.confidence < 0.2 for c in report.causes[1:] + report.guesses)
    assert "num_workers" in report.causes[0].fix and "--shm-size" in report.causes[0].fix


# ---------------------------------------------------------------------------- fix texts

# what each family's fix must name: the option or setting that addresses the cause
SETTINGS = {
    "driver_mismatch": ["driver", "cu118"],
    "network_interface": ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"],
    "shm": ["--shm-size", "--ipc=host", "medium: Memory", "NCCL_SHM_DISABLE=1"],
    "ib_rdma": ["--fabric ib", "--fabric efa", "ulimit -l unlimited", "NCCL_IB_HCA", "--device /dev/infiniband"],
    "undefined_symbol": ["LD_LIBRARY_PATH"],
    "deepspeed_op_build": ["--ds-ops", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "DS_BUILD_FUSED_ADAM=1"],
    "nccl_timeout": ["timeout=timedelta"],
    "p2p_topology": ["NCCL_P2P_DISABLE=1", "iommu=pt"],
    "rendezvous": ["--rdzv_endpoint", "--rdzv_conf"],
    "fabric_manager": ["nvidia-fabricmanager"],
    "arch_mismatch": ["TORCH_CUDA_ARCH_LIST"],
    "oom": ["batch size", "PYTORCH_CUDA_ALLOC_CONF"],
    "invalid_device_ordinal": ["--nproc_per_node", "CUDA_VISIBLE_DEVICES"],
    "gpu_visibility": ["CUDA_VISIBLE_DEVICES"],
    "duplicate_gpu": ["set_device"],
    "mpi_mismatch": ["mpirun --prefix", "horovodrun --gloo"],
    "container_build": ["--no-build-isolation", "compiled"],
    "horovod_build": ["--with horovod", "HOROVOD_GPU_OPERATIONS=NCCL"],
    "lib_shadowing": ["LD_LIBRARY_PATH"],
    "container_runtime": ["--gpus all", "nvidia-ctk runtime configure"],
    "gpu_device_access": ["nvidia-ctk", "--gres=gpu:N"],
    "gpu_xid": ["nvidia-smi -r -i", "RMA"],
    "compute_mode": ["set_device", "-c DEFAULT"],
    "slurm_gpu_binding": ["--gpus-per-node", "--gpus-per-task", "set_device(0)"],
    "extension_arch": ["TORCH_CUDA_ARCH_LIST", "--cuda-arch"],
}


def test_every_family_has_a_fix_naming_the_setting_that_addresses_it() -> None:
    cats = load_signatures().categories
    assert set(SETTINGS) == set(CATEGORIES)
    missing = {cat: [s for s in SETTINGS[cat] if s not in cats[cat]["fix"]] for cat in CATEGORIES}
    assert not any(missing.values()), {c: m for c, m in missing.items() if m}


def test_a_message_with_a_fix_of_its_own_gives_that_fix() -> None:
    sigs = load_signatures()
    own = [s for s in sigs.signatures if s.fix]
    assert len(own) >= 6
    for sig in own:
        assert sig.source.startswith("https://"), sig.id  # a fact's source
        assert "`" in sig.fix, sig.id  # names a command, option or setting


def test_the_deepspeed_shm_comm_op_fix_names_the_op_for_ds_ops() -> None:
    """DeepSpeed's CPU shm_comm op JIT-built without a compiler: the fix pre-builds that op
    (`--ds-ops` accepts deepspeed_shm_comm with issue 40), not fused_adam,cpu_adam."""
    report = analyse_lines([
        "Using /root/.cache/torch_extensions/py311_cpu as PyTorch extensions root...",
        "Building extension module deepspeed_shm_comm...",
        "error: command 'c++' failed: No such file or directory",
        "RuntimeError: Error building extension 'deepspeed_shm_comm'",
    ])
    cause = report.causes[0]
    assert cause.category == "deepspeed_op_build"
    assert "--ds-ops fused_adam,cpu_adam,deepspeed_shm_comm" in cause.fix and "issue 40" in cause.fix
    # a FusedAdam build failure keeps the family's fix
    other = analyse_lines(["RuntimeError: Error building extension 'fused_adam'"]).causes[0]
    assert other.category == "deepspeed_op_build" and "deepspeed_shm_comm" not in other.fix


# ---------------------------------------------------------------------------- the model


def test_the_packaged_model_is_what_training_gives() -> None:
    """envbuilder/data/explain_model.json: python scripts/train-explain-model.py writes it."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "train-explain-model.py"), "--check"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_training_is_deterministic_and_learns_that_evidence_counts() -> None:
    strong = features({"shm": 9.0, "oom": 1.0}, {}, [("shm", 0.5), ("oom", 0.3)])
    weak = features({"oom": 1.0, "shm": 0.5}, {}, [("oom", 0.4)])
    examples = [(strong, "shm"), (weak, "oom"), (features({}, {}, [("rendezvous", 0.7)]), "rendezvous"),
                (features({"p2p_topology": 2.5}, {"p2p_topology": 2.5}, []), "p2p_topology")]
    a, b = fit(examples, steps=200), fit(examples, steps=200)
    assert a == b and len(a.weights) == len(FEATURES)
    probs, none = a.probabilities(strong)
    assert probs["shm"] > probs["oom"] and none < probs["shm"]
    assert default_model().threshold > 0


def _training_script():  # scripts/train-explain-model.py, loaded as a module
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_explain_model", ROOT / "scripts" / "train-explain-model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_training_never_fits_on_an_unseen_batch() -> None:
    """A case of an -unseen batch is measured, never tuned on: adding one leaves the weights as they are."""
    train = _training_script()
    strong = features({"shm": 9.0, "oom": 1.0}, {}, [("shm", 0.5), ("oom", 0.3)])
    weak = features({"oom": 1.0, "shm": 0.5}, {}, [("oom", 0.4)])
    seen = [{"rows": strong, "label": "shm", "batch": ""}, {"rows": weak, "label": "oom", "batch": "2026-12-05-grow"}]
    unseen = {"rows": strong, "label": "oom", "batch": "2026-12-05-unseen"}
    assert train.train(seen + [unseen]) == train.train(seen)
    assert train.train(seen + [dict(unseen, batch="2026-12-05-fresh")]) != train.train(seen)


def test_cross_validation_needs_two_folds() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "train-explain-model.py"), "--cv", "--folds", "1"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "at least 2 folds" in done.stderr


# ---------------------------------------------------------------------------- the fresh batch


def _repository(source: str) -> str:
    return "/".join(source.split("/")[3:5]).lower()


def test_the_fresh_batch_is_forty_real_logs_from_repositories_new_to_the_corpus() -> None:
    cases = yaml.safe_load((CORPUS / "cases.yaml").read_text())["cases"]
    batch = [c for c in cases if c.get("batch") == "2026-12-05-fresh"]
    assert len(batch) >= 40
    repos = {_repository(c["source"]) for c in batch}
    assert len(repos) >= 40
    earlier = {_repository(c["source"]) for c in cases if c.get("batch") != "2026-12-05-fresh"}
    assert not repos & earlier, repos & earlier
    for kind in ("ecc", "efa_devices", "cupy_nccl", "exclusive_process", "missing_arch", "default_runtime",
                 "slurm_gpus_per_task", "ext_gpuless_builder", "framework_ifname", "hardcoded_device_count"):
        assert any(c.get("family") == kind for c in batch), kind  # each kind issue 45 names


def test_the_fresh_batch_is_explained_with_confidence() -> None:
    """Batch 2026-12-05-fresh: 0.561 before issue 45 (commit f06a763); the signatures for its
    kinds were written reading it, so this is a development figure (docs/explain.md). Searched
    without any case of a -fresh or -unseen batch in the index, as measured there."""
    from envbuilder.diagnose.retrieval import default_index

    cases = yaml.safe_load((CORPUS / "cases.yaml").read_text())["cases"]
    blind = {_repository(c["source"]) for c in cases if str(c.get("batch", "")).endswith(("-unseen", "-fresh"))}
    index = default_index().without(lambda k: k.repository in blind)
    batch = [c for c in cases if c.get("batch") == "2026-12-05-fresh"]
    right = [c["file"] for c in batch
             if [x.category for x in analyse_files([str(CORPUS / c["file"])], cases=index).causes][:1] == [c["category"]]]
    assert len(right) / len(batch) >= 0.85, sorted({c["file"] for c in batch} - set(right))
