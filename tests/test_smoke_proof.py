"""Issue 40: what the smoke job's proof says and who can demand it.

- The smoke attestation carries backend, device, transport, busbw against its floor, /dev/shm
  and what the components initialised; ``verify --key --require`` and the admission policy
  (``[jobs] admission require``) demand fields. Built from real recordings: the 12-rank
  gloo run and the one-rank NCCL run of the H200 machine (tests/fixtures/gpu_runs/h200-1gpu).
- DeepSpeed: the op its CPU accelerator builds at start-up is pre-built on cpu targets by default,
  refused on CUDA targets, and verify fails naming it when it can neither load nor build.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envbuilder.core.attestreq import parse
from envbuilder.errors import InputError
from envbuilder.render import admission
from envbuilder.run import smoke as sm
from envbuilder.run.sign import BY_NAME, check_predicate, smoke_predicate

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "tests" / "fixtures" / "gpu_runs" / "h200-1gpu"


def recorded(name: str) -> sm.SmokeResult:
    """A recorded SmokeResult (to_dict without its log) with its log beside it."""
    d = json.loads((H200 / f"smoke-{name}.json").read_text())
    d["log"] = (H200 / f"smoke-{name}.log").read_text()
    return sm.SmokeResult(**d)


def req(text: str):
    return parse(text, "--require")


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


# ----------------------------------------------------------------------------- the predicate

def test_gloo_proof_says_gloo_over_tcp_and_fails_a_demand_for_nccl():
    r = sm.judge(recorded("gloo-12"), fabric="ib")
    pred = smoke_predicate("cpu", r)
    assert check_predicate(BY_NAME["smoke"], pred) is None
    assert pred["backend"] == "gloo" and pred["device"] == {"kind": "cpu", "gpus": []}
    assert pred["transport"]["summary"] == "gloo over TCP" and pred["transport"]["fabric_used"] == "tcp"
    assert req("backend=nccl").check(pred) == (False, "gloo")
    assert req("backend=gloo").check(pred)[0]
    assert req("world_size>=12").check(pred)[0]
    assert not req("world_size>=16").check(pred)[0]
    # no floor compared on CPU: a demand for a percentage of it is not met
    assert req("floor_pct>=50").check(pred) == (False, None)


def test_nccl_proof_of_the_h200_records_its_transport_and_why_no_floor():
    from envbuilder.diagnose.doctor import RecordedProbe

    r = sm.judge(recorded("nccl-1"), fabric="ib", min_busbw="auto")
    pred = smoke_predicate("cu130", r, probe=RecordedProbe(ROOT / "tests/fixtures/hosts/h200-1gpu-container"))
    assert check_predicate(BY_NAME["smoke"], pred) is None
    assert pred["backend"] == "nccl" and pred["device"]["kind"] == "cuda"
    t = pred["transport"]
    assert t["nccl_version"] == "2.28.9" and t["declared_fabric"] == "ib" and t["fabric_used"] == "none"
    assert t["networks"] == ["Socket"] and "ib_no_device" in t["reasons"]
    assert pred["bandwidth_floor"]["rows"] == [] and "0 by definition" in pred["bandwidth_floor"]["why"]
    assert req("backend=nccl").check(pred)[0]
    assert req("device=cuda").check(pred)[0]
    assert not req("transport=ib").check(pred)[0]


@pytest.mark.parametrize("bad", ["backend", "backend==nccl", "speed>=3", "backend>=3", "backend=fast",
                                 "world_size=many", "floor_pct=80", "backend=nccl;rm", "Layout.x=1"])
def test_a_requirement_that_is_not_one_is_bad_input(bad):
    with pytest.raises(InputError) as ei:
        req(bad)
    assert "--require" in str(ei.value)


def test_a_dotted_path_is_compared_for_equality():
    pred = {"layout": {"world_size": 12}, "ok": True}
    assert req("layout.world_size=12").check(pred) == (True, 12)
    assert req("ok=true").check(pred) == (True, True)
    assert req("layout.nnodes=2").check(pred) == (False, None)


def test_verify_require_needs_a_key_and_a_field_it_knows():
    p = cli("verify", "registry.example.com/ml/train:cu124", "--require", "backend=nccl")
    assert p.returncode == 2 and "--key" in p.stderr and p.stderr.count("\n") == 1
    p = cli("verify", "registry.example.com/ml/train:cu124", "--key", "cosign.pub", "--require", "x")
    assert p.returncode == 2 and "backend, device, transport" in p.stderr


# ----------------------------------------------------------------------------- admission

PEM = ("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE7Ak1ZV3gYvYbYq6p3m3H0"
       "XxRr7o\nq1kqg9oE2XhR1h0m7Fz3x0yJc1c1f0m0W5kqgAbCdEfGhIjKlMnOpQrStUvW==\n"
       "-----END PUBLIC KEY-----\n")


def test_the_admission_policy_demands_the_projects_fields(tmp_path):
    proj = tmp_path / "team"
    proj.mkdir()
    (proj / "cosign.pub").write_text(PEM)
    (proj / "envbuilder.toml").write_text(
        'registry = "registry.example.com/ml"\nrepository = "train"\nsigning_key = "cosign.pub"\n'
        '[[targets]]\nname = "train"\ntarget = "cpu"\n'
        '[jobs]\nadmission = { require = ["backend=nccl", "transport=ib", "floor_pct>=80"] }\n')
    p = cli("render", "-o", str(tmp_path / "out"), "-q", cwd=proj)
    assert p.returncode == 0, p.stderr
    (f,) = (tmp_path / "out").rglob("admission/clusterimagepolicy.yaml")
    doc = yaml.safe_load(f.read_text())
    cue = doc["spec"]["authorities"][0]["attestations"][0]["policy"]["data"]
    assert 'predicate: backend: "nccl"' in cue and 'predicate: transport: fabric_used: "ib"' in cue
    assert "predicate: bandwidth_floor: rows: [{percent: >=80}, ...{percent: >=80}]" in cue
    assert cue.startswith(admission.SMOKE_CUE)  # the passed-job demands stay
    (proj / "envbuilder.toml").write_text(
        'registry = "registry.example.com/ml"\nrepository = "train"\nsigning_key = "cosign.pub"\n'
        '[[targets]]\nname = "train"\ntarget = "cpu"\n[jobs]\nadmission = { require = ["backend=fast"] }\n')
    bad = cli("render", "-o", str(tmp_path / "out2"), "-q", cwd=proj)
    assert bad.returncode == 2 and "admission.require[0]" in bad.stderr
    assert not (tmp_path / "out2").exists()


def test_without_requirements_the_policy_is_unchanged():
    assert admission.smoke_cue(()) == admission.SMOKE_CUE


# ----------------------------------------------------------------------------- DeepSpeed

def test_cpu_targets_pre_build_deepspeeds_start_up_op_by_default():
    from envbuilder.api import make_spec
    from envbuilder.api.specs import resolve_spec

    stack = resolve_spec(make_spec("cpu-torch2.13-ds0.19.8-debian12"))
    assert stack.ops["deepspeed"] == ("deepspeed_shm_comm", "cpu_adam")
    cu = resolve_spec(make_spec("cu124-torch2.6-ds0.16-debian13"))
    assert cu.ops["deepspeed"] == ("fused_adam", "cpu_adam")


def test_a_cuda_target_refuses_the_cpu_accelerators_op(tmp_path):
    p = cli("render", "cu124-torch2.6-ds0.16-debian13", "--ds-ops", "deepspeed_shm_comm", "-o",
            str(tmp_path / "o"))
    assert p.returncode == 3 and "CPU accelerator" in p.stderr and not (tmp_path / "o").exists()
    ok = cli("render", "cpu-torch2.13-ds0.19.8-debian12", "--ds-ops", "deepspeed_shm_comm", "-o",
             str(tmp_path / "cpu"), "-q")
    assert ok.returncode == 0, ok.stderr
    docker = next((tmp_path / "cpu").rglob("Dockerfile")).read_text()
    assert "DS_BUILD_SHM_COMM=1" in docker and "DS_ACCELERATOR=cpu" in docker


def _cpu_ds_labels(ops: str) -> dict[str, str]:
    return {"io.envbuilder.torch": "2.13.0", "io.envbuilder.cuda": "cpu", "io.envbuilder.python": "3.11",
            "io.envbuilder.deepspeed": "0.19.8", "io.envbuilder.deepspeed-ops": ops}


def test_verify_asks_for_the_start_up_op_and_judges_it():
    from envbuilder.core.matrix import load_matrix
    from envbuilder.run.verify import compare, payload_args

    mods = load_matrix()  # the ops' modules: matrices/deepspeed.yaml
    args = payload_args(_cpu_ds_labels("cpu_adam"), mods)
    assert args == ["--ds-op", "cpu_adam=deepspeed.ops.adam.cpu_adam_op",
                    "--ds-op", "deepspeed_shm_comm=deepspeed.ops.comm.deepspeed_shm_comm_op"]
    assert payload_args({"io.envbuilder.torch": "2.13.0", "io.envbuilder.cuda": "cpu"}, mods) == []
    facts = {"python": "3.11.2", "torch": {"version": "2.13.0+cpu", "cuda": None, "nccl": None},
             "libs": {}, "env": {},
             "deepspeed": {"version": "0.19.8", "installed_ops": {"cpu_adam": True, "deepspeed_shm_comm": False},
                           "compilers": {"c++": None, "nvcc": None},
                           "ops": {"cpu_adam": {"loaded": True, "file": "/x/cpu_adam_op.so", "march": []},
                                   "deepspeed_shm_comm": {"loaded": False, "error": "ModuleNotFoundError: x"}}}}
    bad = {c.name: c for c in compare(facts, _cpu_ds_labels("cpu_adam")) if not c.ok}
    assert set(bad) == {"ds_startup_deepspeed_shm_comm"}
    assert "neither load" in bad["ds_startup_deepspeed_shm_comm"].detail
    facts["deepspeed"]["compilers"]["c++"] = "/usr/bin/c++"  # a compiler kept for the JIT passes
    checks = {c.name: c for c in compare(facts, _cpu_ds_labels("cpu_adam"))}
    assert checks["ds_startup_deepspeed_shm_comm"].ok and "/usr/bin/c++" in checks["ds_startup_deepspeed_shm_comm"].detail


# ----------------------------------------------------------------------------- /dev/shm

def test_the_job_files_default_dev_shm_holds_the_default_layouts():
    """render's job files mount a memory-backed /dev/shm of 16Gi by default: enough for the
    most ranks a default layout puts on one node (1x12), NCCL and DataLoader workers."""
    import inspect

    from envbuilder.render import jobs
    from envbuilder.render.jobs import quantity_bytes
    from envbuilder.run.payload import ddp_smoke

    default = inspect.signature(jobs.render_jobs).parameters["shm_size"].default
    need, how = ddp_smoke.shm_needed(12, nccl=True)
    assert need <= quantity_bytes(default) and "12 local rank(s)" in how
    assert ddp_smoke.shm_needed(1, nccl=False)[0] > 64 * 2**20  # Docker's 64 MB default is not
