"""The templates compiled ahead of time (envbuilder/render/precompiled.py): fresh, used, and never
trusted over their source."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envbuilder.core.resources import templates_dir
from envbuilder.render import jobs, monitoring, precompiled, templating


def test_the_committed_modules_match_the_templates():
    # fails after a template is edited without `python -m envbuilder.render.precompiled`
    assert precompiled.stale() == [], "run: python -m envbuilder.render.precompiled"


def test_every_set_is_registered_with_its_renderers_factory():
    assert precompiled._factories() == {"build": templating.make_env, "jobs": jobs.make_env,
                                     "monitoring": monitoring.make_env}


@pytest.mark.parametrize("set_name,name", [("build", "Dockerfile.j2"), ("build", "apptainer.def.j2"),
                                           ("jobs", "jobs/slurm.sbatch.j2"),
                                           ("monitoring", "monitoring/README.md.j2")])
def test_render_loads_the_compiled_module(set_name, name):
    make = precompiled._factories()[set_name]
    template = make(precompiled.loader(set_name)).get_template(name)
    assert f"/_precompiled/{set_name}/tmpl_" in template.filename


# that the compiled modules render what the sources do is the golden tests' job: they render
# whole build folders through the compiled path (test_render_loads_the_compiled_module)


def test_an_edited_template_is_compiled_from_its_source(tmp_path, monkeypatch):
    copy = tmp_path / "templates"
    shutil.copytree(templates_dir(), copy)
    text = (copy / "smoke_run.sh.j2").read_text()
    (copy / "smoke_run.sh.j2").write_text(text + "# edited after compilation\n")
    monkeypatch.setattr(precompiled, "templates_dir", lambda: copy)
    env = templating.make_env(precompiled.loader("build"))
    assert env.get_template("smoke_run.sh.j2").filename == str(copy / "smoke_run.sh.j2")
    # an unedited one still comes from its module
    assert "/_precompiled/build/" in env.get_template("Dockerfile.j2").filename


def test_modules_of_another_jinja2_minor_are_not_used(monkeypatch):
    monkeypatch.setattr(precompiled, "_minor", lambda version: "0.0")
    env = templating.make_env(precompiled.loader("build"))
    assert "/_precompiled/" not in env.get_template("Dockerfile.j2").filename


def test_check_exits_1_on_stale_modules(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "templates"
    shutil.copytree(templates_dir(), copy)
    (copy / "jobs" / "slurm.sbatch.j2").write_text("changed\n")
    monkeypatch.setattr(precompiled, "templates_dir", lambda: copy)
    assert precompiled.main(["--check"]) == 1
    assert "stale for: jobs" in capsys.readouterr().err
    assert precompiled.main(["--bogus"]) == 2


def test_no_process_compiles_a_template(tmp_path):
    """``render --all`` (every template of every set: Dockerfile, definition, smoke script, job
    files, monitoring) in a process where compiling a template is an error: everything comes
    from the modules of the package."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    script = ("import sys, jinja2\n"
              "def boom(self, *a, **k):\n"
              "    raise SystemExit(f'compiled a template at run time: {a[1:2]}')\n"
              "jinja2.Environment.compile = boom\n"
              "from envbuilder._entry import main\n"
              "sys.argv = ['envbuilder', *sys.argv[1:]]\n"
              "main()\n")
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run([sys.executable, "-c", script, "render", "--all", "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "compiled a template" not in p.stdout + p.stderr
    assert (tmp_path / "o" / "cu118" / "Dockerfile").is_file()
    assert (tmp_path / "o" / "cu118" / "monitoring" / "README.md").is_file()
