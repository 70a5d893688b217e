"""Reports that say what is true (issue 46, point 4): the base image a project's ``base_image``
makes the Dockerfile use, in ``resolve``, the render summary and stack.json; who pinned a
version (the project file's key, an option, the target string); the project target's name in
the image label ``io.envbuilder.target``; a SIF's digest in its smoke metrics."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hostile_helpers import cli
from test_metrics import write_records

from envbuilder.run import metrics as mx

PROJECT = """\
base_image = "ux5/debian:12"

[[targets]]
name = "ux5cpu"
target = "cpu"
torch = "2.13"

[[targets]]
name = "train"
target = "cpu"
"""


def _project(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "envbuilder.toml").write_text(PROJECT)
    return root


def test_resolve_states_the_project_base_image_and_who_pinned_torch(tmp_path):
    root = _project(tmp_path / "p")
    p = cli("resolve", "ux5cpu", "--json", cwd=root)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["base_image"] == "ux5/debian:12" and d["builder_image"] == "ux5/debian:12"
    why = d["choices"]["torch"]["reason"]
    assert f"pinned 2.13 by key targets.ux5cpu.torch of {root / 'envbuilder.toml'}" in why
    assert "'cpu'" not in why
    # an option names itself; a pin of the target string names the target
    p = cli("resolve", "train", "--torch", "2.13", "--json", cwd=root)
    assert json.loads(p.stdout)["choices"]["torch"]["reason"].startswith("pinned 2.13 by --torch;")
    p = cli("resolve", "cpu-torch2.13", "--json", cwd=tmp_path)
    assert json.loads(p.stdout)["choices"]["torch"]["reason"].startswith("pinned 2.13 by 'cpu-torch2.13';")
    assert json.loads(p.stdout)["base_image"].startswith("debian:")  # no project: the matrix's
    text = cli("resolve", "ux5cpu", cwd=root).stdout
    assert "ux5/debian:12" in text and "key targets.ux5cpu.torch" in text


def test_render_summary_stack_json_and_labels_say_the_project_s_image_and_name(tmp_path):
    root = _project(tmp_path / "p")
    p = cli("render", cwd=root)
    assert p.returncode == 0, p.stderr
    assert "ux5cpu: cpu-torch2.13.0-py311-debian12 (base ux5/debian:12)" in p.stdout
    for name in ("ux5cpu", "train"):
        out = root / "build" / name
        docker = (out / "Dockerfile").read_text()
        assert "ARG RUNTIME_IMAGE=ux5/debian:12" in docker
        assert f'io.envbuilder.target="{name}"' in docker
        assert f"io.envbuilder.target {name}\n" in (out / "envbuilder.def").read_text()
        stack = json.loads((out / "stack.json").read_text())
        assert stack["base_image"] == stack["image"]["runtime"] == "ux5/debian:12"
        assert stack["image"]["labels"]["io.envbuilder.target"] == name
    # a plain target keeps the target string as its label
    p = cli("render", "cpu", "-o", str(tmp_path / "plain"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert 'io.envbuilder.target="cpu"' in (tmp_path / "plain" / "Dockerfile").read_text()


def test_a_sif_s_metrics_carry_its_digest(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVBUILDER_APPTAINER", "")
    monkeypatch.setenv("PATH", str(tmp_path / "nobin"))  # no apptainer: the digest still comes
    write_records(tmp_path / "out")
    sif = tmp_path / "train.sif"
    sif.write_bytes(b"SIF image bytes" * 100)
    result = mx.result_from_records(str(tmp_path / "out"))
    prom = tmp_path / "smoke.prom"
    where = mx.check_target(str(prom), None)
    rep = mx.export_run(result, where, image=str(sif))
    assert rep is not None
    digest = "sha256:" + hashlib.sha256(sif.read_bytes()).hexdigest()
    assert f'image_digest="{digest}"' in prom.read_text()
    # a label given wins over what the file says
    rep = mx.export_run(result, where, image=str(sif), overrides={"image_digest": "x", "target": "t"})
    assert 'image_digest="x"' in prom.read_text() and 'target="t"' in prom.read_text()
