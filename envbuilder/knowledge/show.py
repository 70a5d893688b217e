"""``envbuilder matrix show AXIS``: one axis of the matrix as rows, each with its sources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from envbuilder.core.matrix import Matrix, python_key
from envbuilder.core.options import COMPONENTS
from envbuilder.errors import InputError

AXES = ("cuda", "torch", "nccl", "os", "base_images", *COMPONENTS, "incompatibilities",
        "advisories", "drivers")


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


# one axis's columns and its rows, each with the sources it comes from
_Row = tuple[tuple[str, ...], tuple[str, ...]]
_Rows = tuple[tuple[str, ...], list[_Row]]


def _cuda_rows(m: Matrix, axis: str) -> _Rows:
    rows: list[_Row] = []
    for tk in m.toolkits:
        mc = m.minor_compat.get(tk.version.major)
        rows.append(((str(tk.version), tk.driver_min, mc.driver_min if mc else ""), tk.source))
    return ("toolkit", "driver_min", "minor_compat_driver"), rows


def _torch_rows(m: Matrix, axis: str) -> _Rows:
    rows: list[_Row] = []
    for t in m.torch:
        for name, v in sorted(t.variants.items(), key=lambda kv: (len(kv[0]), kv[0])):
            rows.append(((str(t.version), _j(t.python + t.python_ft), t.pypi_default or "", name,
                          "" if v.nccl is None else str(v.nccl), v.nccl_package or "",
                          _j(v.arch)), t.source))
    return ("torch", "python", "pypi_default", "variant", "nccl", "nccl_package", "arch"), rows


def _nccl_rows(m: Matrix, axis: str) -> _Rows:
    return ("nccl", "cuda"), [((str(n.version), _j(n.cuda)), n.source) for n in m.nccl]


def _os_rows(m: Matrix, axis: str) -> _Rows:
    return ("os", "image", "python_default", "python"), [
        ((o.name, o.image, o.python_default,
          _j(f"{p} ({o.python[p].repo})" for p in sorted(o.python, key=python_key))), o.source)
        for o in sorted(m.os.values(), key=lambda o: o.sort_key, reverse=True)]


def _base_image_rows(m: Matrix, axis: str) -> _Rows:
    return ("cuda", "os", "flavours", "cudnn", "removed"), [
        ((str(b.cuda), _j(b.os), _j(b.flavours), b.cudnn or "", str(b.removed).lower()), b.source)
        for b in m.base_images]


def _component_rows(m: Matrix, axis: str) -> _Rows:
    comp = m.component(axis)
    return (axis, "requires", "status"), [
        ((str(c.version), _j(f"{k} {s}" for k, s in c.requires.items()),
          "legacy" if comp.legacy else ""), c.source)
        for c in comp.releases]


def _incompatibility_rows(m: Matrix, axis: str) -> _Rows:
    return ("id", "when", "severity", "fix"), [
        ((x.id, _j(f"{k} {v}" for k, v in x.when.items()), x.severity, x.fix), x.source)
        for x in m.incompatibilities]


def _advisory_rows(m: Matrix, axis: str) -> _Rows:
    return ("id", "component", "affected", "fixed", "severity", "symptom"), [
        ((a.id, a.component, str(a.affected), a.fixed or "", a.severity,
          a.symptom + (f" ({a.gpus})" if a.gpus else "")), a.source)
        for a in m.advisories]


def _driver_rows(m: Matrix, axis: str) -> _Rows:
    return ("branch", "designation", "eol", "max_cuda_major"), [
        ((f"R{br.branch}", br.designation, br.eol,
          "" if br.max_cuda_major is None else str(br.max_cuda_major)), br.source)
        for br in m.driver_branches]


_AXIS_ROWS: dict[str, Callable[[Matrix, str], _Rows]] = {
    "cuda": _cuda_rows, "torch": _torch_rows, "nccl": _nccl_rows, "os": _os_rows,
    "base_images": _base_image_rows, **{c: _component_rows for c in COMPONENTS},
    "incompatibilities": _incompatibility_rows, "advisories": _advisory_rows,
    "drivers": _driver_rows,
}


def show_axis(m: Matrix, axis: str) -> AxisTable:
    """The rows of one axis (InputError naming the axes when ``axis`` is not one)."""
    rows_of = _AXIS_ROWS.get(axis)
    if rows_of is None:
        from envbuilder.core import validate
        raise InputError(f"matrix axis {axis!r} is unknown{validate.suggest(axis, AXES)}; "
                         f"axes: {', '.join(AXES)}")
    cols, rows = rows_of(m, axis)
    return AxisTable(axis, cols, tuple(r for r, _ in rows), tuple(tuple(s) for _, s in rows))


# -- filters: `matrix show torch --torch 2.6 --cuda 12.4` ------------------------------------
# which column of each axis a filter reads (a filter an axis has no column for is refused)
FILTER_COLUMNS: dict[str, dict[str, str]] = {
    "torch": {"torch": "torch", "python": "python", "cuda": "variant", "nccl": "nccl"},
    "cuda": {"cuda": "toolkit"},
    "nccl": {"nccl": "nccl", "cuda": "cuda"},
    "os": {"os": "os", "python": "python"},
    "base_images": {"cuda": "cuda", "os": "os"},
    **{c: {c: c} for c in COMPONENTS},
    "incompatibilities": {},
    "advisories": {},
    "drivers": {},
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
