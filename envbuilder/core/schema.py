"""JSON schemas of the matrix files (data about data: kept here, next to the loader).

Unknown keys are errors (``additionalProperties: false``), so a typo in a team's matrix is
caught at load time with the file and the key named, not silently ignored.
"""

from __future__ import annotations

from typing import Any

_VERSION = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)*$"}
_SPEC = {"type": "string", "pattern": r"^[<>=!~,.0-9* ]+$"}
_URL = {"type": "string", "pattern": r"^https?://\S+$"}
_SOURCE = {"oneOf": [_URL, {"type": "array", "items": _URL, "minItems": 1}]}
_NAME = {"type": "string", "pattern": r"^[a-z][a-z0-9.]*$"}
_NOTE = {"type": "string"}


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
          "released": {"type": "string"}}),
    {"minor_compat": {"type": "array", "items": _obj(
        ["major", "driver_min", "source"],
        {"major": {"type": "integer"}, "driver_min": _VERSION, "source": _SOURCE, "note": _NOTE})},
     "note": _NOTE},
)

BASE_IMAGES = _file(
    "images",
    _obj(["cuda", "os", "flavours", "source"],
         {"cuda": _VERSION, "os": {"type": "array", "items": _NAME, "minItems": 1},
          "flavours": {"type": "array", "items": {"enum": ["base", "runtime", "devel"]}},
          "cudnn": {"type": ["string", "null"], "pattern": r"^cudnn[0-9]*$"},
          "cudnn_os": {"type": "array", "items": _NAME},
          "removed": {"type": "boolean"}, "source": _SOURCE, "note": _NOTE}),
    {"repository": {"type": "string", "pattern": r"^[a-z0-9./_-]+$"}, "note": _NOTE},
)

NCCL = _file(
    "releases",
    _obj(["version", "cuda", "source"],
         {"version": _VERSION, "cuda": {"type": "array", "items": _VERSION, "minItems": 1},
          "released": {"type": "string"}, "source": _SOURCE, "note": _NOTE}),
    {"note": _NOTE},
)

OS = _file(
    "os",
    _obj(["name", "family", "image", "python_default", "python", "source"],
         {"name": _NAME, "family": {"enum": ["ubuntu", "debian"]},
          "image": {"type": "string", "pattern": r"^[a-z0-9./_-]+:[A-Za-z0-9._-]+$"},
          "codename": {"type": "string", "pattern": r"^[a-z]+$"},
          "python_default": _VERSION,
          "python": {"type": "object", "minProperties": 1,
                     "patternProperties": {r"^3\.[0-9]+$": _obj(
                         ["packages", "repo"],
                         {"packages": {"type": "array", "minItems": 1,
                                       "items": {"type": "string", "pattern": r"^[a-z0-9.+-]+$"}},
                          "repo": {"type": "string", "pattern": r"^[a-z0-9:/._-]+$"},
                          "source": _SOURCE, "note": _NOTE})},
                     "additionalProperties": False},
          "eol": {"type": "string"}, "source": _SOURCE, "note": _NOTE}),
    {"note": _NOTE},
)

_VARIANT = _obj([], {
    "nccl": {"oneOf": [_VERSION, {"type": "null"}]},
    "nccl_package": {"type": ["string", "null"], "pattern": r"^nvidia-nccl-cu[0-9]+$"},
    "arch": {"type": "array", "items": {"type": "string", "pattern": r"^(sm|compute)_[0-9]+[a-z]?$"}},
    "note": _NOTE, "source": _SOURCE,
})

TORCH = _file(
    "releases",
    _obj(["line", "versions", "python", "variants", "source"],
         {"line": _VERSION, "versions": {"type": "array", "items": _VERSION, "minItems": 1},
          "python": {"type": "array", "items": _VERSION, "minItems": 1},
          "pypi_default": {"type": "string", "pattern": r"^(cpu|cu[0-9]+)$"},
          "variants": {"type": "object", "minProperties": 1,
                       "patternProperties": {r"^(cpu|cu[0-9]+)$": _VARIANT},
                       "additionalProperties": False},
          "released": {"type": "string"}, "source": _SOURCE, "note": _NOTE}),
    {"index": {"type": "string", "pattern": r"^https?://\S*\{variant\}\S*$"}, "note": _NOTE},
)

COMPONENT = _file(
    "releases",
    _obj(["line", "versions", "requires", "source"],
         {"line": _VERSION, "versions": {"type": "array", "items": _VERSION, "minItems": 1},
          "requires": _obj([], {"torch": _SPEC, "python": _SPEC, "cuda": _SPEC, "nccl": _SPEC}),
          "released": {"type": "string"}, "source": _SOURCE, "note": _NOTE}),
    {"needs_nvcc": {"type": "boolean"}, "build_env": {"type": "object",
     "additionalProperties": {"type": "string", "pattern": r"^[A-Za-z0-9_.,;:/=+-]*$"}},
     "note": _NOTE, "source": _SOURCE},
)

_AXES = ["cuda", "torch", "python", "nccl", "deepspeed", "horovod", "os"]

INCOMPATIBILITIES = _file(
    "incompatibilities",
    _obj(["id", "when", "reason", "fix", "source"],
         {"id": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9.-]*$"},
          "when": {"type": "object", "minProperties": 1,
                   "propertyNames": {"enum": _AXES},
                   "additionalProperties": {"type": "string"}},
          "reason": {"type": "string"}, "fix": {"type": "string"},
          "severity": {"enum": ["error", "warning"]},
          "source": _SOURCE, "note": _NOTE}),
)

TARGETS = _file(
    "targets",
    _obj(["name"], {"name": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9.-]*$"},
                    "target": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9.-]*$"},
                    "description": {"type": "string"}}),
)

FILES: dict[str, dict[str, Any]] = {
    "cuda.yaml": CUDA,
    "base_images.yaml": BASE_IMAGES,
    "nccl.yaml": NCCL,
    "os.yaml": OS,
    "torch.yaml": TORCH,
    "deepspeed.yaml": COMPONENT,
    "horovod.yaml": COMPONENT,
    "incompatibilities.yaml": INCOMPATIBILITIES,
    "targets.yaml": TARGETS,
}
