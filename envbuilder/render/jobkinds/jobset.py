"""A JobSet (jobset.x-k8s.io/v1alpha2) for clusters without the Kubeflow trainer: one replicated
Job of NNODES single-pod Jobs; pod i is ``<job>-node-i-0.<job>`` (enableDNSHostnames) and every
pod joins a c10d rendezvous on the first, port 29400."""

from __future__ import annotations

from typing import Any

from envbuilder.render.jobkinds.base import RDZV_PORT, KubernetesKind, LayoutJob, Requirement

NOT_READY = Requirement(
    "jobset", "0.6", "network.publishNotReadyAddresses",
    "https://github.com/kubernetes-sigs/jobset/blob/v0.6.0/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml")


class JobSet(KubernetesKind):
    name = stem = "jobset"
    template = "jobs/jobset.yaml.j2"
    title = "JobSet"
    requires = (NOT_READY,)

    def values(self, lay: LayoutJob) -> dict[str, Any]:
        name = lay.name
        # JobSet pod i is <jobset>-<replicatedJob>-<i>-0.<subdomain = jobset name>
        return {"jobset_args": [*lay.head, "--rdzv_backend=c10d",
                                f"--rdzv_endpoint={name}-node-0-0.{name}:{RDZV_PORT}",
                                f"--rdzv_id={name}", f"--max_restarts={lay.settings.max_restarts}", *lay.program]}


KIND = JobSet()
