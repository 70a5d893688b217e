"""``envbuilder init``: a project file (``envbuilder.toml``) for a team's cluster.

From the cluster's facts (the driver of its hosts, GPUs per node, nodes, the registry, the
components wanted, and on a GPU host the GPUs' compute capabilities) ``choose`` picks:

* the **target**: the newest CUDA line the resolver accepts with the driver pinned that runs
  *natively* there — the driver meets the toolkit's own minimum (no minor-version or forward
  compatibility needed: the resolver's ``driver_cuda`` warning is absent), torch is built for
  every GPU architecture seen, and the components asked for (``--with deepspeed``) resolve
  with it. The driver stays pinned in the project, so every later resolve checks it again.
* the **layout**: NODESxGPUS_PER_NODE, the jobs' world size (``render`` lays the job files and
  the smoke job out with it);
* a **requirements** stub (the team's own packages, a layer of their own).

``project_toml`` writes the file; it is read back by ``core.project`` (the schema) before it is
written. Pure: the host is read by ``diagnose`` and handed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from envbuilder.core import layouts, validate
from envbuilder.core.matrix import Matrix
from envbuilder.core.resolve import Stack, resolve_target
from envbuilder.core.target import Pins
from envbuilder.errors import EnvbuilderError, IncompatibleError, InputError

PROJECT_FILE = "envbuilder.toml"
REQUIREMENTS_FILE = "requirements.txt"
COMPONENTS = ("deepspeed", "horovod")


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

    def to_dict(self) -> dict[str, Any]:
        d = self.stack.to_dict()
        return {"target": self.target, "driver": self.pins.driver, "torch_pin": self.pins.torch,
                "with": list(self.pins.with_), "layout": self.layout, "registry": self.registry,
                "why": self.why, "also_native": self.others, "not_chosen": self.refused,
                "stack": {k: d[k] for k in ("cuda_toolkit", "driver_min", "torch",
                                            "torch_variant", "python", "nccl", "deepspeed",
                                            "horovod", "os", "base_image")}}


def _arch(cap: str) -> str:
    """``"9.0"`` -> ``"sm_90"``."""
    major, _, minor = cap.partition(".")
    return f"sm_{major}{minor or '0'}"


def choose(matrix: Matrix, *, driver: str, gpus_per_node: int, nodes: int,
           registry: str | None = None, with_: Sequence[str] = (),
           compute_caps: Sequence[str] = (), torch: str | None = None) -> Choice:
    """The target and layout for a cluster (see the module's doc). InputError for bad facts;
    IncompatibleError (exit 3) when no CUDA line runs natively on ``driver``."""
    driver = validate.driver_version(driver)
    n, p = layouts.check(nodes, gpus_per_node, "--nodes x --gpus-per-node")
    if registry is not None:
        registry = validate.repository(registry, "--registry")
    wanted = tuple(dict.fromkeys(c.strip().lower() for w in with_ for c in w.split(",") if c.strip()))
    for c in wanted:
        if c not in COMPONENTS:
            raise InputError(f"--with {c!r}: expected {' or '.join(COMPONENTS)}")
    need = sorted({_arch(c) for c in compute_caps if c})
    pins = Pins(driver=driver, with_=wanted, torch=torch)
    native: list[tuple[str, Stack]] = []
    refused: list[str] = []
    for minor in matrix.cuda_minors:
        target = "cu" + minor.replace(".", "")
        try:
            st = resolve_target(target, matrix, pins)
        except IncompatibleError as e:
            if not native:
                refused.append(f"{target}: {str(e).split(': ', 1)[-1][:200]}")
            continue
        except EnvbuilderError:
            continue
        compat = [w for w in st.warnings if w.rule == "driver_cuda"]
        d = st.to_dict()
        missing = [a for a in need if a not in d["torch_arch"]]
        if compat:
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
    return Choice(target=target, stack=st, pins=pins, layout=layouts.fmt((n, p)),
                  registry=registry, why=why, others=[t for t, _ in native[1:4]],
                  refused=refused)


def _q(s: str) -> str:
    """A TOML basic string."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def project_toml(c: Choice, *, name: str = "train", source: str) -> str:
    """The text of envbuilder.toml for ``c``; ``source`` says where the facts came from."""
    d = c.stack.to_dict()
    lines = [
        f"# envbuilder project file, written by `envbuilder init` from {source}.",
        "# `envbuilder render`, `lock` and `build` without a TARGET act on the targets below;",
        "# schema: envbuilder/data/project.schema.json (docs/user-guide.md#projects-envbuildertoml).",
        "",
        f"requirements = {_q(REQUIREMENTS_FILE)}    # the team's own packages: a layer of their own",
    ]
    if c.registry:
        lines.append(f"registry = {_q(c.registry)}    # images are pushed and tagged under it")
    lines += [
        f"layouts = [{_q(c.layout)}]    # nodes x GPUs per node of the job files and the smoke job",
        "",
        "[[targets]]",
        f"name = {_q(name)}",
        f"target = {_q(c.target)}    # {c.why}",
        f"driver = {_q(c.pins.driver or '')}    # the hosts' driver: every resolve checks it",
    ]
    if c.pins.torch:
        lines.append(f"torch = {_q(c.pins.torch)}")
    if c.pins.with_:
        lines.append("with = [" + ", ".join(_q(w) for w in c.pins.with_) + "]")
    lines.append(f"# resolves to torch {d['torch']} ({d['torch_variant']}), Python {d['python']}, "
                 f"{d['os']}, NCCL {d['nccl']}"
                 + (f", DeepSpeed {d['deepspeed']}" if d["deepspeed"] else "")
                 + (f", Horovod {d['horovod']}" if d["horovod"] else ""))
    if c.others:
        lines.append(f"# also native on this driver: {', '.join(c.others)}")
    return "\n".join(lines) + "\n"


REQUIREMENTS_STUB = """\
# The team's own Python packages, one requirement per line (pip's format), e.g.
#   transformers==4.46.3
#   datasets
# They are installed in their own image layer, after torch and the compiled components, with
# the stack's versions as constraints: changing this file rebuilds only that layer.
"""
