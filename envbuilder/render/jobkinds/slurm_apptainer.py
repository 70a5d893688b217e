"""Slurm with Apptainer: ``apptainer exec`` of the SIF on each node (``ENVBUILDER_SIF``).
One task per node; torchrun meets the others through a c10d rendezvous on the allocation's first
host (templates/jobs/slurm.sbatch.j2, shared by the three Slurm kinds)."""

from __future__ import annotations

from envbuilder.render.jobkinds.base import SlurmKind


class SlurmApptainer(SlurmKind):
    name = stem = "slurm-apptainer"
    runtime = "apptainer"
    title = "Slurm + Apptainer"
    order = 20


KIND = SlurmApptainer()
