"""Shell completion values (``envbuilder --install-completion``): targets (the built-in ones,
``cuXYZ`` bases, the project's target names, and the parts a target takes after a ``-``),
matrix axes and base flavours. Read from the matrix (its cache makes this cheap); never raises:
a completion that cannot be computed offers nothing."""

from __future__ import annotations

from typing import Callable

from envbuilder.core.matrix import FLAVOURS, Matrix, load_matrix
from envbuilder.core.options import COMPONENTS
from envbuilder.knowledge.show import AXES


def _matrix() -> Matrix | None:
    try:
        return load_matrix(None)
    except Exception:  # noqa: BLE001 - completion must never fail the shell
        return None


def target_parts(m: Matrix) -> list[str]:
    """The parts a target takes after its base: torchX.Y, pyX.Y, each component's (dsX.Y...), OS names."""
    parts: list[str] = []
    for t in m.torch:
        parts.append(f"torch{t.line}")
    for t in m.torch[:1]:
        parts += [f"py{py.replace('.', '')}" for py in t.python]
    for c in COMPONENTS:
        parts += [f"{m.component(c).tag}{r.line}" for r in m.component(c).releases]
    parts += list(m.os)
    return list(dict.fromkeys(parts))


def targets(incomplete: str, project_names: list[str] | None = None) -> list[str]:
    m = _matrix()
    names = list(project_names or [])
    if m is not None:
        names += [a.name for a in m.targets]
        names += ["cu" + c.replace(".", "") for c in m.cuda_minors] + ["cpu"]
        if "-" in incomplete:
            head = incomplete.rsplit("-", 1)[0]
            names += [f"{head}-{p}" for p in target_parts(m)]
    return [n for n in dict.fromkeys(names) if n.startswith(incomplete)]


def axes(incomplete: str) -> list[str]:
    return [a for a in AXES if a.startswith(incomplete)]


def flavours(incomplete: str) -> list[str]:
    return [f for f in FLAVOURS if f.startswith(incomplete)]


KINDS: dict[str, Callable[[str], list[str]]] = {"axis": axes, "flavour": flavours}
