"""The rendered sbatch files on a real Slurm cluster of three nodes (tests/slurm_cluster.py).

Debian 12's slurm-wlm 22.05 and munge in a node image built FROM the session's CPU target image
(so every node has the image's Python, torch and smoke job), each slurmd in its own container on
one user-defined bridge network, count-only GPU GRES (12 plain files per node). The nodes'
container runtime is the node container itself: the ``slurm-host-*`` files run the image's own
environment on each node (Apptainer and pyxis do not exist here). The files request GPUs, as a
CUDA target's do; the smoke job's ``auto`` backend picks gloo (no CUDA in the CPU image).

Measured on the 2-core development machine shared with other work: node image 25-85 s (then
cached by its inputs: the Dockerfile and the base image's id), cluster start 3-20 s, the 3x4
smoke job 130-210 s, the 1x12 one 60-180 s (12 ranks of gloo DDP on two cores), the 3x1 team
command 25-130 s; the four tests about 280 s after the session's CPU image exists. A fifth runs
the team's command with [jobs] workdir, time and exclusive = false (15 s, measured 2026-12-05).
"""

from __future__ import annotations

import json
import time

import pytest

from conftest import CPU_TARGET
from envbuilder.api import resolve_target
from envbuilder.core.jobs import JobsConfig
from envbuilder.render.jobs import render_jobs
from envbuilder.render.plan import PlanOptions, make_plan

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TRAIN = """\
import os, socket
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2, t.item()
print(f"TRAIN rank={rank} world={world} node_rank={os.environ.get('GROUP_RANK')} "
      f"host={socket.gethostname()} sum={t.item():.0f}", flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def cluster(docker_client, smoke_image, tmp_path_factory):
    from slurm_cluster import SlurmCluster, node_image

    t0 = time.monotonic()
    image = node_image(docker_client, smoke_image)
    t1 = time.monotonic()
    c = SlurmCluster(docker_client, image, tmp_path_factory.mktemp("slurm"), nodes=3, gpus=12)
    try:
        c.start()
        print(f"\nslurm: node image {t1 - t0:.0f} s, cluster start {time.monotonic() - t1:.0f} s")
        yield c
    finally:
        name = c.network.name if c.network is not None else None
        c.close()
        assert not docker_client.containers.list(all=True, filters={"label": f"envbuilder.test.cluster={c.id}"})
        assert name is None or not docker_client.networks.list(names=[name])


@pytest.fixture(scope="module")
def job_files():
    """The rendered job files of the CPU target, GPUs requested as for a CUDA target: the
    12-rank smoke job as 1x12 and 3x4, and a team command (a small gloo all-reduce) as 3x1
    (three ranks keep it short: what it proves is the layout's rendezvous across the nodes)."""
    stack = resolve_target(CPU_TARGET)
    image = "envbuilder:" + stack.tag
    files = render_jobs(make_plan(stack), image=image, gpus=True, layouts=((1, 12), (3, 4)))
    files.update(render_jobs(make_plan(stack, PlanOptions.of(smoke_nproc=3)), image=image, gpus=True,
                             layouts=((3, 1),), jobs=JobsConfig(command="python /shared/train.py")))
    return files


@pytest.fixture(scope="module")
def workdir_files():
    """The team's command with [jobs] workdir and time (issue 41): a relative `train.py` that
    only the working directory finds, and the training --time."""
    from envbuilder.core.jobs import parse

    stack = resolve_target(CPU_TARGET)
    return render_jobs(make_plan(stack, PlanOptions.of(smoke_nproc=3)), image="envbuilder:" + stack.tag, gpus=True,
                       layouts=((3, 1),), name="wd",
                       jobs=parse({"command": "python train.py", "workdir": "/shared/wd",
                                   "time": "00:10:00", "exclusive": False}))


def _run(cluster, job_files, rel: str, timeout: float = 600) -> tuple[dict, str, float]:
    # a folder of its own per run: two tests may submit the same file name (the smoke layout's
    # training file and the team's workdir one) to the one cluster
    stem = rel.split("/")[-1].rsplit(".", 1)[0]
    folder = next(f for i in range(100) if not (f := cluster.shared / (stem if i == 0 else f"{stem}-{i}")).exists())
    folder.mkdir()
    script = folder / rel.split("/")[-1]
    script.write_text(job_files[rel])
    t0 = time.monotonic()
    job = cluster.submit(script)
    rec = cluster.wait(job, timeout)
    seconds = time.monotonic() - t0
    out = next(folder.glob(f"*-{job}.out")).read_text()
    print(f"slurm: {rel} job {job}: {rec['state']} in {seconds:.0f} s")
    return rec, out, seconds


def _summary(out: str) -> dict:
    line = next(x for x in out.splitlines() if x.startswith("ENVBUILDER_SMOKE_SUMMARY "))
    return json.loads(line.split(" ", 1)[1])


def test_cluster_registers_three_nodes_of_12_gpus(cluster):
    rc, out = cluster.exec("sinfo -h -N -o '%N %T %G'")
    assert rc == 0 and sorted(out.split("\n")[:3]) == [f"node{i} idle gpu:12" for i in (1, 2, 3)]


def test_3x4_smoke_sbatch_runs_12_ranks_on_three_nodes(cluster, job_files):
    rec, out, _ = _run(cluster, job_files, "jobs/slurm-host-3x4.sbatch")
    assert rec["state"] == "COMPLETED" and rec["exit_code"] == "0:0", out[-3000:]
    assert rec["nodes"] == "node[1-3]"
    s = _summary(out)
    assert s["ok"] and s["world_size"] == 12 and s["nnodes"] == 3
    assert s["ranks_per_node"] == {"node1": 4, "node2": 4, "node3": 4}
    assert s["checks"]["all_reduce"] == "pass" and s["checks"]["rendezvous"] == "pass"
    assert s["backend"] == "gloo"
    records = sorted((cluster.shared / "slurm-host-3x4").glob("envbuilder-smoke-*/rank-*.json"))
    assert len(records) == 12  # every rank's record, on the filesystem the nodes share


def test_1x12_smoke_sbatch_runs_on_one_node(cluster, job_files):
    rec, out, _ = _run(cluster, job_files, "jobs/slurm-host-1x12.sbatch")
    assert rec["state"] == "COMPLETED" and rec["exit_code"] == "0:0", out[-3000:]
    s = _summary(out)
    assert s["ok"] and s["world_size"] == 12 and len(s["ranks_per_node"]) == 1
    assert list(s["ranks_per_node"].values()) == [12]


def test_team_command_runs_with_the_layouts_rendezvous(cluster, job_files):
    (cluster.shared / "train.py").write_text(TRAIN)
    rec, out, _ = _run(cluster, job_files, "jobs/train-slurm-host-3x1.sbatch")
    assert rec["state"] == "COMPLETED" and rec["exit_code"] == "0:0", out[-3000:]
    lines = [x for x in out.splitlines() if x.startswith("TRAIN ")]
    assert len(lines) == 3 and all("world=3" in x and "sum=6" in x for x in lines)
    assert {x.split("host=")[1].split()[0] for x in lines} == {"node1", "node2", "node3"}


def test_team_command_runs_in_the_workdir_with_the_training_time(cluster, workdir_files):
    """[jobs] workdir: srun --chdir puts every node's torchrun in it (the command names a
    relative train.py that only the working directory holds); the training --time and a
    shared-node file (exclusive = false) are accepted by a real slurmctld."""
    text = workdir_files["jobs/train-slurm-host-3x1.sbatch"]
    assert "--chdir=/shared/wd" in text and "#SBATCH --time=00:10:00" in text
    assert "#SBATCH --exclusive" not in text
    (cluster.shared / "wd").mkdir(exist_ok=True)
    (cluster.shared / "wd" / "train.py").write_text(TRAIN)
    rec, out, _ = _run(cluster, workdir_files, "jobs/train-slurm-host-3x1.sbatch")
    assert rec["state"] == "COMPLETED" and rec["exit_code"] == "0:0", out[-3000:]
    lines = [x for x in out.splitlines() if x.startswith("TRAIN ")]
    assert len(lines) == 3 and all("world=3" in x and "sum=6" in x for x in lines)
