"""The smoke job across nodes, for real, on one machine: one container per node on a private
Docker network, each running torchrun with a c10d rendezvous hosted by the first node.

``run_smoke_multinode(image, nnodes=3, nproc_per_node=4)`` runs the same checks as the
single-node job across the nodes, plus the ones only a multi-node job has: world size,
ranks per node as asked (``layout=(7, 5)`` for an uneven split), hostnames distinct per node.
Faults end within the job's timeout: the rendezvous has a join timeout, every collective has
the job's timeout, and the runner kills what is left. The node that failed first is named.
Every container and the network are removed afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from envbuilder import SMOKE_TIMEOUT
from envbuilder.errors import InputError
from envbuilder.run import engine
from envbuilder.run import smoke as sm

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container as DockerContainer
    from docker.models.networks import Network

RDZV_PORT = 29400


def _node_script(nnodes: int, nproc: int, backend: str, timeout: int, rdzv: str,
                 rdzv_id: str, script_args: Sequence[str]) -> str:
    cmd = sm.torchrun_command("PY", f"{sm.CONTAINER_DIR}/ddp_smoke.py", nproc_per_node=nproc,
                              nnodes=nnodes, out=sm.CONTAINER_OUT, backend=backend,
                              timeout=timeout, rdzv_endpoint=rdzv, rdzv_id=rdzv_id,
                              script_args=script_args)
    # a node that never joins must not hold the others for torchrun's default 600 s
    i = cmd.index("--rdzv_id")
    cmd[i + 2:i + 2] = ["--rdzv_conf", f"join_timeout={int(timeout)},read_timeout={int(timeout)}"]
    return sm.shell_wrap(cmd)


def node_counts(nnodes: int, nproc_per_node: int | None, layout: Sequence[int] | None) -> list[int]:
    """Ranks on each node: even (nproc_per_node each) or exactly as the user asked."""
    if layout:
        counts = [int(n) for n in layout]
        if len(counts) != nnodes:
            raise InputError(f"--layout {','.join(map(str, counts))} names {len(counts)} nodes "
                             f"but --nnodes is {nnodes}")
        if any(n < 1 for n in counts):
            raise InputError("--layout: every node needs at least one rank")
        return counts
    if not nproc_per_node or nproc_per_node < 1:
        raise InputError("--nproc-per-node must be at least 1")
    return [nproc_per_node] * nnodes


def run_smoke_multinode(image: str, *, nnodes: int, nproc_per_node: int | None = None,
                        layout: Sequence[int] | None = None, backend: str = "gloo",
                        timeout: int = SMOKE_TIMEOUT, shm_size: str = "2g",
                        client: DockerClient | None = None, gpus: bool | None = None,
                        env: Mapping[str, str] | None = None,
                        node_env: Mapping[int, Mapping[str, str]] | None = None,
                        before_start: Callable[[Network, list[DockerContainer]], None] | None = None,
                        script_args: Sequence[str] = ()) -> sm.SmokeResult:
    """Run the smoke job on ``nnodes`` containers. ``gpus`` as in the single-node job (every
    node gets the GPUs). ``before_start(network, containers)`` is a hook for fault tests (e.g.
    disconnect a node from the network)."""
    counts = node_counts(nnodes, nproc_per_node, layout)
    if client is None:
        client = engine.connect()
    use_gpus = sm.wants_gpus(client, backend, gpus)
    run_id = "envbuilder-smoke-" + secrets.token_hex(4)
    hosts = [f"node-{i}" for i in range(nnodes)]
    rdzv = f"{hosts[0]}:{RDZV_PORT}"
    started = time.monotonic()
    logs: list[str] = []
    files: dict[str, bytes] = {}
    with contextlib.ExitStack() as stack:
        network = stack.enter_context(engine.private_network(
            client, run_id, step="smoke", labels={sm.SMOKE_LABEL: "1"}))
        containers: list[engine.Container] = []
        for i, host in enumerate(hosts):
            environment = {"PYTHONUNBUFFERED": "1", **(env or {}), **((node_env or {}).get(i, {}))}
            script = _node_script(nnodes, counts[i], backend, timeout, rdzv, run_id, script_args)
            c = stack.enter_context(engine.Container(
                client, image, ["sh", "-c", script], step="smoke", gpus=use_gpus,
                hostname=host, name=f"{run_id}-{host}", shm_size=shm_size,
                environment=environment, network=network.name, labels={sm.SMOKE_LABEL: "1"}))
            network.disconnect(c.raw)
            network.connect(c.raw, aliases=[host])
            c.put_archive("/tmp", sm._payload_tar())
            containers.append(c)
        if before_start is not None:
            before_start(network, [c.raw for c in containers])
        for c in containers:
            c.start()

        deadline = sm.job_deadline(timeout)

        def wait(c: engine.Container) -> tuple[int, float, bool]:
            code, timed_out = c.wait(deadline)
            return code, time.monotonic(), timed_out

        with ThreadPoolExecutor(max_workers=nnodes) as pool:
            waits = list(pool.map(wait, containers))
        for host, c in zip(hosts, containers):
            logs.append(f"===== {host} =====\n" + c.logs())
            for name, data in sm._untar_json(c.get_archive(sm.CONTAINER_OUT)).items():
                files[f"{host}/{name}"] = data

    summary, ranks = sm._parse_records(files)
    log = "\n".join(logs)
    exit_code = next((code for code, _, _ in waits if code != 0), 0)
    timed_out = any(t for _, _, t in waits)
    world = sum(counts)
    result = sm.build_result(summary=summary, ranks=ranks, log=log, exit_code=exit_code,
                             nproc_per_node=max(counts), nnodes=nnodes, backend=backend,
                             seconds=time.monotonic() - started, where=image,
                             timed_out=timed_out, timeout=timeout, world_size=world)
    return _judge_layout(result, hosts, counts, world, waits)


def _judge_layout(result: sm.SmokeResult, hosts: list[str], counts: list[int], world: int,
                  waits: list[tuple[int, float, bool]]) -> sm.SmokeResult:
    checks, failed, details = dict(result.checks), list(result.failed), dict(result.details)

    def fail(name: str, why: str) -> None:
        checks[name] = "fail"
        if name not in failed:
            failed.append(name)
        details[name] = why

    per_node = (result.summary or {}).get("ranks_per_node") or {}
    if result.summary is not None and not failed:
        want = dict(zip(hosts, counts))
        if per_node != want:
            fail("layout", f"ranks per node {per_node}, asked {want}")
        else:
            checks["layout"] = "pass"
        if len(per_node) != len(hosts):
            fail("hostnames", f"{len(per_node)} distinct hostnames for {len(hosts)} nodes")
        else:
            checks["hostnames"] = "pass"
        if result.world_size != world:
            fail("world_size", f"world size {result.world_size}, asked {world}")
    bad = [(t, h, code) for h, (code, t, _) in zip(hosts, waits) if code != 0]
    if bad:
        bad.sort()
        first = ", ".join(f"{h} (exit {code})" for _, h, code in bad[:3])
        fail("nodes", f"first failing node: {first}")
    ok = not failed and result.exit_code == 0
    return dataclasses.replace(result, ok=ok, checks=checks, failed=failed, details=details,
                               nproc_per_node=max(counts), world_size=result.world_size or world)
