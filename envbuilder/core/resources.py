"""Where envbuilder's data lives: one loader, ``importlib.resources``, and no path guessing.

The data is ``envbuilder/data/``: ``signatures.yaml``, and ``matrices/`` and ``templates/``.
In the repository the last two are symbolic links to the top-level ``matrices/`` and
``templates/`` folders (where users and reviewers expect them), so a source checkout and an
editable install read them in place; a wheel carries the folders themselves at
``envbuilder/data/`` (pyproject.toml: ``[tool.hatch.build.targets.wheel.force-include]``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_path(name: str) -> Path:
    """``envbuilder/data/<name>`` as a real path (links resolved)."""
    path = Path(str(resources.files("envbuilder") / "data" / name)).resolve()
    if not path.exists():
        raise FileNotFoundError(f"envbuilder's data {name} is missing from {path.parent}: "
                                "reinstall envbuilder")
    return path


def matrices_dir() -> Path:
    return data_path("matrices")


def templates_dir() -> Path:
    return data_path("templates")


def payload_dir() -> Path:
    return Path(str(resources.files("envbuilder.run.payload"))).resolve()
