"""One table of options (issue 27, item 1): each option declared once (core.options.OPTIONS)
and everything else derived from it or checked against it: the command line's options, the
project file's keys and schema, the cascade, the lock's "made by" line. The done-when test:
every option `render --help` shows is a project key (or one of the documented command-line-only
options), and the project schema agrees."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from hostile_helpers import assert_clean_failure, cli

from envbuilder.core import options
from envbuilder.core.project import find_project, schema
from envbuilder.core.spec import TargetSpec, make_spec, pin_args
from envbuilder.core.target import Pins


def _render_command():
    import typer.main

    from envbuilder.cli import app

    return typer.main.get_command(app).commands["render"]


def _schema_node(key: str, level: str) -> dict | None:
    s = schema()
    if "." in key:  # jobs.command: a key of the [jobs] table
        table, sub = key.split(".", 1)
        return s["$defs"][table]["properties"].get(sub)
    props = s["properties"] if level == "top" else s["properties"]["targets"]["items"]["properties"]
    return props.get(key)


# -- the done-when test --------------------------------------------------------------------------

def test_every_option_render_help_shows_is_a_project_key_and_the_schema_agrees():
    p = cli("render", "--help", COLUMNS="200")
    assert p.returncode == 0, p.stderr
    shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", p.stdout))
    params = {max(o for o in prm.opts if o.startswith("--")) for prm in _render_command().params
              if getattr(prm, "param_type_name", "") == "option" and not prm.hidden}
    assert params <= shown  # the click command's options are the ones --help prints
    by_flag = {o.flag: o for o in options.OPTIONS if o.flag}
    missing = []
    for flag in sorted(params):
        if flag in options.COMMAND_LINE_ONLY:
            continue
        opt = by_flag.get(flag)
        if opt is None or opt.key is None:
            missing.append(flag)
            continue
        # the schema agrees: the key is in the project file's schema, at the level it may be set
        for level in ("top", "target") if opt.scope == "both" else ("target",):
            assert _schema_node(opt.key, level) is not None, (flag, opt.key, level)
    assert not missing, f"options of render --help that are no project key: {missing}"


def test_the_schema_is_the_table():
    s = schema()
    top, target = s["properties"], s["properties"]["targets"]["items"]["properties"]
    assert set(top) == set(options.project_keys("top"))
    assert set(target) == set(options.project_keys("target"))
    for level, props in (("top", top), ("target", target)):
        for key, fragment in options.schema_properties(level).items():
            assert props[key] == fragment, f"{level} {key}: python -m envbuilder.core.options rewrites it"


# -- the table against the types it feeds ----------------------------------------------------------

def test_the_table_names_every_field_once():
    pins = {f.name for f in dataclasses.fields(Pins)} - {"versions", "ops", "origin"}
    # a component's pin and ops option live in Pins.versions and Pins.ops, by component
    comps = set(options.COMPONENTS) | set(options.OPS_OPTIONS)
    assert {o.name for o in options.OPTIONS if o.kind == "pin"} == pins | comps
    given = Pins.of(**{c: "1.0" for c in options.COMPONENTS}, **{o: "x" for o in options.OPS_OPTIONS})
    assert {n: str(v) for n, v in given.versions.items()} == {c: "1.0" for c in options.COMPONENTS}
    assert given.ops == {c: ("x",) for c in options.OPS_OPTIONS.values()}
    assert {n: given.get(n) for n in options.OPS_OPTIONS} == {n: ("x",) for n in options.OPS_OPTIONS}
    # every other option is a field of TargetSpec: its one home (no mirror of the fields: the
    # command line's layer is a mapping keyed by the table, core.options.given)
    spec = {f.name for f in dataclasses.fields(TargetSpec)}
    fields = {f for o in options.OPTIONS if o.kind != "pin" for f in o.fields}
    assert fields <= spec
    assert len({o.name for o in options.OPTIONS}) == len(options.OPTIONS)
    assert {o.kind for o in options.OPTIONS} <= set(options.KINDS)
    with pytest.raises(KeyError, match="no option 'flavor'"):
        options.get("flavor")
    with pytest.raises(TypeError, match="no option 'base_imag' .*did you mean base_image"):
        options.given({"base_imag": "debian:12"})
    assert options.given({"nproc": 0, "infiniband": False, "layouts": [], "cuda_arch": "8.0,9.0",
                          "requirements_file": "r.txt"}) == {
        "nproc": 0, "cuda_arch": ("8.0", "9.0"), "requirements_file": Path("r.txt")}


def test_the_command_line_options_come_from_the_table():
    from envbuilder.ui import options as ui

    for o in options.OPTIONS:
        if o.flag:
            _, typer_opt = ui._OPTIONS[o.param_name]
            assert typer_opt.param_decls == (o.flag,) and typer_opt.help == o.help


def test_made_by_line_states_the_pins_in_the_table_order():
    pins = Pins.of(fabric="efa", torch="2.3", with_=("deepspeed",), ds_ops="fused_adam")
    assert pin_args(pins) == ["--torch", "2.3", "--ds-ops", "fused_adam", "--fabric", "efa",
                              "--with", "deepspeed"]


# -- the project file: every option a key, did-you-mean, one type per key -------------------------

EVERY = """\
driver = "535.104.05"
base_image = "nvidia/cuda:12.1.1-base-ubuntu22.04"
cuda_arch = ["8.0", "9.0"]
cpu_isa = "x86-64-v4"
nproc = 8
infiniband = true
min_busbw = 50.0
fabric = "efa"

[[targets]]
name = "train"
target = "cu121"
ds_ops = ["fused_adam"]
builder_image = "nvidia/cuda:12.1.1-devel-ubuntu22.04"
image = "registry.example.com/team/train:v1"
nproc = 16
cpu_isa = "x86-64-v3"

[[targets]]
name = "jit"
target = "cu121-ds0.16"
ds_ops = []
infiniband = false
"""


def test_every_target_option_is_a_project_key_with_the_cascade(tmp_path):
    (tmp_path / "envbuilder.toml").write_text(EVERY)
    proj = find_project(tmp_path)
    train = make_spec("train", project=proj)
    assert train.pins.driver == "535.104.05" and train.pins.fabric == "efa"  # the top level's
    assert train.pins.get("ds_ops") == ("fused_adam",) and train.base_image.endswith("base-ubuntu22.04")
    assert train.builder_image.endswith("devel-ubuntu22.04") and train.cuda_arch == ("8.0", "9.0")
    assert (train.nproc, train.cpu_isa, train.image) == (16, "x86-64-v3", "registry.example.com/team/train:v1")
    assert train.infiniband and train.min_busbw == 50.0
    jit = make_spec("jit", project=proj)
    assert jit.pins.get("ds_ops") == () and jit.infiniband is False and jit.nproc == 8
    # the command line wins over both
    s = make_spec("train", project=proj, given={"nproc": 4, "cpu_isa": "x86-64-v2", "driver": "550.54.15"})
    assert (s.nproc, s.cpu_isa, s.pins.driver) == (4, "x86-64-v2", "550.54.15")


def test_project_base_image_reaches_the_dockerfile(tmp_path):
    (tmp_path / "envbuilder.toml").write_text(
        '[[targets]]\nname = "t"\ntarget = "cpu"\nbase_image = "debian:12-slim"\n')
    p = cli("render", "t", "-o", "out", "-q", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "debian:12-slim" in (tmp_path / "out" / "Dockerfile").read_text()


@pytest.mark.parametrize("text,needles", [
    ('[[targets]]\nname = "t"\ntarget = "cu121"\nflavor = "cuda-runtime"\n',
     ("unknown key targets.0.flavor", "did you mean flavour?")),
    ('registri = "ghcr.io/a/b"\n', ("unknown key registri", "did you mean registry?")),
    ('base_imag = "debian:12"\n', ("unknown key base_imag", "did you mean base_image?")),
])
def test_unknown_project_keys_get_a_did_you_mean(tmp_path, text, needles):
    (tmp_path / "envbuilder.toml").write_text(text)
    assert_clean_failure(cli("targets", cwd=tmp_path), 2, *needles)


def test_ds_ops_is_a_list_as_in_targets_yaml(tmp_path):
    (tmp_path / "envbuilder.toml").write_text(
        '[[targets]]\nname = "t"\ntarget = "cu121"\nds_ops = "fused_adam"\n')
    assert_clean_failure(cli("targets", cwd=tmp_path), 2, "ds_ops", "array")
    import yaml

    from hostile_helpers import ROOT

    aliases = yaml.safe_load((ROOT / "matrices" / "targets.yaml").read_text())["targets"]
    assert all(isinstance(a["ds_ops"], list) for a in aliases if "ds_ops" in a)


def test_one_type_per_key_in_the_project_file_and_targets_yaml():
    from envbuilder.core.schema import TARGETS

    items = TARGETS["properties"]["targets"]["items"]
    project = schema()["properties"]["targets"]["items"]["properties"]
    matrix_keys = {**items["properties"], **{k: v for k in project for p, v in items["patternProperties"].items()
                                            if re.fullmatch(p, k)}}
    shared = set(matrix_keys) & set(project) - {"description"}
    assert {"name", "target", "flavour", "ds_ops"} <= shared  # ds_ops: a <tag>_ops key of targets.yaml
    for key in shared:
        assert matrix_keys[key].get("type") == project[key].get("type"), key


@pytest.mark.parametrize("text,flag,needle", [
    ('base_image = "Not An Image"\n[[targets]]\nname = "t"\ntarget = "cpu"\n', (),
     "key base_image: 'Not An Image' is not an image reference"),
    ('[[targets]]\nname = "t"\ntarget = "cpu"\n', ("--base-image", "Not An Image"),
     "--base-image 'Not An Image' is not an image reference"),
    ('[[targets]]\nname = "t"\ntarget = "cpu"\npip_index_url = "ftp://x y"\n', (),
     "key targets.t.pip_index_url: 'ftp://x y' is not a URL"),
])
def test_a_bad_value_names_where_it_came_from(tmp_path, text, flag, needle):
    (tmp_path / "envbuilder.toml").write_text(text)
    assert_clean_failure(cli("render", "t", "-o", "out", *flag, cwd=tmp_path), 2, needle)
    assert not (tmp_path / "out").exists()


def test_schema_file_is_valid_json_the_editors_read():
    from envbuilder.core.resources import data_path

    assert json.loads(data_path("project.schema.json").read_text())["$schema"]


# -- no precedence outside the cascade --------------------------------------------------------------

def test_the_cli_reads_no_project_itself():
    from hostile_helpers import ROOT

    text = (ROOT / "envbuilder" / "cli.py").read_text()
    assert "find_project" not in text and ".registry" not in text


def test_bake_tags_each_image_under_its_cascade_registry(tmp_path):
    (tmp_path / "envbuilder.toml").write_text(
        'registry = "ghcr.io/acme"\nrepository = "train"\n[[targets]]\nname = "a"\ntarget = "cpu"\n'
        '[[targets]]\nname = "b"\ntarget = "cpu"\nrepository = "other"\n')
    p = cli("bake", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    from test_bake_ci import blocks, parse_hcl

    def tags():
        text = (tmp_path / "build" / "docker-bake.hcl").read_text()
        return {n: t["tags"][0] for n, t in blocks(parse_hcl(text), "target").items() if "tags" in t}

    t = tags()  # the target's own repository wins over the project's; not the first one for all
    assert t["a"].startswith("ghcr.io/acme/train:a-") and t["b"].startswith("ghcr.io/acme/other:b-")
    p = cli("bake", "--json", "--registry", "ghcr.io/all", cwd=tmp_path)  # the command line wins
    assert p.returncode == 0, p.stderr
    t = tags()  # a registry and namespace: each image keeps its repository under it
    assert t["a"].startswith("ghcr.io/all/train:a-") and t["b"].startswith("ghcr.io/all/other:b-")


def test_ci_and_check_read_the_project_through_the_cascade(tmp_path):
    (tmp_path / "envbuilder.toml").write_text('registry = "Not A Repo"\n')
    assert_clean_failure(cli("ci", "--github", cwd=tmp_path), 2, "key registry:", "is not a repository")
    (tmp_path / "envbuilder.toml").write_text('registry = "ghcr.io/acme/train"\n')
    p = cli("ci", "--github", "--registry", "ghcr.io/acme/cli", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "ghcr.io/acme/cli" in (tmp_path / ".github" / "workflows" / "envbuilder.yml").read_text()


def test_completion_comes_from_the_table():
    import subprocess

    from hostile_helpers import CLI, env

    def complete(words: str) -> list[str]:
        n = len(words.split()) - (0 if words.endswith(" ") else 1)
        p = subprocess.run(CLI, capture_output=True, text=True, env=env(
            _ENVBUILDER_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=str(n)))
        assert p.returncode == 0, p.stderr
        return p.stdout.split()

    assert complete("envbuilder render cu121 --fabric e") == ["efa"]
    assert set(complete("envbuilder lock cu121 --platform linux/")) == {"linux/amd64", "linux/arm64"}
    assert "cuda-runtime" in complete("envbuilder resolve cu121 --flavour cu")


def test_did_you_mean_reaches_the_jobs_table(tmp_path):
    (tmp_path / "envbuilder.toml").write_text('[jobs]\ncomand = "torchrun train.py"\n')
    assert_clean_failure(cli("targets", cwd=tmp_path), 2, "unknown key jobs.comand", "did you mean command?")
    (tmp_path / "envbuilder.toml").write_text(
        '[[targets]]\nname = "t"\ntarget = "cpu"\n[targets.jobs.slurm]\npartiton = "gpu"\n')
    assert_clean_failure(cli("targets", cwd=tmp_path), 2, "partiton", "did you mean partition?")
