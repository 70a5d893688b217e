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

from envbuilder.core.project import find_project, schema

CPU = "cpu-torch2.13-debian12"

# the team's own Debian 12 image (here: the suite's local one), added by a matrix overlay
INTERNAL_IMAGE = os.environ.get("ENVBUILDER_TEST_BASE_IMAGE", "envbuilder-test/debian:12")
OVERLAY_OS = f"""\
schema_version: 1
os:
- name: debian12
  family: debian
  image: {INTERNAL_IMAGE}
  python_default: "3.11"
  python:
    "3.11":
      packages: [python3.11, python3.11-venv]
      repo: main
  source: https://wiki.internal.example/platform/base-images#debian12
"""

PROJECT = f"""\
# a team's project: two targets, their own requirements, their own base image
requirements = "team-requirements.txt"
registry = "registry.example.com/team"
repository = "train"
layouts = ["1x12", "2x6"]
matrix_overlay = "matrix"

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
    (root / "matrix").mkdir(exist_ok=True)
    (root / "matrix" / "os.yaml").write_text(OVERLAY_OS)
    (root / "src" / "deep").mkdir(parents=True, exist_ok=True)
    return root


def test_found_walking_up_from_a_subfolder(tmp_path):
    root = _project(tmp_path / "repo")
    p = find_project(root / "src" / "deep")
    assert p is not None and p.path == root / "envbuilder.toml"
    assert [t.name for t in p.targets] == ["train", "eval"]
    assert str(p.targets[1].pins.python) == "3.11"
    assert p.requirements_file == root / "team-requirements.txt"
    assert p.layout_pairs == ((1, 12), (2, 6)) and p.registry == "registry.example.com/team"
    assert p.matrix_overlay == root / "matrix"
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
    assert {"requirements", "registry", "layouts", "matrix_overlay", "targets", "pip_index_url",
            "extra_index_urls", "exclude_newer", "explain_cases", "jobs", "compiled",
            "signing_key"} <= set(s["properties"])  # and every option's key (test_options.py)
    # a target's own table may set what a lock needs, so a lock is reproducible from the file
    assert {"requirements", "pip_index_url", "extra_index_urls", "exclude_newer", "registry",
            "layouts"} <= set(s["properties"]["targets"]["items"]["properties"])
    from envbuilder.core.resources import data_path

    assert json.loads(data_path("project.schema.json").read_text())["title"]


def test_render_without_a_target_renders_the_project_targets(tmp_path):
    root = _project(tmp_path / "repo")
    p = cli("render", "--json", cwd=root / "src" / "deep")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert [r["target"] for r in data["rendered"]] == ["train", "eval"]
    for name in ("train", "eval"):
        out = root / "build" / name  # the project root's build/, wherever it runs from
        assert (out / "requirements" / "team.txt").read_text() == "einops==0.8.2\n"
        docker = (out / "Dockerfile").read_text()
        # the team layer is the last one, copied after torch
        assert docker.index("COPY --from=layer-torch") < docker.index("COPY --from=layer-team")
        assert "layer-team" in (out / "envbuilder.def").read_text() or \
            "stage builder, layer team" in (out / "envbuilder.def").read_text()
        stack = json.loads((out / "stack.json").read_text())
        assert [la["name"] for la in stack["layers"]][-1] == "team"
    assert not (root / "src" / "deep" / "build").exists()
    # the project's job layouts replace the default ones
    jobs = sorted(x.name for x in (root / "build/train/jobs").glob("trainjob-*"))
    assert jobs == ["trainjob-1x12.yaml", "trainjob-2x6.yaml"]
    eval_stack = json.loads((root / "build/eval/stack.json").read_text())
    assert eval_stack["python"] == "3.11"
    # the overlay's base image is used, and marked as the overlay's in stack.json
    train_stack = json.loads((root / "build/train/stack.json").read_text())
    assert train_stack["base_image"] == INTERNAL_IMAGE
    assert f"ARG RUNTIME_IMAGE={INTERNAL_IMAGE}" in (root / "build/train/Dockerfile").read_text()
    [entry] = train_stack["overlay"]
    assert entry["file"] == "os.yaml" and entry["entry"] == "name=debian12" and entry["used"]
    assert entry["action"] == "replaced" and entry["source"] == [
        "https://wiki.internal.example/platform/base-images#debian12"]
    assert train_stack["matrix"]["overlay"] == str(root / "matrix")
    # the torch layer's inputs do not depend on the team's requirements
    torch_before = (root / "build/train/requirements/torch.txt").read_text()
    (root / "team-requirements.txt").write_text("einops==0.8.2\ntqdm==4.70.1\n")
    p = cli("render", "train", cwd=root / "src" / "deep")
    assert p.returncode == 0, p.stderr
    assert (root / "build/train/requirements/torch.txt").read_text() == torch_before
    assert "tqdm==4.70.1" in (root / "build/train/requirements/team.txt").read_text()


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
    # lock --check, offline (every proxy a closed port), passes on the unchanged project
    offline = {k: "http://127.0.0.1:9" for k in ("http_proxy", "https_proxy", "HTTP_PROXY",
                                                  "HTTPS_PROXY", "ALL_PROXY")}
    p = cli("lock", "train", "--check", cwd=root, **offline)
    assert p.returncode == 0, p.stderr
    # the team's requirements are resolved with the stack as one: changing them re-locks
    # their own layer's file only (torch's file, hashes included, stays the same bytes)
    (root / "team-requirements.txt").write_text("einops==0.8.2\npandas\n")
    p = cli("lock", "train", "--check", cwd=root, **offline)  # and the check names the change
    assert p.returncode == 1 and "pandas" in p.stderr, (p.returncode, p.stderr)
    p = cli("lock", "train", "--json", cwd=root, UV_CACHE_DIR=str(uv_cache))
    assert p.returncode == 0, p.stderr
    after = json.loads(p.stdout)["lock"]["packages"]
    assert "pandas" in after
    assert {k: v for k, v in after.items() if k in data["lock"]["packages"]} == data["lock"]["packages"]
    p = cli("render", "train", cwd=root)
    assert p.returncode == 0, p.stderr
    assert (root / "build/train/requirements/torch.txt").read_text() == torch
    assert "pandas==" in (root / "build/train/requirements/team.txt").read_text()
    # a team requirement that needs another version of a stack package is refused
    (root / "team-requirements.txt").write_text("numpy>=2\n")
    p = cli("lock", "train", cwd=root, UV_CACHE_DIR=str(uv_cache))
    assert_clean_failure(p, 3, "numpy")


@pytest.mark.docker
@pytest.mark.slow
def test_changing_team_requirements_rebuilds_only_the_team_layer(docker_client, base_image,
                                                                 wheelhouse, tmp_path):
    root = _project(tmp_path / "repo")
    assert base_image == INTERNAL_IMAGE  # the project's overlay names the local base image
    common = ("--no-smoke", "--wheelhouse", str(wheelhouse), "--json")

    def build(label: str) -> dict:
        p = cli("build", "train", *common, "--context", str(tmp_path / label), cwd=root,
                timeout=1800, DOCKER_HOST=os.environ.get("DOCKER_HOST", ""))
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout)

    def layers(image_id: str) -> list[str]:
        return docker_client.images.get(image_id).attrs["RootFS"]["Layers"]

    a = build("a")
    assert a["labels"]["org.opencontainers.image.base.name"] == INTERNAL_IMAGE  # the overlay's
    (root / "team-requirements.txt").write_text("einops==0.8.2\ntqdm==4.70.1\n")
    b = build("b")
    (root / "team-requirements.txt").write_text("")  # no team packages: no team layer
    (root / "envbuilder.toml").write_text(PROJECT.replace('requirements = "team-requirements.txt"\n', ""))
    plain = build("plain")
    la, lb, lp = layers(a["image_id"]), layers(b["image_id"]), layers(plain["image_id"])
    assert len(la) == len(lb) == len(lp) + 1  # the team's requirements add one layer
    # only that layer changed (under BuildKit, WORKDIR's layer comes after it: not the last)
    (i,) = [n for n, (x, y) in enumerate(zip(la, lb)) if x != y]
    assert la[:i] + la[i + 1:] == lb[:i] + lb[i + 1:] == lp  # every other one (torch too): same bits
    assert la[i] not in lp and lb[i] not in lp
    out = docker_client.containers.run(
        b["image_id"], ["python", "-c", "import einops, tqdm, torch; print('OK', tqdm.__version__)"],
        remove=True).decode()
    assert "OK 4.70.1" in out


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


INTERNAL_CUDA = """\
schema_version: 1
images:
- cuda: "12.1.1"
  os: [ubuntu22.04]
  flavours: [base, runtime, devel]
  cudnn: cudnn8
  repository: registry.internal.example/mirror/cuda
  source: https://wiki.internal.example/platform/cuda-images
"""


def test_overlay_adds_an_internal_cuda_image_shown_by_resolve(tmp_path):
    ov = _write(tmp_path / "ov" / "base_images.yaml", INTERNAL_CUDA).parent
    p = cli("resolve", "cu121-torch2.1-py310", "--matrix-overlay", str(ov), "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["base_image"] == "registry.internal.example/mirror/cuda:12.1.1-base-ubuntu22.04"
    assert [(e["file"], e["entry"], e["used"]) for e in d["overlay"]] == [
        ("base_images.yaml", "cuda=12.1.1, os=ubuntu22.04", True)]
    plain = json.loads(cli("resolve", "cu121-torch2.1-py310", "--json").stdout)
    assert plain["base_image"].startswith("nvidia/cuda:") and "overlay" not in plain
    assert plain["matrix"]["digest"] != d["matrix"]["digest"]  # the overlay is in the cache key
    # the built-in entry's other OS keeps NVIDIA's image
    d20 = json.loads(cli("resolve", "cu121-torch2.1-py310-ubuntu20.04", "--matrix-overlay", str(ov),
                         "--json").stdout)
    assert d20["base_image"].startswith("nvidia/cuda:") and not d20["overlay"][0]["used"]
    text = cli("resolve", "cu121-torch2.1-py310", "--matrix-overlay", str(ov)).stdout
    assert "overlay (used): base_images.yaml" in text and "wiki.internal.example" in text


def test_overlay_entries_need_a_source_and_known_keys(tmp_path):
    ov = _write(tmp_path / "a" / "base_images.yaml",
                INTERNAL_CUDA.replace("  source: https://wiki.internal.example/platform/cuda-images\n", ""))
    p = cli("resolve", "cu121", "--matrix-overlay", str(ov.parent))
    assert_clean_failure(p, 2, str(ov), "source")
    ov = _write(tmp_path / "b" / "base_images.yaml", INTERNAL_CUDA + "  colour: blue\n")
    p = cli("resolve", "cu121", "--matrix-overlay", str(ov.parent))
    assert_clean_failure(p, 2, str(ov), "colour")
    ov = _write(tmp_path / "c" / "torchh.yaml", "schema_version: 1\n")
    p = cli("resolve", "cu121", "--matrix-overlay", str(ov.parent))
    assert_clean_failure(p, 2, "torchh.yaml")


def test_project_layouts_must_run_the_smoke_job_ranks(tmp_path):
    root = _project(tmp_path / "repo", PROJECT.replace('["1x12", "2x6"]', '["1x8", "2x8"]'))
    p = cli("render", "train", cwd=root)  # the layouts run different world sizes
    assert_clean_failure(p, 2, "1x8=8", "2x8=16")
    p = cli("render", "train", "--nproc", "8", cwd=root)
    assert_clean_failure(p, 2, "2x8")
    root = _project(tmp_path / "repo2", PROJECT.replace('["1x12", "2x6"]', '["1x8", "2x4"]'))
    p = cli("render", "train", "--nproc", "12", cwd=root)  # --nproc must agree with them
    assert_clean_failure(p, 2, "--nproc")
    p = cli("render", "train", cwd=root)  # the project's layouts set the world size: 8
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in (root / "build/train/jobs").glob("trainjob-*")) == [
        "trainjob-1x8.yaml", "trainjob-2x4.yaml"]
    assert json.loads((root / "build/train/stack.json").read_text())["smoke"]["world_size"] == 8
    p = cli("render", "train", "--layout", "2x6", cwd=root)  # --layout wins over the project's
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in (root / "build/train/jobs").glob("trainjob-*")) == [
        "trainjob-2x6.yaml"]
