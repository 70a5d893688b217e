"""One assembly path: a target's spec (and its lock, if any) -> the build folder's files.

``render`` (with or without ``--lock``), ``bake`` and ``build`` all come here, so a build's
context holds exactly the bytes ``render`` writes for the same spec (``build`` adds only what
it brings itself: the wheelhouse and the extra CA bundle). ``stack.json`` is made once, from
data: the resolved stack, the image and layers, the lock's digest and the smoke layouts.

Layers: this module sits above ``lock`` and ``render`` (it applies a lock to a plan and renders
it) and below ``run`` (build) and ``api``. ``lock`` produces locks and reads the plan's layers;
it does not assemble folders.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import TYPE_CHECKING

from envbuilder.core import layouts as lm
from envbuilder.core import naming
from envbuilder.core.naming import ImageNames
from envbuilder.core.resolve import Stack
from envbuilder.core.spec import TargetSpec
from envbuilder.errors import InputError
from envbuilder.labels import PREFIX
from envbuilder.render.plan import BuildPlan, PlanOptions, make_plan
from envbuilder.render.templating import render_files

if TYPE_CHECKING:
    from typing import Sequence

LOCK_NAME = "requirements.lock"
LOCAL_REPOSITORY = naming.LOCAL_REPOSITORY


def smoke_layouts(nproc: int | None,
                  layouts: Sequence[tuple[int, int]] = ()) -> tuple[tuple[tuple[int, int], ...], int]:
    """(the job files' layouts, the smoke job's world size) for ``--nproc`` and ``--layout``
    (a spec's: parsed and checked when it was made): layouts given set the world size
    (``--nproc``, when also given, must agree); ``--nproc N`` alone is 1xN plus the splits that
    fit common nodes; neither is 12."""
    if layouts:
        lays = tuple(layouts)
        world = lm.world_of(lays)
        if nproc is not None and nproc != world:
            raise InputError(f"--nproc {nproc} disagrees with --layout {','.join(map(lm.fmt, lays))} "
                             f"({world} ranks): drop --nproc or give layouts of {nproc} ranks")
        return lays, world
    world = 12 if nproc is None else nproc
    return lm.default_layouts(world), world


def image_tag(spec: TargetSpec, stack: Stack) -> str:
    """The image's version tag (core.naming: the stack's, and for a project target its name
    before it, ``train-cu124-torch2.6.0-py311-ubuntu22.04``): two project targets of one stack
    (other requirements, another lock) never share a tag. ``build`` tags and pushes it, ``bake``
    (from stack.json's ``image_tag``) too, and the job files pull it."""
    return image_names(spec, stack).tag


def image_names(spec: TargetSpec, stack: Stack) -> ImageNames:
    """What ``spec``'s image is called, locally, pushed and in its job files (core.naming)."""
    return naming.image_names(spec, stack.tag)


def host_ranks(spec: TargetSpec, lays: Sequence[tuple[int, int]], world: int) -> int:
    """Ranks of the single-host smoke job (build, smoke/run.sh): one node's worth, the most
    GPUs per node of the layouts given (a 4x8 project: 8); without layouts, the world size
    (12, or ``--nproc N``). The multi-node layouts run through jobs/ or ``smoke --layout``."""
    if spec.layouts:
        return max(p for _, p in lays)
    return world


def default_image(spec: TargetSpec, stack: Stack) -> str:
    """The image the job files run: ``--image``, else the name the build tags and pushes
    (core.naming: ``[REGISTRY/]REPOSITORY:TAG``)."""
    if spec.image:
        return spec.image
    return image_names(spec, stack).ref


def job_base(spec: TargetSpec) -> str | None:
    """What job names are made of: a project target's own name (two targets of one CUDA
    line never share a job name); None (the target string) outside a project."""
    return spec.name if spec.from_project else None


def _compiled_names(spec: TargetSpec) -> tuple[str, ...]:
    """The project's ``compiled`` list as package names (components.team_compiled checks each)."""
    if not spec.compiled:
        return ()
    from envbuilder.components.team_compiled import explicit_names

    return explicit_names(spec.compiled, f"{spec.project or 'project'} compiled")


def as_built(spec: TargetSpec, stack: Stack) -> Stack:
    """``stack`` as ``spec`` builds it: the base and builder images the plan uses when the
    spec replaces the matrix's (``base_image``, ``builder_image``: resolve, the render summary
    and stack.json state those), and a warning per team package that compiles against torch
    (what builds it, TORCH_CUDA_ARCH_LIST, a prebuilt wheel preferred); exit 3 when the stack
    cannot build one. resolve, lock, render and build all see it."""
    images_given = spec.base_image is not None or spec.builder_image is not None
    team: tuple[str, ...] = ()
    if spec.requirements_file is not None or spec.requirements:
        from envbuilder.lock.requirements import team_requirements

        team = tuple(team_requirements(stack, requirements_file=spec.requirements_file,
                                       lines=spec.requirements, source=spec.requirements_source))
    from envbuilder.components import team_compiled as rc

    split = rc.split_team(team, _compiled_names(spec)) if team else None
    if not split and not images_given:
        return stack
    from dataclasses import replace

    b = rc.refuse_unbuildable(stack, split) if split else None  # before the plan: exit 3
    plan = make_plan(stack, PlanOptions(spec=spec, team_requirements=team, compiled=_compiled_names(spec)))
    more = () if not split or b is None else tuple(
        rc.warnings(stack, split, b, plan.cuda_arch, spec.pip_index_url))
    return replace(stack, findings=stack.findings + more,
                   images=(plan.runtime_image, plan.builder_image) if images_given else None)


def folder_files(spec: TargetSpec, stack: Stack, *, lock_text: str | None = None,
                 lock_source: str = LOCK_NAME, wheelhouse: bool = False,
                 image: str | None = None,
                 tag_image: str | None = None) -> tuple[BuildPlan, dict[str, str | bytes]]:
    """Every file of ``spec``'s build folder: (plan, {relative path: content}).

    With ``lock_text`` the lock is checked (well formed, made for the stack's Python) and
    cross-checked against the stack (exit 3 naming the fact and the lock line), cut into
    per-layer hash-pinned files installed with ``--require-hashes``, and kept beside them.
    ``image``: the reference the job files pull (``build --push`` passes ``REPO@sha256:...``,
    and ``tag_image``, the tag it pushed it under); default ``default_image``."""
    from envbuilder.render.jobs import job_name, render_jobs
    from envbuilder.render.monitoring import render_monitoring

    lays, nproc = smoke_layouts(spec.nproc, spec.layouts)
    team: tuple[str, ...] = ()
    if spec.requirements_file is not None or spec.requirements or lock_text is not None:
        # the lock package is imported only when there is something to check or place
        from envbuilder.lock.requirements import team_requirements

        team = team_requirements(stack, requirements_file=spec.requirements_file,
                                 lines=spec.requirements, source=spec.requirements_source)
    # a project target's image says its name (io.envbuilder.target: smoke's metrics read it)
    named = {PREFIX + "target": spec.name} if spec.from_project else {}
    options = PlanOptions(spec=spec, smoke_nproc=nproc, team_requirements=team, wheelhouse=wheelhouse,
                          host_nproc=host_ranks(spec, lays, nproc), compiled=_compiled_names(spec),
                          labels=named)
    extra: dict[str, object] = {}
    layer_reqs = None
    if lock_text is None:
        plan = make_plan(stack, options)
    else:
        from envbuilder.lock.requirements import (check_lock_text, cross_check, read_lock,
                                                  split_by_layer)

        check_lock_text(lock_text, lock_source, python=stack.python)
        cross_check(stack, read_lock(lock_text), lock_source)
        digest = "sha256:" + hashlib.sha256(lock_text.encode()).hexdigest()
        # the image names the lock it was installed from (envbuilder inspect shows it)
        plan = make_plan(stack, replace(options, hashes=True, labels={**named, PREFIX + "lock-digest": digest}))
        layer_reqs = split_by_layer(lock_text, plan)
        extra["lock"] = {"file": LOCK_NAME, "digest": digest}
    if image_tag(spec, stack) != stack.tag:
        extra["image_tag"] = image_tag(spec, stack)
    if plan.compiled_packages:  # the team's packages built against torch (components.team_compiled)
        extra["compiled"] = {"packages": list(plan.compiled_packages), "layer": "team-compiled",
                             "builder_image": plan.builder_image,
                             "nvcc": plan.labels.get(PREFIX + "builder-nvcc"),
                             "cuda_arch_list": list(plan.cuda_arch)}
    extra["smoke"] = {"world_size": nproc, "layouts": [lm.fmt(x) for x in lays],
                      "jobs": "jobs/layouts.json"}
    files = render_files(plan, layer_requirements=layer_reqs, stack_extra=extra)
    if lock_text is not None:
        files[LOCK_NAME] = lock_text
    files.update(render_jobs(plan, image=image or default_image(spec, stack), layouts=lays,
                             gpus=stack.toolkit is not None, infiniband=spec.infiniband,
                             jobs=spec.jobs.with_command(spec.command), name=job_base(spec),
                             tag_image=tag_image,
                             # the project's (or --layout's) nodes: the GPUs per node they use
                             node_gpus=max(p for _, p in lays) if spec.layouts else None))
    files.update(render_monitoring(target=spec.name, min_busbw_gbps=spec.min_busbw,
                                   job_names=[job_name(job_base(spec) or spec.name, *lays[0])]))
    return plan, files
