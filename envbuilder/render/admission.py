"""The admission policies that admit what ``build --push REPO --sign`` signed: an image of the
project's repository is admitted only when the project's key (or keyless identity) signed its
digest and its smoke attestation (https://envbuilder.dev/attestations/smoke/v1), signed the same
way, says the job passed (and holds the fields ``[jobs] admission require`` names).

Sigstore policy-controller (``policy.sigstore.dev/v1beta1`` ClusterImagePolicy), as its source
verifies (v0.15.1, pkg/webhook/validator.go, ``checkOptsFromAuthority``:
https://github.com/sigstore/policy-controller/blob/v0.15.1/pkg/webhook/validator.go): a
``signatureFormat: bundle`` authority must be keyless ("when using the new bundle format, the
authority must be keyless"); any other value verifies cosign's legacy format, the
``sha256-<digest>.sig`` and ``.att`` tags (``NewBundleFormat`` false, OCI 1.1 referrers only when
the controller's config enables them). A key authority without ``ctlog`` skips the transparency
log (``IgnoreTlog``). So:

* ``admission/clusterimagepolicy.yaml`` (``signing_key``): a key authority with
  ``signatureFormat: legacy``; ``run.sign`` signs and attests with a key in that format
  (cosign 3's ``--new-bundle-format=false``), and ``run.sign.admission_check`` is the
  verification the controller performs (cosign verify in legacy mode, tlog ignored).
* ``admission/clusterimagepolicy-keyless.yaml`` (``[jobs] admission`` issuer and subject): a
  keyless authority (Fulcio, Rekor) with the signer's identity, ``signatureFormat: bundle``
  (cosign 3 signs keyless as Sigstore bundles; the controller verifies those for keyless
  authorities against the public trusted root).
* ``admission/kyverno-imagevalidatingpolicy.yaml``: Kyverno's ImageValidatingPolicy
  (``policies.kyverno.io/v1``, Kyverno 1.17+) with the same authority as a cosign attestor and
  the smoke attestation's fields as CEL validations.

Fields as policy-controller v0.15.1 documents them (docs/api-types/index.md:
https://github.com/sigstore/policy-controller/blob/v0.15.1/docs/api-types/index.md) and as
Kyverno v1.19.0's CRD declares them. Namespaces opt in to policy-controller with the label
``policy.sigstore.dev/include=true``.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from envbuilder.core.attestreq import Requirement
from envbuilder.errors import InputError
from envbuilder.render.yamlemit import dump

SMOKE_TYPE = "https://envbuilder.dev/attestations/smoke/v1"  # = run.sign's smoke predicate
FILE = "admission/clusterimagepolicy.yaml"
KEYLESS_FILE = "admission/clusterimagepolicy-keyless.yaml"
KYVERNO_FILE = "admission/kyverno-imagevalidatingpolicy.yaml"
FULCIO = "https://fulcio.sigstore.dev"
REKOR = "https://rekor.sigstore.dev"
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
# the same, as CEL over Kyverno's extractPayload (the in-toto statement's predicate, ``{p}``)
SMOKE_CEL = ("{p}.ok == true && {p}.layout.world_size >= 1 && "
             "(type({p}.busbw_gbps) == double || type({p}.busbw_gbps) == int)")

Require = Sequence[Requirement]  # fields the smoke predicate must hold (core.attestreq)


def public_key_pem(text: str, what: str) -> str:
    """``text`` as one PEM public key (exit 2 naming ``what`` otherwise): it goes into YAML."""
    pem = text.replace("\r\n", "\n").strip() + "\n"
    if not _PEM.match(pem):
        raise InputError(f"{what} is not a PEM public key (-----BEGIN PUBLIC KEY-----, as "
                         f"cosign generate-key-pair writes cosign.pub)")
    return pem


def smoke_cue(require: Require = ()) -> str:
    """The CUE policy of the smoke attestation: the fields every policy requires, then the
    project's (``layout.world_size=12`` is ``predicate: layout: world_size: 12``,
    ``floor_pct>=80`` every bandwidth row's ``percent: >=80``; CUE unifies a field declared
    twice). CUE leaves a field the attestation lacks unconstrained: an attestation of an older
    envbuilder (no ``transport``) satisfies ``transport=ib`` there; ``verify --require`` does not."""
    return SMOKE_CUE + "".join(r.cue() for r in require)


def smoke_cel(require: Require = (), var: str = "p") -> str:
    """The same requirements as one CEL expression over ``var`` (the smoke predicate)."""
    return " && ".join([SMOKE_CEL.format(p=var), *(r.cel(var) for r in require)])


def _meta_name(name: str, suffix: str = "") -> str:
    return _NAME.sub("-", f"envbuilder-{name}{suffix}".lower()).strip("-")[:63].rstrip("-")


def _repository(repository: str) -> str:
    if not repository or any(c.isspace() or c in "\"'`$*" for c in repository):
        raise InputError(f"registry {repository!r} is not a repository for an image policy")
    return repository


def _attestations(require: Require) -> list[dict[str, Any]]:
    return [{"name": "smoke", "predicateType": SMOKE_TYPE,
             "policy": {"type": "cue", "data": smoke_cue(require)}}]


def cluster_image_policy(*, name: str, repository: str, public_key: str,
                         require: Require = ()) -> dict[str, Any]:
    """The key authority's ClusterImagePolicy (see the module docstring)."""
    return {
        "apiVersion": "policy.sigstore.dev/v1beta1",
        "kind": "ClusterImagePolicy",
        "metadata": {"name": _meta_name(name),
                     "annotations": {"envbuilder.dev/predicate-type": SMOKE_TYPE}},
        "spec": {
            "images": [{"glob": f"{_repository(repository)}*"}],
            "authorities": [{
                "name": "envbuilder-key",
                "key": {"data": public_key_pem(public_key, "the project's signing key"),
                        "hashAlgorithm": "sha256"},
                # a key authority verifies cosign's legacy .sig/.att format (validator.go)
                "signatureFormat": "legacy",
                "attestations": _attestations(require),
            }],
        },
    }


def keyless_image_policy(*, name: str, repository: str, issuer: str, subject: str,
                         require: Require = ()) -> dict[str, Any]:
    """The keyless identity's ClusterImagePolicy: Fulcio certificates for ``subject`` issued
    through ``issuer``, entries in Rekor, Sigstore bundles."""
    return {
        "apiVersion": "policy.sigstore.dev/v1beta1",
        "kind": "ClusterImagePolicy",
        "metadata": {"name": _meta_name(name, "-keyless"),
                     "annotations": {"envbuilder.dev/predicate-type": SMOKE_TYPE}},
        "spec": {
            "images": [{"glob": f"{_repository(repository)}*"}],
            "authorities": [{
                "name": "envbuilder-keyless",
                "keyless": {"url": FULCIO, "identities": [{"issuer": issuer, "subject": subject}]},
                "ctlog": {"url": REKOR},
                "signatureFormat": "bundle",
                "attestations": _attestations(require),
            }],
        },
    }


def kyverno_policy(*, name: str, repository: str, public_key: str | None = None,
                   issuer: str | None = None, subject: str | None = None,
                   require: Require = ()) -> dict[str, Any]:
    """Kyverno's ImageValidatingPolicy for the key (tlog ignored, as the key signs without
    it) or the keyless identity: the signature and the smoke attestation verified, and the
    attestation's fields checked."""
    if public_key is not None:
        cosign: dict[str, Any] = {"key": {"data": public_key_pem(public_key, "the project's signing key"),
                                          "hashAlgorithm": "sha256"},
                                  "ctlog": {"insecureIgnoreTlog": True, "insecureIgnoreSCT": True}}
    else:
        cosign = {"keyless": {"identities": [{"issuer": issuer, "subject": subject}]},
                  "ctlog": {"url": REKOR}}
    check = "images.containers.map(image, {}).all(e, {})"
    return {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ImageValidatingPolicy",
        "metadata": {"name": _meta_name(name, "" if public_key is not None else "-keyless")},
        "spec": {
            "validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["pods"]}]},
            "matchImageReferences": [{"glob": f"{_repository(repository)}*"}],
            "attestors": [{"name": "envbuilder", "cosign": cosign}],
            "attestations": [{"name": "smoke", "intoto": {"type": SMOKE_TYPE}}],
            "validations": [
                {"expression": check.format("verifyImageSignatures(image, [attestors.envbuilder])",
                                            "e > 0"),
                 "message": "the image is not signed by the project's signer"},
                {"expression": check.format("verifyAttestationSignatures(image, attestations.smoke,"
                                            " [attestors.envbuilder])", "e > 0"),
                 "message": "the image carries no smoke attestation signed by the project's signer"},
                {"expression": check.format("extractPayload(image, attestations.smoke)",
                                            smoke_cel(require, "e")),
                 "message": "the image's smoke attestation does not say the job passed as required"},
            ],
        },
    }


_HEAD = {
    FILE: ("# Admit only images of this repository signed by the project's key whose smoke\n"
           "# attestation says the job passed (envbuilder build --push REPO --sign --key K signs\n"
           "# and attests in cosign's legacy format, which a key authority verifies).\n"
           "# Sigstore policy-controller v0.15+: kubectl apply -f this file, and label namespaces\n"
           "# policy.sigstore.dev/include=true.\n"),
    KEYLESS_FILE: ("# Admit only images of this repository signed keyless (Fulcio, Rekor) by the\n"
                   "# identity [jobs] admission names, whose smoke attestation says the job passed\n"
                   "# (envbuilder build --push REPO --sign --keyless). Sigstore policy-controller\n"
                   "# v0.15+: kubectl apply -f this file, and label namespaces\n"
                   "# policy.sigstore.dev/include=true.\n"),
    KYVERNO_FILE: ("# The same admission for clusters that run Kyverno (1.17+, policies.kyverno.io/v1):\n"
                   "# pods whose images of this repository lack the signature or the passing smoke\n"
                   "# attestation are denied. kubectl apply -f this file.\n"),
}


def render_policies(*, name: str, repository: str, public_key: str | None = None,
                    issuer: str | None = None, subject: str | None = None,
                    require: Require = ()) -> dict[str, str]:
    """The admission/ files for a signing key and/or a keyless identity."""
    docs: dict[str, Any] = {}
    if public_key is not None:
        docs[FILE] = cluster_image_policy(name=name, repository=repository, public_key=public_key,
                                          require=require)
    if issuer is not None and subject is not None:
        docs[KEYLESS_FILE] = keyless_image_policy(name=name, repository=repository, issuer=issuer,
                                                  subject=subject, require=require)
    if docs:
        # Kyverno: the key when there is one, else the keyless identity
        docs[KYVERNO_FILE] = kyverno_policy(
            name=name, repository=repository, public_key=public_key,
            issuer=None if public_key is not None else issuer,
            subject=None if public_key is not None else subject, require=require)
    # the one YAML emitter (render.yamlemit): multi-line text (the PEM key, the CUE policy)
    # as literal blocks, every other string quoted when it needs to be
    return {f: _HEAD[f] + dump(d) for f, d in docs.items()}


def render_policy(*, name: str, repository: str, public_key: str) -> str:
    """admission/clusterimagepolicy.yaml alone (the key authority)."""
    return render_policies(name=name, repository=repository, public_key=public_key)[FILE]
