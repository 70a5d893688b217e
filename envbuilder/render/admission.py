"""The admission policy that enforces what ``build --push REPO --sign`` attaches: a Sigstore
policy-controller ``ClusterImagePolicy`` (policy.sigstore.dev/v1beta1) that admits an image of
the project's repository only when the project's key signed it and its smoke attestation
(https://envbuilder.dev/attestations/smoke/v1) is signed by that key and says the job passed.

Fields as policy-controller v0.15.1 documents them (docs/api-types/index.md:
https://github.com/sigstore/policy-controller/blob/v0.15.1/docs/api-types/index.md):
``images[].glob``, ``authorities[].key.data`` (a PEM public key) with ``hashAlgorithm``,
``signatureFormat: bundle`` (cosign 3 writes Sigstore bundles), ``attestations[]`` with
``name``, ``predicateType`` and a CUE ``policy``. No ``ctlog``: a key pair signs without the
transparency log (envbuilder.run.sign), and a key authority without one skips the tlog check
(pkg/webhook/validator.go). Namespaces opt in with the label ``policy.sigstore.dev/include=true``.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from envbuilder.errors import InputError

SMOKE_TYPE = "https://envbuilder.dev/attestations/smoke/v1"  # = run.sign's smoke predicate
FILE = "admission/clusterimagepolicy.yaml"
_PEM = re.compile(r"^-----BEGIN PUBLIC KEY-----\n[A-Za-z0-9+/=\n]+-----END PUBLIC KEY-----\n?$")
_NAME = re.compile(r"[^a-z0-9-]+")

# the smoke attestation must say the job passed, with at least one rank, and the all-reduce
# bus bandwidth measured (CUE, as policy-controller evaluates attestation policies)
SMOKE_CUE = """predicateType: "https://envbuilder.dev/attestations/smoke/v1"
predicate: {
  ok: true
  layout: world_size: >=1
  busbw_gbps: number
}
"""


# Fields of the smoke attestation a policy (or `verify IMAGE --key PUB --require`) can demand:
# name -> (its path in the predicate, its kind). A requirement is NAME=VALUE, or NAME>=NUMBER for
# the numeric ones; floor_pct is the lowest percentage of the published busbw floor reached.
REQUIRABLE: dict[str, tuple[tuple[str, ...], str]] = {
    "backend": (("backend",), "word"),  # nccl, gloo
    "device": (("device", "kind"), "word"),  # cuda, cpu
    "transport": (("transport", "fabric_used"), "word"),  # ib, roce, efa, socket, none, tcp
    "world_size": (("layout", "world_size"), "int"),
    "nnodes": (("layout", "nnodes"), "int"),
    "floor_pct": (("bandwidth_floor", "rows"), "pct"),
}
WORDS = {"backend": ("nccl", "gloo"), "device": ("cuda", "cpu"),
         "transport": ("ib", "roce", "efa", "socket", "none", "tcp")}
_REQ = re.compile(r"^([a-z_]+)(>=|=)([A-Za-z0-9_.-]{1,40})$")


def parse_requirement(text: str, what: str = "--require") -> tuple[str, str, str]:
    """``"backend=nccl"`` -> ("backend", "=", "nccl"); exit 2 naming ``what`` otherwise."""
    m = _REQ.match(text.strip())
    if m is None or m.group(1) not in REQUIRABLE:
        raise InputError(f"{what} {text[:60]!r}: give FIELD=VALUE or FIELD>=NUMBER with a field of "
                         f"{', '.join(REQUIRABLE)} (e.g. backend=nccl, transport=ib, floor_pct>=80)")
    name, op, value = m.groups()
    kind = REQUIRABLE[name][1]
    if kind != "word" and not re.fullmatch(r"[0-9]+(\.[0-9]+)?", value):
        raise InputError(f"{what} {text[:60]!r}: {name} is a number")
    if kind == "pct" and op != ">=":
        raise InputError(f"{what} {text[:60]!r}: floor_pct takes >= (e.g. floor_pct>=80)")
    if kind == "word" and op != "=":
        raise InputError(f"{what} {text[:60]!r}: {name} takes = (e.g. {name}=...)")
    if kind == "word" and value not in WORDS[name]:
        raise InputError(f"{what} {text[:60]!r}: {name} is one of {', '.join(WORDS[name])}")
    return name, op, value


def _lookup(pred: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        pred = pred.get(k) if isinstance(pred, dict) else None
    return pred


def check_requirement(pred: Any, req: tuple[str, str, str]) -> tuple[bool, Any]:
    """(met, the value the attestation holds) of one parsed requirement."""
    name, op, want = req
    path, kind = REQUIRABLE[name]
    got = _lookup(pred, path)
    if kind == "pct":
        pcts = [float(r["percent"]) for r in got or () if isinstance(r, dict) and r.get("percent") is not None]
        got = min(pcts) if pcts else None
        return got is not None and float(got) >= float(want), got
    if got is None:
        return False, None
    if kind == "int":
        return (int(got) >= int(float(want)) if op == ">=" else int(got) == int(float(want))), got
    return str(got) == want, got


def _cue(req: tuple[str, str, str]) -> str:
    name, op, want = req
    path, kind = REQUIRABLE[name]
    if kind == "pct":
        return f"bandwidth_floor: rows: [{{percent: >={want}}}, ...{{percent: >={want}}}]"
    value = f'"{want}"' if kind == "word" else (f">={int(float(want))}" if op == ">=" else str(int(float(want))))
    return ": ".join(path) + f": {value}"


def smoke_cue(require: tuple[tuple[str, str, str], ...] = ()) -> str:
    """The CUE policy of the smoke attestation: SMOKE_CUE and each requirement."""
    if not require:
        return SMOKE_CUE
    head, _, tail = SMOKE_CUE.rpartition("}")
    return head + "".join(f"  {_cue(r)}\n" for r in require) + "}" + tail


def public_key_pem(text: str, what: str) -> str:
    """``text`` as one PEM public key (exit 2 naming ``what`` otherwise): it goes into YAML."""
    pem = text.replace("\r\n", "\n").strip() + "\n"
    if not _PEM.match(pem):
        raise InputError(f"{what} is not a PEM public key (-----BEGIN PUBLIC KEY-----, as "
                         f"cosign generate-key-pair writes cosign.pub)")
    return pem


def cluster_image_policy(*, name: str, repository: str, public_key: str,
                         require: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ClusterImagePolicy document (see the module docstring); ``require``: fields the smoke
    attestation must hold (REQUIRABLE: ``backend=nccl``, ``transport=ib``, ``floor_pct>=80``)."""
    reqs = tuple(parse_requirement(r, "project file key admission_require:") for r in require)
    if not repository or any(c.isspace() or c in "\"'`$*" for c in repository):
        raise InputError(f"registry {repository!r} is not a repository for an image policy")
    meta = _NAME.sub("-", f"envbuilder-{name}".lower()).strip("-")[:63].rstrip("-")
    return {
        "apiVersion": "policy.sigstore.dev/v1beta1",
        "kind": "ClusterImagePolicy",
        "metadata": {"name": meta,
                     "annotations": {"envbuilder.dev/predicate-type": SMOKE_TYPE}},
        "spec": {
            "images": [{"glob": f"{repository}*"}],
            "authorities": [{
                "name": "envbuilder-key",
                "key": {"data": public_key_pem(public_key, "the project's signing key"),
                        "hashAlgorithm": "sha256"},
                "signatureFormat": "bundle",
                "attestations": [{"name": "smoke", "predicateType": SMOKE_TYPE,
                                  "policy": {"type": "cue", "data": smoke_cue(reqs)}}],
            }],
        },
    }


def render_policy(*, name: str, repository: str, public_key: str,
                  require: tuple[str, ...] = ()) -> str:
    doc = cluster_image_policy(name=name, repository=repository, public_key=public_key,
                               require=require)
    head = ("# Admit only images of this repository signed by the project's key whose smoke\n"
            "# attestation says the job passed (envbuilder build --push REPO --sign --key K).\n"
            "# Sigstore policy-controller: kubectl apply -f this file, and label namespaces\n"
            "# policy.sigstore.dev/include=true.\n")
    return head + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the PEM key, the CUE policy) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
