"""Engine and registry failures become one sentence naming the step and what to do. The
messages fed in are the ones dockerd and the registry really send (as seen in their streams)."""

from __future__ import annotations

import pytest

from envbuilder.run import engine
from envbuilder.errors import OperationError


@pytest.mark.parametrize("msg, expect", [
    ("failed to register layer: write /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so: "
     "no space left on device", "ran out of disk space"),
    ("The command '/bin/bash -o pipefail -c pip install ...' returned a non-zero code: 1",
     "the build failed"),
    ("pull access denied for nvidia/cuda, repository does not exist or may require 'docker login'",
     "base image could not be found"),
])
def test_build_errors(msg, expect):
    assert expect in engine.build_error(msg, ["Step 7/27 : RUN pip install"])


def test_build_error_on_tls_interception_suggests_ca_cert():
    tail = ["WARNING: Retrying ... SSLError(SSLCertVerificationError(1, '[SSL: "
            "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in "
            "certificate chain (_ssl.c:1006)'))"]
    assert "--ca-cert" in engine.build_error("returned a non-zero code: 1", tail)


@pytest.mark.parametrize("msg, expect", [
    ("unauthorized: authentication required", "authentication"),
    ('Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused', "not reachable"),
    ("denied: requested access to the resource is denied", "authentication"),
])
def test_push_errors(msg, expect):
    out = engine._push_error("127.0.0.1:5000/ml/train", msg)
    assert expect in out and "127.0.0.1:5000" in out


def test_unreachable_engine_is_one_sentence():
    with pytest.raises(OperationError) as e:
        engine.connect("unix:///nonexistent/docker.sock")
    assert "cannot reach the Docker engine at unix:///nonexistent/docker.sock" in str(e.value)
    assert "\n" not in str(e.value) and e.value.exit_code == 1


def test_registry_credentials_come_from_the_environment(monkeypatch):
    monkeypatch.delenv("ENVBUILDER_REGISTRY_USER", raising=False)
    assert engine.registry_auth("r/x") is None  # the docker config (credential helpers) applies
    monkeypatch.setenv("ENVBUILDER_REGISTRY_USER", "u")
    monkeypatch.setenv("ENVBUILDER_REGISTRY_PASSWORD", "p")
    assert engine.registry_auth("r/x") == {"username": "u", "password": "p"}


@pytest.mark.docker
def test_a_real_build_names_its_stage_images_and_the_suite_drops_only_those(docker_client, base_image, tmp_path):
    """On the real engine: the stages engine.build names are the untagged images the build
    left (the recorded stream's Dockerfile, tests/fixtures/engine); tests/engine_stages.py
    removes those and nothing else (the final image and the base stay)."""
    from pathlib import Path

    from engine_stages import drop_stages

    src = Path(__file__).parent / "fixtures" / "engine" / "legacy-multistage.Dockerfile"
    (tmp_path / "Dockerfile").write_text(src.read_text().replace("envbuilder-test/debian:12", base_image))
    tag = "envbuilder-test/stages:probe"
    try:
        r = engine.build(docker_client, tmp_path, tag=tag, nocache=True)
        assert len(r.stage_images) == 2  # builder and layer; the stage of no step left none
        for ident in r.stage_images:
            assert docker_client.images.get(ident).tags == []
        base_id = docker_client.images.get(base_image).id
        assert not base_id.removeprefix("sha256:").startswith(tuple(r.stage_images))
        drop_stages(docker_client, r.stage_images)
        for ident in r.stage_images:
            with pytest.raises(Exception, match="No such image|not found"):
                docker_client.images.get(ident)
        assert docker_client.images.get(tag).id == r.image_id
        assert docker_client.images.get(base_image).id == base_id
    finally:
        docker_client.images.remove(tag, force=True)
