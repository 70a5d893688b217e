"""Bandwidth floors: the published all-reduce bus bandwidth a run is compared with.

``matrices/bandwidth.yaml`` (schema ``core.schema.BANDWIDTH``, read by ``core.matrix.load_floors``)
holds published busbw figures by GPU model, intra-node link, inter-node fabric, node count, GPUs per
node and message size, each with its source. ``Floors.lookup`` finds the entry for a run's layout
and ``compare`` puts each measured all-reduce size beside its figure: the percentage reached, and
a failure below ``fraction`` of it. Hardware or a layout without a published figure is said to be
unknown, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def size_bytes(key: str) -> int:
    """``"16GiB"`` -> 17179869184 (the schema admits only <n>KiB|MiB|GiB)."""
    m = re.fullmatch(r"([0-9]+)(KiB|MiB|GiB)", key)
    if m is None:
        raise ValueError(f"not a size: {key!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


def size_text(n: int) -> str:
    for unit in ("GiB", "MiB", "KiB"):
        if n >= _UNITS[unit] and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return f"{n}B"


@dataclass(frozen=True)
class Floor:
    """One published measurement series: a layout and its busbw by message size."""

    gpu: str
    names: tuple[str, ...]  # torch.cuda.get_device_name() of that GPU
    intra: str
    fabric: str  # none (one node), ib, roce, efa, socket
    nodes: int
    gpus_per_node: int
    busbw: Mapping[int, float]  # bytes -> GB/s
    source: tuple[str, ...]
    note: str = ""

    def describe(self) -> str:
        return (f"{self.nodes} x {self.gpus_per_node} {self.gpu} ({self.intra}"
                + (f", {self.fabric} between nodes" if self.fabric != "none" else "") + ")")


@dataclass(frozen=True)
class Floors:
    fraction: float
    rows: tuple[Floor, ...]
    path: Path | None = None

    @property
    def size(self) -> int:
        """How many (layout, size) figures the file holds."""
        return sum(len(f.busbw) for f in self.rows)

    def lookup(self, gpu_names: Sequence[str], *, fabric: str, nodes: int,
               gpus_per_node: int) -> tuple[Floor | None, str]:
        """(the entry for this run, "") or (None, why none applies)."""
        names = sorted(set(gpu_names))
        if not names:
            return None, "the records name no GPU model (records of an older envbuilder, or a CPU run)"
        if len(names) > 1:
            return None, f"the ranks ran on different GPU models ({', '.join(names)})"
        same = [f for f in self.rows if names[0] in f.names]
        if not same:
            return None, (f"unknown hardware: no published figure for {names[0]} in "
                          f"matrices/bandwidth.yaml")
        for f in same:
            if f.nodes == nodes and f.gpus_per_node == gpus_per_node and f.fabric == fabric:
                return f, ""
        known = "; ".join(f.describe() for f in same)
        return None, (f"no published figure for {nodes} node(s) x {gpus_per_node} {names[0]}"
                      + (f" over {fabric}" if fabric != "none" else "") + f" (known: {known})")


def build(data: Mapping[str, Any], path: Path | None = None) -> Floors:
    """Typed floors from a file already checked against its schema."""
    rows = []
    for f in data["floors"]:
        src = f["source"]
        rows.append(Floor(gpu=f["gpu"], names=tuple(f["names"]), intra=f["intra"], fabric=f["fabric"],
                          nodes=int(f["nodes"]), gpus_per_node=int(f["gpus_per_node"]),
                          busbw={size_bytes(k): float(v) for k, v in f["busbw_gbps"].items()},
                          source=(src,) if isinstance(src, str) else tuple(src),
                          note=str(f.get("note", ""))))
    return Floors(fraction=float(data["floor_fraction"]), rows=tuple(rows), path=path)


def compare(rows: Sequence[Mapping[str, Any]], floor: Floor, fraction: float) -> list[dict[str, Any]]:
    """Each measured all-reduce size that has a published figure: measured busbw, the figure, the
    percentage reached and whether it is at least ``fraction`` of it."""
    out = []
    for r in rows:
        if r.get("collective", "all_reduce") != "all_reduce":
            continue
        n = int(r.get("bytes", 0))
        if n not in floor.busbw:
            continue
        want = floor.busbw[n]
        got = float(r.get("busbw_gbps", 0.0))
        pct = round(100.0 * got / want, 1)
        out.append({"bytes": n, "size": size_text(n), "busbw_gbps": got, "published_gbps": want,
                    "floor_gbps": round(want * fraction, 3), "percent": pct,
                    "ok": got >= want * fraction})
    return out
