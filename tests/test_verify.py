"""The image verification's judgement (envbuilder/run/verify.py), on payload output recorded from
real images (tests/fixtures/verify/) and on this host's own torch: every check passes on the
real facts, and each kind of lie (a label that disagrees, a second NCCL, a missing op) fails
with both values named. The payload itself runs here on the host torch too.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.errors import InputError
from envbuilder.run.payload import verify_image
from envbuilder.run.verify import compare, parse_facts

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "verify"


def _recorded(name: str) -> tuple[dict, dict]:
    d = json.loads((FIXTURES / f"{name}.json").read_text())
    return d["facts"], d["labels"]


def _by_name(checks) -> dict:
    return {c.name: c for c in checks}


def test_recorded_cuda_image_passes_every_check():
    facts, labels = _recorded("cu124-torch2.6-debian12")
    checks = _by_name(compare(facts, labels))
    assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
    assert {"python", "torch", "torch_cuda", "torch_nccl", "nccl_loaded", "torch_ldd_nccl",
            "cudart_loaded", "nvidia_env"} <= set(checks)
    assert checks["nccl_loaded"].actual[0]["version"] == "2.21.5"


def test_a_label_that_disagrees_is_named_with_both_values():
    facts, labels = _recorded("cu124-torch2.6-debian12")
    labels = dict(labels, **{"io.envbuilder.nccl": "2.20.5", "io.envbuilder.torch": "2.5.1"})
    bad = {c.name: c for c in compare(facts, labels) if not c.ok}
    assert set(bad) == {"torch", "torch_nccl", "nccl_loaded"}
    assert "2.5.1" in bad["torch"].detail and "2.6.0" in bad["torch"].detail
    assert "2.20.5" in bad["nccl_loaded"].detail and "2.21.5" in bad["nccl_loaded"].detail


def test_two_nccls_in_one_process_fail():
    facts, labels = _recorded("cu124-torch2.6-debian12")
    facts = copy.deepcopy(facts)
    facts["libs"]["nccl"].append({"path": "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
                                  "realpath": "/usr/lib/x86_64-linux-gnu/libnccl.so.2.19.3",
                                  "version": "2.19.3"})
    bad = {c.name: c for c in compare(facts, labels) if not c.ok}
    assert "nccl_loaded" in bad and "2 NCCL libraries" in bad["nccl_loaded"].detail
    assert "2.19.3" in bad["nccl_loaded"].detail


def test_a_second_cuda_runtime_fails():
    facts, labels = _recorded("cu124-torch2.6-debian12")
    facts = copy.deepcopy(facts)
    facts["libs"]["cudart"].append({"path": "/usr/lib/x86_64-linux-gnu/libcudart.so.12",
                                    "realpath": "/usr/lib/x86_64-linux-gnu/libcudart.so.12.0.146",
                                    "version": "12.0"})
    bad = {c.name for c in compare(facts, labels) if not c.ok}
    assert bad == {"cudart_loaded"}


def test_missing_nvidia_variables_fail_for_cuda_images():
    facts, labels = _recorded("cu124-torch2.6-debian12")
    facts = copy.deepcopy(facts)
    facts["env"]["NVIDIA_DRIVER_CAPABILITIES"] = None
    bad = {c.name: c for c in compare(facts, labels) if not c.ok}
    assert set(bad) == {"nvidia_env"} and "NVIDIA_DRIVER_CAPABILITIES" in bad["nvidia_env"].detail


def test_labelled_components_must_be_there():
    facts, labels = _recorded("cu124-torch2.6-debian12")
    labels = dict(labels, **{"io.envbuilder.horovod": "0.28.1", "io.envbuilder.deepspeed": "0.16.9",
                             "io.envbuilder.deepspeed-ops": "fused_adam"})
    bad = {c.name: c for c in compare(facts, labels) if not c.ok}
    assert {"horovod", "deepspeed"} <= set(bad)
    assert "not installed" in bad["horovod"].detail


def test_horovod_built_without_nccl_or_against_another_file():
    facts, labels = _recorded("cu124-torch2.6-debian12")
    facts = copy.deepcopy(facts)
    nccl = facts["libs"]["nccl"][0]["realpath"]
    facts["horovod"] = {"version": "0.28.1", "nccl_built": 21505, "gloo_built": True, "mpi_built": False,
                        "extension": "/opt/venv/.../mpi_lib_v2.so", "ldd": {"libnccl.so.2": nccl}}
    labels = dict(labels, **{"io.envbuilder.horovod": "0.28.1"})
    bad = {c.name: c for c in compare(facts, labels) if not c.ok}
    assert set(bad) == {"horovod_nccl"} and "2.15.5" in bad["horovod_nccl"].detail  # built against another version
    facts["horovod"]["nccl_built"] = 22105
    assert all(c.ok for c in compare(facts, labels))
    facts["horovod"]["ldd"] = {"libnccl.so.2": "/opt/other/libnccl.so.2"}
    bad = {c.name: c for c in compare(facts, labels) if not c.ok}
    assert set(bad) == {"horovod_nccl"} and "/opt/other/libnccl.so.2" in bad["horovod_nccl"].detail
    facts["horovod"]["nccl_built"] = 0
    bad = {c.name for c in compare(facts, labels) if not c.ok}
    assert "horovod_nccl_built" in bad


def test_deepspeed_ops_and_their_isa():
    facts, labels = _recorded("cu124-torch2.6-debian12")
    facts = copy.deepcopy(facts)
    facts["deepspeed"] = {"version": "0.16.9", "installed_ops": {"fused_adam": True, "cpu_adam": True},
                          "ops": {"fused_adam": {"loaded": True, "file": "/x/fused_adam_op.so", "march": []},
                                  "cpu_adam": {"loaded": True, "file": "/x/cpu_adam_op.so", "march": ["x86-64-v3"]}}}
    labels = dict(labels, **{"io.envbuilder.deepspeed": "0.16.9", "io.envbuilder.deepspeed-ops": "fused_adam,cpu_adam",
                             "io.envbuilder.cpu-isa": "x86-64-v3"})
    assert all(c.ok for c in compare(facts, labels))
    facts["deepspeed"]["ops"]["fused_adam"]["march"] = ["x86-64"]  # GCC's default, recorded too
    assert all(c.ok for c in compare(facts, labels))
    facts["deepspeed"]["ops"]["cpu_adam"]["march"] = ["znver3"]  # what -march=native records
    facts["deepspeed"]["installed_ops"]["fused_adam"] = False
    bad = {c.name: c for c in compare(facts, labels) if not c.ok}
    assert set(bad) == {"cpu_isa", "ds_op_fused_adam"}
    assert "-march=znver3" in bad["cpu_isa"].detail and "x86-64-v3" in bad["cpu_isa"].detail
    facts["deepspeed"]["ops"]["cpu_adam"]["march"] = ["x86-64-v4"]  # above the label
    assert "cpu_isa" in {c.name for c in compare(facts, labels) if not c.ok}


def test_an_image_without_envbuilder_labels_is_bad_input():
    facts, _ = _recorded("cu124-torch2.6-debian12")
    with pytest.raises(InputError) as ei:
        compare(facts, {"org.opencontainers.image.title": "something"})
    assert ei.value.exit_code == 2


def test_the_payload_runs_on_this_hosts_torch():
    """The real payload, on the CPU torch the test suite installs: a CPU image's facts."""
    pytest.importorskip("torch")
    p = subprocess.run([sys.executable, verify_image.__file__], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    facts = parse_facts(p.stdout)
    assert facts is not None and facts["torch"]["nccl"] is None and facts["libs"]["nccl"] == []
    import torch
    from packaging.version import Version
    v = Version(torch.__version__)
    labels = {"io.envbuilder.torch": v.public, "io.envbuilder.cuda": "cpu",
              "io.envbuilder.python": "%d.%d" % sys.version_info[:2]}
    checks = compare(facts, labels)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    bad = [c for c in compare(facts, dict(labels, **{"io.envbuilder.cuda": "12.4", "io.envbuilder.nccl": "2.21.5"}))
           if not c.ok]
    assert {c.name for c in bad} >= {"torch_cuda", "torch_nccl"}


def test_recorded_horovod_image_passes_and_names_its_nccl():
    """Horovod 0.28.1 built by envbuilder against torch 2.0.1's nvidia-nccl-cu11 2.14.3: ldd
    resolves Horovod's libnccl.so.2 to the file torch loads, and hvd.nccl_built() is 2.14.3."""
    facts, labels = _recorded("cu117-torch2.0-hvd0.28-debian12")
    checks = _by_name(compare(facts, labels))
    assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
    assert checks["horovod_nccl_built"].actual == 21403
    assert checks["horovod_nccl"].actual["file"] == checks["nccl_loaded"].actual[0]["path"]
    # the same image, had its Horovod been linked to the builder's own NCCL
    other = copy.deepcopy(facts)
    other["horovod"]["ldd"]["libnccl.so.2"] = "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
    bad = {c.name: c for c in compare(other, labels) if not c.ok}
    assert set(bad) == {"horovod_nccl"}
    assert "/usr/lib/x86_64-linux-gnu/libnccl.so.2" in bad["horovod_nccl"].detail


def test_recorded_deepspeed_image_ops_and_isa():
    """DeepSpeed 0.16.9 with fused_adam and cpu_adam pre-built by Debian 13's nvcc 12.4 (GCC 13)
    for x86-64-v3: both ops installed and loading; GCC recorded x86-64-v3 (and its default
    x86-64 for objects compiled without a -march), never the build host's CPU."""
    facts, labels = _recorded("cu124-torch2.6-ds0.16-debian13")
    checks = _by_name(compare(facts, labels))
    assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
    assert checks["ds_op_fused_adam"].ok and checks["ds_op_cpu_adam"].ok
    assert "x86-64-v3" in checks["cpu_isa"].actual
    assert labels["io.envbuilder.cpu-isa"] == "x86-64-v3"
    assert labels["io.envbuilder.deepspeed-ops"] == "fused_adam,cpu_adam"
    assert labels["io.envbuilder.builder-nvcc"] == "12.4.131"
