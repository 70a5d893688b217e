"""Known-bad releases (advisories) and the driver branch lifecycle, as questions on the matrix.

An advisory (``incompatibilities.yaml`` ``advisories:``) names a component, an affected range
(a PEP 440 specifier, read with ``packaging``), the fixed release, a severity and a symptom.
It is not a refusal: the resolver prefers the fixed release when nothing pins the bad one
(severities in ``AVOIDED``) and warns whenever the stack, or the host's driver, is affected.

``advisories_for(facts, matrix)`` is the one question every caller asks: ``facts`` maps a
component to a version (``{"nccl": "2.29.2", "driver": "595.71.05"}``), as a stack, a host or
a log gives them; ``stack_facts(stack)`` makes those facts from a resolved stack. ``explain``
can rank an advisory's symptom first when a log's facts show the affected version.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Iterable, Mapping

from packaging.version import InvalidVersion, Version

from envbuilder.core.matrix import Advisory, DriverBranch, Matrix

AVOIDED = ("critical", "high")  # severities the resolver steers around when it can
SEVERITY_ORDER = {"critical": 0, "high": 1, "medium": 2, "low": 3}
# the stack axis each component is read from (cublas and driver are facts only)
AXIS_OF = {"torch": "torch", "nccl": "nccl", "cuda": "cuda"}  # and each component of the matrix


def _valid(version: str) -> bool:
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def advisories_for(facts: Mapping[str, str | None], matrix: Matrix) -> list[Advisory]:
    """The advisories whose affected range holds the version ``facts`` gives for their
    component, most severe first. Unknown components and unparsable versions match nothing."""
    out = [a for a in matrix.advisories
           if (v := facts.get(a.component)) and _valid(str(v)) and a.covers(str(v))]
    return sorted(out, key=lambda a: (SEVERITY_ORDER.get(a.severity, 9), a.id))


def _gpu_pattern(entry: str) -> re.Pattern[str]:
    # "RTX 50xx" is a family: each x one digit; words match whole ("V100" is not "V1000")
    words = [re.escape(w).replace("xx", r"\d\d").replace("x", r"\d") if re.fullmatch(r"\d+x+", w)
             else re.escape(w) for w in entry.split()]
    return re.compile(r"(?<![A-Za-z0-9])" + r"\s+".join(words) + r"(?![A-Za-z0-9])", re.IGNORECASE)


def applies_to_gpus(a: Advisory, gpu_names: Iterable[str]) -> bool:
    """Whether advisory ``a`` concerns a host with these GPUs: always when it names no GPUs
    (``gpus:``, e.g. "RTX 5080, RTX 5090" or "RTX 50xx") or the GPUs are unknown, else when one
    GPU's name holds one of those it names ("NVIDIA GeForce RTX 5090" holds "RTX 5090")."""
    names = [n for n in gpu_names if n]
    if not a.gpus or not names:
        return True
    pats = [_gpu_pattern(e.strip()) for e in a.gpus.split(",") if e.strip()]
    return any(p.search(n) for p in pats for n in names)


def value_version(axis: str, value: Any) -> str | None:
    """The version of one assignment value (a Toolkit, TorchRelease, NcclRelease, ...)."""
    if value is None:
        return None
    v = getattr(value, "version", None)
    return None if v is None else str(v)


def stack_facts(stack: Any) -> dict[str, str]:
    """The component versions of a resolved ``Stack`` (and its request's driver)."""
    facts: dict[str, str] = {}
    for comp, axis in {**AXIS_OF, **{c: c for c in stack.matrix.component_names}}.items():
        v = value_version(axis, stack.assignment.get(axis))
        if v:
            facts[comp] = v
    if getattr(stack.request, "driver", None):
        facts["driver"] = stack.request.driver
    return facts


def describe(a: Advisory) -> str:
    fixed = f"fixed in {a.fixed}" if a.fixed else "no fixed release yet"
    gpus = f" ({a.gpus})" if a.gpus else ""
    return f"{a.component} {a.affected}: {a.symptom}{gpus}; {fixed}"


# -- driver branches ------------------------------------------------------------------------

def branch_of(driver: str, matrix: Matrix) -> DriverBranch | None:
    """The lifecycle entry of a driver's branch (R580 for 580.65.06), if the matrix has it."""
    try:
        major = Version(driver).release[0]
    except (InvalidVersion, IndexError):
        return None
    return next((b for b in matrix.driver_branches if b.branch == major), None)


def branch_status(driver: str, matrix: Matrix, today: dt.date | None = None) -> dict[str, Any] | None:
    """``{"branch", "designation", "eol", "eol_passed", "oldest_supported", "source"}`` for the
    driver's branch, or None when the matrix does not list it."""
    b = branch_of(driver, matrix)
    today = today or dt.date.today()
    supported = [x for x in matrix.driver_branches
                 if (today.year, today.month) <= tuple(int(y) for y in x.eol.split("-"))
                 and x.designation != "new feature"]
    oldest = min(supported, key=lambda x: x.branch).branch if supported else None
    if b is None:
        # NVIDIA: "All other previous driver branches not listed in the table above ... are end
        # of life": a branch the matrix does not list, older than every listed one, is past it
        try:
            major = Version(driver).release[0]
        except (InvalidVersion, IndexError):
            return None
        if oldest is None or major >= oldest:
            return None
        first = min(supported, key=lambda x: x.branch)
        return {"branch": major, "designation": "not in NVIDIA's support table", "eol": None,
                "eol_passed": True, "oldest_supported": oldest, "source": list(first.source)}
    year, month = (int(x) for x in b.eol.split("-"))
    passed = (today.year, today.month) > (year, month)
    return {"branch": b.branch, "designation": b.designation, "eol": b.eol,
            "eol_passed": passed, "oldest_supported": oldest, "source": list(b.source)}


def driver_eol_warning(driver: str, matrix: Matrix, today: dt.date | None = None) -> str | None:
    """One sentence when the driver's branch is past its end of life, else None."""
    st = branch_status(driver, matrix, today)
    if st is None or not st["eol_passed"]:
        return None
    oldest = f"; R{st['oldest_supported']} is the oldest supported branch" if st["oldest_supported"] else ""
    when = f"reached end of life in {st['eol']}" if st["eol"] else \
        "is end of life (NVIDIA: every branch older than those in its support table is)"
    return (f"driver {driver} is on branch R{st['branch']} ({st['designation']}), which {when}: "
            f"no more security or bug fixes{oldest} [source: {st['source'][0]}]")
