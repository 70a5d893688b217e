"""envbuilder.api imports a verb's module when its name is first used (PEP 562), so a command
pays only for what it calls: ``explain`` never loads the matrix, the resolver or the engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import envbuilder.api as api
from envbuilder.core.where import any_project_file

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_is_listed_once_and_resolves():
    assert api.__all__ == sorted(api._WHERE)
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    assert set(api.__all__) <= set(dir(api))


def test_an_unknown_name_is_an_attribute_error():
    try:
        api.no_such_function  # noqa: B018
    except AttributeError as e:
        assert "no_such_function" in str(e)
    else:
        raise AssertionError("an unknown name resolved")


def _modules_after(code: str, cwd: Path | None = None) -> set[str]:
    p = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('envbuilder'))))"],
                       capture_output=True, text=True, check=True, cwd=cwd,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    return set(json.loads(p.stdout.splitlines()[-1]))


def test_importing_the_api_imports_no_verb():
    assert _modules_after("import envbuilder.api") == {"envbuilder", "envbuilder.api"}


def test_explain_loads_neither_the_matrix_nor_the_resolver_nor_the_engine(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("NCCL WARN NET/Socket : No usable listening interface found\n")
    mods = _modules_after(f"from envbuilder.api import explain_report\n"
                          f"explain_report([{str(log)!r}])")
    assert "envbuilder.diagnose.explain" in mods
    heavy = {"envbuilder.core.matrix", "envbuilder.core.resolve", "envbuilder.core.spec",
             "envbuilder.run.engine", "envbuilder.render.plan", "envbuilder.api.specs"}
    assert not heavy & mods, heavy & mods


def test_explain_reads_the_project_model_only_inside_a_project(tmp_path):
    """Outside a project (no envbuilder.toml or pyproject.toml up to the root) explain does not
    load the project model; inside one it does, for the team's learned cases."""
    log = tmp_path / "job.log"
    log.write_text("NCCL WARN NET/Socket : No usable listening interface found\n")
    code = f"from envbuilder.api import explain_report\nexplain_report([{str(log)!r}])"
    inside = tmp_path / "team"
    inside.mkdir()
    (inside / "envbuilder.toml").write_text('[targets.train]\ntarget = "cu124"\n')
    assert "envbuilder.core.project" in _modules_after(code, cwd=inside)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    if any_project_file(outside):
        pytest.skip(f"a project file above {outside}: no folder here is outside a project")
    assert "envbuilder.core.project" not in _modules_after(code, cwd=outside)


def test_any_project_file_sees_both_names_and_links(tmp_path):
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    if any_project_file(tmp_path):
        pytest.skip(f"a project file above {tmp_path}: no folder here is outside a project")
    assert not any_project_file(deep)
    py = tmp_path / "a" / "pyproject.toml"
    py.write_text("[project]\nname = 'x'\n")  # a repository's own: no envbuilder table
    assert not any_project_file(deep)
    py.write_text("[project]\nname = 'x'\ndependencies = ['torch-envbuilder>=0.1']\n")
    assert not any_project_file(deep)  # depending on envbuilder is not being a project
    for table in ("[tool.envbuilder]\n", '[tool."envbuilder".targets.a]\n',
                  "tool.envbuilder.driver = '550'\n", "[tool]\nenvbuilder = {driver = '550'}\n"):
        py.write_text("[project]\nname = 'x'\n" + table)
        assert any_project_file(deep), table
    py.write_text("[project]\nname = 'x'\n\n[tool.envbuilder.targets.train]\ntarget = 'cu124'\n")
    assert any_project_file(deep)
    py.unlink()
    os.mkfifo(py)  # not a plain file: the project reader refuses it, so it counts
    assert any_project_file(deep)
    py.unlink()
    (tmp_path / "envbuilder.toml").symlink_to(tmp_path / "missing")  # dangling: still a file name
    assert any_project_file(deep)


def test_the_cli_builds_only_the_invoked_command():
    """typer builds every command's parameters before parsing; a command names itself first,
    so only it is built. Anything else (no argument, an option, a group, a typo) gets the whole
    app, so click's help and "did you mean" see every command."""
    from envbuilder.cli import app
    from envbuilder.ui.output import _only_the_invoked

    one = _only_the_invoked(app, ["explain", "job.log"])
    assert [i.callback.__name__ for i in one.registered_commands] == ["explain"]
    assert one.registered_groups == [] and one.registered_callback is app.registered_callback
    assert len(app.registered_commands) > 10  # the app itself is untouched
    for argv in ([], ["--version"], ["matrix", "show", "cuda"], ["rendr", "cu118"]):
        assert _only_the_invoked(app, argv) is app, argv
