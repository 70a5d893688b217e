"""``envbuilder explain [--json] [--top N] LOG...`` without typer (issue 33: explain's whole
command within 0.2 s of CPU for a small log; typer's import alone is a quarter of that).

``run(argv)`` answers only that plain form: ``explain`` then log paths (or ``-``), ``--json``
and ``--top N`` / ``--top=N`` with N a positive integer, in any order. Anything else (no log,
``--help``, ``--learn``, an unknown option, a bad N, ``--``) returns None and the typer CLI
runs, with its usage errors. The work is ``envbuilder.ui.plain.explain_logs`` under
``plain.guarded``, which the typer command runs too, so both print the same and exit the same
(tests/test_explain_fastpath.py runs both on the same inputs). ENVBUILDER_NO_FAST_PATH=1 turns
it off.
"""

from __future__ import annotations

import os
from typing import Sequence


def parse(argv: Sequence[str]) -> tuple[list[str], int, bool] | None:
    """(logs, top, as_json) of the plain explain form, else None."""
    if not argv or argv[0] != "explain":
        return None
    logs: list[str] = []
    top, as_json = 5, False
    rest = list(argv[1:])
    while rest:
        a = rest.pop(0)
        if a == "--json":
            as_json = True
        elif a == "--top" or a.startswith("--top="):
            value = a.partition("=")[2] if "=" in a else (rest.pop(0) if rest else "")
            # (a count of digits first: int() of more than 4,300 digits raises)
            if not value.isdigit() or not value.isascii() or len(value) > 9 or int(value) < 1:
                return None
            top = int(value)
        elif a == "-" or not a.startswith("-"):
            logs.append(a)
        else:
            return None
    return (logs, top, as_json) if logs else None


def run(argv: Sequence[str]) -> int | None:
    """The exit code of the plain explain form run without typer; None: not that form."""
    if os.environ.get("ENVBUILDER_NO_FAST_PATH"):
        return None
    parsed = parse(argv)
    if parsed is None:
        return None
    from envbuilder import _safety
    from envbuilder.ui import plain

    logs, top, as_json = parsed

    def call() -> None:
        _safety.check_arguments({"logs": logs})
        plain.explain_logs(logs, top, as_json)

    return plain.guarded(call, as_json)
