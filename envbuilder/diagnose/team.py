"""A team's own explain cases: ``envbuilder explain --learn LOG --category C --fix TEXT``.

A learned case is one JSON file in the project's explain-cases folder (``explain_cases`` in
envbuilder.toml, default ``.envbuilder/explain-cases`` beside it): the log's error-looking
lines (normalised, as the packaged cases are), their term counts, the category, the fix and
what the team found. ``explain`` run inside that project searches these cases with the
packaged ones (retrieval.py), so the next log like it is explained, and says when the match
is a team case. Another project, or no project, never sees them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from envbuilder.diagnose import retrieval
from envbuilder.errors import InputError

__all__ = ["learn", "team_index"]

_MAX_TEXT = 500


def _one_line(text: str | None, what: str, required: bool) -> str:
    value = " ".join((text or "").split())
    if required and not value:
        raise InputError(f"explain --learn needs {what} (e.g. --fix 'export NCCL_SOCKET_IFNAME=eth0')")
    if len(value) > _MAX_TEXT:
        raise InputError(f"explain --learn: {what} is {len(value)} characters; give at most {_MAX_TEXT}")
    if any(ord(c) < 32 for c in value):
        raise InputError(f"explain --learn: {what} has control characters")
    return value


def learn(log: str, *, category: str, fix: str, cause: str | None, folder: Path,
          categories: Sequence[str], root: Path | None = None) -> dict[str, Any]:
    """Learn the case of ``log`` into ``folder``; answers the case written (its ``path``).
    ``root``: the project's folder: the case is written through no link below it (the output
    guard, _fs.open_folder), so a ``.envbuilder`` that links out of the project is refused."""
    from envbuilder._fs import write_file_atomic
    from envbuilder.diagnose.explain import _iter_stream_lines, _open_source

    if category not in categories:
        raise InputError(f"explain --learn: unknown category {category!r} (one of: {', '.join(categories)})")
    fix = _one_line(fix, "--fix TEXT (what fixed it)", True)
    cause = _one_line(cause, "--cause TEXT", False) or f"learned from {Path(log).name}"
    if log == "-":
        raise InputError("explain --learn needs a log file, not stdin")
    with _open_source(log) as fh:
        lines = list(_iter_stream_lines(fh, log, 4096))
    name = Path(log).name
    case = retrieval.case_from_log(lines, id="team:", category=category, cause=cause, fix=fix, url="",
                                   team=True)
    if not case.terms:
        raise InputError(f"explain --learn: nothing in {log} looks like an error to learn from "
                         "(no line with error, failed, cannot, not found ...)")
    digest = hashlib.sha256(case.excerpt.encode("utf-8")).hexdigest()[:10]
    case_name = f"{category}-{digest}"
    doc = case.to_dict() | {"id": f"team:{case_name}", "team": True, "log": name,
                            "learned": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    path = folder / f"{case_name}.json"
    write_file_atomic(path, json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                      step="explain --learn", root=root, option="the project's explain_cases")
    return {"name": case_name, "path": str(path), "category": category, "fix": fix, "cause": cause,
            "lines": case.excerpt.count("\n") + 1}


_TEAM: dict[Path, tuple[float, retrieval.CaseIndex]] = {}


def team_index(folder: Path | None) -> retrieval.CaseIndex:
    """The packaged cases plus the team's (the packaged index alone without a folder)."""
    base = retrieval.default_index()
    if folder is None or not folder.is_dir():
        return base
    stamp = max((p.stat().st_mtime for p in folder.glob("*.json")), default=0.0)
    cached = _TEAM.get(folder)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    index = base.plus(retrieval.load_team_cases(folder))
    _TEAM[folder] = (stamp, index)
    return index
