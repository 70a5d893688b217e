"""Images that carry their proof: cosign signs the pushed digest and attaches what was proven.

``Cosign`` is the one place the ``cosign`` executable runs: every command is named to the
caller before it runs (``on_command``), runs without a terminal (stdin closed, so an encrypted
key never prompts), and a failure is one ``OperationError`` line naming the step (``sign``,
``attest``, ``verify``) and cosign's last message, exit 1.

The key: ``--key`` or ``ENVBUILDER_COSIGN_KEY`` (``COSIGN_KEY`` too): a key file from
``cosign generate-key-pair`` or a KMS URI cosign understands (``awskms://``, ``gcpkms://``,
``azurekms://``, ``hashivault://``, ``k8s://``). Its password comes from ``COSIGN_PASSWORD``
exactly as cosign reads it (envbuilder never sees it; an empty value is an unencrypted key).
A key pair signs without the public transparency log (``--tlog-upload=false
--use-signing-config=false``), so it works offline against a private registry; checks then pass
``--insecure-ignore-tlog``. A key signs in cosign's legacy format (``--new-bundle-format=false``:
the ``sha256-<digest>.sig`` and ``.att`` tags), the one a key authority of Sigstore's
policy-controller verifies (render.admission); ``admission_check`` is that verification. Keyless signing (``--keyless``: Fulcio certificate and Rekor entry
through Sigstore's public instance, an OIDC identity from the environment or a browser) is the
documented choice for users with Sigstore access; nothing here can reach Sigstore offline.

What is attached to ``REPO@DIGEST`` (never a tag), each an in-toto statement whose predicate
has a JSON schema in ``envbuilder/data/attestations/``:

=========== =================================================== ================================
name        predicate type                                      content
=========== =================================================== ================================
verify      https://envbuilder.dev/attestations/verify/v1       the verify report
smoke       https://envbuilder.dev/attestations/smoke/v1        the smoke result and its host
sbom        https://cyclonedx.org/bom                           CycloneDX 1.5 JSON
provenance  https://slsa.dev/provenance/v1                      SLSA provenance v1
=========== =================================================== ================================

``check_image`` verifies the signature and every attestation with a public key through the
registry (cosign reads the signature and attestation manifests and their small blobs; no image
layer is pulled) and says what the digest was proven to do.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from envbuilder import __version__, _child
from envbuilder.errors import InputError, OperationError, redact

KEY_ENV = ("ENVBUILDER_COSIGN_KEY", "COSIGN_KEY")
KMS_SCHEMES = ("awskms://", "gcpkms://", "azurekms://", "hashivault://", "k8s://", "pkcs11:")
TIMEOUT_S = 300  # one cosign command
DEADLINE_S = 600.0  # one verify, all its registry requests and cosign commands together
KEY_CAP = 64 << 10  # a PEM key file (a few hundred bytes; an RSA-8192 key is ~6 KiB)
OUTPUT_CAP = 16 << 20  # what one cosign command may print (signatures and attestations)
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class Predicate:
    name: str
    type: str  # the in-toto predicateType
    schema: str  # envbuilder/data/attestations/<schema>


PREDICATES: tuple[Predicate, ...] = (
    Predicate("verify", "https://envbuilder.dev/attestations/verify/v1", "verify.schema.json"),
    Predicate("smoke", "https://envbuilder.dev/attestations/smoke/v1", "smoke.schema.json"),
    Predicate("sbom", "https://cyclonedx.org/bom", "sbom.schema.json"),
    Predicate("provenance", "https://slsa.dev/provenance/v1", "provenance.schema.json"),
)
# a SIF built from the pushed image (run.apptainer.build_sif_from_image): attested as a blob
SIF = Predicate("sif", "https://envbuilder.dev/attestations/sif/v1", "sif.schema.json")
BY_NAME = {p.name: p for p in PREDICATES}
BY_TYPE = {p.type: p for p in PREDICATES}
SMOKE_TYPE = BY_NAME["smoke"].type


def schema(p: Predicate) -> dict[str, Any]:
    from envbuilder.core.resources import data_path

    data: dict[str, Any] = json.loads(data_path(f"attestations/{p.schema}").read_text())
    return data


def check_predicate(p: Predicate, doc: Any) -> str | None:
    """The first way ``doc`` breaks ``p``'s schema, or None."""
    import jsonschema

    err = jsonschema.exceptions.best_match(jsonschema.Draft7Validator(schema(p)).iter_errors(doc))
    if err is None:
        return None
    where = "/".join(str(x) for x in err.absolute_path) or "(top)"
    return f"{where}: {err.message[:200]}"


# -- the key ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SignOptions:
    """How ``build --sign`` signs: a key (file or KMS URI), or keyless through Sigstore."""

    key: str | None = None
    keyless: bool = False

    @classmethod
    def from_cli(cls, key: str | None, keyless: bool = False) -> SignOptions:
        if key is None and not keyless:
            key = next((os.environ[k] for k in KEY_ENV if os.environ.get(k)), None)
        return cls(key=key, keyless=keyless)

    def __post_init__(self) -> None:
        """Checked once, when made (exit 2 naming the flag)."""
        if self.keyless:
            if self.key:
                raise InputError("--sign takes --key KEY or --keyless, not both")
            return
        if not self.key:
            raise InputError(f"--sign needs a key: --key cosign.key (or {KEY_ENV[0]}), a KMS "
                             f"URI, or --keyless for Sigstore's public instance")
        check_key(self.key, "--key", private=True)


def check_key(key: str, what: str, *, private: bool) -> None:
    """A key file that exists and holds a PEM key, or a KMS URI (exit 2 naming it)."""
    if key.startswith(KMS_SCHEMES):
        if any(c.isspace() for c in key):
            raise InputError(f"{what} {key!r} is not a KMS URI")
        return
    from envbuilder.core.readfile import read_bytes_capped

    if not os.path.lexists(key):
        raise InputError(f"{what} {key}: no such key file (cosign generate-key-pair writes "
                         f"cosign.key and cosign.pub), and not a KMS URI ({', '.join(KMS_SCHEMES)})")
    # the one capped reader: a regular file of a key's size (a 3 GiB file, a FIFO, /dev/zero
    # are refused unread, naming the cap)
    head = read_bytes_capped(key, f"{what}", limit=KEY_CAP)[:200]
    if b"-----BEGIN" not in head:
        raise InputError(f"{what} {key} holds no PEM key (-----BEGIN ...)")
    if private and b"PUBLIC KEY" in head:
        raise InputError(f"{what} {key} is a public key: sign with the private key (cosign.key); "
                         f"the public one checks (envbuilder verify IMAGE@DIGEST --key cosign.pub)")
    if private and "COSIGN_PASSWORD" not in os.environ:
        raise InputError(f"{what} {key}: set COSIGN_PASSWORD (cosign reads the key's password "
                         f"from it; empty for a key without one): nothing here prompts")


# -- cosign ----------------------------------------------------------------------------------

def _registry_flags(ref: str) -> list[str]:
    from envbuilder.run.registry import parse_reference

    return ["--allow-insecure-registry"] if parse_reference(ref).local else []


class Cosign:
    """The cosign executable behind one small class (see the module docstring)."""

    def __init__(self, exe: str | None = None, *,
                 on_command: Callable[[str], None] | None = None,
                 timeout: int = TIMEOUT_S, deadline: _child.Deadline | None = None) -> None:
        found = exe or shutil.which("cosign")
        if not found:
            raise InputError("cosign is not on PATH: install it (https://docs.sigstore.dev/"
                             "cosign/system_config/installation/; Debian: apt-get install cosign)")
        self.exe, self.timeout, self.deadline = found, timeout, deadline
        self.on_command = on_command or (lambda line: None)

    def run(self, args: Sequence[str], *, step: str) -> str:
        """Run ``cosign ARGS`` through the one child runner (output capped, its own deadline
        within the command's, a Ctrl-C forwarded); its stdout, or one line naming the step and
        cosign's error."""
        line = "cosign " + " ".join(shlex.quote(a) for a in args)
        if self.deadline is not None and self.deadline.passed():
            raise OperationError(f"{step}: the command's deadline ({self.deadline.seconds:g} s "
                                 f"for {self.deadline.what}) passed before `{redact(line)}`",
                                 step=step)
        self.on_command(redact(line))
        try:
            p = _child.run([self.exe, *args], timeout=self.timeout, cap=OUTPUT_CAP,
                           deadline=self.deadline)
        except OSError as e:
            raise OperationError(f"{step}: cannot run {self.exe}: {e}", step=step) from None
        if p.timed_out:
            bound = (f"the command's deadline ({self.deadline.seconds:g} s for {self.deadline.what})"
                     if self.deadline is not None and self.deadline.passed() else f"{self.timeout} s")
            raise OperationError(f"{step}: `{redact(line)}` did not finish within {bound}",
                                 step=step)
        if p.dropped:
            raise OperationError(f"{step}: {p.over_cap()}: not read", step=step)
        if p.returncode != 0:
            raise OperationError(f"{step}: `cosign {args[0]}` failed (exit {p.returncode}): "
                                 f"{_last_error(p.stderr)}", step=step,
                                 details=[redact(line), *p.stderr.strip().splitlines()[-5:]])
        return p.stdout

    def _signing(self, opts: SignOptions, ref: str) -> list[str]:
        if opts.keyless:
            return ["--yes", *_registry_flags(ref)]
        # the legacy .sig/.att format: what a key authority of policy-controller verifies
        # (its bundle format is for keyless authorities only: render.admission)
        return ["--key", str(opts.key), "--tlog-upload=false", "--use-signing-config=false",
                "--new-bundle-format=false", "--yes", *_registry_flags(ref)]

    def sign(self, ref: str, opts: SignOptions) -> None:
        _require_digest(ref)
        self.run(["sign", *self._signing(opts, ref), ref], step="sign")

    def attest(self, ref: str, opts: SignOptions, p: Predicate, predicate: Path) -> None:
        _require_digest(ref)
        self.run(["attest", *self._signing(opts, ref), "--type", p.type,
                  "--predicate", str(predicate), ref], step="attest")

    def attest_blob(self, path: Path, opts: SignOptions, p: Predicate, predicate: Path,
                    bundle: Path) -> None:
        """An in-toto attestation of the file ``path`` (its sha256 the subject), written as a
        Sigstore bundle to ``bundle``."""
        signing = (["--yes"] if opts.keyless else
                   ["--key", str(opts.key), "--tlog-upload=false", "--use-signing-config=false",
                    "--yes"])
        self.run(["attest-blob", *signing, "--type", p.type, "--predicate", str(predicate),
                  "--bundle", str(bundle), str(path)], step="attest")

    def verify_blob_attestation(self, digest: str, pub: str, p: Predicate, bundle: Path) -> None:
        """The bundle's attestation is signed by ``pub`` and its subject is ``digest``
        (``sha256:HEX`` of the file, computed by the caller: cosign 3.1 reads at most 128 MiB of
        a blob itself), or OperationError."""
        algorithm, _, hexdigest = digest.partition(":")
        self.run(["verify-blob-attestation", "--key", pub, "--insecure-ignore-tlog",
                  "--type", p.type, "--bundle", str(bundle), "--digest", hexdigest,
                  "--digestAlg", algorithm], step="verify")

    def public_key(self, key: str) -> str:
        """The PEM public key of a private key (file or KMS)."""
        return self.run(["public-key", "--key", key], step="sign")

    def verify(self, ref: str, pub: str, *, legacy: bool = False) -> list[dict[str, Any]]:
        """The verified signatures' payloads (simple signing), or OperationError. ``legacy``:
        only cosign's legacy format (.sig tags), as a policy-controller key authority reads."""
        fmt = ["--new-bundle-format=false"] if legacy else []
        out = self.run(["verify", "--key", pub, "--insecure-ignore-tlog", *fmt,
                        *_registry_flags(ref), ref], step="verify")
        return _json_lines(out, "verify")

    def verify_attestation(self, ref: str, pub: str, p: Predicate, *, legacy: bool = False,
                           policy: str | None = None) -> list[dict[str, Any]]:
        """The in-toto statements of type ``p`` signed by ``pub``, or OperationError.
        ``legacy``: only the .att tags; ``policy``: a CUE or Rego file each must satisfy."""
        extra = (["--new-bundle-format=false"] if legacy else []) + (
            ["--policy", policy] if policy else [])
        out = self.run(["verify-attestation", "--key", pub, "--insecure-ignore-tlog", *extra,
                        "--type", p.type, *_registry_flags(ref), ref], step="verify")
        return [_statement(env) for env in _json_lines(out, "verify-attestation")]

    def download_attestations(self, ref: str) -> list[dict[str, Any]]:
        """Every attestation on ``ref`` as stored (not verified), as in-toto statements."""
        out = self.run(["download", "attestation", *_registry_flags(ref), ref], step="inspect")
        stmts = []
        for d in _json_lines(out, "download attestation"):
            env = d.get("dsseEnvelope", d)
            stmts.append(_statement(env))
        return stmts


def _last_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines()
             if ln.strip() and not ln.startswith(("WARNING", "Flag --"))]
    msg = next((ln for ln in reversed(lines) if ln.lower().startswith(("error", "main.go"))),
               lines[-1] if lines else "no message")
    msg = re.sub(r"^error during command execution:\s*", "", msg)
    return redact(msg[:300])


def _json_lines(out: str, what: str) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    text = out.strip()
    if text.startswith("["):
        try:
            arr = json.loads(text)
        except ValueError:
            arr = None
        if isinstance(arr, list):
            return [d for d in arr if isinstance(d, dict)]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            d = json.loads(line)
        except ValueError:
            raise OperationError(f"cosign {what} printed something that is not JSON: "
                                 f"{line[:100]!r}", step="verify") from None
        if isinstance(d, list):
            docs.extend(x for x in d if isinstance(x, dict))
        elif isinstance(d, dict):
            docs.append(d)
    return docs


def _statement(envelope: Mapping[str, Any]) -> dict[str, Any]:
    try:
        stmt = json.loads(base64.b64decode(envelope["payload"]))
    except (KeyError, ValueError, TypeError):
        raise OperationError("an attestation is not a DSSE envelope of an in-toto statement",
                             step="verify") from None
    if not isinstance(stmt, dict):
        raise OperationError("an attestation's payload is not an in-toto statement", step="verify")
    return stmt


def _require_digest(ref: str) -> None:
    if not DIGEST_RE.match(ref.rpartition("@")[2]) or "@" not in ref:
        raise InputError(f"{ref}: envbuilder signs and attests a digest (REPO@sha256:...), "
                         f"never a tag")


# -- the predicates --------------------------------------------------------------------------

def verify_predicate(target: str, labels: Mapping[str, str], report: Mapping[str, Any]) -> dict:
    declared = {k: v for k, v in labels.items()
                if k.startswith(("io.envbuilder.", "org.opencontainers.image."))}
    return {"envbuilder_version": __version__, "target": target, "ok": bool(report.get("ok")),
            "declared": declared, "checks": list(report.get("checks", ())),
            "facts": dict(report.get("facts") or {}), "seconds": report.get("seconds", 0)}


def smoke_host(ranks: Sequence[Mapping[str, Any]], backend: str,
               probe: Any = None) -> dict[str, Any]:
    """The host the smoke job ran on: its driver and GPUs when the ranks used GPUs, else
    "CPU only" (a gloo job proves the rendezvous and collectives, not a GPU)."""
    on_gpu = backend == "nccl" or any(str(r.get("device") or "").startswith("cuda") for r in ranks)
    if not on_gpu:
        return {"cpu_only": True, "description": "CPU only", "driver": None, "cuda": None,
                "gpus": []}
    from envbuilder.diagnose.doctor import inventory

    inv = inventory(probe)
    gpus = [{"name": str(g.get("name") or "GPU"), "uuid": g.get("uuid"),
             "compute_cap": g.get("compute_cap")} for g in inv.gpus]
    names = sorted({str(g["name"]) for g in gpus})
    desc = (f"driver {inv.driver or 'unknown'}, {len(gpus)} GPU(s): {', '.join(names)}"
            if gpus else f"driver {inv.driver or 'unknown'}, no GPU listed")
    return {"cpu_only": False, "description": desc, "driver": inv.driver, "cuda": inv.cuda,
            "gpus": gpus}


def smoke_predicate(target: str, result: Any, *, probe: Any = None) -> dict:
    """The smoke result (a run.smoke.SmokeResult) as the smoke predicate."""
    summary = result.summary or {}
    backend = str(summary.get("backend") or next(
        (r.get("backend") for r in result.ranks if r.get("backend")), result.backend))
    ar = [r for r in result.bandwidth if r.get("collective", "all_reduce") == "all_reduce"]
    top = max(ar, key=lambda r: r.get("bytes", 0)) if ar else None
    return {"envbuilder_version": __version__, "target": target, "ok": bool(result.ok),
            "layout": {"world_size": result.world_size, "nnodes": result.nnodes,
                       "nproc_per_node": result.nproc_per_node},
            "backend": backend, "collectives": dict(result.checks),
            "bandwidth": [dict(r) for r in result.bandwidth],
            "busbw_gbps": top["busbw_gbps"] if top else None,
            "seconds": round(float(result.seconds), 3),
            "host": smoke_host(result.ranks, backend, probe),
            "device": {"kind": result.device_kind, "gpus": list(result.fact("gpu_names") or [])},
            "transport": dict(result.transport) or {"backend": backend, "summary": "not recorded"},
            "bandwidth_floor": {"fraction": (result.floors or {}).get("fraction", 0.0),
                                "rows": list((result.floors or {}).get("rows") or []),
                                "floor": (result.floors or {}).get("floor"),
                                "why": str((result.floors or {}).get("why") or
                                           "not compared (a CPU run, or --min-busbw GB/s)")},
            "shm": result.fact("shm"), "components": result.fact("components")}


_OS_PKGS = ("dpkg-query -W -f '${Package}\\t${Version}\\t${Architecture}\\n' 2>/dev/null; "
            "echo '--envbuilder--'; . /etc/os-release 2>/dev/null; echo \"$ID $VERSION_ID\"; "
            "echo '--envbuilder--'; python -c \"import importlib.metadata as m, json; "
            "print(json.dumps(sorted({(d.metadata['Name'], d.version) for d in m.distributions()})))\"")


def image_packages(client: Any, image: str) -> tuple[list[tuple[str, str, str]], str,
                                                     list[tuple[str, str]]]:
    """(Debian packages, "ID VERSION_ID", Python distributions) installed in ``image``, from one
    short container run."""
    from envbuilder.run import engine

    with engine.Container(client, image, ["sh", "-c", _OS_PKGS], step="sbom") as c:
        c.start()
        code, _ = c.wait(120)
        out = c.logs()
    parts = out.split("--envbuilder--")
    if code != 0 or len(parts) != 3:
        raise OperationError(f"sbom: listing the packages of {image} failed (exit {code}): "
                             f"{out.strip()[-200:]}", step="sbom")
    debs = [tuple(ln.split("\t")) for ln in parts[0].splitlines() if ln.count("\t") == 2]
    try:
        py = [(str(n), str(v)) for n, v in json.loads(parts[2].strip().splitlines()[-1])]
    except (ValueError, IndexError):
        py = []
    return [(a, b, c_) for a, b, c_ in debs], parts[1].strip(), py  # type: ignore[misc]


def sbom_predicate(stack: Any, *, lock: Path | None, debs: Sequence[tuple[str, str, str]],
                   os_id: str, python: Sequence[tuple[str, str]]) -> dict:
    """CycloneDX 1.5: the lock's packages (lock.sbom, with hashes) or the image's Python
    distributions, plus the image's Debian packages."""
    from urllib.parse import quote

    from envbuilder.lock.sbom import SPEC_VERSION, purl

    if lock is not None:
        from envbuilder.lock.sbom import sbom

        doc = sbom(lock, stack)
    else:
        comps = [{"type": "library", "bom-ref": purl(n, v), "name": n, "version": v,
                  "purl": purl(n, v)} for n, v in python]
        doc = {"bomFormat": "CycloneDX", "specVersion": SPEC_VERSION, "version": 1,
               "metadata": {"tools": {"components": [{"type": "application",
                                                      "name": "envbuilder",
                                                      "version": __version__}]},
                            "component": {"type": "container", "bom-ref": f"envbuilder:{stack.tag}",
                                          "name": stack.tag, "version": stack.tag},
                            "properties": [{"name": "envbuilder:matrix-digest",
                                            "value": stack.matrix.digest}]},
               "components": comps, "dependencies": []}
    distro, _, version = os_id.partition(" ")
    distro = distro or "debian"
    doc["components"] = list(doc["components"]) + (
        [{"type": "operating-system", "name": distro, "version": version}] if version else []) + [
        {"type": "library", "bom-ref": f"pkg:deb/{distro}/{n}@{quote(v, safe='')}?arch={a}",
         "name": n, "version": v, "purl": f"pkg:deb/{distro}/{n}@{quote(v, safe='')}?arch={a}"}
        for n, v, a in debs]
    return doc


_SECRET_KEY = re.compile(r"(PASSWORD|TOKEN|SECRET|AUTH|CREDENTIAL|KEY)", re.I)


def redact_build_args(args: Mapping[str, str]) -> dict[str, str]:
    """Build arguments fit for a public attestation: URL credentials hidden (errors.redact),
    and the value of any argument whose name says it is a secret replaced by ``***``."""
    return {k: ("***" if _SECRET_KEY.search(k) else redact(str(v))) for k, v in args.items()}


def _sha_hex(value: str | None) -> str | None:
    m = re.search(r"sha256:([0-9a-f]{64})", value or "")
    return m.group(1) if m else None


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def provenance_predicate(*, target: str, stack: Any, build_args: Mapping[str, str],
                         base_image: str, base_digest: str, builder_image: str,
                         builder_digest: str, lock_digest: str | None, push: str,
                         seconds: float, image_id: str) -> dict:
    """SLSA provenance v1 of one build (see the provenance schema's description)."""
    now = datetime.now(timezone.utc)
    deps: list[dict[str, Any]] = []
    for name, uri, dig in (("base-image", base_image, base_digest),
                           ("builder-image", builder_image, builder_digest),
                           ("matrix", "envbuilder-matrix", stack.matrix.digest),
                           ("requirements.lock", "requirements.lock", lock_digest)):
        h = _sha_hex(dig)
        if h is not None:
            deps.append({"name": name, "uri": uri if "://" in uri else f"docker-image://{uri}"
                         if name.endswith("image") else uri, "digest": {"sha256": h}})
    return {
        "buildDefinition": {
            "buildType": "https://envbuilder.dev/buildtypes/docker/v1",
            "externalParameters": {"target": target, "stack": stack.target, "tag": stack.tag,
                                   "push": push, "build_args": redact_build_args(build_args)},
            "internalParameters": {"envbuilder_version": __version__,
                                   "matrix_digest": stack.matrix.digest,
                                   "lock_digest": lock_digest, "base_image": base_image,
                                   "builder_image": builder_image},
            "resolvedDependencies": deps},
        "runDetails": {
            "builder": {"id": f"https://envbuilder.dev/builder/envbuilder@{__version__}",
                        "version": {"envbuilder": __version__}},
            "metadata": {"invocationId": image_id,
                         "startedOn": _iso(now - timedelta(seconds=max(0.0, seconds))),
                         "finishedOn": _iso(now)}},
    }


# -- sign and attest a pushed digest ---------------------------------------------------------

@dataclass
class Signed:
    ref: str
    signature: str = "not run"  # "signed", "already signed by this key", "failed"
    attestations: dict[str, str] = field(default_factory=dict)  # name -> predicate type

    def to_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "signature": self.signature,
                "attestations": dict(self.attestations)}


def sign_and_attest(ref: str, opts: SignOptions, predicates: Mapping[str, dict], *,
                    cosign: Cosign | None = None) -> Signed:
    """Check every predicate against its schema, then sign ``ref`` (a digest) once and attach
    the four attestations. Nothing is signed twice: a digest this key already signed keeps
    its signature, and only the attestations this key has not attached to it yet are added
    (a run that stopped between the signature and the last attestation is completed by the
    next one)."""
    _require_digest(ref)
    for name, doc in predicates.items():
        bad = check_predicate(BY_NAME[name], doc)
        if bad is not None:
            raise OperationError(f"sign: the {name} attestation breaks its schema "
                                 f"({BY_NAME[name].schema}) at {bad}: nothing was signed",
                                 step="sign")
    c = cosign or Cosign()
    out = Signed(ref)
    with tempfile.TemporaryDirectory(prefix="envbuilder-sign-") as tmp:
        todo = [p for p in PREDICATES if p.name in predicates]
        if not opts.keyless:
            pub = Path(tmp) / "key.pub"
            pub.write_text(c.public_key(str(opts.key)))
            if _already_signed(c, ref, str(pub)):
                out.signature = "already signed by this key"
                digest = ref.rpartition("@")[2]
                todo = [p for p in todo
                        if not _check_attestation(c, ref, str(pub), p, digest, legacy=True)["ok"]]
        files = {}
        for p in todo:
            f = Path(tmp) / f"{p.name}.json"
            f.write_text(json.dumps(predicates[p.name], sort_keys=True))
            files[p.name] = f
        if out.signature == "not run":
            c.sign(ref, opts)
            out.signature = "signed"
        for p in todo:
            c.attest(ref, opts, p, files[p.name])
            out.attestations[p.name] = p.type
    return out


def _already_signed(c: Cosign, ref: str, pub: str) -> bool:
    """A signature in the legacy format (a digest signed only as a bundle by an older envbuilder
    is signed again, in the format the admission policy verifies)."""
    try:
        sigs = c.verify(ref, pub, legacy=True)
    except OperationError:
        return False
    digest = ref.rpartition("@")[2]
    return any(is_signature(s, digest) for s in sigs)


# what `cosign verify` prints as ``critical.type`` for an image signature: the simple-signing
# payload's type (cosign 2), the signature bundle's in-toto predicate type (cosign 3). cosign 3
# also verifies an attestation bundle of the same key for the digest and prints it with the
# attestation's predicate type there: that is not a signature.
SIGNATURE_TYPES = ("cosign container image signature", "https://sigstore.dev/cosign/sign/v1")


def is_signature(sig: Any, digest: str) -> bool:
    """Whether one verified payload ``cosign verify`` printed is an image signature (by its
    type) naming ``digest``."""
    crit = sig.get("critical") if isinstance(sig, Mapping) else None
    if not isinstance(crit, Mapping) or crit.get("type") not in SIGNATURE_TYPES:
        return False
    image = crit.get("image")
    return isinstance(image, Mapping) and image.get("docker-manifest-digest") == digest


def _signature_problem(sigs: Sequence[Any], digest: str) -> str | None:
    """Which signature check failed (None: a signature of this key names ``digest``)."""
    if any(is_signature(s, digest) for s in sigs):
        return None
    types = sorted({str((s.get("critical") or {}).get("type")) for s in sigs
                    if isinstance(s, Mapping) and isinstance(s.get("critical"), Mapping)})
    others = [s for s in sigs if isinstance(s, Mapping) and _signed_digest(s) not in (None, digest)]
    if others:
        return (f"signature: the signatures this key made name another image "
                f"({_signed_digest(others[0])}), not {digest}")
    if types:
        return (f"signature: no signature of this key names {digest}: cosign accepted only "
                f"{len(sigs)} bundle(s) of other types ({', '.join(types)[:300]}), which are "
                f"attestations, not the image's signature (missing, or it does not verify)")
    return f"signature: no signature names {digest}"


# -- check: signature and attestations from the registry ------------------------------------

@dataclass
class CheckReport:
    image: str
    ref: str  # REPO@DIGEST checked
    digest: str
    signature: bool = False
    attestations: dict[str, dict[str, Any]] = field(default_factory=dict)
    proven: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    requirements: list[dict[str, Any]] = field(default_factory=list)  # --require, each judged

    @property
    def ok(self) -> bool:
        return self.signature and not self.errors and all(
            a["ok"] for a in self.attestations.values()) and len(self.attestations) == len(PREDICATES)

    def to_dict(self) -> dict[str, Any]:
        return {"image": self.image, "ref": self.ref, "digest": self.digest, "ok": self.ok,
                "signature": self.signature, "attestations": self.attestations,
                "proven": self.proven, "requirements": self.requirements, "errors": self.errors}


def resolve_digest(image: str) -> tuple[str, str]:
    """(REPO@DIGEST, DIGEST) of ``image`` as its registry serves it now (a tag is resolved
    by the registry; a digest is checked to be there)."""
    from envbuilder.run.registry import image_config

    got = image_config(image)
    digest = str(got["manifest_digest"])
    asked = image.rpartition("@")[2] if "@" in image else None
    if asked and asked != digest:
        raise OperationError(f"{image}: the registry serves {digest} for it (an index narrowed "
                             f"to linux/amd64): check that digest", step="verify")
    return _at_digest(image, digest), digest


def _at_digest(image: str, digest: str) -> str:
    """``image`` (a tag or a digest reference) named by ``digest``: REPO@DIGEST."""
    from envbuilder.run.registry import parse_reference

    ref = parse_reference(image)
    name = image.partition("@")[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return f"{name}@{digest}" if name else f"{ref.registry}/{ref.repository}@{digest}"


def check_image(image: str, pub: str, *, cosign: Cosign | None = None,
                require: Sequence[str] = ()) -> CheckReport:
    """Verify ``image``'s signature and its four attestations with the public key ``pub``; each
    of ``require`` (``backend=nccl``, ``transport=ib``, ``floor_pct>=80``: render.admission's
    core.attestreq) must hold in the verified smoke attestation."""
    from envbuilder.core import attestreq

    reqs = [attestreq.parse(r, "--require") for r in require]
    check_key(pub, "--key", private=False)
    # one deadline for the whole check: every cosign command together (the registry's
    # requests have theirs, ENVBUILDER_REGISTRY_DEADLINE)
    c = cosign or Cosign(deadline=_child.Deadline(verify_deadline(), "verify, all its cosign commands"))
    ref, digest = resolve_digest(image)
    rep = CheckReport(image=image, ref=ref, digest=digest)
    try:
        sigs = c.verify(ref, pub)
        problem = _signature_problem(sigs, digest)  # a signature counts only as a signature
        rep.signature = problem is None
        if problem is not None:
            rep.errors.append(problem)
    except OperationError as e:
        rep.errors.append(f"signature: {e}")
        return rep
    for p in PREDICATES:
        rep.attestations[p.name] = _check_attestation(c, ref, pub, p, digest)
    smoke = rep.attestations["smoke"].get("predicate")
    if smoke:
        rep.proven = {"world_size": smoke["layout"]["world_size"], "layout": smoke["layout"],
                      "backend": smoke["backend"], "busbw_gbps": smoke["busbw_gbps"],
                      "host": smoke["host"]["description"],
                      "collectives": sorted(k for k, v in smoke["collectives"].items()
                                            if v in ("pass", "ok")),
                      "target": smoke["target"], "envbuilder_version": smoke["envbuilder_version"],
                      "device": smoke.get("device"), "transport": smoke.get("transport"),
                      "bandwidth_floor": smoke.get("bandwidth_floor"), "shm": smoke.get("shm"),
                      "components": smoke.get("components")}
    for req in reqs:
        met, got = req.check(smoke) if smoke else (False, None)
        text = attestreq.shown(req)
        rep.requirements.append({"require": text, "ok": met, "found": got})
        if not met:
            rep.errors.append(f"--require {text}: the smoke attestation "
                              + (f"says {req.text} {got}" if got is not None else
                                 f"records no {req.text}" if smoke else "is missing"))
    missing = [n for n, a in rep.attestations.items() if a.get("missing")]
    if missing:
        rep.errors.append(f"no {', '.join(missing)} attestation signed by this key names {digest}")
    rep.errors += [f"{n} attestation: {a['error']}" for n, a in rep.attestations.items()
                   if not a["ok"] and not a.get("missing")]
    return rep


def verify_deadline() -> float:
    """ENVBUILDER_VERIFY_DEADLINE seconds (default DEADLINE_S) for one verify (exit 2 when not
    a number of seconds)."""
    from envbuilder.run.registry import _env_seconds

    return _env_seconds("ENVBUILDER_VERIFY_DEADLINE", DEADLINE_S)


def _signed_digest(sig: Any) -> str | None:
    crit = sig.get("critical") if isinstance(sig, Mapping) else None
    image = crit.get("image") if isinstance(crit, Mapping) else None
    d = image.get("docker-manifest-digest") if isinstance(image, Mapping) else None
    return d if isinstance(d, str) else None


def _check_attestation(c: Cosign, ref: str, pub: str, p: Predicate, digest: str, *,
                       legacy: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": p.type, "ok": False, "error": None}
    try:
        stmts = c.verify_attestation(ref, pub, p, legacy=legacy)
    except OperationError as e:
        out.update(missing=True, error=f"missing, or not signed by this key: {e}")
        return out
    want = digest.split(":", 1)[1]
    good = [s for s in stmts if s.get("predicateType") == p.type
            and any((sub.get("digest") or {}).get("sha256") == want
                    for sub in s.get("subject") or ())]
    if not good:
        out["error"] = f"no {p.type} statement names {digest}"
        return out
    pred = good[-1].get("predicate")
    bad = check_predicate(p, pred)
    if bad is not None:
        out["error"] = f"breaks its schema {p.schema} at {bad}"
        return out
    out.update(ok=True, predicate=pred)
    return out


def list_attestations(image: str, *, digest: str | None = None,
                      cosign: Cosign | None = None) -> list[dict[str, Any]]:
    """What attestations ``image`` carries in its registry, as stored (not verified: that
    takes the public key, envbuilder verify IMAGE --key PUB). [] when cosign is missing.
    ``digest``: the manifest digest the caller already read from the registry (the registry
    is then not asked again, nor its token service)."""
    try:
        c = cosign or Cosign()
    except InputError:
        return []
    if digest is None:
        ref, digest = resolve_digest(image)
    else:
        ref = _at_digest(image, digest)
    try:
        stmts = c.download_attestations(ref)
    except OperationError:
        return []
    out = []
    for s in stmts:
        t = str(s.get("predicateType", ""))
        p = BY_TYPE.get(t)
        out.append({"type": t, "name": p.name if p else ("signature" if t.endswith("/sign/v1")
                                                          else None),
                    "verified": False, "digest": digest})
    return out


# -- doctor --image: what the smoke attestation proved, for this host ------------------------

def smoke_attestation(image: str, pub: str | None = None, *,
                      cosign: Cosign | None = None) -> dict[str, Any] | None:
    """The smoke predicate on ``image``'s digest: verified with ``pub`` when given, else as
    stored (unverified); None when there is none."""
    c = cosign or Cosign()
    ref, digest = resolve_digest(image)
    if pub is not None:
        a = _check_attestation(c, ref, pub, BY_NAME["smoke"], digest)
        return a.get("predicate") if a["ok"] else None
    want = digest.split(":", 1)[1]
    for s in reversed(c.download_attestations(ref)):
        if s.get("predicateType") == SMOKE_TYPE and any(
                (sub.get("digest") or {}).get("sha256") == want for sub in s.get("subject") or ()):
            pred = s.get("predicate")
            if check_predicate(BY_NAME["smoke"], pred) is None:
                return dict(pred)
    return None


def proof_check(pred: Mapping[str, Any] | None, inv: Any, *, verified: bool,
                nproc: int | None = None) -> Any:
    """A doctor check: the host the image's smoke job passed on against this host (``inv``, a
    diagnose.doctor.Inventory): what was and was not proven for it. A warning at most: the
    smoke attestation is evidence, not a requirement."""
    from envbuilder.diagnose.doctor import Check

    how = "verified" if verified else "unverified (give --key PUB to verify it)"
    if pred is None:
        return Check("smoke-proof", "skip", None, "the image carries no smoke attestation "
                     "(built without build --push REPO --sign)", "")
    lay, host = pred["layout"], pred["host"]
    done = (f"{pred['target']} passed the smoke job at world size {lay['world_size']} "
            f"({lay['nnodes']}x{lay['nproc_per_node']}, {pred['backend']}) on {host['description']}; "
            f"attestation {how}")
    mine = sorted({str(g.get("name")) for g in inv.gpus})
    if host["cpu_only"]:
        if not inv.gpus:
            return Check("smoke-proof", "ok", lay["world_size"], done + ". This host is CPU only "
                         "too: the same job is proven for it", "")
        return Check("smoke-proof", "warn", lay["world_size"],
                     done + f". Proven: rendezvous and collectives (gloo). Not proven: NCCL on this "
                     f"host's {len(inv.gpus)} GPU(s) ({', '.join(mine)}, driver {inv.driver})",
                     "run envbuilder smoke IMAGE --backend nccl here")
    gaps = []
    theirs = sorted({str(g["name"]) for g in host["gpus"]})
    if not inv.gpus:
        gaps.append("this host has no GPU")
    elif mine != theirs:
        gaps.append(f"proven on {', '.join(theirs)}, this host has {', '.join(mine)}")
    if inv.driver and host.get("driver") and inv.driver != host["driver"]:
        gaps.append(f"proven on driver {host['driver']}, this host has {inv.driver}")
    want = nproc or lay["nproc_per_node"]
    if inv.gpus and len(inv.gpus) < want:
        gaps.append(f"{want} ranks per node were proven, this host has {len(inv.gpus)} GPU(s)")
    if not gaps:
        return Check("smoke-proof", "ok", lay["world_size"], done + ". This host matches it "
                     f"(driver {inv.driver}, {len(inv.gpus)} x {', '.join(mine)})", "")
    return Check("smoke-proof", "warn", lay["world_size"], done + ". Not proven for this host: "
                 + "; ".join(gaps), "run envbuilder smoke IMAGE here")


# -- admission: the verification policy-controller performs -------------------------------------

def admission_check(ref: str, policy: Mapping[str, Any], *,
                    cosign: Cosign | None = None) -> list[str]:
    """What Sigstore policy-controller (v0.15.1, pkg/webhook/validator.go) decides for ``ref``
    under a rendered ClusterImagePolicy with a key authority (render.admission): its checks as
    cosign performs them (``CheckOpts``: ``NewBundleFormat`` only for ``signatureFormat:
    bundle``, which a key authority refuses; no ``ctlog``: the transparency log ignored), every
    attestation's CUE policy evaluated by cosign. Returns the reasons it would refuse the image
    ([] = admitted)."""
    c = cosign or Cosign()
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="envbuilder-admit-") as tmp:
        for auth in (policy.get("spec") or {}).get("authorities") or []:
            key = (auth.get("key") or {}).get("data")
            if key is None:
                errors.append(f"{auth.get('name')}: not a key authority (only those are checked here)")
                continue
            if auth.get("signatureFormat") == "bundle":
                errors.append(f"{auth.get('name')}: constructing checkOpts: when using the new bundle "
                              "format, the authority must be keyless")
                continue
            pub = Path(tmp) / "key.pub"
            pub.write_text(key)
            try:
                c.verify(ref, str(pub), legacy=True)
            except OperationError as e:
                errors.append(f"{auth.get('name')}: signature: {e}")
                continue
            for i, att in enumerate(auth.get("attestations") or []):
                p = BY_TYPE.get(att.get("predicateType"), Predicate(
                    att.get("name", "attestation"), att.get("predicateType", ""), ""))
                pol = att.get("policy") or {}
                cue = None
                if pol.get("type") == "cue" and pol.get("data"):
                    cue = Path(tmp) / f"policy-{i}.cue"
                    cue.write_text(pol["data"])
                try:
                    c.verify_attestation(ref, str(pub), p, legacy=True,
                                         policy=str(cue) if cue else None)
                except OperationError as e:
                    errors.append(f"{auth.get('name')}: attestation {att.get('name')}: {e}")
    return errors


# -- the SIF: attested as a file, tied to the image digest ---------------------------------------

def sif_predicate(target: str, image: str, config_digest: str, sif: Path) -> dict[str, Any]:
    from envbuilder.run.apptainer import sif_sha256

    return {"envbuilder_version": __version__, "target": target, "image": image,
            "config_digest": config_digest,
            "sif": {"sha256": sif_sha256(sif), "size_bytes": Path(sif).stat().st_size}}


def sif_bundle(sif: Path) -> Path:
    from envbuilder.run.apptainer import ATTESTATION_SUFFIX

    return Path(sif).with_name(Path(sif).name + ATTESTATION_SUFFIX)


def attest_sif(sif: Path, opts: SignOptions, predicate: Mapping[str, Any], *,
               cosign: Cosign | None = None) -> dict[str, Any]:
    """Attest the SIF file (``cosign attest-blob``) with its origin (``sif_predicate``): the
    bundle goes beside it, ``X.sif.att.json``. A file there that envbuilder did not write (its
    SIF's record names the bundles it wrote) is never replaced."""
    bad = check_predicate(SIF, predicate)
    if bad is not None:
        raise OperationError(f"sign: the sif attestation breaks its schema at {bad}", step="attest")
    bundle = sif_bundle(sif)
    record = Path(sif).with_name(Path(sif).name + ".envbuilder.json")
    try:
        doc = json.loads(record.read_text())
    except (OSError, ValueError):
        doc = {}
    if os.path.lexists(bundle) and doc.get("attestation") != bundle.name:
        raise InputError(f"{bundle} exists and envbuilder did not write it: remove it or choose "
                         "another --sif path")
    c = cosign or Cosign()
    with tempfile.TemporaryDirectory(prefix="envbuilder-sif-", dir=Path(sif).parent) as tmp:
        pred = Path(tmp) / "sif.json"
        pred.write_text(json.dumps(dict(predicate), sort_keys=True))
        out = Path(tmp) / bundle.name
        c.attest_blob(Path(sif), opts, SIF, pred, out)
        os.replace(out, bundle)
    if doc.get("written_by") == "envbuilder":
        doc["attestation"] = bundle.name
        tmp_record = record.with_name(record.name + ".tmp")
        tmp_record.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp_record, record)
    return {"bundle": str(bundle), "type": SIF.type}


def check_sif(sif: Path, pub: str, labels: Mapping[str, str], *,
              cosign: Cosign | None = None) -> dict[str, Any]:
    """``envbuilder verify X.sif --key PUB``: the attestation beside the SIF is signed by
    ``pub``, names this file (cosign checks its sha256), satisfies its schema, and names the
    image digest and config the SIF's labels name. {"ok", "error", "predicate", "bundle"}."""
    from envbuilder.run.apptainer import IMAGE_CONFIG_LABEL, IMAGE_REF_LABEL, sif_sha256

    check_key(pub, "--key", private=False)
    bundle = sif_bundle(sif)
    out: dict[str, Any] = {"ok": False, "error": None, "bundle": str(bundle), "type": SIF.type}
    if not bundle.is_file():
        out["error"] = f"no attestation beside the SIF ({bundle.name}: envbuilder build --sign writes it)"
        return out
    c = cosign or Cosign()
    try:
        c.verify_blob_attestation(sif_sha256(Path(sif)), pub, SIF, bundle)
    except OperationError as e:
        out["error"] = f"the attestation is not signed by this key or names another file: {e}"
        return out
    try:
        env = json.loads(bundle.read_text())
        stmt = _statement(env.get("dsseEnvelope", env))
    except (OSError, ValueError):
        out["error"] = f"{bundle.name} is not a Sigstore bundle of an in-toto statement"
        return out
    pred = stmt.get("predicate")
    bad = check_predicate(SIF, pred)
    if bad is not None or not isinstance(pred, dict):
        out["error"] = f"the sif attestation breaks its schema at {bad}"
        return out
    out["predicate"] = pred
    for key, label in (("image", IMAGE_REF_LABEL), ("config_digest", IMAGE_CONFIG_LABEL)):
        if labels.get(label) != pred[key]:
            out["error"] = (f"the attestation names {key} {pred[key]}, the SIF's label {label} "
                            f"says {labels.get(label)!r}")
            return out
    out["ok"] = True
    return out
