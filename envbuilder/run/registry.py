"""An image's config from a registry, without pulling its layers: the registry HTTP API v2
(the OCI distribution spec) — the manifest (an index or manifest list is narrowed to
linux/amd64), then the config blob it names, whose ``config.Labels`` are the image's labels.

``RegistryClient`` (on ``envbuilder._http.Client``, envbuilder's one HTTP client, urllib3
underneath) makes every request to a registry or its token service. What it promises:

* **Origins.** Plain HTTP only to true loopback (``localhost``, or an address that *parses* as
  a loopback address: ``127.0.0.1.example.com`` is a name, so HTTPS), HTTPS elsewhere; no other
  scheme, ever (a ``file://`` realm is refused). Redirects are followed by hand (at most
  ``MAX_REDIRECTS``), never from HTTPS down to plain HTTP except to loopback.
* **Credentials bound to their origin.** ENVBUILDER_REGISTRY_USER/_PASSWORD and the token a
  token service answers are sent only to the registry's own origin (scheme, host, port): a
  redirect to another origin gets the request without them. A ``Bearer`` challenge naming a
  realm on another origin gets the credentials only when that origin is allowed
  (ENVBUILDER_REGISTRY_AUTH_ORIGINS, comma-separated ``https://host[:port]``; Docker Hub's
  ``https://auth.docker.io`` for ``registry-1.docker.io``); else it is asked anonymously.
* **Deadlines.** Each request has a total deadline (ENVBUILDER_REGISTRY_TIMEOUT seconds,
  default 30), headers and body included: a watchdog shuts the socket down when it passes, so a
  server dripping one byte at a time cannot hold the command. The whole command has one too
  (ENVBUILDER_REGISTRY_DEADLINE, default 120).
* **Sizes.** A manifest or config blob is at most ``MAX_BYTES``, a token answer
  ``MAX_TOKEN_BYTES``; more is refused before it is read further.
* **Content addressing.** Every manifest and blob is hashed: fetched by digest, the bytes must
  have it; a manifest fetched by tag must have the digest the registry reports
  (``Docker-Content-Digest``); a mismatch is exit 1 naming both digests.
* **Typed reading.** Manifests, indexes, config blobs and token answers are checked for shape
  and type before use; any mismatch is one line, exit 1.
* Every transport failure (refused, reset, a bad status line, a deadline) is one line, exit 1;
  a reference that is not one is exit 2.

The API (for inspect, and for reading signatures and attestations)::

    client, ref = RegistryClient.for_image("host:5000/ml/train@sha256:...")  # or (ref)
    m = client.manifest(ref.reference)   # Fetched(body, media_type, digest), digest checked
    b = client.blob("sha256:...")        # Fetched, digest checked, at most MAX_BYTES
    r = client.get(ref.url("referrers", m.digest), OCI_INDEX)  # Response, credentials as above
    read_json(r.body, "referrers index")  # a JSON object, else one line (exit 1)
    verify(body, "sha256:...", what)      # content addressing for anything else
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, BinaryIO, Mapping

from envbuilder._http import Client, Response, check_url, is_loopback, origin
from envbuilder.errors import InputError, OperationError, redact

__all__ = ["MANIFEST_TYPES", "Fetched", "Reference", "RegistryClient", "Response", "image_config",
           "image_labels", "is_loopback", "parse_reference", "read_json", "sha256", "verify"]

MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
_INDEX_TYPES = (OCI_INDEX,
                "application/vnd.docker.distribution.manifest.list.v2+json")
MAX_BYTES = 4 << 20  # a manifest or config blob larger than this is not an image's
MAX_TOKEN_BYTES = 1 << 20
TIMEOUT_S = 30.0  # one request, all of it
DEADLINE_S = 120.0  # one command, all of its requests
# origins a registry's token service may live on and receive the registry's credentials
KNOWN_AUTH_ORIGINS = {"https://registry-1.docker.io": ("https://auth.docker.io",)}
DIGEST_RE = re.compile(r"^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})\Z")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9\-._~+/]+=*\Z")  # RFC 6750's b64token
_HOSTPORT_RE = re.compile(r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
                          r"(?::(?P<port>[0-9]{1,5}))?\Z")
_CTL = re.compile(r"[\x00-\x20\x7f]")  # in a challenge's parameters


def _fail(msg: str) -> OperationError:
    return OperationError(redact(msg), step="inspect")


# -- references and origins ----------------------------------------------------------------

@dataclass(frozen=True)
class Reference:
    registry: str  # host[:port]
    repository: str
    reference: str  # a tag or a digest

    @property
    def host(self) -> str:
        m = _HOSTPORT_RE.match(self.registry)
        return m.group("host") if m else self.registry

    @property
    def local(self) -> bool:
        return is_loopback(self.host)

    @property
    def base(self) -> str:
        return f"{'http' if self.local else 'https'}://{self.registry}"

    @property
    def by_digest(self) -> bool:
        return DIGEST_RE.match(self.reference) is not None

    def url(self, kind: str, ref: str) -> str:
        return f"{self.base}/v2/{self.repository}/{kind}/{ref}"

    def __str__(self) -> str:
        sep = "@" if self.by_digest else ":"
        return f"{self.registry}/{self.repository}{sep}{self.reference}"


def parse_reference(image: str) -> Reference:
    """``[registry/]repo[:tag][@digest]`` as the engine reads it (Docker Hub by default);
    InputError (exit 2) for anything that is not a reference."""
    from envbuilder.core import validate

    validate.image_ref(image, "IMAGE")
    rest, _, digest = image.partition("@")
    tag: str | None = None
    if ":" in rest.rsplit("/", 1)[-1]:
        rest, tag = rest.rsplit(":", 1)
    first, _, more = rest.partition("/")
    if more and ("." in first or ":" in first or first == "localhost"):
        registry, repo = first, more
    else:
        registry, repo = "registry-1.docker.io", rest if "/" in rest else f"library/{rest}"
    if registry == "docker.io":
        registry = "registry-1.docker.io"
    m = _HOSTPORT_RE.match(registry)
    if m is None or (m.group("port") and not 0 < int(m.group("port")) < 65536):
        raise InputError(f"IMAGE {image!r}: {registry!r} is not a registry host[:port]")
    if m.group("host").startswith("["):
        try:
            ipaddress.IPv6Address(m.group("host")[1:-1])
        except ValueError:
            raise InputError(f"IMAGE {image!r}: {registry!r} is not a registry host[:port]") from None
    return Reference(registry, repo, digest or tag or "latest")


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        v = float(raw)
    except ValueError:
        v = -1.0
    if not 0 < v <= 3600:
        raise InputError(f"{name}={raw[:40]!r}: expected seconds, a number above 0 and at most 3600")
    return v


def _auth_origins(registry_origin: str) -> set[str]:
    allowed = {registry_origin, *KNOWN_AUTH_ORIGINS.get(registry_origin.rsplit(":", 1)[0], ())}
    for item in os.environ.get("ENVBUILDER_REGISTRY_AUTH_ORIGINS", "").split(","):
        if item.strip():
            allowed.add(item.strip())
    return {origin(o) if "://" in o else o for o in allowed}


@dataclass(frozen=True)
class Fetched:
    """A manifest or blob whose bytes were hashed: ``digest`` is theirs."""
    body: bytes
    media_type: str
    digest: str

    def json(self, what: str) -> dict[str, Any]:
        return _json(self.body, what)


def sha256(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def digest_of(body: bytes, algorithm: str = "sha256") -> str:
    return f"{algorithm}:" + hashlib.new(algorithm, body).hexdigest()


def verify(body: bytes, want: str, what: str) -> str:
    """``want`` when ``body`` hashes to it; else OperationError (exit 1) naming both digests."""
    if DIGEST_RE.match(want) is None:
        raise _fail(f"{what}: {want[:150]!r} is not a digest (sha256:<64 hex> or sha512:<128 hex>)")
    got = digest_of(body, want.split(":", 1)[0])
    if got != want:
        raise _fail(f"{what}: the registry served bytes with digest {got}, not the {want} they "
                    f"were fetched by or reported as: refusing them")
    return want


class RegistryClient(Client):
    """Requests to one registry (``ref.registry``), its token service and wherever it
    redirects (``envbuilder._http.Client``: origins, deadlines, sizes); see the module's doc."""

    timeout_hint = "; ENVBUILDER_REGISTRY_TIMEOUT"
    deadline_hint = "; ENVBUILDER_REGISTRY_DEADLINE"

    def __init__(self, ref: Reference, *, timeout: float | None = None,
                 deadline: float | None = None, user: str | None = None,
                 password: str | None = None, step: str = "inspect") -> None:
        super().__init__(f"the registry {ref.registry}",
                         timeout=timeout if timeout is not None else _env_seconds(
                             "ENVBUILDER_REGISTRY_TIMEOUT", TIMEOUT_S),
                         total=deadline if deadline is not None else _env_seconds(
                             "ENVBUILDER_REGISTRY_DEADLINE", DEADLINE_S), step=step)
        self.ref = ref
        self.origin = origin(ref.base)
        user = user if user is not None else os.environ.get("ENVBUILDER_REGISTRY_USER")
        password = password if password is not None else os.environ.get("ENVBUILDER_REGISTRY_PASSWORD")
        self._basic = (base64.b64encode(f"{user}:{password}".encode()).decode()
                       if user and password else None)
        self.auth: str | None = None  # the Authorization for self.origin

    @classmethod
    def for_image(cls, image: str, **kw: Any) -> tuple[RegistryClient, Reference]:
        ref = parse_reference(image)
        return cls(ref, **kw), ref

    # -- the registry's own requests, with its credentials ---------------------------------
    def get(self, url: str, accept: str, *, limit: int = MAX_BYTES,
            what: str = "answer", sink: BinaryIO | None = None) -> Response:
        """GET ``url`` of this registry, answering one authentication challenge (``sink``: the
        body goes there, _http.Client.request)."""
        for attempt in range(2):
            r = self.request(url, {"Accept": accept}, limit=limit, auth=self.auth,
                             auth_origin=self.origin, what=what, sink=sink)
            if r.status == 401 and attempt == 0 and self._authenticate(r):
                continue
            if 200 <= r.status < 300:
                return r
            if r.status == 404:
                raise InputError(f"image {self.ref} is not in the registry (404 for {url}): "
                                 f"check the name and tag")
            raise _fail(f"the registry answered {r.status} for {url}"
                        + ("; set ENVBUILDER_REGISTRY_USER and ENVBUILDER_REGISTRY_PASSWORD"
                           if r.status in (401, 403) else ""))
        raise _fail(f"the registry refused the credentials for {url}")

    def _authenticate(self, r: Response) -> bool:
        challenge = r.headers.get("www-authenticate", "")
        scheme, _, params = challenge.strip().partition(" ")
        if scheme.lower() == "basic":
            if self._basic is None:
                return False
            self.auth = f"Basic {self._basic}"
            return True
        if scheme.lower() != "bearer":
            return False
        p = {k.lower(): v for k, v in re.findall(r'(\w+)\s*=\s*"([^"]*)"', params)}
        if "realm" not in p:
            return False
        realm = check_url(p["realm"], "the registry's token realm")
        q = {k: v for k, v in p.items() if k in ("service", "scope") and not _CTL.search(v.replace(" ", ""))}
        q.setdefault("scope", f"repository:{self.ref.repository}:pull")
        sep = "&" if urllib.parse.urlsplit(realm).query else "?"
        url = realm + sep + urllib.parse.urlencode(q)
        realm_origin = origin(realm)
        creds = None
        if self._basic is not None:
            if realm_origin not in _auth_origins(self.origin):
                raise _fail(f"the registry {self.ref.registry} names a token service on another "
                            f"origin ({realm_origin}): envbuilder sends the registry's "
                            f"credentials only to its own origin; allow that one with "
                            f"ENVBUILDER_REGISTRY_AUTH_ORIGINS={realm_origin}")
            creds = f"Basic {self._basic}"
        tr = self.request(url, {"Accept": "application/json"}, limit=MAX_TOKEN_BYTES,
                          auth=creds, auth_origin=realm_origin, what="token answer")
        if tr.status != 200:
            raise _fail(f"the registry's token service answered {tr.status} for {realm}"
                        + ("; check ENVBUILDER_REGISTRY_USER and ENVBUILDER_REGISTRY_PASSWORD"
                           if creds else ""))
        tok = _json(tr.body, "token answer")
        token = tok.get("token") or tok.get("access_token")
        if not isinstance(token, str) or not token:
            raise _fail(f"the registry's token answer from {realm} holds no token string")
        if len(token) > 16384 or _TOKEN_RE.match(token) is None:
            raise _fail(f"the registry's token answer from {realm} holds a token that is not a "
                        f"bearer token (RFC 6750)")
        self.auth = f"Bearer {token}"
        return True

    # -- content-addressed reads -----------------------------------------------------------
    def manifest(self, reference: str, *, accept: str = MANIFEST_TYPES) -> Fetched:
        """The manifest ``reference`` (a tag or a digest) of this repository, hashed: by
        digest it must have that digest, by tag the one the registry reports (if it does)."""
        r = self.get(self.ref.url("manifests", reference), accept, what="manifest")
        if DIGEST_RE.match(reference):
            digest = verify(r.body, reference, f"{self.ref.registry}/{self.ref.repository} manifest")
        else:
            digest = sha256(r.body)
            reported = r.headers.get("docker-content-digest", "").strip()
            if reported:
                verify(r.body, reported, f"{self.ref}: the manifest (Docker-Content-Digest)")
                digest = reported
        return Fetched(r.body, r.media_type, digest)

    def blob(self, digest: str, *, limit: int = MAX_BYTES) -> Fetched:
        """The blob ``digest`` of this repository; its bytes must have that digest."""
        if DIGEST_RE.match(digest) is None:
            raise _fail(f"{self.ref}: {digest[:150]!r} is not a digest")
        r = self.get(self.ref.url("blobs", digest), "application/json, */*", limit=limit,
                     what="blob")
        verify(r.body, digest, f"{self.ref.registry}/{self.ref.repository} blob")
        return Fetched(r.body, r.media_type, digest)


    def blob_to(self, digest: str, path: Any, *, limit: int = 1 << 40) -> None:
        """The blob ``digest`` (a layer: gigabytes) written to the file ``path`` as it arrives;
        its bytes must have that digest (the file is removed otherwise)."""
        import os

        if DIGEST_RE.match(digest) is None or not digest.startswith("sha256:"):
            raise _fail(f"{self.ref}: {digest[:150]!r} is not a sha256 digest")
        h = hashlib.sha256()

        class Hashing:
            def __init__(self, f: BinaryIO) -> None:
                self.f = f

            def write(self, b: bytes) -> int:
                h.update(b)
                return self.f.write(b)

        with open(path, "wb") as f:
            self.get(self.ref.url("blobs", digest), "application/octet-stream, */*", limit=limit,
                     what="blob", sink=Hashing(f))  # type: ignore[arg-type]
        if "sha256:" + h.hexdigest() != digest:
            os.unlink(path)
            raise _fail(f"{self.ref.registry}/{self.ref.repository} blob {digest}: the bytes "
                        f"have sha256:{h.hexdigest()}")


# -- typed reading of what registries answer ----------------------------------------------

def read_json(body: bytes, what: str) -> dict[str, Any]:
    """``body`` as a JSON object, else one line (exit 1) naming ``what``."""
    return _json(body, what)


def _json(body: bytes, what: str) -> dict[str, Any]:
    try:
        d = json.loads(body)
    except (ValueError, RecursionError):
        raise _fail(f"the registry's {what} is not JSON") from None
    if not isinstance(d, dict):
        raise _fail(f"the registry's {what} is not a JSON object")
    return d


def _field(d: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str,
           *, optional: bool = False) -> Any:
    v = d.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, kind) or isinstance(v, bool):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _fail(f"the registry's {what}: {key!r} is {type(v).__name__}, not {name}")
    return v


def _platform_pick(index: Mapping[str, Any], image: str) -> str:
    entries = _field(index, "manifests", list, "index")
    for i, m in enumerate(entries):
        if not isinstance(m, dict):
            raise _fail(f"the registry's index: manifests[{i}] is not an object")
        plat = _field(m, "platform", dict, f"index entry {i}", optional=True) or {}
        os_ = _field(plat, "os", str, f"index entry {i} platform", optional=True)
        arch = _field(plat, "architecture", str, f"index entry {i} platform", optional=True)
        if os_ == "linux" and arch == "amd64":
            d = _field(m, "digest", str, f"index entry {i}")
            if DIGEST_RE.match(d) is None:
                raise _fail(f"the registry's index entry {i}: digest {d[:150]!r} is not a digest")
            return d
    raise _fail(f"{image}: the registry's index has no linux/amd64 image")


def image_config(image: str, *, timeout: float | None = None,
                 client: RegistryClient | None = None) -> dict[str, Any]:
    """{"reference", "manifest_digest", "config_digest", "config", and "index_digest" when
    the reference named an index}: the image config of ``image`` read from its registry
    (manifest and config blob only, no layer), every byte checked against its digest."""
    ref = parse_reference(image)
    c = client or RegistryClient(ref, timeout=timeout)
    top = c.manifest(ref.reference)
    man = top.json("manifest")
    out: dict[str, Any] = {"reference": f"{ref.registry}/{ref.repository}"}
    fetched = top
    if top.media_type in _INDEX_TYPES or "manifests" in man:
        child = _platform_pick(man, image)
        fetched = c.manifest(child)
        out["index_digest"] = top.digest
        man = fetched.json("manifest")
    cfg = _field(man, "config", dict, "manifest", optional=True)
    cfg_digest = _field(cfg, "digest", str, "manifest config", optional=True) if cfg else None
    if not cfg_digest:
        raise _fail(f"{image}: the manifest names no config blob (schema 1 manifests are not read)")
    blob = c.blob(cfg_digest)
    config = blob.json("config blob")
    inner = _field(config, "config", dict, "config blob", optional=True) or {}
    labels = _field(inner, "Labels", dict, "config blob's config", optional=True) or {}
    for k, v in labels.items():
        if not isinstance(v, str):
            raise _fail(f"the registry's config blob: label {k[:100]!r} is {type(v).__name__}, "
                        f"not a string")
    _field(config, "created", str, "config blob", optional=True)
    out.update({"manifest_digest": fetched.digest, "config_digest": cfg_digest, "config": config})
    return out


def image_labels(image: str, *, timeout: float | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """(labels, where: manifest and config digests, created) of ``image`` in its registry."""
    got = image_config(image, timeout=timeout)
    cfg = got["config"]
    labels = dict((cfg.get("config") or {}).get("Labels") or {})
    where = {"source": "registry", "reference": got["reference"],
             "manifest_digest": got["manifest_digest"],
             "config_digest": got["config_digest"], "created": cfg.get("created")}
    if "index_digest" in got:
        where["index_digest"] = got["index_digest"]
    return labels, where
