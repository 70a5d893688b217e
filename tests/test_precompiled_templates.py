"""The templates compiled ahead of time (envbuilder/render/precompiled.py): fresh, used, and never
trusted over their source."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest

from envbuilder.core.resources import templates_dir
from envbuilder.render import precompiled, templating


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of the test's own, and no modules folder remembered from before."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("ENVBUILDER_NO_CACHE", raising=False)
    precompiled.modules_folder.cache_clear()
    yield tmp_path / "cache" / "envbuilder"
    precompiled.modules_folder.cache_clear()


def test_no_generated_module_is_in_the_checkout():
    root = Path(__file__).resolve().parent.parent
    assert not (root / "envbuilder" / "render" / "_precompiled").exists()
    tracked = subprocess.run(["git", "ls-files", "envbuilder/render/_precompiled"], cwd=root,
                             capture_output=True, text=True).stdout
    assert tracked == ""


def test_a_checkout_compiles_each_set_once_into_the_cache(cache):
    assert precompiled.stale() == []  # compiled on first use, fresh for the templates
    for set_name in precompiled.SETS:
        folder = precompiled.modules_folder(set_name)
        assert folder is not None and folder.is_relative_to(cache), folder
        assert folder.stat().st_mode & 0o077 == 0
        names = precompiled._templates(set_name)
        assert names and {p.name for p in folder.glob("tmpl_*.py")} == {
            jinja2.ModuleLoader.get_module_filename(n) for n in names}


def test_the_modules_are_the_templates_compiled(cache, tmp_path):
    """The compiled code is checked against the templates: the build hook's output (compile_all
    into a folder, as hatch_build.py runs it) and the cache's are the same bytes, and each
    module is what jinja2 compiles from the template's current source with the set's options."""
    hook = tmp_path / "hook"
    precompiled.compile_all(hook)
    for set_name in precompiled.SETS:
        cached = precompiled.modules_folder(set_name)
        assert cached is not None
        files = sorted(p.name for p in (hook / set_name).iterdir())
        assert files == sorted(p.name for p in cached.iterdir() if p.name != "__pycache__")
        for f in files:
            assert (hook / set_name / f).read_bytes() == (cached / f).read_bytes(), f
        env = precompiled.make_env(set_name, jinja2.FileSystemLoader(str(templates_dir())))
        for name in precompiled._templates(set_name):
            source, filename, _ = env.loader.get_source(env, name)
            code = env.compile(source, name, filename, raw=True, defer_init=True)
            module = (cached / jinja2.ModuleLoader.get_module_filename(name)).read_text()
            assert code in module, name


def test_every_renderer_renders_with_the_environment_its_set_is_compiled_with():
    defaults = set(jinja2.Environment().filters)
    for set_name, make in precompiled.factories().items():
        spec = precompiled.SETS[set_name]
        env = make(jinja2.DictLoader({}))
        for option, value in spec.options.items():
            assert getattr(env, option) == value, (set_name, option)
        assert env.undefined is jinja2.StrictUndefined
        assert set(env.filters) - defaults == set(spec.filters), set_name
    assert set(precompiled.factories()) == set(precompiled.SETS)


@pytest.mark.parametrize("set_name,name", [("build", "Dockerfile.j2"), ("build", "apptainer.def.j2"),
                                           ("jobs", "jobs/slurm.sbatch.j2"),
                                           ("monitoring", "monitoring/README.md.j2")])
def test_render_loads_the_compiled_module(cache, set_name, name):
    make = precompiled.factories()[set_name]
    template = make(precompiled.loader(set_name)).get_template(name)
    assert template.filename.startswith(str(precompiled.modules_folder(set_name)) + "/tmpl_")


# that the compiled modules render what the sources do is also the golden tests' job: they
# render whole build folders through the compiled path (test_render_loads_the_compiled_module)


def test_an_edited_template_is_compiled_from_its_source(cache, tmp_path, monkeypatch):
    precompiled.modules_folder("build")  # compiled before the edit
    copy = tmp_path / "templates"
    shutil.copytree(templates_dir(), copy)
    text = (copy / "smoke_run.sh.j2").read_text()
    (copy / "smoke_run.sh.j2").write_text(text + "# edited after compilation\n")
    monkeypatch.setattr(precompiled, "templates_dir", lambda: copy)
    env = templating.make_env(precompiled.loader("build"))
    assert env.get_template("smoke_run.sh.j2").filename == str(copy / "smoke_run.sh.j2")
    # an unedited one still comes from its module
    assert "/tmpl_" in env.get_template("Dockerfile.j2").filename
    # a new process (a new key: the templates changed) compiles the edited set anew
    precompiled.modules_folder.cache_clear()
    env = templating.make_env(precompiled.loader("build"))
    assert "/tmpl_" in env.get_template("smoke_run.sh.j2").filename


def test_modules_of_another_jinja2_minor_are_not_used(cache, monkeypatch):
    precompiled.modules_folder("build")
    monkeypatch.setattr(precompiled, "_minor", lambda version: "0.0")
    env = templating.make_env(precompiled.loader("build"))
    assert "/tmpl_" not in env.get_template("Dockerfile.j2").filename


def test_a_cache_others_can_write_is_not_trusted(cache):
    folder = precompiled.modules_folder("build")
    assert folder is not None
    folder.chmod(0o777)  # someone else could have put code there
    precompiled.modules_folder.cache_clear()
    assert precompiled.modules_folder("build") is None  # the sources, compiled in memory
    env = templating.make_env(precompiled.loader("build"))
    assert env.get_template("Dockerfile.j2").filename == str(templates_dir() / "Dockerfile.j2")


def test_no_cache_compiles_in_memory(cache, monkeypatch):
    monkeypatch.setenv("ENVBUILDER_NO_CACHE", "1")
    assert precompiled.modules_folder("jobs") is None
    assert not cache.exists()


def test_check_exits_1_on_stale_modules(tmp_path, monkeypatch, capsys):
    precompiled.compile_all(tmp_path)
    (tmp_path / "jobs" / precompiled.MANIFEST).write_text("{}")
    monkeypatch.setattr(precompiled, "modules_folder", lambda s: tmp_path / s)
    assert precompiled.main(["--check"]) == 1
    assert "stale for: jobs" in capsys.readouterr().err
    assert precompiled.main(["--bogus"]) == 2


def test_no_process_compiles_a_template(tmp_path):
    """``render --all`` (every template of every set: Dockerfile, definition, smoke script, job
    files, monitoring) in a process where compiling a template is an error, once the first
    process compiled them into the cache: everything comes from the compiled modules."""
    import os
    import sys

    root = Path(__file__).resolve().parent.parent
    script = ("import sys, jinja2\n"
              "def boom(self, *a, **k):\n"
              "    raise SystemExit(f'compiled a template at run time: {a[1:2]}')\n"
              "jinja2.Environment.compile = boom\n"
              "from envbuilder._entry import main\n"
              "sys.argv = ['envbuilder', *sys.argv[1:]]\n"
              "main()\n")
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("ENVBUILDER_NO_CACHE", None)
    first = subprocess.run([sys.executable, "-m", "envbuilder", "render", "cpu", "-o", str(tmp_path / "first")],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    p = subprocess.run([sys.executable, "-c", script, "render", "--all", "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "compiled a template" not in p.stdout + p.stderr
    assert (tmp_path / "o" / "cu118" / "Dockerfile").is_file()
    assert (tmp_path / "o" / "cu118" / "monitoring" / "README.md").is_file()
