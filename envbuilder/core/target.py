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


CORE_PINS = ("torch", "python", "nccl")  # the version axes besides the matrix's components


def ops_of(req: Request, matrix: Matrix) -> dict[str, tuple[str, ...]]:
    """The ops each component with ops pre-builds: the ones asked for (``--<tag>-ops``; none =
    JIT), else on a target that wants the component its default (the component line's
    ``ops_default``, ``ops_default_cpu`` on a cpu target)."""
    out: dict[str, tuple[str, ...]] = {}
    for c in matrix.components:
        if not c.has_ops:
            continue
        if c.name in req.ops:
            out[c.name] = req.ops[c.name]
        elif req.wants(c.name):
            defaults = c.ops_default_cpu if req.cpu else c.ops_default or ()
            out[c.name] = tuple(o for o in defaults if o in c.ops)
        else:
            out[c.name] = ()
    return out


def _ops_value(value: Any) -> tuple[str, ...]:
    """A component's ops as a tuple: ``"a,b"`` (the command line's), a list (the project
    file's), ``none`` or ``()``: none pre-built (JIT)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    ops = tuple(dict.fromkeys(str(o).strip() for o in items if str(o).strip()))
    return () if ops == ("none",) else ops


def _ops_option(component: str) -> str:
    """The option that names a component's ops (``ds_ops``: the built-in matrix's tag)."""
    from envbuilder.core.options import OPS_OPTIONS

    return next((o for o, c in OPS_OPTIONS.items() if c == component), f"{component}_ops")


@dataclass(frozen=True)
class Pins:
    """The pins of a target, in the one typed form the resolver reads: the axes a target's
    parts pin and the pin options of core.options (``--torch``, a component's ``--NAME`` and
    ``--<tag>-ops``, ``--with``, ``--driver`` ...). Checked when made (``__post_init__``): a
    value as the command line or a project file gives it (``"2.1"``, ``"fused_adam,cpu_adam"``)
    passes its option's check, naming where it came from (``origin``), and is kept in its typed
    form (a ``Pin``, a tuple); a typed value is kept as it is. What only the matrix can say (is
    the OS, the flavour, the component, the op known; does a pin agree with the target's) is
    judged when the pins meet a target (``request``). ``Pins.of`` takes the option table's
    names."""

    torch: Pin | None = None
    python: Pin | None = None
    nccl: Pin | None = None
    os: str | None = None
    driver: str | None = None
    with_: tuple[str, ...] = ()
    without: tuple[str, ...] = ()
    flavour: str | None = None  # the runtime base flavour
    platform: str | None = None  # linux/amd64 (the default) or linux/arm64
    fabric: str | None = None  # the RDMA user space of CUDA images: ib (the default), efa, none
    # each pinned component's version (its --NAME option or a target part), by name
    versions: Mapping[str, Pin] = field(default_factory=dict, hash=False)
    # the ops a component pre-builds (--<tag>-ops), by component; () = none (JIT); a component
    # left out gets its default on a CUDA target (ops_of)
    ops: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    # where each option's value came from ("--torch", or the project file's key), for the errors
    origin: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        from envbuilder.core.options import check_value

        for f in fields(Pins):
            value = getattr(self, f.name)
            if f.name == "versions":
                value = {n: check_value(n, v, self.origin) for n, v in sorted(value.items())}
            elif f.name == "ops":
                value = {n: _ops_value(v) for n, v in sorted(value.items())}
            elif f.name != "origin" and value is not None and value != ():
                value = check_value(f.name, value, self.origin)
            object.__setattr__(self, f.name, value)
        for name in self.with_:
            if name in self.without:
                raise InputError(f"--with {name} and --without {name} contradict each other")

    @classmethod
    def of(cls, origin: Mapping[str, str] | None = None, **values: Any) -> Pins:
        """Pins from the option table's names (core.options: a component's ``NAME`` and
        ``<tag>_ops`` too; any other name is a component's version pin, which the matrix must
        know); None means not given."""
        from envbuilder.core.options import OPS_OPTIONS

        own = {f.name for f in fields(Pins)} - {"versions", "ops", "origin"}
        kw = {k: v for k, v in values.items() if k in own and v is not None}
        rest = {k: v for k, v in values.items() if k not in own and v is not None}
        return cls(**kw, origin=dict(origin or {}),
                   versions={k: v for k, v in rest.items() if k not in OPS_OPTIONS},
                   ops={OPS_OPTIONS[k]: v for k, v in rest.items() if k in OPS_OPTIONS})

    def get(self, name: str) -> Any:
        """The value of pin option ``name`` (None or () when not given)."""
        from envbuilder.core.options import OPS_OPTIONS

        if name in OPS_OPTIONS:
            return self.ops.get(OPS_OPTIONS[name])
        if name in _SCALARS:
            return getattr(self, name)
        return self.versions.get(name)

    def as_options(self) -> dict[str, Any]:
        """Every pin option, given or not, by the option table's names, as the command line
        spells its value (a version's text, ``fused_adam,cpu_adam``, ``none``; lists as tuples)."""
        out = {n: getattr(self, n) for n in _SCALARS}
        out = {k: str(v) if isinstance(v, Pin) else v for k, v in out.items()}
        comps = {**{n: str(p) for n, p in self.versions.items()},
                 **{_ops_option(n): ",".join(o) or "none" for n, o in self.ops.items()}}
        return {**out, **dict(sorted(comps.items()))}

    def layer(self) -> dict[str, Any]:
        """The pins given, by the option table's names, as a layer of the cascade
        (core.options.cascade): their typed values (a component's ops as its option's text,
        ``none`` for none), which pass their checks as they are."""
        out = {n: getattr(self, n) for n in _SCALARS if getattr(self, n) not in (None, ())}
        return {**out, **self.versions,
                **{_ops_option(n): ",".join(o) or "none" for n, o in self.ops.items()}}

    def with_components(self) -> dict[str, bool]:
        """``with``/``without`` as {component: included}."""
        return {**{c: True for c in self.with_}, **{c: False for c in self.without}}


# the pins that are one value each (the rest: versions and ops, by component)
_SCALARS = tuple(f.name for f in fields(Pins) if f.name not in ("versions", "ops", "origin"))


@dataclass(frozen=True)
class Request(Pins):
    """What the resolver reads: a target's pins (its parts', with the pin options over them:
    ``request``), the CUDA its base names, and the upload cut-off (the spec's
    ``--exclude-newer``, checked there, as RFC 3339 UTC)."""

    target: str = ""
    cuda: str | None = None  # "11.8"; None with cpu=True or when not given (check)
    cpu: bool = False
    exclude_newer: str | None = None  # releases uploaded later are no candidates
    platform: str = "linux/amd64"  # the image's platform (--platform)
    fabric: str = "ib"  # the RDMA user space in CUDA images (--fabric): ib | efa | none
    torch_index_url: str | None = None  # the site's PyTorch index, a template with {variant}

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
        return replace(self, versions=versions)

    def wants(self, component: str) -> bool:
        return component not in self.without and (
            component in self.with_ or component in self.versions)

    def without_pin(self, axis: str) -> Request:
        if axis == "cuda":
            return replace(self, cuda=None, cpu=False)
        if axis in self.versions:
            return replace(self.pinned(axis, None), with_=tuple(c for c in self.with_ if c != axis))
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
            ops = {matrix.ops_component[k].name: tuple(v) for k, v in alias.ops.items()
                   if v and k in matrix.ops_component}
            req = merge(req, Pins(flavour=alias.flavour, ops=ops), matrix)
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


def _agree(req: Request, axis: str, value: Pin | str) -> None:
    """A pin option agrees with the target's pin of the same axis (or the target has none)."""
    current = req.pin(axis) if axis != "cuda" else req.cuda
    if current is not None and str(current) != str(value):
        raise InputError(f"--{axis} {value} conflicts with {current} in target {req.target!r}: "
                         f"give the version once")


def with_cuda(req: Request, value: str, m: Matrix) -> Request:
    """``req`` with ``check --cuda VALUE`` (a CUDA version of the matrix, or cpu)."""
    if value == "cpu":
        return replace(req, cpu=True)
    ver = validate.version(value, "--cuda")
    c = f"{ver.major}.{ver.minor}" if len(ver.release) >= 2 else None
    if c is None or c not in m.cuda_minors:
        raise InputError(f"--cuda {value} is not in the matrix{_nearest_cuda(c or value, m)}; known: "
                         f"{', '.join(m.cuda_minors)}")
    _agree(req, "cuda", c)
    return replace(req, cuda=c)


def _known(pins: Pins, m: Matrix) -> None:
    """What only the matrix can say of the pins: their components, flavour and OS exist."""
    names = m.component_names
    unknown = sorted(set(pins.versions) - set(names))
    unknown += sorted(_ops_option(n) for n in pins.ops if n not in names or not m.component(n).has_ops)
    if unknown:
        raise InputError(f"no pin option {', '.join(unknown)} for this matrix (its components: "
                         f"{', '.join(names) or 'none'})")
    flavours = [f.name for f in m.toolchains.flavours]
    if pins.flavour is not None and pins.flavour not in flavours:
        raise InputError(f"--flavour {pins.flavour!r} is not a base flavour"
                         f"{validate.suggest(pins.flavour, flavours)}; known: {', '.join(flavours)}")
    for comp in (*pins.with_, *pins.without):
        if comp not in names:
            raise InputError(f"--with/--without {comp!r} is not a component"
                             f"{validate.suggest(comp, names)}; use {' or '.join(names)}")


def _merged_ops(req: Request, pins: Pins, m: Matrix) -> dict[str, Any]:
    """The ops the pins name, each an op of its component (pre-built ops imply it)."""
    up: dict[str, Any] = {}
    for c in m.components:
        if c.name not in pins.ops:
            continue
        flag = f"--{c.ops_option.replace('_', '-')}"
        ops = pins.ops[c.name]
        for op in ops:
            if op not in c.ops:
                raise InputError(f"{flag}: {op[:40]!r} is not a {c.title} op envbuilder can pre-build"
                                 f"{validate.suggest(op, c.ops)}; known: {', '.join(c.ops)}")
        if ops and c.name in req.without:
            raise InputError(f"{flag} conflicts with --without {c.name}")
        up["ops"] = {**up.get("ops", req.ops), c.name: ops}
        if ops:  # pre-built ops imply their component
            up["with_"] = tuple(dict.fromkeys((*up.get("with_", req.with_), c.name)))
    return up


def _merged_components(req: Request, pins: Pins, up: dict[str, Any]) -> None:
    """``--with``/``--without`` over the target's (and the ops') components."""
    w, wo = list(up.get("with_", req.with_)), list(req.without)
    for comp, on in pins.with_components().items():
        if on:
            w, wo = [*w, comp], [c for c in wo if c != comp]
        else:
            if comp in req.versions or comp in up.get("versions", {}):
                raise InputError(f"--without {comp} conflicts with the {comp} pin in "
                                 f"target {req.target!r}")
            w, wo = [c for c in w if c != comp], [*wo, comp]
    up["with_"], up["without"] = tuple(dict.fromkeys(w)), tuple(dict.fromkeys(wo))


def merge(req: Request, pins: Pins, matrix: Matrix) -> Request:
    """``req`` (a target's own pins) with the pin options ``pins`` over it. The pins' values
    were checked when the pins were made; here is only what needs the matrix (its components,
    flavours, OSes and ops) and the target: a pin that disagrees with the target's is bad input."""
    m = matrix
    _known(pins, m)
    up = _merged_ops(req, pins, m)
    if pins.flavour is not None:
        up["flavour"] = pins.flavour
    for axis in ("torch", *m.component_names, "nccl", "python", "os"):
        value = pins.get(axis) if axis != "os" else pins.os
        if value is None:
            continue
        if axis == "os" and value not in m.os:
            raise InputError(f"--os {value!r} is not in the matrix{validate.suggest(value, m.os)}; "
                             f"known: {', '.join(sorted(m.os))}")
        _agree(req, axis, value)
        # where the pin came from (resolve's "pinned 2.13 by ..."): the option's flag or the
        # project file's key; a pin of the target string itself has none
        up["origin"] = {**up.get("origin", req.origin), axis: pins.origin.get(axis, f"--{axis}")}
        if axis in (*CORE_PINS, "os"):
            up[axis] = value
        else:
            up["versions"] = {**up.get("versions", req.versions), axis: value}
    for name in ("driver", "platform", "fabric"):
        if getattr(pins, name) is not None:
            up[name] = getattr(pins, name)
    if pins.with_ or pins.without:
        _merged_components(req, pins, up)
    return replace(req, **up)


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


def request(target: str, matrix: Matrix, pins: Pins | None = None, *,
            exclude_newer: str | None = None, torch_index_url: str | None = None) -> Request:
    """The request a target name and the pin options make together; ``exclude_newer`` and
    ``torch_index_url``: the spec's (checked there: RFC 3339 UTC; a URL template)."""
    req = merge(parse_target(target, matrix), pins or Pins(), matrix)
    if exclude_newer is not None:
        req = replace(req, exclude_newer=exclude_newer)
    return replace(req, torch_index_url=torch_index_url) if torch_index_url is not None else req
