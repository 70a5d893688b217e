"""One jinja2 Environment per template set for the whole process.

There is no bytecode cache on disk (there was: jinja2's FileSystemBytecodeCache, whose entries
are marshalled code objects that run when loaded, so whoever could write the cache folder could
run code in envbuilder). The templates are compiled ahead of time into modules of the package
instead (envbuilder/render/precompiled.py: a wheel carries them; a checkout compiles them once
into a cache folder only its user can write); benchmarks/render.py measures what a render costs.
"""

from __future__ import annotations

from typing import Any, Callable

_ENVS: dict[tuple, Any] = {}


def environment(key: tuple, make: Callable[[], Any]) -> Any:
    """One jinja2 Environment per ``key`` for the whole process: its templates are loaded once,
    not once per target (render --all renders many)."""
    env = _ENVS.get(key)
    if env is None:
        env = _ENVS[key] = make()
    return env
