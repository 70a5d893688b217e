"""A CycloneDX 1.5 JSON SBOM of a lock's Python packages (envbuilder lock --sbom).

``write_sbom(lock_path, out_path, stack) -> dict`` writes ``out_path`` (atomically) and
returns the document. One ``library`` component per locked package, with its purl
(``pkg:pypi/<name>@<version>``), every SHA-256 the lock allows for it, and the dependency
graph from uv's ``# via`` annotations. The metadata names the image (the stack's tag) as the
described component and envbuilder as the tool. No timestamp and a serial number derived from
the lock's digest: the same lock gives the same bytes.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from envbuilder import __version__
from envbuilder.core.options import COMPONENTS
from envbuilder.lock.entries import lock_digest, read_lock

if TYPE_CHECKING:
    from envbuilder.core.resolve import Stack

SPEC_VERSION = "1.5"


def purl(name: str, version: str) -> str:
    """The package URL of a PyPI package: lower-case, '-' separated, version percent-encoded."""
    return f"pkg:pypi/{name.lower().replace('_', '-')}@{quote(version, safe='')}"


def sbom(lock_path: str | Path, stack: Stack) -> dict:
    """The CycloneDX document for a lock file (see module docstring)."""
    path = Path(lock_path)
    from envbuilder.core.readfile import read_text_capped

    text = read_text_capped(path, "lock", limit=64 << 20)
    pkgs = read_lock(text)
    digest = lock_digest(path)
    refs = {p.name: purl(p.name, p.version) for p in pkgs}
    components = []
    for p in pkgs:
        components.append({
            "type": "library",
            "bom-ref": refs[p.name],
            "name": p.name,
            "version": p.version,
            "purl": refs[p.name],
            "hashes": [{"alg": "SHA-256", "content": h.split(":", 1)[1]}
                       for h in p.hashes if h.startswith("sha256:")],
        })
    children: dict[str, list[str]] = {p.name: [] for p in pkgs}
    for p in pkgs:
        for parent in p.via:
            if parent in children:
                children[parent].append(refs[p.name])
    d = stack.to_dict()
    image_ref = f"envbuilder:{stack.tag}"
    props = [{"name": f"envbuilder:{k}", "value": str(d[k])}
             for k in ("target", "torch", "torch_variant", "python", "cuda", "nccl", *COMPONENTS, "os")
             if d.get(k)]
    props += [{"name": "envbuilder:matrix-digest", "value": stack.matrix.digest},
              {"name": "envbuilder:lock-digest", "value": digest}]
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'envbuilder-lock:' + digest)}",
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "envbuilder",
                                      "version": __version__}]},
            "component": {"type": "container", "bom-ref": image_ref, "name": stack.tag,
                          "version": stack.tag,
                          "description": f"envbuilder {stack.target}: Python packages of "
                                         f"requirements.lock"},
            "properties": props,
        },
        "components": components,
        "dependencies": [{"ref": image_ref, "dependsOn": [refs[p.name] for p in pkgs]}]
        + [{"ref": refs[n], "dependsOn": sorted(set(c))} for n, c in children.items()],
    }


SBOM_NAME = "sbom.cdx.json"


def write_sbom(lock_path: str | Path, out_path: str | Path, stack: Stack) -> dict:
    """Write the SBOM of ``lock_path`` to ``out_path`` (temp file + rename); return it."""
    from envbuilder.render.templating import write_file_atomic

    doc = sbom(lock_path, stack)
    write_file_atomic(Path(out_path), json.dumps(doc, indent=2) + "\n", step="sbom", group="sbom")
    return doc
