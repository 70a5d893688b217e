"""An indexed Job (batch/v1, no operator) with a headless Service: pod ``<job>-<i>`` resolves
as ``<job>-<i>.<job>``, and every pod joins a c10d rendezvous hosted by pod 0 on port 29400."""

from __future__ import annotations

from typing import Any

from envbuilder.render.jobkinds.base import RDZV_PORT, KubernetesKind, LayoutJob, Requirement

INDEXED = Requirement(
    "kubernetes", "1.24", "Indexed Job completion mode (stable)",
    "https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode")


class IndexedJob(KubernetesKind):
    name = stem = "indexed-job"
    template = "jobs/indexed-job.yaml.j2"
    title = "indexed Job + Service"
    requires = (INDEXED,)

    def values(self, lay: LayoutJob) -> dict[str, Any]:
        name = svc = lay.name  # the headless Service shares the Job's name
        return {"service": svc,
                "job_args": [*lay.head, "--node_rank=$(JOB_COMPLETION_INDEX)", "--rdzv_backend=c10d",
                             f"--rdzv_endpoint={name}-0.{svc}:{RDZV_PORT}", f"--rdzv_id={name}",
                             f"--max_restarts={lay.settings.max_restarts}", *lay.program]}


KIND = IndexedJob()
