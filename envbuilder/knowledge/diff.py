"""``envbuilder diff A B``: what changes between two stacks, and which image layers rebuild.

A side is what one argument holds, read into ``Side``:

* a **target** (or a build folder's ``stack.json`` with its files): the stack's facts, the
  Dockerfile and the files it copies, and the packages of a ``requirements.lock`` beside it;
* a **lock** (``requirements.lock``): the packages, and the facts its inputs record names;
* an **image**: the facts its ``io.envbuilder.*`` labels declare.

The facts compared are the ones that decide whether a job runs (CUDA, the driver floor, torch
and its variant, NCCL, each of the matrix's components (and the pre-built ops), Python, OS,
flavour, base and builder images); packages go through the one package diff (``lock.pkgdiff``).

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
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping

from envbuilder.core import catalog
from envbuilder.errors import InputError
from envbuilder.labels import KEY_OF, PREFIX
from envbuilder.lock.pkgdiff import package_diff


# the built-in matrix's components (core.catalog), by name and in plan order
COMPONENTS = tuple(c.name for c in catalog.builtin())
PLAN_ORDER = tuple(c.name for c in sorted(catalog.builtin(), key=lambda c: (c.order, c.name)))
OPS = {c.ops_key: c.name for c in catalog.builtin() if c.has_ops}  # pre-built ops' key -> component


def _component_facts() -> tuple[tuple[str, str], ...]:
    """Each component's version, and after a component with ops its pre-built ops."""
    out: list[tuple[str, str]] = []
    for c in catalog.builtin():
        out.append((c.name, c.title))
        if c.has_ops:
            out.append((c.ops_key, f"{c.title} ops"))
    return tuple(out)


# the facts compared, in the order shown; label names where an image's label carries them
FACTS: tuple[tuple[str, str], ...] = (
    ("cuda", "CUDA toolkit"), ("driver_min", "driver floor"), ("torch", "torch"),
    ("torch_variant", "torch variant"), ("nccl", "NCCL"), *_component_facts(), ("python", "Python"),
    ("os", "OS"), ("flavour", "flavour"), ("base_image", "base image"),
    ("builder_image", "builder image"),
)
# the stage that installs each fact (the Dockerfile's stage names), for sides without one
FACT_STAGE = {"cuda": "builder", "python": "builder", "os": "builder",
              "builder_image": "builder", "torch": "layer-torch", "torch_variant": "layer-torch",
              "nccl": "layer-torch", **{c: f"layer-{c}" for c in COMPONENTS},
              **{k: f"layer-{c}" for k, c in OPS.items()},
              "base_image": "runtime", "flavour": "runtime", "driver_min": ""}
CHAIN = ("builder", "layer-torch", *(f"layer-{c}" for c in PLAN_ORDER), "layer-team")
# a component's layer holds its package (named as the component) and what it pulls in
_LAYER_ROOTS = {"layer-torch": {"torch", "numpy"}, **{f"layer-{c}": {c} for c in PLAN_ORDER}}


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
            "nccl": d.get("nccl"), **{c: d.get(c) for c in COMPONENTS},
            **{k: ",".join(d.get(k) or ()) or None for k in OPS},
            "python": d.get("python"), "os": d.get("os"),
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
            **{c: lab(c) for c in COMPONENTS}, **{k: labels.get(KEY_OF[k]) or None for k in OPS},
            "python": lab("python"), "os": lab("os"),
            "flavour": lab("flavour"),
            "base_image": labels.get("org.opencontainers.image.base.name") or None}


def facts_from_lock_record(record: Mapping[str, Any]) -> dict[str, str | None]:
    """The facts a lock's inputs record names (``torch: 2.1.2 (cu121)``, ``nccl: 2.18.1
    (nvidia-nccl-cu12)``, ``<component>: none``)."""
    def val(key: str) -> str | None:
        v = record.get(key)
        return None if v in (None, "none") else str(v)

    torch = val("torch") or ""
    m = re.match(r"(\S+) \((\S+)\)", torch)
    nccl = val("nccl")
    return {"torch": m.group(1) if m else torch or None, "torch_variant": m.group(2) if m else None,
            "nccl": nccl.split(" ")[0] if nccl else None,
            **{c: val(c) for c in PLAN_ORDER}, "python": val("python")}


# -- a build folder: capped reads, no link followed, typed stack.json -------------------------

BIG_FILE = 32 << 20  # a copied file larger than this is compared by its size and mtime (one fstat)
MAX_FILES = 20000  # files under one copied folder
_STR_FACTS = ("cuda_toolkit", "torch", "torch_variant", "nccl", *COMPONENTS, "python",
              "os", "flavour", "base_image", "builder_image", "target")
_NOFOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | \
    getattr(os, "O_CLOEXEC", 0)


def stack_json(text: str, shown: str) -> dict[str, Any]:
    """A build folder's stack.json read with its shape checked: an object whose facts are
    strings (or null), ``driver_min`` a string or an object with a string ``version``,
    ``image`` an object with string ``runtime``/``builder``, the pre-built ops a list of strings; else InputError
    (exit 2) naming the file and the key."""
    try:
        d = json.loads(text)
    except (ValueError, RecursionError):
        raise InputError(f"{shown} is not JSON: give a build folder envbuilder render wrote") from None

    def bad(key: str, want: str) -> InputError:
        return InputError(f"{shown}: {key!r} is not {want}: give a build folder envbuilder "
                          f"render wrote (or render it again)")

    if not isinstance(d, dict):
        raise bad("(top level)", "an object")
    for k in _STR_FACTS:
        if d.get(k) is not None and not isinstance(d[k], str):
            raise bad(k, "a string")
    dm = d.get("driver_min")
    if dm is not None and not isinstance(dm, str) and not (
            isinstance(dm, dict) and isinstance(dm.get("version"), (str, type(None)))):
        raise bad("driver_min", "a string or an object with a string version")
    img = d.get("image")
    if img is not None and not (isinstance(img, dict) and all(
            isinstance(img.get(k), (str, type(None))) for k in ("runtime", "builder"))):
        raise bad("image", "an object whose runtime and builder are strings")
    for key in OPS:
        ops = d.get(key)
        if ops is not None and not (isinstance(ops, list) and all(isinstance(x, str) for x in ops)):
            raise bad(key, "a list of strings")
    return d


def _fd_file(fd: int) -> bytes | None:
    """A regular file's bytes from ``fd`` (a big one: its size and mtime, one fstat)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return None
    if st.st_size > BIG_FILE:
        return f"stat:{st.st_size}:{st.st_mtime_ns}".encode()
    chunks, got = [], 0
    while got <= BIG_FILE:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def _fd_tree(fd: int, prefix: str, out: list[tuple[str, bytes]], budget: list[int]) -> None:
    """(relative path, bytes) of every regular file under the folder ``fd``, no link followed."""
    for name in os.listdir(fd):
        budget[0] -= 1
        if budget[0] < 0:
            raise InputError(f"more than {MAX_FILES} files under one copied folder of a build "
                             f"folder: not one envbuilder render wrote")
        try:
            sub = os.open(name, _NOFOLLOW, dir_fd=fd)
        except OSError:  # a link, or gone: not read
            continue
        try:
            if stat.S_ISDIR(os.fstat(sub).st_mode):
                _fd_tree(sub, f"{prefix}{name}/", out, budget)
            else:
                data = _fd_file(sub)
                if data is not None:
                    out.append((prefix + name, data))
        finally:
            os.close(sub)


def _fd_bytes(fd: int) -> bytes | None:
    """What a copied path holds, from the descriptor ``fd`` (closed here): a file's bytes, a
    folder's files as ``rel\\0bytes`` in path order (as the in-memory side lays them out)."""
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            return _fd_file(fd)
        files: list[tuple[str, bytes]] = []
        _fd_tree(fd, "", files, [MAX_FILES])
        return b"".join(rel.encode() + b"\0" + data for rel, data in sorted(files))
    except OSError:
        return None
    finally:
        os.close(fd)


def folder_reader(folder: Path) -> Callable[[str], bytes | None]:
    """``read(rel)`` for a build folder's COPY sources: ``rel`` must stay inside ``folder``
    (lexically, ``Path.is_relative_to``), and is opened one component at a time without
    following a link; a big file costs one ``fstat``."""
    root = Path(os.path.abspath(folder))

    def read(rel: str) -> bytes | None:
        rel = rel.rstrip("/") or "."
        if not Path(os.path.normpath(root / rel)).is_relative_to(root):
            return None
        parts = [x for x in PurePosixPath(rel).parts if x not in (".", "")]
        if any(x == ".." or x.startswith("/") for x in parts):
            return None
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        for part in parts:
            try:
                nxt = os.open(part, _NOFOLLOW, dir_fd=fd)
            except OSError:
                os.close(fd)
                return None
            os.close(fd)
            fd = nxt
        return _fd_bytes(fd)

    return read


def build_side(folder: Path, arg: str) -> Side:
    """The Side of a build folder: its stack.json (typed), Dockerfile and requirements.lock
    through the capped reader, none of them through a link (exit 2 naming the file)."""
    from envbuilder.core.readfile import read_text_capped
    from envbuilder.lock.requirements import read_lock

    def text(name: str, what: str) -> str | None:
        p = folder / name
        if not os.path.lexists(p):
            return None
        return read_text_capped(p, what, follow_links=False)

    sj = text("stack.json", "stack.json")
    if sj is None:
        raise InputError(f"{arg} is a folder without stack.json: give a build folder "
                         f"(envbuilder render writes one) or a requirements.lock")
    lock = text("requirements.lock", "lock")
    pkgs = {x.name: x.version for x in read_lock(lock)} if lock is not None else None
    return Side("build", arg, facts=facts_from_stack(stack_json(sj, str(folder / "stack.json"))),
                packages=pkgs, dockerfile=text("Dockerfile", "Dockerfile"),
                read=folder_reader(folder))


def lock_side(path: Path, arg: str) -> Side:
    """The Side of a lock file: its packages and the facts its inputs record names, read
    through the capped reader and the lock model (lock.model: a missing or unknown format
    version is one line, exit 2, naming the file)."""
    from envbuilder.core.readfile import read_text_capped
    from envbuilder.lock.entries import read_lock
    from envbuilder.lock.model import lock_path_fix, read

    text = read_text_capped(path, "lock")
    locked = read_lock(text)
    if not locked:
        raise InputError(f"{arg} holds no pinned package: give a requirements.lock "
                         f"(envbuilder lock writes one), a build folder or a target")
    lf = read(text, arg, lock_path_fix(path))
    return Side("lock", arg, facts=facts_from_lock_record(lf.record or {}),
                packages={x.name: x.version for x in locked},
                via={x.name: x.via for x in locked})


def path_side(path: Path, arg: str) -> Side:
    """The Side of an existing path: a build folder (or its stack.json), else a lock."""
    folder = path if path.is_dir() else path.parent if path.name == "stack.json" else None
    if folder is not None:
        return build_side(folder, arg)
    return lock_side(path, arg)


def files_reader(files: Mapping[str, str | bytes]) -> Callable[[str], bytes | None]:
    """``read(rel)`` over a build folder held in memory (``{relative path: content}``, as
    render would write it): a file's bytes, or a folder's files (name, NUL, bytes) in order;
    only paths inside ``rel`` (``PurePosixPath.is_relative_to``: ``build2`` is not inside
    ``build``)."""
    blobs = {PurePosixPath(k): v.encode() if isinstance(v, str) else v for k, v in files.items()}

    def read(rel: str) -> bytes | None:
        want = PurePosixPath(rel.rstrip("/") or ".")
        if want in blobs:
            return blobs[want]
        if want.is_absolute() or ".." in want.parts or not want.parts:
            return None  # outside the folder, or the whole of it: not a COPY source read here
        inner = sorted(k for k in blobs if k != want and k.is_relative_to(want))
        if not inner:
            return None
        return b"".join(str(k.relative_to(want)).encode() + b"\0" + blobs[k] for k in inner)

    return read


def files_side(arg: str, files: Mapping[str, str | bytes]) -> Side:
    """The Side of a target: the build folder render would write for it, in memory."""
    sj = files["stack.json"]
    dockerfile = files.get("Dockerfile")
    lock = files.get("requirements.lock")  # a target with its lock (a project's build/<name>/)
    pkgs: dict[str, str] | None = None
    via: dict[str, tuple[str, ...]] = {}
    if isinstance(lock, str):
        from envbuilder.lock.entries import read_lock

        locked = read_lock(lock)
        pkgs = {x.name: x.version for x in locked}
        via = {x.name: x.via for x in locked}
    return Side("target", arg, facts=facts_from_stack(stack_json(
                    sj if isinstance(sj, str) else sj.decode(), f"{arg}: stack.json")),
                packages=pkgs, via=via,
                dockerfile=dockerfile if isinstance(dockerfile, str) else None,
                read=files_reader(files))


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


_OPTIONAL_STAGE = {f"layer-{c}": c for c in COMPONENTS}


def _chain(a: Side, b: Side) -> tuple[str, ...]:
    """The build chain of these two sides: a component's layer only where a side has that
    component (a lock or stack that says a component is "none" on both sides has no layer of it);
    a side that does not know keeps the layer."""
    def absent(fact: str) -> bool:
        return all(fact in s.facts and s.facts[fact] in (None, "", "none") for s in (a, b))

    return tuple(st for st in CHAIN if not (st in _OPTIONAL_STAGE and absent(_OPTIONAL_STAGE[st])))


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
    chain = _chain(a, b)
    first = next((i for i, s in enumerate(chain) if s in why), None)
    for i, st in enumerate(chain):
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
