"""What changes between two sets of pinned Python packages: the one package diff that
``envbuilder diff``, ``lock --upgrade`` and ``lock --check`` print.

A side is ``{canonical name: version}``; the diff lists the packages added, removed and
changed (with the direction: up or down), sorted by name, as plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class PackageDiff:
    added: dict[str, str] = field(default_factory=dict)  # name -> version in B only
    removed: dict[str, str] = field(default_factory=dict)  # name -> version in A only
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (A, B)
    unchanged: int = 0

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def to_dict(self) -> dict[str, Any]:
        return {"added": dict(self.added), "removed": dict(self.removed),
                "changed": {k: {"from": a, "to": b, "direction": direction(a, b)}
                            for k, (a, b) in self.changed.items()},
                "unchanged": self.unchanged}

    def lines(self) -> list[str]:
        """One line per change: ``+ name 1.0``, ``- name 1.0``, ``~ name 1.0 -> 2.0``."""
        out = [f"+ {n} {v}" for n, v in self.added.items()]
        out += [f"- {n} {v}" for n, v in self.removed.items()]
        out += [f"~ {n} {a} -> {b}" + (" (downgrade)" if direction(a, b) == "down" else "")
                for n, (a, b) in self.changed.items()]
        return sorted(out, key=lambda s: s.split()[1])

    def summary(self) -> str:
        return (f"{len(self.added)} added, {len(self.removed)} removed, "
                f"{len(self.changed)} changed, {self.unchanged} unchanged")


def direction(a: str, b: str) -> str:
    try:
        va, vb = Version(a), Version(b)
    except InvalidVersion:
        return "changed"
    return "up" if vb > va else "down" if vb < va else "same"


def package_diff(a: Mapping[str, str], b: Mapping[str, str]) -> PackageDiff:
    """The packages added, removed and changed from ``a`` to ``b`` (names canonicalised)."""
    ca = {canonicalize_name(k): v for k, v in a.items()}
    cb = {canonicalize_name(k): v for k, v in b.items()}
    return PackageDiff(
        added={k: cb[k] for k in sorted(cb.keys() - ca.keys())},
        removed={k: ca[k] for k in sorted(ca.keys() - cb.keys())},
        changed={k: (ca[k], cb[k]) for k in sorted(ca.keys() & cb.keys()) if ca[k] != cb[k]},
        unchanged=sum(1 for k in ca.keys() & cb.keys() if ca[k] == cb[k]))


def pinned(lines: Iterable[str]) -> dict[str, str]:
    """``{name: version}`` of the ``name==version`` lines among requirement lines (others,
    unpinned or ranges, are left out)."""
    out: dict[str, str] = {}
    for ln in lines:
        spec = ln.split(";")[0].split("#")[0].strip()
        if "==" in spec and not any(c in spec for c in "<>!~,"):
            name, ver = spec.split("==", 1)
            out[canonicalize_name(name.split("[")[0].strip())] = ver.strip()
    return out
