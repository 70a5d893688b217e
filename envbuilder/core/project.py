"""A team's project file: ``envbuilder.toml`` (or ``[tool.envbuilder]`` in ``pyproject.toml``).

``find_project(start)`` walks up from ``start`` (the current folder) to the filesystem root and
returns the first folder's project: its ``envbuilder.toml``, else its ``pyproject.toml`` when
that has a ``[tool.envbuilder]`` table. The file is validated against the JSON Schema shipped
with the package (``envbuilder/data/project.schema.json``, which editors can use too): an
unknown key is an InputError (exit 2) naming the key and the file. Relative paths in the file
(``requirements``, ``matrix_overlay``) are relative to the file's folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from envbuilder.core.resources import data_path
from envbuilder.core.target import Pins
from envbuilder.errors import InputError

PROJECT_FILE = "envbuilder.toml"
PYPROJECT = "pyproject.toml"
SCHEMA_NAME = "project.schema.json"
MAX_BYTES = 1 << 20
_PIN_KEYS = ("torch", "python", "deepspeed", "horovod", "nccl", "os", "driver", "flavour", "ds_ops",
             "exclude_newer", "platform", "fabric")


@dataclass(frozen=True)
class ProjectTarget:
    name: str  # the project's name for it (its folder build/<name>)
    target: str  # the envbuilder target string
    pins: Pins = field(default_factory=Pins)
    # the target's own keys besides its pins, as TargetSpec fields (they win over the project's)
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Project:
    path: Path  # the file (envbuilder.toml or pyproject.toml)
    targets: tuple[ProjectTarget, ...] = ()
    requirements_file: Path | None = None  # the team's requirements, as a file ...
    requirements: tuple[str, ...] = ()  # ... or as lines
    registry: str | None = None
    layouts: tuple[str, ...] = ()
    matrix_overlay: Path | None = None
    pip_index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    exclude_newer: str | None = None

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def defaults(self) -> dict[str, Any]:
        """The project's top-level keys as TargetSpec fields (the cascade's second layer):
        only the keys the file sets."""
        out: dict[str, Any] = {}
        if self.has_requirements:
            out["requirements_file"] = self.requirements_file
            out["requirements"] = self.requirements
        for key in ("registry", "matrix_overlay", "pip_index_url", "exclude_newer"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        for key in ("layouts", "extra_index_urls"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    @property
    def has_requirements(self) -> bool:
        return self.requirements_file is not None or bool(self.requirements)

    @property
    def layout_pairs(self) -> tuple[tuple[int, int], ...]:
        """``layouts`` as (nodes, processes per node): the jobs/ files' layouts."""
        return tuple((int(n), int(p)) for n, p in (x.split("x") for x in self.layouts))

    def target(self, name: str) -> ProjectTarget | None:
        return next((t for t in self.targets if t.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path),
                "targets": [{"name": t.name, "target": t.target,
                             "pins": {k: v for k, v in vars(t.pins).items() if v}}
                            for t in self.targets],
                "requirements": (str(self.requirements_file) if self.requirements_file
                                 else list(self.requirements)),
                "registry": self.registry, "layouts": list(self.layouts),
                "matrix_overlay": str(self.matrix_overlay) if self.matrix_overlay else None}


def schema() -> dict[str, Any]:
    """The project file's JSON Schema (envbuilder/data/project.schema.json)."""
    data: dict[str, Any] = json.loads(data_path(SCHEMA_NAME).read_text(encoding="utf-8"))
    return data


def _toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    from envbuilder.core.readfile import read_bytes_capped

    # judged by its size before it is read: a 3 GiB (sparse) file costs one fstat
    data = read_bytes_capped(path, "project file", limit=MAX_BYTES)
    try:
        table: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
        return table
    except UnicodeDecodeError:
        raise InputError(f"project file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"project file {path} is not valid TOML: {e}") from None


def _project_table(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    # anything under the name is the project file: a FIFO, a device or a folder there is
    # refused by the capped reader (one line, exit 2), never silently skipped or blocked on
    own = folder / PROJECT_FILE
    if os.path.lexists(own):
        return own, _toml(own)
    py = folder / PYPROJECT
    if os.path.lexists(py):
        data = _toml(py)
        tool = data.get("tool")
        if isinstance(tool, dict) and "envbuilder" in tool:
            table = tool["envbuilder"]
            if not isinstance(table, dict):
                raise InputError(f"project file {py}: [tool.envbuilder] must be a table")
            return py, table
    return None


def find_project(start: str | Path | None = None) -> Project | None:
    """The project of ``start`` (default: the current folder) or of the nearest folder above
    it; None when no folder up to the root has one."""
    here = Path(start if start is not None else Path.cwd()).absolute()
    for folder in (here, *here.parents):
        found = _project_table(folder)
        if found is not None:
            return parse_project(*found)
    return None


def load_project(path: str | Path) -> Project:
    """The project file ``path`` (an envbuilder.toml or a pyproject.toml)."""
    p = Path(path).absolute()
    if p.is_dir():
        found = _project_table(p)
        if found is None:
            raise InputError(f"{p} has no {PROJECT_FILE} (nor a pyproject.toml with [tool.envbuilder])")
        return parse_project(*found)
    if p.name == PYPROJECT:
        found = _project_table(p.parent)
        if found is None or found[0] != p:
            raise InputError(f"project file {p} has no [tool.envbuilder] table")
        return parse_project(*found)
    return parse_project(p, _toml(p))


def _where(path: Path) -> str:
    return "[tool.envbuilder]" if path.name == PYPROJECT else ""


def parse_project(path: Path, data: dict[str, Any]) -> Project:
    from envbuilder.core.schema import first_error

    err = first_error(data, schema(), name_key=True)
    if err is not None:
        prefix = "tool.envbuilder." if path.name == PYPROJECT else ""
        key = prefix + ".".join(str(p) for p in err.path) if err.path else (prefix.rstrip(".") or "(top level)")
        if err.message.startswith("unknown key"):
            import re

            bad = re.findall(r"'([^']+)'", err.message.rsplit("(", 1)[-1])
            shown = ", ".join(f"{key + '.' if err.path else prefix}{b}" for b in bad) or key
            raise InputError(f"project file {path}: unknown key {shown} (known keys: see "
                             f"envbuilder/data/{SCHEMA_NAME})")
        msg = err.message if len(err.message) <= 300 else err.message[:300] + "..."
        raise InputError(f"project file {path}, key {key}: {msg}")
    root = path.parent
    targets: list[ProjectTarget] = []
    seen: set[str] = set()
    for t in data.get("targets", ()):
        if t["name"] in seen:
            raise InputError(f"project file {path}: target name {t['name']!r} is listed twice")
        seen.add(t["name"])
        pins = Pins(**{k: t.get(k) for k in _PIN_KEYS},
                    with_=tuple(t.get("with", ())), without=tuple(t.get("without", ())))
        targets.append(ProjectTarget(t["name"], t["target"], pins,
                                     _settings(path, t, f"targets.{t['name']}")))
    req = data.get("requirements")
    req_file = _requirements_file(path, req, "requirements")
    overlay = root / data["matrix_overlay"] if "matrix_overlay" in data else None
    if overlay is not None and not overlay.is_dir():
        raise InputError(f"project file {path}, key matrix_overlay: {overlay} is not a folder")
    return Project(path=path, targets=tuple(targets), requirements_file=req_file,
                   requirements=tuple(req) if isinstance(req, list) else (),
                   registry=data.get("registry"), layouts=tuple(data.get("layouts", ())),
                   matrix_overlay=overlay, pip_index_url=data.get("pip_index_url"),
                   extra_index_urls=tuple(data.get("extra_index_urls", ())),
                   exclude_newer=data.get("exclude_newer"))


def _requirements_file(path: Path, req: Any, key: str) -> Path | None:
    req_file = path.parent / req if isinstance(req, str) else None
    if req_file is not None and not req_file.is_file():
        raise InputError(f"project file {path}, key {key}: {req_file} is not a file")
    return req_file


def _settings(path: Path, t: dict[str, Any], where: str) -> dict[str, Any]:
    """A target table's keys besides its pins, as TargetSpec fields."""
    out: dict[str, Any] = {}
    if "requirements" in t:
        req = t["requirements"]
        out["requirements_file"] = _requirements_file(path, req, f"{where}.requirements")
        out["requirements"] = tuple(req) if isinstance(req, list) else ()
        out["requirements_source"] = f"{path} {where}.requirements"
    for key in ("registry", "pip_index_url", "exclude_newer"):
        if key in t:
            out[key] = t[key]
    for key in ("layouts", "extra_index_urls"):
        if key in t:
            out[key] = tuple(t[key])
    return out
