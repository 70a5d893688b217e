"""Smoke-job layouts: NNODES x NPROC_PER_NODE, as ``render --layout``, ``smoke --layout`` and the
cluster job files spell them (``2x8`` is two nodes of eight ranks, one GPU per rank).

* ``parse_layout("2x8") -> (2, 8)``: positive integers joined by ``x``; 1..MAX_NODES nodes and
  1..MAX_PER_NODE ranks per node (the largest GPU servers carry 16 GPUs; 64 leaves room for
  CPU-only runs, and the caps keep a typo such as ``2x80000`` from rendering a job nobody meant).
* ``parse_layouts(["1x8,2x8", "4x4"])``: every layout given (repeated options and/or commas),
  each once, all of one world size (one smoke job, laid out several ways).
* ``Layout``: the one type for every layout question (smoke's ``--layout``, the multi-node
  runner, the metrics' ``layout`` label, render's layouts): ranks on each node, in node order;
  ``Layout.parse("2x8")`` and ``Layout.parse("7,5")``, ``str()`` gives ``2x8`` for an even
  layout (``8,8`` is ``2x8``) and ``7,5`` for an uneven one.
* ``default_layouts(world)``: ``1xWORLD`` plus, for each common node size (8 and 4 GPUs), the
  layout with the most ranks per node that fits it: 12 -> 1x12, 2x6 (8-GPU nodes), 3x4 (4-GPU
  nodes); 16 -> 1x16, 2x8, 4x4; 8 -> 1x8, 2x4.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from envbuilder.errors import InputError

MAX_NODES = 1024
MAX_PER_NODE = 64
NODE_SIZES = (8, 4)  # GPUs per node the default job files are laid out for (besides one node)
EXAMPLE = "2x8 (2 nodes x 8 ranks each)"

_LAYOUT = re.compile(r"([0-9]{1,6})[xX]([0-9]{1,6})")
_UNEVEN = re.compile(r"\s*[0-9]{1,6}(\s*,\s*[0-9]{1,6})+\s*")  # smoke's "7,5": ranks per node


@dataclass(frozen=True)
class Layout:
    """Ranks on each node, in node order: even (every node the same, ``2x8``) or uneven
    (``7,5``: a smoke job in containers only; job files run even layouts)."""

    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.counts) <= MAX_NODES:
            raise InputError(f"a layout needs 1..{MAX_NODES} nodes, not {len(self.counts)}")
        if any(not 1 <= c <= MAX_PER_NODE for c in self.counts):
            raise InputError(f"a layout needs 1..{MAX_PER_NODE} ranks on every node: "
                             f"{','.join(map(str, self.counts))}")

    @classmethod
    def even(cls, nnodes: int, per_node: int, what: str = "--layout") -> Layout:
        check(nnodes, per_node, what)
        return cls((per_node,) * nnodes)

    @classmethod
    def parse(cls, text: str, what: str = "--layout") -> Layout:
        """``2x8`` (NNODES x NPROC_PER_NODE) or ``7,5`` (ranks on each node); anything else is
        an InputError naming the input and both forms."""
        s = str(text).strip()
        if _LAYOUT.fullmatch(s):
            return cls.even(*parse_layout(s, what), what=what)
        if _UNEVEN.fullmatch(s) or s.isdigit():
            counts = tuple(int(x) for x in s.split(","))
            if any(c < 1 for c in counts):
                raise InputError(f"{what} {text!r}: every node needs at least one rank")
            return cls(counts)
        raise InputError(f"{what} {text!r} is neither NNODESxNPROC_PER_NODE (e.g. 2x2) "
                         f"nor ranks per node (e.g. 7,5)")

    @property
    def nnodes(self) -> int:
        return len(self.counts)

    @property
    def world(self) -> int:
        return sum(self.counts)

    @property
    def is_even(self) -> bool:
        return len(set(self.counts)) == 1

    @property
    def pair(self) -> tuple[int, int]:
        """(nodes, ranks per node) of an even layout; an uneven one has none (InputError)."""
        if not self.is_even:
            raise InputError(f"layout {self} is uneven: it has no NNODESxNPROC_PER_NODE form")
        return self.nnodes, self.counts[0]

    def __str__(self) -> str:
        return fmt(self.pair) if self.is_even else ",".join(map(str, self.counts))


def parse_layout(text: str, what: str = "--layout") -> tuple[int, int]:
    """``"2x8"`` -> ``(2, 8)``; anything else is an InputError naming the input and an example."""
    s = str(text).strip()
    m = _LAYOUT.fullmatch(s)
    if not m:
        raise InputError(f"{what} {text!r} is not NNODES x NPROC_PER_NODE: give e.g. {EXAMPLE}")
    n, p = int(m.group(1)), int(m.group(2))
    check(n, p, what)
    return n, p


def check(n: int, p: int, what: str = "--layout") -> tuple[int, int]:
    if not 1 <= n <= MAX_NODES:
        raise InputError(f"{what} {n}x{p}: nodes must be 1..{MAX_NODES}, e.g. {EXAMPLE}")
    if not 1 <= p <= MAX_PER_NODE:
        raise InputError(f"{what} {n}x{p}: ranks per node must be 1..{MAX_PER_NODE}, e.g. {EXAMPLE}")
    return n, p


def fmt(layout: tuple[int, int]) -> str:
    return f"{layout[0]}x{layout[1]}"


def parse_layouts(texts: Iterable[str], what: str = "--layout") -> tuple[tuple[int, int], ...]:
    """Every layout in ``texts`` (each may be comma-separated), in order; duplicates and layouts
    of different world sizes are refused (the job files all run one smoke job)."""
    out: list[tuple[int, int]] = []
    for text in texts:
        if _UNEVEN.fullmatch(str(text)):
            counts = Layout.parse(str(text), what)
            if counts.is_even:  # 8,8,8,8: four nodes of eight ranks, an even layout
                if counts.pair in out:
                    raise InputError(f"{what} {counts} is given twice")
                out.append(counts.pair)
                continue
            raise InputError(
                f"{what} {text!r} is ranks per node (an uneven split): the job files run even "
                f"layouts only (PyTorchJob, indexed Jobs and srun start the same number of ranks "
                f"on every node); give NNODESxNPROC_PER_NODE, e.g. {EXAMPLE}. `envbuilder smoke "
                f"IMAGE --layout {text}` runs an uneven split in containers")
        parts = str(text).split(",")
        for part in parts:
            lay = parse_layout(part, what)
            if lay in out:
                raise InputError(f"{what} {fmt(lay)} is given twice")
            out.append(lay)
    if not out:
        raise InputError(f"{what} names no layout: give e.g. {EXAMPLE}")
    worlds = {n * p for n, p in out}
    if len(worlds) > 1:
        shown = ", ".join(f"{fmt(lay)}={lay[0] * lay[1]}" for lay in out)
        raise InputError(f"{what} layouts run different world sizes ({shown} ranks): the job files "
                         f"all run one smoke job, give layouts of one size (e.g. 1x16,2x8,4x4)")
    return tuple(out)


def world_of(layouts: Iterable[tuple[int, int]]) -> int:
    sizes = {n * p for n, p in layouts}
    if len(sizes) != 1:
        raise InputError("layouts of different world sizes")
    return sizes.pop()


def default_layouts(world: int) -> tuple[tuple[int, int], ...]:
    """One node of ``world`` ranks (when a node can carry that many) plus, for each common node
    size, the even split with the most ranks per node that fits it."""
    if not isinstance(world, int) or world < 1 or world > MAX_NODES * MAX_PER_NODE:
        raise InputError(f"--nproc {world!r} must be 1..{MAX_NODES * MAX_PER_NODE}")
    out: list[tuple[int, int]] = []
    if world <= MAX_PER_NODE:
        out.append((1, world))
    for size in NODE_SIZES:
        if world <= size and out:
            continue  # one node of this size already carries the whole job
        d = max(d for d in range(1, min(size, world) + 1) if world % d == 0)
        lay = (world // d, d)
        if lay not in out and lay[0] <= MAX_NODES:
            out.append(lay)
    if not out:
        raise InputError(f"--nproc {world} has no layout of at most {MAX_NODES} nodes x "
                         f"{MAX_PER_NODE} ranks: give --layout NNODES x NPROC_PER_NODE")
    return tuple(out)


__all__ = ["Layout", "parse_layout", "parse_layouts", "default_layouts", "world_of", "fmt", "check",
           "MAX_NODES", "MAX_PER_NODE", "NODE_SIZES"]
