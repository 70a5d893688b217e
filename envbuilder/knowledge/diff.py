"""``envbuilder diff A B``: what changes between two stacks, and which image layers rebuild.

A side is what one argument holds, read into ``Side``:

* a **target** (or a build folder's ``stack.json`` with its files): the stack's facts, the
  Dockerfile and the files it copies, and the packages of a ``requirements.lock`` beside it;
* a **lock** (``requirements.lock``): the packages, and the facts its inputs record names;
* an **image**: the facts its ``io.envbuilder.*`` labels declare.

The facts compared are the ones that decide whether a job runs (CUDA, the driver floor, torch
and its variant, NCCL, DeepSpeed and its pre-built ops, Horovod, Python, OS, flavour, base and
builder images); packages go through the one package diff (``lock.pkgdiff``).

Which layers rebuild: where both sides have a Dockerfile, the answer is the engine's cache
rule applied to the two Dockerfiles: a stage rebuilds from its first instruction whose text, or
whose copied files' bytes, differ, and everything after it in that stage and in every stage
built on it (``COPY --from`` of a rebuilt stage included). Comments do not count. Without
Dockerfiles (locks, images) it is estimated from the facts: each fact belongs to the stage that
installs it (``FACT_STAGE``), and a lock's package to the layer whose top-level requirement
pulls it in first (its ``# via`` chain).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from envbuilder.labels import PREFIX
from envbuilder.lock.pkgdiff import package_diff

# the facts compared, in the order shown; label names where an image's label carries them
FACTS: tuple[tuple[str, str], ...] = (
    ("cuda", "CUDA toolkit"), ("driver_min", "driver floor"), ("torch", "torch"),
    ("torch_variant", "torch variant"), ("nccl", "NCCL"), ("deepspeed", "DeepSpeed"),
    ("deepspeed_ops", "DeepSpeed ops"), ("horovod", "Horovod"), ("python", "Python"),
    ("os", "OS"), ("flavour", "flavour"), ("base_image", "base image"),
    ("builder_image", "builder image"),
)
# the stage that installs each fact (the Dockerfile's stage names), for sides without one
FACT_STAGE = {"cuda": "builder", "python": "builder", "os": "builder",
              "builder_image": "builder", "torch": "layer-torch", "torch_variant": "layer-torch",
              "nccl": "layer-torch", "horovod": "layer-horovod",
              "deepspeed": "layer-deepspeed", "deepspeed_ops": "layer-deepspeed",
              "base_image": "runtime", "flavour": "runtime", "driver_min": ""}
CHAIN = ("builder", "layer-torch", "layer-horovod", "layer-deepspeed", "layer-team")
_LAYER_ROOTS = {"layer-torch": {"torch", "numpy"}, "layer-horovod": {"horovod"},
                "layer-deepspeed": {"deepspeed"}}


@dataclass
class Side:
    kind: str  # "target", "build", "lock" or "image"
    name: str
    facts: dict[str, str | None] = field(default_factory=dict)  # a key absent: not known
    packages: dict[str, str] | None = None  # {name: version}; None: no lock
    dockerfile: str | None = None
    read: Callable[[str], bytes | None] | None = None  # a build-context file's bytes
    via: dict[str, tuple[str, ...]] = field(default_factory=dict)  # a lock's `# via` parents


# -- reading sides ----------------------------------------------------------------------------

def facts_from_stack(d: Mapping[str, Any]) -> dict[str, str | None]:
    """The compared facts of a stack dict (``Stack.to_dict()`` or a build folder's stack.json)."""
    dm = d.get("driver_min")
    image = d.get("image") or {}
    return {"cuda": d.get("cuda_toolkit") or "cpu",
            "driver_min": dm.get("version") if isinstance(dm, dict) else dm,
            "torch": d.get("torch"), "torch_variant": d.get("torch_variant"),
            "nccl": d.get("nccl"), "deepspeed": d.get("deepspeed"),
            "deepspeed_ops": ",".join(d.get("deepspeed_ops") or ()) or None,
            "horovod": d.get("horovod"), "python": d.get("python"), "os": d.get("os"),
            "flavour": d.get("flavour"),
            "base_image": image.get("runtime") or d.get("base_image"),
            "builder_image": image.get("builder") or d.get("builder_image")}


def facts_from_labels(labels: Mapping[str, str]) -> dict[str, str | None]:
    """The compared facts an image's labels declare (the base image from the OCI label)."""
    def lab(key: str) -> str | None:
        return labels.get(PREFIX + key) or None

    cuda = lab("cuda-toolkit") or ("cpu" if lab("cuda") == "cpu" else lab("cuda"))
    return {"cuda": cuda, "driver_min": lab("driver-min"), "torch": lab("torch"),
            "torch_variant": lab("torch-variant"), "nccl": lab("nccl"),
            "deepspeed": lab("deepspeed"), "deepspeed_ops": lab("deepspeed-ops"),
            "horovod": lab("horovod"), "python": lab("python"), "os": lab("os"),
            "flavour": lab("flavour"),
            "base_image": labels.get("org.opencontainers.image.base.name") or None}


def facts_from_lock_record(record: Mapping[str, Any]) -> dict[str, str | None]:
    """The facts a lock's inputs record names (``torch: 2.1.2 (cu121)``, ``nccl: 2.18.1
    (nvidia-nccl-cu12)``, ``horovod: none``)."""
    def val(key: str) -> str | None:
        v = record.get(key)
        return None if v in (None, "none") else str(v)

    torch = val("torch") or ""
    m = re.match(r"(\S+) \((\S+)\)", torch)
    nccl = val("nccl")
    return {"torch": m.group(1) if m else torch or None, "torch_variant": m.group(2) if m else None,
            "nccl": nccl.split(" ")[0] if nccl else None, "horovod": val("horovod"),
            "deepspeed": val("deepspeed"), "python": val("python")}


# -- comparing --------------------------------------------------------------------------------

def diff(a: Side, b: Side) -> dict[str, Any]:
    """The difference from ``a`` to ``b`` as plain data (``--json`` prints it as it is)."""
    facts = []
    for key, title in FACTS:
        if key not in a.facts and key not in b.facts:
            continue
        va, vb = a.facts.get(key, "unknown"), b.facts.get(key, "unknown")
        if key in a.facts and key in b.facts and va == vb:
            continue
        facts.append({"fact": key, "title": title, "a": va, "b": vb})
    pkgs = None
    if a.packages is not None and b.packages is not None:
        pkgs = package_diff(a.packages, b.packages).to_dict()
    if a.dockerfile is not None and b.dockerfile is not None:
        stages, how = dockerfile_rebuilds(a, b), "dockerfile"
    else:
        stages, how = estimated_rebuilds(a, b, facts, pkgs), "estimated from the facts"
    return {"a": {"kind": a.kind, "name": a.name}, "b": {"kind": b.kind, "name": b.name},
            "facts": facts, "packages": pkgs, "rebuild": stages, "rebuild_from": how,
            "same": not facts and not (pkgs and (pkgs["added"] or pkgs["removed"]
                                                 or pkgs["changed"]))
                    and not any(s["rebuilds"] for s in stages)}


@dataclass
class _Stage:
    name: str
    parent: str  # the FROM argument
    steps: list[tuple[str, str]]  # (instruction text, cache key)


_FROM = re.compile(r"FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE)


def _instructions(text: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments and blanks left out."""
    out: list[str] = []
    cur = ""
    for raw in text.splitlines():
        s = raw.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue
        if s.endswith("\\"):
            cur += s[:-1].rstrip() + " "
            continue
        out.append((cur + s).strip())
        cur = ""
    if cur.strip():
        out.append(cur.strip())
    return out


def _copy_key(ins: str, read: Callable[[str], bytes | None] | None) -> str:
    """The instruction plus the digest of what a COPY/ADD from the build context copies."""
    parts = ins.split()
    if parts[0].upper() not in ("COPY", "ADD") or read is None:
        return ins
    args = [p for p in parts[1:] if not p.startswith("--")]
    if any(p.startswith("--from=") for p in parts[1:]):
        return ins
    h = hashlib.sha256(ins.encode())
    for src in args[:-1]:
        data = read(src)
        h.update(src.encode() + b"\0" + (data if data is not None else b"<missing>"))
    return h.hexdigest()


def _substitute(args: Mapping[str, str]) -> Callable[[re.Match[str]], str]:
    def sub(v: re.Match[str]) -> str:
        return args.get(v.group(1), v.group(0)).strip('"')

    return sub


def stages(dockerfile: str, read: Callable[[str], bytes | None] | None) -> list[_Stage]:
    out: list[_Stage] = []
    glob: list[str] = []  # ARGs before the first FROM: they resolve the FROM lines
    for ins in _instructions(dockerfile):
        m = _FROM.match(ins)
        if m:
            args = dict(a[4:].split("=", 1) for a in glob if a.upper().startswith("ARG ") and "=" in a)
            shown = re.sub(r"\$\{?(\w+)\}?", _substitute(args), ins)
            out.append(_Stage(m.group(2) or str(len(out)), m.group(1), [(shown, shown)]))
        elif not out:
            glob.append(ins)
        else:
            out[-1].steps.append((ins, _copy_key(ins, read)))
    return out


def dockerfile_rebuilds(a: Side, b: Side) -> list[dict[str, Any]]:
    """B's stages, each with whether the engine's cache of A's build would serve it."""
    assert a.dockerfile is not None and b.dockerfile is not None
    old = {s.name: s for s in stages(a.dockerfile, a.read)}
    rebuilt: set[str] = set()
    result = []
    for st in stages(b.dockerfile, b.read):
        prev = old.get(st.name)
        first: int | None = None
        reason = ""
        if st.parent in rebuilt:
            first, reason = 0, f"its parent stage {st.parent} rebuilds"
        elif prev is None:
            first, reason = 0, "a stage A does not have"
        else:
            for i, (ins, key) in enumerate(st.steps):
                other = prev.steps[i][1] if i < len(prev.steps) else None
                from_rebuilt = re.search(r"--from=(\S+)", ins)
                if from_rebuilt and from_rebuilt.group(1) in rebuilt:
                    first, reason = i, f"it copies from {from_rebuilt.group(1)}, which rebuilds"
                    break
                if key != other:
                    first = i
                    reason = ("the files it copies changed" if other is not None
                              and ins == prev.steps[i][0] else "its base image changed"
                              if i == 0 else "the instruction changed")
                    break
        if first is not None:
            rebuilt.add(st.name)
        result.append({"stage": st.name, "rebuilds": first is not None,
                       "from": st.steps[first][0][:160] if first is not None else None,
                       "steps": len(st.steps) - first if first is not None else 0,
                       "why": reason})
    return result


def _package_layers(side: Side) -> dict[str, str]:
    """{package: the layer that installs it}: the first layer (in build order) whose top-level
    requirement pulls it in through the lock's `# via` chain; the rest is the team's layer."""
    children: dict[str, set[str]] = {}
    for pkg, parents in side.via.items():
        for p in parents:
            children.setdefault(p, set()).add(pkg)
    out: dict[str, str] = {}
    for layer in CHAIN[1:-1]:
        todo = [r for r in _LAYER_ROOTS[layer] if r in (side.packages or {})]
        while todo:
            p = todo.pop()
            if p in out:
                continue
            out[p] = layer
            todo.extend(children.get(p, ()))
    for p in side.packages or {}:
        out.setdefault(p, "layer-team")
    return out


def estimated_rebuilds(a: Side, b: Side, facts: list[dict], pkgs: dict | None) -> list[dict]:
    """The stages a change rebuilds, from the facts and packages alone (no Dockerfile)."""
    why: dict[str, list[str]] = {}
    for f in facts:
        st = FACT_STAGE.get(f["fact"], "")
        if st:
            why.setdefault(st, []).append(f"{f['title']} {f['a']} -> {f['b']}")
    if pkgs:
        where = _package_layers(a) | _package_layers(b)
        for n, v in pkgs["added"].items():
            why.setdefault(where.get(n, "layer-team"), []).append(f"+{n} {v}")
        for n, v in pkgs["removed"].items():
            why.setdefault(where.get(n, "layer-team"), []).append(f"-{n} {v}")
        for n, c in pkgs["changed"].items():
            why.setdefault(where.get(n, "layer-team"), []).append(f"{n} {c['from']} -> {c['to']}")
    out = []
    first = next((i for i, s in enumerate(CHAIN) if s in why), None)
    for i, st in enumerate(CHAIN):
        if first is not None and i >= first:
            reason = "; ".join(why.get(st, [])) or "a stage below it rebuilds"
            out.append({"stage": st, "rebuilds": True, "from": None, "steps": None, "why": reason})
    if first is not None or "runtime" in why:
        reason = "; ".join(why.get("runtime", [])) or "it copies the rebuilt layers"
        out.append({"stage": "runtime", "rebuilds": True, "from": None, "steps": None,
                    "why": reason})
    return out


def text_lines(d: Mapping[str, Any]) -> list[str]:
    """The diff as the lines ``envbuilder diff`` prints after its table (packages, layers)."""
    out: list[str] = []
    p = d.get("packages")
    if p is not None:
        from envbuilder.lock.pkgdiff import PackageDiff

        pd = PackageDiff(added=p["added"], removed=p["removed"],
                         changed={k: (v["from"], v["to"]) for k, v in p["changed"].items()},
                         unchanged=p["unchanged"])
        out.append(f"packages: {pd.summary()}")
        out += [f"  {ln}" for ln in pd.lines()]
    rb = [s for s in d["rebuild"] if s["rebuilds"]]
    if not rb:
        out.append("layers: nothing rebuilds (the engine's cache of A serves B)"
                   if d["rebuild_from"] == "dockerfile" else "layers: nothing rebuilds")
    else:
        out.append(f"layers that rebuild ({d['rebuild_from']}):")
        for s in rb:
            where = f" from `{s['from']}`" if s.get("from") else ""
            out.append(f"  {s['stage']}{where}: {s['why']}")
        kept = [s["stage"] for s in d["rebuild"] if not s["rebuilds"]]
        if kept:
            out.append(f"  cached: {', '.join(kept)}")
    return out
