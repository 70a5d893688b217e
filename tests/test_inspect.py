"""envbuilder inspect IMAGE (and diff of two images): a small image built by the real engine
from the test base image with the LABEL instruction of a rendered Dockerfile, read from the
engine, and from real registries (Debian's docker-registry, plain and with htpasswd) through
the registry API without pulling it."""

from __future__ import annotations

import io
import json
import re
import uuid

import pytest

from envbuilder.api import resolve_target
from envbuilder.run import engine
from hostile_helpers import assert_clean_failure, cli

pytestmark = pytest.mark.docker


def _label_instruction(dockerfile: str) -> str:
    m = re.search(r"^LABEL .*?(?<!\\)\n", dockerfile, re.M | re.S)
    assert m, dockerfile
    return m.group(0)


def _tiny(docker_client, base_image: str, target: str, tmp_path, extra_labels=None) -> str:
    """Build `FROM base` + the LABEL of `envbuilder render target` with the real engine."""
    out = tmp_path / f"render-{target}"
    p = cli("render", target, "-o", str(out))
    assert p.returncode == 0, p.stderr
    label = _label_instruction((out / "Dockerfile").read_text())
    tag = f"envbuilder-inspect-test/{target}:{uuid.uuid4().hex[:8]}"
    dockerfile = f"FROM {base_image}\n{label}"
    img, _ = docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag,
                                        rm=True, labels=extra_labels or {})
    return tag


@pytest.fixture
def images(docker_client, base_image, tmp_path):
    made: list[str] = []

    def make(target: str, **kw) -> str:
        tag = _tiny(docker_client, base_image, target, tmp_path, **kw)
        made.append(tag)
        return tag

    yield make
    for t in made:  # only what this test made
        for ref in [t, *[r for r in docker_client.images.get(t).tags if r != t]]:
            try:
                docker_client.images.remove(ref, noprune=False)
            except Exception:  # noqa: BLE001
                pass


def _stack_rows(target: str) -> dict:
    d = resolve_target(target).to_dict()
    return {"cuda_toolkit": d["cuda_toolkit"], "driver_min": d["driver_min"]["version"],
            "torch": d["torch"], "torch_variant": d["torch_variant"], "python": d["python"],
            "nccl": d["nccl"], "os": d["os"], "base_image": d["base_image"]}


def test_inspect_a_local_image_prints_its_stack_and_provenance(images, docker_client):
    from envbuilder.api import load

    tag = images("cu121", extra_labels={"io.envbuilder.lock-digest": "sha256:" + "ab" * 32})
    p = cli("inspect", tag, "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    want = _stack_rows("cu121")
    assert {k: d["stack"][k] for k in want} == want
    prov = d["provenance"]
    assert prov["source"] == "engine" and prov["id"] == docker_client.images.get(tag).id
    assert prov["matrix_digest"] == load().digest and prov["matrix_current"] is True
    assert prov["lock_digest"] == "sha256:" + "ab" * 32
    assert prov["built"] == docker_client.images.get(tag).attrs["Created"]
    text = cli("inspect", tag, COLUMNS="200")
    assert text.returncode == 0, text.stderr
    for v in want.values():
        assert v in text.stdout
    assert "matrix digest: " + load().digest + " (the matrix in use now)" in text.stdout


def test_inspect_refuses_a_foreign_image(base_image):
    assert_clean_failure(cli("inspect", base_image), 2, "no envbuilder labels")
    assert_clean_failure(cli("inspect", "envbuilder-inspect-test/none:nope", "--from", "engine"),
                         2, "not in the engine")


def _push(docker_client, tag: str, repo: str, auth=None) -> str:
    docker_client.images.get(tag).tag(repo, "v1")
    digest = None
    for chunk in docker_client.api.push(repo, tag="v1", stream=True, decode=True, auth_config=auth):
        assert "error" not in chunk, chunk
        digest = (chunk.get("aux") or {}).get("Digest") or digest
        # the containerd image store's engine names it in a status line only (as run.engine reads it)
        m = re.fullmatch(r"\S+: digest: (sha256:[0-9a-f]{64}) size: \d+", str(chunk.get("status") or "").strip())
        digest = digest or (m and m.group(1))
    assert digest
    return digest


@pytest.mark.registry
def test_inspect_reads_a_registry_without_pulling(images, docker_client, registry):
    tag = images("cu124")
    repo = f"{registry.address}/ml/inspect"
    digest = _push(docker_client, tag, repo)
    docker_client.images.remove(f"{repo}:v1")  # not in the engine under that name
    p = cli("inspect", f"{repo}:v1", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    want = _stack_rows("cu124")
    assert {k: d["stack"][k] for k in want} == want
    assert d["provenance"]["source"] == "registry"
    assert d["provenance"]["manifest_digest"] == digest
    assert d["provenance"]["built"]
    # by digest too; and nothing was pulled into the engine
    assert cli("inspect", f"{repo}@{digest}", "--from", "registry").returncode == 0
    assert not any(f"{repo}:v1" in (i.tags or []) for i in docker_client.images.list())
    # a missing tag is bad input, a closed port an operation failure
    assert_clean_failure(cli("inspect", f"{repo}:nope", "--from", "registry"), 2, "not in the registry")
    assert_clean_failure(cli("inspect", "127.0.0.1:9/ml/x:v1", "--from", "registry"), 1, "cannot reach")
    # diff of the registry image against a local one: the stack facts, estimated layers
    other = images("cu121")
    p = cli("diff", other, f"{repo}:v1", "--json")
    assert p.returncode == 0, p.stderr
    dd = json.loads(p.stdout)
    assert dd["a"]["kind"] == dd["b"]["kind"] == "image"
    got = {f["fact"]: (f["a"], f["b"]) for f in dd["facts"]}
    assert got["torch"] == (_stack_rows("cu121")["torch"], want["torch"])
    assert dd["rebuild_from"] == "estimated from the facts"


@pytest.mark.registry
def test_inspect_with_registry_credentials(images, docker_client, auth_registry):
    tag = images("cpu")
    repo = f"{auth_registry.address}/ml/private"
    auth = {"username": auth_registry.user, "password": auth_registry.password}
    _push(docker_client, tag, repo, auth=auth)
    docker_client.images.remove(f"{repo}:v1")
    assert_clean_failure(cli("inspect", f"{repo}:v1", "--from", "registry"), 1, "401")
    p = cli("inspect", f"{repo}:v1", "--from", "registry", "--json",
            ENVBUILDER_REGISTRY_USER=auth_registry.user,
            ENVBUILDER_REGISTRY_PASSWORD=auth_registry.password)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["stack"]["cuda_toolkit"] is None  # a CPU image


def test_engine_provenance_of_an_image(images, docker_client):
    tag = images("cpu")
    labels, where = engine.image_provenance(docker_client, tag)
    assert labels["io.envbuilder.target"] == "cpu" and where["source"] == "engine"
