"""envbuilder/components/registry.py and base.py: plan order from each component's matrix
file, registration, and a component's view of its own matrix data."""

import pytest

from core_helpers import builtin
from envbuilder.components import registry
from envbuilder.components.base import Component, hide_modules
from envbuilder.core.resolve import resolve_target


def test_built_in_order_is_torch_then_the_matrix_files_then_the_team():
    names = [c.name for c in registry.components()]
    assert names[0] == "torch" and names[-2:] == ["team-compiled", "team"]
    m = builtin()
    by = {c.name: c for c in registry.components()}
    for comp in m.components:  # a matrix component's place is its file's order
        assert by[comp.name].module_order == comp.order


def test_active_components_follow_the_stack_s_matrix():
    st = resolve_target("cu118-hvd", builtin())
    assert [c.name for c in registry.active(st)][:2] == ["torch", "horovod"]
    ds = resolve_target("cu121-ds", builtin())
    assert registry.get("deepspeed").facts(ds.matrix) is ds.matrix.component("deepspeed")
    assert registry.get("deepspeed").ops(ds) == ds.ops["deepspeed"]


def test_register_refuses_a_second_of_one_name():
    class Extra(Component):
        name = "extra-unit"

    registry.register(Extra())
    try:
        with pytest.raises(ValueError, match="registered already"):
            registry.register(Extra())
        assert registry.get("extra-unit").module_order == 50  # no axis, no ORDER: the middle
    finally:
        registry.unregister("extra-unit")
    with pytest.raises(KeyError, match="no component"):
        registry.get("extra-unit")


def test_hidden_modules_fail_to_import_in_the_build():
    lines = hide_modules(("triton",))
    assert lines[0] == "mkdir -p /tmp/envbuilder/hide/triton"
    assert "raise ImportError" in lines[1] and lines[1].endswith("/triton/__init__.py")
