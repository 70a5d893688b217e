"""An image's config from a registry, without pulling its layers: the registry HTTP API v2
(the OCI distribution spec) — the manifest (an index or manifest list is narrowed to
linux/amd64), then the config blob it names, whose ``config.Labels`` are the image's labels.

Plain HTTP for registries on 127.0.0.0/8 and localhost (as the Docker engine allows), HTTPS
elsewhere. Authentication: a ``Bearer`` challenge is answered with a token from the realm it
names (anonymous, or with ENVBUILDER_REGISTRY_USER/_PASSWORD), a ``Basic`` one with those
credentials. Docker Hub references (``ubuntu``, ``org/name``) go to registry-1.docker.io.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from envbuilder.errors import InputError, OperationError

MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
_INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
                "application/vnd.docker.distribution.manifest.list.v2+json")
MAX_BYTES = 4 << 20  # a manifest or config blob larger than this is not an image's


@dataclass(frozen=True)
class Reference:
    registry: str  # host[:port]
    repository: str
    reference: str  # a tag or a digest

    @property
    def local(self) -> bool:
        host = self.registry.rsplit(":", 1)[0] if not self.registry.startswith("[") else self.registry
        return host in ("localhost", "[::1]") or host.startswith("127.")

    def url(self, kind: str, ref: str) -> str:
        scheme = "http" if self.local else "https"
        return f"{scheme}://{self.registry}/v2/{self.repository}/{kind}/{ref}"


def parse_reference(image: str) -> Reference:
    """``[registry/]repo[:tag][@digest]`` as the engine reads it (Docker Hub by default)."""
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
    return Reference(registry, repo, digest or tag or "latest")


class _Client:
    def __init__(self, ref: Reference, timeout: float) -> None:
        self.ref, self.timeout = ref, timeout
        self.auth: str | None = None

    def get(self, url: str, accept: str) -> tuple[bytes, str]:
        for attempt in range(2):
            req = urllib.request.Request(url, headers={"Accept": accept,
                                                       **({"Authorization": self.auth}
                                                          if self.auth else {})})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:  # noqa: S310
                    body = r.read(MAX_BYTES + 1)
                    if len(body) > MAX_BYTES:
                        raise OperationError(f"{url}: more than {MAX_BYTES} bytes: not an image "
                                             f"manifest or config", step="inspect")
                    return body, r.headers.get("Content-Type", "")
            except urllib.error.HTTPError as e:
                if e.code == 401 and attempt == 0 and self._authenticate(e):
                    continue
                if e.code == 404:
                    raise InputError(f"image {self.ref.registry}/{self.ref.repository}:"
                                     f"{self.ref.reference} is not in the registry (404 for "
                                     f"{url}): check the name and tag") from None
                raise OperationError(f"the registry answered {e.code} {e.reason} for {url}"
                                     + ("; set ENVBUILDER_REGISTRY_USER and "
                                        "ENVBUILDER_REGISTRY_PASSWORD" if e.code in (401, 403)
                                        else ""), step="inspect") from None
            except (urllib.error.URLError, OSError) as e:
                reason = getattr(e, "reason", e)
                raise OperationError(f"cannot reach the registry {self.ref.registry} ({url}): "
                                     f"{reason}", step="inspect") from None
        raise OperationError(f"the registry refused the credentials for {url}", step="inspect")

    def _authenticate(self, e: urllib.error.HTTPError) -> bool:
        challenge = e.headers.get("WWW-Authenticate", "")
        user = os.environ.get("ENVBUILDER_REGISTRY_USER")
        password = os.environ.get("ENVBUILDER_REGISTRY_PASSWORD")
        basic = (base64.b64encode(f"{user}:{password}".encode()).decode()
                 if user and password else None)
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if basic is None:
                return False
            self.auth = f"Basic {basic}"
            return True
        if scheme.lower() != "bearer":
            return False
        p = dict(re.findall(r'(\w+)="([^"]*)"', params))
        if "realm" not in p:
            return False
        q = {k: v for k, v in p.items() if k in ("service", "scope")}
        q.setdefault("scope", f"repository:{self.ref.repository}:pull")
        req = urllib.request.Request(p["realm"] + "?" + urllib.parse.urlencode(q),
                                     headers={"Authorization": f"Basic {basic}"} if basic else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:  # noqa: S310
                tok = json.loads(r.read(MAX_BYTES))
        except (urllib.error.URLError, OSError, ValueError):
            return False
        token = tok.get("token") or tok.get("access_token")
        if not token:
            return False
        self.auth = f"Bearer {token}"
        return True


def image_config(image: str, *, timeout: float = 30.0) -> dict[str, Any]:
    """{"reference", "manifest_digest", "config_digest", "config"}: the image config of
    ``image`` read from its registry (manifest and config blob only, no layer)."""
    import hashlib

    ref = parse_reference(image)
    c = _Client(ref, timeout)
    body, ctype = c.get(ref.url("manifests", ref.reference), MANIFEST_TYPES)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    man = _json(body, "manifest")
    if ctype.split(";")[0] in _INDEX_TYPES or man.get("manifests"):
        pick = next((m for m in man.get("manifests", [])
                     if (m.get("platform") or {}).get("os") == "linux"
                     and (m.get("platform") or {}).get("architecture") == "amd64"), None)
        if pick is None:
            raise OperationError(f"{image}: the registry's index has no linux/amd64 image",
                                 step="inspect")
        body, _ = c.get(ref.url("manifests", pick["digest"]), MANIFEST_TYPES)
        digest = pick["digest"]
        man = _json(body, "manifest")
    cfg_digest = (man.get("config") or {}).get("digest")
    if not cfg_digest:
        raise OperationError(f"{image}: the manifest names no config blob (schema 1 manifests "
                             f"are not read)", step="inspect")
    blob, _ = c.get(ref.url("blobs", cfg_digest), "application/json, */*")
    if "sha256:" + hashlib.sha256(blob).hexdigest() != cfg_digest:
        raise OperationError(f"{image}: the config blob does not match its digest {cfg_digest}",
                             step="inspect")
    return {"reference": f"{ref.registry}/{ref.repository}", "manifest_digest": digest,
            "config_digest": cfg_digest, "config": _json(blob, "config blob")}


def image_labels(image: str, *, timeout: float = 30.0) -> tuple[dict[str, str], dict[str, Any]]:
    """(labels, where: manifest and config digests, created) of ``image`` in its registry."""
    got = image_config(image, timeout=timeout)
    cfg = got["config"]
    labels = dict((cfg.get("config") or {}).get("Labels") or {})
    return labels, {"source": "registry", "reference": got["reference"],
                    "manifest_digest": got["manifest_digest"],
                    "config_digest": got["config_digest"], "created": cfg.get("created")}


def _json(body: bytes, what: str) -> dict[str, Any]:
    try:
        d = json.loads(body)
    except ValueError:
        raise OperationError(f"the registry's {what} is not JSON", step="inspect") from None
    if not isinstance(d, dict):
        raise OperationError(f"the registry's {what} is not a JSON object", step="inspect")
    return d
