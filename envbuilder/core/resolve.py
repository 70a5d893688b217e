"""The resolver: from a Request to a consistent Stack, or a refusal that says why.

Axes are assigned in a fixed order of preference (CUDA toolkit, torch, base flavour, OS,
Python, NCCL, then the matrix's components in plan order), each trying its candidates newest first; every rule is applied as soon
as the axes it reads are assigned, and the first complete assignment that breaks no rule is
the answer. When none exists, a second search finds the assignment that breaks the fewest
rules, whose violations are the reasons given, and each pin is dropped in turn to say what
would work instead.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, cast

from packaging.version import Version

from envbuilder import __version__
from envbuilder.errors import IncompatibleError
from envbuilder.core.builder import Builder, builder_for, compiled
from envbuilder.core.matrix import (
    ComponentRelease,
    Flavour,
    Matrix,
    NcclRelease,
    OsInfo,
    Toolkit,
    TorchRelease,
    TorchVariant,
    free_threaded,
    minor,
)
from envbuilder.core.rules import (Context, Rule, Violation, all_rules, breakages_covering, driver_mode,
                                   floor_toolkit, runs_natively, variant_of)
from envbuilder.core.target import Pin, Pins, Request, check_pins_known, ops_of, request, unknown_pins

CORE_ORDER = ("cuda", "torch", "flavour", "os", "python", "nccl")


def axis_order(m: Matrix) -> tuple[str, ...]:
    """The order the search assigns the axes: the core axes, then the matrix's components in
    their plan order."""
    return CORE_ORDER + m.plan_order
PYPI = "https://pypi.org/simple"
_NODE_LIMIT = 500_000


@dataclass(frozen=True)
class Choice:
    """Why an axis has its value: the rule that chose it, what it passed over, the source."""

    axis: str
    value: str | None
    reason: str
    source: tuple[str, ...]
    skipped: tuple[tuple[str | None, tuple[str, ...]], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "reason": self.reason, "source": list(self.source),
                "skipped": [{"value": v, "rules": list(r)} for v, r in self.skipped]}


@dataclass(frozen=True)
class Stack:
    """A resolved, consistent set of versions, with the provenance of each."""

    request: Request
    matrix: Matrix
    assignment: dict[str, Any]
    choices: dict[str, Choice]
    # the rules' findings on the stack: warnings, and the evidence (severity "info": the facts
    # that decided an acceptance at an edge)
    findings: tuple[Violation, ...] = ()
    # the (runtime, builder) images a spec's --base-image/--builder-image make the plan use
    # (assemble.as_built), stated in place of the matrix's; None: the matrix's
    images: tuple[str, str] | None = None

    @property
    def warnings(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.findings if v.severity != "info")

    @property
    def evidence(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.findings if v.severity == "info")

    # -- the values ------------------------------------------------------------------------
    @property
    def target(self) -> str:
        return self.request.target

    @property
    def toolkit(self) -> Toolkit | None:
        return cast("Toolkit | None", self.assignment["cuda"])

    @property
    def cuda(self) -> str | None:
        return None if self.toolkit is None else minor(self.toolkit.version)

    @property
    def variant(self) -> str:
        return variant_of(self.toolkit)

    @property
    def torch(self) -> TorchRelease:
        return cast(TorchRelease, self.assignment["torch"])

    @property
    def torch_variant(self) -> TorchVariant:
        return self.torch.variants[self.variant]

    @property
    def python(self) -> str:
        return str(self.assignment["python"])

    @property
    def os(self) -> OsInfo:
        return cast(OsInfo, self.assignment["os"])

    @property
    def nccl(self) -> NcclRelease | None:
        return self.assignment.get("nccl")

    def component(self, name: str) -> ComponentRelease | None:
        """A component's resolved release (one of the matrix's), None when not in the stack."""
        if name not in self.matrix.component_names:
            raise KeyError(name)
        return cast("ComponentRelease | None", self.assignment.get(name))

    def __getattr__(self, name: str) -> ComponentRelease | None:
        # stack.<component>: each of the matrix's components by its name, as stack.json names it
        d = self.__dict__
        if "matrix" in d and name in d["matrix"].component_names:
            return cast("ComponentRelease | None", d["assignment"].get(name))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def flavour(self) -> str:
        """The runtime base flavour: cuda-base, cuda-runtime, cudnn-runtime or os."""
        return str(self.assignment["flavour"])

    @property
    def base_flavour(self) -> Flavour:
        return self.matrix.toolchains.flavour(self.flavour)

    @property
    def ops(self) -> dict[str, tuple[str, ...]]:
        """The ops each component with ops pre-builds (--<tag>-ops, or its default on CUDA):
        () for one the stack does not carry."""
        return {n: v if self.assignment.get(n) is not None else ()
                for n, v in ops_of(self.request, self.matrix).items()}

    def ops_left_to_jit(self, name: str) -> bool:
        """Component ``name`` on CUDA with its ops left to JIT (``--<tag>-ops none``): the
        runtime needs nvcc."""
        return (self.assignment.get(name) is not None and self.toolkit is not None
                and self.request.ops.get(name) == ())

    @property
    def fabric(self) -> str:
        """The RDMA user space the image carries (--fabric): ib, efa, or none (CPU images)."""
        return self.request.fabric if self.toolkit is not None else "none"

    @property
    def compiles(self) -> bool:
        """Something is built from source in the image (a compiled component, pre-built ops)."""
        return compiled(self.assignment, self.matrix, self.ops)[0]

    @property
    def builder(self) -> Builder | None:
        """The builder stage's compilers (None when nothing compiles); the rules made sure it exists."""
        return builder_for(self.assignment, self.matrix, self.ops)

    def _nvidia(self, tag_flavour: str, cudnn: bool) -> str:
        assert self.toolkit is not None
        imgs = self.matrix.base_images_for(self.toolkit.version, self.os.name)
        assert imgs is not None
        repo = imgs.repository or self.matrix.base_repository
        return f"{repo}:{imgs.tag(tag_flavour, self.os.name, cudnn=cudnn)}"

    @property
    def runtime_image(self) -> str:
        fl = self.base_flavour
        if self.toolkit is None or fl.nvidia_tag is None:
            return self.os.image
        return self._nvidia(fl.nvidia_tag, fl.cudnn)

    @property
    def builder_image(self) -> str:
        """The devel image when the builder compiles with NVIDIA's toolkit; else the runtime base
        (a plain OS builder installs its toolkit itself)."""
        b = self.builder
        if b is not None and b.image_kind == "devel":
            return self._nvidia("devel", self.base_flavour.cudnn)
        return self.runtime_image

    @property
    def torch_index(self) -> str:
        """PyPI when plain `pip install torch` is this variant (on this platform), else
        PyTorch's own index (or the site's, ``--torch-index-url``: a template with {variant})."""
        if self.torch.pypi_default == self.variant and self.platform not in self.torch_variant.index_only:
            return PYPI
        template = self.request.torch_index_url or self.matrix.torch_index
        return template.replace("{variant}", self.variant)

    @property
    def driver_min(self) -> dict[str, Any] | None:
        """The driver the stack needs: the newer of the base toolkit's floor and the floor of
        the toolkit patch torch's wheel pins (cuda-toolkit==X.Y.Z), per patch."""
        if self.toolkit is None:
            return None
        t = floor_toolkit(self.matrix, self.toolkit, self.torch)
        floor = self.matrix.minor_compat.get(t.version.major)
        out: dict[str, Any] = {"version": t.driver_min, "toolkit": str(t.version),
                               "minor_compat": floor.driver_min if floor else None,
                               "source": (t.source + (floor.source if floor else ()))[0]}
        if self.request.driver is not None:  # how the stated driver runs it, in one word
            out["runs"] = driver_mode(self.matrix, t, self.request.driver)
        pin = self.torch_variant.cuda_toolkit
        if pin is not None and pin > t.version and not any(k.version == pin for k in self.matrix.toolkits):
            out["wheel_toolkit"] = str(pin)
            out["note"] = (f"torch's wheel pins cuda-toolkit {pin}, whose driver floor the matrix does "
                           f"not list: it may need more than {t.driver_min}")
        return out

    @property
    def platform(self) -> str:
        """The image's platform: linux/amd64 (default) or linux/arm64."""
        return self.request.platform

    @property
    def tag(self) -> str:
        """An image tag naming the versions: cu121-torch2.5.1-py311[-<tag><version> per
        component]-<os>."""
        parts = [self.variant, f"torch{self.torch.version}", "py" + self.python.replace(".", "")]
        for c in self.matrix.components:
            rel = self.component(c.name)
            if rel:
                parts.append(f"{c.tag}{rel.version}")
        parts.append(self.os.name)
        return "-".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The resolved stack as plain data: resolve --json and stack.json."""
        tv = self.torch_variant
        d = self._to_dict(tv)
        if self.matrix.overlay_path is not None:  # a team's overlay: what came from it
            d["matrix"]["overlay"] = str(self.matrix.overlay_path)
            d["overlay"] = [dict(e, used=self._uses(e)) for e in self.matrix.overlay]
        return d

    def _uses(self, e: Mapping[str, Any]) -> bool:
        """Whether this stack stands on an overlay entry (its base image, OS, torch line...)."""
        key = {k: v for k, v in (p.split("=", 1) for p in str(e["entry"]).split(", ") if "=" in p)}
        f = e["file"]
        if f == "base_images.yaml":
            return (self.toolkit is not None and key.get("cuda") == str(self.toolkit.version)
                    and self.os.name in key.get("os", "").split("/"))
        if f == "os.yaml":
            return key.get("name") == self.os.name
        if f == "torch.yaml":
            return key.get("line") == self.torch.line
        if f == "cuda.yaml" and e["key"] == "toolkits":
            return self.toolkit is not None and key.get("version") == str(self.toolkit.version)
        for comp in self.matrix.component_names:
            rel = self.component(comp)
            if f == f"{comp}.yaml":
                return rel is not None and key.get("line") == rel.line
        return False

    def _to_dict(self, tv: TorchVariant) -> dict[str, Any]:
        return {
            "target": self.target,
            "cuda": self.cuda,
            "cuda_toolkit": None if self.toolkit is None else str(self.toolkit.version),
            "driver_min": self.driver_min,
            "torch": str(self.torch.version),
            "torch_variant": self.variant,
            "torch_index": self.torch_index,
            "torch_arch": list(tv.arch_for(self.platform)),
            "python": self.python,
            "nccl": None if self.nccl is None else str(self.nccl.version),
            "nccl_package": tv.nccl_package,
            **{c: None if (rel := self.component(c)) is None else str(rel.version)
               for c in self.matrix.component_names},
            "os": self.os.name,
            "flavour": self.flavour,
            "base_image": self.images[0] if self.images else self.runtime_image,
            "builder_image": self.images[1] if self.images else self.builder_image,
            "builder": None if self.builder is None else self.builder.to_dict(),
            **{self.matrix.component(n).ops_key: list(v) for n, v in self.ops.items()},
            "fabric": self.fabric,
            "tag": self.tag,
            "choices": {k: c.to_dict() for k, c in self.choices.items()},
            "warnings": [w.to_dict() for w in self.warnings],
            "matrix": {"path": str(self.matrix.path), "digest": self.matrix.digest},
            "envbuilder_version": __version__,
        } | ({"platform": self.platform} if self.platform != "linux/amd64" else {}) | (
            {"evidence": [e.to_dict() for e in self.evidence]} if self.evidence else {})


# -- the search -----------------------------------------------------------------------------

def _os_order(m: Matrix, cpu: bool) -> list[OsInfo]:
    # an RHEL-family OS (Rocky Linux) is a value to pin (--os rockylinux9, cu128-rockylinux9),
    # never chosen for a target that names no OS
    oses = sorted((o for o in m.os.values() if o.package_manager == "apt"),
                  key=lambda o: o.sort_key, reverse=True)
    if cpu:  # CPU images default to Debian (PRODUCT.md), then the newest Ubuntu
        oses.sort(key=lambda o: o.family != "debian")
    return oses


def _after(released: str | None, cutoff: str | None) -> bool:
    """A release uploaded after ``--exclude-newer`` (an undated release is kept)."""
    if cutoff is None or released is None:
        return False
    import datetime as dt

    def when(s: str) -> dt.datetime:
        s = s[:-1] + "+00:00" if s.endswith("Z") else s
        t = dt.datetime.fromisoformat(s) if "T" in s else dt.datetime.fromisoformat(s + "T00:00:00+00:00")
        return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)
    return when(released) > when(cutoff)


def _cuda_order(req: Request, m: Matrix) -> list[Any]:
    """Unpinned CUDA: newest first; with a driver, the toolkits it runs natively first, newest
    torch first among them (a CUDA 12.6 torch 2.14 before a CUDA 12.9 torch 2.8), then the
    ones it runs by minor-version compatibility."""
    tks = list(m.toolkits)
    if req.driver is not None:
        newest: dict[str, Version] = {}
        for t in m.torch:
            if req.torch is None or req.torch.matches(t.version):
                for v in t.variants:
                    newest.setdefault(v, t.version)
        tks.sort(key=lambda k: (runs_natively(k, req.driver or "0"), newest.get(k.variant, Version("0")),
                                k.version), reverse=True)
    tks.sort(key=lambda k: m.base_images_for(k.version) is None)  # stable: images first per order
    return tks + [None]


def _cuda_domain(a: dict[str, Any], req: Request, m: Matrix) -> list[Any]:
    if req.cpu:
        return [None]
    if req.cuda:  # the patches with nvidia/cuda images first (a newer patch without any
        # would otherwise win with the plain OS flavour)
        tks = m.toolkits_for(req.cuda)
        return sorted(tks, key=lambda k: m.base_images_for(k.version) is None)
    return _cuda_order(req, m)


def _torch_domain(a: dict[str, Any], req: Request, m: Matrix) -> list[Any]:
    ts = [t for t in m.torch if (req.torch is None or req.torch.matches(t.version))
          and not _after(t.released, req.exclude_newer)]
    if "cuda" in a and req.platform != "linux/amd64":
        # on another platform, releases with wheels of the variant first (stable: the
        # first that breaks no rule is unchanged; a refusal then names the release
        # nearest to working, e.g. the newest cu128 build that lacks only the platform)
        v = variant_of(a["cuda"])
        ts.sort(key=lambda t: (v not in t.variants, req.platform not in (
            t.variants[v].platforms if v in t.variants else ())))
    return ts


def _os_domain(a: dict[str, Any], req: Request, m: Matrix) -> list[Any]:
    if req.os:
        return [m.os[req.os]]
    return _os_order(m, a.get("cuda", 0) is None)


def _flavour_domain(a: dict[str, Any], req: Request, m: Matrix) -> list[Any]:
    if req.flavour:
        return [req.flavour]
    if "cuda" in a and a["cuda"] is None:
        return ["os"]  # a CPU image starts from its OS image
    return [f.name for f in m.toolchains.flavours]


def _python_domain(a: dict[str, Any], req: Request, m: Matrix) -> list[Any]:
    if req.python:
        return [req.python.text]
    o: OsInfo | None = a.get("os")
    if o is None:
        return m.pythons
    # the newest Python the OS ships itself, then PPA ones (deadsnakes) newest first
    return sorted((p for p in o.python if not free_threaded(p)),
                  key=lambda p: (o.python[p].ppa is None, Version(p)), reverse=True)


def _nccl_domain(a: dict[str, Any], req: Request, m: Matrix) -> list[Any]:
    if "torch" in a and "cuda" in a:
        if a["cuda"] is None:
            return [None]
        var = a["torch"].variants.get(variant_of(a["cuda"]))
        if var is None or var.nccl is None:
            return [None]
        return [m.nccl_release(var.nccl) or NcclRelease(var.nccl, (), a["torch"].source)]
    pin = req.nccl
    return [n for n in m.nccl if pin is None or Pin.parse(pin.text, "nccl").matches(n.version)]


# each axis's values, in the order the search tries them (given what is assigned so far)
_DOMAINS: dict[str, Callable[[dict[str, Any], Request, Matrix], list[Any]]] = {
    "cuda": _cuda_domain, "torch": _torch_domain, "os": _os_domain, "flavour": _flavour_domain,
    "python": _python_domain, "nccl": _nccl_domain,
}


def _domain(axis: str, a: dict[str, Any], req: Request, m: Matrix) -> list[Any]:
    d = _DOMAINS.get(axis)
    if d is not None:
        return d(a, req, m)
    if axis in m.component_names:
        if not req.wants(axis):
            return [None]
        pin = req.versions.get(axis)
        return [c for c in m.component(axis).releases if (pin is None or pin.matches(c.version))
                and not _after(c.released, req.exclude_newer)]
    raise KeyError(axis)


class _Assigned(dict):  # type: ignore[type-arg]
    """A copy of a partial assignment for forward checking: asking about an axis that will
    be assigned later (``a[x]``, ``a.get(x)``, ``x in a``) raises KeyError instead of
    answering "absent"."""

    def __init__(self, a: dict[str, Any], pending: frozenset[str]) -> None:
        super().__init__(a)
        self.pending = pending

    def get(self, key: Any, default: Any = None) -> Any:
        return dict.get(self, key, default) if self.__contains__(key) else default

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        if key in self.pending:
            raise KeyError(key)
        return False


@dataclass
class _Search:
    req: Request
    m: Matrix
    ctx: Context
    active: tuple[str, ...]
    base: dict[str, Any]
    rules: list[Rule]
    nodes: int = 0
    trig: dict[str, list[Rule]] = field(default_factory=dict)
    # forward checking: axis -> [(a later component axis, the rules between the two, the axes
    # between the two, not assigned yet when they are asked)]
    ahead: dict[str, list[tuple[str, list[Rule], frozenset[str]]]] = field(default_factory=dict)
    _component_domains: dict[str, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = set(self.active) | set(self.base)
        for r in self.rules:
            if not all(ax in known for ax in r.axes) or any(ax in known for ax in r.unless):
                continue
            pos = [self.active.index(ax) for ax in r.axes if ax in self.active]
            if pos:
                self.trig.setdefault(self.active[max(pos)], []).append(r)
        # A component comes last in the order, and its values do not depend on the axes
        # before it; a rule between it and an earlier axis (a component's torch range) is asked
        # as soon as that axis has a value: when no release of the component can pass it,
        # nothing below that value can either. Without this, a target with a component tried
        # every (os, flavour, python, nccl) under each torch the component does not build against.
        where = {ax: k for k, ax in enumerate(self.active)}
        for axj in self.active:
            if axj not in self.m.component_names:
                continue
            by_axis: dict[str, list[Rule]] = {}
            for r in self.trig.get(axj, ()):
                before = [where[ax] for ax in r.axes if ax != axj and ax in where]
                if before:
                    by_axis.setdefault(self.active[max(before)], []).append(r)
            for axi, rules in by_axis.items():
                pending = frozenset(self.active[where[axi] + 1:where[axj]])
                self.ahead.setdefault(axi, []).append((axj, rules, pending))

    def _ahead_ok(self, axis: str, a: dict[str, Any]) -> bool:
        """Whether every later component still has a release that the rules between it and
        the axes assigned so far allow (see __post_init__)."""
        for comp, rules, pending in self.ahead.get(axis, ()):
            values = self._component_domains.get(comp)
            if values is None:
                values = self._component_domains[comp] = _domain(comp, a, self.req, self.m)
            if not self._some_value_passes(comp, values, rules, _Assigned(a, pending)):
                return False
        return True

    def _some_value_passes(self, comp: str, values: list[Any], rules: list[Rule],
                           view: _Assigned) -> bool:
        for value in values:
            view[comp] = value
            try:
                if not any(v.severity == "error" for r in rules for v in r.check(view, self.ctx)):
                    return True
            except KeyError:
                # a rule that looks at an axis between the two (a.get, `in`) cannot be judged
                # yet: the view raised KeyError there, and the value is not pruned
                return True
        return False

    def errors(self, axis: str, a: dict[str, Any]) -> list[Violation]:
        out: list[Violation] = []
        for r in self.trig.get(axis, ()):
            out.extend(v for v in r.check(a, self.ctx) if v.severity == "error")
        return out

    def first(self) -> dict[str, Any] | None:
        """The most preferred assignment that breaks no rule."""
        return next(self._walk(0, dict(self.base)), None)

    def _walk(self, i: int, a: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if i == len(self.active):
            yield dict(a)
            return
        axis = self.active[i]
        for value in _domain(axis, a, self.req, self.m):
            self.nodes += 1
            if self.nodes > _NODE_LIMIT:
                return
            a[axis] = value
            if not self.errors(axis, a) and self._ahead_ok(axis, a):
                yield from self._walk(i + 1, a)
            del a[axis]

    def fewest(self) -> tuple[dict[str, Any] | None, list[Violation]]:
        """The most preferred assignment among those breaking the fewest rules."""
        best: list[Any] = [None, None]  # assignment, violations

        def walk(i: int, a: dict[str, Any], vs: list[Violation]) -> None:
            if best[1] is not None and len(vs) >= len(best[1]):
                return
            if i == len(self.active):
                best[0], best[1] = dict(a), list(vs)
                return
            axis = self.active[i]
            for value in _domain(axis, a, self.req, self.m):
                self.nodes += 1
                if self.nodes > _NODE_LIMIT:
                    return
                a[axis] = value
                walk(i + 1, a, vs + self.errors(axis, a))
                del a[axis]

        walk(0, dict(self.base), [])
        return best[0], best[1] or []


def _search(req: Request, m: Matrix, active: tuple[str, ...], *, avoid: bool = False) -> _Search:
    base = {c: None for c in m.component_names if c not in active}
    ctx = Context(m, driver=req.driver, nccl_pin=req.nccl.text if req.nccl else None,
                  ops=ops_of(req, m), platform=req.platform,
                  avoid=_avoidable(req, m) if avoid else frozenset())
    return _Search(req, m, ctx, active, base, all_rules(m))


def _avoidable(req: Request, m: Matrix) -> frozenset[str]:
    """The components whose advised-against releases the search may steer around: every one
    the request does not pin to an exact version (a pinned bad release is kept, with a
    warning). The toolkit patch is steered around only when the CUDA pin is a minor."""
    if not m.advisories:
        return frozenset()
    pins = {"torch": req.torch, "nccl": req.nccl, **{c: req.versions.get(c) for c in m.component_names}}
    out = {c for c, p in pins.items() if p is None or not p.exact}
    if not req.cpu:
        out.add("cuda")
    return frozenset(out)


def resolve(req: Request, m: Matrix) -> Stack:
    """Resolve every axis; raise IncompatibleError (exit 3) with the reasons when none works.
    A stack without advised-against releases (critical/high advisories) is preferred; when
    none exists, the stack is resolved as if there were none and carries their warnings."""
    _pins_known_or_refused(req, m)
    s = _search(req, m, axis_order(m), avoid=True)
    a = s.first() if s.ctx.avoid else None
    if a is None:
        s = _search(req, m, axis_order(m))
        a = s.first()
    if a is None:
        raise _refusal(req, m, s)
    return _stack(req, m, s, a)


def check(req: Request, m: Matrix, given: set[str]) -> tuple[dict[str, Any], list[Violation]]:
    """Judge a partial combination using only the axes given; raises IncompatibleError."""
    _pins_known_or_refused(req, m)
    active = tuple(ax for ax in axis_order(m) if ax in given)
    s = _search(req, m, active)
    a = s.first()
    if a is None:
        raise _refusal(req, m, s, suggest=False)
    return a, _warnings(s, a) + evidence(s, a)


def _pins_known_or_refused(req: Request, m: Matrix) -> None:
    """A pinned version the matrix does not list is refused (exit 3) when a known breakage's
    range covers it, and is bad input (exit 2) when nothing in the matrix knows it."""
    pins = req.pins()
    for axis, pin in unknown_pins(req, m).items():
        if axis == "python" and free_threaded(pin.text):
            continue  # no breakage names a free-threaded Python: check_pins_known says it
        included = frozenset(c for c in m.component_names if req.wants(c))
        vs = breakages_covering(axis, pin.text, pins, m, included)
        if vs:
            what = req.target if req.target != "check" else "this combination (" + ", ".join(
                f"{k} {v}" for k, v in pins.items()) + ")"
            raise IncompatibleError(
                f"{what} cannot work: {vs[0].message}" + (
                    f" (and {len(vs) - 1} more reason{'s' if len(vs) > 2 else ''})" if len(vs) > 1 else ""),
                violations=vs, details=[f"- {v}" for v in vs])
    check_pins_known(req, m)


def _warnings(s: _Search, a: dict[str, Any], severity: str = "warning") -> list[Violation]:
    """What the rules report of a complete assignment at one severity: ``warning``, or
    ``info`` (the evidence: the facts that decided an acceptance at an edge)."""
    out: list[Violation] = []
    for rules in s.trig.values():
        for r in rules:
            out.extend(v for v in r.check(a, s.ctx) if v.severity == severity)
    return list(dict.fromkeys(out))


def evidence(s: _Search, a: dict[str, Any]) -> list[Violation]:
    return _warnings(s, a, "info")


def _refusal(req: Request, m: Matrix, s: _Search, *, suggest: bool = True) -> IncompatibleError:
    s.nodes = 0
    best, violations = s.fewest()
    uniq: dict[str, Violation] = {}
    for v in violations:
        uniq.setdefault(v.message, v)
    vs = list(uniq.values())
    what = req.target if req.target != "check" else (
        "this combination (" + ", ".join(f"{k} {v}" for k, v in req.pins().items())
        + (f", driver {req.driver}" if req.driver else "") + ")")
    if not vs:
        return IncompatibleError(f"{what}: no combination in the matrix satisfies the pins "
                                 f"{req.pins()}", violations=[])
    details = [f"- {v}" for v in vs]
    alts = alternatives(req, m) if suggest else []  # each pin dropped alone: one search each
    if alts:
        details.append("What would work instead:")
        details += [f"- {a}" for a in alts]
    head = vs[0].message
    more = f" (and {len(vs) - 1} more reason{'s' if len(vs) > 2 else ''})" if len(vs) > 1 else ""
    return IncompatibleError(f"{what} cannot work: {head}{more}", violations=vs, details=details,
                             alternatives=alts)


def alternatives(req: Request, m: Matrix) -> list[str]:
    """For each pin, what resolves when that pin alone is dropped."""
    out: list[str] = []
    for axis in (*m.plan_order, "nccl", "python", "os", "torch", "cuda"):
        if axis not in req.pins():
            continue
        relaxed = req.without_pin(axis)
        s = _search(relaxed, m, axis_order(m))
        a = s.first()
        if a is None:
            continue
        st = _stack(relaxed, m, s, a)
        desc = f"torch {st.torch.version}, Python {st.python}, {st.os.name}"
        if axis == "cuda":
            for target, st, mode in _cuda_alternatives(req, m):
                desc = f"torch {st.torch.version}, Python {st.python}, {st.os.name}"
                how = "" if mode == "native" else "; runs by minor-version compatibility"
                out.append(f"without the CUDA pin: {target} resolves ({desc}, {st.variant}"
                           f"{', driver >= ' + st.driver_min['version'] if st.driver_min else ''}{how})")
        else:
            out.append(f"without the {axis} pin ({req.pins()[axis]}): {relaxed.canonical(m)} resolves ({desc})")
    return out


def _cuda_alternatives(req: Request, m: Matrix) -> list[tuple[str, Stack, str]]:
    """What resolves instead of a CUDA pin that cannot work, on the driver the user has: the
    one given, or else the oldest one that runs the pinned CUDA natively (someone asking for
    cu122 has a driver for 12.2, not necessarily for 13.x). Never a stack that driver cannot
    run: the best one it runs natively, and the best one it runs by minor-version
    compatibility (same major), each with the same CUDA major first, then newest."""
    from dataclasses import replace

    drv = req.driver
    if drv is None and req.cuda:
        pinned = m.toolkits_for(req.cuda)
        if pinned:
            drv = str(min(Version(t.driver_min) for t in pinned))
    relaxed = req.without_pin("cuda")
    major = req.cuda.split(".")[0] if req.cuda else None
    cands = sorted(m.cuda_minors, key=lambda c: (c.split(".")[0] == major, Version(c)), reverse=True)
    out: list[tuple[str, Stack, str]] = []
    for want in ("native", "minor-compat"):
        for c in cands:
            trial = replace(relaxed, cuda=c, driver=drv)
            s = _search(trial, m, axis_order(m))
            a = s.first()
            if a is None:
                continue
            st = _stack(trial, m, s, a)
            mode = "native"
            if st.toolkit is not None and drv is not None:
                k = floor_toolkit(m, st.toolkit, st.torch)
                floor = m.minor_compat.get(k.version.major)
                if not runs_natively(k, drv):
                    mode = ("minor-compat" if floor is not None
                            and Version(drv) >= Version(floor.driver_min) else "none")
            if mode == want:
                out.append((replace(relaxed, cuda=c).canonical(m), st, mode))
                break
        if drv is None:
            break
    return out


def _stack(req: Request, m: Matrix, s: _Search, a: dict[str, Any]) -> Stack:
    pins = req.pins()
    choices: dict[str, Choice] = {}
    order = axis_order(m)
    for axis in order:
        value = a.get(axis)
        # what was passed over, and by which rules
        skipped: list[tuple[str | None, tuple[str, ...]]] = []
        for cand in _domain(axis, {k: a[k] for k in order[:order.index(axis)] if k in a}, req, m):
            if cand is value or cand == value:
                break
            trial = dict(a)
            trial[axis] = cand
            names = tuple(dict.fromkeys(
                v.rule for r in s.rules if axis in r.axes and all(x in trial for x in r.axes)
                for v in r.check(trial, s.ctx) if v.severity == "error"))
            if len(skipped) < 5:
                skipped.append((_show(cand), names))
        choices[axis] = Choice(axis, _show(value), _reason(axis, value, pins, req, m),
                               _source(axis, value, a, m), tuple(skipped))
    warnings = _warnings(s, a) + evidence(s, a)
    for comp in m.component_names:  # a legacy component (legacy: in its file): resolvable, and said so
        c = m.component(comp)
        if a.get(comp) is not None and c.legacy:
            warnings.append(Violation(f"{comp}_legacy", f"{comp} is legacy: {c.legacy}",
                                      c.legacy_source, "drop it (--without " + comp + ") for new images",
                                      severity="warning"))
    return Stack(req, m, a, choices, tuple(warnings))


def _show(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, OsInfo):
        return value.name
    return str(value.version)


def _reason(axis: str, value: Any, pins: dict[str, str], req: Request, m: Matrix) -> str:
    if axis == "cuda":
        if value is None:
            return "CPU target"
        return f"newest CUDA {minor(value.version)} toolkit with a base image{_pinned(axis, pins, req)}"
    if axis == "nccl":
        return "not used (CPU)" if value is None else "the NCCL the torch wheel bundles"
    if axis == "flavour":
        if axis in pins:
            return f"pinned --flavour {value}"
        return ("a CPU image starts from its OS image" if value == "os" and req.cpu
                else "the smallest base that exists for this CUDA and OS (torch's wheels bring "
                     "cuBLAS, cuDNN and NCCL)")
    if axis in m.component_names and value is None:
        return f"not requested (add {'/'.join(c.tag for c in m.components)} to the target or --with)"
    if axis in pins:
        return f"pinned {pins[axis]} by {pinned_by(axis, req)}; newest compatible release that matches"
    if axis == "python":
        return "newest Python the OS ships that every component supports"
    return "newest compatible"


def _pinned(axis: str, pins: dict[str, str], req: Request) -> str:
    return f" (pinned by {pinned_by(axis, req)})" if axis in pins else ""


def pinned_by(axis: str, req: Request) -> str:
    """Who pinned ``axis``: its option (``--torch``), the project file's key (``key
    targets.train.torch of /p/envbuilder.toml``), else the target string (``'cu121-torch2.1'``)."""
    where = req.origin.get(axis)
    if where is None:
        return repr(req.target)
    where = where.rstrip(":").strip()
    m = re.fullmatch(r"project file (.+), key (\S+)", where)
    return f"key {m.group(2)} of {m.group(1)}" if m else where


def _source(axis: str, value: Any, a: dict[str, Any], m: Matrix) -> tuple[str, ...]:
    if value is None:
        return ()
    if axis == "python":
        return tuple(a["os"].source)
    if axis == "flavour":
        return m.toolchains.flavour(value).source
    return tuple(value.source)


def resolve_target(target: str, matrix: Matrix, pins: Pins | None = None, *,
                   exclude_newer: str | None = None, torch_index_url: str | None = None) -> Stack:
    """Resolve a target name (e.g. cu121-ds) with the pin options against ``matrix``;
    ``exclude_newer`` and ``torch_index_url``: a spec's (checked there)."""
    return resolve(request(target, matrix, pins, exclude_newer=exclude_newer,
                           torch_index_url=torch_index_url), matrix)


# -- driver first: which CUDA builds of a torch run on a given driver ----------------------

@dataclass(frozen=True)
class DriverFit:
    """How one CUDA variant of a torch release runs on a driver."""

    torch: str
    variant: str
    toolkit: str  # the toolkit patch whose floor decides (the wheel's pin, or the oldest patch)
    driver_min: str
    mode: str  # native | minor-compat | forward-compat
    source: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"torch": self.torch, "variant": self.variant, "toolkit": self.toolkit,
                "driver_min": self.driver_min, "mode": self.mode, "source": list(self.source)}


MODES = {"native": "runs natively",
         "minor-compat": "runs by minor-version compatibility (no PTX JIT of newer kernels; some "
                         "APIs return cudaErrorCallRequiresNewerDriver)",
         "forward-compat": "runs only by forward compatibility: the cuda-compat package of an "
                           "nvidia/cuda base, on datacenter GPUs (not GeForce/RTX)"}


def driver_fit(req: Request, m: Matrix) -> list[DriverFit]:
    """For each CUDA variant of the torch releases ``req.torch`` matches (newest release per
    variant), how it runs on ``req.driver``: natively (the driver is at least the floor of the
    toolkit patch the wheel needs), by minor-version compatibility, or only by forward
    compatibility. Best first."""
    assert req.driver is not None
    drv = Version(req.driver)
    seen: dict[str, DriverFit] = {}
    for t in m.torch:
        if req.torch is not None and not req.torch.matches(t.version):
            continue
        if _after(t.released, req.exclude_newer):
            continue
        for name, var in t.variants.items():
            if name == "cpu" or name in seen or var.cuda is None:
                continue
            if req.platform not in var.platforms:
                continue
            tks = m.toolkits_for(var.cuda)
            if not tks:
                continue
            base = min(tks, key=lambda k: Version(k.driver_min))
            k = floor_toolkit(m, base, t)
            floor = m.minor_compat.get(k.version.major)
            if drv >= Version(k.driver_min):
                mode = "native"
            elif floor is not None and drv >= Version(floor.driver_min):
                mode = "minor-compat"
            else:
                mode = "forward-compat"
            src = k.source + (floor.source if floor and mode != "native" else ()) + t.source
            seen[name] = DriverFit(str(t.version), name, str(k.version), k.driver_min, mode,
                                   tuple(dict.fromkeys(src)))
    order = {"native": 0, "minor-compat": 1, "forward-compat": 2}
    return sorted(seen.values(), key=lambda f: (order[f.mode], [-x for x in Version(f.torch).release],
                                               [-x for x in Version(f.toolkit).release]))


def driver_check(req: Request, m: Matrix) -> list[DriverFit]:
    """``check --driver X --torch Y``: the CUDA builds of Y and how each runs on X (best
    first); raises IncompatibleError (exit 3) when none runs natively or by minor-version
    compatibility."""
    fits = driver_fit(req, m)
    runs = [f for f in fits if f.mode != "forward-compat"]
    lines = [f"- torch {f.torch}+{f.variant}: needs driver >= {f.driver_min} (CUDA {f.toolkit}); "
             f"{MODES[f.mode]}" for f in fits]
    if not runs:
        vs = [Violation("driver_cuda",
                        f"no CUDA build of torch {req.torch} runs on driver {req.driver} natively or by "
                        f"minor-version compatibility"
                        + (f" (it has {', '.join(f.variant for f in fits)}; the oldest needs >= "
                           f"{min((f.driver_min for f in fits), key=Version)})" if fits else ""),
                        tuple(s for f in fits for s in f.source[:1]) or m.torch[0].source,
                        "update the driver, or use an older torch with a CUDA build this driver "
                        "runs" + (f"; on datacenter GPUs forward compatibility (cuda-compat) may run "
                                  f"{', '.join(f.variant for f in fits)}" if fits else ""))]
        raise IncompatibleError(f"torch {req.torch} on driver {req.driver} cannot work: {vs[0].message}",
                                violations=vs, details=[f"- {vs[0]}"] + lines)
    return fits
