"""envbuilder lock: real uv resolutions against PyPI (few: cu121-torch2.1-py310 once per module,
then warm re-resolutions), the unreachable PyTorch index, refusals, the per-layer split, SBOM."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from envbuilder.api import make_spec, resolve_target
from envbuilder.errors import (IncompatibleError, InputError, MissingExtraError,
                               OperationError)
from envbuilder.lock.requirements import (LOCK_NAME, cross_check, lock_digest, lock_inputs,
                                          read_lock,
                                          read_lockfile, split_by_layer)
from envbuilder.lock.write import lock_stack
from envbuilder.render.plan import PlanOptions, make_plan
from envbuilder.render.templating import render_files

TARGET = "cu121-torch2.1-py310"


@pytest.fixture(scope="module")
def stack():
    return resolve_target(TARGET)


@pytest.fixture(scope="module")
def locked(uv_cache, stack, tmp_path_factory):
    out = tmp_path_factory.mktemp("lock")
    report = lock_stack(stack, out)
    return out, report


def _copy(locked, tmp_path) -> Path:
    d = tmp_path / "copy"
    d.mkdir()
    shutil.copy(locked[0] / LOCK_NAME, d / LOCK_NAME)
    shutil.copy(locked[0] / ".envbuilder-output", d / ".envbuilder-output")
    return d


def _only_lock_left(d: Path) -> None:
    assert sorted(p.name for p in d.iterdir()) == [".envbuilder-output", LOCK_NAME]


# -- the lock ---------------------------------------------------------------------------------

def test_lock_pins_torch_and_nccl_with_hashes(locked, stack):
    out, report = locked
    path = out / LOCK_NAME
    _only_lock_left(out)  # no temp files left next to it
    text = path.read_text()
    pkgs = {p.name: p for p in read_lock(text)}
    assert pkgs["torch"].version.startswith("2.1.")
    assert pkgs["nvidia-nccl-cu12"].version == "2.18.1"
    # every requirement line is ==-pinned and followed by sha256 hashes
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line and not line[0].isspace() and not line.startswith("#"):
            assert "==" in line and line.endswith("\\"), line
            assert lines[i + 1].strip().startswith("--hash=sha256:"), line
    assert all(p.hashes and all(h.startswith("sha256:") and len(h) == 71 for h in p.hashes)
               for p in pkgs.values())
    # the header says how it was made and how to install it
    assert f"# stack: {stack.tag}" in text
    assert stack.matrix.digest in text
    assert "pip install --require-hashes --no-deps -r requirements.lock" in text
    assert "uv pip compile - " in text and "--generate-hashes" in text
    assert "--python-version 3.10 --python-platform x86_64-manylinux_2_28" in text
    assert "timestamp" not in text.lower()
    d = report.to_dict()
    assert d["path"] == str(path) and d["packages"]["torch"] == pkgs["torch"].version
    assert d["index"] == "https://pypi.org/simple" and d["checked"] is False
    assert d["digest"] == lock_digest(path)
    json.dumps(d)


def test_lock_digest_is_the_file_sha256_and_locking_is_deterministic(locked, stack, tmp_path):
    path = locked[0] / LOCK_NAME
    digest = lock_digest(path)
    assert digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert lock_digest(path) == digest
    again = lock_stack(stack, tmp_path / "again")  # warm cache: same bytes, same digest
    assert again.digest == digest


def test_check_passes_on_a_fresh_lock(locked, stack):
    r = lock_stack(stack, locked[0], check=True)
    assert r.checked and r.status == "checked" and r.problems == []
    assert r.inputs_digest and r.inputs_digest in (locked[0] / LOCK_NAME).read_text()


def test_the_header_records_the_inputs_and_their_digest(locked, stack):
    text = (locked[0] / LOCK_NAME).read_text()
    lf = read_lockfile(text, LOCK_NAME, stack)
    record = lf.record
    assert record is not None and lf.inputs_digest and lf.packages_digest
    assert lf.record_intact and lf.body_intact
    # the format version is its own header line, not an input (lock.model)
    assert lf.format == 4 and "# lock format: 4\n" in text and "format" not in record
    assert record["target"] == TARGET
    assert record["python"] == "3.10" and record["platform"] == "x86_64-manylinux_2_28"
    assert record["torch"] == "2.1.2 (cu121)" and record["nccl"] == "2.18.1 (nvidia-nccl-cu12)"
    assert record["requirement"] == ["torch==2.1.2", "numpy<2", "nvidia-nccl-cu12==2.18.1"]
    assert record["requirements file"] == "none" and record["exclude newer"] == "none"
    assert record["index"] == "https://pypi.org/simple" and record["extra index"] == []
    assert record == lock_inputs(stack).record and lf.inputs_digest == lock_inputs(stack).digest
    assert "uv version" not in json.dumps(record) and "envbuilder version" not in json.dumps(record)


def _without_hashes(text: str, name: str) -> str:
    """The lock with every --hash line of ``name``'s entry removed."""
    lines = text.split("\n")
    i = next(n for n, ln in enumerate(lines) if ln.startswith(f"{name}=="))
    lines[i] = lines[i].rstrip(" \\")
    j = i + 1
    while lines[j].strip().startswith("--hash="):
        del lines[j]
    return "\n".join(lines)


def _with_packages_digest(text: str) -> str:
    """A hand edit done carefully: the packages digest in the header made to match again."""
    header, body = text.split("\n\n", 1)
    digest = "sha256:" + hashlib.sha256(body.encode()).hexdigest()
    lines = [f"# packages digest: {digest}" if ln.startswith("# packages digest: ") else ln
             for ln in header.split("\n")]
    return "\n".join(lines) + "\n\n" + body


def _check_fails(stack, d: Path) -> OperationError:
    before = (d / LOCK_NAME).read_bytes()
    with pytest.raises(OperationError) as e:
        lock_stack(stack, d, check=True, uv="/nonexistent/uv")  # never runs uv
    assert e.value.exit_code == 1 and "\n" not in str(e.value)
    assert e.value.report.checked is True and e.value.report.problems
    assert (d / LOCK_NAME).read_bytes() == before  # --check never rewrites the lock
    return e.value


def test_check_fails_when_a_hash_is_altered(locked, stack, tmp_path):
    d = _copy(locked, tmp_path)
    path = d / LOCK_NAME
    text = path.read_text()
    i = text.index("nvidia-nccl-cu12==2.18.1")
    j = text.index("--hash=sha256:", i) + len("--hash=sha256:")
    ch = text[j]
    path.write_text(text[:j] + ("0" if ch != "0" else "1") + text[j + 1:])
    err = _check_fails(stack, d)
    assert "package entries were edited" in str(err) and "packages digest" in str(err)


def test_check_fails_on_a_malformed_hash(locked, stack, tmp_path):
    d = _copy(locked, tmp_path)
    path = d / LOCK_NAME
    text = path.read_text()
    j = text.index("--hash=sha256:") + len("--hash=sha256:")
    path.write_text(_with_packages_digest(text[:j] + "Z" + text[j + 1:]))
    err = _check_fails(stack, d)
    assert "malformed" in str(err)


def test_check_fails_when_an_entry_lost_its_hashes(locked, stack, tmp_path):
    d = _copy(locked, tmp_path)
    path = d / LOCK_NAME
    path.write_text(_with_packages_digest(_without_hashes(path.read_text(), "filelock")))
    err = _check_fails(stack, d)
    assert "filelock==" in str(err) and "no --hash" in str(err)


def test_check_fails_on_a_tampered_nccl_pin(locked, stack, tmp_path):
    d = _copy(locked, tmp_path)
    path = d / LOCK_NAME
    # the entry (the header's inputs name the stack's pin too: that one stays)
    text = path.read_text().replace("nvidia-nccl-cu12==2.18.1 \\", "nvidia-nccl-cu12==2.19.3 \\")
    path.write_text(_with_packages_digest(text))  # even with the packages digest made to match
    err = _check_fails(stack, d)
    assert "NCCL 2.18.1" in str(err) and "nvidia-nccl-cu12==2.19.3" in str(err)
    # the contradiction, and the stack's own NCCL pin (a top-level line) left unmet
    assert len(err.report.problems) == 2
    assert "top-level requirement nvidia-nccl-cu12==2.18.1" in err.report.problems[1]


def test_check_fails_on_a_removed_top_level_package(locked, stack, tmp_path):
    d = _copy(locked, tmp_path)
    path = d / LOCK_NAME
    text = path.read_text()
    i = text.index("\nnumpy==") + 1
    j = text.index("\n", text.index("# via", i)) + 1
    while text[j:].startswith("    #"):
        j = text.index("\n", j) + 1
    path.write_text(_with_packages_digest(text[:i] + text[j:]))
    err = _check_fails(stack, d)
    assert "numpy<2 has no entry" in str(err)


def test_check_names_the_input_that_changed(locked, tmp_path):
    d = _copy(locked, tmp_path)
    other = resolve_target("cu121-torch2.2-py310")
    err = _check_fails(other, d)
    assert f"target {TARGET} -> cu121-torch2.2-py310" in str(err)
    assert any(p.startswith(f"torch 2.1.2 (cu121) -> {other.torch.version} (cu121)")
               for p in err.report.problems), err.report.problems
    assert any("top-level requirements changed: added torch==" in p for p in err.report.problems)


def test_check_names_an_edited_inputs_record(locked, stack, tmp_path):
    d = _copy(locked, tmp_path)
    path = d / LOCK_NAME
    path.write_text(path.read_text().replace("#   torch: 2.1.2 (cu121)", "#   torch: 2.1.3 (cu121)"))
    err = _check_fails(stack, d)
    assert "torch 2.1.3 (cu121) -> 2.1.2 (cu121)" in str(err)
    assert any("inputs recorded in its header were edited" in p for p in err.report.problems)


def test_check_of_a_lock_without_inputs_asks_for_upgrade(locked, stack, tmp_path):
    d = _copy(locked, tmp_path)
    path = d / LOCK_NAME
    lines = path.read_text().split("\n")
    i = lines.index(next(ln for ln in lines if ln.startswith("# lock inputs")))
    j = lines.index(next(ln for ln in lines if ln.startswith("# packages digest:")))
    path.write_text("\n".join(lines[:i] + lines[j + 1:]))  # the header of an older envbuilder
    err = _check_fails(stack, d)
    assert "does not record its inputs" in str(err) and "--upgrade" in str(err)


def test_plain_lock_keeps_a_current_lock_and_upgrade_resolves_again(locked, stack, tmp_path):
    d = _copy(locked, tmp_path)
    path = d / LOCK_NAME
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns
    r = lock_stack(stack, d, uv="/nonexistent/uv")  # inputs unchanged: uv is not needed
    assert r.status == "unchanged" and r.changed == [] and r.packages["torch"] == "2.1.2"
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    with pytest.raises(InputError, match="/nonexistent/uv"):
        lock_stack(stack, d, upgrade=True, uv="/nonexistent/uv")  # --upgrade runs uv
    r = lock_stack(stack, d, upgrade=True)
    assert r.status == "resolved" and r.changed == []
    assert path.read_bytes() == before  # same inputs, same index: the same bytes
    _only_lock_left(d)


def test_plain_lock_resolves_again_when_an_input_changed(locked, stack, tmp_path):
    d = _copy(locked, tmp_path)
    r = lock_stack(stack, d, exclude_newer=_cutoff("2024-06-01"))
    assert r.status == "resolved"
    assert r.changed == ["exclude newer none -> 2024-06-01T00:00:00Z"]
    text = (d / LOCK_NAME).read_text()
    assert "--exclude-newer 2024-06-01T00:00:00Z" in text
    assert "#   exclude newer: 2024-06-01T00:00:00Z" in text
    # nothing uploaded after the date: fsspec (calendar versions) is from before June 2024
    from packaging.version import Version

    assert Version(r.packages["fsspec"]) < Version("2024.6.0")
    assert lock_stack(stack, d, exclude_newer=_cutoff("2024-06-01T00:00:00+00:00"),
                       check=True).problems == []
    err = _check_fails(stack, d)  # without --exclude-newer now: an input changed
    assert "exclude newer 2024-06-01T00:00:00Z -> none" in str(err)


def test_uv_environment_cannot_change_a_lock_behind_its_inputs(locked, stack, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("UV_EXCLUDE_NEWER", "2024-01-01T00:00:00Z")
    monkeypatch.setenv("UV_EXTRA_INDEX_URL", "http://127.0.0.1:9/simple")
    r = lock_stack(stack, tmp_path / "env")
    assert r.digest == locked[1].digest


@pytest.mark.parametrize("value, normal", [
    ("2024-06-01", "2024-06-01T00:00:00Z"),
    ("2024-06-01T12:30:00Z", "2024-06-01T12:30:00Z"),
    ("2024-06-01T14:30:00+02:00", "2024-06-01T12:30:00Z"),
    ("2024-06-01 12:30", "2024-06-01T12:30:00Z"),
    ("2024-06-01T12:30:00.5z", "2024-06-01T12:30:00.500000Z"),
])
def test_exclude_newer_dates(value, normal):
    assert _cutoff(value) == normal
    assert make_spec("cpu", exclude_newer=value).exclude_newer == normal  # what a lock is given


@pytest.mark.parametrize("value", ["yesterday", "2024-13-01", "2024-06-01T25:00:00Z", "", "2024",
                                   "20240601", "2024-06-01; rm -rf /", "2024-06-01\n"[:-1] + "x"])
def test_exclude_newer_garbage_is_bad_input(value):
    # checked once, when the spec is made: the lock is given the spec's checked value
    with pytest.raises(InputError) as e:
        make_spec("cpu", exclude_newer=value)
    assert e.value.exit_code == 2 and "--exclude-newer" in str(e.value)


def _cutoff(value: str) -> str:
    """A date as the option's check returns it (what a spec holds and a lock is given)."""
    from envbuilder.core.options import check_value

    return check_value("exclude_newer", value, {})


def test_index_credentials_are_not_inputs(stack):
    a = lock_inputs(stack, index_url="https://alice:s3cret@mirror.example/simple",
                    extra_index_urls=["https://bob:t0ken@extra.example/simple"])
    b = lock_inputs(stack, index_url="https://carol:other@mirror.example/simple",
                    extra_index_urls=["https://bob:new@extra.example/simple"])
    assert a.record["index"] == "https://mirror.example/simple"
    assert a.record["extra index"] == ["https://extra.example/simple"]
    assert a.digest == b.digest and "s3cret" not in json.dumps(a.record)
    assert a.index_url == "https://alice:s3cret@mirror.example/simple"  # uv still gets them
    from envbuilder.lock.uv import shown

    assert "s3cret" not in shown(["uv", "--index-url", "https://alice:s3cret@m.example/s"], "x")


def _offline(tmp_path: Path) -> tuple[dict, Path]:
    """Environment of a CLI run that can reach no index and records any run of uv: every proxy
    variable points at a closed port, and the uv that envbuilder would find (the ``uv``
    package's binary first, then PATH) is a tripwire that writes a mark and fails."""
    import os

    trip = tmp_path / "tripwire"
    (trip / "bin").mkdir(parents=True)
    (trip / "py" / "uv").mkdir(parents=True)
    mark = tmp_path / "uv-ran"
    uv = trip / "bin" / "uv"
    uv.write_text(f"#!/bin/sh\necho \"$@\" >> {mark}\nexit 1\n")
    uv.chmod(0o755)
    (trip / "py" / "uv" / "__init__.py").write_text(f"def find_uv_bin():\n    return {str(uv)!r}\n")
    from hostile_helpers import ROOT

    closed = "http://127.0.0.1:9"
    env = {k: closed for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                               "ALL_PROXY", "all_proxy")}
    env.update(NO_PROXY="", no_proxy="", UV_HTTP_RETRIES="0", PIP_NO_INDEX="1",
               PATH=f"{trip / 'bin'}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=f"{trip / 'py'}{os.pathsep}{ROOT}")
    return env, mark


def test_check_passes_offline_and_fails_naming_a_changed_input(uv_cache, stack, tmp_path):
    """The issue's test: `lock --check` passes with every index unreachable (and uv never run)
    on an unchanged project, and fails (exit 1) naming the input after one input changes."""
    from hostile_helpers import assert_clean_failure, cli

    team = tmp_path / "team.txt"
    team.write_text("# the team's extras\nsix==1.16.0\n")
    out = tmp_path / "o"
    p = cli("lock", TARGET, "-o", str(out), "--requirements", str(team))  # online: uv resolves
    assert p.returncode == 0, p.stderr
    env, mark = _offline(tmp_path)
    p = cli("lock", TARGET, "-o", str(out), "--requirements", str(team), "--check", **env)
    assert p.returncode == 0, p.stderr
    assert "matches its inputs" in p.stdout and not mark.exists()
    p = cli("lock", TARGET, "-o", str(out), "--requirements", str(team), **env)  # kept as is
    assert p.returncode == 0 and "unchanged" in p.stdout and not mark.exists(), p.stderr
    # the tripwire works: resolving does run "uv" (and fails: no index, no real uv)
    p = cli("lock", TARGET, "-o", str(out), "--requirements", str(team), "--upgrade", **env)
    assert p.returncode == 1 and mark.exists(), p.stderr
    mark.unlink()
    before = (out / LOCK_NAME).read_bytes()
    team.write_text("# the team's extras\nsix==1.17.0\n")  # one input changes
    p = cli("lock", TARGET, "-o", str(out), "--requirements", str(team), "--check", **env)
    first = assert_clean_failure(p, 1, "requirements file team.txt changed", "sha256:")
    assert "added six==1.17.0; removed six==1.16.0" in p.stderr, p.stderr
    assert "(and " in first and not mark.exists()
    assert (out / LOCK_NAME).read_bytes() == before
    p = cli("lock", TARGET, "-o", str(out), "--check", **env)  # the file not given now
    assert_clean_failure(p, 1, "made with a --requirements file")
    p = cli("lock", TARGET, "-o", str(out), "--check", "--requirements", str(team),
            "--exclude-newer", "last tuesday", **env)
    assert_clean_failure(p, 2, "--exclude-newer", "not a date")
    assert not mark.exists()


def test_check_without_a_lock_is_a_usage_error(stack, tmp_path):
    with pytest.raises(InputError) as e:
        lock_stack(stack, tmp_path, check=True)
    assert e.value.exit_code == 2 and "envbuilder lock" in str(e.value)


# -- failures ---------------------------------------------------------------------------------

def test_unreachable_pytorch_index_is_one_line_exit_1(uv_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    st = resolve_target("cu118")
    assert st.torch_index.startswith("https://download.pytorch.org/")
    out = tmp_path / "out"
    with pytest.raises(OperationError) as e:
        lock_stack(st, out)
    msg = str(e.value)
    assert e.value.exit_code == 1 and "\n" not in msg
    assert st.torch_index in msg and "--pip-index-url" in msg and "wheelhouse" in msg
    assert "--torch-index-url" in msg  # the unreachable index is PyTorch's: its mirror is named
    assert not out.exists()  # no partial lock, no empty folder


def test_unreachable_index_keeps_an_existing_lock(uv_cache, locked, tmp_path, monkeypatch):
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    d = _copy(locked, tmp_path)
    before = (d / LOCK_NAME).read_bytes()
    with pytest.raises(OperationError):
        lock_stack(resolve_target(TARGET), d, index_url="http://127.0.0.1:9/simple")
    assert (d / LOCK_NAME).read_bytes() == before
    _only_lock_left(d)


def test_requirements_pinning_another_torch_is_refused(stack, tmp_path):
    req = tmp_path / "extra.txt"
    req.write_text("# extras\nnumpy<2\ntorch==2.0.0\n")
    out = tmp_path / "out"
    with pytest.raises(IncompatibleError) as e:
        lock_stack(stack, out, requirements_file=req)
    assert e.value.exit_code == 3
    assert "torch==2.0.0" in str(e.value) and "2.1.2" in str(e.value)
    assert not out.exists()


@pytest.mark.network
def test_joint_resolution_frees_torchs_small_dependencies(uv_cache, tmp_path):
    """The team's lines are resolved with the stack as one environment (issue 20): numpy<2
    next to torch 2.6 (which works with NumPy 1.x), transformers with datasets>=3 (a
    resolution inside the stack's own transitive pins refused both); the stack layer's file is
    the same bytes whatever the team asks for."""
    st = resolve_target("cu124-torch2.6-debian12")
    team = tmp_path / "team.txt"
    team.write_text("numpy<2\ntransformers==4.46.3\ndatasets>=3\n")
    r = lock_stack(st, tmp_path / "a", requirements_file=team)
    pkgs = r.packages
    assert pkgs["torch"] == "2.6.0" and pkgs["nvidia-nccl-cu12"] == "2.21.5"
    assert pkgs["numpy"].startswith("1.") and pkgs["transformers"] == "4.46.3"
    assert int(pkgs["datasets"].split(".")[0]) >= 3
    # the NCCL wheel is one of the stack's own pins, beside torch
    record = read_lockfile(Path(r.path).read_text(), r.path, st).record
    assert record is not None and "nvidia-nccl-cu12==2.21.5" in record["requirement"]
    plain = lock_stack(st, tmp_path / "b")
    other = tmp_path / "other.txt"
    other.write_text("einops\n")
    lock_stack(st, tmp_path / "c", requirements_file=other)

    def layers(d: Path) -> dict[str, str]:
        text = (d / LOCK_NAME).read_text()
        return split_by_layer(text, make_plan(st, PlanOptions.of(hashes=True, team_requirements=("x",))))

    a, b, c = layers(tmp_path / "a"), layers(tmp_path / "b"), layers(tmp_path / "c")
    assert a["torch"] == b["torch"] == c["torch"]  # the stack layer: the same bytes
    assert "datasets==" in a["team"] and "numpy==1." in a["team"]
    assert "numpy==2." in b["team"] and plain.packages["numpy"].startswith("2.")
    assert "einops==" in c["team"] and "datasets" not in c["team"]
    # a team line that truly contradicts the stack is still refused, naming both
    bad = tmp_path / "bad.txt"
    bad.write_text("torch==2.5.1\n")
    with pytest.raises(IncompatibleError) as e:
        lock_stack(st, tmp_path / "d", requirements_file=bad)
    assert e.value.exit_code == 3 and "torch==2.5.1" in str(e.value) and "2.6.0" in str(e.value)


def test_requirements_with_another_nccl_major_is_refused(stack, tmp_path):
    req = tmp_path / "extra.txt"
    req.write_text("nvidia-nccl-cu11\n")
    with pytest.raises(IncompatibleError, match="nvidia-nccl-cu12"):
        lock_stack(stack, tmp_path / "out", requirements_file=req)


@pytest.mark.parametrize("line, what", [
    ("foo bar baz", "not a valid requirement"),
    ("-e .", "options"),
    ("--index-url https://example.org/simple", "options"),
    ("pkg @ https://example.org/pkg.whl", "direct URL"),
])
def test_malformed_requirements_lines(stack, tmp_path, line, what):
    req = tmp_path / "extra.txt"
    req.write_text(f"numpy\n\n{line}\n")
    out = tmp_path / "out"
    with pytest.raises(InputError) as e:
        lock_stack(stack, out, requirements_file=req)
    assert e.value.exit_code == 2
    assert f"{req}:3" in str(e.value) and what in str(e.value)
    assert "\n" not in str(e.value)
    assert not out.exists()


def test_uv_resolution_conflict_is_exit_3(uv_cache, stack, tmp_path):
    req = tmp_path / "extra.txt"
    req.write_text("networkx>=999\n")
    out = tmp_path / "out"
    with pytest.raises(IncompatibleError) as e:
        lock_stack(stack, out, requirements_file=req)
    assert "networkx" in str(e.value) and e.value.exit_code == 3
    assert not out.exists()


@pytest.mark.parametrize("columns", ["40", "80", "1000"])
def test_a_package_missing_from_the_index_is_bad_input_however_uv_wraps_it(stack, tmp_path, columns):
    """uv wraps its messages to $COLUMNS ("was not found in the package" / "registry ..." on two
    lines at 80): the real uv's message, offline, read as exit 2 at any width."""
    import os
    import subprocess

    from envbuilder.lock.uv import failure, find_uv, indexes

    pytest.importorskip("uv")
    (tmp_path / "none").mkdir()
    r = subprocess.run([find_uv(), "pip", "compile", "--no-index", "--find-links", str(tmp_path / "none"), "-"],
                       input="envbuilder-no-such-package-zz9==1.0\n", capture_output=True, text=True,
                       env=os.environ | {"COLUMNS": columns, "NO_COLOR": "1", "UV_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode != 0 and "was not" in r.stderr
    e = failure(r.stderr, stack, indexes(stack, None, ()))
    assert isinstance(e, InputError) and e.exit_code == 2
    assert "envbuilder-no-such-package-zz9 is not on the index" in str(e)


def test_missing_uv_is_a_missing_extra(stack, tmp_path, monkeypatch):
    import envbuilder.lock.uv as lock

    monkeypatch.setitem(sys.modules, "uv", None)
    monkeypatch.setattr(lock.shutil, "which", lambda name: None)
    with pytest.raises(MissingExtraError, match=r"envbuilder\[lock\]"):
        lock_stack(stack, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- cross-checks (no network) ----------------------------------------------------------------

def _entry(name, version, via=()):
    v = "".join(f"    #   {x}\n" for x in via)
    return (f"{name}=={version} \\\n    --hash=sha256:{'a' * 64}\n"
            + (f"    # via\n{v}" if via else ""))


def test_cross_check_names_fact_source_and_line(stack):
    text = _entry("torch", "2.1.2") + _entry("nvidia-nccl-cu12", "2.19.3", ["torch"])
    with pytest.raises(IncompatibleError) as e:
        cross_check(stack, read_lock(text), "requirements.lock")
    msg = str(e.value)
    assert "NCCL 2.18.1" in msg and "torch.yaml" in msg
    assert "requirements.lock:3: nvidia-nccl-cu12==2.19.3" in msg


def test_cross_check_torch_version_and_variant(stack):
    cross_check(stack, read_lock(_entry("torch", "2.1.2+cu121")), "x")  # local tag is fine
    with pytest.raises(IncompatibleError, match="torch 2.1.2"):
        cross_check(stack, read_lock(_entry("torch", "2.1.1")), "x")
    with pytest.raises(IncompatibleError, match="cu121"):
        cross_check(stack, read_lock(_entry("torch", "2.1.2+cu118")), "x")


def test_cross_check_pytorch_index_variant():
    st = resolve_target("cu118")
    v = st.torch.version
    nccl = f"nvidia-nccl-cu11=={st.torch_variant.nccl}"
    cross_check(st, read_lock(_entry("torch", f"{v}+cu118") + _entry(*nccl.split("=="))), "x")
    # PyPI's torch (a CUDA 12 build) instead of the cu118 wheel: refused
    with pytest.raises(IncompatibleError, match=r"\+cu118"):
        cross_check(st, read_lock(_entry("torch", str(v))), "x")
    with pytest.raises(IncompatibleError, match="nvidia-nccl-cu11"):
        cross_check(st, read_lock(_entry("torch", f"{v}+cu118")
                                  + _entry("nvidia-nccl-cu12", "2.21.5")), "lock")


def test_cross_check_two_nccl_majors(stack):
    text = (_entry("torch", "2.1.2") + _entry("nvidia-nccl-cu12", "2.18.1", ["torch"])
            + _entry("nvidia-nccl-cu11", "2.21.5"))
    with pytest.raises(IncompatibleError, match="two CUDA majors"):
        cross_check(stack, read_lock(text), "x")


# -- split by layer ---------------------------------------------------------------------------

def test_split_by_layer_real_deepspeed_lock(uv_cache, tmp_path):
    st = resolve_target("cu121-torch2.1-py310-ds0.14")
    r = lock_stack(st, tmp_path / "ds")
    text = Path(r.path).read_text()
    plan = make_plan(st, PlanOptions.of(hashes=True))
    parts = split_by_layer(text, plan)
    assert list(parts) == ["torch", "deepspeed.build", "deepspeed", "team"]
    names = {k: {p.name for p in read_lock(v)} for k, v in parts.items()}
    locked_names = {p.name for p in read_lock(text)}
    cuda_wheels = {n for n in locked_names if n.startswith("nvidia-") and n != "nvidia-ml-py"}
    # the stack layer: torch and the big wheels it pins, nothing else
    assert cuda_wheels and names["torch"] == {"torch", "triton"} | cuda_wheels
    # DeepSpeed's setup.py needs nvidia-ml-py when it builds CUDA ops (pre-built by default)
    assert "nvidia-ml-py" in names["deepspeed.build"]
    assert "deepspeed" in names["deepspeed"] and {"hjson", "pydantic"} <= names["deepspeed"]
    assert {"ninja", "setuptools", "wheel", "py-cpuinfo", "psutil"} <= names["deepspeed.build"]
    # what `import torch` needs beyond the big wheels comes before DeepSpeed's build
    assert {"numpy", "sympy", "filelock", "typing-extensions"} <= names["deepspeed.build"]
    assert not names["team"]  # no team lines: nothing is left for the top layer
    assert all("# via" not in v for v in parts.values())  # who needs what is the lock's business
    # a partition: every locked package exactly once, with its hashes
    every = [p for v in parts.values() for p in read_lock(v)]
    assert sorted(p.name for p in every) == sorted(p.name for p in read_lock(text))
    full = {p.name: p.hashes for p in read_lock(text)}
    assert all(p.hashes == full[p.name] for p in every)
    files = render_files(plan, layer_requirements=parts)
    assert files["requirements/deepspeed.build.txt"] == parts["deepspeed.build"]
    assert "--no-deps --require-hashes" in files["Dockerfile"]
    assert files["Dockerfile"].count("--no-deps --require-hashes") == 4  # every pip install


def test_split_by_layer_horovod_and_extras(stack):
    # a hand-written lock: horovod's build deps, a package both layers need, a user extra
    from dataclasses import replace

    text = "\n".join([
        "# target: synthetic",
        _entry("torch", "2.1.2", ["deepspeed", "horovod"]),
        _entry("filelock", "3.0", ["torch"]),
        _entry("horovod", "0.28.1"),
        _entry("cloudpickle", "3.0", ["horovod"]),
        _entry("packaging", "24.0", ["deepspeed", "horovod"]),
        _entry("setuptools", "70.0"),
        _entry("deepspeed", "0.14.5"),
        _entry("hjson", "3.1.0", ["deepspeed"]),
        _entry("ninja", "1.11", ["deepspeed"]),
        _entry("rich", "13.0"),
        _entry("markdown-it-py", "3.0", ["rich"]),
    ])
    from envbuilder.render.plan import PipLayer

    plan = make_plan(stack, PlanOptions.of(hashes=True))
    build = {c: stack.matrix.component(c).compiles.build for c in ("horovod", "deepspeed")}  # their files'
    plan = replace(plan, layers=(plan.layers[0],
                                 PipLayer("horovod", ("horovod==0.28.1",), None, build_deps=build["horovod"]),
                                 PipLayer("deepspeed", ("deepspeed==0.14.5",), None,
                                          build_deps=build["deepspeed"])))
    parts = split_by_layer(text, plan)
    assert list(parts) == ["torch", "horovod.build", "horovod", "deepspeed.build", "deepspeed"]
    names = {k: [p.name for p in read_lock(v)] for k, v in parts.items()}
    assert names["torch"] == ["torch"]  # the stack layer: torch (and its big wheels) only
    # torch's small dependencies come before the first compiled layer's build
    assert set(names["horovod.build"]) == {"filelock", "cloudpickle", "packaging", "setuptools"}
    assert names["horovod"] == ["horovod"]
    assert names["deepspeed.build"] == ["ninja"]
    # user extras (not needed by any layer) go to the last layer with their dependencies
    assert names["deepspeed"] == ["deepspeed", "hjson", "rich", "markdown-it-py"]
    assert all("--hash=sha256:" in v for v in parts.values())


# -- SBOM -------------------------------------------------------------------------------------

def test_sbom_cyclonedx(locked, stack, tmp_path):
    from envbuilder.lock.sbom import write_sbom

    out = tmp_path / "sbom.cdx.json"
    doc = write_sbom(locked[0] / LOCK_NAME, out, stack)
    data = json.loads(out.read_text())
    assert data == doc
    assert data["bomFormat"] == "CycloneDX" and data["specVersion"] == "1.5"
    assert data["serialNumber"].startswith("urn:uuid:") and data["version"] == 1
    assert data["metadata"]["component"]["name"] == stack.tag
    assert data["metadata"]["tools"]["components"][0]["name"] == "envbuilder"
    comps = {c["name"]: c for c in data["components"]}
    pkgs = read_lock((locked[0] / LOCK_NAME).read_text())
    assert set(comps) == {p.name for p in pkgs}
    torch = comps["torch"]
    assert torch["purl"] == f"pkg:pypi/torch@{torch['version']}" and torch["type"] == "library"
    assert torch["hashes"] and all(h["alg"] == "SHA-256" and len(h["content"]) == 64
                                   for c in comps.values() for h in c["hashes"])
    refs = {c["bom-ref"] for c in data["components"]} | {data["metadata"]["component"]["bom-ref"]}
    assert all(d["ref"] in refs and set(d["dependsOn"]) <= refs for d in data["dependencies"])
    # the same lock gives the same SBOM
    assert write_sbom(locked[0] / LOCK_NAME, tmp_path / "again.json", stack) == doc
    validation = pytest.importorskip("cyclonedx.validation.json")
    from cyclonedx.schema import SchemaVersion

    validator = validation.JsonStrictValidator(SchemaVersion.V1_5)
    assert validator.validate_str(out.read_text()) is None
    broken = dict(data, components=[{"name": "x"}])
    assert validator.validate_str(json.dumps(broken)) is not None


def test_render_installs_from_a_lock_in_the_output_folder(locked, stack, tmp_path):
    import json
    import shutil

    from envbuilder.api import render_target
    from envbuilder.lock.requirements import lock_digest

    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(locked[0] / "requirements.lock", out / "requirements.lock")
    r = render_target(TARGET, out)
    assert r.locked
    dockerfile = (out / "Dockerfile").read_text()
    assert "--require-hashes" in dockerfile
    torch_layer = (out / "requirements" / "torch.txt").read_text()
    assert "torch==2.1.2" in torch_layer and "--hash=sha256:" in torch_layer
    data = json.loads((out / "stack.json").read_text())
    assert data["lock"]["digest"] == lock_digest(out / "requirements.lock")


def test_render_refuses_a_lock_that_contradicts_the_stack(locked, tmp_path):
    import shutil

    from envbuilder.api import render_target
    from envbuilder.errors import IncompatibleError

    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(locked[0] / "requirements.lock", out / "requirements.lock")
    with pytest.raises(IncompatibleError):
        render_target("cu121-torch2.2-py310", out)  # the lock holds torch 2.1.2
    assert (out / "requirements.lock").exists() and not (out / "Dockerfile").exists()
