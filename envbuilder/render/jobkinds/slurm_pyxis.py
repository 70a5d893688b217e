"""Slurm with pyxis/enroot: ``srun --container-image`` pulls the image on each node.
One task per node; torchrun meets the others through a c10d rendezvous on the allocation's first
host (templates/jobs/slurm.sbatch.j2, shared by the three Slurm kinds).

Pyxis hands the image to enroot as ``[REGISTRY#]IMAGE[:TAG]``; enroot pulls ``IMAGE@sha256:``
from 4.0 on (its URI parser before 4.0 takes a tag only), so a file pinned by digest needs
enroot 4.0 (slurm_pyxis_tag writes a tag-pinned file beside it when the tag is known)."""

from __future__ import annotations

from envbuilder.render.jobkinds.base import Job, Requirement, SlurmKind

DIGEST = Requirement(
    "enroot", "4.0", "pulling IMAGE@sha256:... (enroot 3.4 and 3.5 parse a tag only)",
    "https://github.com/NVIDIA/enroot/blob/v4.0.0/src/docker.sh")


class SlurmPyxis(SlurmKind):
    name = stem = "slurm-pyxis"
    runtime = "pyxis"
    title = "Slurm + pyxis"
    order = 21

    def requirements(self, job: Job) -> tuple[Requirement, ...]:
        return (DIGEST,) if "@sha256:" in job.image else ()


KIND = SlurmPyxis()
