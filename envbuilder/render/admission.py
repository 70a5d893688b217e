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

from envbuilder.errors import InputError
from envbuilder.render.yamlemit import dump

SMOKE_TYPE = "https://envbuilder.dev/attestations/smoke/v1"  # = run.sign's smoke predicate
FILE = "admission/clusterimagepolicy.yaml"
_PEM = re.compile(r"^-----BEGIN PUBLIC KEY-----\n[A-Za-z0-9+/=\n]+-----END PUBLIC KEY-----\n?\Z")
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


def public_key_pem(text: str, what: str) -> str:
    """``text`` as one PEM public key (exit 2 naming ``what`` otherwise): it goes into YAML."""
    pem = text.replace("\r\n", "\n").strip() + "\n"
    if not _PEM.match(pem):
        raise InputError(f"{what} is not a PEM public key (-----BEGIN PUBLIC KEY-----, as "
                         f"cosign generate-key-pair writes cosign.pub)")
    return pem


def cluster_image_policy(*, name: str, repository: str, public_key: str) -> dict[str, Any]:
    """The ClusterImagePolicy document (see the module docstring)."""
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
                                  "policy": {"type": "cue", "data": SMOKE_CUE}}],
            }],
        },
    }


def render_policy(*, name: str, repository: str, public_key: str) -> str:
    doc = cluster_image_policy(name=name, repository=repository, public_key=public_key)
    head = ("# Admit only images of this repository signed by the project's key whose smoke\n"
            "# attestation says the job passed (envbuilder build --push REPO --sign --key K).\n"
            "# Sigstore policy-controller: kubectl apply -f this file, and label namespaces\n"
            "# policy.sigstore.dev/include=true.\n")
    # the one YAML emitter (render.yamlemit): multi-line text (the PEM key, the CUE policy)
    # as literal blocks, every other string quoted when it needs to be
    return head + dump(doc)
