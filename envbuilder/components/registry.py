"""The components, in plan order (each module's ``ORDER``): torch's layer first (0), then each
compiled component's (10-30), the fabric (40), the team's compiled packages (80) and the team's
own packages last (90), so bumping a later one never rebuilds an earlier one. Built-in
components register when this module is first used; a test or a plugin adds one with
``register`` (``before`` places it)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Iterator

from envbuilder.components.base import Component

if TYPE_CHECKING:
    from envbuilder.core.resolve import Stack

_REGISTRY: list[Component] = []
_LOADED = False
# builds run in threads (build --all --jobs N): the first use loads the registry once, and no
# thread sees it half-filled
_LOCK = threading.RLock()
_LOADING = False  # the loading thread itself (a module that asks while it is imported) goes on


def _builtin() -> None:
    """Import every module of this package that declares a ``COMPONENT`` (and its ``ORDER``):
    adding a component is adding its module, never editing a list here."""
    global _LOADED, _LOADING
    if _LOADED:
        return
    with _LOCK:
        if _LOADED or _LOADING:
            return
        _LOADING = True
        try:
            _load()
            _LOADED = True
        finally:
            _LOADING = False


def _load() -> None:
    import importlib
    import pkgutil

    import envbuilder.components as pkg

    found = []
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        c = getattr(mod, "COMPONENT", None)
        if isinstance(c, Component):
            found.append((int(mod.ORDER), c.name, c))
    _REGISTRY.extend(c for _, _, c in sorted(found, key=lambda t: (t[0], t[1])))


def register(component: Component, *, before: str | None = None) -> Component:
    """Add ``component`` (after the others, or before the one named ``before``); a name is
    registered once."""
    _builtin()
    if not component.name or any(c.name == component.name for c in _REGISTRY):
        raise ValueError(f"component {component.name!r} has no name or is registered already")
    at = next((i for i, c in enumerate(_REGISTRY) if c.name == before), len(_REGISTRY))
    _REGISTRY.insert(at, component)
    return component


def unregister(name: str) -> None:
    _builtin()
    _REGISTRY[:] = [c for c in _REGISTRY if c.name != name]


def components() -> tuple[Component, ...]:
    _builtin()
    return tuple(_REGISTRY)


def get(name: str) -> Component:
    for c in components():
        if c.name == name:
            return c
    raise KeyError(f"no component {name!r} (known: {', '.join(c.name for c in components())})")


def active(stack: Stack) -> Iterator[Component]:
    """The components ``stack`` carries, in plan order."""
    return (c for c in components() if c.active(stack))
