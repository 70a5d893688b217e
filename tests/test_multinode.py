"""The smoke job across nodes, for real: one container per node on a private Docker network,
torchrun with a c10d rendezvous on the first node (envbuilder smoke IMAGE --nnodes N)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envbuilder.errors import InputError
from envbuilder.run.multinode import node_counts, run_smoke_multinode

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _leftovers(client) -> tuple[list, list]:
    from envbuilder.run.smoke import SMOKE_LABEL

    # multi-node runs name their containers and network envbuilder-smoke-<id>[-node-N]
    return ([c for c in client.containers.list(all=True, filters={"label": SMOKE_LABEL})
             if c.name.startswith("envbuilder-smoke-")],
            client.networks.list(filters={"label": SMOKE_LABEL}))


def _smoke_cli(*args: str) -> dict:
    """`envbuilder smoke ARGS --json` in a fresh process: its report (exit 0 asserted)."""
    p = subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()", "smoke",
                        *args, "--json"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def test_3x4_passes_across_nodes(smoke_image, docker_client):
    d = _smoke_cli(smoke_image, "--nnodes", "3", "--nproc-per-node", "4")
    assert d["ok"] and d["world_size"] == 12 and d["nnodes"] == 3
    assert d["summary"]["ranks_per_node"] == {"node-0": 4, "node-1": 4, "node-2": 4}
    assert d["checks"]["hostnames"] == "pass" and d["checks"]["layout"] == "pass"
    for check in ("rendezvous", "all_reduce", "all_gather", "broadcast", "barrier", "ddp"):
        assert d["checks"][check] == "pass"
    assert _leftovers(docker_client) == ([], [])


def test_uneven_layout_as_asked(smoke_image, docker_client):
    r = run_smoke_multinode(smoke_image, nnodes=2, layout=(7, 5), timeout=60, client=docker_client)
    assert r.ok, r.details
    assert r.world_size == 12
    assert r.summary["ranks_per_node"] == {"node-0": 7, "node-1": 5}


def test_layout_that_does_not_match_the_nodes_is_refused():
    with pytest.raises(InputError):
        node_counts(3, None, (7, 5))
    assert node_counts(2, None, (7, 5)) == [7, 5]
    assert node_counts(3, 4, None) == [4, 4, 4]


def test_interface_setting_naming_no_interface_fails_fast_and_is_explained(smoke_image, docker_client):
    r = run_smoke_multinode(smoke_image, nnodes=2, nproc_per_node=2, timeout=30,
                            client=docker_client,
                            env={"GLOO_SOCKET_IFNAME": "eth9", "NCCL_SOCKET_IFNAME": "eth9"})
    assert not r.ok
    assert r.seconds < 3 * 30 + 120  # within the job's deadline, not a hang
    assert "nodes" in r.failed
    from envbuilder.run.build import explain_log

    # the rank that failed says why in its own line, whatever its launcher did to rank 0
    assert "rendezvous failed: init_process_group(gloo)" in r.log and "eth9" in r.log, r.log[-4000:]
    causes = explain_log(r.log, details=r.details)
    assert causes and causes[0]["category"] == "network_interface", (causes[:2], r.log[-4000:])
    assert _leftovers(docker_client) == ([], [])


def test_node_that_cannot_reach_the_rendezvous(smoke_image, docker_client):
    def cut(network, containers):
        network.disconnect(containers[2])  # node-2 never reaches node-0

    r = run_smoke_multinode(smoke_image, nnodes=3, nproc_per_node=2, timeout=20,
                            client=docker_client, before_start=cut)
    assert not r.ok
    assert "node-2" in r.details["nodes"]
    assert r.seconds < 3 * 20 + 120
    assert _leftovers(docker_client) == ([], [])


def test_rank_that_dies_mid_job(smoke_image, docker_client):
    r = run_smoke_multinode(smoke_image, nnodes=3, nproc_per_node=2, timeout=20,
                            client=docker_client, env={"ENVBUILDER_SMOKE_INJECT": "crash:3"})
    assert not r.ok
    assert r.failed and "nodes" in r.failed
    assert r.seconds < 3 * 20 + 120
    assert _leftovers(docker_client) == ([], [])


def test_layout_2x2_runs_two_nodes_of_two(smoke_image, docker_client):
    """smoke IMAGE --layout 2x2: the NNODESxNPROC_PER_NODE spelling of --nnodes 2 --nproc-per-node 2."""
    d = _smoke_cli(smoke_image, "--layout", "2x2", "--timeout", "60")
    assert d["ok"] and d["world_size"] == 4 and d["nnodes"] == 2 and d["nproc_per_node"] == 2
    assert d["summary"]["ranks_per_node"] == {"node-0": 2, "node-1": 2}
    assert d["checks"]["hostnames"] == "pass" and d["checks"]["layout"] == "pass"
    assert _leftovers(docker_client) == ([], [])


@pytest.mark.parametrize("args,needle", [
    (("--layout", "2x"), "--layout '2x'"),
    (("--layout", "0x2"), "--layout 0x2"),
    (("--layout", "a;b"), "--layout 'a;b'"),
    (("--layout", "2x2", "--nnodes", "3"), "--nnodes 3 disagrees with --layout 2x2"),
    (("--layout", "2x2", "--nproc-per-node", "4"), "--nproc-per-node 4 disagrees"),
    (("--layout", "7,5", "--nnodes", "3"), "names 2 nodes"),
    (("--layout", "2x2", "--host"), "--nnodes > 1"),
])
def test_smoke_layout_refusals(args, needle):
    from hostile_helpers import assert_clean_failure, cli

    assert_clean_failure(cli("smoke", "envbuilder:nonexistent", *args)
                         if "--host" not in args else cli("smoke", *args), 2, needle)
