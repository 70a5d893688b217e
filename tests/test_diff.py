"""envbuilder diff A B (targets, build folders, locks), and the package diff that lock --upgrade
and lock --check print. Targets resolve against the frozen matrix; locks are real uv
resolutions against PyPI (marked network)."""

from __future__ import annotations

import json

import pytest

from core_helpers import FROZEN
from envbuilder.api import resolve_target
from envbuilder.lock.pkgdiff import package_diff, pinned
from envbuilder.lock.requirements import read_lock
from hostile_helpers import assert_clean_failure, cli

M = ("--matrix", str(FROZEN))


def _facts(target: str) -> dict:
    d = resolve_target(target, matrix_dir=FROZEN).to_dict()
    return {"cuda": d["cuda_toolkit"], "driver_min": d["driver_min"]["version"],
            "torch": d["torch"], "torch_variant": d["torch_variant"], "nccl": d["nccl"],
            "base_image": d["base_image"]}


def test_package_diff_added_removed_changed():
    d = package_diff({"a": "1.0", "B_x": "2.0", "c": "3.0"}, {"b-x": "2.1", "c": "3.0", "d": "0.1"})
    assert d.added == {"d": "0.1"} and d.removed == {"a": "1.0"}
    assert d.changed == {"b-x": ("2.0", "2.1")} and d.unchanged == 1
    assert d.lines() == ["- a 1.0", "~ b-x 2.0 -> 2.1", "+ d 0.1"]
    assert package_diff({"x": "2.0"}, {"x": "1.9"}).to_dict()["changed"]["x"]["direction"] == "down"
    assert pinned(["torch==2.1.2", "numpy<2", "six==1.16.0 ; python_version>'3'"]) == \
        {"torch": "2.1.2", "six": "1.16.0"}


def test_diff_of_two_targets_prints_what_changes_and_what_rebuilds():
    p = cli("diff", "cu121", "cu124", *M, "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    a, b = _facts("cu121"), _facts("cu124")
    got = {f["fact"]: (f["a"], f["b"]) for f in d["facts"]}
    for k in ("cuda", "driver_min", "torch", "torch_variant", "base_image"):
        assert a[k] != b[k] and got[k] == (a[k], b[k]), k
    assert ("nccl" in got) == (a["nccl"] != b["nccl"])
    # a new CUDA base: every stage rebuilds, from its FROM line
    assert d["rebuild_from"] == "dockerfile"
    assert {s["stage"] for s in d["rebuild"] if s["rebuilds"]} == {"builder", "layer-torch", "runtime"}
    text = cli("diff", "cu121", "cu124", *M, COLUMNS="200")
    assert text.returncode == 0, text.stderr
    for k in ("torch", "driver_min"):
        assert a[k] in text.stdout and b[k] in text.stdout
    assert "layers that rebuild (dockerfile):" in text.stdout
    builder = resolve_target("cu124", matrix_dir=FROZEN).to_dict()["builder_image"]
    assert f"builder from `FROM {builder} AS builder`: its base image changed" in text.stdout


def test_diff_of_a_deepspeed_bump_rebuilds_only_the_deepspeed_layer():
    d = json.loads(cli("diff", "cu121-ds0.16", "cu121-ds0.15", *M, "--json").stdout)
    assert [f["fact"] for f in d["facts"]] == ["deepspeed"]
    rb = {s["stage"]: s["rebuilds"] for s in d["rebuild"]}
    assert rb == {"builder": False, "layer-torch": False, "layer-deepspeed": True, "runtime": True}


def test_diff_of_the_same_target_is_empty():
    d = json.loads(cli("diff", "cu121", "cu121", *M, "--json").stdout)
    assert d["same"] and d["facts"] == [] and not any(s["rebuilds"] for s in d["rebuild"])


def test_diff_of_build_folders_with_another_team_requirement(tmp_path):
    """Two build folders that differ only in the team's requirements: only the team layer
    (and the runtime's copy of it) rebuild."""
    (tmp_path / "a.txt").write_text("six==1.16.0\n")
    (tmp_path / "b.txt").write_text("six==1.17.0\n")
    for n in ("a", "b"):
        p = cli("render", "cu121", "-o", str(tmp_path / n), "--requirements", str(tmp_path / f"{n}.txt"), *M)
        assert p.returncode == 0, p.stderr
    d = json.loads(cli("diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json").stdout)
    assert d["a"]["kind"] == d["b"]["kind"] == "build" and d["facts"] == []
    rb = {s["stage"]: s["rebuilds"] for s in d["rebuild"]}
    assert rb == {"builder": False, "layer-torch": False, "layer-team": True, "runtime": True}
    # a target against a build folder rendered from it: nothing changes
    p = cli("render", "cu121", "-o", str(tmp_path / "c"), *M)
    assert p.returncode == 0, p.stderr
    d = json.loads(cli("diff", "cu121", str(tmp_path / "c"), *M, "--json").stdout)
    assert d["same"], d


def test_diff_bad_inputs_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    assert_clean_failure(cli("diff", str(tmp_path / "empty"), "cu121"), 2, "stack.json")
    (tmp_path / "x.lock").write_text("# nothing\n")
    assert_clean_failure(cli("diff", str(tmp_path / "x.lock"), "cu121"), 2, "no pinned package")
    assert_clean_failure(cli("diff", "cu999", "cu121", *M), 2)


@pytest.fixture(scope="module")
def two_locks(uv_cache, tmp_path_factory):
    """build/a and build/b: the same target locked with files up to 2024-01-01 and up to
    2024-06-01, b with a team requirement more."""
    root = tmp_path_factory.mktemp("locks")
    (root / "team.txt").write_text("six==1.16.0\n")
    a = cli("lock", "cu121-torch2.1-py310", "-o", str(root / "build" / "a"), "--exclude-newer", "2024-01-01")
    assert a.returncode == 0, a.stderr
    b = cli("lock", "cu121-torch2.1-py310", "-o", str(root / "build" / "b"), "--exclude-newer", "2024-06-01",
            "--requirements", str(root / "team.txt"))
    assert b.returncode == 0, b.stderr
    return root


@pytest.mark.network
def test_diff_of_two_locks_prints_the_package_changes(two_locks):
    root = two_locks
    la = {p.name: p.version for p in read_lock((root / "build/a/requirements.lock").read_text())}
    lb = {p.name: p.version for p in read_lock((root / "build/b/requirements.lock").read_text())}
    want = package_diff(la, lb)
    assert want.changed and want.added.get("six") == "1.16.0"
    p = cli("diff", "build/a/requirements.lock", "build/b/requirements.lock", cwd=root)
    assert p.returncode == 0, p.stderr
    for line in want.lines():
        assert line in p.stdout, (line, p.stdout)
    d = json.loads(cli("diff", "build/a/requirements.lock", "build/b/requirements.lock", "--json",
                       cwd=root).stdout)
    assert d["packages"] == want.to_dict()
    # six comes in through no stack layer: the team's layer
    assert any(s["stage"] == "layer-team" and "+six 1.16.0" in s["why"] for s in d["rebuild"])
    # a build folder rendered with the lock names its digest in a label (inspect shows it)
    import hashlib

    r = cli("render", "cu121-torch2.1-py310", "-o", "build/a", "-q", cwd=root)
    assert r.returncode == 0, r.stderr
    digest = hashlib.sha256((root / "build/a/requirements.lock").read_bytes()).hexdigest()
    assert f'io.envbuilder.lock-digest="sha256:{digest}"' in (root / "build/a/Dockerfile").read_text()


@pytest.mark.network
def test_lock_upgrade_and_check_print_the_package_diff(two_locks, tmp_path):
    import shutil

    d = tmp_path / "l"
    shutil.copytree(two_locks / "build" / "a", d)
    before = {p.name: p.version for p in read_lock((d / "requirements.lock").read_text())}
    p = cli("lock", "cu121-torch2.1-py310", "-o", str(d), "--upgrade", "--exclude-newer", "2024-06-01")
    assert p.returncode == 0, p.stderr
    after = {p.name: p.version for p in read_lock((d / "requirements.lock").read_text())}
    want = package_diff(before, after)
    assert want and "packages from the lock that was there:" in p.stdout
    for line in want.lines():
        assert f"  {line}" in p.stdout
    # --check with a team requirement the lock was not made with: the top-level pins' diff
    (tmp_path / "team.txt").write_text("six==1.16.0\n")
    p = cli("lock", "cu121-torch2.1-py310", "-o", str(d), "--check", "--exclude-newer", "2024-06-01",
            "--requirements", str(tmp_path / "team.txt"))
    assert p.returncode == 1
    assert "top-level pins: + six 1.16.0" in p.stderr


def test_diff_of_project_targets_carries_the_teams_layer(tmp_path):
    (tmp_path / "envbuilder.toml").write_text(
        'requirements = ["six==1.16.0"]\n\n[[targets]]\nname = "train"\ntarget = "cu121"\n\n'
        '[[targets]]\nname = "next"\ntarget = "cu121"\ntorch = "2.4"\n')
    p = cli("diff", "train", "next", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert [f["fact"] for f in d["facts"]][:1] == ["torch"]
    rb = {s["stage"]: s["rebuilds"] for s in d["rebuild"]}
    assert rb == {"builder": False, "layer-torch": True, "layer-team": True, "runtime": True}


@pytest.mark.network
def test_diff_of_two_project_targets_with_locks_lists_the_package_changes(uv_cache, tmp_path):
    """`diff a b` of two project targets: the folders render would write, each installing the
    lock `envbuilder lock` wrote in build/<name>/, so their packages are compared."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "envbuilder.toml").write_text(
        '[[targets]]\nname = "a"\ntarget = "cu121-torch2.1-py310"\nexclude_newer = "2024-01-01"\n\n'
        '[[targets]]\nname = "b"\ntarget = "cu121-torch2.1-py310"\nexclude_newer = "2024-06-01"\n'
        'requirements = ["six==1.16.0"]\n')
    p = cli("diff", "a", "b", "--json", cwd=root)  # no locks yet: no package diff
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["packages"] is None
    lk = cli("lock", cwd=root)
    assert lk.returncode == 0, lk.stderr
    la = {x.name: x.version for x in read_lock((root / "build/a/requirements.lock").read_text())}
    lb = {x.name: x.version for x in read_lock((root / "build/b/requirements.lock").read_text())}
    want = package_diff(la, lb)
    assert want.changed and want.added.get("six") == "1.16.0"
    (root / "src").mkdir()
    p = cli("diff", "a", "b", cwd=root / "src")  # from any folder of the project
    assert p.returncode == 0, p.stderr
    for line in want.lines():
        assert line in p.stdout, (line, p.stdout)
    d = json.loads(cli("diff", "a", "b", "--json", cwd=root).stdout)
    assert d["packages"] == want.to_dict()
