"""Where the built-in matrix and templates live.

In a source checkout (and an editable install) they are the top-level ``matrices/`` and
``templates/`` folders; a wheel carries them inside the package (see pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent  # the envbuilder package


def _find(name: str) -> Path:
    for candidate in (_PKG / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"envbuilder's built-in {name}/ folder is missing from {_PKG}")


def matrices_dir() -> Path:
    return _find("matrices")


def templates_dir() -> Path:
    return _find("templates")


def payload_dir() -> Path:
    return _PKG / "run" / "payload"
