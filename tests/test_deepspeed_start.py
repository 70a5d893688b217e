"""Issue 40, in real containers: DeepSpeed started as user code starts it, and /dev/shm as jobs
meet it.

- The CPU target with DeepSpeed pre-builds, by default, the op DeepSpeed's CPU accelerator builds
  at ``deepspeed.init_distributed()`` (deepspeed_shm_comm) and CPU Adam; verify loads both; the
  smoke job calls ``init_distributed()`` and ``initialize`` with ZeRO-2 and nothing patched; a
  team's small training script (init_distributed, ZeRO-2 with CPU Adam, three steps) runs.
- The same image without the op (its library removed, its label saying so) and without a
  compiler: verify names the op that can neither load nor build, and the smoke job fails in it.
- ``envbuilder smoke IMAGE --shm-size 1m`` fails naming /dev/shm, the size found and the size
  needed; the job files' default (16Gi) passes.

The DeepSpeed image is built with the options test_build.py's DeepSpeed test uses, so a run of
both builds it once (the engine's cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from envbuilder.api import make_spec
from envbuilder.run.build import BuildOptions
from envbuilder.run.build import build_target as _build_target

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DS_TARGET = "cpu-torch2.13-ds0.19.8-debian12"  # DeepSpeed 0.19.6+ with torch 2.12+ (C++20)
SCRIPT = Path(__file__).parent / "data" / "deepspeed" / "zero2_cpu_adam.py"


def _cli(*args, timeout=900):
    return subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()", *args],
                          capture_output=True, text=True, env=dict(os.environ), timeout=timeout)


@pytest.fixture(scope="module")
def ds_image(docker_client, base_image, wheelhouse, tmp_path_factory):
    opts = BuildOptions(wheelhouse=wheelhouse, ca_cert=None, smoke=False,
                        context=tmp_path_factory.mktemp("ds") / "ctx")
    r = _build_target(make_spec(DS_TARGET, base_image=base_image), opts, client=docker_client)
    assert r.labels["io.envbuilder.deepspeed-ops"] == "deepspeed_shm_comm,cpu_adam", r.labels
    return r.local_tags[0]


def test_deepspeed_cpu_image_carries_its_start_up_op_and_starts_unpatched(ds_image, docker_client):
    v = _cli("verify", ds_image, "--json")
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr
    checks = {c["name"]: c for c in json.loads(v.stdout)["checks"]}
    assert checks["ds_op_deepspeed_shm_comm"]["ok"] and checks["ds_op_cpu_adam"]["ok"]
    assert "deepspeed_shm_comm_op" in checks["ds_op_deepspeed_shm_comm"]["detail"]
    # the smoke job: deepspeed.init_distributed(), then initialize with ZeRO-2 (CPU Adam)
    s = _cli("smoke", ds_image, "--nproc", "2", "--json")
    assert s.returncode == 0, s.stdout[-3000:] + s.stderr
    d = json.loads(s.stdout)
    assert d["checks"]["deepspeed_zero"] == "pass", d["details"]
    ds = d["summary"]["components"]["deepspeed"]
    assert ds["accelerator"] == "cpu" and "DeepSpeedCPUAdam" in ds["optimizer"]
    assert "deepspeed_shm_comm (pre-built)" in ds["ops"] and "cpu_adam (pre-built)" in ds["ops"]
    # nothing in the payload patches DeepSpeed around an op
    from envbuilder.run.payload import ddp_smoke

    assert "__compatible_ops__" not in Path(ddp_smoke.__file__).read_text()


def test_a_small_zero2_cpu_adam_training_script_runs_in_the_image(ds_image, docker_client):
    out = docker_client.containers.run(
        ds_image, ["python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                   "/work/zero2_cpu_adam.py"],
        volumes={str(SCRIPT.parent): {"bind": "/work", "mode": "ro"}}, shm_size="1g",
        environment={"OMP_NUM_THREADS": "1"}, remove=True).decode()
    line = next(ln for ln in out.splitlines() if ln.startswith("TRAINED "))
    got = json.loads(line.split(" ", 1)[1])
    assert got["steps"] == 3 and got["world_size"] == 2 and got["deepspeed"] == "0.19.8"
    assert got["optimizer"].endswith("DeepSpeedCPUAdam"), got


def test_without_the_op_and_a_compiler_verify_and_smoke_name_it(ds_image, docker_client, tmp_path):
    site = "/opt/venv/lib/python3.11/site-packages/deepspeed/ops/comm"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {ds_image}\nUSER root\nRUN rm -f {site}/deepspeed_shm_comm_op*.so\n"
        f'LABEL io.envbuilder.deepspeed-ops="cpu_adam"\nUSER 1000\n')
    tag = f"envbuilder-test/ds-no-shm-comm:{uuid.uuid4().hex[:8]}"
    docker_client.images.build(path=str(tmp_path), tag=tag, rm=True)
    try:
        v = _cli("verify", tag, "--json")
        assert v.returncode == 1, v.stdout[-2000:] + v.stderr
        d = json.loads(v.stdout)
        assert d["failed"] == ["ds_startup_deepspeed_shm_comm"], d["failed"]
        detail = next(c["detail"] for c in d["checks"] if c["name"] == "ds_startup_deepspeed_shm_comm")
        assert "neither load" in detail and "no c++" in detail and "--ds-ops deepspeed_shm_comm" in detail
        s = _cli("smoke", tag, "--nproc", "2", "--json")
        assert s.returncode == 1
        sd = json.loads(s.stdout)
        assert "deepspeed_zero" in sd["failed"] and "deepspeed_shm_comm" in sd["details"]["deepspeed_zero"]
    finally:
        docker_client.images.remove(tag, force=True, noprune=True)


def test_a_dev_shm_too_small_for_the_layout_fails_naming_found_needed_and_fix(smoke_image):
    p = _cli("smoke", smoke_image, "--nproc", "2", "--shm-size", "1m")
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr
    assert "shm" in p.stderr and "/dev/shm: found 1.0 MiB free (size 1.0 MiB), needed 147.0 MiB" in p.stderr
    assert "--shm-size" in p.stdout and "dshm" in p.stdout
    # the job files' memory-backed /dev/shm (16Gi by default) holds what the layout needs
    ok = _cli("smoke", smoke_image, "--nproc", "2", "--shm-size", "16g", "--json")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr
    d = json.loads(ok.stdout)
    assert d["checks"]["shm"] == "pass" and d["summary"]["shm"]["needed_bytes"] == 2 * 4 * 19267584
