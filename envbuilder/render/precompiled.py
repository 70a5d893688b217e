"""Templates compiled ahead of time: a process renders without compiling a template.

Each template set (``build``: the Dockerfile, the Apptainer definition and the smoke script;
``jobs``; ``monitoring``) has one factory, ``make(loader) -> jinja2.Environment``, registered
here by the module that renders it, so that the options and filters a template is compiled with
are the ones it renders with. ``python -m envbuilder.render.precompiled`` (``--check`` to verify)
compiles every set with jinja2's own compiler (``Environment.compile_templates``) into
``envbuilder/render/_precompiled/<set>/`` beside a ``manifest.json`` that records the jinja2
version and the sha256 of each template's source. The modules ship in the wheel like any other
module of the package (users cannot write them where envbuilder is installed; there is no cache
folder): they are the package's code, not data read back at run time.

At run time ``loader(set)`` puts the compiled modules first and the sources second: a template
whose source no longer matches its manifest entry (an edited checkout), or a jinja2 of another
minor version than the one that compiled them, is compiled from its source instead, so the
output is always the source's. ``tests/test_render.py`` fails when the committed modules are
stale.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable

from envbuilder.core.resources import templates_dir

COMPILED = Path(__file__).resolve().parent / "_precompiled"
MANIFEST = "manifest.json"
# which templates each set renders (names relative to templates/)
SETS: dict[str, Callable[[str], bool]] = {
    "build": lambda name: "/" not in name,
    "jobs": lambda name: name.startswith("jobs/"),
    "monitoring": lambda name: name.startswith("monitoring/"),
}
_FACTORIES: dict[str, Callable[[Any], Any]] = {}


def register(name: str, make: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Record the environment factory of template set ``name`` (called by its renderer)."""
    if name not in SETS:
        raise KeyError(f"unknown template set {name!r} (known: {', '.join(SETS)})")
    _FACTORIES[name] = make
    return make


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _manifest(set_name: str) -> dict[str, Any] | None:
    try:
        data = json.loads((COMPILED / set_name / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def loader(set_name: str, extra_dir: Path | None = None) -> Any:
    """The loader of a template set: the user's template folder first (``extra_dir``), then the
    compiled modules (where fresh), then the sources."""
    import jinja2

    chain: list[Any] = []
    if extra_dir is not None:
        chain.append(jinja2.FileSystemLoader(str(extra_dir)))
    chain.append(_loader_class()(set_name))
    chain.append(jinja2.FileSystemLoader(str(templates_dir())))
    return jinja2.ChoiceLoader(chain)


@functools.cache
def _loader_class() -> Any:
    """jinja2's ModuleLoader over ``_precompiled/<set>``, for the templates whose source still has
    the recorded sha256; every other name is "not found" there (the next loader compiles it).
    Made on first use: jinja2 is imported only by commands that render."""
    import jinja2

    class CompiledLoader(jinja2.ModuleLoader):
        def __init__(self, set_name: str) -> None:
            super().__init__(str(COMPILED / set_name))
            manifest = _manifest(set_name) or {}
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


def _templates(set_name: str) -> list[str]:
    root = templates_dir()
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.j2")
                  if SETS[set_name](p.relative_to(root).as_posix()))


def _factories() -> dict[str, Callable[[Any], Any]]:
    # the renderers register their factories when imported
    import envbuilder.render.jobs  # noqa: F401
    import envbuilder.render.monitoring  # noqa: F401
    import envbuilder.render.templating  # noqa: F401

    return dict(_FACTORIES)


def compile_all(out: Path) -> None:
    """Compile every set into ``out/<set>/`` with its manifest."""
    import jinja2

    for set_name, make in sorted(_factories().items()):
        names = _templates(set_name)
        env = make(jinja2.FileSystemLoader(str(templates_dir())))
        dest = out / set_name
        dest.mkdir(parents=True, exist_ok=True)
        env.compile_templates(str(dest), zip=None, filter_func=lambda n, names=names: n in names,
                              ignore_errors=False)
        manifest = {"generated_by": "python -m envbuilder.render.precompiled",
                    "jinja2": _minor(jinja2.__version__),
                    "templates": {n: _sha(templates_dir() / n) for n in names}}
        (dest / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def stale() -> list[str]:
    """The sets whose committed modules do not match the templates (empty when all are fresh)."""
    import jinja2

    out = []
    for set_name in sorted(_factories()):
        manifest = _manifest(set_name)
        names = _templates(set_name)
        want = {n: _sha(templates_dir() / n) for n in names}
        modules = {jinja2.ModuleLoader.get_module_filename(n) for n in names}
        have = {p.name for p in (COMPILED / set_name).glob("tmpl_*.py")}
        if manifest is None or manifest.get("templates") != want or have != modules:
            out.append(set_name)
    return out


def main(argv: list[str] | None = None) -> int:
    import shutil
    import tempfile

    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        bad = stale()
        if bad:
            sys.stderr.write(f"compiled templates are stale for: {', '.join(bad)}; "
                             "run: python -m envbuilder.render.precompiled\n")
            return 1
        return 0
    if args:
        sys.stderr.write("usage: python -m envbuilder.render.precompiled [--check]\n")
        return 2
    # written beside, then swapped in: an interrupted run leaves the old modules
    tmp = Path(tempfile.mkdtemp(prefix=".precompiled-", dir=COMPILED.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would hide the modules from other users of the checkout
    try:
        compile_all(tmp)
        old = COMPILED.with_name("_precompiled.old")
        if COMPILED.exists():
            COMPILED.rename(old)
        tmp.rename(COMPILED)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.write(f"compiled {', '.join(sorted(_factories()))} into {COMPILED}\n")
    return 0


if __name__ == "__main__":
    # run as the package's module (not __main__), whose registry the renderers fill
    from envbuilder.render.precompiled import main as _main

    raise SystemExit(_main())
