"""The components, in plan order: torch's layer first (0), then each matrix component's (the
``order`` of its file, matrices/<name>.yaml: 1-79), the fabric (40), the team's compiled
packages (80) and the team's own packages last (90), so bumping a later one never rebuilds an
earlier one. A component without a matrix file has its place in its module (``ORDER``).
Built-in components register when this module is first used; a test or a plugin adds one with
``register``; ``active(stack)`` orders them by the stack's matrix."""

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
            _place(c, getattr(mod, "ORDER", None))
            found.append(c)
    _REGISTRY.extend(sorted(found, key=lambda c: (c.module_order, c.name)))


def _place(component: Component, order: int | None) -> None:
    """A component's place when no stack says it: its module's ORDER, else (a component with
    an axis) its built-in matrix file's order."""
    if order is None and component.axis is not None:
        from envbuilder.core import catalog

        order = next((c.order for c in catalog.builtin() if c.name == component.axis), None)
    if order is not None:
        component.module_order = int(order)


def register(component: Component, *, before: str | None = None) -> Component:
    """Add ``component`` (after the others, or before the one named ``before``); a name is
    registered once."""
    _builtin()
    if not component.name or any(c.name == component.name for c in _REGISTRY):
        raise ValueError(f"component {component.name!r} has no name or is registered already")
    _place(component, None)
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
    """The components ``stack`` carries, in plan order (a matrix component's order is its
    file's, in the stack's matrix)."""
    return iter(sorted((c for c in components() if c.active(stack)), key=lambda c: c.order(stack)))
