"""pyproject's build hook: the wheel carries the templates compiled by jinja2's own compiler
(envbuilder/render/precompiled.py), generated at build time and never committed.

hatchling runs ``initialize`` before it collects a wheel's files: the templates under
``templates/`` are compiled into a temporary folder, which the wheel carries as
``envbuilder/render/_precompiled/``. An editable install gets none (a checkout compiles them on
first use into the user's cache folder instead), nor does the sdist (it carries the templates).
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def _precompiled_module(root: Path) -> Any:
    """envbuilder/render/precompiled.py of the tree being built (its imports are the standard
    library, jinja2 and envbuilder/core/resources.py)."""
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module("envbuilder.render.precompiled")
    finally:
        sys.path.remove(str(root))


class CompileTemplates(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        root = Path(self.root)
        self._out = Path(tempfile.mkdtemp(prefix="envbuilder-precompiled-"))
        _precompiled_module(root).compile_all(self._out, root / "templates")
        build_data["force_include"][str(self._out)] = "envbuilder/render/_precompiled"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        out = getattr(self, "_out", None)
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)
