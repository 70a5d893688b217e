"""Invariants of the live matrix (matrices/), which grows with every release: it loads (schema,
duplicate keys, cross-references), every fact has an http(s) source (tests/test_matrix.py walks
the raw YAML of the live files), and every built-in target resolves and renders. These tests
name no version, so they stay true as the matrix grows; the tests that do name versions run
against the frozen copy (tests/data/matrix-frozen/)."""

from __future__ import annotations

import pytest

from core_helpers import FROZEN, LIVE, live
from envbuilder.api import builtin_targets, resolve_target
from envbuilder.core import schema
from envbuilder.core.matrix import load_matrix
from envbuilder.api import make_spec
from envbuilder.assemble import folder_files


def test_live_matrix_loads_and_is_the_builtin_one():
    m = live()
    assert m.path == LIVE
    assert load_matrix(None).digest == m.digest
    comps = {f"{c}.yaml" for c in m.component_names}
    # and the smoke job's bandwidth floors beside them, read on their own (core.matrix.load_floors)
    assert {p.name for p in LIVE.glob("*.yaml")} == set(schema.FILES) | comps | {schema.BANDWIDTH_FILE} and comps


def test_frozen_copy_still_passes_the_schema():
    # a schema change that the frozen copy no longer meets must refresh the copy on purpose
    assert load_matrix(FROZEN).targets


@pytest.mark.parametrize("name", [t.name for t in live().targets])
def test_every_builtin_target_resolves_and_renders(name):
    m = live()
    assert name in builtin_targets(m)
    stack = resolve_target(name, matrix=m)
    assert stack.tag and stack.torch.source, name
    plan, files = folder_files(make_spec(name), stack)
    assert {"Dockerfile", "envbuilder.def", "stack.json"} <= set(files)
    assert plan.target == name
