"""envbuilder/core/catalog.py and core/compiles.py: a component's identity line and its
compile description, read the same way for the matrix's components and a team's packages."""

from pathlib import Path

import pytest

from core_helpers import FROZEN, builtin
from envbuilder.core import catalog, compiles
from envbuilder.errors import MatrixError


def test_the_identity_line_is_read_without_yaml_and_agrees_with_the_loaded_matrix():
    idents = {c.name: c for c in catalog._read(FROZEN)}
    m = builtin()
    assert set(idents) == set(m.component_names)
    for c in m.components:
        i = idents[c.name]
        assert (i.tag, i.title, i.order, i.checks, i.ops_default) == (c.tag, c.title, c.order, c.checks,
                                                                        c.ops_default)
        assert i.ops_key == c.ops_key and i.ops_option == c.ops_option


def test_built_in_components_are_the_matrix_folder_s_other_files():
    names = [c.name for c in catalog.builtin()]
    assert names == sorted(names) and names
    assert not set(catalog.CORE_FILES) & {f"{n}.yaml" for n in names}


@pytest.mark.parametrize("text,match", [
    ("schema_version: 1\nreleases: []\n", "starts with its component: line"),
    ("component:\n  tag: te\n", "starts with its component: line"),  # not one line
    ('component: {"tag": "te"}\n', "tag, title, order and checks"),
    ("component: {tag: te, title: T, order: 1, checks: x}\n", "one line of JSON"),
])
def test_a_bad_identity_line_names_the_file(tmp_path, text, match):
    p = tmp_path / "te.yaml"
    p.write_text(text)
    with pytest.raises(MatrixError, match=match) as ei:
        catalog.identity(p)
    assert str(p) in str(ei.value)


@pytest.mark.parametrize("name", ["torch", "cuda", "Bad", "x-y"])
def test_a_component_cannot_take_a_core_name(tmp_path, name):
    p = tmp_path / f"{name}.yaml"
    p.write_text('component: {"tag": "t", "title": "T", "order": 1, "checks": "x"}\n')
    with pytest.raises(MatrixError, match="cannot name a component"):
        catalog.identity(p)


def test_one_compile_description_for_components_and_team_packages():
    from envbuilder.components.team_compiled import catalog as team_catalog

    hvd = builtin().component("horovod").compiles
    flash = team_catalog().packages["flash-attn"]
    assert isinstance(hvd, compiles.Compiles) and isinstance(flash, compiles.Compiles)
    assert hvd.when == "always" and hvd.nvcc and "cmake" in hvd.build
    assert flash.cuda_only and flash.nvcc and flash.env["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
    xf = team_catalog().packages["xformers"]
    assert "FORCE_CUDA" in xf.env_for(gpu=True) and "FORCE_CUDA" not in xf.env_for(gpu=False)


def test_tools_apply_by_version():
    from packaging.version import Version

    ds = builtin().component("deepspeed").compiles
    assert ds is not None and ds.when == "ops"
    (tool,) = ds.tools_for(Version("0.16.9"))
    assert tool.hide_modules == ("triton",)
    assert ds.tools_for(Version("0.17.5")) == ()


def test_a_bad_specifier_in_tools_is_a_matrix_error():
    with pytest.raises(MatrixError, match="tools/0/versions"):
        compiles.parse({"tools": [{"versions": "nonsense", "env": {}, "reason": "r", "source": "https://x"}]},
                       "matrix file t.yaml, key compiles")


def test_every_built_in_component_file_has_a_module(tmp_path):
    from envbuilder.components import registry

    axes = {c.axis for c in registry.components() if c.axis}
    assert {c.name for c in catalog.builtin()} <= axes
    assert Path(catalog.__file__).name == "catalog.py"
