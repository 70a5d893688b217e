"""Shared helpers of the core test suite (matrix, rules, resolve, render, cli).

Plain functions, no fixtures: tests/conftest.py belongs to another part of the suite.
"""

from __future__ import annotations

import re
import shutil
from functools import lru_cache
from pathlib import Path

from envbuilder.core.matrix import (
    ComponentRelease, Matrix, NcclRelease, OsInfo, Toolkit, TorchRelease, load_matrix,
)
from envbuilder.core.resources import matrices_dir

# The golden-file, rule and resolver tests name versions: they run against a frozen copy of the
# matrix (tests/data/matrix-frozen/), so a matrix edit does not rewrite them. LIVE is the
# built-in matrix users get; tests/test_live_matrix.py checks its invariants.
FROZEN = Path(__file__).resolve().parent / "data" / "matrix-frozen"
LIVE = matrices_dir()
MATRICES = FROZEN
REPO = Path(__file__).resolve().parent.parent
HADOLINT_CONFIG = REPO / ".hadolint.yaml"
GOLDEN = Path(__file__).resolve().parent / "golden"
# golden folder -> (target, pins): every base flavour and every kind of builder
GOLDEN_CASES: dict[str, tuple[str, dict]] = {
    "cpu": ("cpu", {}),
    "cu118": ("cu118", {}),  # cuda-base, nothing compiles
    "cu121-ds": ("cu121-ds", {}),  # DeepSpeed ops pre-built on the nvidia/cuda devel builder
    "cu118-hvd": ("cu118-hvd", {}),  # Horovod against torch's NCCL, devel builder
    "cu121-cuda-runtime": ("cu121", {"flavour": "cuda-runtime"}),
    "cu121-cudnn-runtime": ("cu121", {"flavour": "cudnn-runtime"}),
    "cu124-debian12-os": ("cu124-torch2.6-debian12", {}),  # plain OS image, CUDA from the wheels
    "cu117-hvd-debian12": ("cu117-torch2.0-hvd0.28-debian12", {}),  # Debian's non-free nvcc 11.8, GCC 11
    "cu124-ds-debian13": ("cu124-torch2.6-debian13", {"ds_ops": "fused_adam,cpu_adam"}),  # nvcc 12.4, GCC 13
    "cu130-ds-pip-nvcc": ("cu130-torch2.11-debian12", {"ds_ops": "fused_adam"}),  # NVIDIA's CUDA 13 wheels
}
GOLDEN_TARGETS = tuple(GOLDEN_CASES)
GOLDEN_FILES = ("Dockerfile", "envbuilder.def", "requirements.in")


@lru_cache(maxsize=1)
def builtin() -> Matrix:
    """The frozen copy of the built-in matrix, loaded once per test session."""
    return load_matrix(FROZEN)


@lru_cache(maxsize=1)
def live() -> Matrix:
    """The live built-in matrix (matrices/), loaded once per test session."""
    return load_matrix()


# -- broken copies of the matrix -------------------------------------------------------------

def copy_matrix(dest: Path) -> Path:
    """A writable copy of the built-in matrix folder at ``dest``."""
    shutil.copytree(MATRICES, dest, ignore=shutil.ignore_patterns("*.md"))
    return dest


def edit(folder: Path, name: str, old: str, new: str, count: int = 1) -> Path:
    """Replace ``old`` by ``new`` in one matrix file; ``old`` must be there (guards the test)."""
    p = folder / name
    text = p.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not found in {p}: the test's anchor is out of date"
    p.write_text(text.replace(old, new, count), encoding="utf-8")
    return p


# -- matrix objects by version ----------------------------------------------------------------

def toolkit(m: Matrix, version: str) -> Toolkit:
    return next(t for t in m.toolkits if str(t.version) == version)


def newest_toolkit(m: Matrix, cuda_minor: str) -> Toolkit:
    return m.toolkits_for(cuda_minor)[0]


def torch(m: Matrix, version: str) -> TorchRelease:
    return next(t for t in m.torch if str(t.version) == version)


def os_(m: Matrix, name: str) -> OsInfo:
    return m.os[name]


def nccl(m: Matrix, version: str) -> NcclRelease:
    n = next((n for n in m.nccl if str(n.version) == version), None)
    assert n is not None, f"NCCL {version} is not in the matrix"
    return n


def component(m: Matrix, name: str, version: str) -> ComponentRelease:
    return next(c for c in m.component(name).releases if str(c.version) == version)


# -- parsing rendered files ------------------------------------------------------------------

def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs; comments dropped, continuation lines joined with \\n."""
    out: list[tuple[str, str]] = []
    buf: list[str] = []
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        joined = "\n".join(buf)
        buf = []
        word, _, rest = joined.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not buf, "the Dockerfile ends inside a continuation line"
    return out


def dockerfile_stages(text: str) -> list[dict]:
    """One dict per FROM: image, name, instructions."""
    stages: list[dict] = []
    args: dict[str, str] = {}
    for word, rest in dockerfile_instructions(text):
        if word == "ARG" and not stages:
            k, _, v = rest.partition("=")
            args[k] = v
            continue
        if word == "FROM":
            parts = rest.split()
            image = parts[0]
            m = re.fullmatch(r"\$\{(\w+)\}", image)
            if m:
                image = args[m.group(1)]
            name = parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else None
            stages.append({"image": image, "name": name, "instructions": []})
            continue
        stages[-1]["instructions"].append((word, rest))
    return stages


def run_commands(run_args: str) -> list[str]:
    """The commands of one RUN joined with ' && ' (as envbuilder renders them)."""
    return [c.strip() for c in re.split(r"\n\s*&& ", run_args)]


def dockerfile_kv(args: str) -> dict[str, str]:
    """ENV / LABEL arguments 'k=v k2="v 2"' (envbuilder renders one pair per line)."""
    out: dict[str, str] = {}
    for line in args.split("\n"):
        line = line.strip()
        if not line:
            continue
        k, _, v = line.partition("=")
        if len(v) >= 2 and v[0] == v[-1] == '"':
            v = v[1:-1]
        out[k] = v
    return out


def apptainer_stages(text: str) -> list[dict]:
    """One dict per 'Bootstrap:' header: headers and sections (name -> lines, dedented)."""
    stages: list[dict] = []
    section: str | None = None
    for line in text.splitlines():
        if line.startswith("#") and section is None:
            continue
        if line.startswith("Bootstrap:"):
            stages.append({"headers": {}, "sections": {}})
            section = None
        if not stages:
            continue
        st = stages[-1]
        if line.startswith("%"):
            section = line
            st["sections"][section] = []
            continue
        if section is None:
            if ":" in line:
                k, _, v = line.partition(":")
                st["headers"][k.strip()] = v.strip()
            continue
        if line.strip():
            st["sections"][section].append(line.strip())
    return stages


def section(stage: dict, prefix: str) -> list[str]:
    """The lines of the first section whose header starts with ``prefix`` (e.g. '%post')."""
    for name, lines in stage["sections"].items():
        if name.startswith(prefix):
            return lines
    raise KeyError(prefix)


PIP_RE = re.compile(r"(^|\s)pip (install|freeze)\b")
