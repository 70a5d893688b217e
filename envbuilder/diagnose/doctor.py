"""``envbuilder doctor``: check this host for what breaks multi-GPU PyTorch jobs.

``run_doctor()`` returns one :class:`Check` per topic, each with a ``status`` (ok, warn, fail,
skip), the measured ``value``, a ``detail`` and a ``fix``. All host access goes through a
:class:`~envbuilder.probe.Probe`; tests replay real recordings with ``RecordedProbe``.

Checks and thresholds (decisions documented here):

* ``driver`` - NVML (``nvidia-ml-py``, imported lazily) if usable, else ``nvidia-smi -q -x``
  (XML), else ``nvidia-smi -q`` (text). None of them -> fail (``/proc/driver/nvidia/version``
  is quoted when present: a container with the kernel module but without the user-space tools).
* ``gpus`` - count and models. ``cuda-visible-devices`` - every entry must name a present GPU
  (index in range, or a unique ``GPU-`` UUID prefix as CUDA accepts); CUDA ignores all entries
  after the first invalid one, so an invalid entry is a fail. Indices are read in nvidia-smi
  (PCI bus) order, which is CUDA's order on single-model hosts (``CUDA_DEVICE_ORDER=PCI_BUS_ID``
  makes it so everywhere). ``MIG-`` entries are noted, not counted. ``-1``/empty hides all GPUs:
  fail when the stack needs CUDA, else warn.
* ``persistence-mode`` Disabled -> warn. ``mig-mode`` Enabled -> warn (NCCL collectives do not
  run across MIG instances; fail when the job wants more than one rank).
  ``compute-mode`` Prohibited -> fail; Exclusive_Process -> warn, fail when ranks > GPUs.
* ``topology`` (``nvidia-smi topo -m``) - all GPU pairs NV# -> ok; some pairs over PCIe -> warn;
  no NVLink -> warn saying which path P2P takes (PIX/PXB: PCIe switch, PHB/NODE: host bridge,
  SYS: across CPU sockets) and what to check.
* ``fabric-manager`` - NVSwitch systems (``Fabric State`` reported,
  ``/proc/driver/nvidia-nvswitch``, or >= 8 GPUs all-to-all NVLink): fabric state must be
  Completed/Success, else ``nv-fabricmanager`` must run; otherwise CUDA fails with error 802
  "system not yet initialized".
* ``shm`` - size of ``/dev/shm`` (statvfs). Multi-GPU jobs (ranks or GPUs > 1): fail under
  256 MiB (NCCL's SHM transport and DataLoader workers run out: Docker's default is 64 MiB),
  warn under 1 GiB. Single-GPU: warn under 256 MiB.
* ``infiniband`` - ports under ``/sys/class/infiniband``; none ACTIVE -> fail, some -> warn.
  ``memlock`` (only when RDMA devices exist) - unlimited -> ok, >= 1 GiB -> warn, less -> fail.
* ``socket-ifname`` - ``NCCL_SOCKET_IFNAME`` with NCCL's syntax (comma-separated prefixes,
  ``^`` excludes, ``=`` exact) must select an existing interface; ``GLOO_SOCKET_IFNAME`` is a
  comma-separated list of exact names, each must exist. ``nccl-env`` lists ``NCCL_*``/``GLOO_*``
  and warns about transport switches (``NCCL_P2P_DISABLE``, ``NCCL_IB_DISABLE``...) and an
  ``NCCL_IB_HCA`` that selects no device.
* ``container`` - inside a container? NVIDIA runtime visible (``/proc/driver/nvidia``)?
* With ``stack=`` (a ``StackFacts``: from a resolved stack or an image's labels,
  see ``envbuilder.labels``): ``stack-driver`` (driver < minor_compat -> fail,
  < driver_min -> warn), ``stack-ranks`` (visible GPUs < nproc -> fail), ``stack-arch``
  (every GPU's compute capability must be served by ``torch_arch``: ``sm_XY`` exact, or an
  ``sm_XW`` of the same major with W <= Y (cubin compatibility); only a ``compute_XY`` PTX entry
  with XY <= the GPU's -> warn (JIT at first launch); nothing -> fail).
  ``stack-rdma``: the host's RDMA side against the RDMA user space the image carries (its
  ``fabric``: ib, efa, none): a host with InfiniBand/RoCE ports and an image without verbs
  (``--fabric none``) -> fail (NCCL falls back to sockets); with verbs, the user-space devices
  ``/dev/infiniband/uverbs*`` must exist (a container gets them with ``--device
  /dev/infiniband``) -> fail otherwise; locked memory is the ``memlock`` check.
"""

from __future__ import annotations

import functools
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml
from packaging.version import InvalidVersion, Version

from envbuilder.core import schema
from envbuilder.core.resources import data_path
from envbuilder.diagnose.probe import UNLIMITED, Probe, RecordedProbe
from envbuilder.errors import InputError
from envbuilder.labels import StackFacts

__all__ = ["Check", "Probe", "RecordedProbe", "run_doctor", "StackFacts",
           "parse_nvidia_smi_xml", "parse_nvidia_smi_text", "parse_topology",
           "parse_ifname_spec", "select_interfaces", "compute_capability_for"]

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
STATUSES = (OK, WARN, FAIL, SKIP)
MiB = 1024 * 1024
GiB = 1024 * MiB
SHM_FAIL_BYTES = 256 * MiB
SHM_WARN_BYTES = 1 * GiB
MEMLOCK_OK_BYTES = 1 * GiB


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok" | "warn" | "fail" | "skip"
    value: str | int | float | None
    detail: str
    fix: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"bad status {self.status!r}")

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "value": self.value,
                "detail": self.detail, "fix": self.fix}


# ----------------------------------------------------------------------------------------------
# GPU inventory: NVML, nvidia-smi -q -x, nvidia-smi -q
# ----------------------------------------------------------------------------------------------

@dataclass
class Inventory:
    source: str
    driver: str | None
    cuda: str | None
    gpus: list[dict] = field(default_factory=list)
    error: str | None = None


def _na(v: str | None) -> str | None:
    if v is None:
        return None
    v = v.strip()
    return None if v in ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]") else v


def _gpu(index: int, **kw: Any) -> dict:
    keys = ("name", "uuid", "bus_id", "compute_cap", "persistence", "mig", "compute_mode",
            "architecture", "fabric_state", "fabric_status")
    g: dict[str, Any] = {"index": index}
    for k in keys:
        g[k] = _na(kw.get(k))
    return g


def parse_nvidia_smi_xml(text: str) -> Inventory:
    """Parse ``nvidia-smi -q -x``. Raises ValueError on text that is not its XML."""
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as e:
        raise ValueError(f"not XML: {e}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"unexpected XML root <{root.tag}>")

    def t(el: ET.Element, path: str) -> str | None:
        x = el.find(path)
        return x.text if x is not None and x.text is not None else None

    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        gpus.append(_gpu(
            i, name=t(g, "product_name"), uuid=t(g, "uuid"),
            bus_id=t(g, "pci/pci_bus_id") or g.get("id"), compute_cap=t(g, "compute_cap"),
            persistence=t(g, "persistence_mode"), mig=t(g, "mig_mode/current_mig"),
            compute_mode=t(g, "compute_mode"), architecture=t(g, "product_architecture"),
            fabric_state=t(g, "fabric/state"), fabric_status=t(g, "fabric/status")))
    return Inventory("nvidia-smi -q -x", _na(t(root, "driver_version")),
                     _na(t(root, "cuda_version")), gpus)


_KV = re.compile(r"^(\s*)(\S.*?)\s+:\s?(.*)\Z")


def parse_nvidia_smi_text(text: str) -> Inventory:
    """Parse ``nvidia-smi -q`` (the indented text report). Raises ValueError if it is not one."""
    top: dict[str, Any] = {}
    gpu_blocks: list[dict[str, Any]] = []
    stack: list[tuple[int, dict]] = [(-1, top)]
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("="):
            continue
        indent = len(line) - len(line.lstrip())
        m = _KV.match(line)
        if indent == 0 and m is None and line.startswith("GPU "):
            block: dict[str, Any] = {"_id": line[4:].strip()}
            gpu_blocks.append(block)
            stack = [(-1, top), (0, block)]
            continue
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if m:
            parent.setdefault(m.group(2).strip(), m.group(3).strip())
        else:
            child: dict[str, Any] = {}
            parent.setdefault(line.strip(), child)
            stack.append((indent, child))
    if "Driver Version" not in top and not gpu_blocks:
        raise ValueError("not an `nvidia-smi -q` report")

    def g(d: dict, *path: str) -> str | None:
        cur: Any = d
        for p in path:
            if not isinstance(cur, dict) or p not in cur:
                return None
            cur = cur[p]
        return cur if isinstance(cur, str) else None

    gpus = []
    for i, b in enumerate(gpu_blocks):
        gpus.append(_gpu(
            i, name=g(b, "Product Name"), uuid=g(b, "GPU UUID"),
            bus_id=g(b, "PCI", "Bus Id") or b["_id"], compute_cap=g(b, "Compute Capability"),
            persistence=g(b, "Persistence Mode"), mig=g(b, "MIG Mode", "Current"),
            compute_mode=g(b, "Compute Mode"), architecture=g(b, "Product Architecture"),
            fabric_state=g(b, "Fabric", "State"), fabric_status=g(b, "Fabric", "Status")))
    return Inventory("nvidia-smi -q", _na(g(top, "Driver Version")), _na(g(top, "CUDA Version")),
                     gpus)


def _inventory(probe: Probe) -> Inventory:
    data = probe.nvml()
    if data:
        gpus = [_gpu(int(x.get("index", i)), **{k: v for k, v in x.items() if k != "index"})
                for i, x in enumerate(data.get("gpus", []))]
        inv = Inventory("NVML", _na(data.get("driver")), _na(data.get("cuda")), gpus)
    else:
        inv = None
        errors = []
        for argv, parser in ((["nvidia-smi", "-q", "-x"], parse_nvidia_smi_xml),
                             (["nvidia-smi", "-q"], parse_nvidia_smi_text)):
            res = probe.run(argv)
            if res.error == "not-found":
                return Inventory("none", None, None, [], res.describe())
            if not res.ok:
                errors.append(res.describe())
                continue
            try:
                inv = parser(res.stdout)
                break
            except ValueError as e:
                errors.append(f"`{' '.join(argv)}`: {e}")
        if inv is None:
            return Inventory("none", None, None, [], "; ".join(errors))
    assert inv is not None
    _fill_compute_caps(probe, inv)
    return inv


def inventory(probe: Probe | None = None) -> Inventory:
    """The host's driver and GPUs (NVML, else nvidia-smi), as doctor reads them."""
    return _inventory(probe or Probe())


def _fill_compute_caps(probe: Probe, inv: Inventory) -> None:
    if not inv.gpus or all(g["compute_cap"] for g in inv.gpus):
        return
    res = probe.run(["nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader"])
    if res.ok:
        for line in res.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and re.fullmatch(r"\d+\.\d+", parts[1]):
                i = int(parts[0])
                if i < len(inv.gpus) and not inv.gpus[i]["compute_cap"]:
                    inv.gpus[i]["compute_cap"] = parts[1]
    for g in inv.gpus:
        if not g["compute_cap"]:
            g["compute_cap"] = compute_capability_for(g["name"] or "", g["architecture"])
            g["compute_cap_guessed"] = g["compute_cap"] is not None


@functools.lru_cache(maxsize=1)
def _gpu_facts() -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
    """Product-name fragments and architectures -> compute capability, from the packaged
    envbuilder/data/gpus.yaml (sourced: https://developer.nvidia.com/cuda-gpus)."""
    path = data_path("gpus.yaml")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    err = schema.first_error(data, schema.GPUS)
    if err is not None:
        key = "/".join(str(p) for p in err.path) or "(top level)"
        raise InputError(f"{path}, key {key}: {err.message}")
    by_name = tuple((e["fragment"], e["compute_capability"]) for e in data["by_name"])
    by_arch = {e["architecture"].upper(): e["compute_capability"] for e in data["by_architecture"]}
    return by_name, by_arch


def compute_capability_for(name: str, architecture: str | None = None) -> str | None:
    """Compute capability ("8.0") from a product name, or None when unknown."""
    by_name, by_arch = _gpu_facts()
    up = name.upper()
    for frag, cc in by_name:
        if re.search(r"(?<![A-Z0-9])" + re.escape(frag) + r"(?![0-9])", up) or (
                frag.startswith("RTX ") and frag in up):
            return cc
    return by_arch.get((architecture or "").upper())


# ----------------------------------------------------------------------------------------------
# Topology
# ----------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL_SPLIT = re.compile(r"\t+| {2,}")


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """``nvidia-smi topo -m`` -> {(i, j): "NV12" | "PIX" | "SYS" ...} for GPU pairs i < j."""
    lines = [_ANSI.sub("", ln) for ln in text.splitlines()]
    header = next((ln for ln in lines if re.match(r"^\s+GPU0\b", ln)), None)
    if header is None:
        return {}
    cols = [c.strip() for c in _CELL_SPLIT.split(header.strip())]
    gpu_cols = [c for c in cols if re.fullmatch(r"GPU\d+", c)]
    n = len(gpu_cols)
    out: dict[tuple[int, int], str] = {}
    for ln in lines:
        m = re.match(r"^GPU(\d+)\b", ln)
        if not m:
            continue
        cells = [c.strip() for c in _CELL_SPLIT.split(ln.strip())]
        i = int(m.group(1))
        for j, cell in enumerate(cells[1:1 + n]):
            if i < j:
                out[(i, j)] = cell
    return out


_PCIE_ORDER = ["PIX", "PXB", "PHB", "NODE", "SOC", "SYS"]
_PCIE_MEANING = {
    "PIX": "through a single PCIe switch",
    "PXB": "through several PCIe switches",
    "PHB": "through the CPU's PCIe host bridge",
    "NODE": "between PCIe host bridges of one NUMA node",
    "SOC": "across CPU sockets (SMP interconnect)",
    "SYS": "across CPU sockets (SMP interconnect)",
}


# ----------------------------------------------------------------------------------------------
# Interface selection (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME)
# ----------------------------------------------------------------------------------------------

def parse_ifname_spec(spec: str) -> tuple[bool, bool, list[str]]:
    """NCCL syntax -> (exclude, exact, names). ``^`` excludes, ``=`` matches exactly."""
    s = spec.strip()
    exclude = s.startswith("^")
    if exclude:
        s = s[1:]
    exact = s.startswith("=")
    if exact:
        s = s[1:]
    return exclude, exact, [p.strip() for p in s.split(",") if p.strip()]


def _matches(iface: str, name: str, exact: bool) -> bool:
    return iface == name if exact else iface.startswith(name)


def select_interfaces(spec: str, interfaces: list[str]) -> list[str]:
    """Interfaces NCCL would consider for ``NCCL_SOCKET_IFNAME=spec``."""
    exclude, exact, names = parse_ifname_spec(spec)
    if exclude:
        return [i for i in interfaces if not any(_matches(i, n, exact) for n in names)]
    return [i for i in interfaces if any(_matches(i, n, exact) for n in names)]


# ----------------------------------------------------------------------------------------------
# Stack
# ----------------------------------------------------------------------------------------------

def _version(v: Any, what: str) -> Version:
    try:
        return Version(str(v).strip())
    except (InvalidVersion, TypeError):
        raise InputError(f"{what} {v!r} is not a version like 535.104.05") from None


# ----------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------

class _Ctx:
    def __init__(self, probe: Probe, stack: StackFacts | None, nproc: int | None) -> None:
        self.probe = probe
        self.stack = stack
        self.nproc = nproc
        self.env = dict(probe.env())
        self.inv = _inventory(probe)
        self.cpu_stack = stack is not None and stack.cuda is None
        self.visible, self.visible_error = _visible_gpus(self.inv.gpus, self.env)
        self.ib = _ib_ports(probe)
        topo = probe.run(["nvidia-smi", "topo", "-m"]) if self.inv.gpus else None
        self.topo_result = topo
        self.topo = parse_topology(topo.stdout) if topo is not None and topo.ok else {}

    @property
    def multi_gpu(self) -> bool:
        return (self.nproc or 0) > 1 or len(self.visible) > 1


def _visible_gpus(gpus: list[dict], env: Mapping[str, str]) -> tuple[list[dict], list[str]]:
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(gpus), []
    problems: list[str] = []
    out: list[dict] = []
    for n, entry in enumerate([e.strip() for e in raw.split(",")]):
        if n == 0 and entry == "-1":  # the usual way to hide every GPU on purpose
            break
        if entry == "":
            if raw.strip() == "":
                break
            problems.append("empty entry")
            break
        if re.fullmatch(r"-?\d+", entry):
            i = int(entry)
            if i < 0 or i >= len(gpus):
                problems.append(f"index {entry} is out of range (GPUs 0-{len(gpus) - 1})"
                                if gpus else f"index {entry} but no GPU is present")
                break
            g = gpus[i]
        else:
            cands = [g for g in gpus if g["uuid"] and g["uuid"].startswith(entry)]
            if entry.startswith("MIG-"):
                problems.append(f"{entry} is a MIG device: not checked against GPU UUIDs")
                continue
            if len(cands) != 1:
                problems.append(f"{entry!r} " + ("matches no GPU UUID on this host" if not cands
                                                 else "is an ambiguous UUID prefix"))
                break
            g = cands[0]
        if g in out:
            problems.append(f"GPU {g['index']} listed twice")
            break
        out.append(g)
    return out, problems


def _check_driver(c: _Ctx) -> Check:
    inv = c.inv
    fix_install = ("install the NVIDIA driver on the host; in a container run it with the NVIDIA "
                   "container runtime (`docker run --gpus all` / `--runtime=nvidia`)")
    if inv.driver:
        return Check("driver", OK, inv.driver,
                     f"NVIDIA driver {inv.driver} (CUDA {inv.cuda or '?'} driver API), read via "
                     f"{inv.source}", "")
    proc = c.probe.read_text("/proc/driver/nvidia/version")
    if proc:
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", proc)
        ver = m.group(1) if m else None
        return Check("driver", WARN, ver,
                     f"the kernel module is loaded ({proc.splitlines()[0].strip()}) but the "
                     f"user-space tools are not usable: {inv.error or 'no GPU reported'}",
                     "install nvidia-utils / mount them with the NVIDIA container toolkit "
                     "(NVIDIA_DRIVER_CAPABILITIES=compute,utility)")
    if c.cpu_stack:
        return Check("driver", SKIP, None, "no NVIDIA driver, and the stack is CPU-only "
                     f"({inv.error})", "")
    return Check("driver", FAIL, None,
                 f"no NVIDIA driver found: {inv.error or 'nvidia-smi reported nothing'}; "
                 "NVML (nvidia-ml-py) not usable and /proc/driver/nvidia/version absent",
                 fix_install)


def _check_driver_support(c: _Ctx) -> Check | None:
    """The host driver's branch past its end of life, or an advisory (a known-bad driver
    release, incompatibilities.yaml advisories) for it: a warning; None when neither."""
    if not c.inv.driver:
        return None
    from envbuilder.core.advisories import (advisories_for, applies_to_gpus, branch_status, describe,
                                            driver_eol_warning)
    from envbuilder.core.matrix import load_matrix

    try:
        m = load_matrix()
    except Exception:  # noqa: BLE001 - doctor reports the host; a broken matrix is matrix verify's
        return None
    eol = driver_eol_warning(c.inv.driver, m)
    # an advisory for other GPUs (RTX 5090 only, on an H200 host) is not this host's
    names = [str(g.get("name") or "") for g in c.inv.gpus]
    advs = [a for a in advisories_for({"driver": c.inv.driver}, m) if applies_to_gpus(a, names)]
    if eol is None and not advs:
        return None
    parts = ([eol] if eol else []) + [f"advisory {a.id}: {describe(a)} [source: {a.source[0]}]" for a in advs]
    st = branch_status(c.inv.driver, m) or {}
    oldest = st.get("oldest_supported")
    fix = (f"move to a supported driver branch (R{oldest} or newer)" if eol and oldest else
           f"use a driver release without the advisory ({advs[0].fixed} or later)" if advs and advs[0].fixed
           else "watch the advisory's source for a fixed driver, or use another driver release")
    return Check("driver-support", WARN, c.inv.driver, "; ".join(parts), fix)


def _check_gpus(c: _Ctx) -> Check:
    gpus = c.inv.gpus
    if not gpus:
        if c.cpu_stack or not c.inv.driver:
            return Check("gpus", SKIP if c.cpu_stack else FAIL, 0, "no GPU found",
                         "" if c.cpu_stack else "see the driver check")
        return Check("gpus", FAIL, 0, f"driver {c.inv.driver} reports no GPU",
                     "check `nvidia-smi`, `dmesg | grep -i nvrm` (Xid errors), and that the "
                     "container was given GPUs")
    models: dict[str, int] = {}
    for g in gpus:
        models[g["name"] or "unknown"] = models.get(g["name"] or "unknown", 0) + 1
    desc = ", ".join(f"{n} x {m}" for m, n in models.items())
    if len(models) > 1:
        return Check("gpus", WARN, len(gpus), f"mixed models: {desc}",
                     "data-parallel jobs run at the pace of the slowest GPU; pin ranks to one "
                     "model with CUDA_VISIBLE_DEVICES")
    return Check("gpus", OK, len(gpus), desc, "")


def _check_cvd(c: _Ctx) -> Check:
    raw = c.env.get("CUDA_VISIBLE_DEVICES")
    if not c.inv.gpus and raw is None:
        return Check("cuda-visible-devices", SKIP, None, "no GPU to select from", "")
    if raw is None:
        return Check("cuda-visible-devices", OK, None,
                     f"unset: all {len(c.inv.gpus)} GPU(s) visible", "")
    fix = ("list indices 0-%d or GPU UUIDs from `nvidia-smi -L`; unset it to use all GPUs"
           % (len(c.inv.gpus) - 1) if c.inv.gpus else "unset CUDA_VISIBLE_DEVICES")
    hard = [p for p in c.visible_error if "MIG device" not in p]
    if hard:
        return Check("cuda-visible-devices", FAIL, raw,
                     f"CUDA_VISIBLE_DEVICES={raw!r}: {'; '.join(hard)}; CUDA ignores this "
                     f"entry and every one after it, so only {len(c.visible)} GPU(s) are visible",
                     fix)
    if not c.visible:
        wants_gpu = c.stack is not None and not c.cpu_stack
        return Check("cuda-visible-devices", FAIL if wants_gpu else WARN, raw,
                     f"CUDA_VISIBLE_DEVICES={raw!r} hides every GPU", fix)
    note = f"; {'; '.join(c.visible_error)}" if c.visible_error else ""
    return Check("cuda-visible-devices", OK, raw,
                 f"{len(c.visible)} of {len(c.inv.gpus)} GPU(s) visible: "
                 + ", ".join(str(g["index"]) for g in c.visible) + note, "")


def _per_gpu(c: _Ctx, key: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for g in c.visible or c.inv.gpus:
        out.setdefault(g[key] or "unknown", []).append(g["index"])
    return out


def _fmt(d: dict[str, list[int]]) -> str:
    return "; ".join(f"{k} on GPU {','.join(map(str, v))}" for k, v in d.items())


def _check_persistence(c: _Ctx) -> Check:
    if not c.inv.gpus:
        return Check("persistence-mode", SKIP, None, "no GPU", "")
    d = _per_gpu(c, "persistence")
    if set(d) == {"unknown"}:
        return Check("persistence-mode", SKIP, None, "not readable on this host", "")
    if "Disabled" in d:
        return Check("persistence-mode", WARN, "Disabled", _fmt(d),
                     "enable it on the host: `sudo nvidia-smi -pm 1` or run nvidia-persistenced; "
                     "without it every job start re-initialises the GPUs (slow, and "
                     "NCCL/CUDA init timeouts become likelier)")
    return Check("persistence-mode", OK, "Enabled", _fmt(d), "")


def _check_mig(c: _Ctx) -> Check:
    if not c.inv.gpus:
        return Check("mig-mode", SKIP, None, "no GPU", "")
    d = _per_gpu(c, "mig")
    if "Enabled" in d:
        status = FAIL if (c.nproc or 0) > 1 else WARN
        return Check("mig-mode", status, "Enabled", _fmt(d),
                     "NCCL collectives do not run across MIG instances and each process sees "
                     "one instance; disable MIG for multi-GPU training: "
                     "`sudo nvidia-smi -i <gpu> -mig 0` (then reset the GPU)")
    if set(d) <= {"unknown"}:
        return Check("mig-mode", SKIP, None, "not supported or not readable on these GPUs", "")
    return Check("mig-mode", OK, "Disabled", _fmt(d), "")


def _check_compute_mode(c: _Ctx) -> Check:
    if not c.inv.gpus:
        return Check("compute-mode", SKIP, None, "no GPU", "")
    d = _per_gpu(c, "compute_mode")
    fix = "`sudo nvidia-smi -i <gpu> -c DEFAULT`"
    if "Prohibited" in d:
        return Check("compute-mode", FAIL, "Prohibited", _fmt(d) + ": no process may use them",
                     fix)
    excl = [k for k in d if k.startswith("Exclusive")]
    if excl:
        n_vis = max(len(c.visible), 1)
        per = math.ceil((c.nproc or 1) / n_vis)
        if per > 1:
            return Check("compute-mode", FAIL, excl[0],
                         f"{_fmt(d)}: {c.nproc} ranks on {len(c.visible)} GPU(s) means "
                         f"{per} processes per GPU, but an exclusive GPU takes one context",
                         fix + ", or run at most one rank per GPU")
        return Check("compute-mode", WARN, excl[0],
                     _fmt(d) + ": any second context fails with 'CUDA-capable device(s) is/are "
                     "busy or unavailable' (e.g. a rank touching cuda:0 before set_device)",
                     fix + ", or call torch.cuda.set_device(local_rank) before any CUDA work")
    if set(d) == {"unknown"}:
        return Check("compute-mode", SKIP, None, "not readable", "")
    return Check("compute-mode", OK, "Default", _fmt(d), "")


def _check_topology(c: _Ctx) -> Check:
    n = len(c.inv.gpus)
    if n < 2:
        return Check("topology", SKIP, None, "fewer than 2 GPUs: no GPU-to-GPU traffic", "")
    if not c.topo:
        why = c.topo_result.describe() if c.topo_result is not None else "not run"
        return Check("topology", SKIP, None, f"`nvidia-smi topo -m` unreadable: {why}", "")
    idx = {g["index"] for g in c.visible} if c.visible else set(range(n))
    pairs = {k: v for k, v in c.topo.items() if k[0] in idx and k[1] in idx}
    if not pairs:
        return Check("topology", SKIP, None, "fewer than 2 visible GPUs", "")
    nv = {k: v for k, v in pairs.items() if v.startswith("NV")}
    kinds = sorted(set(pairs.values()))
    value = "/".join(kinds)
    p2p_fix = ("check what P2P the driver allows with `nvidia-smi topo -p2p r` (OK vs CNS/TNS); "
               "set NCCL_P2P_DISABLE=1 only if P2P hangs or corrupts data because of PCIe ACS or "
               "the IOMMU (check `lspci -vvv | grep ACSCtl`, disable ACS / use iommu=pt)")
    if len(nv) == len(pairs):
        return Check("topology", OK, value,
                     f"all {len(pairs)} GPU pairs connected by NVLink ({value})", "")
    pcie = [v for v in pairs.values() if not v.startswith("NV")]
    worst = max(pcie, key=lambda v: _PCIE_ORDER.index(v) if v in _PCIE_ORDER else 99)
    if nv:
        return Check("topology", WARN, value,
                     f"{len(nv)} of {len(pairs)} GPU pairs use NVLink; the others go over PCIe "
                     f"(worst: {worst}, {_PCIE_MEANING.get(worst, 'unknown path')}) and ring/tree "
                     "collectives run at the slowest link", p2p_fix)
    return Check("topology", WARN, value,
                 f"no NVLink: GPU-to-GPU (P2P) traffic goes over PCIe, worst path {worst} "
                 f"({_PCIE_MEANING.get(worst, 'unknown path')})"
                 + ("; across sockets P2P is often unavailable and NCCL stages through host "
                    "memory (/dev/shm)" if worst in ("SYS", "SOC") else ""), p2p_fix)


def _check_fabric(c: _Ctx) -> Check:
    gpus = c.inv.gpus
    if not gpus:
        return Check("fabric-manager", SKIP, None, "no GPU", "")
    states = {g["fabric_state"] for g in gpus if g["fabric_state"]}
    nvswitch_dev = bool(c.probe.listdir("/proc/driver/nvidia-nvswitch/devices"))
    all_nv = bool(c.topo) and all(v.startswith("NV") for v in c.topo.values())
    nvswitch = bool(states) or nvswitch_dev or (len(gpus) >= 8 and all_nv)
    if not nvswitch:
        return Check("fabric-manager", SKIP, None, "no NVSwitch detected", "")
    fix = ("start Fabric Manager on the host (`sudo systemctl enable --now "
           "nvidia-fabricmanager`, same version as the driver) and wait for fabric state "
           "Completed; see `nvidia-smi -q | grep -A3 Fabric`")
    procs = c.probe.processes()
    fm_running = procs is not None and any(p.startswith("nv-fabricmanage") for p in procs)
    if states:
        bad = [g for g in gpus if g["fabric_state"] and (
            g["fabric_state"] != "Completed" or (g["fabric_status"] or "Success") != "Success")]
        if bad:
            g = bad[0]
            return Check("fabric-manager", FAIL, g["fabric_state"],
                         f"NVSwitch fabric state {g['fabric_state']} / {g['fabric_status']} on "
                         f"{len(bad)} GPU(s): CUDA fails with error 802 'system not yet "
                         "initialized' until the fabric is up", fix)
        return Check("fabric-manager", OK, "Completed",
                     f"NVSwitch fabric Completed/Success on {len(gpus)} GPU(s)"
                     + ("; nv-fabricmanager running" if fm_running else ""), "")
    if fm_running:
        return Check("fabric-manager", OK, "running", "NVSwitch system; nv-fabricmanager running",
                     "")
    if procs is None:
        return Check("fabric-manager", WARN, None,
                     "NVSwitch system, fabric state not reported and processes not readable",
                     fix)
    return Check("fabric-manager", FAIL, "not running",
                 "NVSwitch system but no nv-fabricmanager process (it may run outside this "
                 "container: then ignore this)", fix)


def _check_shm(c: _Ctx) -> Check:
    st = c.probe.statvfs("/dev/shm")
    fix = ("give the container more shared memory: `docker run --shm-size=16g` (or `--ipc=host`); "
           "in Kubernetes mount an emptyDir with medium: Memory at /dev/shm")
    if not st:
        return Check("shm", FAIL, None, "/dev/shm is missing or unreadable", fix)
    size = int(st["total_bytes"])
    mib = size / MiB
    desc = f"/dev/shm is {mib:.0f} MiB"
    if c.multi_gpu:
        if size < SHM_FAIL_BYTES:
            return Check("shm", FAIL, size, desc + " (< 256 MiB): NCCL's shared-memory transport "
                         "and DataLoader workers will fail ('Error while creating shared memory "
                         "segment', 'bus error'); Docker's default is 64 MiB", fix)
        if size < SHM_WARN_BYTES:
            return Check("shm", WARN, size, desc + " (< 1 GiB) for a multi-GPU job", fix)
    elif size < SHM_FAIL_BYTES:
        return Check("shm", WARN, size, desc + " (< 256 MiB): DataLoader workers may hit "
                     "'bus error'", fix)
    return Check("shm", OK, size, desc, "")


def _ib_ports(probe: Probe) -> list[tuple[str, str, str]]:
    """[(device, port, state)] from /sys/class/infiniband."""
    out = []
    for dev in probe.listdir("/sys/class/infiniband") or []:
        for port in probe.listdir(f"/sys/class/infiniband/{dev}/ports") or []:
            st = probe.read_text(f"/sys/class/infiniband/{dev}/ports/{port}/state")
            out.append((dev, port, (st or "unknown").strip()))
    return out


def _check_ib(c: _Ctx) -> Check:
    if not c.ib:
        return Check("infiniband", SKIP, 0, "no InfiniBand/RoCE device in /sys/class/infiniband",
                     "")
    active = [p for p in c.ib if "ACTIVE" in p[2].upper()]
    down = [f"{d}/{p}: {s}" for d, p, s in c.ib if "ACTIVE" not in s.upper()]
    value = f"{len(active)}/{len(c.ib)} active"
    fix = "check cables/switch and the subnet manager (`ibstat`, `ibstatus`); or exclude the " \
          "port with NCCL_IB_HCA"
    if not active:
        return Check("infiniband", FAIL, value, "no port ACTIVE: " + "; ".join(down), fix)
    if down:
        return Check("infiniband", WARN, value, "not ACTIVE: " + "; ".join(down), fix)
    return Check("infiniband", OK, value,
                 f"{len(active)} port(s) ACTIVE: " + ", ".join(f"{d}/{p}" for d, p, _ in active),
                 "")


def _check_memlock(c: _Ctx) -> Check:
    if not c.ib:
        return Check("memlock", SKIP, None, "no RDMA device: locked memory does not matter", "")
    lim = c.probe.memlock()
    fix = ("raise it to unlimited: `ulimit -l unlimited` in /etc/security/limits.conf "
           "(`* - memlock unlimited`), `docker run --ulimit memlock=-1:-1`, and for Slurm "
           "PropagateResourceLimitsExcept=MEMLOCK")
    if lim is None:
        return Check("memlock", WARN, None, "RLIMIT_MEMLOCK unreadable", fix)
    soft = lim[0]
    if soft == UNLIMITED:
        return Check("memlock", OK, "unlimited", "locked-memory limit is unlimited", "")
    desc = (f"locked-memory limit is {soft // 1024} KiB: RDMA memory registration (ibv_reg_mr) "
            "fails with 'Cannot allocate memory' and NCCL falls back to TCP or aborts")
    if soft < MEMLOCK_OK_BYTES:
        return Check("memlock", FAIL, soft, desc, fix)
    return Check("memlock", WARN, soft, f"locked-memory limit is {soft // MiB} MiB, not "
                 "unlimited as NVIDIA recommends for GPUDirect RDMA", fix)


def _check_ifname(c: _Ctx) -> Check:
    ifaces = c.probe.interfaces()
    problems_fail, notes = [], []
    nccl = c.env.get("NCCL_SOCKET_IFNAME")
    gloo = c.env.get("GLOO_SOCKET_IFNAME")
    if nccl is None and gloo is None:
        return Check("socket-ifname", SKIP, None,
                     "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME unset (auto-detected)", "")
    if nccl is not None:
        sel = select_interfaces(nccl, ifaces)
        exclude, exact, names = parse_ifname_spec(nccl)
        if not names:
            problems_fail.append(f"NCCL_SOCKET_IFNAME={nccl!r} names no interface")
        elif not sel or (exclude and all(i == "lo" for i in sel)):
            problems_fail.append(f"NCCL_SOCKET_IFNAME={nccl!r} selects no usable interface")
        else:
            if not exclude:
                dead = [n for n in names if not any(_matches(i, n, exact) for i in ifaces)]
                if dead:
                    notes.append(f"NCCL_SOCKET_IFNAME entries {dead} match nothing")
            notes.append(f"NCCL uses {', '.join(sel)}")
    if gloo is not None:
        names = [n.strip() for n in gloo.split(",") if n.strip()]
        dead = [n for n in names if n not in ifaces]
        if not names or dead:
            problems_fail.append(f"GLOO_SOCKET_IFNAME={gloo!r}: "
                                 + (f"no interface named {dead}" if dead else "empty")
                                 + " (Gloo wants exact names)")
        else:
            notes.append(f"Gloo uses {', '.join(names)}")
    value = "; ".join(f"{k}={v}" for k, v in (("NCCL_SOCKET_IFNAME", nccl),
                                             ("GLOO_SOCKET_IFNAME", gloo)) if v is not None)
    fix = (f"interfaces here: {', '.join(ifaces) or 'none found'}; set the variable to one of "
           "them (NCCL: prefix list, '^' to exclude, '=' for exact) or unset it")
    if problems_fail:
        return Check("socket-ifname", FAIL, value, "; ".join(problems_fail + notes), fix)
    if any("match nothing" in n for n in notes):
        return Check("socket-ifname", WARN, value, "; ".join(notes), fix)
    return Check("socket-ifname", OK, value, "; ".join(notes), "")


_TRANSPORT_SWITCHES = {
    "NCCL_P2P_DISABLE": "GPU peer-to-peer (NVLink/PCIe) disabled",
    "NCCL_SHM_DISABLE": "shared-memory transport disabled",
    "NCCL_IB_DISABLE": "InfiniBand/RoCE disabled: inter-node traffic over TCP sockets",
    "NCCL_NVLS_ENABLE": None,
}


def _check_nccl_env(c: _Ctx) -> Check:
    vars_ = {k: v for k, v in sorted(c.env.items()) if k.startswith(("NCCL_", "GLOO_"))}
    if not vars_:
        return Check("nccl-env", OK, 0, "no NCCL_*/GLOO_* variables set (defaults)", "")
    warns = []
    for k, what in _TRANSPORT_SWITCHES.items():
        if what and vars_.get(k, "").strip() == "1":
            if k == "NCCL_IB_DISABLE" and not c.ib:
                continue
            if k == "NCCL_P2P_DISABLE" and not any(v.startswith("NV") for v in c.topo.values()):
                continue
            warns.append(f"{k}=1: {what}")
    hca = vars_.get("NCCL_IB_HCA")
    if hca is not None:
        devs = sorted({d for d, _, _ in c.ib})
        spec = ",".join(p.split(":")[0] for p in hca.lstrip("^=").split(","))
        prefix = ("^" if hca.startswith("^") else "") + ("=" if hca.lstrip("^").startswith("=")
                                                          else "")
        if not select_interfaces(prefix + spec, devs):
            warns.append(f"NCCL_IB_HCA={hca!r} selects no RDMA device (present: "
                         f"{', '.join(devs) or 'none'})")
    listing = ", ".join(f"{k}={v}" for k, v in vars_.items())
    if warns:
        return Check("nccl-env", WARN, len(vars_), "; ".join(warns) + f" [set: {listing}]",
                     "unset these unless they work around a known problem on this host")
    return Check("nccl-env", OK, len(vars_), listing, "")


def _check_container(c: _Ctx) -> Check:
    p = c.probe
    markers = [m for m in ("/.dockerenv", "/run/.containerenv") if p.exists(m)]
    cg = p.read_text("/proc/1/cgroup") or ""
    if re.search(r"docker|kubepods|containerd|libpod|lxc", cg):
        markers.append("/proc/1/cgroup")
    nv_proc = p.exists("/proc/driver/nvidia")
    nvd = c.env.get("NVIDIA_VISIBLE_DEVICES")
    if not markers:
        return Check("container", OK, "host", "not inside a container", "")
    where = f"inside a container ({', '.join(markers)})"
    if nvd is not None and nvd.strip().lower() in ("void", "none", ""):
        return Check("container", WARN, "container", f"{where}; NVIDIA_VISIBLE_DEVICES={nvd!r} "
                     "gives it no GPU", "run with `--gpus all` or NVIDIA_VISIBLE_DEVICES=all")
    if nv_proc or c.inv.gpus:
        return Check("container", OK, "container", where + "; NVIDIA runtime active"
                     + (f" (NVIDIA_VISIBLE_DEVICES={nvd})" if nvd else ""), "")
    if c.cpu_stack:
        return Check("container", OK, "container", where + "; no GPU (CPU-only stack)", "")
    return Check("container", FAIL if c.stack is not None else WARN, "container",
                 where + " without the NVIDIA runtime: /proc/driver/nvidia is absent",
                 "install the NVIDIA container toolkit and run with `docker run --gpus all` "
                 "(Kubernetes: the NVIDIA device plugin and a nvidia.com/gpu limit)")


# -- stack checks ------------------------------------------------------------------------------

def _check_stack_rdma(c: _Ctx) -> Check:
    s = c.stack
    fabric = s.fabric if s is not None else None
    if s is None or s.cuda is None:
        return Check("stack-rdma", SKIP, fabric, "CPU-only stack: NCCL is not used", "")
    ports = sorted({d for d, _, _ in c.ib})
    uverbs = sorted(n for n in c.probe.listdir("/dev/infiniband") or [] if n.startswith("uverbs"))
    if not ports:
        return Check("stack-rdma", SKIP, fabric, "no InfiniBand/RoCE device on this host"
                     + (f"; the image carries fabric {fabric}" if fabric else ""), "")
    if fabric is None:
        return Check("stack-rdma", SKIP, None, "the stack does not say which RDMA user space it "
                     "carries (an image built before --fabric)", "")
    if fabric == "none":
        return Check("stack-rdma", FAIL, fabric,
                     f"this host has RDMA devices ({', '.join(ports)}) but the image carries no "
                     "RDMA user space (--fabric none): NCCL cannot open libibverbs.so.1 and "
                     "falls back to sockets", "rebuild the image with --fabric ib (the default)")
    if not uverbs:
        return Check("stack-rdma", FAIL, fabric,
                     f"the image carries verbs ({fabric}) and the host has {', '.join(ports)}, "
                     "but no /dev/infiniband/uverbs* device: a process cannot open the HCA",
                     "load ib_uverbs (modprobe ib_uverbs); in a container add "
                     "--device=/dev/infiniband (Kubernetes: the RDMA device plugin's resource)")
    return Check("stack-rdma", OK, fabric,
                 f"the image carries verbs ({fabric}); host devices {', '.join(ports)} with "
                 f"{', '.join(uverbs)}", "")


def _check_stack_driver(c: _Ctx) -> Check:
    s = c.stack
    if s is None or s.cuda is None or s.driver_min is None:
        return Check("stack-driver", SKIP, None, "CPU-only stack: no driver needed", "")
    dm = s.driver_min
    need = _version(dm.version, "driver_min.version")
    floor = _version(dm.minor_compat, "driver_min.minor_compat")
    if not c.inv.driver:
        return Check("stack-driver", SKIP, None, "no driver found (see the driver check)", "")
    try:
        have = _version(c.inv.driver, "driver")
    except InputError:
        return Check("stack-driver", WARN, c.inv.driver, "driver version not comparable", "")
    src = f" (source: {dm.source})" if dm.source else ""
    cuda = s.cuda
    have_s, need_s, floor_s = c.inv.driver, dm.version, dm.minor_compat
    if have < floor:
        return Check("stack-driver", FAIL, c.inv.driver,
                     f"driver {have_s} is older than {floor_s}, the oldest that can run "
                     f"CUDA {cuda} "
                     f"even with minor-version compatibility: the image's CUDA cannot run{src}",
                     f"update the host driver to >= {need_s}, or pick a stack with an older CUDA")
    if have < need:
        return Check("stack-driver", WARN, c.inv.driver,
                     f"driver {have_s} is below {need_s} (CUDA {cuda}'s minimum) but >= {floor_s}: "
                     "runs through minor-version compatibility, without PTX JIT and some newer "
                     f"features{src}",
                     f"update the driver to >= {need_s}, or on datacenter GPUs install the "
                     f"cuda-compat-{cuda.replace('.', '-')} forward-compatibility package in the "
                     "image")
    return Check("stack-driver", OK, c.inv.driver, f"driver {have_s} >= {need_s} needed by CUDA "
                 f"{cuda}{src}", "")


def _check_stack_ranks(c: _Ctx) -> Check:
    if not c.nproc:
        return Check("stack-ranks", SKIP, None, "no nproc given", "")
    if c.stack is not None and c.stack.cuda is None:
        return Check("stack-ranks", SKIP, c.nproc, "CPU-only stack: ranks do not need GPUs", "")
    n = len(c.visible)
    if n < c.nproc:
        cvd = c.env.get("CUDA_VISIBLE_DEVICES")
        return Check("stack-ranks", FAIL, n,
                     f"{c.nproc} ranks but {n} visible GPU(s)"
                     + (f" (CUDA_VISIBLE_DEVICES={cvd!r})" if cvd is not None else ""),
                     f"run with --nproc-per-node={n} or fewer, or make more GPUs visible")
    return Check("stack-ranks", OK, n, f"{c.nproc} ranks on {n} visible GPU(s)", "")


def _arch_verdict(cc: str, arch: list[str]) -> tuple[str, str]:
    major, minor = (int(x) for x in cc.split("."))
    mine = major * 10 + minor
    sms: list[tuple[int, str]] = []
    ptx: list[tuple[int, str]] = []
    for a in arch:
        m = re.fullmatch(r"(sm|compute)_(\d+)([a-z]?)", a)
        if not m:
            continue
        num, suffix = int(m.group(2)), m.group(3)
        (sms if m.group(1) == "sm" else ptx).append((num, suffix))
    if any(num == mine for num, _ in sms):
        return OK, f"sm_{mine}"
    compat = [num for num, sfx in sms if not sfx and num // 10 == major and num % 10 <= minor]
    if compat:
        return OK, f"sm_{max(compat)} (binary compatible)"
    jit = [num for num, sfx in ptx if not sfx and num <= mine]
    if jit:
        return WARN, f"compute_{max(jit)} PTX (JIT-compiled at first launch)"
    return FAIL, "no kernel"


def _check_stack_arch(c: _Ctx) -> Check:
    s = c.stack
    arch = s.torch_arch if s is not None else ()
    if s is None or s.cuda is None or not arch:
        return Check("stack-arch", SKIP, None, "no CUDA arch list in the stack", "")
    gpus = c.visible or c.inv.gpus
    if not gpus:
        return Check("stack-arch", SKIP, None, "no GPU", "")
    worst, lines, fails = OK, [], []
    order = {OK: 0, WARN: 1, FAIL: 2}
    seen: dict[tuple[str, str], str] = {}
    for g in gpus:
        cc = g["compute_cap"]
        if not cc:
            seen[(g["name"] or "?", "?")] = "compute capability unknown"
            worst = max(worst, WARN, key=lambda s: order[s])
            continue
        st, how = _arch_verdict(cc, list(arch))
        worst = max(worst, st, key=lambda s: order[s])
        guess = " (from the model name)" if g.get("compute_cap_guessed") else ""
        seen[(g["name"] or "?", cc)] = f"{how}{guess}"
        if st == FAIL:
            fails.append(f"sm_{cc.replace('.', '')}")
    lines = [f"{n} (sm_{cc.replace('.', '')}): {v}" for (n, cc), v in seen.items()]
    value = ",".join(sorted({f"sm_{g['compute_cap'].replace('.', '')}" for g in gpus
                             if g["compute_cap"]})) or None
    if worst == FAIL:
        return Check("stack-arch", FAIL, value,
                     f"torch {s.torch} has no kernels for "
                     f"{', '.join(sorted(set(fails)))}"
                     f" (built for {', '.join(arch)}): " + "; ".join(lines),
                     "pick a torch/CUDA build whose arch list includes these GPUs (newer GPUs "
                     "need newer CUDA), or run on other GPUs")
    fix = "" if worst == OK else "prefer a build with native sm_XY kernels for these GPUs"
    return Check("stack-arch", worst, value, "; ".join(lines), fix)


def run_doctor(*, probe: Probe | None = None, stack: StackFacts | None = None,
               nproc: int | None = None) -> list[Check]:
    """Run every check against ``probe`` (default: this host) and return them in order.

    ``stack`` (from ``StackFacts.from_stack`` or ``labels.read``) adds the stack checks."""
    if stack is not None and not isinstance(stack, StackFacts):
        raise InputError("stack must be a StackFacts (envbuilder.labels)")
    if nproc is not None and (not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1):
        raise InputError(f"nproc {nproc!r} is not a positive integer")
    c = _Ctx(probe or Probe(), stack, nproc)
    checks = [_check_driver(c), _check_gpus(c), _check_cvd(c), _check_persistence(c),
              _check_mig(c), _check_compute_mode(c), _check_topology(c), _check_fabric(c),
              _check_shm(c), _check_ib(c), _check_memlock(c), _check_ifname(c),
              _check_nccl_env(c), _check_container(c)]
    support = _check_driver_support(c)  # only when there is something to say (EOL, advisory)
    if support is not None:
        checks.insert(1, support)
    if stack is not None or nproc is not None:
        if stack is not None:
            checks.append(_check_stack_driver(c))
        checks.append(_check_stack_ranks(c))
        if stack is not None:
            checks.append(_check_stack_rdma(c))
        if stack is not None:
            checks.append(_check_stack_arch(c))
    return checks
