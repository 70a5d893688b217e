"""Slurm with pyxis/enroot: ``srun --container-image`` pulls the image on each node.
One task per node; torchrun meets the others through a c10d rendezvous on the allocation's first
host (templates/jobs/slurm.sbatch.j2, shared by the three Slurm kinds)."""

from __future__ import annotations

from envbuilder.render.jobkinds.base import SlurmKind


class SlurmPyxis(SlurmKind):
    name = stem = "slurm-pyxis"
    runtime = "pyxis"
    title = "Slurm + pyxis"
    order = 21


KIND = SlurmPyxis()
