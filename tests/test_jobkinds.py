"""Job kinds as a table (issue 43, item 3; issue 41): each kind of jobs/ file is one object of
``envbuilder.render.jobkinds`` with its template, and ``render_jobs`` loops over the table. A
new kind is one module plus one template: this test registers an LSF batch-script kind from
the test folder alone (its class here, its template in tests/data/jobkinds) and renders with it,
through the same emitter and the same names, layouts and runs as the built-in kinds."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envbuilder.api import Pins, resolve_target
from envbuilder.core.jobs import KINDS, JobsConfig
from envbuilder.render import jobkinds
from envbuilder.render.jobkinds.base import JobKind, LayoutJob
from envbuilder.render.jobs import render_jobs
from envbuilder.render.plan import make_plan

DATA = Path(__file__).parent / "data" / "jobkinds"
IMAGE = "registry.example.com/ml/envbuilder@sha256:" + "ab" * 32


class Lsf(JobKind):
    """IBM Spectrum LSF: a bsub script per layout and run."""

    name = stem = "lsf"
    family = "other"
    order = 60
    suffix = ".bsub"
    template = "lsf.bsub.j2"
    templates = DATA
    title = "LSF"

    def values(self, lay: LayoutJob) -> dict[str, Any]:
        limit = lay.settings.deadline
        return {"program": lay.program, "lsf_minutes": -(-limit // 60) if limit else 60}


@pytest.fixture
def lsf():
    kind = jobkinds.register(Lsf())
    yield kind
    jobkinds.unregister("lsf")


@pytest.fixture(scope="module")
def plan():
    return make_plan(resolve_target("cu121", pins=Pins(fabric="none")))


def test_the_table_holds_every_built_in_kind_and_run():
    names = [k.name for k in jobkinds.kinds()]
    assert set(KINDS) <= set(names)  # every kind [jobs] kubernetes may name has its object
    assert {"slurm-apptainer", "slurm-pyxis", "slurm-host", "launcher", "kueue-localqueue",
            "training-runtime"} <= set(names)
    assert [r.name for r in jobkinds.runs()] == ["smoke", "train"]
    with pytest.raises(ValueError):  # a name is registered once
        jobkinds.register(jobkinds.get("jobset"))


def test_a_toy_kind_from_the_test_folder_renders_for_every_layout_and_run(lsf, plan, tmp_path):
    cmd = "python train.py --name '$(id); x'"
    files = render_jobs(plan, image=IMAGE, jobs=JobsConfig(command=cmd, time="72:00:00"))
    for lay in ("1x12", "2x6", "3x4"):
        smoke, train = files[f"jobs/lsf-{lay}.bsub"], files[f"jobs/train-lsf-{lay}.bsub"]
        assert f"#BSUB -J smoke-cu121-{lay}" in smoke and "ddp_smoke.py" in smoke
        assert f"#BSUB -J train-cu121-{lay}" in train and "#BSUB -W 4320" in train
        # the program's words reach the script shell-quoted, through the same filters
        assert shlex.split(train.splitlines()[-1])[-3:] == ["train.py", "--name", "$(id); x"]
        script = tmp_path / f"{lay}.bsub"
        script.write_text(train)
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    idx = json.loads(files["jobs/layouts.json"])
    for e in idx["layouts"]:
        assert f"jobs/lsf-{e['layout']}.bsub" == e["files"][-1]
        assert f"jobs/train-lsf-{e['layout']}.bsub" == e["train_files"][-1]
    # the built-in kinds' files are what they are without it
    jobkinds.unregister("lsf")
    try:
        without = render_jobs(plan, image=IMAGE, jobs=JobsConfig(command=cmd, time="72:00:00"))
    finally:
        jobkinds.register(lsf)
    skip = ("layouts.json", "README.md")  # they list every kind's files
    assert {k: v for k, v in files.items() if ".bsub" not in k and not k.endswith(skip)} == \
        {k: v for k, v in without.items() if not k.endswith(skip)}
    assert "| LSF |" in files["jobs/README.md"] and "`lsf-2x6.bsub`" in files["jobs/README.md"]


def test_render_jobs_names_no_kind():
    """The loop is generic: render/jobs.py names no kind's module or template."""
    text = (Path(jobkinds.__file__).parent.parent / "jobs.py").read_text()
    for kind in jobkinds.kinds():
        if kind.template:
            assert kind.template not in text, kind.template
    for stem in ("trainjob", "jobset", "indexed_job", "pytorchjob", "slurm_pyxis"):
        assert f"jobkinds.{stem}" not in text
