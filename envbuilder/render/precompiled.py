"""Templates compiled ahead of time: a process renders without compiling a template.

Each template set (``build``: the Dockerfile, the Apptainer definition and the smoke script;
``jobs``; ``monitoring``) is declared once in ``SETS``: which templates it holds, the jinja2
options it is compiled and rendered with, and the names of its filters. ``make_env`` makes its
environment for both (the renderers pass their filter functions), so a template is compiled with
exactly the options it renders with. jinja2's own compiler (``Environment.compile_templates``)
turns a set into modules beside a ``manifest.json`` that records the jinja2 minor version and the
sha256 of each template's source.

The compiled modules are generated code, never committed. They are made:

* when the package is built: ``hatch_build.py`` (pyproject's build hook) calls ``compile_all``
  and the wheel carries them at ``envbuilder/render/_precompiled/<set>/``, the package's code
  like any other module (nothing is written where envbuilder is installed);
* in a checkout (or a wheel built by something that skipped the hook), lazily on first use,
  into the user's cache folder (``$XDG_CACHE_HOME/envbuilder/templates-<key>/<set>/``, the key
  a digest of the jinja2 version, the set's options and its templates' sha256): written to a
  temporary folder and moved into place, used only while the folder and its files belong to
  this user and are writable by no one else (they are code that runs); a folder that cannot be
  written only costs time, and ``ENVBUILDER_NO_CACHE=1`` compiles in memory instead.

At run time ``loader(set)`` puts the compiled modules first and the sources second: a template
whose source no longer matches its manifest entry, or a jinja2 of another minor version than the
one that compiled them, is compiled from its source instead, so the output is always the
source's. ``python -m envbuilder.render.precompiled OUT`` writes the modules into ``OUT`` (what the
build hook runs); ``--check`` compares the package's or the cache's modules with the templates.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from envbuilder.core.resources import templates_dir
from envbuilder.render import yamlemit

COMPILED = Path(__file__).resolve().parent / "_precompiled"  # in a wheel: the build hook's output
MANIFEST = "manifest.json"
KEEP = 8  # template cache folders kept (oldest removed beyond this)


@dataclass(frozen=True)
class TemplateSet:
    """One set of templates: which names it holds, and the environment they need."""

    select: Callable[[str], bool]  # a template name (relative to templates/) is in the set
    options: Mapping[str, Any] = field(default_factory=dict)  # jinja2.Environment options
    filters: tuple[str, ...] = ()  # the filters its templates use (the renderer provides them)


_COMMON = {"keep_trailing_newline": True, "autoescape": False}
_TRIM = {**_COMMON, "trim_blocks": True, "lstrip_blocks": True}
SETS: dict[str, TemplateSet] = {
    "build": TemplateSet(lambda name: "/" not in name, _COMMON),
    # the job files write YAML: every value through the one emitter (autoescape + finalize)
    "jobs": TemplateSet(lambda name: name.startswith("jobs/"),
                        {**_TRIM, **yamlemit.jinja_options()["environment"]}, ("q", "sh", "flow")),
    "monitoring": TemplateSet(lambda name: name.startswith("monitoring/"), _TRIM),
}


def make_env(set_name: str, loader: Any, filters: Mapping[str, Callable[..., Any]] | None = None) -> Any:
    """The environment of template set ``set_name``: its options and ``filters`` (each of the
    set's declared filters; compiling needs only their names, so a missing one is a stand-in)."""
    import jinja2

    spec = SETS[set_name]
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, **spec.options)
    given = dict(filters or {})
    unknown = set(given) - set(spec.filters)
    if unknown:
        raise KeyError(f"template set {set_name!r} declares no filter {', '.join(sorted(unknown))}")
    for name in spec.filters:
        env.filters[name] = given.get(name, _stand_in)
    return env


def _stand_in(value: Any) -> Any:  # a filter's place while compiling (never rendered with)
    return value


_FACTORIES: dict[str, Callable[[Any], Any]] = {}


def register(name: str, make: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Record the environment factory a renderer renders set ``name`` with (its module calls
    this when imported); tests/test_precompiled_templates.py checks that each makes the
    environment ``make_env`` compiles the set with."""
    if name not in SETS:
        raise KeyError(f"unknown template set {name!r} (known: {', '.join(SETS)})")
    _FACTORIES[name] = make
    return make


def factories() -> dict[str, Callable[[Any], Any]]:
    """The renderers' factories, by set (importing the renderers registers them)."""
    import envbuilder.render.jobs  # noqa: F401
    import envbuilder.render.monitoring  # noqa: F401
    import envbuilder.render.templating  # noqa: F401

    return dict(_FACTORIES)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _templates(set_name: str, root: Path | None = None) -> list[str]:
    root = root or templates_dir()
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.j2")
                  if SETS[set_name].select(p.relative_to(root).as_posix()))


def manifest_for(set_name: str, root: Path | None = None) -> dict[str, Any]:
    """What the modules of ``set_name`` compiled from the templates under ``root`` record."""
    import jinja2

    root = root or templates_dir()
    return {"generated_by": "envbuilder.render.precompiled.compile_all",
            "jinja2": _minor(jinja2.__version__),
            "options": {k: _option_text(SETS[set_name].options[k])
                        for k in sorted(SETS[set_name].options)},
            "templates": {n: _sha(root / n) for n in _templates(set_name, root)}}


def _option_text(value: Any) -> Any:
    """An environment option as the manifest records it: a function (the job files' finalize)
    by its qualified name, since the compiled code calls whatever the environment holds."""
    if callable(value):
        return f"{value.__module__}.{value.__qualname__}"
    return value


def _manifest(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def compile_set(set_name: str, dest: Path, root: Path | None = None) -> None:
    """Compile one set's templates (under ``root``, default the package's) into ``dest``."""
    import jinja2

    root = root or templates_dir()
    names = _templates(set_name, root)
    env = make_env(set_name, jinja2.FileSystemLoader(str(root)))
    dest.mkdir(parents=True, exist_ok=True)
    env.compile_templates(str(dest), zip=None, filter_func=lambda n: n in names, ignore_errors=False)
    (dest / MANIFEST).write_text(json.dumps(manifest_for(set_name, root), indent=2, sort_keys=True) + "\n")


def compile_all(out: Path, root: Path | None = None) -> None:
    """Compile every set into ``out/<set>/`` with its manifest (the build hook's step)."""
    for set_name in sorted(SETS):
        compile_set(set_name, out / set_name, root)


# -- where a process finds the modules ------------------------------------------------------------

def _cache_key(set_name: str) -> str:
    m = manifest_for(set_name)
    return hashlib.sha256(json.dumps(m, sort_keys=True).encode()).hexdigest()[:16]


def _own_and_private(path: Path) -> bool:
    """A folder or file this user owns that no one else can write (the modules are code)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode) or st.st_mode & 0o022:
        return False
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


def _usable(folder: Path, set_name: str) -> bool:
    """``folder`` holds this set's modules, fresh for these templates, and may be trusted."""
    m = _manifest(folder)
    if m is None or m != manifest_for(set_name):
        return False
    if not (_own_and_private(folder.parent) and _own_and_private(folder)):
        return False
    return all(_own_and_private(p) for p in folder.iterdir() if p.name != "__pycache__")


def cache_folder(set_name: str) -> Path:
    from envbuilder.core.matrix_cache import cache_dir

    return cache_dir() / f"templates-{_cache_key(set_name)}" / set_name


def _compile_into_cache(set_name: str) -> Path | None:
    """Compile the set into its cache folder (a temporary folder moved into place), or None
    when the cache is off or cannot be written."""
    import shutil
    import tempfile

    from envbuilder.core.matrix_cache import disabled

    if disabled():
        return None
    dest = cache_folder(set_name)
    tmp: Path | None = None
    try:
        dest.parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        dest.parent.mkdir(exist_ok=True, mode=0o700)
        tmp = Path(tempfile.mkdtemp(prefix=f".{set_name}-", dir=dest.parent))
        compile_set(set_name, tmp)
        for p in tmp.iterdir():
            p.chmod(0o600)
        try:
            os.rename(tmp, dest)
            tmp = None
        except OSError:  # another process moved its copy in first: use that one
            pass
        _prune(dest.parent.parent)
    except Exception:  # noqa: BLE001 - the cache is an optimisation: never fail a command
        return None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest if _usable(dest, set_name) else None


def _prune(folder: Path) -> None:
    """Keep the KEEP newest template cache folders (only folders this module names)."""
    import shutil

    found = []
    for p in folder.glob("templates-*"):
        try:
            found.append((p.stat().st_mtime, p))
        except OSError:
            continue
    for _, p in sorted(found, reverse=True)[KEEP:]:
        shutil.rmtree(p, ignore_errors=True)


@functools.cache
def modules_folder(set_name: str) -> Path | None:
    """Where this process loads the set's compiled modules from: the package's (a wheel), else
    the cache's (compiled there on first use), else None (compile from the sources)."""
    import jinja2

    shipped = _manifest(COMPILED / set_name)
    if shipped is not None and shipped.get("jinja2") == _minor(jinja2.__version__):
        return COMPILED / set_name
    cached = cache_folder(set_name)
    if _usable(cached, set_name):
        return cached
    return _compile_into_cache(set_name)


def loader(set_name: str, extra_dir: Path | None = None) -> Any:
    """The loader of a template set: the user's template folder first (``extra_dir``), then the
    compiled modules (where fresh), then the sources."""
    import jinja2

    chain: list[Any] = []
    if extra_dir is not None:
        chain.append(jinja2.FileSystemLoader(str(extra_dir)))
    folder = modules_folder(set_name)
    if folder is not None:
        chain.append(_loader_class()(folder))
    chain.append(jinja2.FileSystemLoader(str(templates_dir())))
    return jinja2.ChoiceLoader(chain)


@functools.cache
def _loader_class() -> Any:
    """jinja2's ModuleLoader over a folder of compiled modules, for the templates whose source
    still has the recorded sha256; every other name is "not found" there (the next loader
    compiles it). Made on first use: jinja2 is imported only by commands that render."""
    import jinja2

    class CompiledLoader(jinja2.ModuleLoader):
        def __init__(self, folder: Path) -> None:
            super().__init__(str(folder))
            manifest = _manifest(folder) or {}
            fresh = (manifest.get("jinja2") == _minor(jinja2.__version__)
                     and isinstance(manifest.get("templates"), dict))
            self.recorded: dict[str, str] = manifest["templates"] if fresh else {}
            self.checked: dict[str, bool] = {}

        def load(self, environment: Any, name: str, globals: Any = None) -> Any:
            ok = self.checked.get(name)
            if ok is None:
                source = templates_dir() / name
                ok = self.checked[name] = (name in self.recorded and source.is_file()
                                           and self.recorded[name] == _sha(source))
            if not ok:
                raise jinja2.TemplateNotFound(name)
            return super().load(environment, name, globals)

    return CompiledLoader


def stale() -> list[str]:
    """The sets whose modules (the package's, else the cache's) do not match the templates."""
    import jinja2

    out = []
    for set_name in sorted(SETS):
        folder = modules_folder(set_name)
        names = _templates(set_name)
        modules = {jinja2.ModuleLoader.get_module_filename(n) for n in names}
        have = {p.name for p in folder.glob("tmpl_*.py")} if folder is not None else set()
        if folder is None or _manifest(folder) != manifest_for(set_name) or have != modules:
            out.append(set_name)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        bad = stale()
        if bad:
            sys.stderr.write(f"compiled templates are stale for: {', '.join(bad)}\n")
            return 1
        return 0
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write("usage: python -m envbuilder.render.precompiled OUT | --check\n")
        return 2
    out = Path(args[0])
    compile_all(out)
    sys.stdout.write(f"compiled {', '.join(sorted(SETS))} into {out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
