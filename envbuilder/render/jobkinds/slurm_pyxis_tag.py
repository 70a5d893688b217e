"""Slurm with pyxis/enroot, pinned by tag, beside the digest-pinned file: for sites whose
enroot is older than 4.0 (which cannot pull by digest). Written when the image is pinned by
digest and the tag it was pushed under is known (``build --push`` knows both); the file says
that a tag can move and names the digest the tag held when it was pushed."""

from __future__ import annotations

from typing import Any

from envbuilder.render.jobkinds.base import Job, LayoutJob, SlurmKind, pyxis_ref


class SlurmPyxisTag(SlurmKind):
    name = stem = "slurm-pyxis-tag"
    runtime = "pyxis"
    title = "Slurm + pyxis, by tag (enroot < 4.0)"
    order = 23

    def enabled(self, job: Job) -> bool:
        return bool(job.extra.get("tag_image")) and "@sha256:" in job.image

    def values(self, lay: LayoutJob) -> dict[str, Any]:
        tag = lay.job.extra["tag_image"]
        digest = lay.job.image.rpartition("@")[2]
        return dict(super().values(lay), pyxis_image=pyxis_ref(tag),
                    pull_note=f"by tag {tag} for enroot older than 4.0, which cannot pull by "
                              f"digest: the tag held {digest} when build --push pushed it, and a "
                              f"tag can move (slurm-pyxis-{lay.layout}.sbatch pins the digest)")


KIND = SlurmPyxisTag()
