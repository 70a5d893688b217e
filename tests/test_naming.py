"""Image names (issue 46, point 3) through the CLI: the job files, stack.json and bake's tags
follow core.naming; init writes the registry's new meaning; an old project file keeps its
meaning with one warning that says how to state it the new way. The rule itself, case by case:
tests/unit/test_naming.py."""

from __future__ import annotations

import json
from pathlib import Path

from hostile_helpers import cli

from envbuilder.api import make_spec
from envbuilder.core import naming
from envbuilder.core.project import load_project

TRAIN = '[[targets]]\nname = "train"\ntarget = "cpu"\n'


def _project(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "envbuilder.toml").write_text(text)
    return root


def test_a_bad_repository_is_refused_naming_its_key(tmp_path):
    root = _project(tmp_path / "p", 'repository = "Bad Name"\n' + TRAIN)
    p = cli("render", "train", "-o", "out", cwd=root)
    assert p.returncode == 2 and "repository" in p.stderr and "Bad Name" in p.stderr
    assert not (root / "out").exists()


# -- what follows the rule: job files, stack.json, bake, the warning on stderr, init ----------------

def test_job_files_and_stack_json_pull_the_projects_name(tmp_path):
    root = _project(tmp_path / "ux5", 'registry = "reg.example/ml"\nrepository = "ux5"\n'
                    'layouts = ["2x8"]\n' + TRAIN.replace('"cpu"', '"cu121"'))
    p = cli("render", "train", "-o", "out", cwd=root)
    assert p.returncode == 0, p.stderr
    stack = json.loads((root / "out" / "stack.json").read_text())
    assert stack["image_tag"] == f"train-{stack['tag']}"
    jobs = "\n".join(f.read_text() for f in (root / "out" / "jobs").iterdir() if f.is_file())
    assert f"reg.example/ml/ux5:train-{stack['tag']}" in jobs
    assert f"reg.example#ml/ux5:train-{stack['tag']}" in jobs  # pyxis/enroot's form
    assert "envbuilder:" + stack["tag"] not in jobs and "warning" not in p.stderr


def test_an_old_registry_warns_once_on_stderr_and_keeps_the_job_files_image(tmp_path):
    root = _project(tmp_path / "ux5", 'registry = "reg.example/ml/train"\n' + TRAIN
                    + '[[targets]]\nname = "eval"\ntarget = "cpu"\n')
    p = cli("render", "-o", "out", cwd=root)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("is read as a whole repository") == 1, p.stderr
    assert 'registry = "reg.example/ml" and repository = "train"' in p.stderr
    jobs = (root / "out" / "train" / "jobs")
    tag = json.loads((root / "out" / "train" / "stack.json").read_text())["image_tag"]
    assert any(f"reg.example/ml/train:{tag}" in f.read_text() for f in jobs.iterdir() if f.is_file())


def test_bake_tags_each_image_with_its_name(tmp_path):
    from test_bake_ci import blocks, parse_hcl

    root = _project(tmp_path / "ux5", 'repository = "ux5"\n' + TRAIN + '[[targets]]\nname = "gpu"\n'
                    'target = "cu121"\nregistry = "reg.example/ml"\n')
    p = cli("bake", "--json", cwd=root)
    assert p.returncode == 0, p.stderr
    hcl = parse_hcl((root / "build" / "docker-bake.hcl").read_text())
    tags = {n: t["tags"] for n, t in blocks(hcl, "target").items() if "tags" in t}
    assert tags["train"][0].startswith("ux5:train-cpu-")  # local: the project's repository
    assert tags["gpu"][0].startswith("reg.example/ml/ux5:gpu-cu121-")  # under the target's registry
    assert not any(t.startswith("envbuilder:") for ts in tags.values() for t in ts)


def test_init_registry_writes_a_namespace_and_the_repository(tmp_path):
    root = tmp_path / "ux5"
    root.mkdir()
    p = cli("init", "--driver", "535.104.05", "--gpus-per-node", "8", "--registry", "127.0.0.1:5077/ml",
            cwd=root)
    assert p.returncode == 0, p.stderr
    text = (root / "envbuilder.toml").read_text()
    assert 'registry = "127.0.0.1:5077/ml"' in text and 'repository = "ux5"' in text
    n = naming.image_names(make_spec("train", project=load_project(root / "envbuilder.toml")), "cpu")
    assert n.ref == "127.0.0.1:5077/ml/ux5:train-cpu" and not n.legacy
