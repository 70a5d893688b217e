"""JSON schemas of the matrix files (data about data: kept here, next to the loader).

Unknown keys are errors (``additionalProperties: false``), so a typo in a team's matrix is
caught at load time with the file and the key named, not silently ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from envbuilder.core import compiles

_VERSION = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)*$"}
_SPEC = {"type": "string", "pattern": r"^[<>=!~,.0-9* ]+$"}
_URL = {"type": "string", "pattern": r"^https?://\S+$"}
_SOURCE = {"oneOf": [_URL, {"type": "array", "items": _URL, "minItems": 1}]}
_NAME = {"type": "string", "pattern": r"^[a-z][a-z0-9.]*$"}
_NOTE = {"type": "string"}
_DATE = {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9:]+Z?)?$"}
# an entry's upload date(s): one date, or version -> date for an entry of several versions
_RELEASED = {"oneOf": [_DATE, {"type": "object", "additionalProperties": _DATE,
                               "propertyNames": {"pattern": r"^[0-9]+(\.[0-9]+)*$"}}]}
_PLATFORM = {"enum": ["linux/amd64", "linux/arm64"]}


def _obj(required: list[str], props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": props,
            "additionalProperties": False}


def _file(key: str, item: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    props = {"schema_version": {"const": 1}, key: {"type": "array", "items": item}}
    props.update(extra or {})
    return _obj(["schema_version", key], props)


CUDA = _file(
    "toolkits",
    _obj(["version", "driver_min", "source"],
         {"version": _VERSION, "driver_min": _VERSION, "source": _SOURCE, "note": _NOTE,
          "released": _RELEASED}),
    {"minor_compat": {"type": "array", "items": _obj(
        ["major", "driver_min", "source"],
        {"major": {"type": "integer"}, "driver_min": _VERSION, "source": _SOURCE, "note": _NOTE})},
     # NVIDIA's data center driver branches: designation and end of life (YYYY-MM)
     "driver_branches": {"type": "array", "items": _obj(
         ["branch", "designation", "eol", "source"],
         {"branch": {"type": "integer"},
          "designation": {"enum": ["long-term support", "production", "new feature"]},
          "eol": {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}$"},
          "max_cuda_major": {"type": "integer"}, "source": _SOURCE, "note": _NOTE})},
     "note": _NOTE},
)

BASE_IMAGES = _file(
    "images",
    _obj(["cuda", "os", "flavours", "source"],
         {"cuda": _VERSION, "os": {"type": "array", "items": _NAME, "minItems": 1},
          "flavours": {"type": "array", "items": {"enum": ["base", "runtime", "devel"]}},
          "cudnn": {"type": ["string", "null"], "pattern": r"^cudnn[0-9]*$"},
          "cudnn_os": {"type": "array", "items": _NAME},
          "removed": {"type": "boolean"}, "source": _SOURCE, "note": _NOTE,
          "platforms": {"type": "array", "items": _PLATFORM, "minItems": 1},
          # the driver branches its NVIDIA_REQUIRE_CUDA lists (brand=...,driver>=N,driver<N+1):
          # below its CUDA version, nvidia-container-cli starts it only on those branches
          "require_cuda": _obj(["cuda", "branches", "source"], {
              "cuda": {"type": "string", "pattern": r"^[0-9]+\.[0-9]+$"},
              "branches": {"type": "array", "items": {"type": "integer", "minimum": 1}},
              "source": _SOURCE, "note": _NOTE}),
          # a set's own repository (e.g. a team's internal registry, in a matrix overlay)
          "repository": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9./:_-]*$"}}),
    {"repository": {"type": "string", "pattern": r"^[a-z0-9./_-]+$"}, "note": _NOTE},
)

NCCL = _file(
    "releases",
    _obj(["version", "cuda", "source"],
         {"version": _VERSION, "cuda": {"type": "array", "items": _VERSION, "minItems": 1},
          "released": _RELEASED, "source": _SOURCE, "note": _NOTE}),
    {"note": _NOTE},
)

OS = _file(
    "os",
    _obj(["name", "family", "image", "python_default", "python", "source"],
         {"name": _NAME, "family": {"enum": ["ubuntu", "debian", "rockylinux", "ubi"]},
          "image": {"type": "string", "pattern": r"^[a-z0-9./_-]+:[A-Za-z0-9._-]+$"},
          "codename": {"type": "string", "pattern": r"^[a-z]+$"},
          "python_default": _VERSION,
          "python": {"type": "object", "minProperties": 1,
                     "patternProperties": {r"^3\.[0-9]+t?$": _obj(
                         ["packages", "repo"],
                         {"packages": {"type": "array", "minItems": 1,
                                       "items": {"type": "string", "pattern": r"^[a-z0-9.+-]+$"}},
                          "repo": {"type": "string", "pattern": r"^[a-z0-9:/._-]+$"},
                          # the builder's Python headers when not pythonX.Y-dev (dnf: -devel)
                          "devel": {"type": "array", "minItems": 1,
                                    "items": {"type": "string", "pattern": r"^[a-z0-9.+-]+$"}},
                          "source": _SOURCE, "note": _NOTE})},
                     "additionalProperties": False},
          "eol": {"type": "string"}, "source": _SOURCE, "note": _NOTE}),
    {"note": _NOTE},
)

_ARCH = {"type": "array", "items": {"type": "string", "pattern": r"^(sm|compute)_[0-9]+[a-z]?$"}}
_VARIANT = _obj([], {
    "nccl": {"oneOf": [_VERSION, {"type": "null"}]},
    "nccl_package": {"type": ["string", "null"], "pattern": r"^nvidia-nccl-cu[0-9]+$"},
    "arch": _ARCH,
    "cuda_toolkit": _VERSION,
    "platforms": {"type": "array", "items": _PLATFORM, "minItems": 1},
    "index_only": {"type": "array", "items": _PLATFORM, "minItems": 1},
    # the architecture list of another platform's build, when it differs from ``arch`` (the
    # linux/amd64 build's): torch's aarch64 builds compile for fewer GPUs
    "platform_arch": {"type": "object", "minProperties": 1,
                      "propertyNames": {"enum": ["linux/arm64"]},
                      "additionalProperties": _ARCH},
    "note": _NOTE, "source": _SOURCE,
})

TORCH = _file(
    "releases",
    _obj(["line", "versions", "python", "variants", "source"],
         {"line": _VERSION, "versions": {"type": "array", "items": _VERSION, "minItems": 1},
          "python": {"type": "array", "items": _VERSION, "minItems": 1},
          # free-threaded CPythons with Linux wheels (cp314t): a value of its own, "3.14t"
          "python_ft": {"type": "array", "items": {"type": "string", "pattern": r"^3\.[0-9]+t$"}},
          "pypi_default": {"type": "string", "pattern": r"^(cpu|cu[0-9]+)$"},
          "variants": {"type": "object", "minProperties": 1,
                       "patternProperties": {r"^(cpu|cu[0-9]+)$": _VARIANT},
                       "additionalProperties": False},
          "released": _RELEASED, "source": _SOURCE, "note": _NOTE}),
    {"index": {"type": "string", "pattern": r"^https?://\S*\{variant\}\S*$"}, "note": _NOTE,
     # torch APIs a component may use at import time, with the release that added or removed
     # each (what `matrix refresh` reads a component's import-time torch range against)
     "apis": {"type": "array", "items": _obj(
         ["api", "source"],
         {"api": {"type": "string", "pattern": r"^torch(\.[A-Za-z_][A-Za-z0-9_]*)+$"},
          "added": _VERSION, "removed": _VERSION, "source": _SOURCE, "note": _NOTE})}},
)

# a component's file (matrices/<name>.yaml beside the core files: core.catalog)
COMPONENT = _file(
    "releases",
    _obj(["line", "versions", "requires", "source"],
         {"line": _VERSION, "versions": {"type": "array", "items": _VERSION, "minItems": 1},
          "requires": _obj([], {"torch": _SPEC, "python": _SPEC, "cuda": _SPEC, "nccl": _SPEC}),
          "released": _RELEASED, "source": _SOURCE, "note": _NOTE}),
    {"component": _obj(["tag", "title", "order", "checks"], {
        "tag": {"type": "string", "pattern": r"^[a-z][a-z0-9]{0,15}$"},
        "title": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9 .+_-]{0,63}$"},
        "order": {"type": "integer", "minimum": 1, "maximum": 79},
        "checks": {"type": "string", "minLength": 1, "maxLength": 200},
        "ops_default": {"type": "array", "items": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"}},
        "ops_default_cpu": {"type": "array", "items": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"}}}),
     "compiles": compiles.SCHEMA,
     # a component with no release for years: still resolvable, marked and warned about
     "legacy": _obj(["since", "reason", "source"], {
         "since": {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}(-[0-9]{2})?$"},
         "reason": {"type": "string"}, "source": _SOURCE, "note": _NOTE}),
     # CUDA majors in which its build accepts an nvcc of another minor than torch's CUDA
     "cuda_minor_mismatch": _obj(["majors", "source"], {
         "majors": {"type": "array", "items": {"type": "integer"}}, "source": _SOURCE,
         "note": _NOTE}),
     # the named ops it can pre-build at install time (the component's ops option), and where
     # its default (the component line's ops_default) comes from
     "ops": {"type": "array", "items": _obj(
         ["name", "env", "cuda", "source"],
         {"name": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"},
          "env": {"type": "string", "pattern": r"^[A-Z][A-Z0-9_]*$"},
          "cuda": {"type": "boolean"}, "module": {"type": "string", "pattern": r"^[a-z0-9_.]+$"},
          "source": _SOURCE, "note": _NOTE})},
     "ops_default_source": _SOURCE,
     # what its releases need at import time (importing it, starting its launcher), apart from
     # what they declare for installing (``releases: requires:``): a torch API a release
     # calls while importing, a Python module it imports
     "imports": {"type": "array", "items": _obj(
         ["versions", "requires", "reason", "source"],
         {"versions": _SPEC, "requires": _obj([], {"torch": _SPEC, "python": _SPEC}),
          "reason": {"type": "string", "pattern": r"\S"}, "derived": {"type": "string"},
          "source": _SOURCE, "note": _NOTE})},
     # where its releases' sources are read (matrix refresh): files at a release's tag,
     # ``raw`` with ``{version}``; ``package`` the import name; ``requirements`` its file
     "sources": _obj(["raw", "package", "source"], {
         "raw": {"type": "string", "pattern": r"^https://\S*\{version\}\S*/$"},
         "package": {"type": "string", "pattern": r"^[a-z_][a-z0-9_]*$"},
         "requirements": {"type": "string", "pattern": r"^[A-Za-z0-9_./-]+$"},
         "source": _SOURCE, "note": _NOTE}),
     # what its releases need of the OS's toolchain to build (the host GCC major)
     "toolchain": {"type": "array", "items": _obj(
         ["versions", "gcc", "reason", "source"],
         {"versions": _SPEC, "gcc": _SPEC, "reason": {"type": "string", "pattern": r"\S"},
          "source": _SOURCE, "note": _NOTE})},
     "note": _NOTE, "source": _SOURCE},
)
COMPONENT["required"] = [*COMPONENT["required"], "component"]

# the axes a breakage may name besides the matrix's components (core.matrix checks those)
CORE_AXES = ("cuda", "torch", "python", "nccl", "os")

INCOMPATIBILITIES = _file(
    "incompatibilities",
    _obj(["id", "when", "reason", "fix", "source"],
         {"id": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9.-]*$"},
          "when": {"type": "object", "minProperties": 1,
                   "propertyNames": {"pattern": r"^[a-z][a-z0-9_]*$"},
                   "additionalProperties": {"type": "string"}},
          "reason": {"type": "string"}, "fix": {"type": "string"},
          "severity": {"enum": ["error", "warning"]},
          "source": _SOURCE, "note": _NOTE}),
    # known-bad releases (core/advisories.py): not refusals, warnings and a preference
    {"advisories": {"type": "array", "items": _obj(
        ["id", "component", "affected", "severity", "symptom", "source"],
        {"id": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9.-]*$"},
         "component": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"},
         "affected": _SPEC,
         "fixed": {"oneOf": [_VERSION, {"type": "null"}]},
         "severity": {"enum": ["critical", "high", "medium", "low"]},
         "symptom": {"type": "string", "pattern": r"\S"},
         "gpus": {"type": "string"},
         "source": _SOURCE, "note": _NOTE})}},
)

TARGETS = _file(
    "targets",
    {**_obj(["name"], {"name": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9.-]*$"},
                       "target": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9.-]*$"},
                       "flavour": {"type": "string", "pattern": r"^[a-z-]+$"},
                       "description": {"type": "string"}}),
     # <tag>_ops: the ops of the component of that tag to pre-build (core.matrix checks them)
     "patternProperties": {r"^[a-z][a-z0-9]*_ops$": {
         "type": "array", "items": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"}}}},
)

_ENV = {"type": "object", "propertyNames": {"pattern": r"^[A-Z_][A-Z0-9_]*$"},
        "additionalProperties": {"type": "string", "pattern": r"^[A-Za-z0-9_.,;:/=+-]*$"}}
_PKG = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9.+_-]*([=<>~!]=?[0-9][0-9.*]*)?$"}

TOOLCHAINS = _obj(
    ["schema_version", "flavours", "nvcc_host_gcc", "builder_toolkits", "host_compilers",
     "cpu_isas"],
    {"schema_version": {"const": 1}, "note": _NOTE,
     "flavours": {"type": "array", "minItems": 1, "items": _obj(
         ["name", "nvidia_tag", "cudnn", "forward_compat", "description", "source"],
         {"name": {"enum": ["cuda-base", "cuda-runtime", "cudnn-runtime", "os"]},
          "nvidia_tag": {"enum": ["base", "runtime", None]},
          "cudnn": {"type": "boolean"}, "forward_compat": {"type": "boolean"},
          "env": _ENV, "description": {"type": "string"}, "source": _SOURCE, "note": _NOTE})},
     "nvcc_host_gcc": {"type": "array", "minItems": 1, "items": _obj(
         ["cuda", "gcc_max", "source"],
         {"cuda": _SPEC, "gcc_max": {"type": "integer"}, "gcc_min": {"type": "integer"},
          "source": _SOURCE, "note": _NOTE})},
     "builder_toolkits": {"type": "array", "items": _obj(
         ["os", "cuda", "install", "packages", "cuda_home", "source"],
         {"os": {"type": "string", "pattern": r"^([a-z][a-z0-9.]*|\*)$"}, "cuda": _VERSION,
          "install": {"enum": ["apt", "pip"]},
          "apt_components": {"type": "array", "items": {"type": "string", "pattern": r"^[a-z-]+$"}},
          "packages": {"type": "array", "minItems": 1, "items": _PKG},
          "cuda_home": {"type": "string", "pattern": r"^/[A-Za-z0-9._/-]*$"},
          "gcc_max": {"type": "integer"}, "source": _SOURCE, "note": _NOTE})},
     "host_compilers": {"type": "array", "items": _obj(
         ["os", "default", "packages", "source"],
         {"os": _NAME, "default": {"type": "integer"},
          "packages": {"type": "object", "patternProperties": {r"^[0-9]+$": {
              "type": "array", "minItems": 1, "items": _PKG}}, "additionalProperties": False},
          "source": _SOURCE, "note": _NOTE})},
     "cpu_isas": {"type": "array", "minItems": 1, "items": _obj(
         ["name", "simd", "source"],
         {"name": {"type": "string", "pattern": r"^[a-z0-9-]+$"},
          "simd": {"enum": ["__SCALAR__", "__AVX256__", "__AVX512__"]},
          "source": _SOURCE, "note": _NOTE})},
     },
)

# matrices/bandwidth.yaml: published all-reduce bus bandwidth by GPU model, links, node count
# and message size (not a file of the resolver's matrix: core.matrix.load_floors reads it)
_SIZE_KEY = r"^[1-9][0-9]*(KiB|MiB|GiB)$"
BANDWIDTH = _obj(
    ["schema_version", "floor_fraction", "floors"],
    {"schema_version": {"const": 1}, "note": _NOTE,
     "floor_fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
     "floors": {"type": "array", "minItems": 1, "items": _obj(
         ["gpu", "names", "intra", "fabric", "nodes", "gpus_per_node", "busbw_gbps", "source"],
         {"gpu": {"type": "string", "minLength": 1, "maxLength": 64},
          "names": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1,
                                                              "maxLength": 128}},
          "intra": {"type": "string", "pattern": r"^[a-z0-9-]+$"},
          "fabric": {"enum": ["none", "ib", "roce", "efa", "socket"]},
          "nodes": {"type": "integer", "minimum": 1}, "gpus_per_node": {"type": "integer", "minimum": 1},
          "busbw_gbps": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": _SIZE_KEY},
                         "additionalProperties": {"type": "number", "exclusiveMinimum": 0}},
          "source": _SOURCE, "note": _NOTE})}},
)
BANDWIDTH_FILE = "bandwidth.yaml"  # core.catalog.OTHER_FILES

# the matrix's own files (core.catalog.CORE_FILES); every other <name>.yaml is a COMPONENT file
FILES: dict[str, dict[str, Any]] = {
    "toolchains.yaml": TOOLCHAINS,
    "cuda.yaml": CUDA,
    "base_images.yaml": BASE_IMAGES,
    "nccl.yaml": NCCL,
    "os.yaml": OS,
    "torch.yaml": TORCH,
    "incompatibilities.yaml": INCOMPATIBILITIES,
    "targets.yaml": TARGETS,
}


# -- the explain signatures (envbuilder/data/signatures.yaml), checked by the same machinery ----

_TEXT = {"type": "string", "pattern": r"\S"}
_WEIGHT = {"type": "number", "minimum": 0}
_WEIGHTS = {"type": "object", "minProperties": 1, "additionalProperties": _WEIGHT}


def signatures_schema(categories: Sequence[str], settings: Sequence[str]) -> dict[str, Any]:
    """The schema of a signatures file whose categories and settings are the given names.
    What a schema cannot say (a regex compiles, ``adds`` names a category the file defines,
    ``requires`` names a signature that exists) is checked by the loader."""
    return {
        "type": "object",
        "required": ["categories", "signatures"],
        "properties": {
            "version": {"type": "integer"},
            "settings": {"type": "object", "properties": {s: _WEIGHT for s in settings},
                         "additionalProperties": False},
            "categories": {
                "type": "object", "minProperties": 1,
                "propertyNames": {"enum": list(categories)},
                "additionalProperties": _obj(["title", "check", "fix", "source"],
                                             {"title": _TEXT, "check": _TEXT, "fix": _TEXT,
                                              "source": _URL})},
            "signatures": {
                "type": "array", "minItems": 1,
                "items": _obj(["id", "pattern", "adds"],
                              {"id": _TEXT, "pattern": _TEXT, "adds": _WEIGHTS, "unless": _TEXT,
                               "scale": _WEIGHTS, "evidence": {"type": "boolean"},
                               "requires": {"type": "array", "items": {"type": "string"}},
                               "fix": _TEXT, "source": _URL})},
        },
    }


def _anchored(pattern: str) -> str:
    """``pattern`` with a final ``$`` made ``\\Z``: JSON Schema patterns are searched with
    Python's ``re``, where ``$`` also matches before a final newline, so ``^[a-z]+$`` would
    admit ``"curl\\n"`` and a newline would reach a Dockerfile line or a shell command."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        return pattern[:-1] + r"\Z"
    return pattern


_STRICT: dict[int, tuple[Any, dict[str, Any]]] = {}


def strict(schema: Any) -> Any:
    """``schema`` with every pattern (``pattern``, ``patternProperties`` keys) anchored at the
    true end of the string: the one validator for the built-in matrix, overlays and project
    files. Cached per schema object."""
    hit = _STRICT.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out: dict[str, Any] = {}
            for k, v in node.items():
                if k == "pattern" and isinstance(v, str):
                    out[k] = _anchored(v)
                elif k == "patternProperties" and isinstance(v, dict):
                    out[k] = {_anchored(pk): walk(pv) for pk, pv in v.items()}
                else:
                    out[k] = walk(v)
            return out
        if isinstance(node, list):
            return [walk(x) for x in node]
        return node

    result = walk(schema)
    if isinstance(schema, dict):
        _STRICT[id(schema)] = (schema, result)
    return result


@dataclass(frozen=True)
class SchemaError:
    """The first (shallowest) violation: where (path of keys and indexes) and what."""

    path: tuple[str | int, ...]
    message: str


def first_error(data: Any, schema: dict[str, Any], *,
                name_key: bool = False) -> SchemaError | None:
    """Validate ``data``; None when it conforms. Unknown keys read "unknown key: ...". With
    ``name_key`` a missing or badly named key is added to the path, so the path names it."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(strict(schema))
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    err = min(errors, key=lambda e: len(list(e.absolute_path)))
    path: list[str | int] = list(err.absolute_path)
    msg = err.message
    if err.validator == "additionalProperties":
        msg = f"unknown key: {msg}"
    elif not name_key:
        pass
    elif err.validator == "required":
        missing = re.match(r"^'(.+)' is a required property$", msg)
        if missing:
            path.append(missing.group(1))
    elif "propertyNames" in err.schema_path:  # a key not allowed here: name it
        path.append(str(err.instance))
    return SchemaError(tuple(path), msg)


# -- doctor's GPU facts (envbuilder/data/gpus.yaml) ----------------------------------------------

_CC = {"type": "string", "pattern": r"^[0-9]+\.[0-9]+$"}
GPUS = _obj(["schema_version", "by_name", "by_architecture"], {
    "schema_version": {"const": 1},
    "by_name": {"type": "array", "minItems": 1, "items": _obj(
        ["fragment", "compute_capability", "source"],
        {"fragment": _TEXT, "compute_capability": _CC, "source": _SOURCE, "note": _NOTE})},
    "by_architecture": {"type": "array", "items": _obj(
        ["architecture", "compute_capability", "source"],
        {"architecture": _TEXT, "compute_capability": _CC, "source": _SOURCE, "note": _NOTE})},
})
