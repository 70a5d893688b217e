"""The Kueue LocalQueue the job files name (``[jobs] queue``), pointing at ``cluster_queue``:
one file per render, written when both keys are set."""

from __future__ import annotations

from typing import Any

from envbuilder.render.jobkinds.base import Job, JobKind, Requirement

V1BETA2 = Requirement(
    "kueue", "0.15", "kueue.x-k8s.io/v1beta2 LocalQueue",
    "https://github.com/kubernetes-sigs/kueue/blob/v0.15.0/config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml")


class LocalQueue(JobKind):
    name = stem = "kueue-localqueue"
    family = "kubernetes"
    order = 40
    per_layout = False
    template = "jobs/kueue-localqueue.yaml.j2"
    requires = (V1BETA2,)

    def enabled(self, job: Job) -> bool:
        return bool(job.cfg.queue and job.cfg.cluster_queue)

    def render_once(self, env: Any, job: Job) -> dict[str, str]:
        return {"jobs/kueue-localqueue.yaml": env.get_template(self.template).render(
            job.base, cluster_queue=job.cfg.cluster_queue,
            needs=[r.line() for r in self.requirements(job)])}


KIND = LocalQueue()
