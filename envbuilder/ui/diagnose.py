"""The diagnosis commands of the CLI: explain (its library is envbuilder.diagnose, through
envbuilder.api)."""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from envbuilder.ui.options import JsonOpt
from envbuilder.ui.output import command, echo_json
from envbuilder.ui.plain import explain_logs, say


def explain(logs: Optional[List[str]] = typer.Argument(None, help="Log files, or - for stdin (the default when stdin is a pipe or a file)."),
            top: int = typer.Option(5, "--top", min=1, help="How many causes to show."),
            learn: Optional[str] = typer.Option(None, "--learn", metavar="LOG", help="Learn LOG as a team case of this project (with --category and --fix)."),
            category: Optional[str] = typer.Option(None, "--category", help="--learn: the cause's family (e.g. network_interface)."),
            fix: Optional[str] = typer.Option(None, "--fix", metavar="TEXT", help="--learn: what fixed it."),
            cause: Optional[str] = typer.Option(None, "--cause", metavar="TEXT", help="--learn: what the team found (the root cause)."),
            as_json: bool = JsonOpt) -> None:
    """Name the likely causes of a failed distributed job from its logs, with fixes.
    Exit 0: a cause was found with confidence; 1: none (no failure found, only low-confidence
    guesses, or nothing matched); 2: bad input."""
    from envbuilder.errors import InputError

    if learn is not None:
        from envbuilder.api import explain_learn

        if logs or not category:
            raise InputError("explain --learn LOG takes --category C and --fix TEXT, and no other log")
        learned = explain_learn(learn, category=category, fix=fix or "", cause=cause).to_dict()
        echo_json({"learned": learned}) if as_json else say(
            f"learned team case {learned['name']} ({learned['category']}): {learned['path']}")
        return
    if not logs:
        if sys.stdin is None or sys.stdin.isatty():
            raise InputError("explain needs a LOG file, - for stdin, or a log piped in "
                             "(envbuilder explain < job.log)")
        logs = ["-"]
    explain_logs(logs, top, as_json)  # the same function the typer-free path runs (ui.fastpath)


def register(app: typer.Typer) -> None:
    """Add the diagnosis commands to the CLI."""
    app.command("explain")(command(explain))
