"""envbuilder.bake (docker-bake.hcl) and envbuilder.ci (GitHub Actions matrix and workflow).

The bake file is parsed with python-hcl2 (docker buildx is not run here); the workflow with
PyYAML. Both are checked against the built-in targets as the resolver sees them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from envbuilder.api import builtin_targets, render_target, resolve_target
from envbuilder.api import bake_all
from envbuilder.render.bake import write_bake
from envbuilder.render.ci import github_matrix, write_github_workflow
from envbuilder.errors import InputError
from envbuilder.core.matrix import load_matrix

REGISTRY = "ghcr.io/acme/envbuilder"


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(None)


@pytest.fixture(scope="module")
def names(matrix):
    return builtin_targets(matrix)


def parse_hcl(text: str) -> dict:
    hcl2 = pytest.importorskip("hcl2")
    return hcl2.loads(text)


def _unq(s):
    """python-hcl2 (v5+) keeps the quotes of string keys and values; older versions drop them."""
    if isinstance(s, str) and len(s) >= 2 and s[0] == s[-1] == '"':
        return s[1:-1]
    return s


def _deep(node):
    if isinstance(node, dict):
        return {_unq(k): _deep(v) for k, v in node.items() if k not in ("__is_block__",)}
    if isinstance(node, list):
        return [_deep(v) for v in node]
    return _unq(node)


def blocks(doc: dict, kind: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for entry in doc.get(kind, []):
        for name, body in entry.items():
            out[_unq(name)] = _deep(body)
    return out


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    out = tmp_path_factory.mktemp("bake")
    # --registry is a registry and namespace: outside a project the repository is envbuilder
    report = bake_all(out, registry=REGISTRY.rpartition("/")[0]).to_dict()
    return out, report, Path(report["bake_file"]).read_text()


def test_bake_names_every_target(baked, names):
    out, report, text = baked
    doc = parse_hcl(text)
    groups = blocks(doc, "group")
    targets = blocks(doc, "target")
    assert groups["default"]["targets"] == names
    assert set(names) <= set(targets)
    for name in names:
        t = targets[name]
        stack = json.loads((out / name / "stack.json").read_text())
        assert t["context"] == name and (out / t["context"] / t["dockerfile"]).is_file()
        assert t["target"] == "runtime"
        alias = stack["torch_variant"]
        sharing = [n for n in names
                   if json.loads((out / n / "stack.json").read_text())["torch_variant"] == alias]
        # only the version tag is among the tags bake pushes; the moving alias (the CUDA
        # line) is listed apart: envbuilder build moves it after the smoke job passed
        assert t["tags"] == [f"{REGISTRY}:{stack['tag']}"]
        moving = f"# alias {name}: {REGISTRY}:{alias}"
        assert (moving in text) == (len(sharing) == 1 or name == alias)
        assert t["cache-from"] == [f"type=registry,ref={REGISTRY}:buildcache-{name}"]
        assert t["cache-to"] == [f"type=registry,ref={REGISTRY}:buildcache-{name},mode=max"]
        assert t["labels"] == stack["image"]["labels"]
        assert t["labels"]["org.opencontainers.image.version"] == stack["tag"]
        assert t["args"] == {"BUILDER_IMAGE": stack["image"]["builder"],
                             "RUNTIME_IMAGE": stack["image"]["runtime"]}
        ctx = t.get("contexts")
        if ctx:  # a shared builder stage: it must exist and build the builder stage
            ref = ctx["builder"]
            assert ref.startswith("target:")
            shared = targets[ref[len("target:"):]]
            assert shared["target"] == "builder"
            assert shared["args"]["BUILDER_IMAGE"] == stack["image"]["builder"]


def test_bake_alias_tags_are_unique(baked, names):
    targets = blocks(parse_hcl(baked[2]), "target")
    tags = [tag for n in names for tag in targets[n]["tags"]]
    assert len(tags) == len(set(tags))
    assert not any(t.endswith(":cu121") for t in tags)  # no moving alias among pushed tags
    assert f"# alias cu121: {REGISTRY}:cu121" in baked[2]
    assert f"# alias cu121-ds: {REGISTRY}:cu121" not in baked[2]


def test_bake_shares_identical_builder_stages(tmp_path):
    # two torch lines on the same CUDA line, OS and Python: the builder stage is the same
    a = render_target("cu121", tmp_path / "a")
    b = render_target("cu121-torch2.4", tmp_path / "b")
    c = render_target("cu121-ds", tmp_path / "c")  # a devel builder: a different stage
    assert a.stack.builder_image == b.stack.builder_image != c.stack.builder_image
    text = write_bake([("cu121", tmp_path / "a"), ("cu121-torch24", tmp_path / "b"),
                       ("cu121-ds", tmp_path / "c")], tmp_path / "docker-bake.hcl", registry=None)
    targets = blocks(parse_hcl(text), "target")
    ref_a = targets["cu121"]["contexts"]["builder"]
    assert ref_a == targets["cu121-torch24"]["contexts"]["builder"]
    shared = targets[ref_a.split(":", 1)[1]]
    assert shared["target"] == "builder" and shared["context"] in ("a", "b")
    assert "contexts" not in targets["cu121-ds"]
    assert targets["cu121"]["tags"] == [f"envbuilder:{a.stack.tag}"]
    assert "# alias cu121: envbuilder:cu121" in text
    # a CA certificate added to one folder splits the stage again
    (tmp_path / "b" / "ca-certificates" / "corp.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    text = write_bake([("cu121", tmp_path / "a"), ("cu121-torch24", tmp_path / "b")],
                      tmp_path, registry=REGISTRY)
    targets = blocks(parse_hcl(text), "target")
    assert "contexts" not in targets["cu121"] and "contexts" not in targets["cu121-torch24"]


def test_bake_escapes_interpolation(tmp_path):
    render_target("cpu", tmp_path / "cpu")
    stack = json.loads((tmp_path / "cpu" / "stack.json").read_text())
    text = write_bake([("cpu", tmp_path / "cpu")], tmp_path, registry="localhost:5000/ml/train")
    assert "${" not in text.replace("$${", "")
    t = blocks(parse_hcl(text), "target")["cpu"]
    assert t["tags"][0] == f"localhost:5000/ml/train:{stack['tag']}"


@pytest.mark.parametrize("registry", ["ghcr.io/acme/x:latest", "Bad Registry", "x@sha256:00"])
def test_bake_rejects_registry(tmp_path, registry):
    with pytest.raises(InputError):
        write_bake([("cpu", tmp_path)], tmp_path, registry=registry)


def test_bake_rejects_unrendered_folder(tmp_path):
    with pytest.raises(InputError, match="not a rendered build folder"):
        write_bake([("cpu", tmp_path)], tmp_path, registry=None)


def test_github_matrix(matrix, names):
    m = github_matrix(matrix)
    json.dumps(m)
    inc = m["include"]
    assert [e["target"] for e in inc] == names
    for e in inc:
        stack = resolve_target(e["target"], matrix=matrix)
        assert set(e) == {"target", "tag", "cuda", "runs_on"}
        assert e["tag"] == stack.tag
        assert e["cuda"] == (stack.cuda or "cpu")
        if stack.toolkit is None:
            assert e["runs_on"] == "ubuntu-latest"
        else:
            assert "gpu" in e["runs_on"]


def test_workflow(tmp_path):
    path = write_github_workflow(tmp_path, registry=REGISTRY, install="torch-envbuilder[lock]==0.1.0")
    assert path == tmp_path / ".github" / "workflows" / "envbuilder.yml"
    text = path.read_text()
    assert "&id" not in text and "*id" not in text  # no YAML anchors
    wf = yaml.safe_load(text)
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "workflow_dispatch" in on
    assert wf["env"]["REGISTRY"] == REGISTRY
    jobs = wf["jobs"]
    assert set(jobs) == {"targets", "build"}
    t = jobs["targets"]
    assert "steps.matrix.outputs.matrix" in t["outputs"]["matrix"]
    (mstep,) = [s for s in t["steps"] if s.get("id") == "matrix"]
    assert "envbuilder targets --github-matrix" in mstep["run"] and "GITHUB_OUTPUT" in mstep["run"]
    b = jobs["build"]
    assert b["needs"] == "targets"
    assert b["strategy"]["matrix"] == "${{ fromJSON(needs.targets.outputs.matrix) }}"
    assert b["strategy"]["fail-fast"] is False
    assert b["runs-on"] == "${{ matrix.runs_on }}"
    runs = [s.get("run", "") for s in b["steps"]]
    uses = [s.get("uses", "") for s in b["steps"]]
    order = [next(i for i, r in enumerate(runs) if cmd in r) for cmd in (
        "pip install", 'envbuilder lock "$T" --check', 'envbuilder render "$T"',
        'envbuilder build "$T" --push "$REGISTRY" --json')]
    assert order == sorted(order)
    assert uses[0].startswith("actions/checkout@")
    (login,) = [s for s in b["steps"] if s.get("uses", "").startswith("docker/login-action@")]
    assert login["with"]["registry"] == "ghcr.io"
    (up,) = [s for s in b["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert up["if"] == "${{ always() }}" and "matrix.target" in up["with"]["path"]


def test_workflow_rejects_bad_registry(tmp_path):
    with pytest.raises(InputError):
        write_github_workflow(tmp_path, registry="ghcr.io/acme/x; rm -rf /")


# -- docker buildx bake on the test engine (issue 28) ----------------------------------------

BAKE_PROJECT = """\
[[targets]]
name = "cpu"
target = "cpu-torch2.13-debian12"

[[targets]]
name = "cpu-ds"
target = "cpu-torch2.13-ds0.19.8-debian12"  # 0.19.6+ with torch 2.12+ (C++20)
"""
BAKE_REPO = "envbuilder-test-bake/envbuilder"


def _buildx() -> list[str]:
    import os
    import shutil
    import subprocess

    if shutil.which("docker") is None or subprocess.run(["docker", "buildx", "version"],
                                                         capture_output=True).returncode != 0:
        what = "docker buildx is not installed (scripts/test-services.sh puts the plugin in DOCKER_CONFIG)"
        if os.environ.get("ENVBUILDER_REQUIRE_DOCKER") == "1":
            pytest.fail(what)
        pytest.skip(what)
    return ["docker", "buildx"]


@pytest.fixture(scope="session")
def buildx_baked(docker_client, base_image, wheelhouse, ca_bundle, tmp_path_factory):
    """`envbuilder bake` of a two-target project (offline: --wheelhouse, the local base; pip and
    apt cache mounts), built by `docker buildx bake` with the engine's own BuildKit (the docker
    driver): once a session."""
    import subprocess

    from hostile_helpers import cli

    _buildx()
    root = tmp_path_factory.mktemp("buildx")
    (root / "envbuilder.toml").write_text(BAKE_PROJECT)
    p = cli("bake", "--docker-driver", "--cache-mounts", "--base-image", base_image, "--wheelhouse", str(wheelhouse),
            "--ca-cert", str(ca_bundle), "--registry", BAKE_REPO, "-o", str(root / "out"), "--json", cwd=root)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    b = subprocess.run(["docker", "buildx", "bake", "-f", "docker-bake.hcl", "--progress", "plain"],
                       cwd=root / "out", capture_output=True, text=True, timeout=3600)
    return root, report, b


@pytest.mark.docker
@pytest.mark.slow
def test_buildx_bake_builds_both_targets_and_verify_passes(buildx_baked, docker_client):
    from hostile_helpers import cli

    root, report, b = buildx_baked
    assert b.returncode == 0, b.stderr[-3000:]
    doc = parse_hcl((root / "out" / "docker-bake.hcl").read_text())
    targets = blocks(doc, "target")
    assert set(targets) == {"cpu", "cpu-ds"}
    assert not any("cache-to" in t or "contexts" in t for t in targets.values())  # docker driver
    for name, t in targets.items():
        (tag,) = t["tags"]
        labels = docker_client.images.get(tag).labels
        # a project target's image says the project's name for it (issue 46)
        assert labels["io.envbuilder.target"] == name == json.loads(
            (root / "out" / name / "stack.json").read_text())["image"]["labels"]["io.envbuilder.target"]
        assert labels == {**labels, **t["labels"]}
        v = cli("verify", tag, "--json")
        assert v.returncode == 0, v.stdout + v.stderr
        assert json.loads(v.stdout)["ok"]
    ds = docker_client.containers.run(targets["cpu-ds"]["tags"][0], ["python", "-c",
                                      "import deepspeed; print(deepspeed.__version__)"],
                                      remove=True, entrypoint=[]).decode()
    assert ds.strip().splitlines()[-1] == "0.19.8"


def test_bake_for_the_docker_driver_names_no_cache_export_or_contexts(tmp_path):
    from envbuilder.render.bake import write_bake

    a, b = tmp_path / "a", tmp_path / "b"
    render_target("cpu", a)
    render_target("cpu", b)
    text = write_bake([("a", a), ("b", b)], tmp_path, registry=REGISTRY)
    assert "cache-to" in text and "contexts" in text  # the default: a docker-container builder
    from envbuilder.render.bake import bake_hcl, _folder_files

    text = bake_hcl([("a", a, _folder_files(a)), ("b", b, _folder_files(b))], tmp_path / "x.hcl",
                    registry=REGISTRY, docker_driver=True)
    assert "cache-to" not in text and "cache-from" not in text and "contexts" not in text


def test_cache_mounts_only_in_bake_dockerfiles(tmp_path):
    from envbuilder.render.bake import APT_CACHE_MOUNT, PIP_CACHE_MOUNT, with_cache_mounts

    render_target("cu121-ds", tmp_path / "r")
    plain = (tmp_path / "r" / "Dockerfile").read_text()
    assert "--mount=" not in plain  # render (and build, the legacy builder) stay as they were
    text = with_cache_mounts(plain)
    runs = [ln for ln in text.splitlines() if ln.startswith("RUN ")]
    assert sum(PIP_CACHE_MOUNT in r for r in runs) == plain.count("FROM ") - 2  # every pip layer
    assert all(APT_CACHE_MOUNT in r for r in runs if "apt-get" in r or "apt" in r.split()[-1])
    assert "pip install --no-cache-dir" not in text and "# syntax" not in text
    # nothing else changes
    back = text.replace(PIP_CACHE_MOUNT + " ", "").replace(APT_CACHE_MOUNT + " ", "")
    back = back.replace("unset PIP_NO_CACHE_DIR \\\n && ", "")
    back = "\n".join(ln for ln in back.splitlines() if not ln.startswith(("# BuildKit cache", "# (docker buildx")))
    assert back + "\n" == plain.replace("pip install --no-cache-dir ", "pip install ")
