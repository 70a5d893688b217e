"""The templates' compiled form, kept in the user's cache folder (jinja2's bytecode cache)."""

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


def bytecode_cache() -> Any:  # jinja2.BytecodeCache | None
    """Compiled templates kept in the user's cache folder (next to the matrix cache), so a
    template is compiled once, not on every call. jinja2 checks each entry against the
    template's source; an entry that cannot be read or written is skipped (the template is
    compiled as before). None when ENVBUILDER_NO_CACHE=1 or the folder is not this user's."""
    import os

    import jinja2

    from envbuilder.core import matrix_cache

    if matrix_cache.disabled():
        return None
    folder = matrix_cache.cache_dir() / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.stat(folder)
        if st.st_mode & 0o022 or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
            return None
    except OSError:
        return None

    class _Quiet(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket):  # type: ignore[no-untyped-def]
            try:
                super().load_bytecode(bucket)
            except Exception:  # noqa: BLE001 - a bad entry is a miss
                bucket.reset()

        def dump_bytecode(self, bucket):  # type: ignore[no-untyped-def]
            try:
                super().dump_bytecode(bucket)
            except Exception:  # noqa: BLE001 - an unwritable folder only costs time
                pass

    return _Quiet(str(folder))
