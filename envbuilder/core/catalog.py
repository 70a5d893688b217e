"""The matrix's components as their files name them, read without a YAML parser.

A component of the matrix is one file, ``matrices/<name>.yaml``, beside the core files
(``CORE_FILES``); its ``component:`` line says who it is: its ``tag`` (the part that names its
version in targets and image tags, e.g. ``te1.2``), its ``title`` (its name in sentences), its
``order`` (where the resolver assigns it and the plan installs its layer: torch is 0, the
team's layers come last at 80 and 90), what ``verify`` ``checks`` of it, and, for a component
whose named ops are pre-built at install time, ``ops_default`` (the ops a CUDA target gets).
That line is one line of JSON (YAML's flow syntax), so the option table (``core.options``: a
``--NAME`` pin and its help per component, the ``--TAG-ops`` option) reads it here when the
command line is built, without importing PyYAML; ``core.matrix`` loads the whole file and checks
that the line says the same.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from envbuilder.errors import MatrixError

# the matrix's own files; every other <name>.yaml of a matrix folder is a component's
CORE_FILES = ("base_images.yaml", "cuda.yaml", "incompatibilities.yaml", "nccl.yaml", "os.yaml",
              "targets.yaml", "toolchains.yaml", "torch.yaml")
# files of a matrix folder that are neither: the bandwidth floors the smoke job is judged by
# (core.matrix.load_floors), which the resolver does not read
OTHER_FILES = ("bandwidth.yaml",)
# names a component cannot take: the core axes and what the target grammar already spells
RESERVED = frozenset({"cuda", "torch", "python", "nccl", "os", "flavour", "driver", "platform",
                      "fabric", "target", "with", "without", "cpu", "any", "py", "cu", "team",
                      "team-compiled"})
NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
_LINE = re.compile(r"^component:[ \t]*(\{.*\})[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class Identity:
    """Who a component is (its file's ``component:`` line)."""

    name: str  # the file's name: the axis, the pin option, stack.json's key
    tag: str
    title: str
    order: int
    checks: str
    ops_default: tuple[str, ...] | None = None  # None: it has no ops

    @property
    def has_ops(self) -> bool:
        return self.ops_default is not None

    @property
    def ops_key(self) -> str:
        """Its pre-built ops' key in stack.json, plans and diffs (``<name>_ops``)."""
        return f"{self.name}_ops"

    @property
    def ops_option(self) -> str:
        """The option that names the ops to pre-build (``<tag>_ops``: ``--<tag>-ops``)."""
        return f"{self.tag}_ops"


def component_files(folder: Path) -> list[Path]:
    """The component files of a matrix folder, by name."""
    return sorted(p for p in folder.glob("*.yaml") if p.name not in CORE_FILES + OTHER_FILES)


def check_name(path: Path) -> str:
    """The component a file names (its stem), or MatrixError when it cannot name one."""
    name = path.stem
    if NAME_RE.fullmatch(name) is None or name in RESERVED:
        raise MatrixError(f"matrix file {path}: {name!r} cannot name a component (lower-case letters, "
                          f"digits and _, not one of {', '.join(sorted(RESERVED))})")
    return name


def identity(path: Path, text: str | None = None) -> Identity:
    """A component file's ``component:`` line (``text``: the file's, when already read). The
    built-in matrix's files keep it on one line (a test checks); a team's matrix folder is read
    by core.matrix with YAML, where any style of the mapping does."""
    name = check_name(path)
    found = _LINE.search(text if text is not None else path.read_text(encoding="utf-8"))
    if found is None:
        raise MatrixError(f"matrix file {path}: a component file starts with its component: line, "
                          'one line of JSON, e.g. component: {"tag": "te", "title": "TransformerEngine", '
                          '"order": 30, "checks": "its version"}')
    try:
        d = json.loads(found.group(1))
        ops = d.get("ops_default")
        return Identity(name, str(d["tag"]), str(d["title"]), int(d["order"]), str(d["checks"]),
                        None if ops is None else tuple(str(o) for o in ops))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise MatrixError(f"matrix file {path}, key component: not one line of JSON with tag, title, "
                          f"order and checks") from None


@functools.lru_cache(maxsize=8)
def _read(folder: Path) -> tuple[Identity, ...]:
    return tuple(identity(p) for p in component_files(folder))


def builtin() -> tuple[Identity, ...]:
    """The built-in matrix's components, by name (what the command line offers options for)."""
    from envbuilder.core.resources import matrices_dir

    return _read(matrices_dir())
