"""The one lock placed in the plan's layers (``split_by_layer``), and each layer's pins for
an offline build's wheelhouse (``layer_pins``)."""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from packaging.utils import canonicalize_name

from envbuilder import __version__
from envbuilder.lock.entries import LOCK_NAME, NCCL_WHEEL_RE, LockedPackage, read_lock


_BIG_WHEEL_RE = re.compile(r"^(torch|triton|pytorch-triton(-[a-z0-9]+)?|nvidia-(?!ml-py$).+)\Z")


def stack_layer_names(pkgs: Sequence[LockedPackage]) -> set[str]:
    """The packages of the stack layer: torch and the large, stable wheels it pins (its
    ``nvidia-*`` CUDA wheels, triton) as the lock's dependency graph shows them, plus any NCCL
    wheel (a compiled component may link one). Their versions are fixed by torch itself: no team requirement
    moves them (one that tries is refused), so this layer's file is the same whatever the
    team asks for."""
    by_name = {p.name: p for p in pkgs}
    children: dict[str, set[str]] = {}
    for p in pkgs:
        for parent in p.via:
            children.setdefault(parent, set()).add(p.name)
    seen: set[str] = set()
    todo = ["torch"] if "torch" in by_name else []
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(children.get(n, ()))
    return {n for n in seen if _BIG_WHEEL_RE.match(n)} | \
        {p.name for p in pkgs if NCCL_WHEEL_RE.match(p.name)}


def _entry_text(p: LockedPackage) -> str:
    """An entry as a layer file holds it: the pin and its hashes, without uv's ``# via``
    comments (which name whoever else needs it: they would change with the team's lines)."""
    keep = [ln for ln in p.text.splitlines() if not ln.strip().startswith("#")]
    if keep:
        keep[-1] = keep[-1].rstrip().rstrip("\\").rstrip()
    return "\n".join(keep) + "\n"


def split_by_layer(lock_text: str, plan) -> dict[str, str]:
    """Place the packages of one lock in the plan's layers, keeping hashes; every layer
    installs its file with ``--no-deps`` (the lock is already the whole environment).

    * ``torch`` (the stack layer): torch and the big wheels it pins (stack_layer_names);
    * for each compiled component's layer, in the plan's order: ``<layer>.build``
      gets the closure of its build requirements not placed yet (the first one also gets
      what ``import torch`` needs: torch's small dependencies and numpy), then ``<layer>``
      the closure of its own requirements;
    * the last layer (the top one: the team's, which a locked plan always has) gets
      everything else: the team's lines and their dependencies, torch's small dependencies
      when nothing compiles.
    """
    from packaging.requirements import Requirement

    pkgs = read_lock(lock_text)
    by_name = {p.name: p for p in pkgs}
    children: dict[str, set[str]] = {p.name: set() for p in pkgs}
    for p in pkgs:
        for parent in p.via:
            children.setdefault(parent, set()).add(p.name)

    placed: dict[str, str] = {}

    def closure(roots: Iterable[str]) -> list[str]:
        seen: list[str] = []
        todo: list[str] = [canonicalize_name(r) for r in roots]
        while todo:
            n = todo.pop()
            if n in placed or n in seen or n not in by_name:
                continue
            seen.append(n)
            todo.extend(sorted(children.get(n, set())))
        return seen

    layers = list(plan.layers)
    first, rest = layers[0], layers[1:]
    order: list[str] = [first.name]
    for n in stack_layer_names(pkgs):
        placed[n] = first.name
    # what importing torch needs beyond the big wheels (compiled layers import it to build)
    stack_layer = [n for n in placed]
    torch_deps = closure([*(c for n in sorted(stack_layer) for c in sorted(children.get(n, ()))),
                          *(Requirement(r).name for r in first.requirements)])
    compiled = [la for la in rest if la.build_requirements or la.no_build_isolation]
    for layer in rest:
        if layer in compiled:
            key = f"{layer.name}.build"
            order.append(key)
            roots = [Requirement(r).name for r in layer.build_requirements]
            if layer is compiled[0]:
                roots = [*torch_deps, *roots]
            for n in closure(roots):
                placed[n] = key
        order.append(layer.name)
        for n in closure(Requirement(r).name for r in layer.requirements):
            placed[n] = layer.name
    last = layers[-1].name
    for p in pkgs:
        placed.setdefault(p.name, last)

    header = lock_text.split("\n")
    source = next((h for h in header if h.startswith("# target:")), None)
    out: dict[str, str] = {}
    for key in order:
        entries = [p for p in pkgs if placed[p.name] == key]
        lines = [f"# layer {key}: cut from {LOCK_NAME} by envbuilder {__version__}",
                 *([source] if source else []),
                 "# install: pip install --no-deps --require-hashes -r <this file>", ""]
        out[key] = "\n".join(lines) + "".join(_entry_text(p) for p in entries)
    return out


def layer_pins(plan, files: dict[str, str | bytes]) -> dict[str, list[str]]:
    """Per layer of a locked build folder (``files`` from build_files), the ``name==version``
    pins its requirement files hold (``<layer>.build`` with its layer): what an offline build
    takes from a wheelhouse for each layer (run.wheelhouse.split with ``deps=False``)."""
    out: dict[str, list[str]] = {}
    for layer in plan.layers:
        pins: list[str] = []
        for path in (f"requirements/{layer.name}.build.txt", layer.file):
            text = files.get(path)
            if isinstance(text, str):
                pins += [f"{p.name}=={p.version}" for p in read_lock(text)]
        out[layer.name] = pins
    return out
