"""envbuilder/core/builder.py: which builder compiles a stack, read from each component's
``compiles:`` (no component is named there)."""

from dataclasses import replace

import pytest

from core_helpers import builtin
from envbuilder.core.builder import NoBuilder, builder_for, compiled, compiled_parts, compiling
from envbuilder.core.resolve import resolve_target
from envbuilder.core.target import Pins


def _stack(target, **pins):
    return resolve_target(target, builtin(), Pins.of(**pins) if pins else None)


def test_nothing_compiles_without_a_compiled_component():
    st = _stack("cu121")
    assert compiled(st.assignment, st.matrix, st.ops) == (False, False)
    assert builder_for(st.assignment, st.matrix, st.ops) is None


def test_a_component_that_always_compiles_needs_nvcc_on_cuda_only():
    st = _stack("cu118-hvd")
    assert [c.name for c in compiling(st.assignment, st.matrix, st.ops)] == ["horovod"]
    assert compiled(st.assignment, st.matrix, st.ops) == (True, True)
    b = builder_for(st.assignment, st.matrix, st.ops)
    assert b is not None and b.image_kind == "devel" and b.nvcc is not None
    cpu = dict(st.assignment, cuda=None)
    assert compiled(cpu, st.matrix, st.ops) == (True, False)


def test_ops_compile_only_when_asked_for():
    st = _stack("cu121-ds")
    assert st.ops["deepspeed"]  # the default ops on CUDA
    assert compiled(st.assignment, st.matrix, st.ops) == (True, True)
    assert compiled(st.assignment, st.matrix, {"deepspeed": ()}) == (False, False)
    assert compiled_parts(st.assignment, st.matrix, st.ops) == [f"DeepSpeed ops {','.join(st.ops['deepspeed'])}"]


def test_team_extensions_compile_with_nvcc_on_cuda():
    st = _stack("cu124")
    assert compiled(st.assignment, st.matrix, st.ops, extensions=True) == (True, True)
    b = builder_for(st.assignment, st.matrix, st.ops, extensions=("flash-attn",))
    assert b is not None and b.nvcc is not None


def test_an_exact_minor_is_required_outside_the_component_s_majors():
    st = _stack("cu121-ds")
    m = st.matrix
    ds = m.component("deepspeed")
    # no major tolerates a minor mismatch: an OS builder must have torch's exact CUDA minor
    strict = replace(m, components=tuple(replace(c, minor_mismatch_majors=()) if c.name == "deepspeed" else c
                                         for c in m.components))
    a = dict(st.assignment, flavour="os", os=m.os["debian13"])  # apt nvcc 12.4, torch cu121
    with pytest.raises(NoBuilder, match="only with nvcc of torch's exact CUDA") as ei:
        builder_for(a, strict, st.ops)
    assert "--ds-ops" in ei.value.fix and ds.minor_mismatch_source[0] in ei.value.source
