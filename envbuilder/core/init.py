"""``envbuilder init``: a project file (``envbuilder.toml``) for a team's cluster.

From the cluster's facts (the driver of its hosts, GPUs per node, nodes, the registry, the
components wanted, and on a GPU host the GPUs' compute capabilities) ``choose`` picks:

* the **target**: the newest CUDA line the resolver accepts with the driver pinned that runs
  *natively* there — the driver meets the toolkit's own minimum (no minor-version or forward
  compatibility needed: the resolver's ``driver_cuda`` warning is absent), torch is built for
  every GPU architecture seen, and the components asked for (``--with NAME``) resolve
  with it. The driver stays pinned in the project, so every later resolve checks it again.
* the **layout**: NODESxGPUS_PER_NODE, the jobs' world size (``render`` lays the job files and
  the smoke job out with it);
* a **requirements** stub (the team's own packages, a layer of their own).

``project_toml`` writes the file; it is read back by ``core.project`` (the schema) before it is
written. Pure: the host is read by ``diagnose`` and handed in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from envbuilder.core import layouts, validate
from envbuilder.core.matrix import Matrix
from envbuilder.core.resolve import Stack, resolve_target
from envbuilder.core.target import Pins
from envbuilder.errors import EnvbuilderError, IncompatibleError, InputError

PROJECT_FILE = "envbuilder.toml"
REQUIREMENTS_FILE = "requirements.txt"


@dataclass
class Choice:
    target: str  # e.g. cu121
    stack: Stack
    pins: Pins
    layout: str
    registry: str | None
    why: str
    others: list[str] = field(default_factory=list)  # other native CUDA lines, newest first
    refused: list[str] = field(default_factory=list)  # newer lines, and why not
    # newer lines the driver runs by minor-version compatibility only (not chosen, said)
    minor_compat: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. the driver branch's end of life

    def to_dict(self) -> dict[str, Any]:
        d = self.stack.to_dict()
        torch = None if self.pins.torch is None else str(self.pins.torch)
        return {"target": self.target, "driver": self.pins.driver, "torch_pin": torch,
                "with": list(self.pins.with_), "layout": self.layout, "registry": self.registry,
                "why": self.why, "also_native": self.others, "not_chosen": self.refused,
                "minor_compat": self.minor_compat, "warnings": self.warnings,
                "stack": {k: d[k] for k in ("cuda_toolkit", "driver_min", "torch",
                                            "torch_variant", "python", "nccl",
                                            *self.stack.matrix.component_names, "os", "base_image")}}


def _arch(cap: str) -> str:
    """``"9.0"`` -> ``"sm_90"``."""
    major, _, minor = cap.partition(".")
    return f"sm_{major}{minor or '0'}"


def _check_facts(compute_caps: Sequence[str]) -> None:
    for cap in compute_caps:
        if cap and not re.fullmatch(r"[0-9]{1,2}\.[0-9]{1,2}", cap):
            raise InputError(f"the GPU compute capability {cap[:40]!r} this host reports is not "
                             f"one (e.g. 9.0): give --driver and --gpus-per-node")


def choose(matrix: Matrix, *, driver: str, gpus_per_node: int, nodes: int,
           registry: str | None = None, with_: Sequence[str] = (),
           compute_caps: Sequence[str] = (), torch: str | None = None) -> Choice:
    """The target and layout for a cluster (see the module's doc). InputError for bad facts;
    IncompatibleError (exit 3) when no CUDA line runs natively on ``driver``."""
    pins = Pins.of(driver=driver, torch=torch)  # the one check of the pins given
    n, p = layouts.check(nodes, gpus_per_node, "--nodes x --gpus-per-node")
    if registry is not None:
        registry = validate.repository(registry, "--registry")
    wanted = tuple(dict.fromkeys(c.strip().lower() for w in with_ for c in w.split(",") if c.strip()))
    for c in wanted:
        if c not in matrix.component_names:
            raise InputError(f"--with {c!r}: expected {' or '.join(matrix.component_names)}")
    _check_facts(compute_caps)
    need = sorted({_arch(c) for c in compute_caps if c})
    pins = replace(pins, with_=wanted)
    native: list[tuple[str, Stack]] = []
    refused: list[str] = []
    by_compat: list[str] = []
    for minor in matrix.cuda_minors:
        target = "cu" + minor.replace(".", "")
        try:
            st = resolve_target(target, matrix, pins)
        except IncompatibleError as e:
            if not native:
                refused.append(f"{target}: {str(e).split(': ', 1)[-1][:200]}")
            continue
        except InputError:  # a pin the matrix does not know (--torch 9.9): bad input, exit 2,
            raise           # as resolve says it, not "upgrade the driver"
        except EnvbuilderError:
            continue
        compat = [w for w in st.warnings if w.rule == "driver_cuda"]
        d = st.to_dict()
        missing = [a for a in need if a not in d["torch_arch"]]
        if compat:
            if not native and any("runs only through minor-version compatibility" in w.message
                                                     for w in compat):
                by_compat.append(target)
            if not native:
                refused.append(f"{target}: needs driver >= {d['driver_min']['version']} to run "
                               f"natively (driver {driver} runs it only through compatibility)")
            continue
        if missing:
            if not native:
                refused.append(f"{target}: torch {d['torch']} ({d['torch_variant']}) is not "
                               f"built for {', '.join(missing)}")
            continue
        native.append((target, st))
    if not native:
        raise IncompatibleError(
            f"no CUDA line of the matrix runs natively on driver {driver}"
            + (f" with {', '.join(wanted)}" if wanted else "")
            + (f" with torch {torch}" if torch else "")
            + (f" on {', '.join(need)}" if need else "")
            + ": upgrade the driver, or give --driver for the hosts the images will run on",
            details=refused)
    target, st = native[0]
    d = st.to_dict()
    why = (f"the newest CUDA line that runs natively on driver {driver}: CUDA "
           f"{d['cuda_toolkit']} needs >= {d['driver_min']['version']}"
           + (f"; torch {d['torch']} is built for {', '.join(need)}" if need else ""))
    from envbuilder.core.advisories import driver_eol_warning

    eol = driver_eol_warning(driver, matrix)
    return Choice(target=target, stack=st, pins=pins, layout=layouts.fmt((n, p)),
                  registry=registry, why=why, others=[t for t, _ in native[1:4]],
                  refused=refused, minor_compat=by_compat, warnings=[eol] if eol else [])


def project_data(c: Choice, *, name: str = "train", repository: str | None = None) -> dict[str, Any]:
    """The values of envbuilder.toml for ``c``, each validated (InputError for a bad one).
    With a registry, ``repository`` (the project folder's name, core.naming) is written beside
    it: the registry is a registry and namespace, the images REGISTRY/REPOSITORY:<tag>."""
    validate.path_segment(name, "--name")
    target: dict[str, Any] = {"name": name, "target": c.target, "driver": c.pins.driver}
    if c.pins.torch:
        target["torch"] = str(c.pins.torch)
    if c.pins.with_:
        target["with"] = list(c.pins.with_)
    data: dict[str, Any] = {"requirements": REQUIREMENTS_FILE}
    if c.registry:
        data["registry"] = c.registry  # checked by choose
        if repository is not None:
            data["repository"] = validate.repository(repository, "repository")
    data["layouts"] = [c.layout]
    data["targets"] = [target]
    return data


def _comment(text: str) -> str:
    """``# text``: one line of printable characters, else InputError (a comment never carries
    a line break, a control character or an escape sequence into the file)."""
    if not text.isprintable() or len(text) > 400:
        raise InputError(f"refusing to write a comment holding {text[:120]!r}: not one "
                         f"printable line")
    return f"# {text}"


# comments written before the key they explain
_KEY_NOTES = {
    "requirements": "the team's own packages: a layer of their own",
    "registry": "the registry and namespace images are pushed and tagged under",
    "repository": "the images: REGISTRY/REPOSITORY:<target>-<stack tag> (core.naming)",
    "layouts": "nodes x GPUs per node of the job files and the smoke job",
    "driver": "the hosts' driver: every resolve checks it",
}


def project_toml(c: Choice, *, name: str = "train", source: str, repository: str | None = None) -> str:
    """The text of envbuilder.toml for ``c``: the values written by a TOML writer (tomli-w)
    from ``project_data``, comments only of printable single lines; read back, the text holds
    exactly those values. ``source`` says where the facts came from."""
    import tomli_w

    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    data = project_data(c, name=name, repository=repository)
    d = c.stack.to_dict()
    top = {k: v for k, v in data.items() if k != "targets"}
    body = tomli_w.dumps(top).splitlines()
    for t in data["targets"]:  # an array of tables, one [[targets]] each (its keys by the writer)
        body += ["", "[[targets]]", *tomli_w.dumps(t).splitlines()]
    lines = [
        _comment(f"envbuilder project file, written by `envbuilder init` from {source}."),
        _comment("`envbuilder render`, `lock` and `build` without a TARGET act on the targets below;"),
        _comment("schema: envbuilder/data/project.schema.json (docs/user-guide.md#projects-envbuildertoml)."),
        "",
    ]
    for line in body:
        key = line.split(" = ", 1)[0] if " = " in line else None
        if key == "target":
            lines.append(_comment(c.why))
        elif key in _KEY_NOTES:
            lines.append(_comment(_KEY_NOTES[key]))
        lines.append(line)
    lines.append(_comment(f"resolves to torch {d['torch']} ({d['torch_variant']}), Python "
                          f"{d['python']}, {d['os']}, NCCL {d['nccl']}"
                          + "".join(f", {k.title} {d[k.name]}" for k in c.stack.matrix.components
                                    if d[k.name])))
    if c.others:
        lines.append(_comment(f"also native on this driver: {', '.join(c.others)}"))
    if c.minor_compat:
        lines.append(_comment(f"by minor-version compatibility only (no PTX JIT of newer kernels): "
                              f"{', '.join(c.minor_compat)}"))
    lines += [_comment(f"warning: {w}") for w in c.warnings]
    text = "\n".join(lines).rstrip("\n") + "\n"
    if tomllib.loads(text) != data:  # pragma: no cover - the writer and the comments above
        raise InputError("envbuilder init: the project file would not hold the values given")
    return text


REQUIREMENTS_STUB = """\
# The team's own Python packages, one requirement per line (pip's format), e.g.
#   transformers==4.46.3
#   datasets
# They are installed in their own image layer, after torch and the compiled components, with
# the stack's versions as constraints: changing this file rebuilds only that layer.
"""
