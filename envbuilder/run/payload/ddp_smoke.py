"""envbuilder's distributed smoke job: proves an image can train across GPUs (or CPU ranks).

Run under torchrun, one process per rank::

    python -m torch.distributed.run --standalone --nproc_per_node 12 --max_restarts 0 \
        ddp_smoke.py --out /tmp/smoke --backend auto --timeout 60

Every rank runs the same checks in the same order and reports each by name (pass / fail / skip,
a detail and its duration) in ``OUT/rank-<RANK>.json``; rank 0 also writes ``OUT/summary.json``
and prints one line ``ENVBUILDER_SMOKE_SUMMARY <json>``. A rank exits 1 when one of its checks
failed. Collectives run with a short process-group timeout and a watchdog thread ends a rank
that makes no progress, so a broken job fails in seconds instead of hanging.

This file runs inside images we do not control: it imports only the standard library and torch
(deepspeed and horovod when they import), and it keeps to Python 3.8 and torch 1.12 features.

Fault injection (tests): ``ENVBUILDER_SMOKE_INJECT=<check>[:<rank>]`` makes that check produce a
wrong answer on that rank (default 0); ``ENVBUILDER_SMOKE_INJECT=crash:<rank>`` makes that rank
exit hard (``os._exit(3)``) right after rendezvous; ``hang:<rank>`` makes it stall there until
its watchdog ends it; ``late:<rank>`` makes it wait the job's timeout before it imports torch
(a rank slow to start, which the launcher may stop when a faster rank fails).

Horovod: horovod's gloo controller needs the rendezvous HTTP server that ``horovodrun`` starts.
Under torchrun we play that launcher: rank 0 starts horovod's own ``RendezvousServer`` with a
slot plan built from torch's rank layout, every rank exports the ``HOROVOD_*`` variables that
horovodrun would set and calls ``hvd.init()``. When the job already runs under horovodrun
(``HOROVOD_RANK`` set) we use that. When any rank cannot import or start it the check is skipped
on all ranks with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from datetime import timedelta

try:  # beside this file in an image (the smoke/ folder); the package's copy when envbuilder imports it
    import nccl_info
except ImportError:  # pragma: no cover - depends on how the payload was started
    try:
        from envbuilder.run.payload import nccl_info
    except ImportError:
        nccl_info = None

SUMMARY_MARKER = "ENVBUILDER_SMOKE_SUMMARY"
INJECT_ENV = "ENVBUILDER_SMOKE_INJECT"
CHECKS = (
    "shm",
    "rendezvous",
    "progressive",
    "gpu_uuid",
    "all_reduce",
    "all_gather",
    "broadcast",
    "barrier",
    "ddp",
    "deepspeed_zero",
    "horovod_allreduce",
    "bandwidth",
)
KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * MIB
DEFAULT_GPU_SIZES = (1 * MIB, 8 * MIB, 32 * MIB)
DEFAULT_CPU_SIZES = (64 * KIB, 512 * KIB, 2 * MIB)
# on GPUs the all-reduce sweep goes on to large messages, where published figures (the floors
# of matrices/bandwidth.yaml) are measured: up to --max-size, the free GPU memory and a time
# bound (a size whose calls would take longer than LARGE_CALL_SECONDS each is not run)
DEFAULT_GPU_LARGE_SIZES = (128 * MIB, 1 * GIB, 4 * GIB, 16 * GIB)
DEFAULT_MAX_SIZE = 16 * GIB
LARGE_CALL_SECONDS = 1.0
# /dev/shm as jobs meet it. NCCL's SHM transport creates one segment per receiving connection,
# 9,637,888 bytes at the default buffer sizes (NCCL's own "Error while creating shared memory
# segment /dev/shm/nccl-... (size 9637888)": https://github.com/NVIDIA/nccl/issues/342,
# https://github.com/NVIDIA/nccl/issues/1518, https://github.com/kserve/kserve/issues/3791);
# nominally two channels, each with a ring and a tree connection, per local rank. A DataLoader
# with workers passes each batch through shared memory, prefetch_factor (default 2) batches per
# worker (https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader): nominally 2
# workers per rank and a batch of 32 float32 224x224 RGB crops (19,267,584 bytes).
SHM_PATH = "/dev/shm"
NCCL_SHM_SEGMENT = 9637888
NCCL_SHM_SEGMENTS_PER_RANK = 4
DATALOADER_WORKERS = 2
DATALOADER_PREFETCH = 2
DATALOADER_BATCH = 32 * 3 * 224 * 224 * 4
_UNITS = {"": 1, "B": 1, "K": KIB, "KB": KIB, "KIB": KIB, "M": MIB, "MB": MIB, "MIB": MIB,
          "G": 1024 * MIB, "GB": 1024 * MIB, "GIB": 1024 * MIB}


# ----------------------------------------------------------------------------- pure helpers

def alg_bandwidth_gbps(nbytes, seconds):
    """Algorithm bandwidth in GB/s (1e9 bytes): message bytes over the time of one all-reduce."""
    if seconds <= 0:
        return 0.0
    return nbytes / seconds / 1e9


def bus_bandwidth_gbps(algbw, world_size, collective="all_reduce"):
    """Bus bandwidth as nccl-tests defines it (doc/PERFORMANCE.md,
    https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): all-reduce
    algbw * 2(n-1)/n; all-gather and reduce-scatter algbw * (n-1)/n."""
    if world_size <= 0:
        return 0.0
    return algbw * BUSBW_FACTOR[collective](world_size)


# nccl-tests' bus bandwidth factors and what its "size" is, per collective: the size column is
# the bytes of the largest buffer each rank holds (all-reduce: the buffer; all-gather: the
# gathered output, n x what each rank sends; reduce-scatter: the input, n x what each receives)
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}
COLLECTIVES = tuple(BUSBW_FACTOR)


def parse_size(text):
    """``"64K"``, ``"1MiB"``, ``"8M"``, ``"4096"`` -> bytes."""
    m = re.match(r"^\s*(\d+)\s*([A-Za-z]*)\s*$", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError("bad size %r: use bytes or a K/M/G suffix, e.g. 1M" % text)
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def parse_sizes(text):
    return [parse_size(part) for part in text.split(",") if part.strip()]


def parse_inject(value):
    """``"all_reduce:3"`` -> ("all_reduce", 3); ``"ddp"`` -> ("ddp", 0); empty -> (None, None)."""
    value = (value or "").strip()
    if not value:
        return None, None
    name, _, rank = value.partition(":")
    return name.strip(), int(rank) if rank.strip() else 0


def merge_status(statuses):
    """The status of one check over all ranks: fail beats pass beats skip."""
    statuses = list(statuses)
    if "fail" in statuses:
        return "fail"
    if "pass" in statuses:
        return "pass"
    return "skip" if statuses else "fail"


def build_summary(records, *, world_size, backend, torch_version, seconds, hosts=None):
    """Rank 0's summary from the records of all ranks (or the ones it has)."""
    checks = {}
    details = {}
    order = []
    for rec in records:
        for c in rec.get("checks", []):
            if c["name"] not in checks:
                order.append(c["name"])
                checks[c["name"]] = []
            checks[c["name"]].append(c["status"])
            if c["status"] == "fail" and c["name"] not in details:
                details[c["name"]] = "rank %s: %s" % (rec.get("rank"), c.get("detail", ""))
    merged = {name: merge_status(checks[name]) for name in order}
    failed = [name for name in order if merged[name] == "fail"]
    seen = sorted(r.get("rank") for r in records)
    if seen != list(range(world_size)):
        missing = sorted(set(range(world_size)) - set(seen))
        merged["rank_records"] = "fail"
        failed.append("rank_records")
        details["rank_records"] = "no record from ranks %s" % missing
    hosts = hosts if hosts is not None else [r.get("hostname") for r in records]
    per_node = {}
    for h in hosts:
        per_node[h] = per_node.get(h, 0) + 1
    bandwidth = []
    for rec in records:
        if rec.get("rank") == 0:
            bandwidth = rec.get("bandwidth", [])
    # per-rank timings travel in the summary (and its log line), so a runner that only has the
    # log (kubectl logs) still has every figure the metrics need
    timings = [{"rank": rec.get("rank"), "hostname": rec.get("hostname"),
                "local_rank": rec.get("local_rank"),
                "rendezvous_seconds": rec.get("rendezvous_seconds"),
                "step_seconds": rec.get("step_seconds", []),
                "checks": {c["name"]: c.get("seconds", 0.0) for c in rec.get("checks", [])}}
               for rec in records]
    summary = {
        "ok": not failed,
        "world_size": world_size,
        "nnodes": len(per_node),
        "ranks_per_node": per_node,
        "backend": backend,
        "torch_version": torch_version,
        "checks": merged,
        "failed": failed,
        "details": details,
        "bandwidth": bandwidth,
        "rank_timings": timings,
        "seconds": round(seconds, 3),
    }
    summary.update(_run_facts(records))
    return summary


def _run_facts(records):
    """What the ranks say about the run beyond the checks: the device kind and GPU models, what
    NCCL used (each rank's own INFO lines, merged), /dev/shm as rank 0 found it (ok only when
    every rank's share was allocated) and what the components initialised."""
    devices = [str(r.get("device") or "") for r in records]
    out = {"device_kind": "cuda" if any(d.startswith("cuda") for d in devices) else "cpu",
           "gpu_names": sorted(set(r["gpu_name"] for r in records if r.get("gpu_name")))}
    infos = [r.get("nccl") for r in records if r.get("nccl")]
    if infos and nccl_info is not None:
        out["nccl"] = nccl_info.merge(infos)
    shm = [r.get("shm") for r in records if r.get("shm")]
    if shm:
        out["shm"] = dict(shm[0], ok=all(s.get("ok") for s in shm))
    ds = [r.get("deepspeed") for r in records if r.get("deepspeed")]
    if ds:  # what each component initialised (DeepSpeed: its accelerator, ops, optimizer)
        out["components"] = {"deepspeed": ds[0]}
    return out


def _write_json(path, data):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _version_tuple(v):
    nums = re.findall(r"\d+", v.split("+")[0])[:2]
    return tuple(int(n) for n in nums) + (0,) * (2 - len(nums))


def progressive_sizes(n):
    """2, 4, 8, ... below ``n``, then ``n`` itself: how teams bisect a 12-GPU failure."""
    out, k = [], 2
    while k < n:
        out.append(k)
        k *= 2
    return out + [n]


def large_sizes(largest, cuda, max_size):
    """The all-reduce sizes after the default sweep: on GPUs DEFAULT_GPU_LARGE_SIZES (up to
    --max-size, 16G by default); on CPU only with an explicit --max-size, x4 steps up to it."""
    if cuda:
        return [n for n in DEFAULT_GPU_LARGE_SIZES if n > largest]
    out, n = [], largest * 4
    while max_size and n <= max_size:
        out.append(n)
        n *= 4
    return out


def size_text(nbytes):
    """1048576 -> '1.0 MiB', 9637888 -> '9.2 MiB'."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= size:
            return "%.1f %s" % (nbytes / float(size), unit)
    return "%d B" % nbytes


def shm_needed(local_ranks, nccl, workers=DATALOADER_WORKERS, batch=DATALOADER_BATCH):
    """(bytes, how) of /dev/shm a node's ranks need at once: NCCL's SHM segments (NCCL runs)
    and DataLoader workers' prefetched batches, per local rank."""
    per_rank = workers * DATALOADER_PREFETCH * batch
    parts = []
    if nccl:
        per_rank += NCCL_SHM_SEGMENTS_PER_RANK * NCCL_SHM_SEGMENT
        parts.append("NCCL's SHM segments, %d x %s" % (NCCL_SHM_SEGMENTS_PER_RANK,
                                                       size_text(NCCL_SHM_SEGMENT)))
    if workers:
        parts.append("%d DataLoader workers x %d prefetched batches of %s" % (
            workers, DATALOADER_PREFETCH, size_text(batch)))
    how = "%d local rank(s) x (%s)" % (local_ranks, " + ".join(parts) or "nothing")
    return local_ranks * per_rank, how


def shm_advice(needed):
    """The --shm-size to suggest for ``needed`` bytes: twice as much, in whole GiB."""
    return "%dg" % max(1, -(-2 * needed // GIB))


# NCCL's INFO lines the smoke job asks for: where it reads the transport (INIT, NET), the
# topology (GRAPH) and the settings that steer it (ENV)
NCCL_SUBSYS = ("INIT", "NET", "GRAPH", "ENV")


def nccl_debug_env(environ, path):
    """(the NCCL_DEBUG* settings that write NCCL's INFO lines to ``path``, the level the user
    had): the smoke job reads its transport from them, and relays to the log what the user's
    own NCCL_DEBUG would have shown (WARN lines at the images' default level)."""
    level = (environ.get("NCCL_DEBUG") or "").strip()
    subsys = (environ.get("NCCL_DEBUG_SUBSYS") or "").strip()
    if not subsys or subsys.startswith("^"):
        parts = list(NCCL_SUBSYS)
    else:
        have = [p.strip() for p in subsys.split(",") if p.strip()]
        parts = have + [p for p in NCCL_SUBSYS if p not in [h.upper() for h in have]]
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": ",".join(parts),
            "NCCL_DEBUG_FILE": path.replace("%", "%%")}, level


def relayed(lines, level):
    """The NCCL lines the user's own NCCL_DEBUG level would have printed."""
    if level.upper() in ("INFO", "TRACE"):
        return list(lines)
    return [ln for ln in lines if " NCCL WARN " in ln]


# ----------------------------------------------------------------------------- the job

class CheckFailed(Exception):
    """A check got a wrong answer."""


class CollectiveError(Exception):
    """A collective raised: the process group is not trustworthy any more."""


class Terminated(BaseException):
    """SIGTERM (torchrun stops the job, usually because another rank failed)."""


_BROKEN_PATTERNS = re.compile(
    r"timed? ?out|timeout|connection (closed|reset|refused)|broken pipe|peer|nccl|gloo|"
    r"socket|abort|process group|watchdog|distbackenderror|distnetworkerror",
    re.IGNORECASE,
)


class Watchdog(threading.Thread):
    """Ends the rank (after writing its record) when a check makes no progress for too long."""

    def __init__(self, on_expire):
        super(Watchdog, self).__init__(name="envbuilder-smoke-watchdog", daemon=True)
        self._on_expire = on_expire
        self._lock = threading.Lock()
        self._check = None
        self._limit = 0.0
        self._deadline = None

    def arm(self, check, limit):
        with self._lock:
            self._check, self._limit = check, float(limit)
            self._deadline = time.monotonic() + self._limit

    def beat(self):
        with self._lock:
            if self._deadline is not None:
                self._deadline = time.monotonic() + self._limit

    def disarm(self):
        with self._lock:
            self._deadline = None

    def run(self):
        while True:
            time.sleep(0.25)
            with self._lock:
                expired = self._deadline is not None and time.monotonic() > self._deadline
                check, limit = self._check, self._limit
            if expired:
                try:
                    self._on_expire(check, limit)
                finally:
                    os._exit(4)


class Smoke(object):
    def __init__(self, args, torch, dist):
        self.args = args
        self.torch = torch
        self.dist = dist
        self.t0 = time.monotonic()
        env = os.environ
        self.rank = int(env.get("RANK", "0"))
        self.world = int(env.get("WORLD_SIZE", "1"))
        self.local_rank = int(env.get("LOCAL_RANK", "0"))
        self.local_world = int(env.get("LOCAL_WORLD_SIZE", str(self.world)))
        self.hostname = socket.gethostname()
        self.inject_check, self.inject_rank = parse_inject(env.get(INJECT_ENV))
        self.results = []
        self.bandwidth = []
        self.rendezvous_seconds = None  # init_process_group, this rank
        self.step_seconds = []  # each DDP step (forward, backward, optimizer), this rank
        self.broken = None  # the name of the check that broke the process group
        self.hosts = None
        self.backend = None
        self.device = None
        self.out = args.out
        self.gpu_name = None
        self.shm = None  # the /dev/shm check's facts
        self.ds_info = None  # what DeepSpeed initialised
        self.nccl = None  # what NCCL said it used (nccl_info), from this rank's own INFO lines
        self.nccl_file = None
        self.nccl_level = ""
        self._nccl_read = 0  # bytes of nccl_file read so far
        self.progress_at = None  # the size the progressive check is at
        self._record_lock = threading.Lock()
        self._record_written = False
        self.watchdog = Watchdog(self._on_watchdog)

    # -- helpers
    def injected(self, check):
        return self.inject_check == check and self.inject_rank == self.rank

    def coll(self, fn, *a, **kw):
        """Run one collective; any exception means the process group is broken."""
        try:
            result = fn(*a, **kw)
        except Terminated:
            raise
        except Exception as exc:
            raise CollectiveError("%s: %s: %s" % (getattr(fn, "__name__", "collective"),
                                                 type(exc).__name__, _one_line(exc)))
        self.watchdog.beat()
        return result

    def sync(self):
        if self.device is not None and self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def record(self):
        failed = [c["name"] for c in self.results if c["status"] == "fail"]
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world,
            "local_world_size": self.local_world,
            "hostname": self.hostname,
            "backend": self.backend,
            "device": str(self.device) if self.device is not None else None,
            "gpu_name": self.gpu_name,
            "nccl": self.nccl,
            "shm": self.shm,
            "deepspeed": self.ds_info,
            "torch_version": getattr(self.torch, "__version__", None),
            "python_version": sys.version.split()[0],
            "checks": list(self.results),
            "bandwidth": list(self.bandwidth),
            "rendezvous_seconds": self.rendezvous_seconds,
            "step_seconds": list(self.step_seconds),
            "ok": not failed and len(self.results) > 0,
            "seconds": round(time.monotonic() - self.t0, 3),
        }

    def write_record(self):
        self.read_nccl()
        with self._record_lock:
            _write_json(os.path.join(self.out, "rank-%d.json" % self.rank), self.record())
            self._record_written = True

    def read_nccl(self):
        """Read what NCCL wrote to this rank's file since the last call: parse it (nccl_info)
        and relay to the log the lines the user's NCCL_DEBUG level asked for."""
        if not self.nccl_file or nccl_info is None:
            return
        try:
            with open(self.nccl_file, "rb") as f:
                f.seek(self._nccl_read)
                data = f.read(16 * MIB)
        except (IOError, OSError):
            return
        if not data:
            return
        text = data.decode("utf-8", "replace")
        cut = text.rfind("\n") + 1  # whole lines only; a partial one waits for the next call
        self._nccl_read += len(text[:cut].encode("utf-8", "replace"))
        lines = text[:cut].splitlines()
        self.nccl = nccl_info.parse_lines(lines, self.nccl)
        for line in relayed(lines, self.nccl_level):
            stream = sys.stderr if " NCCL WARN " in line else sys.stdout
            stream.write(line + "\n")
        sys.stdout.flush()
        sys.stderr.flush()

    def _on_watchdog(self, check, limit):
        detail = ("no progress for %.0f s: a collective hung (a peer died or stalled); "
                  "the watchdog ended this rank" % limit)
        if check == "progressive" and self.progress_at:
            detail += " (the progressive check was at %d ranks)" % self.progress_at
        self.results.append({"name": check, "status": "fail", "detail": detail,
                             "seconds": round(limit, 3)})
        self._skip_rest(check, "not run: the watchdog ended the rank during %s" % check)
        sys.stderr.write("envbuilder-smoke rank %d: %s: %s\n" % (self.rank, check, detail))
        sys.stderr.flush()
        self.write_record()

    def _skip_rest(self, after, reason):
        done = set(c["name"] for c in self.results)
        for name in CHECKS:
            if name == "progressive" and not self.args.progressive:
                continue
            if name not in done:
                self.results.append({"name": name, "status": "skip", "detail": reason,
                                     "seconds": 0.0})

    # -- driver
    def run_check(self, name, fn):
        if self.broken is not None:
            self.results.append({"name": name, "status": "skip", "seconds": 0.0,
                                 "detail": "not run: the process group broke in %s" % self.broken})
            return
        slow = name in ("deepspeed_zero", "horovod_allreduce")
        limit = self.args.timeout * 3 + 120 if slow else self.args.timeout + 30
        self.watchdog.arm(name, limit)
        start = time.monotonic()
        status, detail = "fail", ""
        try:
            out = fn()
            status, detail = out if isinstance(out, tuple) else ("pass", out or "")
        except CheckFailed as exc:
            status, detail = "fail", str(exc)
        except CollectiveError as exc:
            status, detail = "fail", str(exc)
            self.broken = name
        except Terminated:
            status, detail = "fail", ("terminated by SIGTERM: the launcher stopped the job, "
                                      "usually because another rank failed")
            self.broken = name
        except Exception as exc:
            status, detail = "fail", "%s: %s" % (type(exc).__name__, _one_line(exc))
            if _BROKEN_PATTERNS.search(detail) or "Dist" in type(exc).__name__:
                self.broken = name
            if self.args.verbose:
                traceback.print_exc()
        finally:
            self.watchdog.disarm()
        self.results.append({"name": name, "status": status, "detail": detail,
                             "seconds": round(time.monotonic() - start, 4)})
        if status == "fail":
            self.say_failed(name, detail)

    def say_failed(self, check, detail):
        """One line on stderr for each failed check, so the log names the cause even when
        this rank's record never reaches the summary."""
        sys.stderr.write("envbuilder-smoke rank %d: %s failed: %s\n" % (self.rank, check, detail))
        sys.stderr.flush()

    def run(self):
        torch, dist = self.torch, self.dist
        args = self.args
        backend = args.backend
        cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
        if backend == "auto":
            backend = "nccl" if cuda else "gloo"
        self.backend = backend
        if backend == "nccl":
            if not cuda:
                raise SystemExit("envbuilder-smoke: --backend nccl but torch sees no CUDA device")
            _nccl_env(torch.__version__)
            self.device = torch.device("cuda", self.local_rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
            self.gpu_name = torch.cuda.get_device_name(self.device)
            if nccl_info is not None:  # NCCL's INFO lines to a file of this rank's own
                self.nccl_file = os.path.join(self.out, "nccl-rank-%d.log" % self.rank)
                updates, self.nccl_level = nccl_debug_env(os.environ, self.nccl_file)
                os.environ.update(updates)
        else:
            self.device = torch.device("cpu")
        self.watchdog.start()
        self.watchdog.arm("rendezvous", args.timeout + 30)
        start = time.monotonic()
        try:
            dist.init_process_group(backend=backend, timeout=timedelta(seconds=args.timeout))
        except Exception as exc:
            self.watchdog.disarm()
            self.results.append({"name": "rendezvous", "status": "fail",
                                 "detail": "init_process_group(%s): %s: %s"
                                 % (backend, type(exc).__name__, _one_line(exc)),
                                 "seconds": round(time.monotonic() - start, 4)})
            # every rank says why: when the launcher stops rank 0 before it writes the
            # summary, this line is what names the cause (a missing interface, a refused port)
            self.say_failed("rendezvous", self.results[-1]["detail"])
            self.broken = "rendezvous"
            self._skip_rest("rendezvous", "not run: init_process_group failed")
            return self.finish()
        self.watchdog.disarm()
        init_s = time.monotonic() - start
        self.rendezvous_seconds = round(init_s, 4)
        # every rank has started; NCCL creates its communicator (and its SHM segments) only at
        # the first collective, after this
        self.run_check("shm", self.check_shm)

        self.run_check("rendezvous", lambda: self.check_rendezvous(init_s))
        if args.progressive:
            self.run_check("progressive", self.check_progressive)
            if self.results[-1]["status"] == "fail":  # stop at the first size that fails
                self._skip_rest("progressive", "not run: the progressive check stopped at %s ranks"
                                % self.progress_at)
                return self.finish()
        if self.inject_check == "crash" and self.inject_rank == self.rank:
            sys.stdout.flush()
            sys.stderr.write("envbuilder-smoke rank %d: injected crash\n" % self.rank)
            sys.stderr.flush()
            os._exit(3)
        if self.inject_check == "hang" and self.inject_rank == self.rank:
            self.watchdog.arm("hang", self.args.timeout + 30)
            while True:  # a stalled rank: its peers time out, its watchdog ends it
                time.sleep(1)
        self.run_check("gpu_uuid", self.check_gpu_uuid)
        self.run_check("all_reduce", self.check_all_reduce)
        self.run_check("all_gather", self.check_all_gather)
        self.run_check("broadcast", self.check_broadcast)
        self.run_check("barrier", self.check_barrier)
        self.run_check("ddp", self.check_ddp)
        self.run_check("deepspeed_zero", self.check_deepspeed)
        self.run_check("horovod_allreduce", self.check_horovod)
        self.run_check("bandwidth", self.check_bandwidth)
        return self.finish()

    def finish(self):
        self.write_record()
        ok = all(c["status"] != "fail" for c in self.results)
        if self.broken is None:
            self.watchdog.arm("summary", self.args.timeout + 30)
            try:
                records = [None] * self.world
                self.dist.all_gather_object(records, self.record())
                if self.rank == 0:
                    self.write_summary(records)
            except Exception as exc:
                if self.rank == 0:
                    sys.stderr.write("envbuilder-smoke: gathering the records failed: %s\n"
                                     % _one_line(exc))
                    self.write_summary([self.record()])
                self.broken = "summary"
            self.watchdog.disarm()
        elif self.rank == 0:
            self.write_summary(self._records_on_disk())
        if self.broken is None:
            # leave together: a rank that tears its connections down while a peer still
            # talks makes gloo abort that peer ("terminate called without an active exception")
            self.watchdog.arm("exit", self.args.timeout + 30)
            try:
                self.dist.barrier()
            except Exception:
                pass
            self.watchdog.disarm()
            if self.local_rank == 0:  # every rank of this node is past the /dev/shm check
                for lr in range(self.local_world):
                    try:
                        os.remove(os.path.join(self.out, "%s%d.mark" % (self._shm_stem(), lr)))
                    except OSError:
                        pass
        sys.stdout.flush()
        sys.stderr.flush()
        # the records are final: skip process-group teardown and interpreter finalisation,
        # which can hang (a broken NCCL communicator) or abort (gloo threads) after the verdict
        os._exit(0 if ok else 1)

    def _records_on_disk(self):
        """The process group is gone: read the records the other ranks of this node wrote."""
        old = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            deadline = time.monotonic() + 2.0
            while True:
                records = {self.rank: self.record()}
                for r in range(self.world):
                    path = os.path.join(self.out, "rank-%d.json" % r)
                    if r not in records and os.path.exists(path):
                        try:
                            with open(path) as f:
                                records[r] = json.load(f)
                        except (OSError, ValueError):
                            pass
                if len(records) == self.world or time.monotonic() > deadline:
                    return [records[r] for r in sorted(records)]
                time.sleep(0.1)
        finally:
            signal.signal(signal.SIGTERM, old)

    def write_summary(self, records):
        summary = build_summary(records, world_size=self.world, backend=self.backend,
                                torch_version=getattr(self.torch, "__version__", None),
                                seconds=time.monotonic() - self.t0, hosts=self.hosts)
        if self.broken is not None:
            summary["incomplete"] = "the process group broke in %s" % self.broken
        _write_json(os.path.join(self.out, "summary.json"), summary)
        print("%s %s" % (SUMMARY_MARKER, json.dumps(summary, sort_keys=True)), flush=True)

    # -- checks
    def check_shm(self):
        """/dev/shm as the job meets it: every local rank allocates and writes its share of
        what the layout needs (NCCL's SHM segments, DataLoader batches) at the same time."""
        needed, how = shm_needed(self.local_world, self.backend == "nccl", self.args.shm_workers,
                                 self.args.shm_batch)
        free, size = _shm_space(SHM_PATH)
        self.shm = {"path": SHM_PATH, "free_bytes": free, "size_bytes": size,
                    "needed_bytes": needed, "local_ranks": self.local_world, "how": how, "ok": False}
        share = -(-needed // max(1, self.local_world))
        fd, error = None, None
        try:
            fd = _shm_fill(SHM_PATH, share)
        except (IOError, OSError) as exc:
            error = "%s: %s" % (type(exc).__name__, exc)
        try:
            others = self._shm_together(error)
        finally:
            if fd is not None:
                os.close(fd)  # the memory goes back with it (the file was unlinked at once)
        bad = [(lr, why) for lr, why in others if why]
        found = ("%s free (size %s)" % (size_text(free), size_text(size)) if free is not None
                 else "no %s" % SHM_PATH)
        if bad or free is None or free < needed:
            lr, why = bad[0] if bad else (self.local_rank, error or "")
            self.shm["error"] = why or "too small"
            raise CheckFailed(
                "%s: found %s, needed %s (%s)%s. Fix: a larger /dev/shm: docker run --shm-size=%s "
                "(envbuilder smoke/build --shm-size %s), or the pod's memory-backed /dev/shm "
                "volume (the job files' dshm emptyDir, sizeLimit)" % (
                    SHM_PATH, found, size_text(needed), how,
                    "; allocating local rank %s's share failed: %s" % (lr, why) if why else "",
                    shm_advice(needed), shm_advice(needed)))
        self.shm["ok"] = True
        return "%s: found %s, needed %s, allocated and written by %d local rank(s) at once (%s)" % (
            SHM_PATH, found, size_text(needed), len(others), how)

    def _shm_stem(self):
        run = os.environ.get("TORCHELASTIC_RUN_ID") or "%s-%s" % (
            os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", ""))
        return "shm-%s-%s-" % (re.sub(r"[^A-Za-z0-9_.-]", "_", self.hostname),
                               re.sub(r"[^A-Za-z0-9_.-]", "_", run))

    def _shm_together(self, error):
        """Wait (bounded) until every local rank holds its share, through marker files in the
        out folder: [(local rank, its error or "")] of those that arrived."""
        stem = self._shm_stem()
        try:
            _write_json(os.path.join(self.out, "%s%d.mark" % (stem, self.local_rank)),
                        {"error": error or ""})
        except (IOError, OSError):
            return [(self.local_rank, error or "")]
        deadline = time.monotonic() + min(self.args.timeout, 60)
        while True:
            found = {}
            for lr in range(self.local_world):
                try:
                    with open(os.path.join(self.out, "%s%d.mark" % (stem, lr))) as f:
                        found[lr] = json.load(f).get("error", "")
                except (IOError, OSError, ValueError):
                    pass
            if len(found) == self.local_world or time.monotonic() > deadline:
                return sorted(found.items())
            self.watchdog.beat()
            time.sleep(0.05)

    def check_progressive(self):
        """All-reduce in the first 2, 4, 8 ... ranks, then go on to the full job: stops at the
        first size that fails, naming it."""
        torch, dist = self.torch, self.dist
        passed = []
        for n in progressive_sizes(self.world)[:-1]:
            self.progress_at = n
            group = self.coll(dist.new_group, ranks=list(range(n)))
            ok = 1
            if self.rank < n:
                value = self.rank + 1 + (1 if self.injected("progressive") else 0)
                t = torch.full((1024,), float(value), dtype=torch.float32, device=self.device)
                self.coll(dist.all_reduce, t, group=group)
                self.sync()
                ok = int(bool((t == n * (n + 1) // 2).all().item()))
            flag = torch.tensor([1 - ok], dtype=torch.int64, device=self.device)
            self.coll(dist.all_reduce, flag)
            if int(flag.item()):
                raise CheckFailed("stopped at %d ranks (ranks 0-%d): the all-reduce of rank+1 gave "
                                  "a wrong sum on %d rank(s)%s" % (
                                      n, n - 1, int(flag.item()),
                                      "; it passed at %s ranks" % passed if passed else ""))
            passed.append(n)
        self.progress_at = self.world
        return "all-reduce right at %s ranks, then the full job of %d" % (
            ", ".join(str(n) for n in passed) or "no smaller size", self.world)

    def check_rendezvous(self, init_s):
        dist = self.dist
        problems = []
        if dist.get_rank() != self.rank or dist.get_world_size() != self.world:
            problems.append("process group says rank %d of %d, env says RANK=%d WORLD_SIZE=%d"
                            % (dist.get_rank(), dist.get_world_size(), self.rank, self.world))
        me = {"rank": self.rank, "local_rank": self.local_rank, "world_size": self.world,
              "local_world_size": self.local_world, "hostname": self.hostname}
        if self.injected("rendezvous"):
            me["rank"] = (self.rank + 1) % max(self.world, 2)
        infos = [None] * self.world
        self.coll(dist.all_gather_object, infos, me)
        per_node = {}
        for slot, info in enumerate(infos):
            if info["rank"] != slot:
                problems.append("slot %d holds rank %d" % (slot, info["rank"]))
            if info["world_size"] != self.world:
                problems.append("rank %d sees WORLD_SIZE=%d" % (slot, info["world_size"]))
            per_node.setdefault(info["hostname"], []).append(info)
        for host, infos_h in per_node.items():
            locals_ = sorted(i["local_rank"] for i in infos_h)
            if locals_ != list(range(len(infos_h))):
                problems.append("%s: local ranks %s" % (host, locals_))
            for i in infos_h:
                if i["local_world_size"] != len(infos_h):
                    problems.append("%s: rank %d says LOCAL_WORLD_SIZE=%d but %d ranks run there"
                                    % (host, i["rank"], i["local_world_size"], len(infos_h)))
        self.hosts = [i["hostname"] for i in infos]
        if self.device is not None and self.device.type == "cuda":
            n = self.torch.cuda.device_count()
            if self.local_world > n:
                problems.append("%d ranks per node but only %d GPUs visible" % (self.local_world, n))
        if problems:
            raise CheckFailed("; ".join(problems[:8]))
        layout = ", ".join("%s: %d" % (h, len(v)) for h, v in sorted(per_node.items()))
        return "rank %d of %d, %d node(s) (%s), init %.2f s" % (
            self.rank, self.world, len(per_node), layout, init_s)

    def check_gpu_uuid(self):
        if self.device is None or self.device.type != "cuda":
            return "skip", "no GPU: running on CPU"
        uuid, how = _gpu_uuid(self.torch, self.device.index)
        me = {"rank": self.rank, "host": self.hostname, "uuid": uuid}
        infos = [None] * self.world
        self.coll(self.dist.all_gather_object, infos, me)
        if self.inject_check == "gpu_uuid" and self.world > 1:
            victim = self.inject_rank
            infos[victim] = dict(infos[victim], uuid=infos[(victim + 1) % self.world]["uuid"])
        owners = {}
        for info in infos:
            # a device index fallback is only unique per host
            key = info["uuid"] if how != "index" else (info["host"], info["uuid"])
            owners.setdefault(key, []).append(info["rank"])
        shared = [(k, r) for k, r in owners.items() if len(r) > 1]
        if shared:
            raise CheckFailed("ranks share a GPU: " + "; ".join(
                "%s used by ranks %s" % (k, r) for k, r in shared[:6]))
        return "rank %d on %s (%s, via %s)" % (self.rank, self.device, uuid, how)

    def check_all_reduce(self):
        torch, dist = self.torch, self.dist
        n = self.world
        expected = n * (n + 1) // 2
        dtypes = [torch.float32, torch.float64, torch.int64, torch.int32]
        if self.device.type == "cuda":
            if expected <= 256:
                dtypes.append(torch.bfloat16)
            if expected <= 2048:
                dtypes.append(torch.float16)
        elif expected <= 2048:
            dtypes.append(torch.float16)
        sizes = (1, 1000, 65537)
        bad = []
        first = True
        for dtype in dtypes:
            for numel in sizes:
                value = self.rank + 1
                if first and self.injected("all_reduce"):
                    value += 1
                first = False
                t = torch.full((numel,), value, dtype=dtype, device=self.device)
                self.coll(dist.all_reduce, t, op=dist.ReduceOp.SUM)
                self.sync()
                wrong = (t != expected).sum().item()
                if wrong:
                    got = t[(t != expected).nonzero()[0]].item()
                    bad.append("%s x%d: %d elements wrong (e.g. %s, want %d)"
                               % (str(dtype).replace("torch.", ""), numel, wrong, got, expected))
        if bad:
            raise CheckFailed("sum of rank+1 over %d ranks: " % n + "; ".join(bad[:6]))
        return "sum of rank+1 = %d exact for %s x sizes %s" % (
            expected, ",".join(str(d).replace("torch.", "") for d in dtypes), list(sizes))

    def check_all_gather(self):
        torch, dist = self.torch, self.dist
        bad = []
        for dtype, numel in ((torch.float32, 1024), (torch.int64, 7)):
            value = self.rank + (1000 if self.injected("all_gather") else 0)
            t = torch.full((numel,), value, dtype=dtype, device=self.device)
            out = [torch.empty_like(t) for _ in range(self.world)]
            self.coll(dist.all_gather, out, t)
            self.sync()
            for slot, o in enumerate(out):
                if not bool((o == slot).all().item()):
                    bad.append("%s slot %d holds %s" % (str(dtype).replace("torch.", ""), slot,
                                                        o[0].item()))
        if bad:
            raise CheckFailed("; ".join(bad[:6]))
        return "%d slots, each equals its rank" % self.world

    def check_broadcast(self):
        torch, dist = self.torch, self.dist
        bad = []
        for src in sorted(set((0, self.world - 1))):
            want = torch.arange(4096, dtype=torch.float32, device=self.device) + 1000.0 * (src + 1)
            t = want.clone() if self.rank == src else torch.zeros_like(want)
            if self.injected("broadcast") and self.rank == src:
                t[0] += 1
            self.coll(dist.broadcast, t, src=src)
            if self.injected("broadcast") and self.rank != src:
                t[-1] -= 1
            self.sync()
            if not torch.equal(t, want):
                bad.append("from rank %d: %d elements differ" % (src, int((t != want).sum().item())))
        if bad:
            raise CheckFailed("; ".join(bad))
        return "from rank 0 and rank %d" % (self.world - 1)

    def check_barrier(self):
        torch, dist = self.torch, self.dist
        start = time.monotonic()
        self.coll(dist.barrier)
        took = time.monotonic() - start
        # the barrier itself returns nothing to compare: count the ranks that passed it
        t = torch.ones(1, dtype=torch.int64, device=self.device)
        if self.injected("barrier"):
            t.zero_()
        self.coll(dist.all_reduce, t)
        if int(t.item()) != self.world:
            raise CheckFailed("%d of %d ranks counted after the barrier" % (t.item(), self.world))
        return "all %d ranks passed (%.3f s)" % (self.world, took)

    def _tiny_model(self):
        torch = self.torch
        torch.manual_seed(1234)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                   torch.nn.Linear(32, 4))

    def _batch(self, step, offset=0):
        g = self.torch.Generator().manual_seed(1000 * (step + 1) + self.rank + offset)
        x = self.torch.randn(8, 16, generator=g)
        y = self.torch.randn(8, 4, generator=g)
        return x.to(self.device), y.to(self.device)

    def _compare_params(self, params, initial, what):
        """Gather every rank's flattened fp64 parameters and a checksum; compare exactly."""
        torch, dist = self.torch, self.dist
        flat = torch.cat([p.detach().reshape(-1).to(torch.float64) for p in params])
        if initial is not None and torch.equal(flat.cpu(), initial):
            raise CheckFailed("%s: parameters did not change after training" % what)
        checksum = torch.tensor([flat.sum().item()], dtype=torch.float64, device=self.device)
        sums = [torch.empty_like(checksum) for _ in range(self.world)]
        self.coll(dist.all_gather, sums, checksum)
        flats = [torch.empty_like(flat) for _ in range(self.world)]
        self.coll(dist.all_gather, flats, flat)
        self.sync()
        bad = []
        for r in range(self.world):
            if not torch.equal(flats[r], flats[0]) or sums[r].item() != sums[0].item():
                diff = (flats[r] - flats[0]).abs().max().item()
                bad.append("rank %d differs from rank 0 (checksum %r vs %r, max |diff| %.3g)"
                           % (r, sums[r].item(), sums[0].item(), diff))
        if bad:
            raise CheckFailed("%s: parameters diverged: %s" % (what, "; ".join(bad[:6])))
        return flat.numel(), sums[0].item()

    def check_ddp(self):
        torch = self.torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = self._tiny_model().to(self.device)
        initial = torch.cat([p.detach().reshape(-1).to(torch.float64).cpu()
                             for p in model.parameters()])
        if self.device.type == "cuda":
            ddp = DDP(model, device_ids=[self.device.index], output_device=self.device.index)
        else:
            ddp = DDP(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        loss = None
        for step in range(self.args.ddp_steps):
            t_step = time.perf_counter()
            x, y = self._batch(step)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            self.sync()
            self.step_seconds.append(round(time.perf_counter() - t_step, 6))
            self.watchdog.beat()
        self.sync()
        if self.injected("ddp"):
            with torch.no_grad():
                next(model.parameters()).view(-1)[0] += 1e-3
        numel, checksum = self._compare_params(list(model.parameters()), initial, "ddp")
        return "%d steps, %d params identical on %d ranks (checksum %.10g, last loss %.4g)" % (
            self.args.ddp_steps, numel, self.world, checksum,
            loss.item() if loss is not None else float("nan"))

    def check_deepspeed(self):
        """DeepSpeed as user code starts it: deepspeed.init_distributed(), then
        deepspeed.initialize with a ZeRO-2 config, one step, parameters compared across ranks.
        Nothing is patched: an op DeepSpeed builds at start-up (deepspeed_shm_comm on its CPU
        accelerator) must be pre-built in the image or buildable by a compiler the image keeps."""
        if self.device.type != "cuda":
            # DeepSpeed's CPU accelerator (its own detection picks it too on recent releases)
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        ok, why = self._agree_import("deepspeed")
        if not ok:
            return "skip", why
        import deepspeed
        if self.device.type != "cuda":
            ok, why = self._agree(_cpu_accelerator_unproven(self.torch),
                                  "DeepSpeed's CPU accelerator is not what this image is for")
            if not ok:
                return "skip", why
        torch = self.torch
        deepspeed.init_distributed()  # as user code does: joins the process group torchrun made
        self.watchdog.beat()
        model = self._tiny_model()
        initial = torch.cat([p.detach().reshape(-1).to(torch.float64) for p in model.parameters()])
        stage = 2
        # the optimizer a standard config names, built by DeepSpeed: on GPUs "AdamW" is FusedAdam
        # (the fused_adam op); on CPU, with the optimizer offloaded as CPU jobs run ZeRO,
        # DeepSpeedCPUAdam (the cpu_adam op). Each is pre-built in the image (--ds-ops)
        zero = {"stage": stage}
        if self.device.type != "cuda":
            zero["offload_optimizer"] = {"device": "cpu"}
        config = {
            "train_batch_size": 8 * self.world,
            "train_micro_batch_size_per_gpu": 8,
            "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zero_optimization": zero,
            "steps_per_print": 1000000,
            "wall_clock_breakdown": False,
        }
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=config)
        used = _optimizer_name(engine)
        self.ds_info = _deepspeed_facts(deepspeed, used)
        self.watchdog.beat()
        x, y = self._batch(0, offset=77)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        self.sync()
        self.watchdog.beat()
        params = list(engine.module.parameters())
        if self.injected("deepspeed_zero"):
            with torch.no_grad():
                params[0].view(-1)[0] += 1e-3
        numel, checksum = self._compare_params(params, initial, "deepspeed")
        return ("deepspeed %s init_distributed, ZeRO stage %d%s, optimizer AdamW -> %s (ops: %s): "
                "1 step, %d params identical (checksum %.10g)" % (
                    getattr(deepspeed, "__version__", "?"), stage,
                    " offload cpu" if "offload_optimizer" in zero else "", used,
                    ", ".join(self.ds_info["ops"]) or "none", numel, checksum))

    def _agree_import(self, module):
        """Import a module on every rank; all ranks skip when one cannot (so none waits)."""
        try:
            __import__(module)
            mine = ""
        except BaseException as exc:  # noqa: B902 - a broken install can raise anything
            if isinstance(exc, (KeyboardInterrupt, Terminated)):
                raise
            mine = "%s: %s" % (type(exc).__name__, _one_line(exc))
        return self._agree(mine, "%s does not import" % module)

    def _agree(self, mine, what):
        """All ranks share their reason not to go on; ("", True) when none has one."""
        reasons = [None] * self.world
        self.coll(self.dist.all_gather_object, reasons, mine)
        bad = [(r, why) for r, why in enumerate(reasons) if why]
        if not bad:
            return True, ""
        r, why = bad[0]
        return False, "%s (on %d of %d ranks; rank %d: %s)" % (what, len(bad), self.world, r, why)

    def check_horovod(self):
        ok, why = self._agree_import("horovod.torch")
        if not ok:
            return "skip", why
        import horovod.torch as hvd
        server = None
        mine = ""
        how = "horovodrun"
        if "HOROVOD_RANK" not in os.environ:
            how = "envbuilder rendezvous under torchrun"
            port = None
            if self.rank == 0:
                try:
                    server, port = _start_horovod_server(self.hosts, self.local_world)
                except Exception as exc:
                    mine = "cannot start horovod's rendezvous server: %s: %s" % (
                        type(exc).__name__, _one_line(exc))
            ok, why = self._agree(mine, "horovod cannot initialise under torchrun")
            if not ok:
                return "skip", why
            box = [port]
            self.coll(self.dist.broadcast_object_list, box, src=0)
            _horovod_env(box[0], self.hosts, self.rank, self.local_rank, self.args.timeout)
        try:
            try:
                hvd.init()
                if hvd.size() != self.world or hvd.rank() != self.rank:
                    mine = "hvd.init() gave rank %d of %d" % (hvd.rank(), hvd.size())
            except Exception as exc:
                mine = "hvd.init(): %s: %s" % (type(exc).__name__, _one_line(exc))
            self.watchdog.beat()
            ok, why = self._agree(mine, "horovod cannot initialise")
            if not ok:
                return "skip", why
            value = self.rank + 1 + (1 if self.injected("horovod_allreduce") else 0)
            t = self.torch.full((1024,), float(value), dtype=self.torch.float32, device=self.device)
            total = hvd.allreduce(t, op=hvd.Sum, name="envbuilder_smoke")
            self.sync()
            expected = self.world * (self.world + 1) // 2
            if not bool((total == expected).all().item()):
                raise CheckFailed("hvd.allreduce sum of rank+1: got %s, want %d"
                                  % (total[0].item(), expected))
            return "horovod %s (%s): sum of rank+1 = %d" % (
                getattr(sys.modules.get("horovod"), "__version__", "?"), how, expected)
        finally:
            try:
                hvd.shutdown()
            except Exception:
                pass
            if server is not None:
                try:
                    server.stop()
                except Exception:
                    pass

    def check_bandwidth(self):
        """nccl-tests' measurement for all-reduce, all-gather and reduce-scatter over a size
        sweep: per size, warm-up, then the mean time of ``iters`` calls (the slowest rank's),
        algbw = size / time and busbw = algbw x the collective's factor (BUSBW_FACTOR); each
        result is checked against its known answer after the timing. On GPUs the all-reduce
        sweep goes on to large messages (DEFAULT_GPU_LARGE_SIZES), bounded by --max-size, half
        the free GPU memory of the tightest rank and LARGE_CALL_SECONDS a call."""
        cuda = self.device.type == "cuda"
        sizes = list(self.args.sizes or (DEFAULT_GPU_SIZES if cuda else DEFAULT_CPU_SIZES))
        large = large_sizes(max(sizes), cuda, self.args.max_size) if not self.args.sizes else []
        rows, unsupported, skipped = [], [], []
        for coll in COLLECTIVES:
            for nbytes in sizes:
                try:
                    rows.append(self._time_collective(coll, nbytes))
                except NotImplementedError as e:
                    unsupported.append("%s (%s)" % (coll, e))
                    break
        if large:
            rows += self._large_sweep(large, rows, skipped)
        rows.sort(key=lambda r: (COLLECTIVES.index(r["collective"]), r["bytes"]))
        self.bandwidth = rows
        ar = [r for r in rows if r["collective"] == "all_reduce"]
        return ("all_reduce busbw " + ", ".join("%s: %.3f GB/s" % (_human(r["bytes"]), r["busbw_gbps"])
                                                for r in ar)
                + "; %d rows (nccl-tests algbw/busbw)" % len(rows)
                + ("; not measured: " + ", ".join(unsupported) if unsupported else "")
                + ("; not run: " + "; ".join(skipped) if skipped else ""))

    def _large_sweep(self, large, rows, skipped):
        """All-reduce rows at the large sizes every rank can hold and time (see check_bandwidth);
        what is left out goes to ``skipped`` with the reason."""
        torch, dist = self.torch, self.dist
        cuda = self.device.type == "cuda"
        limit = self.args.max_size or DEFAULT_MAX_SIZE
        free = (torch.cuda.mem_get_info(self.device)[0] if cuda and hasattr(torch.cuda, "mem_get_info")
                else limit * 2)  # on CPU (an explicit --max-size) the limit alone bounds it
        room = torch.tensor([free // 2], dtype=torch.int64, device=self.device)
        self.coll(dist.all_reduce, room, op=dist.ReduceOp.MIN)  # every rank runs the same sizes
        room = int(room.item())
        out = []
        last = [r for r in rows if r["collective"] == "all_reduce"][-1:]
        for nbytes in large:
            if nbytes > limit:
                skipped.append("%s and up (--max-size %s)" % (_human(nbytes), _human(limit)))
                break
            if nbytes > room:
                skipped.append("%s and up (half the free GPU memory of the tightest rank: %s)"
                               % (_human(nbytes), size_text(room)))
                break
            if last:  # the slowest rank's time is the same on every rank: so is this decision
                guess = last[-1]["seconds"] * nbytes / float(last[-1]["bytes"])
                if guess > LARGE_CALL_SECONDS:
                    skipped.append("%s and up (~%.1f s a call at the rate measured)" % (_human(nbytes), guess))
                    break
            row = self._time_collective("all_reduce", nbytes)
            out.append(row)
            last = [row]
            if cuda:
                torch.cuda.empty_cache()
        return out

    def _collective(self, coll, size_elems, lists=False):
        """(the call, the buffer to refill, a check of its result) for one collective whose
        largest per-rank buffer has ``size_elems`` float32 elements; ``lists``: the list form
        of all-gather (gloo before torch 2.1 has no _allgather_base)."""
        torch, dist, n = self.torch, self.dist, self.world
        if coll == "all_reduce":
            t = torch.zeros(size_elems, dtype=torch.float32, device=self.device)
            return (lambda: self.coll(dist.all_reduce, t)), t, (lambda: bool((t == n).all().item()))
        chunk = size_elems // n
        big = torch.zeros(chunk * n, dtype=torch.float32, device=self.device)
        small = torch.zeros(chunk, dtype=torch.float32, device=self.device)
        if coll == "all_gather":
            if hasattr(dist, "all_gather_into_tensor") and not lists:
                call = lambda: self.coll(dist.all_gather_into_tensor, big, small)  # noqa: E731
            else:
                parts = list(big.chunk(n))
                call = lambda: self.coll(dist.all_gather, parts, small)  # noqa: E731
            # each rank sends rank+1 (once refilled): the gathered buffer holds 1..n in order
            want = torch.arange(1, n + 1, dtype=torch.float32, device=self.device)
            check = lambda: bool((big.view(n, chunk)[:, 0] == want).all().item())  # noqa: E731
            return call, small, check
        if hasattr(dist, "reduce_scatter_tensor"):
            call = lambda: self.coll(dist.reduce_scatter_tensor, small, big)  # noqa: E731
        else:
            call = lambda: self.coll(dist.reduce_scatter, small, list(big.chunk(n)))  # noqa: E731
        return call, big, (lambda: bool((small == n).all().item()))

    def _time_collective(self, coll, nbytes, lists=False):
        torch, dist, n = self.torch, self.dist, self.world
        elems = max(1, nbytes // 4)
        if coll != "all_reduce":  # each rank's share is whole: a multiple of the world size
            elems = max(n, elems // n * n)
        call, buf, check = self._collective(coll, elems, lists)
        try:
            for _ in range(self.args.warmup):
                call()
        except CollectiveError as e:
            # an older backend without the collective (gloo's reduce_scatter before torch 2.x,
            # its _allgather_base before 2.1) refuses it locally, on every rank alike
            text = str(e).lower()
            if any(w in text for w in ("not support", "no support", "not implemented", "unsupported")):
                if coll == "all_gather" and not lists:
                    return self._time_collective(coll, nbytes, lists=True)
                raise NotImplementedError(_one_line(e)[:120])
            raise
        self.sync()
        self.coll(dist.barrier)
        start = time.perf_counter()
        for _ in range(self.args.iters):
            call()
        self.sync()
        took = (time.perf_counter() - start) / max(1, self.args.iters)
        slowest = torch.tensor([took], dtype=torch.float64, device=self.device)
        self.coll(dist.all_reduce, slowest, op=dist.ReduceOp.MAX)
        took = slowest.item()
        # the timed buffers hold zeros: prove the collective's result is right too
        if coll == "all_gather":
            buf.fill_(float(self.rank + 1))
        else:
            buf.fill_(2.0 if self.injected("bandwidth") and coll == "all_reduce" else 1.0)
        call()
        self.sync()
        if not check():
            raise CheckFailed("%s of %d bytes returned wrong values" % (coll, elems * 4))
        algbw = alg_bandwidth_gbps(elems * 4, took)
        return {"collective": coll, "bytes": elems * 4, "count": elems, "type": "float",
                "redop": "none" if coll == "all_gather" else "sum", "seconds": round(took, 7),
                "algbw_gbps": round(algbw, 4),
                "busbw_gbps": round(bus_bandwidth_gbps(algbw, n, coll), 4)}


# ----------------------------------------------------------------------------- support

def _one_line(exc):
    text = " ".join(str(exc).split())
    return text[:600] if text else type(exc).__name__


def _human(nbytes):
    for unit, size in (("GiB", 1024 * MIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= size and nbytes % size == 0:
            return "%d %s" % (nbytes // size, unit)
    return "%d B" % nbytes


def _shm_space(path):
    """(free bytes, size bytes) of the filesystem at ``path``; (None, None) when it is not there."""
    try:
        st = os.statvfs(path)
    except (IOError, OSError):
        return None, None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def _shm_fill(path, nbytes):
    """An open, already unlinked file in ``path`` holding ``nbytes`` allocated and written:
    the memory is the process's until it closes the file or ends, however it ends."""
    import tempfile
    fd, name = tempfile.mkstemp(prefix="envbuilder-smoke-shm-", dir=path)
    os.unlink(name)
    try:
        if nbytes and hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, nbytes)
        chunk = b"\0" * MIB
        done = 0
        while done < nbytes:  # touch every page, as a DataLoader worker writes its batch
            done += os.write(fd, chunk[:min(MIB, nbytes - done)])
    except BaseException:
        os.close(fd)
        raise
    return fd


def _nccl_env(torch_version):
    """Make NCCL errors and timeouts surface as exceptions, within the process group timeout."""
    if _version_tuple(torch_version) >= (2, 2):
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
    else:
        os.environ.setdefault("NCCL_ASYNC_ERROR_HANDLING", "1")
        os.environ.setdefault("NCCL_BLOCKING_WAIT", "1")


def _gpu_uuid(torch, index):
    """(uuid, how) of CUDA device ``index`` as this process sees it."""
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        return (text if text.startswith("GPU-") else "GPU-" + text), "torch"
    # torch < 2.0: map the visible index to a physical one and ask NVML / nvidia-smi
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    target = visible[index] if index < len(visible) else str(index)
    if target.startswith("GPU-"):
        return target, "CUDA_VISIBLE_DEVICES"
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(target))
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        return (uuid.decode() if isinstance(uuid, bytes) else uuid), "pynvml"
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=20,
                             universal_newlines=True).stdout
        for line in out.splitlines():
            m = re.match(r"GPU (\d+):.*\(UUID: (GPU-[^)]+)\)", line.strip())
            if m and m.group(1) == target:
                return m.group(2), "nvidia-smi"
    except Exception:
        pass
    return "cuda:%s" % target, "index"


def _start_horovod_server(hosts, local_world):
    """Start horovod's gloo rendezvous server with a slot plan that mirrors torch's ranks."""
    from horovod.runner.http.http_server import RendezvousServer
    from horovod.runner.common.util.hosts import SlotInfo
    plan = _horovod_plan(hosts)
    slots = [SlotInfo(hostname=p["hostname"], rank=p["rank"], local_rank=p["local_rank"],
                      cross_rank=p["cross_rank"], size=p["size"], local_size=p["local_size"],
                      cross_size=p["cross_size"]) for p in plan]
    server = RendezvousServer(verbose=0)
    port = server.start()
    server.init(slots)
    return server, port


def _horovod_plan(hosts):
    order = []
    for h in hosts:
        if h not in order:
            order.append(h)
    local_counts = {}
    plan = []
    for rank, h in enumerate(hosts):
        local_rank = local_counts.get(h, 0)
        local_counts[h] = local_rank + 1
        plan.append({"hostname": h, "rank": rank, "local_rank": local_rank,
                     "cross_rank": order.index(h), "size": len(hosts)})
    for p in plan:
        p["local_size"] = local_counts[p["hostname"]]
        p["cross_size"] = sum(1 for h in order if local_counts[h] > p["local_rank"])
    return plan


def _horovod_env(port, hosts, rank, local_rank, timeout):
    slot = _horovod_plan(hosts)[rank]
    addr = os.environ.get("MASTER_ADDR") or hosts[0]
    os.environ.update({
        "HOROVOD_HOSTNAME": slot["hostname"],
        "HOROVOD_RANK": str(slot["rank"]),
        "HOROVOD_SIZE": str(slot["size"]),
        "HOROVOD_LOCAL_RANK": str(slot["local_rank"]),
        "HOROVOD_LOCAL_SIZE": str(slot["local_size"]),
        "HOROVOD_CROSS_RANK": str(slot["cross_rank"]),
        "HOROVOD_CROSS_SIZE": str(slot["cross_size"]),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(timeout)),
    })


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="envbuilder distributed smoke job (run under torchrun)")
    p.add_argument("--out", required=True, help="directory for rank-<RANK>.json and summary.json")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--timeout", type=int, default=60,
                   help="process group timeout in seconds (default 60)")
    p.add_argument("--ddp-steps", dest="ddp_steps", type=int, default=3)
    p.add_argument("--sizes", type=parse_sizes, default=None,
                   help="bandwidth message sizes, e.g. 1M,8M,32M (default: by device)")
    p.add_argument("--max-size", dest="max_size", type=parse_size, default=None,
                   help="largest all-reduce of the sweep (GPUs: default 16G, also bounded by free "
                        "GPU memory and by time; CPU: the sweep goes on to it only when given)")
    p.add_argument("--progressive", action="store_true",
                   default=os.environ.get("ENVBUILDER_SMOKE_PROGRESSIVE", "") not in ("", "0"),
                   help="before the full job, all-reduce in the first 2, 4, 8 ... ranks and stop at "
                        "the first size that fails (also ENVBUILDER_SMOKE_PROGRESSIVE=1)")
    p.add_argument("--shm-workers", dest="shm_workers", type=int, default=DATALOADER_WORKERS,
                   help="DataLoader workers per rank the /dev/shm check provides for (default 2)")
    p.add_argument("--shm-batch", dest="shm_batch", type=parse_size, default=DATALOADER_BATCH,
                   help="bytes of one DataLoader batch for the /dev/shm check (default 19267584)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failing checks")
    return p.parse_args(argv)


def _optimizer_name(engine):
    """The optimizer DeepSpeed built from the config (under ZeRO's wrapper): its module and
    class, e.g. deepspeed.ops.adam.fused_adam.FusedAdam or torch.optim.adamw.AdamW."""
    opt = getattr(engine, "basic_optimizer", None) or getattr(engine, "optimizer", None)
    inner = getattr(opt, "optimizer", None)
    opt = opt if inner is None or getattr(engine, "basic_optimizer", None) else inner
    return "%s.%s" % (type(opt).__module__, type(opt).__name__)


def _cpu_accelerator_unproven(torch):
    """Why DeepSpeed's CPU accelerator proves nothing here ("" when it does): a CUDA torch on a
    host without GPUs, whose image neither carries the op that accelerator builds at
    deepspeed.init_distributed() (deepspeed_shm_comm) nor keeps a compiler to build it. That image
    targets GPUs, where DeepSpeed uses its CUDA accelerator; a CPU image must start for real."""
    if not getattr(torch.version, "cuda", None):
        return ""
    import shutil
    try:
        from deepspeed.git_version_info import installed_ops
        if dict(installed_ops).get("deepspeed_shm_comm"):
            return ""
    except Exception:  # noqa: BLE001 - older DeepSpeed: no record of installed ops
        pass
    if shutil.which("c++") or shutil.which("g++"):
        return ""
    return ("a CUDA image on a host without GPUs: DeepSpeed would start on its CPU accelerator, "
            "which builds deepspeed_shm_comm at init_distributed(), and this image neither carries "
            "it nor a compiler; DeepSpeed on GPUs (its CUDA accelerator) is what the image is for")


def _deepspeed_facts(deepspeed, optimizer):
    """What DeepSpeed initialised: its accelerator, the ops it loaded (pre-built: the package's
    deepspeed.ops.*_op modules; built at run time: the ops' own module names) and the
    optimizer it built."""
    ops = {}
    try:
        from deepspeed.git_version_info import installed_ops
        known = dict(installed_ops)
    except Exception:  # noqa: BLE001 - older DeepSpeed
        known = {}
    try:  # every op DeepSpeed's builders loaded, pre-built (a deepspeed.ops module) or JIT-built
        from deepspeed.ops.op_builder.builder import OpBuilder
        loaded = dict(getattr(OpBuilder, "_loaded_ops", {}))
    except Exception:  # noqa: BLE001 - another layout of DeepSpeed: the pre-built modules alone
        loaded = {}
    for name, mod in loaded.items():
        prebuilt = known.get(name) and str(getattr(mod, "__name__", "")).startswith("deepspeed.ops.")
        ops[name] = "pre-built" if prebuilt else "built at run time"
    for name in list(sys.modules):
        if name.startswith("deepspeed.ops.") and name.endswith("_op"):
            ops.setdefault(name.rsplit(".", 1)[1][:-3], "pre-built")
    try:
        from deepspeed.accelerator import get_accelerator
        accel = get_accelerator().device_name()
    except Exception:  # noqa: BLE001 - older DeepSpeed
        accel = None
    return {"version": getattr(deepspeed, "__version__", None), "accelerator": accel,
            "ops": sorted("%s (%s)" % (k, v) for k, v in ops.items()), "optimizer": optimizer}


def main(argv=None):
    args = parse_args(argv)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError:
        pass

    def _on_term(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, _on_term)
    smoke = Smoke(args, None, None)  # torch comes next: a SIGTERM during its import is caught
    try:
        if smoke.injected("late"):
            time.sleep(args.timeout)  # a rank slow to start (a loaded node): the others go first
        import torch
        import torch.distributed as dist
        if not dist.is_available():
            sys.stderr.write("envbuilder-smoke: this torch build has no torch.distributed\n")
            return 2
        smoke.torch, smoke.dist, smoke.t0 = torch, dist, time.monotonic()
        return smoke.run()
    except Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut this short
        smoke.results.append({"name": "launch", "status": "fail", "seconds": 0.0,
                              "detail": "terminated by SIGTERM before the checks finished"})
        smoke.write_record()
        if smoke.rank == 0:
            # the other ranks of this node may have written why they failed: a summary with
            # their records names the cause, where rank 0's own record only says "stopped"
            smoke.broken = smoke.broken or "launch"
            smoke.backend = smoke.backend or args.backend
            smoke.write_summary(smoke._records_on_disk())
        os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
