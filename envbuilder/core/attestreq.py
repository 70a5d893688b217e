"""What a team can demand of the smoke attestation: one grammar for ``[jobs] admission require``
(the rendered admission policies) and ``verify IMAGE --key PUB --require``.

A requirement is ``NAME=VALUE``, or ``NAME>=NUMBER`` for the numeric names, where NAME is one of
REQUIRABLE (``backend=nccl``, ``transport=ib``, ``world_size>=12``, ``floor_pct>=80``: the lowest
percentage of the published busbw floor any size reached) or a dotted path of the smoke predicate
compared for equality (``layout.world_size=12``, ``ok=true``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from envbuilder.errors import InputError

# name -> (its path in the smoke predicate, its kind: word, int or pct)
REQUIRABLE: dict[str, tuple[tuple[str, ...], str]] = {
    "backend": (("backend",), "word"),  # nccl, gloo
    "device": (("device", "kind"), "word"),  # cuda, cpu
    "transport": (("transport", "fabric_used"), "word"),  # ib, roce, efa, socket, none, tcp
    "world_size": (("layout", "world_size"), "int"),
    "nnodes": (("layout", "nnodes"), "int"),
    "floor_pct": (("bandwidth_floor", "rows"), "pct"),
}
WORDS = {"backend": ("nccl", "gloo"), "device": ("cuda", "cpu"),
         "transport": ("ib", "roce", "efa", "socket", "none", "tcp")}
_REQ = re.compile(r"([a-z_][a-z0-9_]{0,40}(?:\.[a-z_][a-z0-9_]{0,40}){0,7})(>=|=)"
                  r"([A-Za-z0-9_.:/+-]{1,128})\Z")
_NUMBER = re.compile(r"[0-9]{1,9}(\.[0-9]{1,6})?\Z")


@dataclass(frozen=True)
class Requirement:
    """One demand on the smoke predicate: the field's path, ``=`` or ``>=``, the value."""

    text: str  # as the team wrote it (its name, or the dotted path)
    path: tuple[str, ...]
    op: str
    value: Any
    kind: str  # word, int, pct, or any (a dotted path compared for equality)

    def check(self, pred: Any) -> tuple[bool, Any]:
        """(met, the value the attestation holds)."""
        got = pred
        for k in self.path:
            got = got.get(k) if isinstance(got, dict) else None
        if self.kind == "pct":
            pcts = [float(r["percent"]) for r in got or () if isinstance(r, dict)
                    and isinstance(r.get("percent"), (int, float))]
            low = min(pcts) if pcts else None
            return low is not None and low >= float(self.value), low
        if got is None:
            return False, None
        if self.op == ">=":
            return isinstance(got, (int, float)) and got >= self.value, got
        return got == self.value, got

    def cue(self) -> str:
        """The requirement as a CUE constraint on the predicate (policy-controller)."""
        head = "predicate: " + ": ".join(self.path)
        if self.kind == "pct":  # at least one row, every row at or above the percentage
            v = f"{self.value:g}"
            return f"{head}: [{{percent: >={v}}}, ...{{percent: >={v}}}]\n"
        return f"{head}: {'>=' if self.op == '>=' else ''}{json.dumps(self.value)}\n"

    def cel(self, var: str) -> str:
        """The requirement as a CEL expression over ``var`` (the predicate; Kyverno)."""
        field = ".".join((var, *self.path))
        if self.kind == "pct":
            return f"(size({field}) > 0 && {field}.all(r, r.percent >= {self.value:g}))"
        return f"{field} {'>=' if self.op == '>=' else '=='} {json.dumps(self.value)}"


def _value(text: str) -> Any:
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?[0-9]{1,15}", text):
        return int(text)
    return text


def read(text: Any) -> Requirement | str:
    """``"backend=nccl"`` as a Requirement, or why it is not one."""
    m = _REQ.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        return (f"give FIELD=VALUE or FIELD>=NUMBER, FIELD one of {', '.join(REQUIRABLE)} or a "
                f"dotted path of the smoke attestation (e.g. backend=nccl, transport=ib, "
                f"floor_pct>=80, layout.world_size=12)")
    name, op, raw = m.groups()
    if name not in REQUIRABLE:
        if op != "=":
            return f">= takes one of {', '.join(n for n, (_, k) in REQUIRABLE.items() if k != 'word')}"
        return Requirement(name, tuple(name.split(".")), "=", _value(raw), "any")
    path, kind = REQUIRABLE[name]
    if kind == "word":
        if op != "=" or raw not in WORDS[name]:
            return f"{name}= takes one of {', '.join(WORDS[name])}"
        return Requirement(name, path, "=", raw, kind)
    if not _NUMBER.match(raw):
        return f"{name} is a number"
    if kind == "pct" and op != ">=":
        return "floor_pct takes >= (e.g. floor_pct>=80)"
    return Requirement(name, path, op, float(raw) if kind == "pct" else int(float(raw)), kind)


def parse(text: Any, what: str) -> Requirement:
    """``"backend=nccl"`` as a Requirement; InputError (exit 2) naming ``what`` otherwise."""
    got = read(text)
    if isinstance(got, str):
        raise InputError(f"{what} {str(text)[:60]!r}: {got}")
    return got


def shown(req: Requirement) -> str:
    """The requirement as the team writes it."""
    v = req.value
    text = ("true" if v else "false") if isinstance(v, bool) else (
        f"{v:g}" if isinstance(v, float) else str(v))
    return f"{req.text}{req.op}{text}"
