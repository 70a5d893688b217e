"""Slurm on nodes whose slurmd runs in the image itself (Slinky, a containerised cluster).
One task per node; torchrun meets the others through a c10d rendezvous on the allocation's first
host (templates/jobs/slurm.sbatch.j2, shared by the three Slurm kinds)."""

from __future__ import annotations

from envbuilder.render.jobkinds.base import SlurmKind


class SlurmHost(SlurmKind):
    name = stem = "slurm-host"
    runtime = "host"
    title = "Slurm, nodes running the image"
    order = 22


KIND = SlurmHost()
