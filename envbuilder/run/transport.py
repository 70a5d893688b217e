"""The transport a run really used, judged against the fabric the target declares.

NCCL says in its INFO lines which transport each channel between two ranks took (P2P/IPC,
P2P/CUMEM, SHM, NET/IB, NET/Socket, NET/OFI ...) and why it did not use InfiniBand or a plugin.
The smoke payload captures each rank's own lines and parses them (payload/nccl_info.py); a job's
log is parsed here with the same functions. ``judge`` sorts every link into intra-node and
inter-node peers and checks the inter-node ones against the declared fabric:

- ``ib`` and ``roce``: NCCL's IB verbs transport (``NET/IB``, also through HPC-X's IBext plugin;
  RoCE is IB verbs over Ethernet and shows as ``NET/IB`` with the ``/RoCE`` link layer);
- ``efa``: libfabric through AWS's OFI NCCL plugin (``NET/OFI``: ``NET/AWS Libfabric``,
  ``Using network Libfabric``);
- ``socket``: sockets declared as intended (nothing fails).

A socket fallback under a declared RDMA fabric fails, naming the ranks, the peers, what NCCL said
and the fix. Where NCCL sees NVLink between a node's GPUs and two ranks of that node still talk
over SHM or the network, it warns. A gloo run records "gloo over TCP" and claims nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from envbuilder.run.payload import nccl_info

FABRICS = ("ib", "efa", "roce", "socket")
# the transport each declared fabric means between nodes (None: anything is intended)
WANT: dict[str, str | None] = {"ib": "NET/IB", "roce": "NET/IB", "efa": "NET/OFI", "socket": None}
NAMES = {"ib": "InfiniBand (NCCL's NET/IB)", "roce": "RoCE (NCCL's NET/IB over Ethernet)",
         "efa": "EFA (libfabric through the OFI NCCL plugin, NET/OFI)", "socket": "sockets"}
GLOO = "gloo over TCP"
NO_RANK = -1  # a network NCCL chose on nodes whose ranks its lines do not name


@dataclass(frozen=True)
class Transport:
    """The judged transport of one run: the ``transport`` check and the attestation's record."""

    status: str  # pass, fail or skip
    detail: str
    record: dict[str, Any]
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _hosts_of(info: Mapping[str, Any], hosts: Mapping[int, str] | None) -> dict[int, str]:
    """Rank -> host from the smoke job's records, else from NCCL's comm lines; a host name a
    tool masked (``<cluster_name>``) says nothing and is left out."""
    out: dict[int, str] = {}
    for r, rec in (info.get("ranks") or {}).items():
        h = rec.get("host")
        if h and "<" not in h:
            out[int(r)] = str(h)
    out.update({int(r): str(h) for r, h in (hosts or {}).items() if h})
    return out


def classify(info: Mapping[str, Any], hosts: Mapping[int, str] | None = None
             ) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, str]]]:
    """(intra-node links, inter-node links) as (src, dst, transport). Two ranks whose hosts are
    known are on one node when the hosts are the same; otherwise NCCL's network transports are
    taken as inter-node and P2P/SHM as intra-node (NCCL uses them only within a node)."""
    where = _hosts_of(info, hosts)
    intra: list[tuple[int, int, str]] = []
    inter: list[tuple[int, int, str]] = []
    for src, dst, kind in info.get("links") or ():
        hs, hd = where.get(int(src)), where.get(int(dst))
        same = hs == hd if hs is not None and hd is not None else not str(kind).startswith("NET/")
        (intra if same else inter).append((int(src), int(dst), str(kind)))
    return intra, inter


def _inter_by_network(info: Mapping[str, Any], hosts: Mapping[int, str] | None,
                      nnodes: int) -> list[tuple[int, int, str]]:
    """Without channel lines (an excerpt, or NCCL before the channels were set up), each rank's
    chosen network (``Using network X``) is what it uses between nodes: one (rank, rank, NET/X)
    per rank whose network is known, when the ranks span nodes."""
    where = _hosts_of(info, hosts)
    node_names = set(where.values()) | set(info.get("hosts") or ())
    spans = len(node_names) > 1 or nnodes > 1 or int(info.get("nnodes") or 0) > 1
    if not spans:
        return []
    out = []
    for r, rec in sorted((info.get("ranks") or {}).items(), key=lambda kv: int(kv[0])):
        if rec.get("network"):
            out.append((int(r), int(r), "NET/" + str(rec["network"])))
    if not out:  # no rank known: the nodes' choice (NO_RANK)
        out = [(NO_RANK, NO_RANK, "NET/" + str(n)) for n in info.get("networks") or ()]
    return out


def _ranks_text(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    rs = sorted(set(ranks))
    parts: list[str] = []
    start = prev = rs[0] if rs else 0
    for r in rs[1:] + [None]:  # type: ignore[list-item]
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ", ".join(parts)


def _links_text(links: list[tuple[int, int, str]], where: Mapping[int, str]) -> str:
    def rank(r: int) -> str:
        return f"rank {r}" + (f" ({where[r]})" if r in where else "")

    shown = []
    for src, dst, kind in links[:6]:
        shown.append(f"{rank(src)} -> {rank(dst)} via {kind}" if src != dst else
                     f"the nodes chose {kind}" if src == NO_RANK else f"{rank(src)} chose {kind}")
    return "; ".join(shown) + (f"; and {len(links) - 6} more" if len(links) > 6 else "")


def cause(info: Mapping[str, Any], fabric: str) -> str:
    """The likely cause and fix of an RDMA fabric not used, from NCCL's own words."""
    reasons, env = list(info.get("reasons") or ()), dict(info.get("env") or {})
    out = []
    if env.get("NCCL_IB_DISABLE") == "1" or env.get("NCCL_NET", "").lower() == "socket":
        set_ = "NCCL_IB_DISABLE=1" if env.get("NCCL_IB_DISABLE") == "1" else f"NCCL_NET={env['NCCL_NET']}"
        out.append(f"{set_} is set in the job's environment: NCCL was told to use sockets; unset it")
    if fabric == "efa":
        if "plugin_missing" in reasons:
            out.append("NCCL found no OFI plugin (NET/Plugin: libnccl-net.so not found): build the "
                       "image with --fabric efa (aws-ofi-nccl in /opt/amazon/ofi-nccl/lib, on the "
                       "loader's path) or set NCCL_NET_PLUGIN")
        if "ofi_failed" in reasons or info.get("ofi_provider") is None:
            out.append("libfabric found no EFA device: give the pod its EFA resource "
                       "(vpc.amazonaws.com/efa) or the container /dev/infiniband/uverbs* "
                       "(docker run --device), with memlock unlimited")
        return "; ".join(out) or "NCCL's lines give no reason: rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"
    if "ibverbs_missing" in reasons:
        out.append("the image has no RDMA user space (NCCL: Failed to open libibverbs.so): build it "
                   "with --fabric ib (ibverbs-providers, rdmacm)")
    if "ib_no_device" in reasons or "ib_init_failed" in reasons:
        hca = env.get("NCCL_IB_HCA")
        out.append("NCCL found no InfiniBand device (NET/IB : No device found): the container has no "
                   "/dev/infiniband (docker run --device /dev/infiniband --cap-add IPC_LOCK; a "
                   "Kubernetes pod needs its RDMA resource, e.g. rdma/ib: 1, the job files' "
                   "[jobs] resources)" + (f", or NCCL_IB_HCA={hca} names no HCA of the node" if hca
                                          else ", or NCCL_IB_HCA names no HCA of the node"))
    if not out and info.get("ib_devices"):
        out.append(f"NCCL saw HCAs ({', '.join(info['ib_devices'][:4])}) but chose sockets between "
                   f"nodes: check that the nodes' HCAs share a fabric (ibstat, ib_write_bw)")
    return "; ".join(out) or ("NCCL's lines give no reason: rerun with NCCL_DEBUG=INFO "
                              "NCCL_DEBUG_SUBSYS=INIT,NET and check NCCL_IB_HCA, the node's "
                              "/dev/infiniband and the pod's RDMA resource")


def fabric_used(inter: list[str], info: Mapping[str, Any]) -> str:
    """The inter-node fabric in the declared fabric's terms: ib, roce, efa, socket, or none
    (no inter-node peer)."""
    if not inter:
        return "none"
    if "NET/Socket" in inter:
        return "socket"
    if "NET/OFI" in inter:
        return "efa"
    if "NET/IB" in inter:
        return "roce" if "RoCE" in (info.get("ib_links") or ()) and "IB" not in (info.get("ib_links") or ()) else "ib"
    return inter[0].split("/", 1)[-1].lower()


def judge(info: Mapping[str, Any] | None, *, backend: str, fabric: str | None = None,
          hosts: Mapping[int, str] | None = None, nnodes: int = 1) -> Transport:
    """The ``transport`` check of one run (see the module docstring)."""
    declared = {"declared_fabric": fabric}
    if backend == "gloo":
        return Transport("pass", f"{GLOO}: the gloo backend claims no GPU transport",
                         {"backend": "gloo", **declared, "summary": GLOO, "fabric_used": "tcp",
                          "intra_node": ["TCP"], "inter_node": ["TCP"] if nnodes > 1 else []})
    if not info or not nccl_info.seen_anything(info):
        return Transport("skip", "NCCL reported no transport: its INFO lines are not in these records "
                         "(the smoke job captures them itself; a job's own log needs NCCL_DEBUG=INFO "
                         "NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH)",
                         {"backend": backend, **declared, "summary": "not recorded"})
    where = _hosts_of(info, hosts)
    intra, inter = classify(info, hosts)
    if not inter:
        inter = _inter_by_network(info, hosts, nnodes)
    intra_kinds = sorted({k for _, _, k in intra})
    inter_kinds = sorted({k for _, _, k in inter})
    record = _record(info, backend, fabric, intra_kinds, inter_kinds)
    warnings = tuple(nvlink_warnings(info, intra, where))
    seen = (f"intra-node {', '.join(intra_kinds) or 'none seen'}; inter-node "
            f"{', '.join(inter_kinds) or 'none (one node)'}")
    want = WANT.get(fabric or "")
    if want is None or fabric is None:
        how = ("sockets declared as intended (--fabric socket)" if fabric == "socket" else
               "no fabric declared (--fabric ib|efa|roce|socket)")
        return Transport("pass", f"{seen}; {how}", record, warnings)
    bad = [link for link in inter if link[2] != want]
    if not bad:
        note = (" over RoCE" if fabric == "ib" and record["fabric_used"] == "roce" else "")
        return Transport("pass", f"{seen}: inter-node peers used {want}{note} as --fabric {fabric} "
                         f"declares" if inter else f"{seen}: one node, no inter-node peer to check "
                         f"against --fabric {fabric}", record, warnings)
    ranks = sorted({r for s, d, _ in bad for r in (s, d) if r != NO_RANK})
    used = ", ".join(sorted({k for _, _, k in bad}))
    ifaces = info.get("socket_ifaces") or ()
    return Transport("fail", (
        f"{_who(ranks, where, info)} used {used}" + (f" ({', '.join(ifaces[:4])})" if ifaces and
                                                      "NET/Socket" in used else "")
        + f" between nodes, not {NAMES[fabric]} as --fabric {fabric} declares. Likely cause and "
        f"fix: {cause(info, fabric)}. Seen: {_links_text(bad, where)}"), record, warnings)


def _who(ranks: list[int], where: Mapping[int, str], info: Mapping[str, Any]) -> str:
    """'ranks 0-1 (manolinux), 2-3 (manolinux1)', 'ranks 6, 15', or the nodes when no rank is known."""
    if not ranks:
        return f"nodes {', '.join(sorted(info.get('hosts') or ())[:8]) or '(unnamed)'}"
    by: dict[str, list[int]] = {}
    for r in ranks:
        by.setdefault(where.get(r, ""), []).append(r)
    if list(by) == [""]:
        return f"ranks {_ranks_text(ranks)}"
    return "ranks " + ", ".join(f"{_ranks_text(rs)}" + (f" ({h})" if h else "")
                                for h, rs in sorted(by.items(), key=lambda kv: kv[1][0]))


def _record(info: Mapping[str, Any], backend: str, fabric: str | None, intra: list[str],
            inter: list[str]) -> dict[str, Any]:
    return {"backend": backend, "declared_fabric": fabric,
            "summary": f"intra-node {'/'.join(intra) or '-'}, inter-node {'/'.join(inter) or '-'}",
            "fabric_used": fabric_used(inter, info), "intra_node": intra, "inter_node": inter,
            "nccl_version": info.get("nccl_version"), "net_plugin": info.get("net_plugin"),
            "networks": list(info.get("networks") or ()), "ib_devices": list(info.get("ib_devices") or ())[:16],
            "ib_links": list(info.get("ib_links") or ()), "socket_ifaces": list(info.get("socket_ifaces") or ())[:8],
            "ofi_provider": info.get("ofi_provider"), "gdrdma": bool(info.get("gdrdma")),
            "nvlink": bool(info.get("nvlink")), "nvls": bool(info.get("nvls_available")) or
            int(info.get("nvls_channels") or 0) > 0, "collnet": info.get("collnet_plugin"),
            "reasons": list(info.get("reasons") or ())}


def nvlink_warnings(info: Mapping[str, Any], intra: list[tuple[int, int, str]],
                    where: Mapping[int, str]) -> list[str]:
    """Where NCCL sees NVLink between a node's GPUs and two ranks of one node still use SHM or
    the network: P2P is off (NCCL_P2P_DISABLE, or ranks in separate containers or pods)."""
    if not info.get("nvlink"):
        return []
    slow = [link for link in intra if link[2] == "SHM" or link[2].startswith("NET/")]
    if not slow:
        return []
    env = dict(info.get("env") or {})
    why = ("NCCL_P2P_DISABLE=1 is set" if env.get("NCCL_P2P_DISABLE") == "1" else
           "P2P between them is off (NCCL_P2P_DISABLE or NCCL_P2P_LEVEL, or the ranks run in "
           "separate containers or pods that share no IPC namespace)")
    return [f"the node's GPUs share NVLink, yet {_links_text(slow, where)}: {why}; expect a "
            f"fraction of the NVLink bandwidth"]


def from_log(log: str) -> dict[str, Any] | None:
    """NCCL's lines in a job's log, parsed (None when it holds none)."""
    info = nccl_info.parse_lines(log.splitlines())
    return info if nccl_info.seen_anything(info) else None
