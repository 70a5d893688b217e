"""The team's command as a run (``[jobs] command`` or ``render --command``): the ``train-*``
files run it with each layout's torchrun and rendezvous settings and the training settings of
``[jobs]``."""

from __future__ import annotations

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
        minutes = int(o["time_limit_min"])
        return RunSettings(
            deadline=int(o["timeout"]) * 4 + 600,
            slurm_time=cfg.slurm.time or f"{minutes // 60:02d}:{minutes % 60:02d}:00",
            cpus=str(nproc * int(o["cpus_per_proc"])),
            memory=pod_memory(o["shm_size"], nproc, o["mem_per_proc"]), shm=o["shm_size"],
            smoke_out=True)

    def what(self, job: Job, world: int) -> str:
        return f"the team's command ({short(job.cfg.command or '')}) on {world} ranks"

    def labels_app(self) -> str:
        return "train"


RUN = Train()
