"""One jinja2 Environment per template set for the whole process.

There is no bytecode cache on disk (there was: jinja2's FileSystemBytecodeCache, whose entries
are marshalled code objects that run when loaded, so whoever could write the cache folder could
run code in envbuilder). Templates are compiled once per process instead; benchmarks/render.py
measures what that costs (see docs/hostile-input.md).
"""

from __future__ import annotations

from typing import Any, Callable

_ENVS: dict[tuple, Any] = {}


def environment(key: tuple, make: Callable[[], Any]) -> Any:
    """One jinja2 Environment per ``key`` (and cache setting) for the whole process: its
    templates are loaded once, not once per target (render --all renders many)."""
    from envbuilder.core import matrix_cache

    full = (key, matrix_cache.disabled(), str(matrix_cache.cache_dir()))
    env = _ENVS.get(full)
    if env is None:
        env = _ENVS[full] = make()
    return env
