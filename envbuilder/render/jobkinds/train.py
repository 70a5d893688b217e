"""The team's command as a run (``[jobs] command`` or ``render --command``): the ``train-*``
files run it with each layout's torchrun and rendezvous settings and the training settings of
``[jobs]``: its time limit (``time``: none by default on Kubernetes, the partition's on Slurm),
CPUs, memory and /dev/shm per node, ``exclusive``, mounts, working directory, secrets in the
environment and restart rules. Without those keys a node gets what a smoke node gets (4 CPUs
and 4 GiB per rank, a 16 GiB /dev/shm)."""

from __future__ import annotations

import math

from envbuilder.core.jobs import Restart, quantity_bytes
from envbuilder.errors import InputError
from envbuilder.render.jobkinds.base import Job, RunKind, RunSettings, pod_memory, short, train_program


class Train(RunKind):
    name = "train"
    lead = "train-"
    order = 20

    def enabled(self, job: Job) -> bool:
        return bool(job.cfg.command)

    def program(self, job: Job) -> list[str]:
        return train_program(job.cfg.command)

    def settings(self, job: Job, nnodes: int, nproc: int) -> RunSettings:
        o, cfg = job.options, job.cfg
        shm = cfg.shm or o["shm_size"]
        memory = cfg.memory or pod_memory(shm, nproc, o["mem_per_proc"])
        if quantity_bytes(shm) >= quantity_bytes(memory):
            raise InputError(f"[jobs] memory {memory!r} must be more than the /dev/shm of {shm} "
                             f"(memory-backed, it counts against the pod's memory): raise "
                             f"memory or set a smaller shm")
        restart = cfg.restart or Restart()
        return RunSettings(
            deadline=cfg.time_seconds, slurm_time=cfg.time or cfg.slurm.time,
            cpus=cfg.cpu or str(nproc * int(o["cpus_per_proc"])), memory=memory, shm=shm,
            slurm_memory=f"{math.ceil(quantity_bytes(cfg.memory) / 2**20)}M" if cfg.memory else None,
            exclusive=True if cfg.exclusive is None else cfg.exclusive,
            mounts=tuple(cfg.mounts or ()), workdir=cfg.workdir,
            env_from=tuple(cfg.env_from_secrets or ()),
            secret_env=tuple(sorted((cfg.secret_env or {}).items())),
            max_restarts=restart.max_restarts, fail_on=restart.fail_on)

    def what(self, job: Job, world: int) -> str:
        return f"the team's command ({short(job.cfg.command or '')}) on {world} ranks"


RUN = Train()
