"""How a package compiles against the image's torch: one description for the matrix's
components (the ``compiles:`` table of ``matrices/<name>.yaml``) and a team's packages
(``envbuilder/data/compiled_packages.yaml``).

``Compiles`` says when it compiles (``always``, or ``ops``: only the ops a request pre-builds),
whether a CUDA torch makes it a CUDA extension that needs nvcc of torch's CUDA major (``nvcc``),
whether it builds only as one (``cuda_only``), what its setup.py imports beyond torch
(``build``), the environment that makes it compile as wanted (``env``; ``cuda_env`` names the
entries that only make sense with nvcc) and the settings today's tools need for some of its
versions (``tools``). ``core.builder`` reads it to choose a builder; the plan reads it to
install and build. Every fact carries its ``source``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from envbuilder.errors import MatrixError

_URL = {"type": "string", "pattern": r"^https?://\S+$"}
_SOURCE = {"oneOf": [_URL, {"type": "array", "items": _URL, "minItems": 1}]}
_ENV = {"type": "object", "propertyNames": {"pattern": r"^[A-Z_][A-Z0-9_]*$"},
        "additionalProperties": {"type": "string", "pattern": r"^[A-Za-z0-9_.,;:/=+-]*$"}}
_PKG = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9.+_-]*([=<>~!]=?[0-9][0-9.*]*)?$"}

# the JSON Schema of a ``compiles:`` table (matrix component files and compiled_packages.yaml)
SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "when": {"enum": ["always", "ops"]},
        "nvcc": {"type": "boolean"},
        "cuda_only": {"type": "boolean"},
        "build": {"type": "array", "items": _PKG},
        "env": _ENV,
        "cuda_env": {"type": "array", "items": {"type": "string", "pattern": r"^[A-Z_][A-Z0-9_]*$"}},
        "tools": {"type": "array", "items": {
            "type": "object", "required": ["versions", "env", "reason", "source"],
            "additionalProperties": False,
            "properties": {"versions": {"type": "string", "pattern": r"^[<>=!~,.0-9* ]+$"}, "env": _ENV,
                           "hide_modules": {"type": "array",
                                            "items": {"type": "string", "pattern": r"^[a-z_][a-z0-9_]*$"}},
                           "reason": {"type": "string"}, "source": _SOURCE, "note": {"type": "string"}}}},
        "source": _SOURCE, "note": {"type": "string"},
    },
}


def _sources(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class BuildTool:
    """A setting its build needs with today's tools, for some of its versions."""

    versions: SpecifierSet
    env: Mapping[str, str]
    reason: str
    source: tuple[str, ...]
    hide_modules: tuple[str, ...] = ()  # Python modules the build must not import

    def applies(self, version: Version) -> bool:
        return self.versions.contains(version, prereleases=True)


@dataclass(frozen=True)
class Compiles:
    """How one package compiles against torch (see the module's docstring)."""

    when: str = "always"  # always | ops (only the ops a request pre-builds)
    nvcc: bool = True  # a CUDA torch makes it a CUDA extension: the builder needs nvcc
    cuda_only: bool = False  # no CPU build exists (refused on a CPU target)
    build: tuple[str, ...] = ()  # what its setup.py imports beyond torch
    env: Mapping[str, str] = field(default_factory=dict)
    cuda_env: tuple[str, ...] = ()  # env entries that only make sense with nvcc (dropped on CPU)
    tools: tuple[BuildTool, ...] = ()
    source: tuple[str, ...] = ()

    def tools_for(self, version: Version) -> tuple[BuildTool, ...]:
        return tuple(t for t in self.tools if t.applies(version))

    def env_for(self, gpu: bool) -> dict[str, str]:
        """Its build environment on a CUDA (``gpu``) or CPU target."""
        return {k: v for k, v in self.env.items() if gpu or k not in self.cuda_env}


def parse(data: Mapping[str, Any], where: str) -> Compiles:
    """A ``compiles:`` table (checked against SCHEMA by its loader) as a Compiles; ``where``
    names it in errors (the file and key)."""
    tools = []
    for i, t in enumerate(data.get("tools", ())):
        try:
            versions = SpecifierSet(t["versions"])
        except InvalidSpecifier:
            raise MatrixError(f"{where}/tools/{i}/versions: {t['versions']!r} is not a version "
                              f"specifier (PEP 440, e.g. '>=2.1,<2.5')") from None
        tools.append(BuildTool(versions, {str(k): str(v) for k, v in t["env"].items()}, t["reason"],
                               _sources(t["source"]), tuple(t.get("hide_modules", ()))))
    return Compiles(when=data.get("when", "always"), nvcc=bool(data.get("nvcc", True)),
                    cuda_only=bool(data.get("cuda_only", False)), build=tuple(data.get("build", ())),
                    env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
                    cuda_env=tuple(data.get("cuda_env", ())), tools=tuple(tools),
                    source=_sources(data.get("source")))
