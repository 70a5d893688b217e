"""Parameter coercion without pydantic for the plain types the CLI uses.

typer (0.2x) coerces every parameter through a pydantic ``TypeAdapter`` built at parse time:
importing pydantic and building ~25 adapters is about a third of a short command's CPU time
(benchmarks/render.py). ``install()`` wraps typer's ``build_runtime_param`` so that a value
typer would turn into the same thing anyway is handled directly:

- ``str`` given a ``str``: the value itself (what typer's str adapter returns);
- ``int``/``float`` given that type already (a default), within ``min``/``max``;
- ``Path`` given a ``str``: ``Path(value)``, then typer's own path checks (``coerce_cli_path``);
- ``List[str]`` given strings: a list of them.

Anything else (another type, a parser, clamp, an int given as text, a value that does not fit)
goes to typer's own adapter, unchanged, errors included. When typer's internals are not the
ones expected, nothing is installed and typer works as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

_installed = False
_original: Any = None  # typer's own build_runtime_param, once installed


def install() -> None:
    global _installed, _original
    if _installed:
        return
    try:
        import typer.core as tcore
        from typer._coercion import RuntimeParam
        from typer._param_types import coerce_cli_path
    except ImportError:
        return
    original: Any = getattr(tcore, "build_runtime_param", None)
    if original is None or not isinstance(RuntimeParam, type):
        return

    @dataclass(frozen=True)
    class _Direct(RuntimeParam):  # type: ignore[misc,valid-type]
        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            done, result = _direct(self.annotation, self.parameter_info, value, param, ctx)
            if done:
                return result
            return original(self.descriptor)._coerce_value(value, param=param, ctx=ctx)

    def _direct(annotation: Any, info: Any, value: Any, param: Any, ctx: Any) -> tuple[bool, Any]:
        if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
            return False, None
        if annotation is str and type(value) is str:
            return True, value
        if annotation in (int, float) and type(value) is annotation and not info.clamp:
            if (info.min is None or value >= info.min) and (info.max is None or value <= info.max):
                return True, value
            return False, None
        if annotation is Path and type(value) is str and value and info.path_type is None:
            return True, coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
        if (get_origin(annotation) is list and get_args(annotation) == (str,)
                and isinstance(value, (list, tuple)) and all(type(v) is str for v in value)):
            return True, list(value)
        return False, None

    def build(descriptor: Any) -> Any:
        if descriptor.file_annotation is not None:
            return original(descriptor)
        return _Direct(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                       descriptor=descriptor)

    tcore.build_runtime_param = build
    _original = original
    _installed = True

