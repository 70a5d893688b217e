"""engine.Container, the one container life cycle of the smoke jobs and the Apptainer proof:
on a real engine, GPUs are requested in every kind of run when asked, and every container is
removed, whatever happens in the block."""

from __future__ import annotations

import pytest

from envbuilder.errors import OperationError
from envbuilder.run import engine
from envbuilder.run import smoke as sm
from envbuilder.run.multinode import run_smoke_multinode

pytestmark = pytest.mark.docker


def _gpu_requests(raw) -> list:
    raw.reload()
    return [r.get("Capabilities") for r in raw.attrs["HostConfig"].get("DeviceRequests") or []]


def _mine(client) -> list:
    return client.containers.list(all=True, filters={"label": "envbuilder.test.container=1"})


def test_container_requests_gpus_and_is_always_removed(docker_client, base_image):
    with pytest.raises(RuntimeError, match="boom"):
        with engine.Container(docker_client, base_image, ["true"], step="test", gpus=True,
                              labels={"envbuilder.test.container": "1"}) as c:
            assert _gpu_requests(c.raw) == [[["gpu"]]]
            raise RuntimeError("boom")
    assert _mine(docker_client) == []
    with engine.Container(docker_client, base_image, ["sh", "-c", "echo hi; exit 3"],
                          step="test", labels={"envbuilder.test.container": "1"}) as c:
        assert _gpu_requests(c.raw) == []
        c.start()
        assert c.wait(60) == (3, False)
        assert c.logs().strip() == "hi"
        assert c.get_archive("/nonexistent") is None
    assert _mine(docker_client) == []


def test_missing_image_is_one_line_naming_it(docker_client):
    with pytest.raises(OperationError, match="does-not-exist:never") as e:
        with engine.Container(docker_client, "envbuilder-test/does-not-exist:never", ["true"],
                              step="test"):
            pass
    assert "\n" not in str(e.value)


def test_multinode_passes_gpus_to_every_node(docker_client, base_image):
    # --gpus with --nnodes > 1 was dropped before: every node's container must request them.
    # This engine has no NVIDIA runtime, so the start fails; the hook sees the containers first.
    seen: list = []

    def record(network, containers):
        seen.extend(_gpu_requests(c) for c in containers)

    with pytest.raises(OperationError):
        run_smoke_multinode(base_image, nnodes=2, nproc_per_node=1, client=docker_client,
                            gpus=True, before_start=record, timeout=10)
    assert seen == [[[["gpu"]]], [[["gpu"]]]]  # per node: one request for all GPUs
    left = docker_client.containers.list(all=True, filters={"label": sm.SMOKE_LABEL})
    nets = docker_client.networks.list(filters={"label": sm.SMOKE_LABEL})
    assert (left, nets) == ([], [])
