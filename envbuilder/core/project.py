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

from envbuilder.core import jobs as jobs_mod
from envbuilder.core import options as options_mod
from envbuilder.core.resources import data_path
from envbuilder.core.target import Pins
from envbuilder.core.where import MAX_BYTES, PROJECT_FILE, PYPROJECT
from envbuilder.errors import InputError

SCHEMA_NAME = "project.schema.json"


@dataclass(frozen=True)
class ProjectTarget:
    name: str  # the project's name for it (its folder build/<name>)
    target: str  # the envbuilder target string
    # the target's own keys, by the option table's names (the cascade's third layer: they win
    # over the project's); "_where" names each option's key for its errors. Checked once, when
    # a spec is made of them (core.spec.make_spec)
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def pins(self) -> Pins:
        """The target's own pin options (checked now)."""
        return Pins.of(origin=self.settings.get("_where", {}),
                       **{n: self.settings[n] for n in options_mod.PIN_NAMES if n in self.settings})


@dataclass(frozen=True)
class Project:
    """A project file: its targets, the settings of the project itself, and the options its
    top level sets (``values``: the one home of those, by the option table's fields; the
    properties below read them)."""

    path: Path  # the file (envbuilder.toml or pyproject.toml)
    targets: tuple[ProjectTarget, ...] = ()
    explain_cases: Path | None = None  # the team's explain cases folder (explain --learn)
    signing_key: Path | None = None  # the cosign public key: render writes the admission policy
    jobs: jobs_mod.JobsConfig = field(default_factory=jobs_mod.JobsConfig)  # [jobs]
    # every option the top level sets (core.options), as fields of Pins and TargetSpec
    values: Mapping[str, Any] = field(default_factory=dict)

    @property
    def requirements_file(self) -> Path | None:  # the team's requirements, as a file ...
        return self.values.get("requirements_file")

    @property
    def requirements(self) -> tuple[str, ...]:  # ... or as lines
        return tuple(self.values.get("requirements", ()))

    @property
    def registry(self) -> str | None:
        return self.values.get("registry")

    @property
    def layouts(self) -> tuple[str, ...]:
        return tuple(self.values.get("layouts", ()))

    @property
    def matrix_overlay(self) -> Path | None:
        return self.values.get("matrix_overlay")

    @property
    def compiled(self) -> tuple[str, ...]:  # requirements that compile against torch
        return tuple(self.values.get("compiled", ()))

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def explain_cases_dir(self) -> Path:
        """Where the team's learned explain cases live (default .envbuilder/explain-cases)."""
        return self.explain_cases or self.root / ".envbuilder" / "explain-cases"

    @property
    def defaults(self) -> dict[str, Any]:
        """The project's top-level keys as fields (the cascade's second layer): only the keys
        the file sets."""
        out = dict(self.values)
        if self.jobs != jobs_mod.JobsConfig():
            out["jobs"] = self.jobs
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
                             "pins": {k: v for k, v in t.pins.as_options().items() if v}}
                            for t in self.targets],
                "requirements": (str(self.requirements_file) if self.requirements_file
                                 else list(self.requirements)),
                "registry": self.registry, "layouts": list(self.layouts),
                "matrix_overlay": str(self.matrix_overlay) if self.matrix_overlay else None,
                "jobs": self.jobs.to_dict()}


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
            hint = _did_you_mean(bad[0], err.path) if bad else ""
            raise InputError(f"project file {path}: unknown key {shown}{hint} (known keys: see "
                             f"envbuilder/data/{SCHEMA_NAME})")
        msg = err.message if len(err.message) <= 300 else err.message[:300] + "..."
        raise InputError(f"project file {path}, key {key}: {msg}")
    root = path.parent
    at = "tool.envbuilder." if path.name == PYPROJECT else ""
    pjobs = jobs_mod.parse(data.get("jobs"), f"project file {path}, key {at}jobs.")
    targets: list[ProjectTarget] = []
    seen: set[str] = set()
    for t in data.get("targets", ()):
        if t["name"] in seen:
            raise InputError(f"project file {path}: target name {t['name']!r} is listed twice")
        seen.add(t["name"])
        settings = options_mod.project_values(t, path, f"{at}targets.{t['name']}.")
        if "jobs" in t:  # the target's own jobs table over the project's, key by key
            settings["jobs"] = pjobs.merged(jobs_mod.parse(
                t["jobs"], f"project file {path}, key {at}targets.{t['name']}.jobs."))
        targets.append(ProjectTarget(t["name"], t["target"], settings))
    values = options_mod.project_values(data, path, at)
    return Project(path=path, targets=tuple(targets), jobs=pjobs,
                   explain_cases=root / data["explain_cases"] if "explain_cases" in data else None,
                   signing_key=root / data["signing_key"] if "signing_key" in data else None,
                   values=values)


def _did_you_mean(bad: str, path: Any) -> str:
    """' (did you mean flavour?)': the known key nearest an unknown one, at its place in the
    schema (the top level, a target's table, [jobs], [jobs.slurm] ...), or ''."""
    import difflib

    s = schema()
    node: Any = s
    try:
        for part in path:
            node = node["items"] if isinstance(part, int) else node["properties"][part]
            if "$ref" in node:
                node = s["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        known = list(node["properties"])
    except (KeyError, TypeError):  # a path the schema does not spell out: no suggestion
        return ""
    close = difflib.get_close_matches(bad, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
