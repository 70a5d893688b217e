"""Rules of the code that ruff's own settings cannot say (issue 27): package code has no
per-file exception to the complexity rules, at most 8 functions carry a noqa for them (each with
its reason), and every broad ``except`` outside the smoke payload names what it guards."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "envbuilder"
COMPLEXITY = {"C901", "PLR0912", "PLR0915"}
MAX_COMPLEXITY_NOQA = 0  # issue 43: no function over the limits

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def _package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if "payload" not in p.parts and "_precompiled" not in p.parts)


def test_no_per_file_complexity_exception_for_package_code():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ignores = config["tool"]["ruff"]["lint"].get("per-file-ignores", {})
    held = {glob: sorted(COMPLEXITY & set(rules)) for glob, rules in ignores.items()
            if glob.startswith("envbuilder/") and COMPLEXITY & set(rules)}
    assert held == {}, f"package code is held to the complexity rules: {held}"


def test_few_functions_carry_a_complexity_noqa_each_with_its_reason():
    found = []
    for p in _package_files():
        for n, line in enumerate(p.read_text().splitlines(), 1):
            m = re.search(r"#\s*noqa:\s*([A-Z0-9, ]+)(.*)$", line)
            if m and COMPLEXITY & {c.strip() for c in m.group(1).split(",")}:
                where = f"{p.relative_to(ROOT)}:{n}"
                assert line.lstrip().startswith("def ") or " def " in line, f"{where}: not on a def line"
                assert m.group(2).lstrip().startswith("- ") and len(m.group(2)) > 12, f"{where}: a complexity noqa without its reason"
                found.append(where)
    assert len(found) <= MAX_COMPLEXITY_NOQA, found


def test_every_broad_except_names_what_it_guards():
    bare = []
    for p in _package_files():
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if re.search(r"except\s+(Exception|BaseException)\b.*:\s*$", line) or re.match(r"\s*except\s*:", line):
                bare.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert bare == [], "a broad except names what it guards in a comment:\n" + "\n".join(bare)


def test_the_layer_table_of_internals_names_every_module():
    """docs/internals.md's layer table stays current: every package's modules are named in its
    row, every top-level module has a row (or, a private one, a mention)."""
    doc = (ROOT / "docs" / "internals.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("  | `") and len(cells) == 3:
            for layer in re.findall(r"`([^`]+)`", cells[0]):
                rows[layer] = set(re.findall(r"`([\w/]+)`", cells[2]))
    missing = []
    for p in sorted(PACKAGE.iterdir()):
        if p.is_dir() and (p / "__init__.py").is_file() and p.name != "data":
            named = rows.get(f"{p.name}/")
            for m in sorted(p.glob("*.py")):
                if m.stem != "__init__" and (named is None or m.stem not in named):
                    missing.append(f"{p.name}/{m.name}")
        elif p.suffix == ".py" and p.stem not in ("__init__", "__main__"):
            if (p.name not in rows) if not p.stem.startswith("_") else (f"`{p.name}`" not in doc):
                missing.append(p.name)
    assert missing == [], f"docs/internals.md's layer table does not name: {missing}"


def test_no_test_module_imports_torch_when_collected():
    """Collecting the suite imports no torch (seconds, and a CUDA probe): a test that needs it
    imports it inside, or skips on ``importlib.util.find_spec("torch")``."""
    import ast

    found = []
    for p in sorted((ROOT / "tests").glob("*.py")):
        todo = list(ast.parse(p.read_text()).body)
        while todo:
            node = todo.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue  # runs when called, not when collected
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "torch" or n.startswith("torch.") for n in names):
                found.append(f"{p.name}:{node.lineno}")
            todo.extend(n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt))
    assert found == [], found


def test_core_names_no_component():
    """Issue 43: a component is its module and its matrix file; core reads them generically
    (core.catalog, core.matrix.Component, core.compiles) and names none of them."""
    named = sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "core").rglob("*.py")
                   if re.search(r"deepspeed|horovod", p.read_text(encoding="utf-8"), re.IGNORECASE))
    assert named == []


def test_a_component_is_named_in_few_modules_outside_its_own():
    """Issue 27: outside the component's own module (and diagnose/, the smoke payload, data/
    and the generated templates), at most 6 modules of envbuilder/ name DeepSpeed or Horovod:
    generic code iterates over the matrix's components (core.catalog) instead."""
    skip = ("diagnose/", "run/payload/", "data/", "_precompiled")
    for name in ("deepspeed", "horovod"):
        naming = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                        if not any(s in str(p.relative_to(PACKAGE)) for s in skip)
                        and p.relative_to(PACKAGE) != Path("components") / f"{name}.py"
                        and name in p.read_text(encoding="utf-8").lower())
        assert len(naming) <= 6, (name, naming)
