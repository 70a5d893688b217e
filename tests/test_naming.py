"""Image names (issue 46, point 3): one function, core.naming.image_names, says what a target's
image is called locally, pushed and in its job files; the job files, stack.json and bake's tags
follow it; init writes the registry's new meaning; an old project file keeps its meaning with a
warning that says how to state it the new way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostile_helpers import cli

from envbuilder.api import make_spec
from envbuilder.core import naming
from envbuilder.core.project import load_project
from envbuilder.errors import InputError

STACK = "cpu-torch2.13.0-py311-debian12"


def _project(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "envbuilder.toml").write_text(text)
    return root


def _names(root: Path, name: str = "train", **given: object) -> naming.ImageNames:
    spec = make_spec(name, project=load_project(root / "envbuilder.toml"), **given)
    return naming.image_names(spec, STACK)


TRAIN = '[[targets]]\nname = "train"\ntarget = "cpu"\n'


# -- the rule, one case at a time ----------------------------------------------------------------

def test_outside_a_project_the_image_is_envbuilder_stack_tag():
    n = naming.image_names(make_spec("cpu"), STACK)
    assert (n.ref, n.registry, n.generic, n.project, n.legacy) == (
        f"envbuilder:{STACK}", None, None, None, False)


def test_outside_a_project_registry_is_a_namespace_and_repository_names_the_image():
    n = naming.image_names(make_spec("cpu", registry="127.0.0.1:5077/ml"), STACK)
    assert n.ref == f"127.0.0.1:5077/ml/envbuilder:{STACK}"
    n = naming.image_names(make_spec("cpu", registry="127.0.0.1:5077/ml", repository="train"), STACK)
    assert (n.repository, n.registry) == ("127.0.0.1:5077/ml/train", "127.0.0.1:5077/ml")


def test_a_project_target_is_named_by_the_project_and_the_target(tmp_path):
    root = _project(tmp_path / "ux5", TRAIN)
    n = _names(root)
    # local only: the project's folder is the repository, the target's name leads the tag
    assert (n.ref, n.registry) == (f"ux5:train-{STACK}", None)
    assert (n.generic, n.project) == (f"envbuilder:{STACK}", "ux5")


def test_a_project_registry_is_a_namespace_when_the_project_names_its_repository(tmp_path):
    root = _project(tmp_path / "ux5", 'registry = "127.0.0.1:5077/ml"\nrepository = "vision"\n' + TRAIN)
    n = _names(root)
    assert n.ref == f"127.0.0.1:5077/ml/vision:train-{STACK}" and not n.legacy
    assert n.project == "127.0.0.1:5077/ml/vision"
    # a target's own repository wins over the project's, the command line's over both
    assert _names(root, repository="other").repository == "127.0.0.1:5077/ml/other"
    assert _names(root, registry="reg.example/ns").repository == "reg.example/ns/vision"


def test_a_command_line_registry_in_a_project_defaults_the_repository_to_the_projects_name(tmp_path):
    root = _project(tmp_path / "UX 5_Team", TRAIN)
    assert _names(root, registry="reg.example/ml").ref == f"reg.example/ml/ux-5-team:train-{STACK}"


def test_an_old_project_registry_keeps_its_meaning_with_a_warning_that_says_the_fix(tmp_path):
    root = _project(tmp_path / "ux5", 'registry = "reg.example/ml/train"\n' + TRAIN)
    spec = make_spec("train", project=load_project(root / "envbuilder.toml"))
    n = naming.image_names(spec, STACK)
    assert (n.ref, n.legacy) == (f"reg.example/ml/train:train-{STACK}", True)
    w = naming.legacy_warning(spec)
    assert w is not None and "key registry" in w and 'registry = "reg.example/ml" and repository = "train"' in w
    # stated the new way, the same image and no warning
    root2 = _project(tmp_path / "ux6", 'registry = "reg.example/ml"\nrepository = "train"\n' + TRAIN)
    spec2 = make_spec("train", project=load_project(root2 / "envbuilder.toml"))
    assert naming.image_names(spec2, STACK).ref == n.ref and naming.legacy_warning(spec2) is None
    # the command line's --registry always has the new meaning
    cl = make_spec("train", project=load_project(root / "envbuilder.toml"), registry="reg.example/ml")
    assert naming.legacy_warning(cl) is None
    assert naming.image_names(cl, STACK).repository == "reg.example/ml/ux5"


def test_a_plain_target_in_a_project_keeps_the_stack_tag_under_the_projects_repository(tmp_path):
    root = _project(tmp_path / "ux5", TRAIN)
    n = naming.image_names(make_spec("cpu", project=load_project(root / "envbuilder.toml")), STACK)
    assert (n.ref, n.generic) == (f"ux5:{STACK}", f"envbuilder:{STACK}")


def test_a_project_that_names_its_repository_envbuilder_has_no_second_generic_name(tmp_path):
    root = _project(tmp_path / "p", 'repository = "envbuilder"\n')
    n = naming.image_names(make_spec("cpu", project=load_project(root / "envbuilder.toml")), STACK)
    assert (n.ref, n.generic) == (f"envbuilder:{STACK}", None)


def test_long_tags_are_cut_to_128(tmp_path):
    root = _project(tmp_path / "p", '[[targets]]\nname = "' + "t" * 64 + '"\ntarget = "cpu"\n')
    spec = make_spec("t" * 64, project=load_project(root / "envbuilder.toml"))
    n = naming.image_names(spec, STACK + "-" + "x" * 80)
    assert len(n.tag) == 128 and n.tag.startswith("t" * 64 + "-" + STACK)


@pytest.mark.parametrize("folder", ["---", "__"])
def test_a_folder_name_that_gives_no_repository_asks_for_the_key(tmp_path, folder):
    root = _project(tmp_path / folder, TRAIN)
    with pytest.raises(InputError, match='set repository = "NAME"'):
        _names(root)


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
    n = _names(root)
    assert n.repository == "127.0.0.1:5077/ml/ux5" and not n.legacy
