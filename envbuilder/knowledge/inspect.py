"""``envbuilder inspect IMAGE``: the stack an image's labels declare, in the rows ``resolve``
prints, with its provenance (matrix digest, envbuilder version, lock digest, base image digest,
build date). The labels come from the engine (a local image) or from the registry's config
blob (``run.registry``); this module only reads them.
"""

from __future__ import annotations

from typing import Any, Mapping

from envbuilder.errors import InputError
from envbuilder.core import catalog
from envbuilder.core.options import COMPONENTS
from envbuilder.labels import BASE_DIGEST, KEY_OF, LOCK_DIGEST, PREFIX

# resolve's rows (cli._print_stack), then the image's other facts; (row, label)
ROWS: tuple[tuple[str, str], ...] = (
    ("cuda_toolkit", PREFIX + "cuda-toolkit"), ("driver_min", PREFIX + "driver-min"),
    ("torch", PREFIX + "torch"), ("torch_variant", PREFIX + "torch-variant"),
    ("python", PREFIX + "python"), ("nccl", PREFIX + "nccl"),
    *((c, PREFIX + c) for c in COMPONENTS),
    ("os", PREFIX + "os"), ("base_image", "org.opencontainers.image.base.name"),
    ("builder_nvcc", PREFIX + "builder-nvcc"), ("flavour", PREFIX + "flavour"),
    ("nccl_package", PREFIX + "nccl-package"), *((c.ops_key, KEY_OF[c.ops_key]) for c in catalog.builtin() if c.has_ops),
    ("torch_arch", PREFIX + "torch-arch"), ("cuda_arch_list", PREFIX + "cuda-arch-list"),
    ("cpu_isa", PREFIX + "cpu-isa"),
)


def stack_from_labels(image: str, labels: Mapping[str, str], where: Mapping[str, Any],
                      *, matrix_digest_now: str | None = None) -> dict[str, Any]:
    """The declared stack and provenance of ``image``; InputError when it carries no
    envbuilder labels (it was not built by envbuilder)."""
    if PREFIX + "torch" not in labels or PREFIX + "version" not in labels:
        raise InputError(f"image {image} carries no envbuilder labels ({PREFIX}torch, "
                         f"{PREFIX}version): it was not built by envbuilder; envbuilder verify "
                         f"and inspect read only envbuilder's images")
    stack: dict[str, Any] = {}
    for row, key in ROWS:
        stack[row] = labels.get(key) or None
    if labels.get(PREFIX + "cuda") == "cpu":
        stack["cuda_toolkit"] = None
    minor = labels.get(PREFIX + "driver-minor-compat")
    md = labels.get(PREFIX + "matrix-digest")
    prov = {
        "envbuilder_version": labels.get(PREFIX + "version"),
        "matrix_digest": md,
        "matrix_digest_now": matrix_digest_now,
        "matrix_current": None if not md or not matrix_digest_now else md == matrix_digest_now,
        "lock_digest": labels.get(LOCK_DIGEST),
        "base_digest": labels.get(BASE_DIGEST),
        "built": where.get("created"),
        **{k: v for k, v in where.items() if k != "created"},
    }
    return {"image": image, "target": labels.get(PREFIX + "target"),
            "tag": labels.get("org.opencontainers.image.version"),
            "driver_minor_compat": minor, "stack": stack, "provenance": prov,
            "labels": {k: v for k, v in sorted(labels.items())
                       if k.startswith(PREFIX) or k.startswith("org.opencontainers.")}}


def rows(d: Mapping[str, Any]) -> list[list[str]]:
    """The table ``inspect`` prints: axis, value, where it comes from."""
    out: list[list[str]] = []
    for row, key in ROWS:
        v = d["stack"].get(row)
        if v is None and row not in ("cuda_toolkit", "torch", "python", "os"):
            continue
        shown = v if v is not None else ("cpu" if row == "cuda_toolkit" else "")
        if row == "driver_min" and d.get("driver_minor_compat"):
            shown = f"{v} ({d['driver_minor_compat']} with minor-version compatibility)"
        out.append([row, str(shown), f"label {key}"])
    return out


def provenance_lines(d: Mapping[str, Any]) -> list[str]:
    p = d["provenance"]
    cur = {True: " (the matrix in use now)", False: f" (the matrix in use now is "
           f"{p.get('matrix_digest_now')})", None: ""}[p.get("matrix_current")]
    out = [f"envbuilder version: {p.get('envbuilder_version')}",
           f"matrix digest: {p.get('matrix_digest')}{cur}",
           f"lock digest: {p.get('lock_digest') or 'none (installed without a lock)'}",
           f"built: {p.get('built') or 'unknown'}"]
    if p.get("base_digest"):
        out.append(f"base image digest: {p['base_digest']}")
    if p.get("source") == "registry":
        out.append(f"read from the registry: {p.get('reference')}@{p.get('manifest_digest')} "
                   f"(config {p.get('config_digest')}; no layer pulled)")
    elif p.get("source") == "engine":
        out.append(f"read from the engine: {p.get('id')}"
                   + (f" ({', '.join(p['repo_digests'])})" if p.get("repo_digests") else ""))
    return out
