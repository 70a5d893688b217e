"""``envbuilder matrix show AXIS``: one axis of the matrix as rows, each with its sources."""

from __future__ import annotations

from dataclasses import dataclass

from envbuilder.core.matrix import Matrix
from envbuilder.errors import InputError

AXES = ("cuda", "torch", "nccl", "os", "base_images", "deepspeed", "horovod", "incompatibilities")


@dataclass(frozen=True)
class AxisTable:
    axis: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    sources: tuple[tuple[str, ...], ...]  # one tuple of URLs per row

    def to_dict(self) -> dict:
        return {"axis": self.axis, "rows": [
            dict(zip(self.columns, r)) | {"source": list(s)} for r, s in zip(self.rows, self.sources)]}


def _j(values) -> str:
    return ", ".join(str(v) for v in values)


def show_axis(m: Matrix, axis: str) -> AxisTable:
    """The rows of one axis (InputError naming the axes when ``axis`` is not one)."""
    rows: list[tuple[str, ...]] = []
    srcs: list[tuple[str, ...]] = []
    cols: tuple[str, ...]
    if axis == "cuda":
        cols = ("toolkit", "driver_min", "minor_compat_driver")
        for tk in m.toolkits:
            mc = m.minor_compat.get(tk.version.major)
            rows.append((str(tk.version), tk.driver_min, mc.driver_min if mc else ""))
            srcs.append(tk.source)
    elif axis == "torch":
        cols = ("torch", "python", "pypi_default", "variant", "nccl", "nccl_package", "arch")
        for t in m.torch:
            for name, v in sorted(t.variants.items(), key=lambda kv: (len(kv[0]), kv[0])):
                rows.append((str(t.version), _j(t.python), t.pypi_default or "", name,
                             "" if v.nccl is None else str(v.nccl), v.nccl_package or "",
                             _j(v.arch)))
                srcs.append(t.source)
    elif axis == "nccl":
        cols = ("nccl", "cuda")
        for n in m.nccl:
            rows.append((str(n.version), _j(n.cuda)))
            srcs.append(n.source)
    elif axis == "os":
        cols = ("os", "image", "python_default", "python")
        for o in sorted(m.os.values(), key=lambda o: o.sort_key, reverse=True):
            rows.append((o.name, o.image, o.python_default, _j(
                f"{p} ({o.python[p].repo})" for p in sorted(o.python, key=lambda p: tuple(map(int, p.split("."))))))
            )
            srcs.append(o.source)
    elif axis == "base_images":
        cols = ("cuda", "os", "flavours", "cudnn", "removed")
        for b in m.base_images:
            rows.append((str(b.cuda), _j(b.os), _j(b.flavours), b.cudnn or "", str(b.removed).lower()))
            srcs.append(b.source)
    elif axis in ("deepspeed", "horovod"):
        cols = (axis, "requires")
        for c in m.component(axis).releases:
            rows.append((str(c.version), _j(f"{k} {s}" for k, s in c.requires.items())))
            srcs.append(c.source)
    elif axis == "incompatibilities":
        cols = ("id", "when", "severity", "fix")
        for x in m.incompatibilities:
            rows.append((x.id, _j(f"{k} {v}" for k, v in x.when.items()), x.severity, x.fix))
            srcs.append(x.source)
    else:
        from envbuilder.core import validate
        raise InputError(f"matrix axis {axis!r} is unknown{validate.suggest(axis, AXES)}; "
                         f"axes: {', '.join(AXES)}")
    return AxisTable(axis, cols, tuple(rows), tuple(srcs))


# -- filters: `matrix show torch --torch 2.6 --cuda 12.4` ------------------------------------
# which column of each axis a filter reads (a filter an axis has no column for is refused)
FILTER_COLUMNS: dict[str, dict[str, str]] = {
    "torch": {"torch": "torch", "python": "python", "cuda": "variant", "nccl": "nccl"},
    "cuda": {"cuda": "toolkit"},
    "nccl": {"nccl": "nccl", "cuda": "cuda"},
    "os": {"os": "os", "python": "python"},
    "base_images": {"cuda": "cuda", "os": "os"},
    "deepspeed": {"deepspeed": "deepspeed"},
    "horovod": {"horovod": "horovod"},
    "incompatibilities": {},
}


def _matches(cell: str, want: str, *, variant: bool = False) -> bool:
    """A release line matches its releases (``2.6`` matches ``2.6.0``, not ``2.60``); a list
    cell (``3.10, 3.11``) matches when one item does; ``cuda`` on torch's variant column
    matches ``cu124`` for ``12.4``."""
    if variant:
        parts = want.split(".")
        return cell == "cu" + "".join(parts[:2])
    for item in cell.split(", "):
        item = item.split(" ")[0]
        if item == want or item.startswith(want + ".") or (not want[:1].isdigit() and item.startswith(want)):
            return True
    return False


def filter_rows(t: AxisTable, filters: dict[str, str]) -> AxisTable:
    """The rows of ``t`` every filter matches (``{"torch": "2.6", "cuda": "12.4"}``)."""
    given = {k: v for k, v in filters.items() if v}
    cols = FILTER_COLUMNS.get(t.axis, {})
    for k in given:
        if k not in cols:
            raise InputError(f"matrix show {t.axis} cannot filter by --{k}: its filters are "
                             + (", ".join(f"--{c}" for c in cols) or "none"))
    keep = [i for i, r in enumerate(t.rows)
            if all(_matches(r[t.columns.index(cols[k])], v,
                            variant=(t.axis == "torch" and k == "cuda"))
                   for k, v in given.items())]
    return AxisTable(t.axis, t.columns, tuple(t.rows[i] for i in keep),
                     tuple(t.sources[i] for i in keep))
