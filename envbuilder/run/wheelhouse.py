"""Split a local folder of wheels (and sdists) by image layer, for offline builds.

Each layer of the image installs with ``--no-index --find-links`` from its own folder in the
build context (``wheels/<layer>/``), so adding a component's wheel never changes what the torch
layer copies, and the torch layer stays cached. Which files a layer needs is the transitive
closure of its requirements over the wheels' own metadata (``Requires-Dist``), with environment
markers evaluated for the image's Python on Linux x86_64.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
from collections import defaultdict, deque
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Iterable, Mapping

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from envbuilder.errors import InputError


@dataclass(frozen=True)
class Dist:
    path: Path
    name: str
    version: Version
    requires: tuple[Requirement, ...]


def _metadata_text(path: Path) -> str | None:
    try:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as z:
                for n in z.namelist():
                    if n.endswith(".dist-info/METADATA") and n.count("/") == 1:
                        return z.read(n).decode("utf-8", "replace")
        elif path.name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(path) as t:
                for m in t.getmembers():
                    if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"):
                        f = t.extractfile(m)
                        return f.read().decode("utf-8", "replace") if f else None
    except (OSError, zipfile.BadZipFile, tarfile.TarError) as e:
        raise InputError(f"--wheelhouse file {path} cannot be read: {e}") from None
    return None


def scan(folder: Path) -> list[Dist]:
    """Every wheel and sdist in ``folder`` with its name, version and requirements."""
    if not folder.is_dir():
        raise InputError(f"--wheelhouse {folder} is not a folder of wheels")
    out: list[Dist] = []
    for p in sorted(folder.iterdir()):
        try:
            if p.suffix == ".whl":
                name, version, _, _ = parse_wheel_filename(p.name)
            elif p.name.endswith(".tar.gz"):
                name, version = parse_sdist_filename(p.name)
            else:
                continue
        except ValueError:  # InvalidWheelFilename, InvalidSdistFilename, InvalidVersion: not a distribution
            continue
        text = _metadata_text(p) or ""
        reqs = []
        for line in HeaderParser().parsestr(text).get_all("Requires-Dist") or []:
            try:
                reqs.append(Requirement(line))
            except InvalidRequirement:
                continue
        out.append(Dist(p, canonicalize_name(name), version, tuple(reqs)))
    if not out:
        raise InputError(f"--wheelhouse {folder} holds no wheels or sdists")
    return out


def _env(python: str) -> dict[str, str]:
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update({"python_version": python, "python_full_version": f"{python}.0",
                "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                "platform_machine": "x86_64", "implementation_name": "cpython",
                "platform_python_implementation": "CPython"})
    return env


def closure(dists: Iterable[Dist], roots: Iterable[str], python: str,
            deps: bool = True) -> set[Path]:
    """The files needed to install ``roots`` (requirement strings) from these dists; with
    ``deps`` False the roots' own files only (a lock's layer, installed --no-deps)."""
    by_name: dict[str, list[Dist]] = defaultdict(list)
    for d in dists:
        by_name[d.name].append(d)
    env = _env(python)
    todo: deque[tuple[Requirement, frozenset[str]]] = deque()
    for r in roots:
        todo.append((Requirement(r), frozenset()))
    seen: set[tuple[str, frozenset[str]]] = set()
    files: set[Path] = set()
    while todo:
        req, _ = todo.popleft()
        name = canonicalize_name(req.name)
        extras = frozenset(req.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for d in by_name.get(name, []):
            if req.specifier and not req.specifier.contains(d.version, prereleases=True):
                continue
            files.add(d.path)
            for sub in d.requires if deps else ():
                if sub.marker is not None:
                    if not any(sub.marker.evaluate({**env, "extra": e}) for e in (extras or {""})):
                        continue
                todo.append((sub, frozenset(sub.extras)))
    return files


def missing(dists: Iterable[Dist], requirements: Iterable[str]) -> list[str]:
    """The requirements no distribution in ``dists`` satisfies (by name and version)."""
    out = []
    for r in requirements:
        req = Requirement(r)
        name = canonicalize_name(req.name)
        if not any(d.name == name and (not req.specifier or req.specifier.contains(d.version, prereleases=True))
                   for d in dists):
            out.append(r)
    return out


def split(folder: Path, layers: Mapping[str, list[str]], python: str,
          required: Iterable[str] = (), deps: bool = True,
          fetch: str | None = None) -> dict[str, list[Path]]:
    """Files per layer: each layer gets its closure minus what earlier layers already have
    (with ``deps`` False, a locked build's: exactly the pins of the layer's files).

    ``required`` requirements must be in the folder (the layers' own packages, not their build
    helpers): an InputError (exit 2, before any build) names the ones that are not and
    ``fetch``, the command that fetches them (``envbuilder wheelhouse LOCK -o DIR``)."""
    dists = scan(folder)
    absent = missing(dists, required)
    if absent:
        raise InputError(f"--wheelhouse {folder} has no distribution for {', '.join(absent)}: "
                         f"{fetch or f'add it (pip download -d {folder} ...)'} or build with "
                         f"network access", details=absent)
    taken: set[Path] = set()
    out: dict[str, list[Path]] = {}
    for name, roots in layers.items():
        files = closure(dists, roots, python, deps) - taken
        out[name] = sorted(files)
        taken |= files
    return out


def copy_into(files: Mapping[str, list[Path]], context: Path) -> list[Path]:
    """Place each layer's files in context/wheels/<layer>/ as hard links to the wheelhouse's
    (the build folder takes no room of its own); a file is copied only where a link cannot
    be made (another file system): the files copied are returned, for the build to say so."""
    copied: list[Path] = []
    for layer, paths in files.items():
        d = context / "wheels" / layer
        d.mkdir(parents=True, exist_ok=True)
        (d / ".keep").write_text("")
        for p in paths:
            target = d / p.name
            try:
                os.link(p, target)
            except OSError:
                shutil.copy2(p, target)
                copied.append(p)
    return copied
