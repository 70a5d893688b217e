"""The target grammar: ``TARGET := BASE ("-" PART)*``.

BASE is ``cuXY[Z]`` (CUDA major+minor: cu118 = 11.8), ``cpu``, or ``any`` (the resolver picks
the CUDA: with ``--driver``, the newest stack the driver runs natively); each PART pins one axis:
``torch2.1`` / ``torch2.1.2``, ``py310`` / ``py3.10``, ``ds0.14``, ``hvd0.28``, ``nccl2.18``,
or an OS name such as ``ubuntu22.04``. Options pin the same axes; a target part and an option
that disagree are an input error. Named aliases come from the matrix's ``targets.yaml``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping

from packaging.version import Version

from envbuilder.core import validate
from envbuilder.errors import InputError
from envbuilder.core.options import COMPONENT_TAGS, COMPONENT_TITLES, OPS_COMPONENT
from envbuilder.core.options import COMPONENTS as COMPONENTS  # what generic code iterates over

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
# the DeepSpeed ops a standard ZeRO config loads, pre-built by default on CUDA targets:
# FusedAdam (DeepSpeed's optimizer for "type": "Adam"/"AdamW" on GPUs) and DeepSpeedCPUAdam
# (the same config with "offload_optimizer": {"device": "cpu"})
# https://github.com/deepspeedai/DeepSpeed/blob/v0.16.9/deepspeed/runtime/engine.py
# (_configure_basic_optimizer: FusedAdam, or DeepSpeedCPUAdam when the optimizer is offloaded)
DEFAULT_DS_OPS = ("fused_adam", "cpu_adam")
# on a CPU target, DeepSpeed's CPU accelerator: the op deepspeed.init_distributed() builds at
# start-up (comm/torch.py build_shm_op -> op_builder/cpu/comm.py ShareMemCommBuilder) and CPU Adam
# (DeepSpeedCPUAdam: ZeRO with the optimizer offloaded, as CPU jobs run it)
# https://github.com/deepspeedai/DeepSpeed/blob/v0.16.9/deepspeed/comm/torch.py
DEFAULT_CPU_DS_OPS = ("deepspeed_shm_comm", "cpu_adam")


def ds_ops_of(req: Request, matrix: Matrix) -> tuple[str, ...]:
    """The DeepSpeed ops a request pre-builds: the ones asked for (--ds-ops; none = JIT), else
    for a target that wants DeepSpeed DEFAULT_DS_OPS on CUDA, DEFAULT_CPU_DS_OPS on CPU (those
    the matrix knows)."""
    if req.ds_ops is not None:
        return req.ds_ops
    if not req.wants(OPS_COMPONENT):
        return ()
    defaults = DEFAULT_CPU_DS_OPS if req.cpu else DEFAULT_DS_OPS
    return tuple(o for o in defaults if o in matrix.toolchains.deepspeed_ops)


@dataclass(frozen=True)
class Request:
    """What the user asked for: pins per axis, the driver to run on, components to include."""

    target: str
    cuda: str | None = None  # "11.8"; None with cpu=True or when not given (check)
    cpu: bool = False
    torch: Pin | None = None
    python: Pin | None = None
    nccl: Pin | None = None
    deepspeed: Pin | None = None
    horovod: Pin | None = None
    os: str | None = None
    flavour: str | None = None  # the runtime base flavour (--flavour)
    driver: str | None = None
    with_: frozenset[str] = field(default_factory=frozenset)
    without: frozenset[str] = field(default_factory=frozenset)
    ds_ops: tuple[str, ...] | None = None  # DeepSpeed ops to pre-build (--ds-ops); () = JIT
    # (--ds-ops none); None = not asked: a CUDA target's DeepSpeed gets DEFAULT_DS_OPS
    exclude_newer: str | None = None  # RFC 3339 UTC: releases uploaded later are no candidates
    platform: str = "linux/amd64"  # the image's platform (--platform)
    fabric: str = "ib"  # the RDMA user space in CUDA images (--fabric): ib | efa | none

    def pins(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.cpu:
            out["cuda"] = "cpu"
        elif self.cuda:
            out["cuda"] = self.cuda
        for axis in ("torch", "python", "nccl", *COMPONENTS):
            pin = getattr(self, axis)
            if pin is not None:
                out[axis] = pin.text
        if self.os:
            out["os"] = self.os
        if self.flavour:
            out["flavour"] = self.flavour
        return out

    def wants(self, component: str) -> bool:
        return component not in self.without and (
            component in self.with_ or getattr(self, component) is not None)

    def without_pin(self, axis: str) -> Request:
        if axis == "cuda":
            return replace(self, cuda=None, cpu=False)
        if axis in COMPONENTS:
            return replace(self, **{axis: None}, with_=self.with_ - {axis})  # type: ignore[arg-type]
        return replace(self, **{axis: None})  # type: ignore[arg-type]

    def canonical(self) -> str:
        """The target string that states every pin of this request."""
        parts = ["cpu" if self.cpu else ("cu" + self.cuda.replace(".", "") if self.cuda else "any")]
        if self.torch:
            parts.append(f"torch{self.torch}")
        if self.python:
            parts.append("py" + self.python.text.replace(".", ""))
        for c in COMPONENTS:
            if getattr(self, c):
                parts.append(f"{COMPONENT_TAGS[c]}{getattr(self, c)}")
        if self.nccl:
            parts.append(f"nccl{self.nccl}")
        if self.os:
            parts.append(self.os)
        return "-".join(parts)


_BASE_RE = re.compile(r"cu([0-9]{2,3})")
_PART_RES: list[tuple[str, re.Pattern[str]]] = [
    ("torch", re.compile(r"torch([0-9][0-9.]*)")),
    ("python", re.compile(r"py(3)\.?([0-9]{1,2})")),
    *((c, re.compile(COMPONENT_TAGS[c] + r"([0-9][0-9.]*)")) for c in COMPONENTS),
    ("nccl", re.compile(r"nccl([0-9][0-9.]*)")),
]
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
        current = getattr(req, axis)
        if current is not None and str(current) != str(pin):
            raise InputError(f"target {text!r}: {part} conflicts with {current} in the alias "
                             f"{best[1]!r}")
        req = replace(req, **{axis: pin})  # type: ignore[arg-type]
    return replace(req, target=text)


def _parse_target(text: str, matrix: Matrix) -> Request:
    alias = matrix.alias(text)
    if alias is not None and (alias.target != text or alias.flavour or alias.ds_ops):
        req = parse_target(alias.target, matrix) if alias.target != text else parse_target(
            text, replace(matrix, targets=tuple(t for t in matrix.targets if t.name != text)))
        req = replace(req, target=text)
        if alias.flavour or alias.ds_ops:
            req = apply_options(req, matrix, flavour=alias.flavour,
                                ds_ops=",".join(alias.ds_ops) if alias.ds_ops else None)
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
    for part in parts:
        axis, pin = _parse_part(part, text, matrix)
        if axis in kw:
            raise InputError(f"target {text!r} pins {axis} twice")
        kw[axis] = pin
    return Request(**kw)


def _parse_part(part: str, text: str, matrix: Matrix) -> tuple[str, Pin | str]:
    for axis, rx in _PART_RES:
        m = rx.fullmatch(part)
        if m:
            if axis == "python":
                return axis, Pin(f"{m.group(1)}.{m.group(2)}", exact=False)
            return axis, Pin.parse(m.group(1), f"target {text!r}: {axis} version")
    if part in matrix.os:
        return "os", part
    tags = [COMPONENT_TAGS[c] for c in COMPONENTS]
    choices = ["torch2.1", "py310", *(f"{t}0.{n}" for t, n in zip(tags, (14, 28))), "nccl2.18", *matrix.os]
    raise InputError(f"target {text!r}: unknown part {part!r}{validate.suggest(part, choices)}; "
                     f"parts are torchX.Y[.Z], pyXY, {''.join(t + 'X.Y, ' for t in tags)}ncclX.Y or an OS "
                     f"({', '.join(sorted(matrix.os))})")


def _put(req: Request, updates: dict[str, Any], axis: str, value: Any) -> None:
    current = getattr(req, axis)
    if current is not None and str(current) != str(value):
        raise InputError(f"--{axis} {value} conflicts with {current} in target {req.target!r}: "
                         f"give the version once")
    updates[axis] = value


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


def _ds_ops(req: Request, m: Matrix, v: str, up: dict[str, Any]) -> None:
    if v.strip() == "none":
        up["ds_ops"] = ()  # JIT: the runtime must carry nvcc (render.plan refuses otherwise)
        return
    ops = tuple(dict.fromkeys(o.strip() for o in v.split(",") if o.strip()))
    known = m.toolchains.deepspeed_ops
    for op in ops:
        if op not in known:
            raise InputError(f"--ds-ops: {op[:40]!r} is not a DeepSpeed op envbuilder can pre-build"
                             f"{validate.suggest(op, known)}; known: {', '.join(known)}")
    if ops and OPS_COMPONENT in req.without:
        raise InputError(f"--ds-ops conflicts with --without {OPS_COMPONENT}")
    up["ds_ops"] = ops
    if ops:  # pre-built ops imply their component
        up["with_"] = req.with_ | {OPS_COMPONENT}


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
    for comp, on in v.items():
        if comp not in COMPONENTS:
            raise InputError(f"--with/--without {comp!r} is not a component"
                             f"{validate.suggest(comp, COMPONENTS)}; use {' or '.join(COMPONENTS)}")
        if on:
            w.add(comp)
            wo.discard(comp)
        else:
            if getattr(req, comp) is not None or comp in up:
                raise InputError(f"--without {comp} conflicts with the {comp} pin in "
                                 f"target {req.target!r}")
            wo.add(comp)
            w.discard(comp)
    up["with_"], up["without"] = frozenset(w), frozenset(wo)


# each pin option's check and merge into a request (core.options: the pin options), in the
# order they are judged (the first bad one is the error)
_APPLY: dict[str, Any] = {
    "flavour": _flavour, "fabric": _fabric, "ds_ops": _ds_ops, "cuda": _cuda,
    "torch": _version_pin("torch"), **{c: _version_pin(c) for c in COMPONENTS},
    "nccl": _version_pin("nccl"), "python": _python,
    "os": _os, "driver": lambda req, m, v, up: up.update(driver=validate.driver_version(v)),
    "exclude_newer": lambda req, m, v, up: up.update(exclude_newer=validate.exclude_newer(v)),
    "platform": lambda req, m, v, up: up.update(platform=validate.platform(v)),
    "components": _components,
}


def apply_options(req: Request, matrix: Matrix, **values: Any) -> Request:
    """Merge pin options (core.options' pins by name, ``cuda``, and ``components``: the merged
    --with/--without) into a request; a conflict with the target is an input error."""
    unknown = set(values) - set(_APPLY)
    if unknown:
        raise TypeError(f"apply_options: no pin option {', '.join(sorted(unknown))}")
    updates: dict[str, Any] = {}
    for name, apply in _APPLY.items():
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
    if axis in COMPONENTS:
        return [c.version for c in matrix.component(axis).releases]
    if axis == "nccl":
        vs = {n.version for n in matrix.nccl}
        vs |= {v.nccl for t in matrix.torch for v in t.variants.values() if v.nccl}
        return sorted(vs, reverse=True)
    raise KeyError(axis)


def unknown_pins(req: Request, matrix: Matrix) -> dict[str, Pin]:
    """The pins that match no version the matrix lists, by axis."""
    out: dict[str, Pin] = {}
    for axis in ("torch", "python", *COMPONENTS, "nccl"):
        pin = getattr(req, axis)
        if axis == "python" and pin is not None and pin.text.endswith("t"):
            if pin.text not in matrix.pythons_ft:
                out[axis] = pin
            continue
        if pin is not None and not any(pin.matches(v) for v in known_values(axis, matrix)):
            out[axis] = pin
    return out


def check_pins_known(req: Request, matrix: Matrix) -> None:
    """A pin the matrix has never heard of is bad input (exit 2), not an incompatibility."""
    names = {"torch": "torch", "python": "Python", **COMPONENT_TITLES, "nccl": "NCCL"}
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
    """Options that pin axes (the same axes a target's parts pin): the CLI's pin options."""

    torch: str | None = None
    python: str | None = None
    deepspeed: str | None = None
    horovod: str | None = None
    nccl: str | None = None
    os: str | None = None
    driver: str | None = None
    with_: tuple[str, ...] = ()
    without: tuple[str, ...] = ()
    flavour: str | None = None  # the runtime base flavour
    ds_ops: str | None = None  # DeepSpeed ops to pre-build, comma-separated; "none": JIT
    exclude_newer: str | None = None  # leave out releases uploaded after this date (ISO)
    platform: str | None = None  # linux/amd64 (default) or linux/arm64
    fabric: str | None = None  # the RDMA user space of CUDA images: ib (default), efa, none

    def components(self) -> dict[str, bool]:
        from envbuilder.core.options import with_without

        return with_without(self.with_, self.without)


def request(target: str, matrix: Matrix, pins: Pins | None = None) -> Request:
    """The request a target name and the pin options make together."""
    pins = pins or Pins()
    req = parse_target(target, matrix)
    given = {k: v for k, v in vars(pins).items() if k not in ("with_", "without")}
    return apply_options(req, matrix, components=pins.components(), **given)
