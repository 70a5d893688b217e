"""Images that carry their proof (issue 31), against real parts: the session's CPU build (its
cache), Debian's docker-registry, and Debian sid's cosign 3.1.1 (scripts/test-services.sh puts
it on PATH), with a key pair cosign generates here.

One build + push + sign for the module (``signed``): the real ``cosign verify`` and
``cosign verify-attestation`` accept what it left, envbuilder's own check (``verify IMAGE@DIGEST
--key PUB``) prints the smoke world size and busbw and exits 0, and exits 1 with another key,
for an unsigned image, and by tag once another image took the tag. A build whose smoke job
fails (an image whose base points gloo at an interface that does not exist) leaves no
signature. The admission policies are validated against policy-controller's and Kyverno's CRD
schemas, and the key authority's policy is checked the way policy-controller checks it
(run.sign.admission_check). A `--runtime both --push --sign` build makes the SIF of the pushed
digest and attests it; `verify X.sif --key` checks it (measured under a loaded 2-core machine:
about 800 s, the SIF built again because each session's registry has another address).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import CPU_TARGET, Registry

DATA = Path(__file__).parent / "data"
PASSWORD = "eb-sign-test-pass"
SMOKE = "https://envbuilder.dev/attestations/smoke/v1"
TYPES = ("https://envbuilder.dev/attestations/verify/v1", SMOKE, "https://cyclonedx.org/bom",
         "https://slsa.dev/provenance/v1")


def _cosign() -> str:
    exe = shutil.which("cosign")
    if exe is None:
        if os.environ.get("ENVBUILDER_REQUIRE_DOCKER") == "1":
            pytest.fail("cosign is not on PATH (scripts/test-services.sh exports it)")
        pytest.skip("cosign is not on PATH (scripts/test-services.sh fetches Debian sid's)")
    return exe


def _env(**kw: str) -> dict[str, str]:
    e = dict(os.environ)
    e["COSIGN_PASSWORD"] = PASSWORD
    e.update(kw)
    return e


def _cli(*args: str, env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()", *args],
                          capture_output=True, text=True, env=env or _env(), timeout=timeout)


def _keys(cosign: str, folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([cosign, "generate-key-pair"], cwd=folder, env=_env(), check=True,
                   capture_output=True, timeout=120)
    return folder / "cosign.key", folder / "cosign.pub"


def _tags(registry: Registry, repo: str) -> list[str]:
    try:
        with urllib.request.urlopen(f"http://{registry.address}/v2/{repo}/tags/list",
                                    timeout=10) as r:
            return list(json.loads(r.read()).get("tags") or [])
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise


@pytest.fixture(scope="module")
def sign_registry(tmp_path_factory):
    r = Registry(tmp_path_factory.mktemp("sign-registry")).start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    cosign = _cosign()
    root = tmp_path_factory.mktemp("sign-keys")
    return _keys(cosign, root / "k"), _keys(cosign, root / "other")


@pytest.fixture(scope="module")
def signed(cpu_build, base_image, wheelhouse, ca_bundle, sign_registry, keys, tmp_path_factory):
    """The CPU target built (the session's cache), verified, smoke-tested, pushed and signed."""
    (key, _), _ = keys
    repo = f"{sign_registry.address}/ml/signed"
    p = _cli("build", CPU_TARGET, "--base-image", base_image, "--wheelhouse", str(wheelhouse),
             "--ca-cert", str(ca_bundle), "--push", repo, "--sign", "--key", str(key), "--json",
             # a generous collective timeout (a run-time argument, the image is the session's):
             # 12 ranks on a loaded 2-core machine can stall longer than the default 120 s
             "--smoke-timeout", "300", timeout=1800)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    d = json.loads(p.stdout)
    yield {"report": d, "repo": repo, "ref": d["pushed"][0]["ref"],
           "digest": d["pushed"][0]["digest"]}
    for t in {x["tag"] for x in d["pushed"]}:
        try:
            import docker

            docker.from_env().images.remove(f"{repo}:{t}")
        except Exception:  # noqa: BLE001
            pass


def engine(f):
    """An engine test: the shared build, a registry, cosign."""
    return pytest.mark.docker(pytest.mark.slow(pytest.mark.registry(f)))


@engine
def test_build_sign_leaves_a_signature_and_four_attestations_cosign_accepts(signed, keys):
    cosign = _cosign()
    (_, pub), _ = keys
    d = signed["report"]
    assert d["steps"]["sign"] == "ok" and d["steps"]["smoke"] == "ok" and d["steps"]["verify"] == "ok"
    # one digest signed, however many tags pushed it; every cosign command was shown
    assert len({x["digest"] for x in d["pushed"]}) == 1 and len(d["pushed"]) >= 2
    assert d["signed"]["ref"] == signed["ref"] and d["signed"]["signature"] == "signed"
    assert sorted(d["signed"]["attestations"].values()) == sorted(TYPES)
    cmds = d["signed"]["commands"]
    assert sum(c.startswith("cosign sign ") for c in cmds) == 1
    assert sum(c.startswith("cosign attest ") for c in cmds) == 4
    assert all(signed["ref"] in c for c in cmds if c.startswith(("cosign sign ", "cosign attest ")))
    assert PASSWORD not in json.dumps(d)

    ref = signed["ref"]
    flags = ["--insecure-ignore-tlog", "--allow-insecure-registry"]
    v = subprocess.run([cosign, "verify", "--key", str(pub), *flags, ref], capture_output=True,
                       text=True, timeout=120)
    assert v.returncode == 0, v.stderr
    sig = json.loads(v.stdout)
    assert sig[0]["critical"]["image"]["docker-manifest-digest"] == signed["digest"]
    for t in TYPES:
        a = subprocess.run([cosign, "verify-attestation", "--key", str(pub), *flags, "--type", t,
                            ref], capture_output=True, text=True, timeout=120)
        assert a.returncode == 0, f"{t}: {a.stderr}"
        stmt = json.loads(base64.b64decode(json.loads(a.stdout.splitlines()[0])["payload"]))
        assert stmt["predicateType"] == t
        assert stmt["subject"][0]["digest"]["sha256"] == signed["digest"].split(":")[1]
        pred = stmt["predicate"]
        if t == SMOKE:
            assert pred["layout"]["world_size"] == d["smoke"]["world_size"] == 12
            assert pred["backend"] == "gloo" and pred["host"]["description"] == "CPU only"
            assert pred["busbw_gbps"] > 0 and pred["bandwidth"]
            assert pred["collectives"]["all_reduce"] == "pass"
        elif t.endswith("/bom"):
            purls = [c.get("purl", "") for c in pred["components"]]
            assert any(u.startswith("pkg:pypi/torch@2.13.0") for u in purls)
            assert any(u.startswith("pkg:deb/debian/libc6@") for u in purls)
        elif t.endswith("/provenance/v1"):
            deps = {x["name"]: x for x in pred["buildDefinition"]["resolvedDependencies"]}
            base = d["labels"]["io.envbuilder.base-digest"]
            assert deps["base-image"]["digest"]["sha256"] in base
            assert "builder-image" in deps and "matrix" in deps
            assert pred["buildDefinition"]["internalParameters"]["matrix_digest"] == \
                d["labels"]["io.envbuilder.matrix-digest"]
        else:
            assert pred["ok"] is True and pred["checks"]


@engine
def test_rebuild_of_the_signed_image_reproduces_it_bit_for_bit(signed, keys, wheelhouse, ca_bundle):
    """Issue 42: the provenance says what the image was built from; built again without cache
    from that alone, it is the pushed digest (exit 0, "reproduced")."""
    (_, pub), _ = keys
    d = signed["report"]
    # the push sent the manifest BuildKit built
    assert d["builder"] == "buildkit" and d["reproducible"], d["reproducible_why"]
    assert d["digest"] == signed["digest"]
    p = _cli("rebuild", signed["ref"], "--key", str(pub), "--wheelhouse", str(wheelhouse),
             "--ca-cert", str(ca_bundle), "--json", timeout=1800)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(p.stdout)
    assert r["reproduced"] and r["rebuilt_digest"] == signed["digest"] and r["provenance_verified"]
    assert r["source_date_epoch"] == d["source_date_epoch"] and r["target"] == CPU_TARGET
    assert r["files"] == [] and r["first_layer"] is None


@engine
def test_rebuild_with_another_date_names_the_first_layer_and_its_files(signed, wheelhouse, ca_bundle):
    """One changed input (SOURCE_DATE_EPOCH a day later): exit 1, the first layer the build
    made named, and its files with their path, size and sha256 on both sides."""
    sde = signed["report"]["source_date_epoch"]
    j = _cli("rebuild", signed["ref"], "--wheelhouse", str(wheelhouse), "--ca-cert", str(ca_bundle),
             "--source-date-epoch", str(sde + 86400), "--json", timeout=1800)
    assert "Traceback" not in j.stderr
    r = json.loads(j.stdout)
    assert j.returncode == 1 and not r["reproduced"] and r["rebuilt_digest"] != signed["digest"]
    assert not r["provenance_verified"]  # no --key: the provenance as stored
    assert r["first_layer"]["index"] == 1  # the base's layer is the same; the first one built is not
    assert r["files_total"] >= len(r["files"]) > 0
    files = {f["path"]: f for f in r["files"]}
    for f in files.values():  # path, size and digest on both sides
        if f["original"] and f["rebuilt"] and f["original"]["kind"] == "file":
            assert f["original"]["size"] >= 0 and f["original"]["sha256"].startswith("sha256:")
            assert f["rebuilt"]["sha256"].startswith("sha256:")
    assert any("mtime" in f["differs"] for f in files.values())
    # useradd dated the account by SOURCE_DATE_EPOCH: a day later is another /etc/shadow
    assert "content" in files["etc/shadow"]["differs"], files.get("etc/shadow")


@engine
def test_envbuilder_check_passes_prints_what_was_proven_and_refuses_another_key(signed, keys):
    (_, pub), (_, other_pub) = keys
    p = _cli("verify", signed["ref"], "--key", str(pub))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "world size 12" in p.stdout and "busbw" in p.stdout and "CPU only" in p.stdout
    j = _cli("verify", signed["ref"], "--key", str(pub), "--json")
    d = json.loads(j.stdout)
    assert j.returncode == 0 and d["ok"] and d["proven"]["world_size"] == 12
    assert d["proven"]["busbw_gbps"] > 0 and all(a["ok"] for a in d["attestations"].values())
    # by tag: the registry resolves it to the signed digest
    by_tag = _cli("verify", f"{signed['repo']}:{CPU_TARGET}", "--key", str(pub), "--json")
    assert by_tag.returncode == 0 and json.loads(by_tag.stdout)["digest"] == signed["digest"]

    bad = _cli("verify", signed["ref"], "--key", str(other_pub))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "not signed and attested by" in bad.stderr and "Traceback" not in bad.stderr


@engine
def test_verify_require_refuses_a_gloo_proof_where_nccl_is_demanded(signed, keys):
    """Issue 40: the signed smoke attestation holds the backend and the transport; a team that
    demands NCCL (verify --require backend=nccl) refuses this gloo-proven CPU image, exit 1."""
    (_, pub), _ = keys
    p = _cli("verify", signed["ref"], "--key", str(pub), "--require", "backend=nccl")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "--require backend=nccl: the smoke attestation says backend gloo" in p.stderr
    assert "transport: gloo over TCP" in p.stdout and "Traceback" not in p.stderr
    ok = _cli("verify", signed["ref"], "--key", str(pub), "--require", "backend=gloo",
              "--require", "world_size>=12", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    d = json.loads(ok.stdout)
    assert [r["ok"] for r in d["requirements"]] == [True, True]
    proven = d["proven"]
    assert proven["backend"] == "gloo" and proven["transport"]["summary"] == "gloo over TCP"
    assert proven["device"] == {"kind": "cpu", "gpus": []} and proven["shm"]["ok"] is True


@engine
def test_nothing_is_signed_twice_and_a_signing_failure_is_one_line(signed, keys, monkeypatch):
    from envbuilder.errors import OperationError
    from envbuilder.run.sign import Cosign, SignOptions, sign_and_attest

    (key, _), _ = keys
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)  # cosign reads it (in this process here)
    shown: list[str] = []
    c = Cosign(on_command=shown.append)
    before = len(c.download_attestations(signed["ref"]))
    # the four attestations (.att, the legacy format a key signs in: the signature is the .sig tag)
    assert before == 4
    again = sign_and_attest(signed["ref"], SignOptions(key=str(key)),
                            {"smoke": json.loads(json.dumps(_SMOKE_DOC))}, cosign=c)
    assert again.signature == "already signed by this key" and again.attestations == {}
    assert not any(x.startswith(("cosign sign ", "cosign attest ")) for x in shown)
    assert len(c.download_attestations(signed["ref"])) == before
    # a wrong password: cosign's own error, on one line, with the step named (exit 1)
    monkeypatch.setenv("COSIGN_PASSWORD", "not-the-password")
    with pytest.raises(OperationError) as e:
        c.sign(signed["ref"], SignOptions(key=str(key)))
    assert e.value.step == "sign" and e.value.exit_code == 1
    assert str(e.value).startswith("sign: `cosign sign` failed (exit 1): ")
    assert "\n" not in str(e.value) and "not-the-password" not in str(e.value)
    # a tag is never signed
    from envbuilder.errors import InputError

    with pytest.raises(InputError):
        c.sign(f"{signed['repo']}:{CPU_TARGET}", SignOptions(key=str(key)))


@engine
def test_inspect_lists_the_attestations_and_doctor_reads_the_verified_smoke_proof(signed, keys):
    """inspect (read from the registry) lists what the digest carries, unverified; doctor
    --image --key verifies the smoke attestation and compares its host with this one."""
    (_, pub), (_, other_pub) = keys
    p = _cli("inspect", signed["ref"], "--from", "registry", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    found = json.loads(p.stdout)["attestations"]
    assert sorted(a["type"] for a in found if a["name"] != "signature") == sorted(TYPES)
    assert all(a["verified"] is False and a["digest"] == signed["digest"] for a in found)
    p = _cli("inspect", signed["ref"], "--from", "registry")
    assert p.returncode == 0 and "attestation: smoke (" + SMOKE + ")" in p.stdout, p.stdout

    def proof(key: Path) -> dict:
        d = _cli("doctor", "--image", signed["ref"], "--key", str(key), "--json")
        assert d.returncode in (0, 1), d.stderr  # 1: a host check failed (not this one)
        (c,) = [c for c in json.loads(d.stdout)["checks"] if c["name"] == "smoke-proof"]
        return c

    c = proof(pub)
    assert c["value"] == 12 and c["status"] in ("ok", "warn"), c
    assert "passed the smoke job at world size 12 (1x12, gloo) on CPU only" in c["detail"]
    assert "attestation verified" in c["detail"]
    # another key verifies nothing: no proof is read
    c = proof(other_pub)
    assert c["status"] == "skip" and c["value"] is None, c


@engine
def test_a_digest_signed_without_its_attestations_gets_only_the_missing_ones(
        keys, sign_registry, docker_client, base_image, monkeypatch):
    """A run that stopped after `cosign sign` (the attestations never attached): the next
    run signs nothing again and attaches what is missing, once."""
    from envbuilder.run import engine as eng
    from envbuilder.run.sign import Cosign, SignOptions, sign_and_attest

    cosign = _cosign()
    (key, pub), _ = keys
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    repo = f"{sign_registry.address}/ml/partial"
    docker_client.images.get(base_image).tag(repo, "p")
    try:
        ref = f"{repo}@{eng.push(docker_client, repo, 'p')}"
        # what envbuilder's own sign step writes (the legacy format), then the run stopped
        subprocess.run([cosign, "sign", "--key", str(key), "--tlog-upload=false",
                        "--use-signing-config=false", "--new-bundle-format=false", "--yes",
                        "--allow-insecure-registry", ref],
                       env=_env(), check=True, capture_output=True, timeout=120)
        shown: list[str] = []
        c = Cosign(on_command=shown.append)
        doc = json.loads(json.dumps(_SMOKE_DOC))
        got = sign_and_attest(ref, SignOptions(key=str(key)), {"smoke": doc}, cosign=c)
        assert got.signature == "already signed by this key" and got.attestations == {"smoke": SMOKE}
        assert [x.split()[1] for x in shown if x.startswith(("cosign sign ", "cosign attest "))] == ["attest"]
        a = subprocess.run([cosign, "verify-attestation", "--key", str(pub), "--insecure-ignore-tlog",
                            "--allow-insecure-registry", "--type", SMOKE, ref],
                           capture_output=True, text=True, timeout=120)
        assert a.returncode == 0, a.stderr
        shown.clear()
        again = sign_and_attest(ref, SignOptions(key=str(key)), {"smoke": doc}, cosign=c)
        assert again.signature == "already signed by this key" and again.attestations == {}
        assert not any(x.startswith(("cosign sign ", "cosign attest ")) for x in shown)
        assert len(c.download_attestations(ref)) == 1  # the one attestation (.att)
    finally:
        docker_client.images.remove(f"{repo}:p")


_SMOKE_DOC = {"envbuilder_version": "0", "target": "t", "ok": True,
              "layout": {"world_size": 2, "nnodes": 1, "nproc_per_node": 2}, "backend": "gloo",
              "collectives": {"all_reduce": "pass"}, "bandwidth": [], "busbw_gbps": None,
              "seconds": 1.0, "host": {"cpu_only": True, "description": "CPU only",
                                       "driver": None, "gpus": []}}


@engine
def test_unsigned_image_and_a_retagged_tag_exit_1(signed, keys, sign_registry, docker_client,
                                                   base_image):
    (_, pub), _ = keys
    # another image (the test base, unsigned) pushed to the signed image's alias tag
    repo, tag = signed["repo"], CPU_TARGET
    docker_client.images.get(base_image).tag(repo, "eb-sign-unsigned")
    docker_client.images.get(base_image).tag(repo, tag)
    try:
        for t in ("eb-sign-unsigned", tag):
            for chunk in docker_client.api.push(repo, t, stream=True, decode=True):
                assert "error" not in chunk, chunk
        p = _cli("verify", f"{repo}:eb-sign-unsigned", "--key", str(pub))
        assert p.returncode == 1 and "signature" in p.stderr, p.stdout + p.stderr
        p = _cli("verify", f"{repo}:{tag}", "--key", str(pub), "--json")
        d = json.loads(p.stdout)
        assert p.returncode == 1 and not d["ok"] and d["digest"] != signed["digest"]
        # the signed digest itself still checks
        assert _cli("verify", signed["ref"], "--key", str(pub)).returncode == 0
    finally:
        for t in ("eb-sign-unsigned", tag):
            docker_client.images.remove(f"{repo}:{t}")


# -- the registry's own API, for a test that changes what a digest carries -------------------

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SIGN_TYPE = "https://sigstore.dev/cosign/sign/v1"  # cosign 3's signature bundle


def _get(registry: Registry, path: str, accept: str | None = None) -> bytes:
    req = urllib.request.Request(f"http://{registry.address}/v2/{path}",
                                 headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def _put_manifest(registry: Registry, repo: str, ref: str, body: bytes, media_type: str) -> str:
    req = urllib.request.Request(f"http://{registry.address}/v2/{repo}/manifests/{ref}", data=body,
                                 method="PUT", headers={"Content-Type": media_type})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.headers["Docker-Content-Digest"]


def _put_blob(registry: Registry, repo: str, data: bytes) -> str:
    import hashlib

    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = urllib.request.Request(f"http://{registry.address}/v2/{repo}/blobs/uploads/",
                                   method="POST")
    with urllib.request.urlopen(start, timeout=30) as r:
        loc = r.headers["Location"]
    url = loc if loc.startswith("http") else f"http://{registry.address}{loc}"
    req = urllib.request.Request(f"{url}{'&' if '?' in url else '?'}digest={digest}", data=data,
                                 method="PUT", headers={"Content-Type": "application/octet-stream"})
    urllib.request.urlopen(req, timeout=30).close()
    return digest


def _push_artifact(registry: Registry, repo: str, content: bytes) -> str:
    """A one-layer OCI image pushed through the registry API; its manifest digest."""
    import hashlib

    cfg = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {
        "type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(content).hexdigest()]}}).encode()
    man = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                      "digest": _put_blob(registry, repo, cfg), "size": len(cfg)},
           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                       "digest": _put_blob(registry, repo, content), "size": len(content)}]}
    return _put_manifest(registry, repo, "eb-sign-other", json.dumps(man).encode(), OCI_MANIFEST)


SIG_ANNOTATION = "dev.cosignproject.cosign/signature"  # cosign's legacy .sig layer: its signature
MANIFESTS = f"{OCI_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json"


def _sig_manifest(registry: Registry, repo: str, digest: str) -> dict:
    """The legacy ``sha256-<hex>.sig`` manifest of ``digest`` (what ``build --sign --key``
    writes: one simple-signing layer per signature, its signature in an annotation)."""
    return json.loads(_get(registry, f"{repo}/manifests/{digest.replace(':', '-')}.sig", MANIFESTS))


def _corrupt(man: dict) -> dict:
    """``man`` with one byte of its first signature flipped."""
    man = json.loads(json.dumps(man))
    ann = man["layers"][0]["annotations"]
    sig = bytearray(base64.b64decode(ann[SIG_ANNOTATION]))
    sig[-5] ^= 0xFF
    ann[SIG_ANNOTATION] = base64.b64encode(bytes(sig)).decode()
    return man


@engine
def test_a_corrupt_signature_or_another_images_fails_beside_a_good_attestation(signed, keys,
                                                                                 sign_registry):
    """Issue 47, in the legacy format ``build --sign --key`` writes (issue 41: what a
    policy-controller key authority verifies): the signed digest's ``.sig`` manifest is changed
    twice, its signature corrupted (one byte), then replaced by another image's signature made
    by the same key. Its smoke attestation (the ``.att`` manifest) stays good and cosign still
    verifies it. Either way ``verify --key`` is exit 1 with one line naming the signature
    check; the manifest put back, the digest passes again."""
    cosign = _cosign()
    (key, pub), _ = keys
    repo, digest, ref = "ml/signed", signed["digest"], signed["ref"]
    tag = digest.replace(":", "-") + ".sig"
    original = _sig_manifest(sign_registry, repo, digest)
    other = _push_artifact(sign_registry, repo, b"another image, signed by the same key\n")
    subprocess.run([cosign, "sign", "--key", str(key), "--tlog-upload=false",
                    "--use-signing-config=false", "--new-bundle-format=false", "--yes",
                    "--allow-insecure-registry", f"{sign_registry.address}/{repo}@{other}"],
                   env=_env(), check=True, capture_output=True, timeout=120)
    others = _sig_manifest(sign_registry, repo, other)
    assert others["layers"][0]["annotations"][SIG_ANNOTATION]  # the legacy format, as ours
    flags = ["--insecure-ignore-tlog", "--allow-insecure-registry", "--new-bundle-format=false"]
    media = original.get("mediaType", OCI_MANIFEST)
    try:
        for case, man in (("corrupt", _corrupt(original)), ("another image's", others)):
            _put_manifest(sign_registry, repo, tag, json.dumps(man).encode(), media)
            v = subprocess.run([cosign, "verify", "--key", str(pub), *flags, ref],
                               capture_output=True, text=True, timeout=120, env=_env())
            assert v.returncode != 0, (case, v.stdout[-1000:])
            # beside it, the smoke attestation still verifies
            a = subprocess.run([cosign, "verify-attestation", "--key", str(pub), "--type", SMOKE,
                                *flags, ref], capture_output=True, text=True, timeout=120,
                               env=_env())
            assert a.returncode == 0, (case, a.stderr[-1000:])

            p = _cli("verify", ref, "--key", str(pub), "--json")
            assert p.returncode == 1, (case, p.stdout[-2000:], p.stderr[-2000:])
            d = json.loads(p.stdout)
            assert d["ok"] is False and d["signature"] is False, case
            (why,) = d["errors"]
            assert why.startswith("signature:"), (case, why)
            p = _cli("verify", ref, "--key", str(pub))
            assert p.returncode == 1, (case, p.stderr)
            (line,) = p.stderr.strip().splitlines()
            assert line.startswith("envbuilder: error:") and "signature" in line, line
            assert "Traceback" not in p.stderr
    finally:
        _put_manifest(sign_registry, repo, tag, json.dumps(original).encode(), media)
    good = _cli("verify", ref, "--key", str(pub), "--json")
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
    assert json.loads(good.stdout)["signature"] is True


def test_verify_ends_at_its_deadline_when_the_registry_drips(keys):
    """Issue 47: a registry that answers the image at once and then drips its referrers (a
    byte every 0.5 s) kept ``verify --key`` running past 170 s: each cosign command had 300 s
    and there was no deadline over them. Real cosign against a registry stand-in (the drip
    is what no registry here does); ENVBUILDER_VERIFY_DEADLINE bounds them all."""
    import time

    from hostile_helpers import HostileRegistry, digest

    (_, pub), _ = keys
    with HostileRegistry() as reg:
        d = reg.serve_image()
        want = digest(d["manifest"])
        reg.routes["/v2/"] = reg.send(b"{}", ctype="application/json")
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: " + OCI_INDEX.encode()
                + b"\r\nContent-Length: 100000\r\n\r\n")
        for path in (f"/v2/ml/x/referrers/{want}", f"/v2/ml/x/manifests/{want.replace(':', '-')}",
                     f"/v2/ml/x/manifests/{want.replace(':', '-')}.sig"):
            reg.routes[path] = reg.drip(head, every=0.5, most=400)
        t0 = time.monotonic()
        p = _cli("verify", f"{reg.host}/ml/x@{want}", "--key", str(pub),
                 env=_env(ENVBUILDER_VERIFY_DEADLINE="8"), timeout=120)
        took = time.monotonic() - t0
        assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
        (line,) = p.stderr.strip().splitlines()
        assert "did not finish within the command's deadline (8 s" in line, line
        assert took < 60, took
        assert reg.seen("/referrers/") or reg.seen("sha256-"), reg.requests  # cosign got there


@engine
def test_a_failing_smoke_job_leaves_nothing_signed(cpu_build, docker_client, base_image,
                                                   wheelhouse, ca_bundle, sign_registry, keys,
                                                   tmp_path):
    """A broken image: its base points gloo at an interface that does not exist (the image's
    ENV wins over the entrypoint's defaults), so every rank fails to rendezvous. The builder
    stage is the session's (cached); only the runtime stage is built again. The smoke deadline
    leaves room for two ranks importing torch on a loaded machine (at 20 s, CI under load
    ended rank 0 with SIGTERM before gloo said why it failed)."""
    (key, _), _ = keys
    broken = "eb-sign-broken-base:gloo"
    (tmp_path / "Dockerfile").write_text(f"FROM {base_image}\nENV GLOO_SOCKET_IFNAME=ebnone0\n")
    docker_client.images.build(path=str(tmp_path), tag=broken, rm=True)
    repo = f"{sign_registry.address}/ml/broken"
    try:
        p = _cli("build", CPU_TARGET, "--base-image", broken, "--builder-image", base_image,
                 "--wheelhouse", str(wheelhouse), "--ca-cert", str(ca_bundle),
                 "--nproc", "2", "--smoke-timeout", "90",
                 "--push", repo, "--sign", "--key", str(key), "--json", timeout=1800)
        assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
        err = json.loads(p.stdout)  # the error document, with the build's report
        # the cause, gloo's, when rank 0 says it; under load torchrun may stop rank 0 first once
        # rank 1 failed, and the summary then names rank 0's SIGTERM (noted: the summary should
        # prefer the rank with an error); either way the smoke step failed and nothing was signed
        assert err["step"] == "smoke", err
        assert ("Unable to find address for: ebnone0" in err["message"]
                or "rank 0: terminated by SIGTERM" in err["message"]), err["message"]
        d = err["report"]
        assert d["failed_step"] == "smoke" and d["steps"]["push"] == "not run"
        assert "sign" not in d["steps"] or d["steps"]["sign"] == "not run"
        assert "signed" not in d and d["pushed"] == []
        # the registry holds no tag of it, and no signature or attestation tag (sha256-...)
        assert _tags(sign_registry, "ml/broken") == []
    finally:
        # the broken build took the target's local name: give it back to the session's build
        docker_client.images.get(cpu_build.image_id).tag("envbuilder", cpu_build.tag)
        docker_client.images.remove(broken, force=True)


def _copy_manifest(registry: Registry, repo: str, src: str, dst: str) -> None:
    """Put the manifest tagged ``src`` under the tag ``dst`` too (an attacker copying a
    signature onto another digest: the registry API, nothing else)."""
    accept = ("application/vnd.oci.image.manifest.v1+json,"
              "application/vnd.docker.distribution.manifest.v2+json")
    with urllib.request.urlopen(urllib.request.Request(
            f"http://{registry.address}/v2/{repo}/manifests/{src}", headers={"Accept": accept}),
            timeout=10) as r:
        body, media = r.read(), r.headers["Content-Type"]
    urllib.request.urlopen(urllib.request.Request(
        f"http://{registry.address}/v2/{repo}/manifests/{dst}", data=body, method="PUT",
        headers={"Content-Type": media}), timeout=10).close()


@engine
def test_a_key_signed_image_passes_the_policy_controllers_verification(signed, keys, sign_registry,
                                                                     docker_client, base_image):
    """The rendered ClusterImagePolicy, checked the way policy-controller v0.15.1 checks it
    (run.sign.admission_check: cosign's legacy verification, tlog ignored, the attestation's
    CUE policy evaluated by cosign): the signed digest is admitted; a requirement its smoke
    attestation does not meet, an unsigned digest, a signature copied onto another digest and
    another key are refused; a key authority with the bundle format is refused as the
    controller refuses it."""
    from envbuilder.core.attestreq import parse
    from envbuilder.render.admission import cluster_image_policy
    from envbuilder.run.sign import admission_check

    (_, pub), (_, other_pub) = keys
    repo = signed["repo"]
    policy = cluster_image_policy(name="t", repository=repo, public_key=pub.read_text(),
                                  require=[parse("backend=gloo", "t"),
                                           parse("layout.world_size=12", "t")])
    assert admission_check(signed["ref"], policy) == []
    # the legacy .sig tag is what the key authority reads
    assert f"sha256-{signed['digest'].split(':')[1]}.sig" in _tags(sign_registry, repo.split("/", 1)[1])
    nccl = cluster_image_policy(name="t", repository=repo, public_key=pub.read_text(),
                                require=[parse("backend=nccl", "t")])
    (why,) = admission_check(signed["ref"], nccl)
    assert "attestation smoke" in why
    other = cluster_image_policy(name="t", repository=repo, public_key=other_pub.read_text())
    assert "signature" in admission_check(signed["ref"], other)[0]
    bundle = json.loads(json.dumps(policy))
    bundle["spec"]["authorities"][0]["signatureFormat"] = "bundle"
    assert "the authority must be keyless" in admission_check(signed["ref"], bundle)[0]
    # an unsigned digest, then the same digest carrying the signed image's copied signature
    from envbuilder.run import engine as eng

    docker_client.images.get(base_image).tag(repo, "eb-admission-unsigned")
    try:
        ref = f"{repo}@{eng.push(docker_client, repo, 'eb-admission-unsigned')}"
        assert "signature" in admission_check(ref, policy)[0]
        path = repo.split("/", 1)[1]
        for ext in ("sig", "att"):
            _copy_manifest(sign_registry, path, f"sha256-{signed['digest'].split(':')[1]}.{ext}",
                           f"sha256-{ref.split(':')[-1]}.{ext}")
        errors = admission_check(ref, policy)
        assert errors and "signature" in errors[0], errors  # the payload names another digest
    finally:
        docker_client.images.remove(f"{repo}:eb-admission-unsigned")


def test_sign_input_errors_are_one_line_exit_2(tmp_path, keys):
    (key, pub), _ = keys
    for args, say in ((["--sign", "--key", str(key)], "--push"),
                      (["--push", "127.0.0.1:1/x", "--sign", "--key", str(pub)], "public key"),
                      (["--push", "127.0.0.1:1/x", "--sign", "--key", str(tmp_path / "no.key")],
                       "no such key file"),
                      (["--push", "127.0.0.1:1/x", "--sign", "--key", str(key), "--no-smoke"],
                       "--no-smoke"),
                      (["--push", "127.0.0.1:1/x", "--sign"], "needs a key")):
        env = _env()
        env.pop("ENVBUILDER_COSIGN_KEY", None)
        env.pop("COSIGN_KEY", None)
        p = _cli("build", CPU_TARGET, *args, env=env, timeout=120)
        assert p.returncode == 2, (args, p.stderr)
        assert say in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    env = _env()
    env.pop("COSIGN_PASSWORD")
    p = _cli("build", CPU_TARGET, "--push", "127.0.0.1:1/x", "--sign", "--key", str(key), env=env,
             timeout=120)
    assert p.returncode == 2 and "COSIGN_PASSWORD" in p.stderr


# -- the admission policy, against policy-controller's CRD schema ---------------------------

def _strict(node):
    """The CRD schema as the API server applies it to a typed object: x-kubernetes-* dropped,
    and an object with declared properties takes no other key (the server prunes unknown
    fields; kubectl --validate=strict refuses them)."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
        if (node.get("type") == "object" and "properties" in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
                and "additionalProperties" not in node):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@pytest.fixture(scope="module")
def cip_validator():
    jsonschema = pytest.importorskip("jsonschema")
    raw = (DATA / "clusterimagepolicy-crd-v1beta1.yaml").read_text()
    assert "release tag v0.15.1" in raw.split("\ntype:", 1)[0]
    schema = _strict(yaml.safe_load(raw))
    # every custom object has these beside the CRD's own schema (the API server adds them)
    schema["properties"].update({"apiVersion": {"const": "policy.sigstore.dev/v1beta1"},
                                 "kind": {"const": "ClusterImagePolicy"},
                                 "metadata": {"type": "object", "required": ["name"]}})
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


PEM = ("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE7Ak1ZV3gYvYbYq6p3m3H0"
       "XxRr7o\nq1kqg9oE2XhR1h0m7Fz3x0yJc1c1f0m0W5kqgAbCdEfGhIjKlMnOpQrStUvW==\n"
       "-----END PUBLIC KEY-----\n")


@pytest.fixture(scope="module")
def kyverno_validator():
    jsonschema = pytest.importorskip("jsonschema")
    raw = (DATA / "kyverno-imagevalidatingpolicy-crd-v1.yaml").read_text()
    assert "tag v1.19.0, commit ee97ce09538b09b6f1b03853cc41a62654d6a58f" in raw.split("\nproperties:", 1)[0]
    schema = _strict(yaml.safe_load(raw))
    schema["properties"].update({"apiVersion": {"const": "policies.kyverno.io/v1"},
                                 "kind": {"const": "ImageValidatingPolicy"},
                                 "metadata": {"type": "object", "required": ["name"]}})
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


ADMISSION = ('[jobs]\nadmission = { require = ["backend=gloo", "layout.world_size=12"], '
             'issuer = "https://token.actions.githubusercontent.com", '
             'subject = "https://github.com/acme/train/.github/workflows/build.yml@refs/heads/main" }\n')


def test_rendered_admission_policy_validates_and_names_key_and_type(cip_validator, kyverno_validator,
                                                                    tmp_path):
    proj = tmp_path / "team"
    proj.mkdir()
    (proj / "cosign.pub").write_text(PEM)
    (proj / "envbuilder.toml").write_text(
        'registry = "registry.example.com/ml"\nrepository = "train"\nsigning_key = "cosign.pub"\n' + ADMISSION +
        '[[targets]]\nname = "train-cpu"\ntarget = "cpu"\n')
    p = subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()",
                        "render", "-o", str(tmp_path / "out"), "--json"], cwd=proj,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    files = list((tmp_path / "out").rglob("admission/clusterimagepolicy.yaml"))
    assert len(files) == 1
    doc = yaml.safe_load(files[0].read_text())
    errors = sorted(cip_validator.iter_errors(doc), key=str)
    assert not errors, [e.message for e in errors]
    assert doc["apiVersion"] == "policy.sigstore.dev/v1beta1" and doc["kind"] == "ClusterImagePolicy"
    (auth,) = doc["spec"]["authorities"]
    assert auth["key"]["data"] == PEM
    # a key authority verifies the legacy format: policy-controller refuses bundle for it
    assert auth["signatureFormat"] == "legacy"
    assert auth["attestations"][0]["predicateType"] == SMOKE
    cue = auth["attestations"][0]["policy"]["data"]
    assert SMOKE in cue and 'predicate: backend: "gloo"' in cue
    assert "predicate: layout: world_size: 12" in cue
    assert doc["spec"]["images"] == [{"glob": "registry.example.com/ml/train*"}]
    # the keyless identity's policy: bundle format, Fulcio and Rekor, the signer's identity
    (kl,) = [yaml.safe_load(f.read_text()) for f in (tmp_path / "out").rglob("clusterimagepolicy-keyless.yaml")]
    assert not sorted(cip_validator.iter_errors(kl), key=str)
    (ka,) = kl["spec"]["authorities"]
    assert ka["signatureFormat"] == "bundle" and ka["keyless"]["identities"] == [
        {"issuer": "https://token.actions.githubusercontent.com",
         "subject": "https://github.com/acme/train/.github/workflows/build.yml@refs/heads/main"}]
    assert ka["keyless"]["url"] == "https://fulcio.sigstore.dev" and "key" not in ka
    # Kyverno's ImageValidatingPolicy, valid against Kyverno 1.19's CRD
    (ky,) = [yaml.safe_load(f.read_text()) for f in (tmp_path / "out").rglob("kyverno-imagevalidatingpolicy.yaml")]
    errors = sorted(kyverno_validator.iter_errors(ky), key=str)
    assert not errors, [e.message for e in errors]
    (att,) = ky["spec"]["attestors"]
    assert att["cosign"]["key"]["data"] == PEM and att["cosign"]["ctlog"]["insecureIgnoreTlog"] is True
    assert ky["spec"]["attestations"] == [{"name": "smoke", "intoto": {"type": SMOKE}}]
    exprs = " ".join(v["expression"] for v in ky["spec"]["validations"])
    assert "verifyImageSignatures(image, [attestors.envbuilder])" in exprs
    assert 'e.backend == "gloo" && e.layout.world_size == 12' in exprs
    # the strict schemas refuse what the API server would drop
    bad = json.loads(json.dumps(doc))
    bad["spec"]["authorities"][0]["key"]["pem"] = "x"
    assert list(cip_validator.iter_errors(bad))
    bad = json.loads(json.dumps(ky))
    bad["spec"]["attestors"][0]["cosign"]["key"]["pem"] = "x"
    assert list(kyverno_validator.iter_errors(bad))


def test_a_keyless_identity_alone_renders_its_policies(tmp_path):
    proj = tmp_path / "team"
    proj.mkdir()
    (proj / "envbuilder.toml").write_text(
        'registry = "registry.example.com/ml"\nrepository = "train"\n' + ADMISSION +
        '[[targets]]\nname = "t"\ntarget = "cpu"\n')
    p = subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()",
                        "render", "-q"], cwd=proj, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    adm = proj / "build/t/admission"
    assert sorted(f.name for f in adm.iterdir()) == ["clusterimagepolicy-keyless.yaml",
                                                     "kyverno-imagevalidatingpolicy.yaml"]
    ky = yaml.safe_load((adm / "kyverno-imagevalidatingpolicy.yaml").read_text())
    assert ky["spec"]["attestors"][0]["cosign"]["keyless"]["identities"][0]["issuer"] == \
        "https://token.actions.githubusercontent.com"


def test_admission_policy_refuses_a_key_that_is_not_pem(tmp_path):
    proj = tmp_path / "team"
    proj.mkdir()
    (proj / "cosign.pub").write_text("ssh-ed25519 AAAA\n")
    (proj / "envbuilder.toml").write_text(
        'registry = "registry.example.com/ml"\nrepository = "train"\nsigning_key = "cosign.pub"\n'
        '[[targets]]\nname = "train-cpu"\ntarget = "cpu"\n')
    p = subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()",
                        "render", "-o", str(tmp_path / "out")], cwd=proj,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "PEM public key" in p.stderr
    assert not (tmp_path / "out").exists()


# -- doctor --image: the smoke attestation's host against this host (recorded hosts) --------

def _pred(**host):
    return {"target": "cu124", "backend": "nccl" if host.get("gpus") else "gloo",
            "layout": {"world_size": 8, "nnodes": 1, "nproc_per_node": 8},
            "host": {"cpu_only": not host.get("gpus"), "description": "x", "driver": None,
                     "cuda": None, "gpus": [], **host}}


def test_doctor_proof_compares_the_attested_host_with_recorded_hosts():
    from envbuilder.diagnose.doctor import RecordedProbe, inventory
    from envbuilder.run.sign import proof_check

    hosts = Path(__file__).parent / "fixtures" / "hosts"
    h100 = inventory(RecordedProbe(hosts / "hgx-h100-8gpu"))
    t4 = inventory(RecordedProbe(hosts / "aws-t4-old-driver"))
    assert len(h100.gpus) == 8 and h100.driver
    same = _pred(driver=h100.driver, gpus=[{"name": g["name"]} for g in h100.gpus])
    c = proof_check(same, h100, verified=True)
    assert c.status == "ok" and "matches" in c.detail
    c = proof_check(same, t4, verified=True)
    assert c.status == "warn" and "Not proven for this host" in c.detail
    assert f"proven on driver {h100.driver}" in c.detail and h100.gpus[0]["name"] in c.detail
    # a CPU-only proof on a GPU host: the collectives are proven, NCCL is not
    c = proof_check(_pred(), h100, verified=False)
    assert c.status == "warn" and "Not proven: NCCL" in c.detail and "unverified" in c.detail
    assert proof_check(None, h100, verified=False).status == "skip"


def test_build_arguments_in_the_provenance_carry_no_credentials():
    from envbuilder.run.sign import redact_build_args

    got = redact_build_args({"PIP_INDEX_URL": "https://ml:s3cret-tok@pypi.corp.example/simple",
                             "HTTPS_PROXY": "http://proxy.corp:3128", "HF_TOKEN": "hf_abc"})
    assert got == {"PIP_INDEX_URL": "https://ml:***@pypi.corp.example/simple",
                   "HTTPS_PROXY": "http://proxy.corp:3128", "HF_TOKEN": "***"}


def test_smoke_predicate_of_a_gpu_run_names_the_driver_and_gpus():
    """A recorded 8-GPU NCCL run's records through the real result and predicate code; the
    host is a recorded HGX H100 (nvidia-smi output in tests/fixtures/hosts)."""
    from envbuilder.diagnose.doctor import RecordedProbe
    from envbuilder.run.sign import BY_NAME, check_predicate, smoke_predicate
    from envbuilder.run.smoke import build_result

    rows = [{"collective": "all_reduce", "bytes": 1 << 26, "count": 1 << 24, "type": "float",
             "redop": "sum", "seconds": 0.0011, "algbw_gbps": 61.0, "busbw_gbps": 106.75}]
    ranks = [{"rank": r, "local_rank": r, "world_size": 8, "local_world_size": 8,
              "hostname": "hgx", "backend": "nccl", "device": f"cuda:{r}",
              "torch_version": "2.11.0", "python_version": "3.12.3",
              "checks": [{"name": "all_reduce", "status": "pass", "detail": "", "seconds": 0.1}],
              "bandwidth": rows if r == 0 else [], "rendezvous_seconds": 1.0,
              "step_seconds": [0.1], "ok": True, "seconds": 5.0} for r in range(8)]
    result = build_result(summary=None, ranks=ranks, log="", exit_code=0, nproc_per_node=8,
                          nnodes=1, backend="auto", seconds=9.0, where="host")
    probe = RecordedProbe(Path(__file__).parent / "fixtures" / "hosts" / "hgx-h100-8gpu")
    pred = smoke_predicate("cu130", result, probe=probe)
    assert check_predicate(BY_NAME["smoke"], pred) is None
    host = pred["host"]
    assert host["cpu_only"] is False and host["driver"] and len(host["gpus"]) == 8
    assert "H100" in host["description"] and host["driver"] in host["description"]
    assert pred["backend"] == "nccl" and pred["layout"]["world_size"] == 8


def test_admission_policy_with_required_smoke_fields_validates(cip_validator):
    """Issue 40: the policy demands the project's fields of the smoke attestation (its CUE);
    the document stays valid against policy-controller's CRD schema."""
    from envbuilder.core.attestreq import parse
    from envbuilder.render.admission import cluster_image_policy

    doc = cluster_image_policy(name="train", repository="registry.example.com/ml/train",
                               public_key=PEM, require=(parse("backend=nccl", "t"),
                                                        parse("floor_pct>=50", "t")))
    assert not list(cip_validator.iter_errors(doc))
    cue = doc["spec"]["authorities"][0]["attestations"][0]["policy"]["data"]
    assert 'predicate: backend: "nccl"' in cue and "percent: >=50" in cue


# -- the SIF of the pushed image: tied to its digest, attested, verified as a file ---------------

def _apptainer_or_skip() -> None:
    from envbuilder.errors import InputError
    from envbuilder.run.apptainer import apptainer_command

    try:
        apptainer_command()
    except InputError as e:
        if os.environ.get("ENVBUILDER_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{e} (scripts/test-services.sh installs the apptainer wrapper)")
        pytest.skip(str(e))


@engine
def test_the_sif_is_built_from_the_pushed_digest_attested_and_verified(
        cpu_build, base_image, wheelhouse, ca_bundle, sign_registry, keys, tmp_path_factory):
    """build --runtime both --push REPO --sign: the SIF is the pushed image (its config digest
    checked against the registry), labelled with REPO@DIGEST, verified and smoke-tested in it,
    and attested as a file; `verify X.sif --key PUB` checks it against its labels and the
    attestation and names the digest; a changed SIF or another key fails (exit 1); `smoke
    X.sif` runs the job in it."""
    _apptainer_or_skip()
    (key, pub), (_, other_pub) = keys
    state = os.environ.get("ENVBUILDER_TEST_STATE")
    where = Path(state) / "sif-from-image" if state else tmp_path_factory.mktemp("sif-from-image")
    where.mkdir(parents=True, exist_ok=True)
    sif = where / "cpu.sif"
    repo = f"{sign_registry.address}/ml/sif"
    p = _cli("build", CPU_TARGET, "--base-image", base_image, "--wheelhouse", str(wheelhouse),
             "--ca-cert", str(ca_bundle), "--push", repo, "--sign", "--key", str(key),
             "--runtime", "both", "--sif", str(sif), "--smoke-timeout", "300", "--json",
             timeout=3600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    d = json.loads(p.stdout)
    ref = d["pushed"][0]["ref"]
    app = d["apptainer"]
    assert d["steps"]["sif"] == "ok" and d["steps"].get("apptainer") in (None, "skipped")
    assert app["from_image"] == ref and app["steps"]["verify"] == app["steps"]["smoke"] == "ok"
    assert app["steps"]["attest"] == "ok" and Path(app["attestation"]["bundle"]).is_file()
    assert app["labels"]["io.envbuilder.image-ref"] == ref
    assert app["labels"]["io.envbuilder.torch"] == d["labels"]["io.envbuilder.torch"]
    v = _cli("verify", str(sif), "--key", str(pub), "--json", timeout=900)
    assert v.returncode == 0, v.stdout[-2000:] + v.stderr[-2000:]
    got = json.loads(v.stdout)
    assert got["image"] == ref and got["attestation"]["ok"] and got["verify"]["ok"]
    assert got["attestation"]["predicate"]["sif"]["sha256"] == got["sha256"]
    plain = _cli("verify", str(sif), timeout=900)
    assert plain.returncode == 0 and f"built from {ref}" in plain.stdout, plain.stdout + plain.stderr
    bad = _cli("verify", str(sif), "--key", str(other_pub), timeout=900)
    assert bad.returncode == 1 and "attestation" in bad.stderr, bad.stdout + bad.stderr
    # a changed SIF: its bytes no longer what the attestation names
    tampered = where / "tampered.sif"
    shutil.copy(sif, tampered)
    shutil.copy(Path(app["attestation"]["bundle"]), where / "tampered.sif.att.json")
    with open(tampered, "ab") as f:
        f.write(b"\0")
    try:
        t = _cli("verify", str(tampered), "--key", str(pub), "--json", timeout=900)
        assert t.returncode == 1 and not json.loads(t.stdout)["attestation"]["ok"], t.stdout[-2000:]
    finally:
        tampered.unlink()
        (where / "tampered.sif.att.json").unlink()
    s = _cli("smoke", str(sif), "--json", timeout=900)
    assert s.returncode == 0, s.stdout[-2000:] + s.stderr[-2000:]
    assert json.loads(s.stdout)["world_size"] == 12
