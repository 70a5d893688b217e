"""What NCCL says it used, read from its own ``NCCL_DEBUG=INFO`` lines (subsystems INIT, NET,
GRAPH, ENV): the NCCL version, the net plugin it loaded, the network it chose (IB with its HCAs,
Socket with its interfaces, libfabric/OFI for EFA), the transport of every channel between two
ranks (P2P/IPC, P2P/CUMEM, P2P/direct, SHM, NET/IB, NET/Socket, NET/OFI), NVLS, the CollNet
plugin, whether the node's GPUs share NVLink, and the reasons NCCL gives for not using IB or
a plugin (``NET/IB : No device found``, ``Failed to open libibverbs.so``, ``Could not find:
libnccl-net.so``).

The smoke payload (ddp_smoke.py, beside this file in an image) parses each rank's own lines
with it; envbuilder parses a whole job's log with the same functions (``smoke --records LOG``).
It judges nothing: envbuilder/run/transport.py checks the result against the declared fabric.
Standard library only, Python 3.8+, like the payload.

Line forms read (all from NCCL's own output; real examples in tests/fixtures/nccl_info/):
``host:pid:tid [dev] NCCL INFO <message>`` with anything before it (``[0] ``, ``[1,7]<stdout>:``,
a timestamp), or a bare ``<message>`` when a tool stripped the prefix; ``NCCL version X`` as
rank 0 prints it.
"""

import re

# host:pid:tid [dev] NCCL INFO|WARN message (host may be <masked>; anything may come before)
_PREFIX = re.compile(r"(?:^|[\s\]:|>])(?P<host>[A-Za-z0-9_.<>\-]+):(?P<pid>\d+):(?P<tid>\d+) "
                     r"\[(?P<dev>\d+)\] NCCL (?P<level>INFO|WARN|TRACE) (?P<msg>.*)$")
_BARE = re.compile(r"NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)")
# Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0 ; Channel 00 : 1[1e0] -> 0[1e0] via P2P/IPC
# (2.7+), and NCCL 2.4's Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0
_CHANNEL = re.compile(r"(?:Channel|Ring) \d+(?:/\d+)? : (\d+)(?:\[[0-9a-fA-Fx]+\])? -> (\d+)"
                      r"(?:\[[0-9a-fA-Fx]+\])?(?: \[(?:send|receive)\])? via (.+?)\s*$")
_COMM = re.compile(r"\bcomm 0x[0-9a-f]+ rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) "
                   r"localRank (\d+)")
_INIT = re.compile(r"\bcomm 0x[0-9a-f]+ rank (\d+) nranks (\d+) cudaDev (\d+)")
_USING_NET = re.compile(r"^Using network (.+?)\s*$")
_IB_USING = re.compile(r"NET/IB ?: Using (.*?)(?:;|$)")
_IB_DEV = re.compile(r"\[\d+\]([A-Za-z0-9_.\-]+):(\d+)/([A-Za-z]+)")
_SOCKET_USING = re.compile(r"NET/Socket ?: Using (.*)$")
_SOCKET_DEV = re.compile(r"\[\d+\]([A-Za-z0-9_.@\-]+):")
_OFI_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (\w+)")
_PATTERN = re.compile(r"Pattern \d+, crossNic \d+, nChannels \d+, (?:bw|speed) [\d.]+/[\d.]+, "
                      r"type (\w+)/(\w+)")
_NVLS_CHANNELS = re.compile(r"(\d+) nvls channels")
_ENV = re.compile(r"^(NCCL_[A-Z0-9_]+) set (?:by environment )?to (\S+?)\.?$")
_COLLNET = re.compile(r"Loaded collnet plugin (.+?)(?: \(v\d+\))?\s*$")
_NET_PLUGIN = re.compile(r"(?:Loaded net plugin (.+?)(?: \(v\d+\))?\s*$|Plugin Path : (\S+))")
_PLUGIN_MISSING = re.compile(r"NET/Plugin ?: ?(?:No plugin found|Could not find: libnccl-net|"
                             r"Plugin load \(libnccl-net\.so\) returned|dlerror=libnccl-net)")
# NCCL's own words when it cannot use an RDMA network (kept as reasons, in order of weight)
_REASONS = (
    ("ibverbs_missing", re.compile(r"Failed to open libibverbs\.so")),
    ("ib_no_device", re.compile(r"NET/IB ?: No device found")),
    ("ib_init_failed", re.compile(r"Failed to initialize NET plugin IB")),
    ("ofi_failed", re.compile(r"NET/OFI .*(?:[Ff]ailed|Could not find any optimal provider|"
                              r"[Nn]o .*provider)")),
    ("plugin_missing", _PLUGIN_MISSING),
)
# a cheap test first: a job's log is mostly lines none of the patterns above can match
_KEYWORDS = re.compile(r"NCCL|NET/|Channel|Ring \d|comm 0x|Using network|NVL|Pattern|nvls|"
                       r"Plugin|set (?:by environment )?to")
MAX_LINKS = 4096  # a summary stays small: (src, dst, transport) triples beyond this are dropped


def transport_kind(via):
    """``NET/IB/0/GDRDMA`` -> ``NET/IB``; ``P2P/CUMEM/read`` -> ``P2P/CUMEM``;
    ``SHM/direct/direct`` -> ``SHM``; ``NET/AWS Libfabric/0`` -> ``NET/OFI``."""
    v = via.strip()
    if v.startswith("P2P/"):
        part = v.split("/")[1]
        if part.startswith("IPC"):
            return "P2P/IPC"
        if part.startswith("CUMEM"):
            return "P2P/CUMEM"
        if part.startswith("direct"):
            return "P2P/direct"
        return "P2P"
    if v.startswith("SHM"):
        return "SHM"
    if v.startswith("NET/"):
        name = v.split("/")[1]
        return "NET/" + network_kind(name)
    if "NVLS" in v:
        return "NVLS"
    if "COLLNET" in v.upper():
        return "CollNet"
    return v.split("/")[0] or v


def network_kind(name):
    """NCCL's network name (``Using network X``, ``NET/X/0``) as a kind: IB (its IB verbs
    transport, also through HPC-X's IBext plugin; RoCE too), Socket, OFI (libfabric: EFA)."""
    n = name.strip()
    low = n.lower()
    if low.startswith("ib"):
        return "IB"
    if low.startswith("socket"):
        return "Socket"
    if "libfabric" in low or low.startswith("ofi") or low.startswith("aws"):
        return "OFI"
    return n


def new_info():
    return {"nccl_version": None, "net_plugin": None, "networks": [], "ib_devices": [],
            "ib_links": [], "socket_ifaces": [], "ofi_provider": None, "reasons": [],
            "env": {}, "ranks": {}, "links": [], "gdrdma": False, "nvls_available": False,
            "nvls_channels": 0, "collnet_plugin": None, "nvlink": False, "graph": [],
            "nnodes": 0, "nranks": 0, "warnings": [], "hosts": []}


def _add(lst, value, limit=64):
    if value not in lst and len(lst) < limit:
        lst.append(value)


def parse_lines(lines, info=None):
    """Read NCCL's lines (any iterable of str) into an info dict (``new_info``'s keys)."""
    info = info if info is not None else new_info()
    procs = {}  # (host, pid, dev) -> rank, from NCCL's comm lines
    nets = []  # (host, pid, dev, network) before the rank of that process is known
    for raw in lines:
        if not _KEYWORDS.search(raw):
            continue
        line = raw.rstrip("\r\n")
        m = _VERSION.search(line)
        if m and not info["nccl_version"]:
            info["nccl_version"] = m.group(1)
        p = _PREFIX.search(line)
        if p:
            host, key, level, msg = p.group("host"), (p.group("host"), p.group("pid"),
                                                      p.group("dev")), p.group("level"), p.group("msg")
        else:
            b = _BARE.search(line)
            if b:
                host, key, level, msg = None, None, b.group("level"), b.group("msg")
            elif "NCCL version" not in line:
                host, key, level, msg = None, None, "INFO", line.strip()
            else:
                continue
        if host and "<" not in host:  # a host a tool masked says nothing
            _add(info["hosts"], host, 256)
        if level == "WARN":
            _add(info["warnings"], msg.strip()[:300], 20)
        _read_message(info, msg.strip(), host, key, procs, nets)
    for host, pid, dev, net in nets:
        r = procs.get((host, pid, dev))
        if r is not None:
            info["ranks"].setdefault(str(r), {}).setdefault("network", net)
    return info


def _on_channel(info, m, ctx):
    via = m.group(3)
    if "GDRDMA" in via:
        info["gdrdma"] = True
    link = [int(m.group(1)), int(m.group(2)), transport_kind(via)]
    if link not in info["links"] and len(info["links"]) < MAX_LINKS:
        info["links"].append(link)


def _on_comm(info, m, ctx):
    host, key, procs = ctx[0], ctx[1], ctx[2]
    rank = int(m.group(1))
    rec = info["ranks"].setdefault(str(rank), {})
    info["nranks"] = max(info["nranks"], int(m.group(2)))
    if host:
        rec["host"] = host
    if key:
        procs[key] = rank
    if m.re is _COMM:
        info["nnodes"] = max(info["nnodes"], int(m.group(3)))
        rec["local_ranks"] = int(m.group(4))


def _on_network(info, m, ctx):
    net = network_kind(m.group(1))
    _add(info["networks"], net)
    if ctx[1]:
        ctx[3].append(ctx[1] + (net,))


def _on_ib(info, m, ctx):
    for dev, port, link in _IB_DEV.findall(m.group(1)):
        _add(info["ib_devices"], "%s:%s" % (dev, port))
        _add(info["ib_links"], link)


def _on_socket(info, m, ctx):
    for iface in _SOCKET_DEV.findall(m.group(1)):
        _add(info["socket_ifaces"], iface)


def _on_pattern(info, m, ctx):
    _add(info["graph"], "%s/%s" % (m.group(1), m.group(2)))
    if m.group(1) == "NVL":
        info["nvlink"] = True


def _on_nvlink(info, m, ctx):
    info["nvlink"] = True
    if m.group(0).startswith("NVLS"):
        info["nvls_available"] = True


def _on_nvls_channels(info, m, ctx):
    info["nvls_channels"] = max(info["nvls_channels"], int(m.group(1)))


def _set(key, limit=200):
    def on(info, m, ctx):
        info[key] = m.group(1)[:limit]
    return on


def _on_env(info, m, ctx):
    info["env"][m.group(1)] = m.group(2)[:200]


def _on_plugin(info, m, ctx):
    info["net_plugin"] = (m.group(1) or m.group(2))[:200]


# (pattern, what it records), tried in order; the first that matches a message wins
_HANDLERS = (
    (_CHANNEL, _on_channel), (_COMM, _on_comm), (_INIT, _on_comm), (_USING_NET, _on_network),
    (_IB_USING, _on_ib), (_SOCKET_USING, _on_socket), (_OFI_PROVIDER, _set("ofi_provider")),
    (_PATTERN, _on_pattern), (re.compile(r"NVL\[|NVLS multicast support is available"), _on_nvlink),
    (_NVLS_CHANNELS, _on_nvls_channels), (_ENV, _on_env), (_COLLNET, _set("collnet_plugin", 100)),
    (_NET_PLUGIN, _on_plugin),
)


def _read_message(info, msg, host, key, procs, nets):
    for rx, on in _HANDLERS:
        m = rx.search(msg)
        if m:
            on(info, m, (host, key, procs, nets))
            return
    for name, rx in _REASONS:
        if rx.search(msg):
            _add(info["reasons"], name)
            if name == "plugin_missing" and not info["net_plugin"]:
                info["net_plugin"] = "internal"
            return
    if "NET/OFI" in msg and not info["net_plugin"]:
        info["net_plugin"] = "aws-ofi-nccl"


def merge(infos):
    """One info dict from several (each rank's own lines)."""
    out = new_info()
    for i in infos:
        if not i:
            continue
        for k in ("nccl_version", "net_plugin", "ofi_provider", "collnet_plugin"):
            out[k] = out[k] or i.get(k)
        for k, limit in (("networks", 64), ("ib_devices", 64), ("ib_links", 64),
                         ("socket_ifaces", 64), ("reasons", 64), ("graph", 64), ("warnings", 20),
                         ("hosts", 256)):
            for v in i.get(k) or ():
                _add(out[k], v, limit)
        for k in ("gdrdma", "nvls_available", "nvlink"):
            out[k] = out[k] or bool(i.get(k))
        for k in ("nvls_channels", "nnodes", "nranks"):
            out[k] = max(out[k], int(i.get(k) or 0))
        out["env"].update(i.get("env") or {})
        for r, rec in (i.get("ranks") or {}).items():
            out["ranks"].setdefault(str(r), {}).update(rec)
        for link in i.get("links") or ():
            if list(link) not in out["links"] and len(out["links"]) < MAX_LINKS:
                out["links"].append(list(link))
    return out


def seen_anything(info):
    """Whether NCCL's lines said anything about transports at all."""
    return bool(info and (info.get("links") or info.get("networks") or info.get("nccl_version")
                          or info.get("reasons")))
