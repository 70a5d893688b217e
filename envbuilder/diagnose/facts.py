"""Structured facts read from a distributed job's log, and the causes they point to.

``explain`` first reads a log into facts: the versions of the stack (torch, CUDA runtime and
driver, NCCL, cuDNN, DeepSpeed, Horovod), the transport NCCL chose (``Using network IB`` /
``NET/Socket`` / ``NET/OFI``, the channel paths ``via P2P/IPC``, ``via SHM``, ``via NET/IB``),
the interfaces, the ranks and hosts, how far each rank got (watchdog ``SeqNum``, ``last enqueued
NCCL work``, a flight-recorder dump), the Python frames and the exception chain, and hints that
the job ran in a container. Then :func:`infer` reasons over the facts and over what is missing
from them: InfiniBand configured but NCCL chose sockets is an RDMA fallback; set-up completed,
then no progress and a watchdog is a hang, named by the ranks that did not arrive.

Signatures (``signatures.yaml``) still recognise exact messages; inferences add weight to the
categories the facts support, each with the log lines it rests on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from envbuilder.diagnose.normalise import lazy

__all__ = ["FactCollector", "Facts", "FlightRecord", "Inference", "RasMismatch", "Where", "infer"]

Where = tuple[str, int, str]  # (file, line number, text)

_MAX_WHERE = 4  # evidence lines kept per fact
_MAX_FRAMES = 12
_MAX_EXCEPTIONS = 10
_TEXT = 300

# ----------------------------------------------------------------------------- patterns

_VERSION_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, lazy(p, re.IGNORECASE)) for name, p in (
        ("nccl", r"\bNCCL version:? ?v?(\d+\.\d+\.\d+)"),
        ("nccl", r"\bnccl[- _]?(?:version|ver)\b[ .:=]*\(?(\d+\.\d+\.\d+)"),
        ("cuda_runtime", r"\bNCCL version \d+\.\d+\.\d+\+cuda(\d+\.\d+)"),
        ("cuda_runtime", r"CUDA used to build PyTorch:\s*(\d+\.\d+)"),
        ("cuda_runtime", r"torch cuda version\W+(\d+\.\d+)"),
        ("cuda_runtime", r"\bCUDA runtime version:?\s*(\d+\.\d+)"),
        ("cuda_runtime", r"\bCuda compilation tools, release (\d+\.\d+)"),
        ("cuda_runtime", r"\btorch\.version\.cuda\W+(\d+\.\d+)"),
        ("cuda_runtime", r"\bcompiled with CUDA (\d+\.\d+)"),
        ("cuda_runtime", r"\bCUDA runtime version:? (\d{4,5})\b"),
        ("driver", r"Driver Version:\s*(\d+\.\d+(?:\.\d+)?)"),
        ("driver", r"\bNVIDIA driver version:?\s*(\d+\.\d+(?:\.\d+)?)"),
        ("cuda_driver", r"\bcudaDriverVersion (\d{4,5})\b"),
        ("cuda_driver", r"\bdriver version (\d{4,5})\b"),
        ("cuda_driver", r"\bCUDA Version:\s*(\d+\.\d+)"),
        ("cuda_driver", r"\bcuda driver version\W+(\d+(?:\.\d+)?)"),
        ("torch", r"\bPyTorch version:\s*(\d+\.\d+(?:\.\d+)?\S*)"),
        ("torch", r"\btorch version\W+(\d+\.\d+(?:\.\d+)?\S*)"),
        ("torch", r"\btorch[=\s]=?=?\s?(\d+\.\d+\.\d+(?:\+\w+)?)\b"),
        ("torch", r"\btorch-(\d+\.\d+\.\d+)(?:\+\w+)?-cp"),
        ("cudnn", r"\bcuDNN version:?\s*(\d+(?:\.\d+)*)"),
        ("cudnn", r"\bLoaded runtime CuDNN library:\s*(\d+\.\d+\.\d+)"),
        ("cudnn", r"\blibcudnn\.so\.(\d+(?:\.\d+)*)"),
        ("deepspeed", r"\bdeepspeed (?:info|version)\W+(\d+\.\d+\.\d+)"),
        ("deepspeed", r"\bDeepSpeed(?: version)?:? v?(\d+\.\d+\.\d+)"),
        ("deepspeed", r"\bdeepspeed[=\s]=?=?\s?(\d+\.\d+\.\d+)\b"),
        ("horovod", r"\bHorovod v?(\d+\.\d+\.\d+)"),
        ("horovod", r"\bhorovod[=\s-]=?=?\s?(\d+\.\d+\.\d+)\b"),
    ))
_VERSION_KEYS = ("version", "release", "driver", "torch", "cudnn", "deepspeed", "horovod", "compiled with")
_IB_CONFIG_KEYS = ("nccl_ib_hca", "nccl_net", "nccl_ib_gid", "mlx", "hca_id", "infiniband", "roce", "fi_provider",
                   "fi_efa", "aws-ofi", "net/ofi", "efa", "--fabric", "rdma_sharp", "ibext", "rdma plugin", "hpcx")
_IB_FAILED_KEYS = ("no device found", "libibverbs", "net/ofi", "ofi plugin", "ibv_", "no ib device", "any net plugin",
                   "selected provider")
_RDMA_KEYS = ("using network", "net/ib : using", "net/ib: using", "net/ib :using", "via net/", "selected provider")
_CONTAINER_KEYS = ("docker", "--gpus", "--runtime", "nvidia-container", "cdi", "kubectl", "pod/", "apptainer",
                   "singularity", "enroot", "pyxis", "podman")
_SEEN_LINES = 4096
_COMPILER_KEYS = ("c++", "g++", "gcc", "nvcc", "compiler")
# a team package that builds against torch, built the wrong way (issue 30): in pip's isolated
# build environment (no torch there), or by a builder without nvcc
_BUILD_KEYS = ("pip-build-env", "installing build dependencies",
               "no module named", "nvcc", "cuda_home", "layer-team", "envbuilder/team", "requirements/team")

_NCCL_PREFIX = lazy(r"^\s*(?:\[[^\]]*\]\s*:?\s*)?([\w.\-]+):(\d+):(\d+) \[(\d+)\] NCCL (INFO|WARN)")
_USING_NETWORK = lazy(r"Using network (\w[\w ]*?)\s*$|Using network (\S+)")
_NET_SOCKET = lazy(r"NET/Socket ?: ?Using \[\d+\]([\w.\-]+):")
_NET_IB = lazy(r"NET/IB ?: ?Using \[\d+\]([\w.\-]+):\d+/(IB|RoCE)")
_BOOTSTRAP = lazy(r"Bootstrap ?: ?Using \[?\d*\]?([\w.\-]+):")
_CHANNEL = lazy(r"Channel \d+(?:/\d+)? ?: .* via (P2P/\w+|SHM(?:/\w+)*|NET/\w+|P2P|CollNet\w*|NVLS)")
_IFNAME = lazy(r"NCCL_SOCKET_IFNAME\s*(?:set by environment to|set to|=)\s*\"?([\w.^,\-]+)")
_INIT_COMPLETE = lazy(r"comm 0x[0-9a-f]+ rank (\d+) nranks (\d+) .*Init COMPLETE|Init COMPLETE")
_NRANKS = lazy(r"\bnranks[ =:]+(\d+)|\bworld[_ ]size[ =:]+(\d+)", re.IGNORECASE)
_WATCHDOG = lazy(r"\[Rank (\d+)\] .*?(?:Watchdog caught collective operation timeout|Timeout at NCCL work)"
                       r".*?(?:SeqNum=(\d+), OpType=(\w+)|NCCL work: (\d+))")
_LAST_WORK = lazy(r"\[Rank (\d+)\].*last enqueued (?:NCCL )?work: (-?\d+), last completed (?:NCCL )?work: (-?\d+)")
_RAS_MISMATCH = lazy(r"Communicator ranks have different (\w+) operation counts")
_RAS_GROUP = lazy(r"(\d+) ranks? (?:has|have) launched up to operation (\d+)")
_RAS_RANK = lazy(r"Rank (\d+) -- GPU \d+ managed by process \d+ on node (\S+)")
_RANK_PREFIX = lazy(r"^\s*\[(?:default)?rank(\d+)\]:", re.IGNORECASE)
_TORCHRUN_RANK = lazy(r"^\s*rank\s*:\s*(\d+) \(local_rank")
_TORCHRUN_HOST = lazy(r"^\s*host\s*:\s*([\w.\-]+)")
_FRAME = lazy(r'File "([^"]+)", line (\d+), in (\S+)')
_EXCEPTION = lazy(r"^\s*(?:\[(?:default)?rank\d+\]:\s*)?((?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure))"
                        r"(?::\s?(.*))?\Z")
_LD_PATH = lazy(r"LD_LIBRARY_PATH[=:\s]+\"?([^\s\"]+)")
_LIB_LOADED = lazy(r"((?:/[\w.+\-]+)+/(libcudnn\w*|libcublas\w*|libnccl)\.so[.\d]*)")
_IB_DISABLED = lazy(r"NCCL_IB_DISABLE\s*(?:set by environment to|=|:)\s*\"?1")

# IB/RDMA configured: the job (or the machine) meant to use RDMA.
_IB_CONFIG = lazy(
    r"NCCL_IB_HCA\s*(?:set|=)|NCCL_NET\s*=\s*\"?IB|NCCL_IB_GID_INDEX\s*(?:set|=)|\bmlx[45]_\d+\b|"
    r"hca_id:|/dev/infiniband|\bInfiniBand\b|\bRoCE\b|NCCL_NET_PLUGIN|FI_PROVIDER\s*=\s*\"?efa|"
    r"FI_EFA_\w+|aws-ofi-nccl|NET/OFI|\bEFA\b|--fabric[ =]ib|nccl_rdma_sharp_plugin|P2P plugin IBext|"
    r"NCCL RDMA Plugin|/opt/hpcx", re.IGNORECASE)
# aws-ofi-nccl chose a libfabric provider that is no RDMA transport: "tcp", "sockets" and "udp" move
# data over TCP/UDP sockets (fi_provider(7): "not intended to provide performance improvements over
# regular TCP/UDP sockets", https://manpages.ubuntu.com/manpages/noble/man7/fi_provider.7.html), so
# EFA/verbs were not usable: it is the OFI plugin's own fallback to sockets (aws/aws-ofi-nccl#803).
_OFI_TCP = r"NET/OFI Selected [Pp]rovider is (?:tcp|sockets|udp)\b"
# IB/RDMA tried and not available (each is a benign INFO line on a machine without RDMA).
_IB_FAILED = lazy(
    r"NET/IB ?: ?No device found|Failed to open libibverbs|libibverbs\.so[.\d]*: cannot open|"
    r"libibverbs: Warning: couldn't (?:load driver|open config)|NET/OFI .*(?:could not|couldn.t) find any optimal provider|"
    r"NET/OFI .*(?:No|Unable to find|Failed to get) .*provider|"
    r"NET/OFI (?:Unable|Failed) to (?:initialize|open|create)|OFI plugin initNet\(\) failed|"
    r"ibv_(?:get_device_list|open_device)\w* failed|No IB devices? found|Failed to initialize any NET plugin|"
    + _OFI_TCP, re.IGNORECASE)
_SOCKET_CHOSEN = lazy(r"Using network Socket|NET/Socket ?: ?Using|via NET/Socket|"
                            r"fall(?:s|ing)? back to\W{0,3}(?:NET/)?Socket|" + _OFI_TCP, re.IGNORECASE)
_RDMA_CHOSEN = lazy(r"Using network (IB|AWS Libfabric|OFI)|NET/IB ?: ?Using \[|via NET/(IB|OFI|AWS)|"
                          r"NET/OFI Selected [Pp]rovider is (?!(?:tcp|sockets|udp)\b)", re.IGNORECASE)
_IOMMU = lazy(r"\biommu\b|intel_iommu|amd_iommu|VT-d|ACSCtl|\bACS\b|DMAR", re.IGNORECASE)
_CONTAINER = lazy(
    r"\bdocker (?:run|exec|compose)\b|docker: Error response|/\.dockerenv|--gpus\b|--runtime[= ]nvidia|"
    r"nvidia-container|\bCDI\b|\bkubectl\b|\bpod/|apptainer|singularity|enroot|pyxis|podman", re.IGNORECASE)
_ERRORISH = lazy(r"Traceback \(most recent call last\)|\bError\b|NCCL WARN|\bFAILED\b|Segmentation fault|"
                       r"exitcode\s*:\s*-?[1-9]|Killed|core dumped", re.IGNORECASE)
_COMPILER = lazy(r"error: command '?(?:c\+\+|g\+\+|gcc|x86_64-linux-gnu-g\+\+)'? failed|"
                       r"(?:c\+\+|g\+\+|gcc|nvcc|ninja): (?:command )?not found|"
                       r"No such file or directory: '(?:c\+\+|g\+\+|gcc|\S*nvcc)'|"
                       r"(?:Could not find|cannot find|No) (?:a )?(?:C\+\+ )?compiler|"
                       r"FileNotFoundError: .*\bnvcc\b|which: no nvcc", re.IGNORECASE)
# pip prints these only for an isolated build (--no-build-isolation installs nothing, makes no env)
_ISOLATED = lazy(r"pip-build-env-|Installing build dependencies", re.IGNORECASE)
_NO_TORCH = lazy(r"No module named '?torch(?:'|\s|$)", re.IGNORECASE)
_NVCC_MISSING = lazy(r"error: command '[^'\s]{0,256}nvcc' failed|nvcc: (?:command )?not found|"
                           r"No such file or directory: '[^'\s]{0,256}nvcc'|CUDA_HOME environment variable is not set|"
                           r"which: no nvcc", re.IGNORECASE)
_TEAM_LAYER = lazy(r"layer-team(?:-compiled)?\b|(?:/tmp/envbuilder|requirements)/team(?:-compiled)?\.txt",
                         re.IGNORECASE)
_SHADOW_ERROR = lazy(r"CUDNN_STATUS_\w+|cuDNN (?:error|version)|CUBLAS_STATUS_(?:NOT_INITIALIZED|"
                           r"INVALID_VALUE|NOT_SUPPORTED|EXECUTION_FAILED|INTERNAL_ERROR)|"
                           r"(?:libcudnn|libcublas)\w*\.so[.\d]*: (?:undefined symbol|cannot open)|"
                           r"Could not load library libcudnn|Invalid handle\. Cannot load symbol cudnn|"
                           r"undefined symbol: \w*(?:cudnn|cublas)\w*", re.IGNORECASE)

# a line that says something failed (the generic test for "is there a failure in this log at
# all"; what failed is the signatures' and the inferences' business) ...
_FAILURE = lazy(r"Traceback \(most recent call last\)|\berror\b|[a-z](?:Error|Exception)\b|\bfail(?:ed|ure|s)?\b|"
                r"\bfatal\b|exitcode\s*:\s*-?[1-9]|\bkilled\b|core dumped|segmentation fault|\bsegfault|"
                r"\btimed out\b|\btimeout\b|\babort(?:ed|ing)?\b|\bcannot\b|\bunable to\b|\brefused\b|"
                r"\bSIG(?:SEGV|ABRT|BUS|KILL)\b|\bhang(?:s|ing)?\b|\bhung\b|\bdeadlock|\bstuck\b|\bstall(?:s|ed)?\b|"
                r"\bfreez(?:e|es|ing)\b|\bcrash(?:ed|es)?\b", re.IGNORECASE)
# ... unless it is one of what every healthy run prints too: NCCL's INFO lines, warnings and
# deprecation notices (Python's and torch's [W ...] / W1205 glog lines), the launcher's banner,
# the smoke job's summary (issue 45: a passing smoke log was "explained" by two FutureWarnings)
NOT_EVIDENCE = lazy(r"NCCL INFO|\b\w*Warning\b:|\bis deprecated\b|will be removed in|^\s*warnings\.warn\(|"
                    r"(?:^|:)\s*\[W[\d ]|^\s*[WI]\d{4} \d\d:|(?:^|:)\s*\[I[\d ]|ENVBUILDER_SMOKE_SUMMARY|"
                    r"Setting OMP_NUM_THREADS|"
                    # what NCCL prints on every host without RDMA or a net plugin, some versions at WARN
                    r"Failed to open libibverbs|NET/IB ?: ?No device found|No plugin found \(libnccl-net|"
                    r"Could not find: libnccl-net|Failed to initialize NET plugin IB|"
                    r"Plugin load returned \d+ : libnccl-net\.so: cannot open|"
                    r"^#\s+(?:size|bytes)\s+(?:count|N)\s+type")  # nccl-tests' table head has an "error" column
# the part of it that never says a job failed, whatever a signature finds in it: deprecation
# notices, torch's INFO-level lines, the launcher's banner, the smoke job's summary (NCCL's INFO
# lines and warnings can: "Call to connect returned Connection timed out", "driver too old")
QUIET = lazy(r"\b(?:Future|Deprecation|PendingDeprecation)Warning\b|\bis deprecated\b|will be removed in|"
             r"^\s*I\d{4} \d\d:|(?:^|:)\s*\[I[\d ]|ENVBUILDER_SMOKE_SUMMARY|Setting OMP_NUM_THREADS")
DEPRECATION = lazy(r"\b(?:Future|Deprecation|PendingDeprecation)Warning\b|\bis deprecated\b|will be removed in")
_FAILURE_KEYS = ("error", "exception", "traceback", "fail", "fatal", "abort", "timed out", "timeout", "cannot",
                 "unable", "refused", "killed", "fault", "core dumped", "sigsegv", "sigabrt", "sigbus", "sigkill",
                 "exitcode", "hang", "hung", "deadlock", "stuck", "stall", "freez", "crash")

# interfaces NCCL should not bootstrap on between hosts (docker's bridge, veth pairs, tunnels)
_VIRTUAL_IF = lazy(r"^(?:veth|docker|br-|virbr|ip6tnl|tunl|cni|flannel|cali|lxc|vxlan|kube-ipvs)")
# NCCL's sockets over an IPoIB interface: the host has InfiniBand, NCCL did not use verbs
_IPOIB_SOCKET = lazy(r"NET/Socket ?: ?Using \[\d+\]ib[a-z]*\d|via NET/Socket.*\bib\d")
# nccl-tests: its table header, a result row, its closing average
_NCCLTESTS_HEADER = lazy(r"^#\s+bytes\s+N\s+type|^#\s+\(B\)\s+\(elements\)")
_NCCLTESTS_ROW = lazy(r"^\s+\d+\s+\d+\s+(?:float|half|double|int\w*|uint\w*|bfloat16|fp\w+|char)\s")

_XID = lazy(r"\bXid\s*(?:\((?:PCI:)?([0-9a-fA-F:.]+)\))?:?\s*(\d{1,3})\b", re.IGNORECASE)
_FALLEN = lazy(r"fall(?:en)? off (?:of )?the bus", re.IGNORECASE)
_MAX_XIDS = 16
_HANG_TAIL = 10  # lines (not NCCL INFO) a hung job may print after its set-up
_QUICK_WORDS = ("nccl", "version", "cuda", "driver", "torch", "cudnn", "deepspeed", "horovod", "rank", 'file "',
                "error", "exception", "exit", "interrupt", "failure", "docker", "ld_library", "libcu", "ibverbs",
                "mlx", "hca", "infiniband", "roce", "ofi", "efa", "iommu", "acs", "dmar", "host", "compiler", "c++",
                "g++", "gcc", "nvcc", "ninja", "container", "cdi", "kubectl", "pod/", "apptainer", "singularity",
                "enroot", "pyxis", "podman", "traceback", "killed", "fault", "fabric", "world", "xid",
                "fallen off", *_BUILD_KEYS, *_FAILURE_KEYS)
# A line none of these words (in any case) occurs in holds no fact: it is skipped at once.
_QUICK = lazy("|".join(re.escape(w) for w in _QUICK_WORDS), re.IGNORECASE)

_EXCEPTION_KEYS = ("error", "exception", "exit", "interrupt", "failure")
_SOCKET_KEYS = ("net/socket", "using network socket", "back to", "selected provider")
_IOMMU_KEYS = ("iommu", "vt-d", "acs", "dmar")
_SHADOW_KEYS = ("cudnn", "cublas")
# the words the per-line checks below test for (in the lower-cased line), beyond the groups above
_CHECK_WORDS = ("nccl", 'file "', "nccl_ib_disable", "ld_library_path", "using network", "using", " via ", "ifname",
                "init complete", "[rank", "work", "last enqueued", "operation", " managed by process ", "rank",
                "nranks", "world", "host")
_GATE_KEYS = frozenset({*_IB_CONFIG_KEYS, *_IB_FAILED_KEYS, *_RDMA_KEYS, *_CONTAINER_KEYS, *_COMPILER_KEYS, *_BUILD_KEYS,
                        "nccl_ib_disable", *_SOCKET_KEYS, *_IOMMU_KEYS, *_SHADOW_KEYS, "ld_library_path"})
_KEYWORDS: tuple[str, ...] = tuple(sorted({*_QUICK_WORDS, *_VERSION_KEYS, *_EXCEPTION_KEYS, *_GATE_KEYS,
                                           *_CHECK_WORDS, *_FAILURE_KEYS}))
_QUICK_SET = frozenset(_QUICK_WORDS)
_VERSION_SET = frozenset(_VERSION_KEYS)
_EXCEPTION_SET = frozenset(_EXCEPTION_KEYS)
_FAILURE_SET = frozenset(_FAILURE_KEYS)
_BUCKET_KEYS = {"ib_config": frozenset(_IB_CONFIG_KEYS), "ib_failed": frozenset(_IB_FAILED_KEYS),
                "ib_disabled": frozenset({"nccl_ib_disable"}), "rdma_chosen": frozenset(_RDMA_KEYS),
                "socket_chosen": frozenset(_SOCKET_KEYS), "iommu": frozenset(_IOMMU_KEYS)}
_CONTAINER_SET = frozenset(_CONTAINER_KEYS)
_COMPILER_SET = frozenset(_COMPILER_KEYS)
_BUILD_SET = frozenset(_BUILD_KEYS)
_SHADOW_SET = frozenset(_SHADOW_KEYS)


def _keyword_finder() -> Any:
    """A function: lower-cased line -> the set of _KEYWORDS that occur in it, found in one pass.

    With google-re2, one RE2 Set of the (literal) words scans the line once and names every word
    in it; a literal occurs in the UTF-8 bytes exactly when it occurs in the text (the words are
    ASCII), so the set equals ``{k for k in _KEYWORDS if k in lowered}``, which is the fallback.
    """
    try:
        import re2 as _re2

        options = _re2.Options()
        matcher = _re2.Set.SearchSet(options)
        for word in _KEYWORDS:
            matcher.Add(_re2.escape(word))
        matcher.Compile()
        # the wrapper's Match only type-checks and encodes: call the set itself with bytes
        match, words = getattr(getattr(matcher, "_set", None), "Match", matcher.Match), _KEYWORDS

        def find(lowered: str) -> frozenset[str]:
            hits = match(lowered.encode("utf-8", "surrogatepass"))
            return frozenset([words[i] for i in hits]) if hits else frozenset()
        find("nccl rank")  # fail here, not per line, if this re2 build cannot run the set
        return find
    except Exception:  # noqa: BLE001 - pragma: no cover - google-re2 is a dependency; `in` stays correct
        return lambda lowered: frozenset(k for k in _KEYWORDS if k in lowered)


_find_keywords = _keyword_finder()


def _where(file: str, line_no: int, text: str) -> Where:
    return (file, line_no, text.strip()[:_TEXT])


def _add(bucket: list[Where], item: Where) -> None:
    if len(bucket) < _MAX_WHERE and all(item[2] != w[2] for w in bucket):
        bucket.append(item)


# ----------------------------------------------------------------------------- facts


@dataclass
class FlightRecord:
    """What flight-recorder dumps say: per process group, the collective that did not
    complete everywhere and the ranks that never reached it."""

    process_group: str
    seq: int
    op: str
    ranks: tuple[int, ...]
    joined: tuple[int, ...]
    missing: tuple[int, ...]
    last_seq: dict[int, int]
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"process_group": self.process_group, "collective_seq_id": self.seq,
                "op": self.op, "ranks": list(self.ranks), "joined": list(self.joined),
                "missing": list(self.missing),
                "last_seq": {str(k): v for k, v in sorted(self.last_seq.items())},
                "source": self.source}


@dataclass
class RasMismatch:
    """An NCCL RAS report (``ncclras`` / ``echo STATUS | nc localhost 28028``) that the ranks of a
    communicator launched different numbers of one operation: the groups (how many ranks, up to
    which operation) and the ranks RAS lists (rank, node), which belong to the smaller group."""

    op: str
    groups: list[tuple[int, int]] = field(default_factory=list)
    listed: list[tuple[int, str]] = field(default_factory=list)
    evidence: list[Where] = field(default_factory=list)

    def reading(self) -> str | None:
        """Who never reached the furthest operation, in words."""
        if len(self.groups) < 2:
            return None
        top = max(n for _, n in self.groups)
        mine = [g for g in self.groups if g[0] == len(self.listed)]
        names = ", ".join(f"{r}" for r, _ in self.listed[:8])
        nodes = sorted({h for _, h in self.listed})
        where = f" on {', '.join(nodes[:3])}" if nodes else ""
        behind = sum(c for c, n in self.groups if n < top)
        if self.listed and len(mine) == 1 and mine[0][1] < top:
            return f"rank{'s' if len(self.listed) > 1 else ''} {names}{where} never reached {self.op} #{top}"
        if self.listed and len(mine) == 1:
            return (f"{behind} rank{'s' if behind != 1 else ''} never reached {self.op} #{top} "
                    f"(RAS lists the {len(self.listed)} that did: {names}{where})")
        return f"{behind} rank{'s' if behind != 1 else ''} never reached {self.op} #{top}"

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "groups": [{"ranks": c, "up_to_operation": n} for c, n in self.groups],
                "listed": [{"rank": r, "node": h} for r, h in self.listed], "reading": self.reading()}


@dataclass
class Facts:
    """Everything read from the logs, as plain data (``to_dict`` for ``--json``)."""

    versions: dict[str, str] = field(default_factory=dict)
    version_where: dict[str, Where] = field(default_factory=dict)
    network: str | None = None  # what NCCL chose: IB, Socket, OFI (AWS Libfabric) ...
    channels: dict[str, int] = field(default_factory=dict)  # via P2P/IPC: 12, via NET/Socket: 4
    interfaces: list[str] = field(default_factory=list)
    socket_ifname: str | None = None
    hosts: list[str] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    nranks: int | None = None
    init_complete: int = 0
    last_collective: dict[int, tuple[int, str]] = field(default_factory=dict)  # rank -> (seq, op)
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    exceptions: list[tuple[str, str]] = field(default_factory=list)
    container: list[str] = field(default_factory=list)
    ld_library_path: list[str] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)  # cuDNN/cuBLAS/NCCL paths seen loaded
    flight: list[FlightRecord] = field(default_factory=list)
    ras: list[RasMismatch] = field(default_factory=list)
    xids: list[tuple[int, str, Where]] = field(default_factory=list)  # (code, PCI address, where)
    # evidence kept for the inferences
    ib_config: list[Where] = field(default_factory=list)
    ib_failed: list[Where] = field(default_factory=list)
    ib_disabled: list[Where] = field(default_factory=list)
    socket_chosen: list[Where] = field(default_factory=list)
    rdma_chosen: list[Where] = field(default_factory=list)
    setup_done: list[Where] = field(default_factory=list)
    watchdog: list[Where] = field(default_factory=list)
    iommu: list[Where] = field(default_factory=list)
    container_where: list[Where] = field(default_factory=list)
    compiler_missing: list[Where] = field(default_factory=list)
    isolated_build: list[Where] = field(default_factory=list)  # pip's isolated build environment
    no_torch: list[Where] = field(default_factory=list)  # No module named 'torch'
    nvcc_missing: list[Where] = field(default_factory=list)
    team_layer: list[Where] = field(default_factory=list)  # envbuilder's team layers building
    shadow_errors: list[Where] = field(default_factory=list)
    ld_where: list[Where] = field(default_factory=list)
    errors_after_setup: int = 0
    after_setup: int = 0  # lines other than NCCL INFO after the last set-up line (a hang has few)
    failure: list[Where] = field(default_factory=list)  # lines saying something failed (not warnings)
    nccltests_header: list[Where] = field(default_factory=list)  # nccl-tests printed its table ...
    nccltests_rows: int = 0  # ... and this many result rows (or its closing average)
    lines: int = 0

    # -- derived

    def transports(self) -> list[str]:
        """Channel transports seen, most used first (``P2P/IPC``, ``SHM``, ``NET/IB`` ...)."""
        return [t for t, _ in sorted(self.channels.items(), key=lambda kv: -kv[1])]

    def world(self) -> int | None:
        if self.nranks:
            return self.nranks
        return (max(self.ranks) + 1) if self.ranks else None

    def stuck(self) -> tuple[int, str, list[int], list[int]] | None:
        """(seq, op, ranks that reached it, ranks that did not) of the collective the job hung
        in, from flight-recorder dumps, else from the watchdog reports of the ranks."""
        if self.flight:
            fr = self.flight[0]
            return fr.seq, fr.op, list(fr.joined), list(fr.missing)
        if not self.last_collective:
            return None
        seq, op = max(self.last_collective.values())
        arrived = sorted(r for r, (s, _) in self.last_collective.items() if s >= seq)
        behind = {r for r, (s, _) in self.last_collective.items() if s < seq}
        # a rank the log shows (an Init COMPLETE, a prefix) that never reported is behind; a rank
        # the log never mentions is not named: its output may simply not be in this log
        behind |= self.ranks - set(self.last_collective)
        return seq, op, arrived, sorted(behind)

    def unseen_ranks(self) -> int:
        """How many ranks of the world never appear in the log (not named as behind)."""
        world = self.world()
        if not world or world > 1 << 20:
            return 0
        return max(0, world - len((self.ranks | set(self.last_collective)) & set(range(world))))

    def summary(self) -> str:
        """One line: 'NCCL 2.21.5 over Socket on eth0; 12 ranks on 2 hosts; rank 7 never
        reached ALLREDUCE #3'."""
        parts: list[str] = []
        head = []
        if "torch" in self.versions:
            head.append(f"torch {self.versions['torch']}")
        if "nccl" in self.versions:
            head.append(f"NCCL {self.versions['nccl']}")
        if "cuda_runtime" in self.versions:
            head.append(f"CUDA {self.versions['cuda_runtime']}")
        net = self.network or next((t.split("/", 1)[1] for t in self.transports() if t.startswith("NET/")), None)
        text = ", ".join(head)
        if net:
            text += (" over " if text else "NCCL over ") + net
            if self.interfaces and net.lower().startswith("socket"):
                text += " on " + ",".join(self.interfaces[:2])
        elif self.transports():
            text += (" via " if text else "NCCL via ") + "/".join(self.transports()[:2])
        if text:
            parts.append(text)
        world = self.world()
        if world:
            ranks = f"{world} rank{'s' if world != 1 else ''}"
            if len(self.hosts) > 1:
                ranks += f" on {len(self.hosts)} hosts"
            parts.append(ranks)
        stuck = self.stuck()
        ras = next((r.reading() for r in self.ras if r.reading()), None)
        if ras and not self.flight:
            parts.append(f"NCCL RAS: {ras}")
        elif stuck is not None:
            seq, op, _, missing = stuck
            name = f"{op} #{seq}"
            unseen = self.unseen_ranks() if self.last_collective and not self.flight else 0
            tail = f" ({unseen} other rank{'s' if unseen != 1 else ''} not in the log)" if unseen else ""
            if missing:
                who = ", ".join(str(r) for r in missing[:8]) + (" ..." if len(missing) > 8 else "")
                parts.append(f"rank{'s' if len(missing) > 1 else ''} {who} never reached {name}{tail}")
            else:
                parts.append(f"stuck in {name}{tail}")
        if self.xids:
            codes = sorted({c for c, _, _ in self.xids})
            named = ", ".join(f"Xid {c} ({xid_info(c).get('name', 'unknown code')})" for c in codes[:3])
            parts.append(named)
        if self.exceptions:
            kind, msg = self.exceptions[-1]
            parts.append(f"{kind}: {msg[:80]}" if msg else kind)
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        stuck = self.stuck()
        return {
            "summary": self.summary(),
            "versions": dict(sorted(self.versions.items())),
            "network": self.network,
            "transports": dict(sorted(self.channels.items(), key=lambda kv: -kv[1])),
            "interfaces": list(self.interfaces),
            "socket_ifname": self.socket_ifname,
            "hosts": list(self.hosts),
            "ranks": sorted(self.ranks),
            "nranks": self.world(),
            "init_complete": self.init_complete,
            "ib_configured": bool(self.ib_config),
            "ib_unavailable": bool(self.ib_failed),
            "ib_disabled": bool(self.ib_disabled),
            "last_collective": {str(r): {"seq": s, "op": op}
                                for r, (s, op) in sorted(self.last_collective.items())},
            "stuck": None if stuck is None else {"seq": stuck[0], "op": stuck[1],
                                                 "arrived": stuck[2], "missing": stuck[3]},
            "flight_recorder": [f.to_dict() for f in self.flight],
            "nccl_ras": [r.to_dict() for r in self.ras],
            "xids": [{"code": c, "pci": p, "name": xid_info(c).get("name")} for c, p, _ in self.xids],
            "frames": [{"file": f, "line": n, "function": fn} for f, n, fn in self.frames],
            "exceptions": [{"type": t, "message": m} for t, m in self.exceptions],
            "container": list(self.container),
            "ld_library_path": list(self.ld_library_path),
            "libraries": list(self.libraries),
        }


class FactCollector:
    """Reads facts line by line (bounded memory: every list is capped)."""

    def __init__(self) -> None:
        self.facts = Facts()
        self._host_set: set[str] = set()
        self._seen: set[str] = set()

    def feed(self, line: str, file: str, line_no: int) -> None:
        f = self.facts
        f.lines += 1
        seen = self._seen
        if line in seen:  # every rank printing the same line: the facts are known
            return
        if len(seen) >= _SEEN_LINES:
            seen.clear()
        seen.add(line)
        if f.setup_done and "NCCL INFO" not in line and line.strip():
            f.after_setup += 1
        first = line[:1]
        if first == "#" or first == " ":
            self._nccltests(line, file, line_no)
        lowered = line.lower()
        words = _find_keywords(lowered)  # one pass names every keyword the checks below test for
        # none of the words in any case (case folding beyond lower() only matters off ASCII): skip
        if words.isdisjoint(_QUICK_SET) and (line.isascii() or _QUICK.search(line) is None):
            return
        if not words.isdisjoint(_VERSION_SET):
            self._versions(line, file, line_no)
        if "nccl" in words:
            self._nccl(line, words, file, line_no)
        self._ranks(line, words, file, line_no)
        if ("xid" in words or "fallen off" in words) and len(f.xids) < _MAX_XIDS:
            self._xid(line, file, line_no)
        if 'file "' in words or not words.isdisjoint(_EXCEPTION_SET):
            self._trace(line, words)
        if len(f.failure) < _MAX_WHERE and not words.isdisjoint(_FAILURE_SET) and _FAILURE.search(line) \
                and not NOT_EVIDENCE.search(line):
            _add(f.failure, _where(file, line_no, line))
        if f.setup_done and not f.errors_after_setup and "NCCL INFO" not in line and _ERRORISH.search(line):
            f.errors_after_setup += 1  # whether any error followed the set-up is all that is used
        if words.isdisjoint(_GATE_KEYS):  # none of the keywords below: skip them all
            return
        w = _where(file, line_no, line)
        self._transports(line, words, w)
        self._environment(line, words, w)

    def _nccltests(self, line: str, file: str, line_no: int) -> None:
        """nccl-tests' result table: its header, then a row per size (or its closing average)."""
        f = self.facts
        if f.nccltests_header:
            if not f.nccltests_rows and (_NCCLTESTS_ROW.match(line) or "Avg bus bandwidth" in line):
                f.nccltests_rows += 1
        elif _NCCLTESTS_HEADER.match(line):
            _add(f.nccltests_header, _where(file, line_no, line))

    def _trace(self, line: str, words: frozenset[str]) -> None:
        """A Python traceback's frames and the exception it ends with."""
        f = self.facts
        if 'file "' in words:
            m = _FRAME.search(line)
            if m:
                f.frames.append((m.group(1), int(m.group(2)), m.group(3)))
                del f.frames[:-_MAX_FRAMES]
        if not words.isdisjoint(_EXCEPTION_SET):
            m = _EXCEPTION.match(line)
            if m:
                item = (m.group(1), (m.group(2) or "").strip()[:200])
                if item not in f.exceptions:
                    f.exceptions.append(item)
                    del f.exceptions[:-_MAX_EXCEPTIONS]

    def _transports(self, line: str, words: frozenset[str], w: Where) -> None:
        """Where InfiniBand was configured, failed or disabled, RDMA or sockets chosen, the IOMMU."""
        f = self.facts
        for bucket, rx, keys in ((f.ib_config, _IB_CONFIG, _BUCKET_KEYS["ib_config"]),
                                 (f.ib_failed, _IB_FAILED, _BUCKET_KEYS["ib_failed"]),
                                 (f.ib_disabled, _IB_DISABLED, _BUCKET_KEYS["ib_disabled"]),
                                 (f.rdma_chosen, _RDMA_CHOSEN, _BUCKET_KEYS["rdma_chosen"]),
                                 (f.socket_chosen, _SOCKET_CHOSEN, _BUCKET_KEYS["socket_chosen"]),
                                 (f.iommu, _IOMMU, _BUCKET_KEYS["iommu"])):
            # a full bucket needs no more lines: in a huge log the checks stop costing
            if len(bucket) < _MAX_WHERE and not words.isdisjoint(keys) and rx.search(line):
                _add(bucket, w)

    def _environment(self, line: str, words: frozenset[str], w: Where) -> None:
        """The container, a missing compiler, shadowing libraries and LD_LIBRARY_PATH."""
        f = self.facts
        if not words.isdisjoint(_CONTAINER_SET):
            m = _CONTAINER.search(line)
            if m:
                hint = m.group(0).strip().lower()
                if hint not in f.container and len(f.container) < 8:
                    f.container.append(hint)
                _add(f.container_where, w)
        if len(f.compiler_missing) < _MAX_WHERE and not words.isdisjoint(_COMPILER_SET) \
                and _COMPILER.search(line):
            _add(f.compiler_missing, w)
        if not words.isdisjoint(_BUILD_SET):
            self._team_build(line, w)
        if not words.isdisjoint(_SHADOW_SET):
            if len(f.shadow_errors) < _MAX_WHERE and _SHADOW_ERROR.search(line):
                _add(f.shadow_errors, w)
            for m in _LIB_LOADED.finditer(line):
                if m.group(1) not in f.libraries and len(f.libraries) < 12:
                    f.libraries.append(m.group(1))
        if "ld_library_path" in words:
            m = _LD_PATH.search(line)
            if m:
                for part in m.group(1).split(":"):
                    if part and part not in f.ld_library_path and len(f.ld_library_path) < 16:
                        f.ld_library_path.append(part)
                _add(f.ld_where, w)

    def _team_build(self, line: str, w: Where) -> None:
        """A team package's build: pip's isolated build env, no torch in it, no nvcc, the layer."""
        f = self.facts
        for bucket, rx in ((f.isolated_build, _ISOLATED), (f.no_torch, _NO_TORCH),
                           (f.nvcc_missing, _NVCC_MISSING), (f.team_layer, _TEAM_LAYER)):
            if len(bucket) < _MAX_WHERE and rx.search(line):
                _add(bucket, w)

    def _xid(self, line: str, file: str, line_no: int) -> None:
        """``NVRM: Xid (PCI:0000:3b:00): 79, ...`` (and the multi-line 'fallen off the bus'
        message newer drivers print without a number: Xid 79)."""
        found = [(int(m.group(2)), m.group(1) or "") for m in _XID.finditer(line)]
        if not found and _FALLEN.search(line):
            found = [(79, "")]
        pci = next((p for _, p in found if p), "")
        for code, _ in found:  # "Xid (PCI:..): 45, ... caused by previous Xid 149": both
            if len(self.facts.xids) < _MAX_XIDS and all(c != code or p != pci for c, p, _ in self.facts.xids):
                self.facts.xids.append((code, pci, _where(file, line_no, line)))

    def _versions(self, line: str, file: str, line_no: int) -> None:
        f = self.facts
        for name, rx in _VERSION_PATTERNS:
            if name in f.versions:
                continue
            m = rx.search(line)
            if m:
                value = m.group(1).rstrip(".,;)")
                if name.startswith("cuda") and value.isdigit() and len(value) >= 4:
                    value = f"{int(value) // 1000}.{int(value) % 1000 // 10}"  # 12060 -> 12.6
                f.versions[name] = value
                f.version_where[name] = _where(file, line_no, line)

    def _nccl(self, line: str, words: frozenset[str], file: str, line_no: int) -> None:
        f = self.facts
        m = _NCCL_PREFIX.match(line) if len(self._host_set) < 512 else None
        if m and m.group(1) not in self._host_set:
            self._host_set.add(m.group(1))
            f.hosts.append(m.group(1))
        if "using network" in words:
            m = _USING_NETWORK.search(line)
            if m:
                f.network = (m.group(1) or m.group(2)).strip()
        for rx in (_NET_SOCKET, _BOOTSTRAP, _NET_IB) if "using" in words else ():
            m = rx.search(line)
            if m and m.group(1) not in f.interfaces and len(f.interfaces) < 8:
                f.interfaces.append(m.group(1))
            if m and f.network is None and rx is not _BOOTSTRAP:  # until "Using network X" says
                f.network = "Socket" if rx is _NET_SOCKET else "IB"
        m = _CHANNEL.search(line) if " via " in words else None
        if m:
            key = m.group(1)
            f.channels[key] = f.channels.get(key, 0) + 1
        m = _IFNAME.search(line) if "ifname" in words else None
        if m:
            f.socket_ifname = m.group(1)
        m = _INIT_COMPLETE.search(line) if "init complete" in words else None
        if m:
            f.init_complete += 1
            f.after_setup = 0
            _add(f.setup_done, _where(file, line_no, line))
            if m.group(1) is not None:
                f.ranks.add(int(m.group(1)))
                f.nranks = max(f.nranks or 0, int(m.group(2)))
        m = _WATCHDOG.search(line) if "[rank" in words and "work" in words else None
        if m:
            rank = int(m.group(1))
            seq = int(m.group(2) or m.group(4))
            op = m.group(3) or "collective"
            f.ranks.add(rank)
            if rank not in f.last_collective or f.last_collective[rank][0] < seq:
                f.last_collective[rank] = (seq, op)
            _add(f.watchdog, _where(file, line_no, line))
        m = _LAST_WORK.search(line) if "last enqueued" in words else None
        if m:
            rank, enq = int(m.group(1)), int(m.group(2))
            f.ranks.add(rank)
            prev = f.last_collective.get(rank)
            if prev is None or prev[0] < enq:
                f.last_collective[rank] = (enq, prev[1] if prev else "collective")

    def _ranks(self, line: str, words: frozenset[str], file: str, line_no: int) -> None:
        f = self.facts
        if "operation" in words or " managed by process " in words:
            self._ras(line, file, line_no)
        if "rank" in words:
            m = _RANK_PREFIX.match(line) or _TORCHRUN_RANK.match(line)
            if m and len(f.ranks) < 4096:
                f.ranks.add(int(m.group(1)))
            if "nranks" in words or "world" in words:
                m = _NRANKS.search(line)
                if m:
                    f.nranks = max(f.nranks or 0, int(m.group(1) or m.group(2)))
        if "host" in words:
            m = _TORCHRUN_HOST.match(line)
            if m and m.group(1) not in self._host_set and len(self._host_set) < 512:
                self._host_set.add(m.group(1))
                f.hosts.append(m.group(1))

    def _ras(self, line: str, file: str, line_no: int) -> None:
        f = self.facts
        m = _RAS_MISMATCH.search(line)
        if m:
            if len(f.ras) < 8:
                f.ras.append(RasMismatch(m.group(1), evidence=[_where(file, line_no, line)]))
            return
        if not f.ras:
            return
        cur = f.ras[-1]
        m = _RAS_GROUP.search(line)
        if m:
            cur.groups.append((int(m.group(1)), int(m.group(2))))
            _add(cur.evidence, _where(file, line_no, line))
            return
        m = _RAS_RANK.search(line)
        if m and len(cur.listed) < 64:
            cur.listed.append((int(m.group(1)), m.group(2)))
            _add(cur.evidence, _where(file, line_no, line))


# ----------------------------------------------------------------------------- reasoning


@dataclass(frozen=True)
class Inference:
    """Weight for one category, the reason in words and the lines it rests on."""

    category: str
    weight: float
    reason: str
    evidence: tuple[Where, ...]
    scale: float = 1.0  # multiplies the category's final score (a demotion when < 1)


def _single_host_p2p(f: Facts) -> bool:
    t = f.transports()
    return bool(t) and not any(x.startswith("NET/") for x in t) and len(f.hosts) <= 1


def _team_build_inferences(f: Facts) -> list[Inference]:
    """A package that builds against torch (flash-attn and its kind), built without torch or nvcc."""
    out: list[Inference] = []
    if f.no_torch and f.isolated_build:
        out.append(Inference(
            "container_build", 3.0,
            "build isolation: a package whose build imports torch (flash-attn and its kind) was built in "
            "pip's isolated build environment, which has no torch; name it in the project's `compiled` "
            "list (envbuilder knows flash-attn, apex, xformers ...) and render again: envbuilder builds it "
            "after torch with --no-build-isolation in layer-team-compiled",
            tuple(f.no_torch[:2] + f.isolated_build[:1])))
    if f.nvcc_missing and f.team_layer:
        out.append(Inference(
            "container_build", 3.0,
            "no compiler: a team package compiles CUDA code and its builder has no nvcc (CUDA_HOME); name "
            "it in the project's `compiled` list: envbuilder builds it in a builder with an nvcc of torch's "
            "CUDA (a devel image, Debian's non-free nvcc or NVIDIA's CUDA wheels) and refuses a stack "
            "without one before building",
            tuple(f.nvcc_missing[:2] + f.team_layer[:1])))
    return out


def _host_of(text: str) -> str | None:
    m = _NCCL_PREFIX.match(text)
    return m.group(1) if m else None


def _network_inferences(f: Facts) -> list[Inference]:
    """Readings of where NCCL's traffic went that need no error line (issue 45): sockets over an
    InfiniBand interface, a virtual interface, nccl-tests that never printed a result."""
    out: list[Inference] = []
    # -- sockets over IPoIB: InfiniBand is there, NCCL did not open it (no verbs in the image)
    ipoib = [w for w in f.socket_chosen if _IPOIB_SOCKET.search(w[2])]
    if ipoib and not f.ib_disabled and not f.rdma_chosen:
        out.append(Inference("ib_rdma", 5.0, "NCCL sends over sockets on an InfiniBand (IPoIB) interface: "
                             "the host has InfiniBand, but NCCL did not use it", tuple(f.ib_failed[:1] + ipoib[:2])))
    # -- hosts that chose different networks (IB on one, sockets on another): NCCL's ranks must
    # all use the same transport between them
    rdma_hosts = {h for h in (_host_of(w[2]) for w in f.rdma_chosen) if h}
    socket_hosts = {h for h in (_host_of(w[2]) for w in f.socket_chosen) if h} - rdma_hosts
    if rdma_hosts and socket_hosts and not f.ib_disabled:
        out.append(Inference("ib_rdma", 5.0, f"the hosts chose different networks: RDMA on "
                             f"{', '.join(sorted(rdma_hosts)[:2])}, sockets on {', '.join(sorted(socket_hosts)[:2])}",
                             tuple(f.rdma_chosen[:1] + f.ib_failed[:1] + f.socket_chosen[:1])))
    # -- a virtual interface chosen for the bootstrap or the sockets (docker0, veth, a tunnel)
    virtual = [i for i in f.interfaces if _VIRTUAL_IF.match(i)]
    if virtual:
        out.append(Inference("network_interface", 3.0, f"NCCL uses the virtual interface {virtual[0]} (peers on "
                             "other hosts cannot reach it): pin NCCL_SOCKET_IFNAME to the interface between the hosts",
                             ()))
    # -- nccl-tests printed its table header and never a result: it hung at the first size
    if f.nccltests_header and not f.nccltests_rows:
        out.append(Inference("p2p_topology" if len(f.hosts) <= 1 else "nccl_timeout", 2.5,
                             "nccl-tests printed its header and no result: the first collective never completed",
                             tuple(f.nccltests_header[:1])))
    return out


def infer(f: Facts) -> list[Inference]:
    """Causes supported by the facts (and by the absence of facts)."""
    out: list[Inference] = []
    multi_host = len(f.hosts) > 1
    # -- RDMA configured or attempted, and NCCL ended up on sockets (or never got RDMA)
    if not f.ib_disabled and not f.rdma_chosen:
        if f.ib_config and f.socket_chosen:
            out.append(Inference("ib_rdma", 8.0, "InfiniBand/RDMA is configured but NCCL chose sockets",
                                 tuple(f.ib_config[:1] + f.ib_failed[:1] + f.socket_chosen[:2])))
        elif f.ib_config and f.ib_failed:
            out.append(Inference("ib_rdma", 6.0, "InfiniBand/RDMA is configured but could not be opened",
                                 tuple(f.ib_config[:2] + f.ib_failed[:3])))
        elif f.ib_failed and f.socket_chosen and multi_host:
            out.append(Inference("ib_rdma", 4.5, "NCCL found no RDMA device and fell back to sockets "
                                 "between hosts", tuple(f.ib_failed[:2] + f.socket_chosen[:2])))
    out += _network_inferences(f)
    # -- a hang: set-up done, ranks waiting, some never arrived
    stuck = f.stuck()
    if f.flight:
        fr = f.flight[0]
        if fr.missing:
            out.append(Inference("nccl_timeout", 9.0,
                                 f"flight recorder: rank(s) {', '.join(map(str, fr.missing[:16]))} never "
                                 f"joined {fr.op} #{fr.seq} of process group {fr.process_group}",
                                 ((fr.source, 0, f"ranks {list(fr.joined)} reached {fr.op} #{fr.seq}; "
                                   f"missing {list(fr.missing)}"),)))
    elif any(r.reading() for r in f.ras):
        r = next(r for r in f.ras if r.reading())
        out.append(Inference("nccl_timeout", 7.0, f"NCCL RAS: {r.reading()}", tuple(r.evidence[:4])))
    elif stuck is not None and f.watchdog:
        seq, op, _, missing = stuck
        if seq > 1 and missing:
            out.append(Inference("nccl_timeout", 3.0,
                                 f"rank(s) {', '.join(map(str, missing[:16]))} never reached {op} #{seq}",
                                 tuple(f.watchdog[:3])))
    # -- single node, only P2P/SHM paths, hang (a watchdog or nothing after set-up)
    # a hang told by its last lines: set-up completed and then (nearly) nothing; a run that went
    # on printing after its set-up (training, a smoke summary) did not hang there
    hung = bool(f.watchdog) or (bool(f.setup_done) and f.errors_after_setup == 0 and not f.exceptions
                                and f.after_setup <= _HANG_TAIL)
    if _single_host_p2p(f) and hung and any(t.startswith("P2P") for t in f.transports()):
        weight = 5.0 if f.iommu else 2.5
        out.append(Inference("p2p_topology", weight,
                             "one node, GPUs talk over P2P" + (" with IOMMU/ACS in the path" if f.iommu else "")
                             + ", and the first collectives hang",
                             tuple(f.iommu[:2] + f.setup_done[:1])))
        out.append(Inference("network_interface", 0.0, "one node, no network transport in use",
                             (), scale=0.4))
    # -- DeepSpeed/extension JIT without a compiler
    if f.compiler_missing:
        out.append(Inference("deepspeed_op_build", 3.0, "a JIT build found no compiler (c++/nvcc)",
                             tuple(f.compiler_missing[:3])))
    out += _team_build_inferences(f)
    # -- a cuDNN/cuBLAS from another path than the one torch ships
    outside = [p for p in f.libraries if "site-packages" not in p and "dist-packages" not in p
               and ("cudnn" in p or "cublas" in p)]
    foreign_ld = [p for p in f.ld_library_path if "cuda" in p.lower() or "cudnn" in p.lower()]
    if f.shadow_errors and (outside or foreign_ld):
        out.append(Inference("lib_shadowing", 5.0,
                             "cuDNN/cuBLAS errors with another copy on the library path",
                             tuple(f.shadow_errors[:2] + f.ld_where[:1])))
    # -- NVIDIA Xid errors, read with NVIDIA's catalogue (envbuilder/data/xid.yaml)
    if f.xids:
        out.append(Inference("gpu_xid", 2.0, _xid_reason(f.xids), tuple(w for _, _, w in f.xids[:3])))
    return out


def _xid_reason(xids: list[tuple[int, str, Where]]) -> str:
    """'Xid 79 on 0000:b3:00 (GPU has fallen off the bus): <what to do>', the root first: a
    follow-up Xid (45) is named after the one that caused it."""
    ordered = sorted(xids, key=lambda x: (xid_info(x[0]).get("kind") == "follow-up", xids.index(x)))
    code, pci, _ = ordered[0]
    info = xid_info(code)
    where = f" on {pci}" if pci else ""
    if not info:
        return f"Xid {code}{where}: not in NVIDIA's Xid catalogue as envbuilder knows it ({XID_SOURCE})"
    others = sorted({c for c, _, _ in xids} - {code})
    more = f" (also Xid {', '.join(map(str, others))})" if others else ""
    return f"Xid {code}{where} ({info['name']}, {info['kind']}){more}: {info['action']} ({XID_SOURCE})"


XID_SOURCE = "https://docs.nvidia.com/deploy/xid-errors/index.html"
_XID_CATALOGUE: list[dict[int, dict[str, str]]] = []


def xid_info(code: int) -> dict[str, str]:
    """NVIDIA's catalogue entry for an Xid code (name, kind, action); {} when unknown."""
    if not _XID_CATALOGUE:
        import yaml

        from envbuilder.core.resources import data_path

        data = yaml.safe_load(data_path("xid.yaml").read_text(encoding="utf-8"))
        _XID_CATALOGUE.append({int(k): v for k, v in data["xids"].items()})
    return _XID_CATALOGUE[0].get(code, {})
