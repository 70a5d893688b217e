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
from typing import TYPE_CHECKING

from envbuilder.core import layouts as lm
from envbuilder.core.resolve import Stack
from envbuilder.core.spec import TargetSpec
from envbuilder.errors import InputError
from envbuilder.labels import PREFIX
from envbuilder.render.plan import BuildPlan, make_plan
from envbuilder.render.templating import render_files

if TYPE_CHECKING:
    from typing import Sequence

LOCK_NAME = "requirements.lock"
LOCAL_REPOSITORY = "envbuilder"


def smoke_layouts(nproc: int | None, layouts: Sequence[str] = ()) -> tuple[tuple[tuple[int, int], ...], int]:
    """(the job files' layouts, the smoke job's world size) for ``--nproc`` and ``--layout``:
    layouts given set the world size (``--nproc``, when also given, must agree); ``--nproc N``
    alone is 1xN plus the splits that fit common nodes; neither is 12."""
    if layouts:
        lays = lm.parse_layouts(layouts)
        world = lm.world_of(lays)
        if nproc is not None and nproc != world:
            raise InputError(f"--nproc {nproc} disagrees with --layout {','.join(map(lm.fmt, lays))} "
                             f"({world} ranks): drop --nproc or give layouts of {nproc} ranks")
        return lays, world
    world = 12 if nproc is None else nproc
    return lm.default_layouts(world), world


def default_image(spec: TargetSpec, stack: Stack) -> str:
    """The image the job files run: ``--image``, else the spec's registry (a project's), else
    the local name the build tags."""
    if spec.image:
        return spec.image
    return f"{spec.registry or LOCAL_REPOSITORY}:{stack.tag}"


def folder_files(spec: TargetSpec, stack: Stack, *, lock_text: str | None = None,
                 lock_source: str = LOCK_NAME,
                 wheelhouse: bool = False) -> tuple[BuildPlan, dict[str, str | bytes]]:
    """Every file of ``spec``'s build folder: (plan, {relative path: content}).

    With ``lock_text`` the lock is checked (well formed, made for the stack's Python) and
    cross-checked against the stack (exit 3 naming the fact and the lock line), cut into
    per-layer hash-pinned files installed with ``--require-hashes``, and kept beside them."""
    from envbuilder.render.jobs import job_name, render_jobs
    from envbuilder.render.monitoring import render_monitoring

    lays, nproc = smoke_layouts(spec.nproc, spec.layouts)
    team: tuple[str, ...] = ()
    if spec.requirements_file is not None or spec.requirements or lock_text is not None:
        # the lock package is imported only when there is something to check or place
        from envbuilder.lock.requirements import team_requirements

        team = team_requirements(stack, requirements_file=spec.requirements_file,
                                 lines=spec.requirements, source=spec.requirements_source)
    plan_kw = dict(spec.plan_options(), smoke_nproc=nproc, team_requirements=team,
                   wheelhouse=wheelhouse)
    extra: dict[str, object] = {}
    layer_reqs = None
    if lock_text is None:
        plan = make_plan(stack, **plan_kw)
    else:
        from envbuilder.lock.requirements import (check_lock_text, cross_check, read_lock,
                                                  split_by_layer)

        check_lock_text(lock_text, lock_source, python=stack.python)
        cross_check(stack, read_lock(lock_text), lock_source)
        digest = "sha256:" + hashlib.sha256(lock_text.encode()).hexdigest()
        # the image names the lock it was installed from (envbuilder inspect shows it)
        plan = make_plan(stack, hashes=True, labels={PREFIX + "lock-digest": digest}, **plan_kw)
        layer_reqs = split_by_layer(lock_text, plan)
        extra["lock"] = {"file": LOCK_NAME, "digest": digest}
    extra["smoke"] = {"world_size": nproc, "layouts": [lm.fmt(x) for x in lays],
                      "jobs": "jobs/layouts.json"}
    files = render_files(plan, layer_requirements=layer_reqs, stack_extra=extra)
    if lock_text is not None:
        files[LOCK_NAME] = lock_text
    files.update(render_jobs(plan, image=default_image(spec, stack), layouts=lays,
                             gpus=stack.toolkit is not None, infiniband=spec.infiniband))
    files.update(render_monitoring(target=spec.name, min_busbw_gbps=spec.min_busbw,
                                   job_names=[job_name(spec.name, *lays[0])]))
    return plan, files
