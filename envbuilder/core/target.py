"""The target grammar: ``TARGET := BASE ("-" PART)*``.

BASE is ``cuXY[Z]`` (CUDA major+minor: cu118 = 11.8), ``cpu``, or ``any`` (the resolver picks
the CUDA: with ``--driver``, the newest stack the driver runs natively); each PART pins one axis:
``torch2.1`` / ``torch2.1.2``, ``py310`` / ``py3.10``, ``nccl2.18``, a component's tag and
version (the tags are the matrix's: core.catalog), or an OS name such as ``ubuntu22.04``. Options pin the same axes; a target part and an option
that disagree are an input error. Named aliases come from the matrix's ``targets.yaml``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping

from packaging.version import Version

from envbuilder.core import validate
from envbuilder.errors import InputError

if TYPE_CHECKING:  # annotations only: parsing a project's pins does not load the matrix
    from envbuilder.core.matrix import Matrix


@lru_cache(maxsize=1024)
def _version(text: str) -> Version:
    # a pin is matched against every candidate of a search: parse its text once
    return Version(text)


@dataclass(frozen=True)
class Pin:
    """A version pin: a release line (``2.1``) or an exact version (``2.1.2``)."""

    text: str
    exact: bool

    @classmethod
    def parse(cls, text: str, what: str, *, line_parts: int = 2) -> Pin:
        v = validate.version(text, what)
        return cls(text, len(v.release) > line_parts)

    def matches(self, v: Version) -> bool:
        pinned = _version(self.text)
        want = pinned.release
        if self.exact:
            return v.release[: len(want)] == want and pinned == _version(
                ".".join(map(str, v.release[: len(want)])))
        return v.release[: len(want)] == want

    def __str__(self) -> str:
        return self.text


FABRICS = ("ib", "efa", "none")
CORE_PINS = ("torch", "python", "nccl")  # the version axes besides the matrix's components


def ops_of(req: Request, matrix: Matrix) -> dict[str, tuple[str, ...]]:
    """The ops each component with ops pre-builds: the ones asked for (``--<tag>-ops``; none =
    JIT), else on a CUDA target that wants the component its default (core.catalog)."""
    out: dict[str, tuple[str, ...]] = {}
    for c in matrix.components:
        if not c.has_ops:
            continue
        if c.name in req.ops:
            out[c.name] = req.ops[c.name]
        elif not req.cpu and req.wants(c.name):
            out[c.name] = tuple(o for o in c.ops_default or () if o in c.ops)
        else:
            out[c.name] = ()
    return out


@dataclass(frozen=True)
class Request:
    """What the user asked for: pins per axis, the driver to run on, components to include."""

    target: str
    cuda: str | None = None  # "11.8"; None with cpu=True or when not given (check)
    cpu: bool = False
    torch: Pin | None = None
    python: Pin | None = None
    nccl: Pin | None = None
    os: str | None = None
    flavour: str | None = None  # the runtime base flavour (--flavour)
    driver: str | None = None
    with_: frozenset[str] = field(default_factory=frozenset)
    without: frozenset[str] = field(default_factory=frozenset)
    # each pinned component's version, by name (a target part or its --NAME option)
    versions: Mapping[str, Pin] = field(default_factory=dict, hash=False)
    # the ops a component with ops pre-builds (--<tag>-ops), by component; () = JIT (none); a
    # component left out gets its default on a CUDA target (ops_of)
    ops: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    exclude_newer: str | None = None  # RFC 3339 UTC: releases uploaded later are no candidates
    platform: str = "linux/amd64"  # the image's platform (--platform)
    fabric: str = "ib"  # the RDMA user space in CUDA images (--fabric): ib | efa | none

    def pins(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.cpu:
            out["cuda"] = "cpu"
        elif self.cuda:
            out["cuda"] = self.cuda
        for axis in (*CORE_PINS, *sorted(self.versions)):
            pin = self.pin(axis)
            if isinstance(pin, Pin):
                out[axis] = pin.text
        if self.os:
            out["os"] = self.os
        if self.flavour:
            out["flavour"] = self.flavour
        return out

    def pin(self, axis: str) -> Pin | str | None:
        """The pin of an axis: torch, python, nccl, os, or a component of the matrix."""
        if axis in (*CORE_PINS, "os"):
            return getattr(self, axis)  # type: ignore[no-any-return]
        return self.versions.get(axis)

    def pinned(self, axis: str, pin: Pin | str | None) -> Request:
        """This request with ``axis`` pinned to ``pin`` (None: not pinned)."""
        if axis in (*CORE_PINS, "os"):
            return replace(self, **{axis: pin})  # type: ignore[arg-type]
        versions = {k: v for k, v in self.versions.items() if k != axis}
        if isinstance(pin, Pin):
            versions[axis] = pin
        return replace(self, versions=dict(sorted(versions.items())))

    def wants(self, component: str) -> bool:
        return component not in self.without and (
            component in self.with_ or component in self.versions)

    def without_pin(self, axis: str) -> Request:
        if axis == "cuda":
            return replace(self, cuda=None, cpu=False)
        if axis in self.versions:
            return replace(self.pinned(axis, None), with_=self.with_ - {axis})
        return self.pinned(axis, None)

    def canonical(self, matrix: Matrix) -> str:
        """The target string that states every pin of this request."""
        parts = ["cpu" if self.cpu else ("cu" + self.cuda.replace(".", "") if self.cuda else "any")]
        if self.torch:
            parts.append(f"torch{self.torch}")
        if self.python:
            parts.append("py" + self.python.text.replace(".", ""))
        for name, pin in sorted(self.versions.items()):
            parts.append(f"{matrix.component(name).tag}{pin}")
        if self.nccl:
            parts.append(f"nccl{self.nccl}")
        if self.os:
            parts.append(self.os)
        return "-".join(parts)


_BASE_RE = re.compile(r"cu([0-9]{2,3})")
_PART_RES: list[tuple[str, re.Pattern[str]]] = [
    ("torch", re.compile(r"torch([0-9][0-9.]*)")),
    ("python", re.compile(r"py(3)\.?([0-9]{1,2})")),
    ("nccl", re.compile(r"nccl([0-9][0-9.]*)")),
]


def _part_res(matrix: Matrix) -> list[tuple[str, re.Pattern[str]]]:
    """The parts a target may have: torch, Python, each component's tag and NCCL."""
    comps = [(c.name, re.compile(re.escape(c.tag) + r"([0-9][0-9.]*)")) for c in matrix.components]
    return [*_PART_RES[:2], *comps, _PART_RES[2]]


_NAME_RE = re.compile(r"[a-z0-9][a-z0-9.-]{0,99}")


def cuda_from_base(base: str) -> str | None:
    m = _BASE_RE.fullmatch(base)
    if not m:
        return None
    digits = m.group(1)
    return f"{int(digits[:-1])}.{digits[-1]}"


def _nearest_cuda(cuda: str, matrix: Matrix) -> str:
    """' (did you mean cu118?)': the known CUDA version nearest below (else above) the one given."""
    want = Version(cuda)
    known = sorted(Version(c) for c in matrix.cuda_minors)
    below = [v for v in known if v < want]
    best = below[-1] if below else (known[0] if known else None)
    return f" (did you mean cu{best.major}{best.minor}?)" if best else ""


def _known_bases(matrix: Matrix) -> list[str]:
    return ["cpu"] + ["cu" + m.replace(".", "") for m in matrix.cuda_minors]


def parse_target(text: str, matrix: Matrix) -> Request:
    """Parse a target string (or an alias from targets.yaml, with parts added to it:
    ``cu121-torch2.5-ds`` is the alias ``cu121-ds`` with torch 2.5) into a Request."""
    if not isinstance(text, str) or _NAME_RE.fullmatch(text) is None:
        raise InputError(f"target {text!r} is not a target: expected e.g. cu118, "
                         f"cu121-torch2.1-py310 or cpu-debian12")
    try:
        return _parse_target(text, matrix)
    except InputError:
        via = _alias_with_parts(text, matrix)
        if via is None:
            raise
        return via


def _alias_with_parts(text: str, matrix: Matrix) -> Request | None:
    """``text`` as an alias of several parts (``cu121-ds``) whose parts it holds in order,
    plus pins for its other parts; None when no alias fits."""
    parts = text.split("-")
    best: tuple[list[int], str] | None = None
    for alias in matrix.targets:
        want = alias.name.split("-")
        if len(want) < 2 or alias.name == text:
            continue
        at, i = [], 0
        for w in want:
            while i < len(parts) and parts[i] != w:
                i += 1
            if i == len(parts):
                break
            at.append(i)
            i += 1
        if len(at) == len(want) and (best is None or len(at) > len(best[0])):
            best = (at, alias.name)
    if best is None:
        return None
    req = _parse_target(best[1], matrix)
    for j, part in enumerate(parts):
        if j in best[0]:
            continue
        axis, pin = _parse_part(part, text, matrix)
        current = req.pin(axis)
        if current is not None and str(current) != str(pin):
            raise InputError(f"target {text!r}: {part} conflicts with {current} in the alias "
                             f"{best[1]!r}")
        req = req.pinned(axis, pin)
    return replace(req, target=text)


def _parse_target(text: str, matrix: Matrix) -> Request:
    alias = matrix.alias(text)
    if alias is not None and (alias.target != text or alias.flavour or alias.ops):
        req = parse_target(alias.target, matrix) if alias.target != text else parse_target(
            text, replace(matrix, targets=tuple(t for t in matrix.targets if t.name != text)))
        req = replace(req, target=text)
        if alias.flavour or alias.ops:
            req = apply_options(req, matrix, flavour=alias.flavour,
                                **{k: ",".join(v) for k, v in alias.ops.items() if v})
        return req
    base, *parts = text.split("-")
    kw: dict[str, Any] = {"target": text}
    if base == "cpu":
        kw["cpu"] = True
    elif base == "any":
        pass  # no CUDA pin: the resolver picks one (or CPU)
    else:
        cuda = cuda_from_base(base)
        if cuda is not None and len(base) == 4:  # cu12: a major alone, not CUDA 1.2
            major = base[2:]
            minors = [c for c in matrix.cuda_minors if c.split(".")[0] == major]
            if minors:
                raise InputError(
                    f"target {text!r}: {base} names CUDA {major} without a minor version: give "
                    f"both, e.g. {', '.join('cu' + c.replace('.', '') for c in minors[:4])} (CUDA "
                    f"{major}.x in the matrix: {', '.join(minors)}), or any --driver VERSION to "
                    f"let the resolver pick what the driver runs")
        if cuda is None:
            names = _known_bases(matrix) + [t.name for t in matrix.targets]
            raise InputError(f"target {text!r}: unknown base {base!r}{validate.suggest(base, names)}; "
                             f"a target starts with cpu or cuXY (cu118 = CUDA 11.8)")
        if cuda not in matrix.cuda_minors:
            raise InputError(f"target {text!r}: CUDA {cuda} is not in the matrix"
                             f"{_nearest_cuda(cuda, matrix)}; known: {', '.join(_known_bases(matrix))}")
        kw["cuda"] = cuda
    req = Request(**kw)
    for part in parts:
        axis, pin = _parse_part(part, text, matrix)
        if req.pin(axis) is not None:
            raise InputError(f"target {text!r} pins {axis} twice")
        req = req.pinned(axis, pin)
    return req


def _parse_part(part: str, text: str, matrix: Matrix) -> tuple[str, Pin | str]:
    for axis, rx in _part_res(matrix):
        m = rx.fullmatch(part)
        if m:
            if axis == "python":
                return axis, Pin(f"{m.group(1)}.{m.group(2)}", exact=False)
            return axis, Pin.parse(m.group(1), f"target {text!r}: {axis} version")
    if part in matrix.os:
        return "os", part
    tags = [c.tag for c in matrix.components]
    choices = ["torch2.1", "py310", *(f"{c.tag}{c.releases[0].line}" for c in matrix.components if c.releases),
               "nccl2.18", *matrix.os]
    raise InputError(f"target {text!r}: unknown part {part!r}{validate.suggest(part, choices)}; "
                     f"parts are torchX.Y[.Z], pyXY, {''.join(t + 'X.Y, ' for t in tags)}ncclX.Y or an OS "
                     f"({', '.join(sorted(matrix.os))})")


def _put(req: Request, updates: dict[str, Any], axis: str, value: Any) -> None:
    current = req.pin(axis) if axis != "cuda" else req.cuda
    if current is not None and str(current) != str(value):
        raise InputError(f"--{axis} {value} conflicts with {current} in target {req.target!r}: "
                         f"give the version once")
    if axis in (*CORE_PINS, "os", "cuda"):
        updates[axis] = value
    else:
        updates["versions"] = {**updates.get("versions", req.versions), axis: value}


def _flavour(req: Request, m: Matrix, v: str, up: dict[str, Any]) -> None:
    names = [f.name for f in m.toolchains.flavours]
    if v not in names:
        raise InputError(f"--flavour {v!r} is not a base flavour"
                         f"{validate.suggest(v, names)}; known: {', '.join(names)}")
    up["flavour"] = v


def _fabric(req: Request, m: Matrix, v: str, up: dict[str, Any]) -> None:
    if v not in FABRICS:
        raise InputError(f"--fabric {v[:40]!r} is not a fabric{validate.suggest(v, FABRICS)}; "
                         f"known: {', '.join(FABRICS)}")
    up["fabric"] = v


def _ops(component: str) -> Any:
    """The check of a component's ``--<tag>-ops`` (comma-separated op names, or none: JIT)."""
    def apply(req: Request, m: Matrix, v: str, up: dict[str, Any]) -> None:
        c = m.component(component)
        flag = f"--{c.ops_option.replace('_', '-')}"
        ops: tuple[str, ...] = ()
        if v.strip() != "none":  # none: JIT (the runtime must carry nvcc; the component refuses otherwise)
            ops = tuple(dict.fromkeys(o.strip() for o in v.split(",") if o.strip()))
        for op in ops:
            if op not in c.ops:
                raise InputError(f"{flag}: {op[:40]!r} is not a {c.title} op envbuilder can pre-build"
                                 f"{validate.suggest(op, c.ops)}; known: {', '.join(c.ops)}")
        if ops and c.name in req.without:
            raise InputError(f"{flag} conflicts with --without {c.name}")
        up["ops"] = {**up.get("ops", req.ops), c.name: ops}
        if ops:  # pre-built ops imply their component
            up["with_"] = up.get("with_", req.with_) | {c.name}

    return apply


def _cuda(req: Request, m: Matrix, v: str, up: dict[str, Any]) -> None:
    if v == "cpu":
        up["cpu"] = True
        return
    ver = validate.version(v, "--cuda")
    c = f"{ver.major}.{ver.minor}" if len(ver.release) >= 2 else None
    if c is None or c not in m.cuda_minors:
        raise InputError(f"--cuda {v} is not in the matrix{_nearest_cuda(c or v, m)}; known: "
                         f"{', '.join(m.cuda_minors)}")
    _put(req, up, "cuda", c)


def _version_pin(axis: str) -> Any:
    def apply(req: Request, m: Matrix, v: str, up: dict[str, Any]) -> None:
        _put(req, up, axis, Pin.parse(v, f"--{axis}"))

    return apply


def _python(req: Request, m: Matrix, v: str, up: dict[str, Any]) -> None:
    if validate.free_threaded_python(v):
        _put(req, up, "python", Pin(v, exact=False))  # "3.14t": matched by name (rules, unknown_pins)
        return
    ver = validate.version(v, "--python")
    if len(ver.release) < 2:
        raise InputError(f"--python {v!r} is not a Python version: give major.minor, e.g. 3.11")
    _put(req, up, "python", Pin(f"{ver.major}.{ver.minor}", exact=False))


def _os(req: Request, m: Matrix, v: str, up: dict[str, Any]) -> None:
    if v not in m.os:
        raise InputError(f"--os {v!r} is not in the matrix{validate.suggest(v, m.os)}; "
                         f"known: {', '.join(sorted(m.os))}")
    _put(req, up, "os", v)


def _components(req: Request, m: Matrix, v: Mapping[str, bool], up: dict[str, Any]) -> None:
    w, wo = set(up.get("with_", req.with_)), set(req.without)
    names = m.component_names
    for comp, on in v.items():
        if comp not in names:
            raise InputError(f"--with/--without {comp!r} is not a component"
                             f"{validate.suggest(comp, names)}; use {' or '.join(names)}")
        if on:
            w.add(comp)
            wo.discard(comp)
        else:
            if comp in req.versions or comp in up.get("versions", {}):
                raise InputError(f"--without {comp} conflicts with the {comp} pin in "
                                 f"target {req.target!r}")
            wo.add(comp)
            w.discard(comp)
    up["with_"], up["without"] = frozenset(w), frozenset(wo)


# each pin option's check and merge into a request (core.options: the pin options), in the
# order they are judged (the first bad one is the error); a component's pin and its ops option
# come from the matrix (_appliers)
_APPLY: dict[str, Any] = {
    "flavour": _flavour, "fabric": _fabric, "cuda": _cuda, "torch": _version_pin("torch"),
    "nccl": _version_pin("nccl"), "python": _python,
    "os": _os, "driver": lambda req, m, v, up: up.update(driver=validate.driver_version(v)),
    "exclude_newer": lambda req, m, v, up: up.update(exclude_newer=validate.exclude_newer(v)),
    "platform": lambda req, m, v, up: up.update(platform=validate.platform(v)),
    "components": _components,
}


def _appliers(m: Matrix) -> dict[str, Any]:
    """The table above with the matrix's components, in the order they are judged."""
    head = ("flavour", "fabric")
    ops = {c.ops_option: _ops(c.name) for c in m.components if c.has_ops}
    pins = {c.name: _version_pin(c.name) for c in m.components}
    return {**{k: _APPLY[k] for k in head}, **ops, "cuda": _APPLY["cuda"], "torch": _APPLY["torch"],
            **pins, **{k: v for k, v in _APPLY.items() if k not in (*head, "cuda", "torch")}}


def apply_options(req: Request, matrix: Matrix, **values: Any) -> Request:
    """Merge pin options (core.options' pins by name, ``cuda``, and ``components``: the merged
    --with/--without) into a request; a conflict with the target is an input error."""
    table = _appliers(matrix)
    unknown = set(values) - set(table)
    if unknown:
        raise InputError(f"no pin option {', '.join(sorted(unknown))} for this matrix (its components: "
                         f"{', '.join(matrix.component_names) or 'none'})")
    updates: dict[str, Any] = {}
    for name, apply in table.items():
        value = values.get(name)
        if value is not None and (name != "components" or value):
            apply(req, matrix, value, updates)
    return replace(req, **updates)


def known_values(axis: str, matrix: Matrix) -> list[Version]:
    """Every version the matrix knows for an axis (what a pin may match)."""
    if axis == "torch":
        return [t.version for t in matrix.torch]
    if axis == "python":
        return [Version(p) for p in matrix.pythons]
    if axis in matrix.component_names:
        return [c.version for c in matrix.component(axis).releases]
    if axis == "nccl":
        vs = {n.version for n in matrix.nccl}
        vs |= {v.nccl for t in matrix.torch for v in t.variants.values() if v.nccl}
        return sorted(vs, reverse=True)
    raise KeyError(axis)


def unknown_pins(req: Request, matrix: Matrix) -> dict[str, Pin]:
    """The pins that match no version the matrix lists, by axis."""
    out: dict[str, Pin] = {}
    for axis in ("torch", "python", *matrix.component_names, "nccl"):
        pin = req.pin(axis)
        assert pin is None or isinstance(pin, Pin)
        if axis == "python" and pin is not None and pin.text.endswith("t"):
            if pin.text not in matrix.pythons_ft:
                out[axis] = pin
            continue
        if pin is not None and not any(pin.matches(v) for v in known_values(axis, matrix)):
            out[axis] = pin
    return out


def check_pins_known(req: Request, matrix: Matrix) -> None:
    """A pin the matrix has never heard of is bad input (exit 2), not an incompatibility."""
    names = {"torch": "torch", "python": "Python", **{c.name: c.title for c in matrix.components},
             "nccl": "NCCL"}
    for axis, pin in unknown_pins(req, matrix).items():
        label = names[axis]
        if axis == "python" and pin.text.endswith("t"):
            ft = ", ".join(matrix.pythons_ft) or "none"
            raise InputError(f"free-threaded Python {pin.text} has no torch wheels in the matrix "
                             f"(free-threaded Pythons with torch wheels: {ft}); use one of them, "
                             f"or Python {pin.text[:-1]}")
        known = known_values(axis, matrix)
        lines = list(dict.fromkeys(f"{v.major}.{v.minor}" for v in known))
        near = validate.suggest(pin.text, lines)
        raise InputError(f"{label} {pin.text} is not in the matrix{near}; known {label} releases: "
                         f"{', '.join(lines[:12])}{' ...' if len(lines) > 12 else ''}")


@dataclass(frozen=True)
class Pins:
    """Options that pin axes (the same axes a target's parts pin): the CLI's pin options. A
    component's pin (``--NAME``) and ops (``--<tag>-ops``) are kept by name (``Pins.of``)."""

    torch: str | None = None
    python: str | None = None
    nccl: str | None = None
    os: str | None = None
    driver: str | None = None
    with_: tuple[str, ...] = ()
    without: tuple[str, ...] = ()
    flavour: str | None = None  # the runtime base flavour
    exclude_newer: str | None = None  # leave out releases uploaded after this date (ISO)
    platform: str | None = None  # linux/amd64 (default) or linux/arm64
    fabric: str | None = None  # the RDMA user space of CUDA images: ib (default), efa, none
    # a component's pin or ops option (core.options: its name, or <tag>_ops) -> its value
    components: Mapping[str, str] = field(default_factory=dict, hash=False)

    @classmethod
    def of(cls, **values: Any) -> Pins:
        """Pins from option names: the fields above, and any other pin option of the table
        (a component's ``NAME`` or ``<tag>_ops``) kept in ``components``."""
        own = {f.name for f in fields(cls)} - {"components"}
        comps = {k: v for k, v in values.items() if k not in own and v is not None}
        return cls(**{k: v for k, v in values.items() if k in own}, components=dict(sorted(comps.items())))

    def get(self, name: str) -> Any:
        """The value of pin option ``name`` (None or () when not given)."""
        if name in self.components:
            return self.components[name]
        return getattr(self, name, None)

    def values(self) -> dict[str, Any]:
        """Every pin option given or not, by the option table's names."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "components"}
        return {**out, **self.components}

    def with_components(self) -> dict[str, bool]:
        from envbuilder.core.options import with_without

        return with_without(self.with_, self.without)


def request(target: str, matrix: Matrix, pins: Pins | None = None) -> Request:
    """The request a target name and the pin options make together."""
    pins = pins or Pins()
    req = parse_target(target, matrix)
    given = {k: v for k, v in pins.values().items() if k not in ("with_", "without")}
    return apply_options(req, matrix, components=pins.with_components(), **given)
