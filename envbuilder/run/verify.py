"""The image is what its labels say: run the verification payload in an image and compare.

``payload/verify_image.py`` reports, from inside the image and without a GPU, what the process
really loads (torch's version, CUDA and NCCL as torch reports them, every libnccl / libcudnn /
libcudart the dynamic loader mapped and the version each reports, and each component's facts:
the NCCL a compiled extension resolves, the ops it installed). ``compare`` judges those facts
against the image's ``io.envbuilder.*`` labels (written from stack.json), with each component's
own checks (envbuilder.components); any mismatch names both values.
``envbuilder verify IMAGE`` and ``envbuilder build`` (before the smoke job) run it.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from packaging.version import InvalidVersion, Version

from envbuilder.components import registry
from envbuilder.components.base import PSABI_LEVELS as PSABI_LEVELS  # moved there; named here too
from envbuilder.components.base import VerifyCheck as VerifyCheck
from envbuilder.components.base import VerifyContext
from envbuilder.components.base import eq as _eq
from envbuilder.components.base import public as _public
from envbuilder.components.fabric import rdma_checks as rdma_checks  # each component's checks
from envbuilder.components.team_compiled import compiled_checks as compiled_checks
from envbuilder.errors import InputError, OperationError
from envbuilder.labels import PREFIX as LABEL
from envbuilder.run.payload import verify_image

if TYPE_CHECKING:
    from envbuilder.core.matrix import Matrix

CONTAINER_DIR = "/tmp/envbuilder-verify"
TIMEOUT_S = 300


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


def _minor(v: str | None) -> str | None:
    if not v:
        return None
    try:
        r = Version(v).release
        return f"{r[0]}.{r[1]}" if len(r) >= 2 else v
    except InvalidVersion:
        return v


def compare(facts: Mapping[str, Any], labels: Mapping[str, str],
            matrix: Matrix | None = None) -> list[VerifyCheck]:
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
    # each component's own checks (envbuilder.components), in plan order
    ctx = VerifyContext(lab, t, tuple(nccl), matrix)
    for c in registry.components():
        out += c.verify_checks(facts, ctx)
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


def payload_args(labels: Mapping[str, str], matrix: Matrix | None = None) -> list[str]:
    """The payload's arguments for the components the image's labels name (their facts; what
    a component reads of ``matrix``, the one the image was made from)."""
    ctx = VerifyContext({k[len(LABEL):]: v for k, v in labels.items() if k.startswith(LABEL)}, {},
                        matrix=matrix)
    return [a for c in registry.components() for a in c.payload_args(ctx)]


def verify_image_labels(client: Any, image: str, labels: Mapping[str, str],
                        matrix: Matrix | None = None) -> VerifyReport:
    """Run the payload in ``image`` (no GPU needed) and compare with ``labels``."""
    from envbuilder.run.engine import Container
    from envbuilder.run.smoke import shell_wrap

    cmd = shell_wrap(["PY", f"{CONTAINER_DIR}/verify_image.py", *payload_args(labels, matrix)])
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
    return VerifyReport(image, compare(facts, labels, matrix), facts,
                        time.monotonic() - started, dict(labels))
