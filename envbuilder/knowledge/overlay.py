"""``matrix verify --write-overlay DIR``: the releases the indexes have and the matrix lacks,
written as a matrix overlay (``--matrix-overlay DIR`` loads it) that a maintainer reviews.

Each candidate is a whole overlay entry: a new release of a line the matrix lists is that
line's entry with the version added (an overlay entry replaces the built-in one with the same
key), a new line copies the newest line's constraints. Every candidate carries the index URL
it was read from as ``source:`` and a ``note:`` saying what was copied and must be reviewed
(the driver floor of a new toolkit, the variants of a new torch line, ...).
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

from envbuilder.core.matrix import Matrix, minor
from envbuilder.core.options import COMPONENTS
from envbuilder.render import yamlemit

_REVIEW = "candidate written by envbuilder matrix verify --write-overlay on {day}: review before merging"


def _raw(m: Matrix, name: str) -> dict[str, Any]:
    data = yaml.safe_load((m.path / name).read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _note(day: str, extra: str) -> str:
    return _REVIEW.format(day=day) + (f"; {extra}" if extra else "")


def _line_entry(entries: dict[str, dict[str, Any]], base: list[dict[str, Any]], line: str,
                version: str, src: str, day: str, what: str) -> None:
    """Add ``version`` to the candidate entry of ``line`` (a copy of the built-in entry, or
    of the newest line's for a new line)."""
    e = entries.get(line)
    if e is None:
        old = next((x for x in base if str(x.get("line")) == line), None)
        if old is not None:
            e = copy.deepcopy(old)
            e["note"] = _note(day, f"new {what} release(s) added to line {line}; the rest is the "
                                   f"built-in entry")
        else:
            newest = max(base, key=lambda x: Version(str(x["line"])), default=None)
            e = copy.deepcopy(newest) if newest else {}
            e["line"], e["versions"] = line, []
            e["note"] = _note(day, f"a new {what} line: its other fields are copied from line "
                                   f"{newest.get('line') if newest else '?'}")
        e.pop("released", None)
        e["source"] = [src] + [s for s in _srcs(e.get("source")) if s != src]
        entries[line] = e
    if version not in e["versions"]:
        e["versions"].append(version)
        e["versions"].sort(key=Version)


def _srcs(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def overlay_files(rep: Any, m: Matrix, today: dt.date | None = None) -> dict[str, str]:
    """The overlay files (name -> YAML text) for the report's ``new`` findings."""
    day = (today or dt.date.today()).isoformat()
    raw = {n: _raw(m, n) for n in ("torch.yaml", *(f"{c}.yaml" for c in COMPONENTS))}
    torch_lines: dict[str, dict[str, Any]] = {}
    comp_lines: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in COMPONENTS}
    toolkits: list[dict[str, Any]] = []
    nccl: list[dict[str, Any]] = []
    for f in rep.of("new"):
        src = f.index_url
        if f.entry.startswith("torch ") and f.field == "release":
            v = f.entry.split()[1]
            _line_entry(torch_lines, raw["torch.yaml"].get("releases", []), minor(Version(v)), v,
                        src, day, "torch")
        elif f.entry.startswith("torch ") and f.field == "variant":
            _, v, variant = f.entry.split()[:3]
            line = minor(Version(v))
            _line_entry(torch_lines, raw["torch.yaml"].get("releases", []), line, v, src, day, "torch")
            torch_lines[line].setdefault("variants", {}).setdefault(variant, {
                "note": _note(day, f"{variant} seen on {src}; NCCL and arch not read")})
        elif f.entry.split()[0] in comp_lines and f.field == "release":
            name, v = f.entry.split()[:2]
            _line_entry(comp_lines[name], raw[f"{name}.yaml"].get("releases", []),
                        minor(Version(v)), v, src, day, name)
        elif f.entry.startswith("NCCL"):
            v = f.entry.split()[-1]
            major = re.search(r"cu([0-9]+)", f.entry)
            nccl.append({"version": v, "cuda": [major.group(1) if major else "12"], "source": src,
                         "note": _note(day, "built for every CUDA minor of that major (the "
                                            "package name's); check NVIDIA's release notes")})
        elif f.entry.startswith("CUDA "):
            v = f.entry.split()[-1]
            floor = m.minor_compat.get(Version(v).major)
            table3 = f.field == "toolkit" and bool(f.index)
            entry = {"version": v, "driver_min": f.index if table3 else (floor.driver_min if floor else "0"),
                     "source": src,
                     "note": _note(day, "driver_min from Table 3" if table3 else
                                   "driver_min is the major's minor-version compatibility floor: "
                                   "set the toolkit's own floor")}
            old_tk = next((t for t in toolkits if t["version"] == v), None)
            if old_tk is None:
                toolkits.append(entry)
            elif table3:  # Table 3's floor beats the placeholder; both sources kept
                old_tk.update(driver_min=entry["driver_min"], note=entry["note"],
                              source=[src] + _srcs(old_tk["source"]))
    out: dict[str, str] = {}

    def dump(name: str, key: str, items: list[dict[str, Any]]) -> None:
        if items:
            out[name] = ("# " + _REVIEW.format(day=day) + "\n"
                         + yamlemit.dump({"schema_version": 1, key: items}, width=100))
    dump("torch.yaml", "releases", list(torch_lines.values()))
    for c in COMPONENTS:
        dump(f"{c}.yaml", "releases", list(comp_lines[c].values()))
    dump("nccl.yaml", "releases", nccl)
    dump("cuda.yaml", "toolkits", toolkits)
    return out


def write_overlay(rep: Any, m: Matrix, dest: str | Path, today: dt.date | None = None) -> list[str]:
    """Write the candidate overlay into ``dest`` (atomically, never over a file envbuilder did
    not write); returns the file names written (none when nothing is new)."""
    from envbuilder._fs import write_tree

    files = overlay_files(rep, m, today)
    if files:
        write_tree(dest, files, group="overlay", step="write overlay", prune=False,
                   option="--write-overlay")
    return sorted(files)
