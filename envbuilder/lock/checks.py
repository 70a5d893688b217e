"""A lock checked against its stack: torch (and its variant), each component and the NCCL
wheel as the matrix says (``cross_check``, exit 3), and the top-level requirements the
entries must satisfy (``unmet``)."""

from __future__ import annotations

from typing import Any, Sequence

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuilder.components import registry
from envbuilder.core.resolve import PYPI, Stack
from envbuilder.errors import IncompatibleError
from envbuilder.lock.entries import NCCL_WHEEL_RE, LockedPackage


def nccl_fact(stack: Stack) -> tuple[str | None, str | None]:
    tv = stack.torch_variant
    return (None if tv.nccl is None else str(tv.nccl)), tv.nccl_package


class _Refusal:
    """How a contradiction between the lock and the stack is refused (exit 3, naming the fact,
    its source and the lock's line)."""

    def __init__(self, stack: Stack, where: str) -> None:
        self.stack, self.where = stack, where

    def __call__(self, fact: str, source: str, p: LockedPackage | None, missing: str = "") -> None:
        shown = f"{self.where}:{p.lineno}: {_bare(p.line)}" if p else f"{self.where}: {missing}"
        raise IncompatibleError(f"the lock contradicts the stack {self.stack.tag}: {fact} "
                                f"(source: {source}) but {shown}",
                                details=[f"fact: {fact}", f"source: {source}", f"lock: {shown}"])


def cross_check(stack: Stack, pkgs: list[LockedPackage], where: str) -> None:
    """The lock agrees with the stack: torch, each component's pins, the NCCL wheel."""
    by = {p.name: p for p in pkgs}
    refuse = _Refusal(stack, where)
    _check_torch(stack, by.get("torch"), refuse)
    _check_components(stack, by, refuse)
    _check_nccl(stack, pkgs, by, where, refuse)


def _check_torch(stack: Stack, t: LockedPackage | None, refuse: _Refusal) -> None:
    tsrc = ", ".join(stack.torch.source[:1]) or stack.matrix.path.name
    want = Version(str(stack.torch.version))
    if t is None:
        refuse(f"torch {want}", tsrc, None, "no torch line")
        return
    v = _version(t.version)
    if v is None or Version(v.base_version) != Version(want.base_version):
        refuse(f"torch {want}", tsrc, t)
    if v is not None and v.local and v.local != stack.variant:
        refuse(f"torch {want} for {stack.variant}", tsrc, t)
    if v is not None and not v.local and stack.torch_index != PYPI:
        # PyPI's torch is another variant; PyTorch's index names its wheels X+<variant>
        refuse(f"torch {want} {stack.variant} comes from {stack.torch_index} as "
               f"{want.base_version}+{stack.variant}", tsrc, t)


def _check_components(stack: Stack, by: dict[str, LockedPackage], refuse: _Refusal) -> None:
    for c in registry.active(stack):  # each component's pins (torch's is checked above)
        for name, (version, _what) in c.lock_pins(stack).items():
            if name == "torch":
                continue
            p = by.get(name)
            src = ", ".join(c.source(stack)[:1]) or "matrix"
            if p is None:
                refuse(f"{name} {version}", src, None, f"no {name} line")
            elif _version(p.version) != Version(version):
                refuse(f"{name} {version}", src, p)


def _check_nccl(stack: Stack, pkgs: list[LockedPackage], by: dict[str, LockedPackage], where: str,
                refuse: _Refusal) -> None:
    nccl, pkg = nccl_fact(stack)
    src = f"{stack.matrix.path.name}/torch.yaml torch {stack.torch.version} {stack.variant}"
    # torch wheels from PyTorch's index may link NCCL statically: only a *different* NCCL
    # wheel is a contradiction (checked below)
    p = by.get(canonicalize_name(pkg)) if nccl and pkg else None
    if p is not None:
        v = _version(p.version)
        if v is None or Version(v.base_version) != Version(str(nccl)):
            refuse(f"torch {stack.torch.version} {stack.variant} bundles NCCL {nccl} ({pkg})", src, p)
    majors: dict[str, Any] = {}
    for p in pkgs:
        m = NCCL_WHEEL_RE.match(p.name)
        if m:
            majors.setdefault(m.group(1)[:2], p)
    if len(majors) > 1:
        a, b = list(majors.values())[:2]
        raise IncompatibleError(
            f"the lock has NCCL wheels for two CUDA majors: {a.name}=={a.version} "
            f"({where}:{a.lineno}) and {b.name}=={b.version} ({where}:{b.lineno})",
            details=[a.line, b.line])
    want_major = NCCL_WHEEL_RE.match(canonicalize_name(pkg)) if pkg else None
    for p in pkgs:
        m = NCCL_WHEEL_RE.match(p.name)
        if m and want_major and m.group(1) != want_major.group(1):
            refuse(f"torch {stack.torch.version} {stack.variant} bundles {pkg}", src, p)


def _bare(line: str) -> str:
    return line.rstrip("\\").strip()


def _version(s: str) -> Version | None:
    try:
        return Version(s)
    except InvalidVersion:
        return None


_MARKER_ENV = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
               "platform_machine": "x86_64", "implementation_name": "cpython",
               "platform_python_implementation": "CPython", "extra": ""}


def unmet(stack: Stack, reqs: Sequence[str], pkgs: list[LockedPackage], where: str) -> list[str]:
    """Top-level requirements the lock's entries do not satisfy (missing or another version)."""
    from packaging.requirements import InvalidRequirement, Requirement

    by = {p.name: p for p in pkgs}
    env = dict(_MARKER_ENV, python_version=stack.python, python_full_version=f"{stack.python}.0")
    out: list[str] = []
    for line in reqs:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        p = by.get(canonicalize_name(req.name))
        if p is None:
            out.append(f"{where}: the top-level requirement {line} has no entry in the lock")
        elif req.specifier and not req.specifier.contains(p.version, prereleases=True):
            out.append(f"{where}:{p.lineno}: {p.name}=={p.version} does not satisfy the top-level "
                       f"requirement {line}")
    return out
