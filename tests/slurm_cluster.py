"""A real Slurm cluster of N nodes in containers, for the rendered sbatch files (tests/test_slurm.py).

Debian 12's ``slurm-wlm`` (22.05) and ``munge`` are installed in a node image built FROM the
image under test (the session's CPU target image), so each node carries that image's Python,
torch and envbuilder's smoke job: the nodes' own environment is the container runtime (the
``slurm-host-*.sbatch`` variant; no Apptainer, enroot or pyxis exists here). The node image is
cached by its inputs (the Dockerfile text and the base image's id): a second session reuses it.

Each ``slurmd`` runs in its own container on one user-defined bridge network made for the
cluster (never the default bridge), with the hostname and network alias ``nodeI``; ``node1``
also runs ``slurmctld``. One munge key (random, made here) is shared by all nodes. GPUs are
count-only GRES, as on one node in ../shared/MACHINE.md: ``gres.conf`` names ``File=`` paths
that are plain files (slurmd logs that they are not devices, yet registers ``gpu:N``).
``SlurmdParameters=config_overrides`` lets each node declare more CPUs than the container has,
so the rendered ``--cpus-per-task`` fits (task/none binds nothing). Job completion records go to
``jobcomp/filetxt``, which ``sacct --completion`` reads: no slurmdbd or database is needed.
A folder of the host is mounted at ``/shared`` on every node (the filesystem the sbatch files
expect all nodes to share). ``close()`` removes the containers and the network.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
import uuid
from pathlib import Path

LABEL = "envbuilder.test=slurm"
NODE_REPO = "envbuilder-test/slurm-node"
DOCKERFILE = """\
FROM {base}
USER root
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge \\
 && rm -rf /var/lib/apt/lists/*
ENTRYPOINT []
"""

SLURM_CONF = """\
ClusterName=envbuilder-test
SlurmctldHost=node1
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
NodeName=node[1-{n}] CPUs={cpus} RealMemory={memory} Gres=gpu:{gpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

SETUP = """\
set -e
install -o munge -g munge -m 0400 /cluster/munge.key /etc/munge/munge.key
mkdir -p /run/munge /var/spool/slurmd /var/spool/slurmctld /var/log/slurm /shared
chown munge:munge /run/munge
munged --force
mkdir -p /var/lib/envbuilder-gpus
for i in $(seq 0 $(({gpus} - 1))); do : > /var/lib/envbuilder-gpus/gpu$i; done
"""


def node_image(client, base: str) -> str:
    """The node image FROM ``base``, built once per (Dockerfile, base image id)."""
    base_id = client.images.get(base).id
    text = DOCKERFILE.format(base=base)
    key = hashlib.sha256(f"{text}\0{base_id}".encode()).hexdigest()[:16]
    tag = f"{NODE_REPO}:{key}"
    try:
        client.images.get(tag)
        return tag
    except Exception:  # noqa: BLE001 - not built yet
        pass
    client.images.build(fileobj=io.BytesIO(text.encode()), tag=tag, rm=True, forcerm=True,
                        labels={"envbuilder.test": "slurm-node"})
    # the node images of other keys (an older base or Dockerfile) are not used again: disk
    # stays bounded across runs
    for img in client.images.list(name=NODE_REPO):
        for old in img.tags:
            if old != tag:
                try:
                    client.images.remove(old, noprune=False)
                except Exception:  # noqa: BLE001 - in use by a cluster of another run
                    pass
    return tag


class SlurmCluster:
    """``nodes`` slurmd containers (node1 also slurmctld) on a bridge network of their own."""

    def __init__(self, client, image: str, root: Path, *, nodes: int = 3, gpus: int = 12,
                 cpus: int = 48, memory_mb: int = 8000) -> None:
        self.client, self.image, self.root = client, image, Path(root)
        self.n, self.gpus, self.cpus, self.memory = nodes, gpus, cpus, memory_mb
        self.id = uuid.uuid4().hex[:8]
        self.network = None
        self.containers: list = []
        self.shared = self.root / "shared"

    # -- life cycle ---------------------------------------------------------------------
    def start(self, timeout: float = 120) -> SlurmCluster:
        conf = self.root / "etc"
        conf.mkdir(parents=True, exist_ok=True)
        self.shared.mkdir(parents=True, exist_ok=True)
        (conf / "slurm.conf").write_text(SLURM_CONF.format(
            n=self.n, cpus=self.cpus, memory=self.memory, gpus=self.gpus))
        files = ",".join(f"/var/lib/envbuilder-gpus/gpu{i}" for i in range(self.gpus))
        (conf / "gres.conf").write_text(
            "".join(f"NodeName=node{i} Name=gpu File={files}\n" for i in range(1, self.n + 1)))
        cluster = self.root / "cluster"
        cluster.mkdir(exist_ok=True)
        (cluster / "munge.key").write_bytes(os.urandom(1024))  # one key, every node
        labels = {"envbuilder.test": "slurm", "envbuilder.test.cluster": self.id}
        self.network = self.client.networks.create(f"envbuilder-slurm-{self.id}", driver="bridge",
                                                   labels=labels)
        for i in range(1, self.n + 1):
            c = self.client.containers.create(
                self.image, ["sleep", "infinity"], name=f"envbuilder-slurm-{self.id}-node{i}",
                hostname=f"node{i}", user="root", labels=labels, detach=True,
                # a node's /dev/shm as a real one has it: the smoke job checks it holds what its
                # ranks' DataLoader workers need (12 local ranks: ~925 MB; 1g left too little free)
                network=self.network.name, shm_size="2g",
                volumes={str(conf): {"bind": "/etc/slurm", "mode": "ro"},
                         str(cluster): {"bind": "/cluster", "mode": "ro"},
                         str(self.shared): {"bind": "/shared", "mode": "rw"}})
            self.containers.append(c)
            self.network.disconnect(c)  # reconnect with the alias the other nodes resolve
            self.network.connect(c, aliases=[f"node{i}"])
            c.start()
        for c in self.containers:
            self.sh(c, SETUP.format(gpus=self.gpus))
        self.sh(self.containers[0], "slurmctld")
        for c in self.containers:
            self.sh(c, "slurmd")
        self._wait_idle(timeout)
        return self

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            rc, last = self.exec("sinfo -h -N -o '%N %T %G'")
            states = [line.split() for line in last.splitlines() if line.strip()]
            if len(states) == self.n and all(s[1] == "idle" for s in states):
                return
            if any(s[1].startswith(("drain", "down")) for s in states):
                self.exec(f"scontrol update nodename=node[1-{self.n}] state=resume")
            time.sleep(1)
        raise AssertionError(f"the Slurm nodes did not become idle: {last}\n{self.logs()}")

    def close(self) -> None:
        for c in self.containers:
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self.network is not None:
            try:
                self.network.remove()
            except Exception:  # noqa: BLE001
                pass

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- commands -----------------------------------------------------------------------
    def sh(self, container, script: str) -> str:
        r = container.exec_run(["bash", "-c", script], user="root", demux=False)
        out = r.output.decode(errors="replace")
        if r.exit_code != 0:
            raise AssertionError(f"{container.name}: {script!r} exited {r.exit_code}: {out}")
        return out

    def exec(self, cmd: str, node: int = 1, workdir: str | None = None) -> tuple[int, str]:
        r = self.containers[node - 1].exec_run(["bash", "-c", cmd], user="root", workdir=workdir)
        return r.exit_code, r.output.decode(errors="replace")

    def submit(self, script: Path) -> int:
        """``sbatch`` a file under ``shared``, from its folder; the job id."""
        rel = script.relative_to(self.shared)
        rc, out = self.exec(f"sbatch --parsable {Path('/shared') / rel}",
                            workdir=str(Path("/shared") / rel.parent))
        assert rc == 0, out
        return int(out.strip().split(";")[0])

    def wait(self, job: int, timeout: float) -> dict[str, str]:
        """Wait for ``job`` to leave the queue; its completion record (sacct --completion)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc, out = self.exec(f"squeue -h -j {job} -o %T")
            if rc == 0 and not out.strip():
                break
            time.sleep(2)
        else:
            self.exec(f"scancel {job}")
            raise AssertionError(f"job {job} still queued or running after {timeout} s\n{self.logs()}")
        for _ in range(10):  # the completion record is written as the job ends
            rc, out = self.exec(f"sacct --completion -j {job} -n -P -o JobID,State,ExitCode,NodeList")
            line = next((x for x in out.splitlines() if x.startswith(f"{job}|")), "")
            if line:
                jid, state, code, nodes = line.split("|")[:4]
                return {"job": jid, "state": state, "exit_code": code, "nodes": nodes}
            time.sleep(1)
        raise AssertionError(f"no completion record for job {job}: {out}")

    def logs(self) -> str:
        out = []
        for i in range(1, len(self.containers) + 1):
            _, text = self.exec("tail -n 20 /var/log/slurm/*.log 2>&1", node=i)
            out.append(f"--- node{i}\n{text}")
        return "\n".join(out)
