"""The job kinds, as a table (Spack's ``@writer`` registry): every module of this package that
declares a ``KIND`` (a ``base.JobKind``: a file of ``jobs/``) or a ``RUN`` (a ``base.RunKind``:
what the files run, the smoke job or the team's command) is registered when the table is first
used, in the order of their ``order``. ``render.jobs.render_jobs`` loops over it and names no kind.

Adding a kind is its module (here, or anywhere: ``register``) and its template; a kind outside
the package brings its own template folder (``JobKind.templates``). ``tests/test_jobkinds.py``
registers a toy kind from the test folder alone.
"""

from __future__ import annotations

import threading
from typing import Union

from envbuilder.render.jobkinds.base import JobKind, RunKind

Entry = Union[JobKind, RunKind]
_KINDS: list[JobKind] = []
_RUNS: list[RunKind] = []
_LOADED = False
_LOCK = threading.RLock()


def _builtin() -> None:
    global _LOADED
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        import importlib
        import pkgutil

        import envbuilder.render.jobkinds as pkg

        for info in pkgutil.iter_modules(pkg.__path__):
            if info.name == "base":
                continue
            mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
            for attr, table in (("KIND", _KINDS), ("RUN", _RUNS)):
                entry = getattr(mod, attr, None)
                if entry is not None:
                    table.append(entry)  # type: ignore[arg-type]
        _KINDS.sort(key=_key)
        _RUNS.sort(key=_key)
        _LOADED = True


def _key(e: Entry) -> tuple[int, str]:
    return (e.order, e.name)


def register(entry: Entry) -> Entry:
    """Add a kind or a run (a name is registered once), placed by its ``order``."""
    _builtin()
    table: list = _KINDS if isinstance(entry, JobKind) else _RUNS
    if not entry.name or any(e.name == entry.name for e in table):
        raise ValueError(f"job kind {entry.name!r} has no name or is registered already")
    table.append(entry)
    table.sort(key=_key)
    return entry


def unregister(name: str) -> None:
    _builtin()
    _KINDS[:] = [k for k in _KINDS if k.name != name]
    _RUNS[:] = [r for r in _RUNS if r.name != name]


def kinds() -> tuple[JobKind, ...]:
    _builtin()
    return tuple(_KINDS)


def runs() -> tuple[RunKind, ...]:
    _builtin()
    return tuple(_RUNS)


def get(name: str) -> JobKind:
    for k in kinds():
        if k.name == name:
            return k
    raise KeyError(f"no job kind {name!r} (known: {', '.join(k.name for k in kinds())})")


__all__ = ["JobKind", "RunKind", "register", "unregister", "kinds", "runs", "get"]
