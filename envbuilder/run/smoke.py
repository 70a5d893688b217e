"""Run the distributed smoke job (``envbuilder/payload/ddp_smoke.py``) and read its result.

On the host (``run_smoke_host``) or inside an image through the docker SDK
(``run_smoke_container``). The job's verdict is data: a ``SmokeResult`` whose ``failed`` names
the checks that failed, including synthetic ones when the job could not report for itself
(``import_torch``, ``launch``, ``timeout``, ``rank_records``, ``exit_code``). ``OperationError``
is raised only for what is not the job's result: an image that does not exist, an engine that
cannot be reached, a host without torch.

``docker`` is imported inside the functions that need it, so ``import envbuilder.smoke`` stays
light.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shlex
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from envbuilder import SMOKE_TIMEOUT
from envbuilder.errors import OperationError
from envbuilder.run import engine
from envbuilder.run.payload import ddp_smoke

if TYPE_CHECKING:
    from docker import DockerClient

SUMMARY_MARKER = ddp_smoke.SUMMARY_MARKER
CONTAINER_DIR = "/tmp/envbuilder-smoke"
CONTAINER_OUT = CONTAINER_DIR + "/out"
LOG_TAIL = 2000
SMOKE_LABEL = "envbuilder.run.smoke"  # on every smoke container, so leftovers can be found


@dataclass(frozen=True)
class SmokeResult:
    """The verdict of one smoke run. ``checks`` maps check name -> pass/fail/skip."""

    ok: bool
    world_size: int
    nproc_per_node: int
    nnodes: int
    backend: str
    checks: dict[str, str]
    failed: list[str]
    bandwidth: list[dict]
    summary: dict | None
    ranks: list[dict]
    log: str
    exit_code: int
    seconds: float
    where: str  # "host" or the image reference
    details: dict[str, str] = field(default_factory=dict)  # failed check -> why
    transport: dict = field(default_factory=dict)  # check_transport's record (run.transport)
    floors: dict = field(default_factory=dict)  # check_floors: busbw by size against its floor
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def max_busbw_gbps(self) -> float | None:
        """The best all-reduce bus bandwidth measured (what --min-busbw gates on)."""
        values = [float(b.get("busbw_gbps", 0.0)) for b in allreduce_rows(self.bandwidth)]
        return max(values) if values else None

    def bandwidth_table(self) -> str:
        return bandwidth_table(self.bandwidth, self.world_size)

    def fact(self, key: str, default: Any = None) -> Any:
        """What the summary says beyond the checks (device_kind, gpu_names, nccl, shm,
        components: ddp_smoke._run_facts)."""
        return (self.summary or {}).get(key, default)

    @property
    def device_kind(self) -> str:
        kind = self.fact("device_kind")
        if kind:
            return str(kind)
        if self.backend == "nccl":  # records of an older envbuilder: NCCL runs on GPUs only
            return "cuda"
        return "cuda" if any(str(r.get("device") or "").startswith("cuda") for r in self.ranks) else "cpu"

    def hosts(self) -> dict[int, str]:
        """Rank -> host, from the summary's per-rank timings or the rank records."""
        rows = (self.summary or {}).get("rank_timings") or self.ranks
        return {int(r["rank"]): str(r["hostname"]) for r in rows
                if r.get("rank") is not None and r.get("hostname")}


NCCL_TESTS_PERFORMANCE = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"


def allreduce_rows(rows: list[dict]) -> list[dict]:
    """The all-reduce rows of a bandwidth report (records before all-gather and reduce-scatter
    were measured carry no ``collective``: all-reduce)."""
    return [r for r in rows if r.get("collective", "all_reduce") == "all_reduce"]


def bandwidth_table(rows: list[dict], world_size: int) -> str:
    """The smoke job's bandwidth rows as nccl-tests prints them (one block per collective:
    size, count, type, redop, time, algbw, busbw), so they compare with published numbers.
    size is the largest buffer per rank in bytes, time the mean of the slowest rank in us,
    algbw = size / time, busbw = algbw x 2(n-1)/n (all-reduce) or (n-1)/n (all-gather,
    reduce-scatter), in GB/s (1e9 bytes): nccl-tests' definitions, NCCL_TESTS_PERFORMANCE."""
    out: list[str] = []
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(str(r.get("collective", "all_reduce")), []).append(r)
    for coll, rs in by.items():
        out.append(f"# {coll}, {world_size} ranks (nccl-tests algbw/busbw: {NCCL_TESTS_PERFORMANCE})")
        out.append(f"#{'size':>13} {'count':>12} {'type':>6} {'redop':>6} {'time':>10} "
                   f"{'algbw':>8} {'busbw':>8}")
        out.append(f"#{'(B)':>13} {'(elements)':>12} {'':>6} {'':>6} {'(us)':>10} "
                   f"{'(GB/s)':>8} {'(GB/s)':>8}")
        for r in rs:
            count = r.get("count", int(r.get("bytes", 0)) // 4)
            out.append(f" {int(r.get('bytes', 0)):>13} {int(count):>12} {r.get('type', 'float'):>6} "
                       f"{r.get('redop', 'sum'):>6} {float(r.get('seconds', 0.0)) * 1e6:>10.1f} "
                       f"{float(r.get('algbw_gbps', 0.0)):>8.3f} {float(r.get('busbw_gbps', 0.0)):>8.3f}")
    return "\n".join(out) + ("\n" if out else "")


def payload_path() -> Path:
    """The path of ``ddp_smoke.py`` inside the installed package."""
    return Path(ddp_smoke.__file__).resolve()


# the smoke job's files, copied together wherever it runs (a container, an image's smoke/)
PAYLOAD_FILES = ("ddp_smoke.py", "nccl_info.py")


def payload_files() -> list[Path]:
    return [payload_path().parent / name for name in PAYLOAD_FILES]


def torchrun_command(python: str, script: str, *, nproc_per_node: int, nnodes: int = 1,
                     out: str, backend: str, timeout: int, rdzv_endpoint: str | None = None,
                     node_rank: int | None = None, rdzv_id: str = "envbuilder-smoke",
                     script_args: Sequence[str] = ()) -> list[str]:
    """The torchrun command line for the smoke job, in flag spellings torch 1.12+ accepts.

    One node without an endpoint: ``--standalone``. Several nodes: c10d rendezvous at
    ``rdzv_endpoint``; with ``node_rank`` the static rendezvous (``--master_addr/--master_port``)
    that needs a fixed node rank instead.
    """
    if nproc_per_node < 1 or nnodes < 1:
        raise ValueError("nproc_per_node and nnodes must be at least 1")
    cmd = [python, "-m", "torch.distributed.run"]
    if nnodes == 1 and rdzv_endpoint is None:
        cmd += ["--standalone"]
    else:
        if not rdzv_endpoint:
            raise ValueError("a multi-node smoke run needs rdzv_endpoint (host:port)")
        cmd += ["--nnodes", str(nnodes)]
        if node_rank is not None:
            host, _, port = rdzv_endpoint.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"rdzv_endpoint must be host:port, got {rdzv_endpoint!r}")
            cmd += ["--node_rank", str(node_rank), "--master_addr", host, "--master_port", port]
        else:
            cmd += ["--rdzv_backend", "c10d", "--rdzv_endpoint", rdzv_endpoint,
                    "--rdzv_id", rdzv_id]
    cmd += ["--nproc_per_node", str(nproc_per_node), "--max_restarts", "0", script,
            "--out", out, "--backend", backend, "--timeout", str(int(timeout))]
    cmd += list(script_args)
    return cmd


def job_deadline(timeout: int) -> int:
    """Seconds the whole job may take before the runner kills it (each check is bounded)."""
    return 3 * int(timeout) + 120


# ----------------------------------------------------------------------------- host

def run_smoke_host(*, nproc: int = 12, backend: str = "auto", timeout: int = SMOKE_TIMEOUT,
                   python: str = sys.executable, env: Mapping[str, str] | None = None,
                   script_args: Sequence[str] = ()) -> SmokeResult:
    """Run the job with torchrun on this machine, ``nproc`` ranks on one node."""
    run_env = dict(os.environ)
    run_env.update(env or {})
    run_env["PYTHONUNBUFFERED"] = "1"
    from envbuilder import _child

    try:  # the one child runner: output capped, a deadline, a Ctrl-C forwarded to the ranks
        probe = _child.run([python, "-c", "import torch, torch.distributed"], env=run_env,
                           merge=True, timeout=300, cap=1 << 20)
    except OSError as exc:
        raise OperationError(f"cannot run {python} to import torch on this host: {exc}",
                             step="smoke") from None
    if probe.timed_out:
        raise OperationError(f"cannot run {python} to import torch on this host: it ran past "
                             f"300 s", step="smoke")
    if probe.returncode != 0:
        # one line: the import's last line, not the child's traceback
        raise OperationError(
            f"torch is not importable by {python} on this host ({_last_line(probe.stdout)}): "
            f"install torch into that Python, or run the smoke job in an image (smoke IMAGE)",
            step="smoke")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="envbuilder-smoke-") as tmp:
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        cmd = torchrun_command(python, str(payload_path()), nproc_per_node=nproc, out=out,
                               backend=backend, timeout=timeout, script_args=script_args)
        r = _child.run(cmd, env=run_env, merge=True, cwd=tmp, timeout=job_deadline(timeout),
                       cap=LOG_CAP)
        timed_out, exit_code = r.timed_out, r.returncode
        summary, ranks = _read_out_dir(out)
    log = r.stdout if not r.dropped else f"[{r.over_cap()}]\n{r.stdout}"
    return build_result(summary=summary, ranks=ranks, log=log, exit_code=exit_code,
                        nproc_per_node=nproc, nnodes=1, backend=backend,
                        seconds=time.monotonic() - started, where="host", timed_out=timed_out,
                        timeout=timeout)


LOG_CAP = 16 << 20  # the tail of the ranks' output kept


def _read_out_dir(out: str) -> tuple[dict | None, list[dict]]:
    files = {}
    for p in Path(out).glob("*.json"):
        try:
            files[p.name] = p.read_bytes()
        except OSError:
            pass
    return _parse_records(files)


def _parse_records(files: Mapping[str, bytes]) -> tuple[dict | None, list[dict]]:
    summary = None
    ranks = []
    for name, data in files.items():
        base = name.rsplit("/", 1)[-1]
        try:
            doc = json.loads(data)
        except ValueError:
            continue
        if base == "summary.json":
            summary = doc
        elif re.fullmatch(r"rank-\d+\.json", base):
            ranks.append(doc)
    ranks.sort(key=lambda r: r.get("rank", 0))
    return summary, ranks


def summary_from_log(log: str) -> dict | None:
    """The ``ENVBUILDER_SMOKE_SUMMARY <json>`` line rank 0 printed, if any."""
    for line in reversed(log.splitlines()):
        idx = line.find(SUMMARY_MARKER + " ")
        if idx >= 0:
            try:
                return json.loads(line[idx + len(SUMMARY_MARKER) + 1:])
            except ValueError:
                continue
    return None


# ----------------------------------------------------------------------------- verdict

def build_result(*, summary: dict | None, ranks: list[dict], log: str, exit_code: int,
                 nproc_per_node: int, nnodes: int, backend: str, seconds: float, where: str,
                 timed_out: bool = False, timeout: int | None = None,
                 world_size: int | None = None) -> SmokeResult:
    """Turn what came back (records, summary, log, exit status) into a ``SmokeResult``.

    ``world_size`` defaults to nproc_per_node x nnodes (give it for uneven layouts)."""
    world = world_size or nproc_per_node * nnodes
    if summary is None and not ranks:
        summary = summary_from_log(log)
    if ranks and (summary is None or summary.get("incomplete")):
        # rank 0 could not gather (or wrote nothing): judge from the records we have
        summary = ddp_smoke.build_summary(
            ranks, world_size=world,
            backend=(ranks[0].get("backend") or backend), torch_version=ranks[0].get("torch_version"),
            seconds=seconds)
    checks: dict[str, str] = {}
    failed: list[str] = []
    details: dict[str, str] = {}
    dead = dead_ranks(log) if exit_code != 0 else []
    if summary is not None:
        checks = dict(summary.get("checks", {}))
        failed = list(summary.get("failed", []))
        details = dict(summary.get("details", {}))
        if int(summary.get("world_size", world)) != world and "world_size" not in failed:
            failed.append("world_size")
            checks["world_size"] = "fail"
            details["world_size"] = f"job ran {summary.get('world_size')} ranks, wanted {world}"
    elif not dead:
        name = _launch_failure_name(log)
        failed.append(name)
        checks[name] = "fail"
        details[name] = _tail(log) or f"the job exited {exit_code} and wrote no record"
    if dead:  # a rank died (killed, OOM-killed): that is the cause, named first
        failed.insert(0, "rank_died")
        checks = {"rank_died": "fail", **checks}
        details["rank_died"] = "; ".join(dead)
    if timed_out and "timeout" not in failed:
        failed.append("timeout")
        checks["timeout"] = "fail"
        details["timeout"] = (f"the job ran past {job_deadline(timeout or 60)} s and was killed; "
                              f"log tail: {_tail(log, 500)}")
    if exit_code != 0 and not failed:
        failed.append("exit_code")
        checks["exit_code"] = "fail"
        details["exit_code"] = f"the job exited {exit_code} but reported no failed check: {_tail(log, 800)}"
    ok = exit_code == 0 and not failed
    return SmokeResult(
        ok=ok, world_size=int(summary.get("world_size", world)) if summary else world,
        nproc_per_node=nproc_per_node, nnodes=int(summary.get("nnodes", nnodes)) if summary else nnodes,
        backend=(summary or {}).get("backend") or backend, checks=checks, failed=failed,
        bandwidth=list((summary or {}).get("bandwidth", [])), summary=summary, ranks=ranks,
        log=log, exit_code=exit_code, seconds=round(seconds, 3), where=where, details=details)


_DEAD_RANK_RE = re.compile(r"rank\s*:\s*(\d+)(?:\s*\(local_rank:\s*(\d+)\))?\s*\n\s*"
                           r"exitcode\s*:\s*(-?\d+)(?:\s*\(pid:\s*(\d+)\))?")


def dead_ranks(log: str) -> list[str]:
    """The ranks torchrun reports dead by a signal (``exitcode : -9``), one sentence each,
    e.g. "rank 1 (pid 4242) was killed by SIGKILL"."""
    import signal as _signal

    out = []
    for m in _DEAD_RANK_RE.finditer(log):
        code = int(m.group(3))
        if code >= 0:
            continue
        try:
            name = _signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        pid = f" (pid {m.group(4)})" if m.group(4) else ""
        line = f"rank {m.group(1)}{pid} was killed by {name}"
        if line not in out:
            out.append(line)
    # torchrun ends the other ranks with SIGTERM once one failed: the cause is the others
    cause = [ln for ln in out if not ln.endswith("by SIGTERM")]
    return cause or out


def _launch_failure_name(log: str) -> str:
    if re.search(r"No module named '?torch'?|import torch|ModuleNotFoundError: .*torch", log):
        return "import_torch"
    if re.search(r"no python3 or python", log):
        return "python"
    return "launch"


def _tail(text: str, n: int = LOG_TAIL) -> str:
    text = text.strip()
    return text[-n:]


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no output"


# ----------------------------------------------------------------------------- container

def shell_wrap(cmd: Sequence[str]) -> str:
    """An ``sh -c`` line that runs ``cmd`` (whose first word is the placeholder "PY") with the
    image's python3 or python, and says so when the image has neither."""
    rest = " ".join(shlex.quote(c) for c in cmd[1:])
    return ('PY=$(command -v python3 || command -v python) || '
            '{ echo "envbuilder-smoke: no python3 or python in the image" >&2; exit 127; }; '
            f'exec "$PY" {rest}')


def _container_script(nproc: int, backend: str, timeout: int, script_args: Sequence[str]) -> str:
    return shell_wrap(torchrun_command("PY", f"{CONTAINER_DIR}/ddp_smoke.py", nproc_per_node=nproc,
                                       out=CONTAINER_OUT, backend=backend, timeout=timeout,
                                       script_args=script_args))


def _payload_tar() -> bytes:
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("envbuilder-smoke", "envbuilder-smoke/out"):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o777  # any user the image runs as may write the records
            info.mtime = now
            tar.addfile(info)
        for path in payload_files():
            data = path.read_bytes()
            info = tarfile.TarInfo(f"envbuilder-smoke/{path.name}")
            info.size = len(data)
            info.mode = 0o644
            info.mtime = now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _untar_json(data: bytes | None) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    if not data:
        return files
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith(".json"):
                    f = tar.extractfile(member)
                    if f is not None:
                        files[member.name] = f.read()
    except tarfile.TarError:
        return {}
    return files


def wants_gpus(client: DockerClient, backend: str, gpus: bool | None) -> bool:
    """Whether a smoke container gets GPUs: as asked; by default when the backend is nccl, or
    when it is auto and the engine has the NVIDIA runtime."""
    if gpus is not None:
        return bool(gpus)
    if backend == "nccl":
        return True
    if backend == "gloo":
        return False
    return engine.has_gpu_runtime(client)


def run_smoke_container(client: DockerClient | None, image: str, *, nproc: int = 12,
                        backend: str = "auto", timeout: int = SMOKE_TIMEOUT, gpus: bool | None = None,
                        shm_size: str = "2g", env: Mapping[str, str] | None = None,
                        script_args: Sequence[str] = ()) -> SmokeResult:
    """Run the job inside ``image``: copy the payload in, run torchrun, copy the records out.

    ``client`` is a ``docker.DockerClient`` (``None``: the engine at DOCKER_HOST). ``gpus=None``
    requests all GPUs when ``backend`` is nccl, or when it is auto and the engine has the nvidia
    runtime. The container is always removed.
    """
    if client is None:
        client = engine.connect()
    environment = {"PYTHONUNBUFFERED": "1", **(env or {})}
    started = time.monotonic()
    with engine.Container(client, image,
                          ["sh", "-c", _container_script(nproc, backend, timeout, script_args)],
                          step="smoke", gpus=wants_gpus(client, backend, gpus),
                          shm_size=shm_size, environment=environment,
                          labels={SMOKE_LABEL: "1"}) as c:
        c.put_archive("/tmp", _payload_tar())
        c.start()
        exit_code, timed_out = c.wait(job_deadline(timeout))
        log = c.logs()
        files = _untar_json(c.get_archive(CONTAINER_OUT))
    summary, ranks = _parse_records(files)
    return build_result(summary=summary, ranks=ranks, log=log, exit_code=exit_code,
                        nproc_per_node=nproc, nnodes=1, backend=backend,
                        seconds=time.monotonic() - started, where=image, timed_out=timed_out,
                        timeout=timeout)


# ----------------------------------------------------------------------------- policies

def progressive_sizes(nproc: int) -> list[int]:
    """2, 4, 8, ... then ``nproc`` itself: the way teams bisect a 12-GPU failure."""
    return ddp_smoke.progressive_sizes(nproc)


def run_progressive(run_one: Callable[[int], SmokeResult],
                    nproc: int) -> tuple[SmokeResult, list[SmokeResult]]:
    """Run at 2, then 4 ranks, then ``nproc``; stop at the first failing size.

    Returns (the last result run: the failing one or the full-size one, all results run).
    """
    results: list[SmokeResult] = []
    for n in progressive_sizes(nproc):
        result = run_one(n)
        results.append(result)
        if not result.ok:
            break
    return results[-1], results


def check_min_busbw(result: SmokeResult, min_gbps: float) -> SmokeResult:
    """Gate on bandwidth: add check ``min_busbw`` (the best busbw measured vs ``min_gbps``)."""
    best = result.max_busbw_gbps
    checks = dict(result.checks)
    failed = [f for f in result.failed if f != "min_busbw"]
    details = dict(result.details)
    if best is None:
        status = "fail"
        details["min_busbw"] = f"no bandwidth was measured; required {min_gbps:g} GB/s busbw"
    elif best < min_gbps:
        status = "fail"
        details["min_busbw"] = f"measured {best:.3f} GB/s busbw, required {min_gbps:g} GB/s"
    else:
        status = "pass"
        details.pop("min_busbw", None)
    checks["min_busbw"] = status
    if status == "fail":
        failed.append("min_busbw")
    return dataclasses.replace(result, checks=checks, failed=failed, details=details,
                               ok=result.ok and status == "pass")


def _with_check(result: SmokeResult, name: str, status: str, detail: str,
                **changes: Any) -> SmokeResult:
    """``result`` with check ``name`` set to ``status`` (a failure names its detail)."""
    checks = dict(result.checks)
    failed = [f for f in result.failed if f != name]
    details = dict(result.details)
    checks[name] = status
    details.pop(name, None)
    if status == "fail":
        failed.append(name)
        details[name] = detail
    return dataclasses.replace(result, checks=checks, failed=failed, details=details,
                               ok=result.ok and status != "fail", **changes)


def nccl_facts(result: SmokeResult) -> dict | None:
    """What NCCL said it used: the smoke job's own capture (its summary), else NCCL's INFO
    lines in the run's log (a job's log given to --records)."""
    from envbuilder.run import transport as tr

    return result.fact("nccl") or tr.from_log(result.log)


def check_transport(result: SmokeResult, fabric: str | None) -> SmokeResult:
    """Add check ``transport``: the transport NCCL used between intra- and inter-node peers,
    against the declared ``fabric`` (run.transport.judge)."""
    from envbuilder.run import transport as tr

    t = tr.judge(nccl_facts(result), backend=result.backend or "", fabric=fabric,
                 hosts=result.hosts(), nnodes=result.nnodes)
    return _with_check(result, "transport", t.status, t.detail, transport=t.record,
                       warnings=list(result.warnings) + list(t.warnings))


def check_floors(result: SmokeResult, floors: Any, fabric: str | None) -> SmokeResult:
    """``--min-busbw auto``: add check ``min_busbw``: each all-reduce size measured against the
    published figure for the run's GPU, layout and fabric (core.floors), the percentage reached,
    failing below the file's fraction of it; a layout without a figure is said to be unknown
    (skip), never guessed."""
    from envbuilder.core import floors as fl

    fabric_used = str(result.transport.get("fabric_used") or "none")
    fab = "none" if result.nnodes <= 1 else (fabric if fabric and fabric != "socket" else fabric_used)
    entry, why = floors.lookup(result.fact("gpu_names") or [], fabric=fab, nodes=result.nnodes,
                               gpus_per_node=result.nproc_per_node)
    if result.world_size <= 1 and entry is None:
        why = (f"{why}; and one rank moves nothing between GPUs: nccl-tests' all-reduce busbw is "
               f"0 by definition (factor 2(n-1)/n)")
    record: dict[str, Any] = {"fraction": floors.fraction, "rows": [], "floor": None, "why": why}
    if entry is None:
        return _with_check(result, "min_busbw", "skip", why, floors=record)
    rows = fl.compare(result.bandwidth, entry, floors.fraction)
    record.update(rows=rows, floor={"describe": entry.describe(), "source": list(entry.source)})
    if not rows:
        sizes = ", ".join(fl.size_text(n) for n in sorted(entry.busbw))
        why = (f"no measured size has a published figure for {entry.describe()} (it has {sizes}): "
               f"run the sweep to them (--sizes, --max-size)")
        record["why"] = why
        return _with_check(result, "min_busbw", "skip", why, floors=record)
    low = [r for r in rows if not r["ok"]]
    text = ", ".join(f"{r['size']} {r['busbw_gbps']:.1f} GB/s = {r['percent']:.0f}% of "
                     f"{r['published_gbps']:g}" for r in rows)
    detail = (f"{text} ({entry.describe()}, {entry.source[0]})" if not low else
              f"below {floors.fraction:.0%} of the published busbw for {entry.describe()} at "
              + ", ".join(f"{r['size']} ({r['busbw_gbps']:.1f} GB/s, {r['percent']:.0f}% of "
                          f"{r['published_gbps']:g})" for r in low)
              + f" ({entry.source[0]}): look at the transport NCCL used and the GPUs' links")
    record["why"] = "" if not low else detail
    return _with_check(result, "min_busbw", "fail" if low else "pass", detail, floors=record)


def result_from_nccl_log(log: str, where: str) -> SmokeResult | None:
    """A job's log without the smoke job's summary, judged by NCCL's own INFO lines alone (the
    transport check is added by check_transport); None when it has none."""
    from envbuilder.run import transport as tr

    info = tr.from_log(log)
    if info is None:
        return None
    hosts = {int(r): str(rec["host"]) for r, rec in (info.get("ranks") or {}).items()
             if rec.get("host") and "<" not in str(rec["host"])}
    nnodes = max(int(info.get("nnodes") or 0), len(set(hosts.values())),
                 len(info.get("hosts") or ()), 1)
    world = max([int(info.get("nranks") or 0), len(hosts), 1]
                + [int(r) + 1 for link in info.get("links") or () for r in link[:2]])
    summary = {"backend": "nccl", "world_size": world, "nnodes": nnodes, "nccl": info,
               "device_kind": "cuda", "gpu_names": [], "checks": {}, "failed": [],
               "rank_timings": [{"rank": r, "hostname": h} for r, h in sorted(hosts.items())],
               "only_nccl_lines": True}
    return SmokeResult(ok=True, world_size=world, nproc_per_node=max(1, world // nnodes),
                       nnodes=nnodes, backend="nccl", checks={}, failed=[], bandwidth=[],
                       summary=summary, ranks=[], log=log, exit_code=0, seconds=0.0, where=where)


def judge(result: SmokeResult, *, fabric: str | None = None, min_busbw: float | str | None = None,
          matrix_dir: str | None = None) -> SmokeResult:
    """What every smoke run is judged on after its own checks: the transport NCCL used against
    the declared ``fabric``, and the bus bandwidth (a number of GB/s, or ``auto``: the published
    floors, the default on GPUs)."""
    result = check_transport(result, fabric)
    if isinstance(min_busbw, (int, float)):
        return check_min_busbw(result, float(min_busbw))
    if min_busbw == "auto" or (min_busbw is None and result.device_kind == "cuda" and result.bandwidth):
        from envbuilder.core.matrix import load_floors

        return check_floors(result, load_floors(matrix_dir), fabric)
    return result
