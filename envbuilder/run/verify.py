"""The image is what its labels say: run the verification payload in an image and compare.

``payload/verify_image.py`` reports, from inside the image and without a GPU, what the process
really loads (torch's version, CUDA and NCCL as torch reports them, every libnccl / libcudnn /
libcudart the dynamic loader mapped and the version each reports, the NCCL Horovod's extension
resolves, DeepSpeed's installed ops). ``compare`` judges those facts against the image's
``io.envbuilder.*`` labels (written from stack.json); any mismatch names both values.
``envbuilder verify IMAGE`` and ``envbuilder build`` (before the smoke job) run it.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from packaging.version import InvalidVersion, Version

from envbuilder.errors import InputError, OperationError
from envbuilder.labels import PREFIX as LABEL
from envbuilder.run.payload import verify_image

# the x86-64 psABI microarchitecture levels, each a superset of the one before
# (https://gcc.gnu.org/onlinedocs/gcc/x86-Options.html)
PSABI_LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")
CONTAINER_DIR = "/tmp/envbuilder-verify"
TIMEOUT_S = 300


@dataclass(frozen=True)
class VerifyCheck:
    name: str
    ok: bool
    expected: Any
    actual: Any
    detail: str = ""


@dataclass
class VerifyReport:
    image: str
    checks: list[VerifyCheck]
    facts: dict
    seconds: float = 0.0
    labels: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[VerifyCheck]:
        return [c for c in self.checks if not c.ok]

    def to_dict(self) -> dict:
        return {"image": self.image, "ok": self.ok, "failed": [c.name for c in self.failed],
                "checks": [asdict(c) for c in self.checks], "facts": self.facts,
                "seconds": round(self.seconds, 3)}

    def summary(self) -> str:
        if self.ok:
            return f"{self.image}: {len(self.checks)} checks agree with its labels"
        return "; ".join(f"{c.name}: {c.detail}" for c in self.failed)


def _public(v: str | None) -> str | None:
    """'2.6.0+cu124' -> '2.6.0' (the local version names the variant, checked separately)."""
    if v is None:
        return None
    try:
        return Version(v).public
    except InvalidVersion:
        return v


def _minor(v: str | None) -> str | None:
    if not v:
        return None
    try:
        r = Version(v).release
        return f"{r[0]}.{r[1]}" if len(r) >= 2 else v
    except InvalidVersion:
        return v


def _eq(name: str, what: str, expected: Any, actual: Any) -> VerifyCheck:
    ok = expected == actual
    detail = f"{what} is {actual}" if ok else f"the label says {what} {expected}, the image has {actual}"
    return VerifyCheck(name, ok, expected, actual, detail)


def compare(facts: Mapping[str, Any], labels: Mapping[str, str],
            ds_op_modules: Mapping[str, str] | None = None) -> list[VerifyCheck]:
    """Every check of the image's facts against its labels."""
    lab = {k[len(LABEL):]: v for k, v in labels.items() if k.startswith(LABEL)}
    if "torch" not in lab:
        raise InputError("the image has no io.envbuilder.torch label: it was not built by "
                         "envbuilder, so there is nothing to verify it against")
    out: list[VerifyCheck] = []
    t = facts.get("torch") or {}
    libs = facts.get("libs") or {}
    gpu = lab.get("cuda", "cpu") != "cpu"
    if "error" in t:
        return [VerifyCheck("torch_import", False, lab["torch"], None, t["error"])]
    out.append(_eq("python", "Python", lab.get("python"), _minor(facts.get("python"))))
    out.append(_eq("torch", "torch", lab["torch"], _public(t.get("version"))))
    out.append(_eq("torch_cuda", "torch.version.cuda", lab.get("cuda") if gpu else None,
                   _minor(t.get("cuda"))))
    want_nccl = lab.get("nccl") if gpu else None
    out.append(_eq("torch_nccl", "torch.cuda.nccl.version()", want_nccl, t.get("nccl")))
    nccl = libs.get("nccl") or []
    if gpu and want_nccl:
        paths = [f"{n['realpath']} ({n.get('version')})" for n in nccl]
        ok = len(nccl) == 1 and nccl[0].get("version") == want_nccl
        if len(nccl) != 1:
            detail = (f"{len(nccl)} NCCL libraries are loaded in one process ({', '.join(paths) or 'none'}); "
                      f"exactly one, NCCL {want_nccl}, must be")
        else:
            detail = (f"one NCCL loaded: {paths[0]}" if ok else
                      f"the label says NCCL {want_nccl}, the process loaded {paths[0]}")
        out.append(VerifyCheck("nccl_loaded", ok, want_nccl,
                               [{"path": n["realpath"], "version": n.get("version")} for n in nccl], detail))
        resolved = ((t.get("ldd") or {}).get("resolves") or {}).get("libnccl.so.2")
        if resolved is not None:
            real = os.path.normpath(resolved)
            ok = real in [n["realpath"] for n in nccl]
            out.append(VerifyCheck(
                "torch_ldd_nccl", ok, [n["realpath"] for n in nccl], real,
                f"{(t.get('ldd') or {}).get('file')} resolves libnccl.so.2 to {real}" +
                ("" if ok else f", not to the NCCL the process loaded ({', '.join(paths) or 'none'})")))
    elif nccl:
        out.append(VerifyCheck("nccl_loaded", False, None, [n["realpath"] for n in nccl],
                               "a CPU image loads NCCL: " + ", ".join(n["realpath"] for n in nccl)))
    cudart = libs.get("cudart") or []
    if len(cudart) > 1:
        out.append(VerifyCheck("cudart_loaded", False, 1, [c["realpath"] for c in cudart],
                               "two CUDA runtimes in one process: " +
                               ", ".join(f"{c['realpath']} ({c.get('version')})" for c in cudart)))
    elif gpu:
        out.append(VerifyCheck("cudart_loaded", len(cudart) == 1, 1,
                               [f"{c['realpath']} ({c.get('version')})" for c in cudart],
                               "one CUDA runtime: " + (cudart[0]["realpath"] if cudart else "none loaded")))
    cudnn = [c for c in (libs.get("cudnn") or []) if os.path.basename(c["realpath"]).startswith("libcudnn.so")]
    if len(cudnn) > 1:
        out.append(VerifyCheck("cudnn_loaded", False, 1, [c["realpath"] for c in cudnn],
                               "two cuDNN libraries in one process: " +
                               ", ".join(f"{c['realpath']} ({c.get('version')})" for c in cudnn)))
    if gpu:
        env = facts.get("env") or {}
        caps = env.get("NVIDIA_DRIVER_CAPABILITIES") or ""
        ok = bool(env.get("NVIDIA_VISIBLE_DEVICES")) and all(c in caps.split(",") or caps == "all"
                                                              for c in ("compute", "utility"))
        out.append(VerifyCheck(
            "nvidia_env", ok, {"NVIDIA_VISIBLE_DEVICES": "set", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"},
            {k: env.get(k) for k in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")},
            "the NVIDIA container runtime variables are set" if ok else
            "the NVIDIA container runtime needs NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES "
            f"(compute,utility) in the image: it has {env.get('NVIDIA_VISIBLE_DEVICES')!r}, {caps!r}"))
    out += _horovod_checks(facts.get("horovod"), lab, gpu, nccl, t)
    out += _deepspeed_checks(facts.get("deepspeed"), lab, ds_op_modules or {})
    out += rdma_checks(facts.get("rdma"), lab.get("fabric"))
    return out


def rdma_checks(r: Mapping[str, Any] | None, fabric: str | None) -> list[VerifyCheck]:
    """An image labelled with a fabric (ib, efa) carries the RDMA user space NCCL's IB
    transport opens: each soname loads (dlopen, as NCCL does; no HCA needed), ibv_devinfo
    runs (here: no devices), and for EFA the OFI NCCL plugin is there."""
    if fabric not in ("ib", "efa"):
        return []
    if r is None:
        return [VerifyCheck("rdma", False, fabric, None,
                            "the verification payload reported no RDMA facts")]
    out = []
    providers = r.get("providers") or []
    for so, rec in sorted((r.get("libs") or {}).items()):
        ok = bool(rec.get("loaded"))
        name = "rdma_" + so.split(".so")[0].removeprefix("lib")
        detail = (f"{so} loads ({rec.get('path')}; {rec.get('devices', 'n/a')} verbs devices, "
                  f"{len(providers)} providers)" if ok and "devices" in rec else
                  f"{so} loads ({rec.get('path')})" if ok else
                  f"{so} does not load: {rec.get('error')}: NCCL would use sockets, not "
                  f"InfiniBand/RoCE (NET/IB : No device found)")
        out.append(VerifyCheck(name, ok, "loads", {"loaded": ok, "path": rec.get("path")}, detail))
    d = r.get("ibv_devinfo") or {}
    ran = d.get("found") and "error" not in d and (d.get("exit") == 0 or d.get("no_devices"))
    if not d.get("found"):
        detail = "ibv_devinfo is not in the image (ibverbs-utils)"
    elif ran:
        hca = d.get("hca") or []
        detail = (f"ibv_devinfo runs: {', '.join(hca)}" if hca else
                  f"ibv_devinfo runs and reports no devices ({(d.get('output') or '').splitlines()[0]})")
    else:
        detail = f"ibv_devinfo failed: {d.get('error') or d.get('output')}"
    out.append(VerifyCheck("rdma_ibv_devinfo", bool(ran), "runs",
                           {k: d.get(k) for k in ("exit", "no_devices", "hca")}, detail))
    if fabric == "efa":
        plugins = r.get("ofi_nccl") or []
        out.append(VerifyCheck("efa_ofi_nccl", bool(plugins), "libnccl-net*.so", plugins,
                               f"AWS's OFI NCCL plugin: {', '.join(plugins)}" if plugins else
                               "no OFI NCCL plugin (libnccl-net*.so) under /opt/amazon/ofi-nccl/lib"))
    return out


def _horovod_checks(h: Mapping[str, Any] | None, lab: Mapping[str, str], gpu: bool,
                    nccl: list, t: Mapping[str, Any]) -> list[VerifyCheck]:
    want = lab.get("horovod")
    if want is None:
        return [] if h is None else [VerifyCheck("horovod", False, None, h.get("version"),
                                                 f"Horovod {h.get('version')} is installed but not labelled")]
    if h is None:
        return [VerifyCheck("horovod", False, want, None, f"the label says Horovod {want}; it is not installed")]
    out = [_eq("horovod", "Horovod", want, h.get("version"))]
    if "error" in h:
        out.append(VerifyCheck("horovod_import", False, "import horovod.torch", None, h["error"]))
        return out
    if gpu:
        built = int(h.get("nccl_built") or 0)
        out.append(VerifyCheck("horovod_nccl_built", built > 0, "NCCL operations", built,
                               f"hvd.nccl_built() = {built}" if built else
                               "Horovod was built without NCCL operations (hvd.nccl_built() = 0)"))
        resolved = (h.get("ldd") or {}).get("libnccl.so.2")
        torch_nccl = [n["realpath"] for n in nccl]
        real = os.path.normpath(resolved) if resolved else None
        hv = None
        if built:
            hv = f"{built // 10000}.{(built % 10000) // 100}.{built % 100}" if built >= 10000 else str(built)
        want_nccl = lab.get("nccl")
        ok = real is not None and real in torch_nccl and hv == want_nccl
        detail = (f"Horovod ({h.get('extension')}) resolves libnccl.so.2 to {resolved}, the file torch loads; "
                  f"built against NCCL {hv}" if ok else
                  f"Horovod resolves libnccl.so.2 to {resolved} and was built against NCCL {hv}; torch "
                  f"loads {', '.join(torch_nccl) or 'no shared NCCL'} and the label says NCCL {want_nccl}")
        out.append(VerifyCheck("horovod_nccl", ok, {"file": torch_nccl, "version": want_nccl},
                               {"file": resolved, "version": hv}, detail))
    return out


def _deepspeed_checks(d: Mapping[str, Any] | None, lab: Mapping[str, str],
                      modules: Mapping[str, str]) -> list[VerifyCheck]:
    want = lab.get("deepspeed")
    if want is None:
        return []
    if d is None or "error" in (d or {}):
        return [VerifyCheck("deepspeed", False, want, None,
                            f"the label says DeepSpeed {want}; import failed: {(d or {}).get('error', 'not installed')}")]
    out = [_eq("deepspeed", "DeepSpeed", want, _public(d.get("version")))]
    installed = d.get("installed_ops") or {}
    for op in [o for o in (lab.get("deepspeed-ops") or "").split(",") if o]:
        rec = (d.get("ops") or {}).get(op) or {}
        inst = bool(installed.get(op))
        ok = inst and bool(rec.get("loaded"))
        detail = (f"{op} is pre-built and {rec.get('file')} loads" if ok else
                  f"{op}: installed_ops says {inst}; loading {modules.get(op, '?')} "
                  f"{'worked' if rec.get('loaded') else 'failed: ' + str(rec.get('error', 'not tried'))}")
        out.append(VerifyCheck(f"ds_op_{op}", ok, "installed and loads",
                               {"installed": inst, "loaded": rec.get("loaded")}, detail))
    isa = lab.get("cpu-isa")
    marches = sorted({m for rec in (d.get("ops") or {}).values() for m in rec.get("march") or ()})
    if isa and marches:
        # GCC records the -march of every object (DW_AT_producer), the default x86-64 too for
        # objects compiled without one; -march=native is recorded as the build host's CPU name
        # (znver3, skylake-avx512, ...). Allowed: the psABI levels up to the labelled one.
        allowed = PSABI_LEVELS[:PSABI_LEVELS.index(isa) + 1] if isa in PSABI_LEVELS else (isa,)
        bad = [m for m in marches if m not in allowed]
        out.append(VerifyCheck("cpu_isa", not bad, isa, marches,
                               f"compiled CPU code targets -march={isa} at most "
                               f"({', '.join('-march=' + m for m in marches)})" if not bad else
                               f"the label says -march={isa}; op libraries were compiled with "
                               f"{', '.join('-march=' + m for m in bad)} (a build host's CPU: "
                               f"-march=native), which other nodes may not run"))
    return out


# -- running the payload in an image ---------------------------------------------------------

def _payload_tar() -> bytes:
    buf = io.BytesIO()
    now = int(time.time())
    data = open(verify_image.__file__, "rb").read()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        d = tarfile.TarInfo("envbuilder-verify")
        d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o777, now
        tar.addfile(d)
        f = tarfile.TarInfo("envbuilder-verify/verify_image.py")
        f.size, f.mode, f.mtime = len(data), 0o644, now
        tar.addfile(f, io.BytesIO(data))
    return buf.getvalue()


def parse_facts(log: str) -> dict | None:
    for line in reversed(log.splitlines()):
        idx = line.find(verify_image.MARKER + " ")
        if idx >= 0:
            try:
                return json.loads(line[idx + len(verify_image.MARKER) + 1:])
            except ValueError:
                return None
    return None


def verify_image_labels(client: Any, image: str, labels: Mapping[str, str],
                        ds_op_modules: Mapping[str, str] | None = None) -> VerifyReport:
    """Run the payload in ``image`` (no GPU needed) and compare with ``labels``."""
    from envbuilder.run.engine import Container
    from envbuilder.run.smoke import shell_wrap

    ops = [f"{op}={mod}" for op, mod in (ds_op_modules or {}).items()
           if op in (labels.get(LABEL + "deepspeed-ops") or "").split(",")]
    cmd = shell_wrap(["PY", f"{CONTAINER_DIR}/verify_image.py",
                      *[a for o in ops for a in ("--ds-op", o)]])
    started = time.monotonic()
    with Container(client, image, ["sh", "-c", cmd], step="verify",
                   labels={"envbuilder.verify": "1"}) as c:
        c.put_archive("/tmp", _payload_tar())
        c.start()
        code, timed_out = c.wait(TIMEOUT_S)
        log = c.logs()
    facts = parse_facts(log)
    if facts is None:
        why = f"ran past {TIMEOUT_S} s" if timed_out else f"exit {code}"
        raise OperationError(f"the verification payload reported nothing in {image} ({why}): "
                             f"{log.strip()[-400:]}", step="verify")
    return VerifyReport(image, compare(facts, labels, ds_op_modules), facts,
                        time.monotonic() - started, dict(labels))
