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
