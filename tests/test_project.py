"""Project files (envbuilder.toml, [tool.envbuilder]) and the team's requirements layer
(issue 15): discovery, validation, render/lock/build of the project's targets, and a real
build where changing only the team's requirements changes only the team layer.

The CLI runs in a subprocess, from inside the project's folders, as a team runs it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hostile_helpers import assert_clean_failure, cli

from envbuilder.core.project import find_project, load_project, schema

CPU = "cpu-torch2.13-debian12"

PROJECT = f"""\
# a team's project: two targets, their own requirements
requirements = "team-requirements.txt"
registry = "registry.example.com/team/train"
layouts = ["1x8", "2x8"]

[[targets]]
name = "train"
target = "{CPU}"

[[targets]]
name = "eval"
target = "cpu"
python = "3.11"
"""


def _project(root: Path, text: str = PROJECT, reqs: str = "einops==0.8.2\n") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "envbuilder.toml").write_text(text)
    (root / "team-requirements.txt").write_text(reqs)
    (root / "src" / "deep").mkdir(parents=True, exist_ok=True)
    return root


def test_found_walking_up_from_a_subfolder(tmp_path):
    root = _project(tmp_path / "repo")
    p = find_project(root / "src" / "deep")
    assert p is not None and p.path == root / "envbuilder.toml"
    assert [t.name for t in p.targets] == ["train", "eval"]
    assert p.targets[1].pins.python == "3.11"
    assert p.requirements_file == root / "team-requirements.txt"
    assert p.layouts == ("1x8", "2x8") and p.registry == "registry.example.com/team/train"
    assert find_project(tmp_path) is None  # nothing at or above tmp_path


def test_pyproject_tool_envbuilder(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.envbuilder]\nrequirements = ["einops==0.8.2"]\n\n'
        f'[[tool.envbuilder.targets]]\nname = "train"\ntarget = "{CPU}"\n')
    p = find_project(tmp_path)
    assert p is not None and p.path.name == "pyproject.toml"
    assert p.requirements == ("einops==0.8.2",) and p.targets[0].target == CPU
    # a pyproject.toml without [tool.envbuilder] is no project
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pyproject.toml").write_text('[project]\nname = "y"\n')
    assert find_project(tmp_path / "sub").path == tmp_path / "pyproject.toml"


def test_unknown_keys_name_the_key_and_the_file(tmp_path):
    root = _project(tmp_path / "a", PROJECT + "colour = 'blue'\n")
    p = cli("render", "--json", cwd=root)
    err = assert_clean_failure(p, 2, "colour", str(root / "envbuilder.toml"))
    assert "unknown key" in err
    root = _project(tmp_path / "b", PROJECT.replace('name = "eval"', 'name = "eval"\nflavor = "x"'))
    p = cli("lock", cwd=root / "src")
    assert_clean_failure(p, 2, "targets.1.flavor", str(root / "envbuilder.toml"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "pyproject.toml").write_text("[tool.envbuilder]\nregistri = 'x'\n")
    p = cli("render", cwd=tmp_path / "c")
    assert_clean_failure(p, 2, "tool.envbuilder.registri", "pyproject.toml")


def test_schema_ships_with_the_package_and_matches_the_loader():
    s = schema()
    assert s["additionalProperties"] is False
    assert set(s["properties"]) == {"requirements", "registry", "layouts", "matrix_overlay",
                                    "targets"}
    from envbuilder.core.resources import data_path

    assert json.loads(data_path("project.schema.json").read_text())["title"]


def test_render_without_a_target_renders_the_project_targets(tmp_path):
    root = _project(tmp_path / "repo")
    p = cli("render", "--json", cwd=root / "src" / "deep")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert [r["target"] for r in data["rendered"]] == ["train", "eval"]
    for name in ("train", "eval"):
        out = root / "src" / "deep" / "build" / name
        assert (out / "requirements" / "team.txt").read_text() == "einops==0.8.2\n"
        docker = (out / "Dockerfile").read_text()
        # the team layer is the last one, copied after torch
        assert docker.index("COPY --from=layer-torch") < docker.index("COPY --from=layer-team")
        assert "layer-team" in (out / "envbuilder.def").read_text() or \
            "# layer: team" in (out / "envbuilder.def").read_text()
        stack = json.loads((out / "stack.json").read_text())
        assert [la["name"] for la in stack["layers"]][-1] == "team"
    assert json.loads((root / "src/deep/build/eval/stack.json").read_text())["python"] == "3.11"
    # the torch layer's inputs do not depend on the team's requirements
    torch_before = (root / "src/deep/build/train/requirements/torch.txt").read_text()
    (root / "team-requirements.txt").write_text("einops==0.8.2\ntqdm==4.70.1\n")
    p = cli("render", "train", cwd=root / "src" / "deep")
    assert p.returncode == 0, p.stderr
    assert (root / "src/deep/build/train/requirements/torch.txt").read_text() == torch_before
    assert "tqdm==4.70.1" in (root / "src/deep/build/train/requirements/team.txt").read_text()


def test_team_requirement_contradicting_the_stack_is_refused(tmp_path):
    root = _project(tmp_path / "repo", reqs="torch==1.13.1\n")
    p = cli("render", cwd=root)
    assert_clean_failure(p, 3, "torch==1.13.1")


def test_bake_uses_the_project_targets_and_registry(tmp_path):
    root = _project(tmp_path / "repo")
    p = cli("bake", "-o", "out", cwd=root)
    assert p.returncode == 0, p.stderr
    hcl = (root / "out" / "docker-bake.hcl").read_text()
    assert "registry.example.com/team/train" in hcl
    assert sorted(x.name for x in (root / "out").iterdir() if x.is_dir()) == ["eval", "train"]


@pytest.mark.network
def test_lock_one_project_target(tmp_path, uv_cache):
    pytest.importorskip("uv")
    # a target whose torch is PyPI's default wheel: locked from PyPI alone (as in test_lock)
    root = _project(tmp_path / "repo", PROJECT.replace(CPU, "cu121-torch2.1-py310"))
    p = cli("lock", "train", "--json", cwd=root, UV_CACHE_DIR=str(uv_cache))
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["lock"]["packages"]["einops"] == "0.8.2"
    assert data["lock"]["packages"]["torch"] == "2.1.2"
    assert (root / data["lock"]["path"]) == root / "build" / "train" / "requirements.lock"
    # render installs the lock: the team's packages cut into their own layer file
    p = cli("render", "train", cwd=root)
    assert p.returncode == 0, p.stderr
    team = (root / "build/train/requirements/team.txt").read_text()
    torch = (root / "build/train/requirements/torch.txt").read_text()
    assert "einops==0.8.2" in team and "--hash=sha256:" in team
    assert "einops" not in torch and "torch==2.1.2" in torch


@pytest.mark.docker
@pytest.mark.slow
def test_changing_team_requirements_rebuilds_only_the_team_layer(docker_client, base_image,
                                                                 wheelhouse, tmp_path):
    root = _project(tmp_path / "repo")
    common = ("--no-smoke", "--base-image", base_image, "--wheelhouse", str(wheelhouse), "--json")

    def build(label: str) -> dict:
        p = cli("build", "train", *common, "--context", str(tmp_path / label), cwd=root,
                timeout=1800, DOCKER_HOST=os.environ.get("DOCKER_HOST", ""))
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout)

    def layers(image_id: str) -> list[str]:
        return docker_client.images.get(image_id).attrs["RootFS"]["Layers"]

    a = build("a")
    (root / "team-requirements.txt").write_text("einops==0.8.2\ntqdm==4.70.1\n")
    b = build("b")
    (root / "team-requirements.txt").write_text("")  # no team packages: no team layer
    (root / "envbuilder.toml").write_text(PROJECT.replace('requirements = "team-requirements.txt"\n', ""))
    plain = build("plain")
    la, lb, lp = layers(a["image_id"]), layers(b["image_id"]), layers(plain["image_id"])
    assert len(la) == len(lb) == len(lp) + 1  # the team's requirements add one layer, the last
    assert la[:-1] == lb[:-1] == lp  # everything below it (torch included) is the same bits
    assert la[-1] != lb[-1]  # and only that layer changed
    out = docker_client.containers.run(
        b["image_id"], ["python", "-c", "import einops, tqdm, torch; print('OK', tqdm.__version__)"],
        remove=True).decode()
    assert "OK 4.70.1" in out
