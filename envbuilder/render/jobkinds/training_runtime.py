"""The Kubeflow Trainer v2 runtime the TrainJobs reference, rendered from the target: a
``ClusterTrainingRuntime`` (or, with ``[jobs] runtime_namespace``, a namespaced
``TrainingRuntime``) whose trainer container is the job files' image (by digest once ``build
--push`` knows it), with what a TrainJob cannot patch: the working directory, secrets as the
environment (envFrom), host networking, the priority class and the JobSet's failure policy.
The platform team applies it once; users submit TrainJobs that name it (``[jobs] runtime``,
default ``envbuilder-NAME``). Written when ``[jobs] kubernetes`` names ``trainjob``."""

from __future__ import annotations

from typing import Any

from envbuilder.render.jobkinds.base import Job, JobKind, Requirement

RUNTIME = Requirement(
    "trainer", "2.0", "the trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime and TrainingRuntime",
    "https://github.com/kubeflow/trainer/blob/v2.0.0/manifests/base/runtimes/torch_distributed.yaml")
RULES = Requirement(
    "jobset", "0.6", "failurePolicy.rules (from [jobs] restart fail_on)",
    "https://github.com/kubernetes-sigs/jobset/blob/v0.6.0/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml")


class TrainingRuntime(JobKind):
    name = "training-runtime"
    stem = "clustertrainingruntime"
    family = "kubernetes"
    order = 41
    per_layout = False
    template = "jobs/training-runtime.yaml.j2"
    requires = (RUNTIME,)

    def enabled(self, job: Job) -> bool:
        return "trainjob" in job.cfg.kinds

    def pattern(self) -> str:
        return "clustertrainingruntime.yaml (or trainingruntime.yaml)"

    def requirements(self, job: Job) -> tuple[Requirement, ...]:
        restart = job.cfg.restart
        return self.requires + ((RULES,) if restart is not None and restart.fail_on else ())

    def render_once(self, env: Any, job: Job) -> dict[str, str]:
        train = [r for r in job.runs if r.name == "train"]
        s = train[0].settings(job, 1, 1) if train else None
        rel = f"jobs/{job.base['runtime_kind'].lower()}.yaml"
        return {rel: env.get_template(self.template).render(
            job.base, file=rel, workdir=s.workdir if s else None,
            env_from=s.env_from if s else (), max_restarts=s.max_restarts if s else 0,
            fail_on=s.fail_on if s else (), runtime_namespace=job.cfg.runtime_namespace,
            needs=[r.line() for r in self.requirements(job)])}


KIND = TrainingRuntime()
