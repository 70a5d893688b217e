"""Where a project file can be: its names, and whether any folder from ``start`` up holds one.

Light on purpose (the standard library only): a command that only needs to know whether it
runs inside a project (``explain``, for the team's learned cases) asks here first and loads
the project model (``core.project``) only when there is a file to read.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

PROJECT_FILE = "envbuilder.toml"
PYPROJECT = "pyproject.toml"
MAX_BYTES = 1 << 20  # a project file is at most this (core.project reads it capped)
# what a [tool.envbuilder] table can look like in TOML: a header or dotted key `tool.envbuilder`
# (quoted or not), or a key `envbuilder = {...}` under [tool]; a dependency on
# torch-envbuilder is none of them. Anything that may be one counts (the reader decides).
_TABLE = re.compile(rb'tool\s*\.\s*"?envbuilder\b|^\s*"?envbuilder"?\s*=', re.MULTILINE)


def any_project_file(start: str | Path | None = None) -> bool:
    """Whether ``start`` (default: the current folder) or a folder above it may hold a project:
    an envbuilder.toml, or a pyproject.toml that may hold a [tool.envbuilder] table (most
    repositories have a pyproject.toml, and most of those have no such table).
    Anything under those names that is not a plain readable file counts: the project reader
    then says what is wrong with it."""
    here = Path(start if start is not None else Path.cwd()).absolute()
    for folder in (here, *here.parents):
        if os.path.lexists(folder / PROJECT_FILE):
            return True
        py = folder / PYPROJECT
        if os.path.lexists(py) and _may_name_envbuilder(py):
            return True
    return False


def _may_name_envbuilder(path: Path) -> bool:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return True  # a link to nowhere, a FIFO, a huge file: for the project reader
        with open(path, "rb") as f:
            return _TABLE.search(f.read(MAX_BYTES)) is not None
    except OSError:
        return True
