"""core.naming: what a target's image is called (issue 46, point 3), one case at a time, in
process. The CLI's side (job files, stack.json, bake, init, the warning): tests/test_naming.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuilder.api import make_spec
from envbuilder.core import naming
from envbuilder.core.project import load_project
from envbuilder.errors import InputError

STACK = "cpu-torch2.13.0-py311-debian12"
TRAIN = '[[targets]]\nname = "train"\ntarget = "cpu"\n'


def _project(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "envbuilder.toml").write_text(text)
    return root


def _names(root: Path, name: str = "train", **given: object) -> naming.ImageNames:
    spec = make_spec(name, project=load_project(root / "envbuilder.toml"), **given)
    return naming.image_names(spec, STACK)


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


