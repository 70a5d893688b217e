"""The command line's side of the option table (envbuilder.core.options): each
option's typer.Option made from its row, and the decorator that adds a group of them to a
command and hands it one ``over`` (the command line's layer of the cascade, core.spec: the
values given by the option table's names) instead of many parameters."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from envbuilder import SMOKE_TIMEOUT
# the table itself (pure data, stdlib only): the one import of core the CLI makes, so that
# `--help` and completion stay as light as before (pyproject.toml: the thin-CLI contract)
from envbuilder.core.options import BY_NAME as OPTIONS_BY_NAME, GROUPS as OPTION_GROUPS, OPTIONS
# the built-in matrix's components (core.catalog), by name, and their names in sentences
from envbuilder.core.options import COMPONENT_TITLES as COMPONENT_TITLES
from envbuilder.core.options import COMPONENTS as COMPONENTS
from envbuilder.core.options import COMPONENT_CHECKS

# the components as the commands' help names them (their titles joined by "and"), and what
# verify checks of each (core.options.COMPONENT_CHECKS)
COMPONENT_NAMES = " and ".join(COMPONENT_TITLES[c] for c in COMPONENTS)
COMPONENT_CHECKED = ", ".join(COMPONENT_CHECKS[c] for c in sorted(COMPONENTS, reverse=True))


def complete_target(incomplete: str) -> list[str]:
    """Shell completion: built-in targets, cuXYZ bases, the project's target names, parts."""
    from envbuilder.api import complete

    return complete("target", incomplete)


def complete_axis(incomplete: str) -> list[str]:
    from envbuilder.api import complete

    return complete("axis", incomplete)


def complete_flavour(incomplete: str) -> list[str]:
    from envbuilder.api import complete

    return complete("flavour", incomplete)


CASCADE = " (cascade: the command line > the project's target > the project > the defaults; see README: Which value wins)"

MatrixOpt = typer.Option(None, "--matrix", metavar="DIR",
                         help="A matrix folder to use instead of the built-in one (replaces it entirely).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document for machines.")
BackendOpt = typer.Option("auto", "--backend", help="auto, nccl or gloo.")
ShmOpt = typer.Option("2g", "--shm-size", help="The containers' /dev/shm size, e.g. 2g (NCCL's shared-memory transport needs room).")
SmokeTimeoutOpt = typer.Option(SMOKE_TIMEOUT, "--smoke-timeout", min=5,
                               help="Seconds before a collective of the smoke job counts as hung (smoke --timeout).")

_ANNOTATION = {"str": Optional[str], "csv": Optional[str], "int": Optional[int],
               "float": Optional[float], "bool": bool, "path": Optional[Path],
               "requirements": Optional[Path], "list": Optional[List[str]]}
_COMPLETE = {"flavour": complete_flavour}


def _typer_option(opt: Any) -> tuple[Any, Any]:
    """(annotation, typer.Option) of one row of the option table (core.options.OPTIONS)."""
    extra: dict[str, Any] = {}
    if opt.metavar:
        extra["metavar"] = opt.metavar
    if opt.min is not None:
        extra["min"] = opt.min
    if opt.complete:
        extra["autocompletion"] = _COMPLETE[opt.complete]
    elif "enum" in opt.schema:  # the values the table allows complete themselves
        values = tuple(opt.schema["enum"])
        extra["autocompletion"] = lambda incomplete: [v for v in values if v.startswith(incomplete)]
    default = False if opt.value == "bool" else None
    return _ANNOTATION[opt.value], typer.Option(default, opt.flag, help=opt.help, **extra)


# the table's options that have a flag, by their parameter's name: (annotation, typer option)
_OPTIONS: dict[str, tuple[Any, Any]] = {o.param_name: _typer_option(o) for o in OPTIONS if o.flag}
# the pin options `check` takes one by one
# (each component's pin: spec_options(*COMPONENTS))
(TorchOpt, PythonOpt, NcclOpt, OsOpt, DriverOpt, FlavourOpt) = (
    _OPTIONS[n][1] for n in ("torch", "python", "nccl", "os_", "driver", "flavour"))
GROUPS = {g: tuple(OPTIONS_BY_NAME[n].param_name for n in names if OPTIONS_BY_NAME[n].flag)
          for g, names in OPTION_GROUPS.items()}


def given(values: dict[str, Any]) -> dict[str, Any]:
    """The command line's values (by parameter name) by the option table's names: the
    command line's layer of the cascade (core.options.given keeps the values given)."""
    return {o.fields[0]: values[o.param_name] for o in OPTIONS if o.param_name in values}


def spec_options(*groups: str, before: str | None = None) -> Callable[[Callable], Callable]:
    """Add the options of ``groups`` (GROUPS, or one option by its parameter's name) to a
    command that takes ``over``: the wrapper collects them into one mapping. They go before
    the parameter ``before`` (default: ``matrix`` or ``as_json``)."""
    unknown = [g for g in groups if g not in GROUPS and g not in _OPTIONS]
    if unknown:
        raise KeyError(f"spec_options: no group or option {', '.join(unknown)}")
    names = [n for g in groups for n in GROUPS.get(g, (g,))]

    def deco(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.name != "over"]
        at = next((i for i, p in enumerate(params)
                   if p.name in ((before,) if before else ("matrix", "as_json"))), len(params))
        added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=_OPTIONS[n][1],
                                   annotation=_OPTIONS[n][0]) for n in names]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs["over"] = given({n: kwargs.pop(n, None) for n in names})
            return fn(*args, **kwargs)

        wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[:at]]
            + added + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[at:]])
        wrapper.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "over"}
        return wrapper

    return deco
