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
    assert expect in engine._build_error(msg, ["Step 7/27 : RUN pip install"])


def test_build_error_on_tls_interception_suggests_ca_cert():
    tail = ["WARNING: Retrying ... SSLError(SSLCertVerificationError(1, '[SSL: "
            "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in "
            "certificate chain (_ssl.c:1006)'))"]
    assert "--ca-cert" in engine._build_error("returned a non-zero code: 1", tail)


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
