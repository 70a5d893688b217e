"""A component's own launcher (``components.base.Component.launcher``, its name its file's):
``jobs/<launcher>-NxM.sh`` from ``templates/jobs/<launcher>.sh.j2``, for the last run of the
render (the team's command when there is one, else the program given to the script)."""

from __future__ import annotations

from typing import Any, Sequence

from envbuilder.render.jobkinds.base import Job, JobKind, LayoutJob, RunKind


def launching(plan: Any) -> list[Any]:
    """The stack's components that bring a launcher of their own."""
    from envbuilder.components import registry

    return [c for c in registry.active(plan.stack) if c.launcher(plan.stack)]


class Launcher(JobKind):
    name = "launcher"
    family = "launcher"
    order = 30
    suffix = ".sh"

    def enabled(self, job: Job) -> bool:
        return bool(launching(job.plan))

    def runs(self, job: Job) -> Sequence[RunKind]:
        return job.runs[-1:]

    def render(self, env: Any, lay: LayoutJob) -> dict[str, str]:
        out = {}
        cfg = lay.job.cfg
        for c in launching(lay.job.plan):
            launcher = c.launcher(lay.job.plan.stack)
            rel = f"jobs/{launcher}-{lay.layout}.sh"
            out[rel] = env.get_template(f"jobs/{launcher}.sh.j2").render(
                lay.values(), file=rel,
                launcher_program=c.launcher_program(lay.program) if cfg.command else None)
        return out


KIND = Launcher()
