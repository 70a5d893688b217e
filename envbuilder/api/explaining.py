"""explain: the likely causes of a failed job, from its logs, and a team's own cases.

Light on purpose (``envbuilder explain`` is the command people run in a hurry, on a login
node): it imports the diagnosis library only, not the matrix, the resolver or the project
model unless a project file is there to read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from envbuilder.errors import InputError

if TYPE_CHECKING:
    from envbuilder.api.results import LearnedCase
    from envbuilder.diagnose.explain import Cause, Report


def explain(logs: Sequence[str], *, top: int = 5) -> list[Cause]:
    """The likely causes of a failed job, from its log files ("-" for stdin), best first."""
    from envbuilder.diagnose.explain import explain_files

    return explain_files(list(logs))[:top]


def explain_report(logs: Sequence[str], *, top: int = 5) -> Report:
    """The facts read from the logs (and flight-recorder dumps), the likely causes and the
    low-confidence guesses, best first, and the verdict (``report.to_dict()`` is the ``explain
    --json`` document). Inside a project the team's own learned cases are searched too
    (explain --learn)."""
    from dataclasses import replace

    from envbuilder.diagnose.explain import analyse_files
    from envbuilder.diagnose.team import team_index

    try:
        folder = _explain_cases_dir(None)
    except InputError:  # a broken project file does not stop explain (other commands say it)
        folder = None
    report = analyse_files(list(logs), cases=team_index(folder))
    return replace(report, causes=report.causes[:top], guesses=report.guesses[:top])


def _project_of(start: str | Path | None) -> Any:
    """The project of ``start`` (None outside a project)."""
    from envbuilder.core.where import any_project_file

    if not any_project_file(start):  # no project file up to the root: the model is not loaded
        return None
    from envbuilder.core.project import find_project

    return find_project(start)


def _explain_cases_dir(start: str | Path | None) -> Path | None:
    """The current project's explain-cases folder (None outside a project)."""
    project = _project_of(start)
    return project.explain_cases_dir if project is not None else None


def explain_learn(log: str, *, category: str, fix: str, cause: str | None = None,
                  start: str | Path | None = None) -> LearnedCase:
    """Learn a team case from ``log`` into the project's explain-cases folder (the project of
    ``start``, default the current folder): the next log like it is explained."""
    from envbuilder.api.results import LearnedCase
    from envbuilder.diagnose.explain import CATEGORIES
    from envbuilder.diagnose.team import learn

    project = _project_of(start)
    if project is None:
        raise InputError("explain --learn keeps a team's cases in its project: run it inside a folder "
                         "with an envbuilder.toml (or pyproject.toml [tool.envbuilder])")
    return LearnedCase(**learn(log, category=category, fix=fix, cause=cause,
                             folder=project.explain_cases_dir, categories=CATEGORIES,
                             root=project.root))
