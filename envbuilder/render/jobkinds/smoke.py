"""The smoke job as a run: the image's DDP check (``HOME/smoke/ddp_smoke.py``) with its own
short limits and small footprint, whatever the team's training needs: a deadline of four
collective timeouts plus ten minutes and Slurm's ``--time`` of 30 minutes (``[jobs]
smoke_time`` sets both), 4 CPUs and 4 GiB per rank plus a 16 GiB /dev/shm, the records folder,
no restart. The training keys of ``[jobs]`` (time, cpu, memory, mounts...) never reach it."""

from __future__ import annotations

from envbuilder.render.jobkinds.base import OUT_DIR, Job, RunKind, RunSettings, pod_memory


class Smoke(RunKind):
    name = "smoke"
    lead = ""
    order = 10

    def enabled(self, job: Job) -> bool:
        return True

    def program(self, job: Job) -> list[str]:
        o = job.options
        return [f"{job.plan.home}/smoke/ddp_smoke.py", "--backend", job.base["backend"],
                "--timeout", str(o["timeout"]), "--out", OUT_DIR]

    def settings(self, job: Job, nnodes: int, nproc: int) -> RunSettings:
        o, cfg = job.options, job.cfg
        minutes = int(o["time_limit_min"])
        return RunSettings(
            deadline=cfg.smoke_seconds or int(o["timeout"]) * 4 + 600,
            slurm_time=cfg.smoke_time or f"{minutes // 60:02d}:{minutes % 60:02d}:00",
            cpus=str(nproc * int(o["cpus_per_proc"])),
            memory=pod_memory(o["shm_size"], nproc, o["mem_per_proc"]), shm=o["shm_size"],
            smoke_out=True)

    def what(self, job: Job, world: int) -> str:
        return f"the {world}-rank smoke job"


RUN = Smoke()
