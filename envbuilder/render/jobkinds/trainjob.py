"""Kubeflow Trainer v2's TrainJob (trainer.kubeflow.org/v1alpha1) on a ClusterTrainingRuntime:
the runtime makes a JobSet and sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK and
PET_MASTER_ADDR/PORT, which torchrun reads: the file passes only ``--max_restarts``. What the
runtime's pod lacks goes in one ``runtimePatches`` entry (manager ``envbuilder.io/envbuilder``)."""

from __future__ import annotations

from typing import Any

from envbuilder.render.jobkinds.base import PRIORITY_LABEL, KubernetesKind, LayoutJob, Requirement

RUNTIME_PATCHES = Requirement(
    "trainer", "2.2", "TrainJob spec.runtimePatches",
    "https://github.com/kubeflow/trainer/blob/v2.2.0/manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml")


class TrainJob(KubernetesKind):
    name = stem = "trainjob"
    template = "jobs/trainjob.yaml.j2"
    title = "TrainJob"
    requires = (RUNTIME_PATCHES,)

    def values(self, lay: LayoutJob) -> dict[str, Any]:
        cfg = lay.job.cfg
        labels = lay.job_labels
        # Kueue reads a TrainJob's priority from its WorkloadPriorityClass label (the runtime's
        # pod template carries no priorityClassName patch)
        if cfg.priority_class:
            labels = dict(labels, **{PRIORITY_LABEL: cfg.priority_class})
        return {"trainjob_labels": labels,
                "trainjob_args": [f"{lay.job.plan.home}/bin/entrypoint.sh", "torchrun",
                                  f"--max_restarts={lay.settings.max_restarts}", *lay.program]}


KIND = TrainJob()
