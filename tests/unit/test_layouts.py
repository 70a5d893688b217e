"""envbuilder/core/layouts.py: NNODESxNPROC layouts and uneven splits."""

import pytest

from envbuilder.core import layouts as lm
from envbuilder.errors import InputError


def test_parse_even_and_uneven():
    assert lm.parse_layout("2x8") == (2, 8)
    assert lm.Layout.parse("2x8").counts == (8, 8)
    assert str(lm.Layout.parse("7,5")) == "7,5" and lm.Layout.parse("7,5").world == 12
    assert str(lm.Layout.parse("8,8")) == "2x8"  # an even split by counts is the even layout
    with pytest.raises(InputError, match="uneven"):
        _ = lm.Layout.parse("7,5").pair


@pytest.mark.parametrize("bad", ["2x", "x8", "0x8", "2x0", "a,b", "2x8x1", ""])
def test_bad_layouts_name_the_input(bad):
    with pytest.raises(InputError, match="--layout"):
        lm.Layout.parse(bad)


def test_layouts_share_one_world_size_and_are_not_repeated():
    assert lm.parse_layouts(["1x16", "2x8,4x4"]) == ((1, 16), (2, 8), (4, 4))
    assert lm.parse_layouts(["8,8"]) == ((2, 8),)
    with pytest.raises(InputError, match="different world sizes"):
        lm.parse_layouts(["1x8", "2x8"])
    with pytest.raises(InputError, match="given twice"):
        lm.parse_layouts(["2x8", "2x8"])
    with pytest.raises(InputError, match="uneven split"):
        lm.parse_layouts(["7,5"])
    assert lm.world_of([(2, 8), (4, 4)]) == 16


def test_default_layouts_fit_common_nodes():
    assert lm.default_layouts(12) == ((1, 12), (2, 6), (3, 4))
    assert lm.default_layouts(16)[0] == (1, 16)
    assert all(n * p == 16 for n, p in lm.default_layouts(16))
    with pytest.raises(InputError, match="--nproc"):
        lm.default_layouts(0)
