"""One spec per target (issue 19): the cascade (defaults < project < project target < command
line), one selection for "one TARGET / --all / the project's targets", one assembly path, and
the seams between commands, each through the CLI as a team runs it (a subprocess inside the
project's folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostile_helpers import assert_clean_failure, cli

from envbuilder.api import Pins, make_spec, resolve_spec
from envbuilder.core.project import find_project
from envbuilder.core.spec import merge_pins, specs

PROJECT = """\
registry = "registry.example.com/team"
repository = "train"
layouts = ["1x4", "2x2"]
pip_index_url = "https://mirror.example.com/simple"

[[targets]]
name = "train"
target = "cu121"
deepspeed = "0.16"

[[targets]]
name = "eval"
target = "cpu"
requirements = ["einops==0.8.2"]
repository = "eval"

[[targets]]
name = "train-rt"
target = "cu121"
deepspeed = "0.16"
flavour = "cuda-runtime"
"""


def _project(root: Path, text: str = PROJECT) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "envbuilder.toml").write_text(text)
    return root


# -- the cascade -------------------------------------------------------------------------------

def test_cascade_defaults_project_target_command_line(tmp_path):
    proj = find_project(_project(tmp_path / "p"))
    train = make_spec("train", project=proj)
    # the project's keys, then the target's own table
    assert (train.target, str(train.pins.get("deepspeed")), train.registry, train.repository) == (
        "cu121", "0.16", "registry.example.com/team", "train")
    assert train.layouts == ((1, 4), (2, 2)) and train.pip_index_url == "https://mirror.example.com/simple"
    ev = make_spec("eval", project=proj)
    assert (ev.registry, ev.repository) == ("registry.example.com/team", "eval")
    assert ev.requirements == ("einops==0.8.2",)
    # the command line wins, pins merged per axis
    (s,) = specs("train", project=proj, given={"python": "3.10", "with_": ("horovod",),
                                                "registry": "reg.example/other", "nproc": 8})
    assert (str(s.pins.get("deepspeed")), str(s.pins.python), s.pins.with_) == ("0.16", "3.10", ("horovod",))
    assert (s.registry, s.nproc) == ("reg.example/other", 8)
    # a plain target inside a project gets the project's defaults, not a target's table
    plain = make_spec("cu118", project=proj)
    assert plain.pins == Pins() and (plain.registry, plain.repository) == ("registry.example.com/team", "train")


def test_merge_pins_without_drops_a_with():
    assert merge_pins(Pins(with_=("deepspeed",)), Pins(without=("deepspeed",))).without == ("deepspeed",)
    assert str(merge_pins(Pins(torch="2.3"), Pins()).torch) == "2.3"


def test_the_invocation_reproduces_the_pins():
    s = make_spec("cu121", pins=Pins(torch="2.3", with_=("deepspeed",)), exclude_newer="2025-01-01")
    assert s.invocation("lock") == ("envbuilder lock cu121 --torch 2.3 --with deepspeed "
                                    "--exclude-newer 2025-01-01T00:00:00Z")


def test_alias_with_more_parts_resolves():
    st = resolve_spec(make_spec("cu121-torch2.5-ds"))
    assert str(st.torch.version).startswith("2.5") and st.deepspeed is not None
    assert st.ops["deepspeed"]  # the alias's pre-built ops come along


# -- a project target's name works with every option and command -------------------------------

@pytest.fixture()
def project(tmp_path):
    return _project(tmp_path / "repo")


def test_project_target_name_takes_options(project):
    p = cli("resolve", "train", "--python", "3.10", "--json", cwd=project)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["python"] == "3.10" and d["deepspeed"].startswith("0.16")
    p = cli("render", "train", "--deepspeed", "0.17", "-o", "out", "--json", cwd=project)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["stack"]["deepspeed"].startswith("0.17")
    p = cli("doctor", "--target", "train", "--json", cwd=project)
    assert "unknown base" not in p.stderr and p.returncode in (0, 1), p.stderr
    assert json.loads(p.stdout)["checks"]


def test_targets_and_ci_act_on_the_project(project):
    p = cli("targets", "--json", cwd=project)
    assert p.returncode == 0, p.stderr
    assert [r["name"] for r in json.loads(p.stdout)["targets"]] == ["train", "eval", "train-rt"]
    p = cli("targets", "--github-matrix", cwd=project)
    assert [i["target"] for i in json.loads(p.stdout)["include"]] == ["train", "eval", "train-rt"]
    p = cli("targets", "--all", "--json", cwd=project)  # the built-in ones on request
    assert "cu118" in [r["name"] for r in json.loads(p.stdout)["targets"]]
    p = cli("ci", "--github", "--json", cwd=project)  # the registry is the project's
    assert p.returncode == 0, p.stderr
    wf = (project / ".github" / "workflows" / "envbuilder.yml").read_text()
    assert "registry.example.com/team/train" in wf


def test_same_warnings_on_every_path(tmp_path):
    root = _project(tmp_path / "w", 'registry = "r.example"\nrepository = "x"\n[[targets]]\nname = "old"\n'
                    'target = "cu121"\ndriver = "525.85.12"\n')
    one = cli("resolve", "old", cwd=root)
    warned = [ln for ln in one.stderr.splitlines() if ln.startswith("warning:")]
    assert one.returncode == 0 and warned, one.stderr  # the driver's minor-version compatibility
    for cmd in (["render"], ["bake"], ["render", "old"]):
        many = cli(*cmd, cwd=root)
        assert many.returncode == 0, many.stderr
        assert [ln for ln in many.stderr.splitlines() if ln.startswith("warning:")] == warned, cmd


def test_check_honours_the_overlay(tmp_path):
    overlay = tmp_path / "ov"
    overlay.mkdir()
    (overlay / "cuda.yaml").write_text("""\
schema_version: 1
toolkits:
- version: "12.1.1"
  driver_min: "999.1.1"
  source: https://internal.example/cuda-policy
""")
    plain = cli("check", "--cuda", "12.1", "--driver", "535.104.05", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    p = cli("check", "--cuda", "12.1", "--driver", "535.104.05", "--matrix-overlay", str(overlay),
            cwd=tmp_path)
    # the overlay's floor (999.1.1) is what the driver is judged against: above CUDA 12's
    # minor-version minimum it still runs, with the warning that names the overlay's floor
    assert p.returncode == 0 and ">= 999.1.1" in p.stderr, (p.stdout, p.stderr)  # warnings: stderr
    assert ">= 999.1.1" not in plain.stderr
    below = cli("check", "--cuda", "12.1", "--driver", "470.82.01", "--matrix-overlay", str(overlay),
                cwd=tmp_path)
    assert below.returncode == 3, below.stdout


def test_only_matching_nothing_is_bad_input(tmp_path):
    p = cli("build", "--all", "--only", "nothing-like-this", cwd=tmp_path)
    assert_clean_failure(p, 2, "--only", "cu118")
    p = cli("render", "--all", "--only", "zzz", "-o", "o", cwd=tmp_path)
    assert_clean_failure(p, 2, "matches none")
    assert not (tmp_path / "o").exists()


def test_project_lock_goes_on_past_a_failing_target_and_names_it(tmp_path):
    root = _project(tmp_path / "l", '[[targets]]\nname = "bad"\ntarget = "cu118"\n'
                    'torch = "2.13"\n[[targets]]\nname = "good"\ntarget = "cpu"\n')
    p = cli("lock", "--check", "--json", cwd=root)
    assert p.returncode in (2, 3), p.stderr
    d = json.loads(p.stdout)
    failed = {f["target"] for f in d["failed"]}
    assert failed == {"bad", "good"}  # good has no lock to check: still tried, named
    assert "bad: " in p.stderr and "good: " in p.stderr


# -- bake: unique tags, aliases apart, caches ---------------------------------------------------

def test_bake_tags_unique_when_targets_differ_only_by_flavour(project):
    p = cli("bake", "--json", cwd=project)
    assert p.returncode == 0, p.stderr
    text = (project / "build" / "docker-bake.hcl").read_text()
    from test_bake_ci import blocks, parse_hcl

    tags = {n: t["tags"] for n, t in blocks(parse_hcl(text), "target").items() if "tags" in t}
    assert tags["train"] != tags["train-rt"]
    # the same versions, another base: a project target's tag leads with its name (core.naming)
    assert tags["train-rt"][0].startswith("registry.example.com/team/train:train-rt-cu121-")
    assert tags["train"][0].startswith("registry.example.com/team/train:train-cu121-")
    assert all(t.startswith("registry.example.com/team/") for ts in tags.values() for t in ts)
    assert json.loads(p.stdout)["bake"]["aliases"]


# -- one assembly path --------------------------------------------------------------------------

def test_build_context_is_what_render_writes(tmp_path):
    """build's context (before its wheels and CA bundle) holds exactly render's bytes."""
    from envbuilder.api import render
    from envbuilder.run.build import BuildOptions, prepare_context

    spec = make_spec("cu121-ds", layouts=("2x4",), requirements=("einops==0.8.2",))
    render([spec], tmp_path / "r", single=True)
    prepare_context(spec, resolve_spec(spec), BuildOptions(), tmp_path / "b")

    def tree(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and p.name != ".envbuilder-output"}

    r, b = tree(tmp_path / "r"), tree(tmp_path / "b")
    assert r == b
    stack = json.loads(r["stack.json"])
    assert stack["smoke"]["layouts"] == ["2x4"] and stack["smoke"]["world_size"] == 8


# -- the fix lock --check prints is the exact invocation ----------------------------------------

@pytest.mark.network
def test_lock_check_fix_command_keeps_the_pins(tmp_path, uv_cache):
    """Following the printed fix verbatim gives a lock that --check accepts, DeepSpeed kept."""
    pytest.importorskip("uv")
    import shlex

    (tmp_path / "team.txt").write_text("tabulate==0.9.0\n")
    args = ["cu121-torch2.1-py310", "--deepspeed", "0.16", "--requirements", "team.txt", "-o", "d"]
    env = {"UV_CACHE_DIR": str(uv_cache)}
    p = cli("lock", *args, cwd=tmp_path, **env)
    assert p.returncode == 0, p.stderr
    lock = (tmp_path / "d" / "requirements.lock").read_text()
    assert "# made by: envbuilder lock cu121-torch2.1-py310 --deepspeed 0.16 --requirements team.txt" in lock
    (tmp_path / "team.txt").write_text("tabulate==0.8.10\n")
    p = cli("lock", *args, "--check", cwd=tmp_path, **env)
    assert p.returncode == 1, p.stderr
    fix = p.stderr.splitlines()[0].split("; ")[-1].split(" makes it again")[0].strip()
    assert fix.startswith("envbuilder lock cu121-torch2.1-py310 --deepspeed 0.16"), p.stderr
    p = cli(*shlex.split(fix)[1:], cwd=tmp_path, **env)
    assert p.returncode == 0, p.stderr
    p = cli("lock", *args, "--check", cwd=tmp_path, **env)
    assert p.returncode == 0, p.stderr
    assert "\ndeepspeed==0.16" in (tmp_path / "d" / "requirements.lock").read_text()


def test_a_spec_cannot_be_made_unchecked():
    """Validate once: a TargetSpec checks its options when it is made (whatever makes it), so
    no consumer (the plan, the build, the lock) checks them again."""
    from dataclasses import replace

    from envbuilder.core.spec import TargetSpec
    from envbuilder.errors import InputError

    for field, bad, flag in (("base_image", "ubuntu; id", "--base-image"),
                             ("builder_image", "x$(id)", "--builder-image"),
                             ("pip_index_url", "http://x/ $(id)", "--pip-index-url"),
                             ("extra_index_urls", ("https://x/`id`",), "--extra-index-url"),
                             ("nproc", 0, "--nproc"), ("registry", "Bad Repo", "--registry")):
        with pytest.raises(InputError, match=flag.replace("$", "\\$")):
            TargetSpec(name="t", target="cu121", **{field: bad})
    ok = TargetSpec(name="t", target="cu121", base_image="ubuntu:22.04")
    with pytest.raises(InputError, match="--base-image"):
        replace(ok, base_image="ubuntu:22.04\nRUN id")
    # the cascade names where a value came from
    with pytest.raises(InputError, match="project file"):
        TargetSpec(name="t", target="cu121", base_image="x y", origin={"base_image": "project file p, key base_image:"})
