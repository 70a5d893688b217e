"""A versioned, compiled component added as ONE module plus ONE matrix file, with no edit
anywhere else: its own matrix axis (releases, a target part ``toy1.0``, an image tag part, a
stack.json key, a label), a requires rule against torch that the resolver enforces, and a
compile (core.compiles) that makes the plan choose an nvcc builder. Both files live in this
test's temp folder: the matrix file beside a copy of the frozen matrix, the module imported from
there and registered."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys

import pytest

from core_helpers import FROZEN
from envbuilder.api import render_target, resolve_target
from envbuilder.components import registry
from envbuilder.core.matrix import load_matrix
from envbuilder.errors import IncompatibleError

MATRIX_FILE = '''\
# A toy component that compiles a CUDA extension against torch.
schema_version: 1
component: {"tag": "toy", "title": "Toy", "order": 30, "checks": "its version"}
compiles:
  when: always
  nvcc: true
  build: [setuptools, wheel, ninja]
  env:
    TOY_CUDA_EXT: "1"
  source: https://pytorch.org/docs/stable/cpp_extension.html
source: https://pypi.org/simple/
releases:
  - line: "1.0"
    versions: ["1.0.0", "1.0.1"]
    requires: {torch: ">=2.1"}
    source: https://pypi.org/simple/
  - line: "0.9"
    versions: ["0.9.0"]
    requires: {torch: "<2.1"}
    source: https://pypi.org/simple/
'''

MODULE = '''\
"""Toy: a compiled component; what it is and how it compiles is its matrix file's."""

from envbuilder.components.base import Component, PipLayer, PlanContext


class Toy(Component):
    name = axis = facts_key = "toy"

    def layer(self, ctx: PlanContext) -> PipLayer:
        env = dict(self.facts(ctx.stack.matrix).compiles.env)
        env.update(ctx.compile_env)
        if ctx.gpu:
            env["TORCH_CUDA_ARCH_LIST"] = ";".join(ctx.arch)
        return self.compiled_layer(ctx, (f"toy=={self.release(ctx.stack).version}",), env)


COMPONENT = Toy()
'''


@pytest.fixture
def toy(tmp_path):
    """(the matrix folder with toy.yaml, the toy module registered)."""
    matrix = tmp_path / "matrix"
    shutil.copytree(FROZEN, matrix)
    (matrix / "toy.yaml").write_text(MATRIX_FILE)
    module_file = tmp_path / "toy_component.py"
    module_file.write_text(MODULE)
    spec = importlib.util.spec_from_file_location("toy_component", module_file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["toy_component"] = mod
    spec.loader.exec_module(mod)
    registry.register(mod.COMPONENT)
    try:
        yield matrix
    finally:
        registry.unregister("toy")
        sys.modules.pop("toy_component", None)


def test_the_matrix_file_makes_an_axis(toy):
    m = load_matrix(toy)
    c = m.component("toy")
    assert (c.tag, c.title, c.order) == ("toy", "Toy", 30)
    assert m.plan_order.index("toy") > m.plan_order.index("deepspeed")  # order 30 after 20
    assert [str(r.version) for r in c.releases] == ["1.0.1", "1.0.0", "0.9.0"]
    assert c.compiles is not None and c.compiles.nvcc and c.compiles.build == ("setuptools", "wheel", "ninja")


def test_a_target_part_pins_it_and_its_requires_rule_chooses_torch(toy):
    st = resolve_target("cu121-toy1.0", matrix_dir=toy)
    assert str(st.component("toy").version) == "1.0.1"
    assert st.torch.version.release >= (2, 1)
    assert "-toy1.0.1-" in st.tag and st.to_dict()["toy"] == "1.0.1"
    old = resolve_target("cu118-toy0.9", matrix_dir=toy)
    assert old.torch.version.release < (2, 1), "toy 0.9 requires torch <2.1"
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cu121-torch2.5-toy0.9", matrix_dir=toy)
    assert "toy_requires" in {v.rule for v in ei.value.violations}


def test_it_compiles_so_the_builder_has_nvcc(toy):
    st = resolve_target("cu121-toy1.0", matrix_dir=toy)
    assert st.compiles and st.builder is not None and st.builder.nvcc is not None
    assert st.builder_image.endswith("-devel-ubuntu22.04")
    assert resolve_target("cu121", matrix_dir=toy).builder is None  # not asked for: no builder
    cpu = resolve_target("cpu-torch2.5-toy1.0", matrix_dir=toy)
    assert cpu.builder is not None and cpu.builder.nvcc is None  # a CPU torch: g++ only


def test_it_renders_as_a_layer_of_its_own(toy, tmp_path):
    out = tmp_path / "out"
    render_target("cu121-toy1.0", out, matrix_dir=toy)
    docker = (out / "Dockerfile").read_text()
    assert "AS layer-toy" in docker and "--no-build-isolation" in docker
    assert "requirements/toy.txt" in docker and "TOY_CUDA_EXT=1" in docker
    assert docker.index("AS layer-torch") < docker.index("AS layer-toy")  # built against torch
    assert (out / "requirements" / "toy.txt").read_text().strip().endswith("toy==1.0.1")
    assert 'io.envbuilder.toy="1.0.1"' in docker
    definition = (out / "envbuilder.def").read_text()
    assert "toy==1.0.1" in (out / "requirements.in").read_text() and "TOY_CUDA_EXT" in definition
    stack = json.loads((out / "stack.json").read_text())
    assert stack["toy"] == "1.0.1" and stack["builder"]["nvcc"] is not None


def test_a_team_overlay_can_add_the_component_file(toy, tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "toy.yaml").write_text(MATRIX_FILE)
    m = load_matrix(FROZEN, overlay)
    assert "toy" in m.component_names
    assert [e["action"] for e in m.overlay] == ["added"]
    st = resolve_target("cu121-toy1.0", matrix=m)
    assert str(st.component("toy").version) == "1.0.1"
