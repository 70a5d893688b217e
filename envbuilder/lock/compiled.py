"""Recognising a team's packages that build against torch, for the lock and the build.

A package compiles against the image's torch when envbuilder knows it does (the sourced list in
``envbuilder/data/compiled_packages.yaml``: flash-attn, apex, transformer-engine, xformers,
causal-conv1d, mamba-ssm, torch-scatter, torch-sparse), when the project names it
(``compiled = ["my-ops"]``), or when its source distribution says so: build requirements
(``[build-system] requires``) that name torch, or a ``setup.py`` that imports torch. Such a
package fails in an isolated build (no torch there, or another one) and must be built in the
team-compiled layer (components.team_compiled); the lock resolves its build requirements with it.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import Mapping, Sequence

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename

from envbuilder.core.resolve import Stack
from envbuilder.errors import InputError
from envbuilder.components import team_compiled as rc

_IMPORTS_TORCH = re.compile(r"^\s*(import\s+torch\b|from\s+torch(\.[\w.]+)?\s+import\b)", re.M)
_MAX_MEMBER = 1 << 20


def _why(pyproject: str | None, setup_py: str | None) -> str | None:
    if pyproject:
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            data = tomllib.loads(pyproject)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            data = {}
        for line in (data.get("build-system") or {}).get("requires") or ():
            try:
                if canonicalize_name(Requirement(str(line)).name) == "torch":
                    return "its build requirements name torch (pyproject.toml [build-system] requires)"
            except InvalidRequirement:
                continue
    if setup_py and _IMPORTS_TORCH.search(setup_py):
        return "its setup.py imports torch"
    return None


def builds_against_torch(path: Path) -> str | None:
    """Why the source at ``path`` (an sdist .tar.gz or a source folder) builds against torch,
    or None when its metadata does not say so."""
    texts: dict[str, str] = {}
    if path.is_dir():
        for name in ("pyproject.toml", "setup.py"):
            f = path / name
            if f.is_file() and f.stat().st_size <= _MAX_MEMBER:
                texts[name] = f.read_text("utf-8", "replace")
    elif path.name.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(path) as t:
                for m in t.getmembers():
                    parts = m.name.split("/")
                    if (len(parts) == 2 and parts[1] in ("pyproject.toml", "setup.py") and m.isfile()
                            and m.size <= _MAX_MEMBER):
                        fh = t.extractfile(m)
                        if fh is not None:
                            texts[parts[1]] = fh.read().decode("utf-8", "replace")
        except (OSError, tarfile.TarError) as e:
            raise InputError(f"{path} cannot be read as an sdist: {e}") from None
    return _why(texts.get("pyproject.toml"), texts.get("setup.py"))


def detect_in_folder(folder: Path, names: Sequence[str]) -> dict[str, str]:
    """Of the packages ``names``, those whose sdist in ``folder`` (a wheelhouse) builds against
    torch and which have no wheel there: name -> why."""
    want = {canonicalize_name(n) for n in names}
    wheels = {canonicalize_name(p.name.split("-")[0]) for p in folder.glob("*.whl")}
    out: dict[str, str] = {}
    for p in sorted(folder.glob("*.tar.gz")):
        try:
            name, _ = parse_sdist_filename(p.name)
        except Exception:  # noqa: BLE001 - not an sdist name: not a package of the team
            continue
        n = canonicalize_name(name)
        if n in want and n not in wheels:
            why = builds_against_torch(p)
            if why:
                out[n] = f"{why} ({p.name})"
    return out


def check_wheelhouse(folder: Path, plain: Sequence[str]) -> None:
    """A team package left in the plain team layer whose sdist in the wheelhouse builds against
    torch would fail there (build isolation): bad input naming it and the fix."""
    names = [rc._name(ln) for ln in plain]
    found = detect_in_folder(folder, names)
    if found:
        n, why = next(iter(found.items()))
        raise InputError(f"{n} builds against torch ({why}) and would fail in the team layer's isolated "
                         f"build: add it to the project's compiled list (compiled = [\"{n}\"]) so it "
                         f"builds after torch with --no-build-isolation")


def lock_build_requirements(stack: Stack, team: Sequence[str], compiled: Sequence[str] = (),
                            detected: Mapping[str, str] | None = None) -> list[str]:
    """What a lock adds for the team's compiled packages: their build requirements (resolved
    with the rest). A stack that cannot build them is refused here, before uv runs (exit 3)."""
    split = rc.split_team(list(team), rc.explicit_names(compiled) if compiled else (), detected)
    if not split:
        return []
    rc.refuse_unbuildable(stack, split)
    return list(rc.build_requirements(split))
