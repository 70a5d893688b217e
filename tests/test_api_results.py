"""The front door (envbuilder.api): split by verb, no module over 400 lines, and every public
function returns a typed value (no bare dict, tuple or Any): results are dataclasses whose
to_dict() is the --json document."""

from __future__ import annotations

import inspect
from pathlib import Path

from envbuilder import api
from envbuilder.api import results

API = Path(api.__file__).parent


def test_no_api_module_is_over_400_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in API.glob("*.py")}
    assert sizes and all(n <= 400 for n in sizes.values()), sizes


def test_no_public_api_function_returns_a_bare_dict_tuple_or_any():
    bare = ("dict", "tuple", "Any", "list[dict", "list[tuple", "list[Any")
    found = []
    for name in api.__all__:
        fn = getattr(api, name)
        if not inspect.isfunction(fn):
            continue
        ret = inspect.signature(fn).return_annotation
        assert ret is not inspect.Signature.empty, f"api.{name} has no return annotation"
        if str(ret).startswith(bare) or "Outcome[dict" in str(ret):
            found.append(f"api.{name} -> {ret}")
    assert not found, found


def test_results_to_dict_keep_the_json_documents():
    c = results.CheckResult.from_dict({"runs": "native", "ok": True, "given": {"cuda": "12.1"},
                                       "satisfied_by": {"cuda": "12.1"}, "warnings": []})
    assert list(c.to_dict()) == ["runs", "ok", "given", "satisfied_by", "warnings"]
    d = {"ok": True, "given": {"torch": "2.14", "driver": "580"}, "satisfied_by": {},
         "driver": [{"variant": "cu130"}], "warnings": []}
    assert results.CheckResult.from_dict(d).to_dict() == d
    r = results.TargetRow(name="a", target="cpu", description="", ok=False, error="no")
    assert r.to_dict() == {"name": "a", "target": "cpu", "description": "", "ok": False,
                           "error": "no"}
    lock = results.LockResult(name="a", target="a", tag="t", lock={}, warnings=[], sbom="s")
    assert "conda" not in lock.to_dict() and lock.to_dict()["sbom"] == "s"


def test_render_target_returns_a_typed_report(tmp_path):
    r = api.render_target("cpu", tmp_path / "o")
    assert isinstance(r, api.RenderReport) and r.target == "cpu" and "Dockerfile" in r.files
    assert r.to_dict()["stack"]["tag"] == r.stack["tag"] and Path(r.out).is_dir()


def test_one_layout_type_answers_every_layout_question():
    from envbuilder.core.layouts import Layout, parse_layouts
    from envbuilder.errors import InputError

    assert str(Layout.parse("2x8")) == "2x8" and Layout.parse("2x8").counts == (8, 8)
    assert str(Layout.parse("8,8,8,8")) == "4x8" and Layout.parse("8,8,8,8").is_even
    lay = Layout.parse("7,5")
    assert str(lay) == "7,5" and lay.world == 12 and lay.nnodes == 2 and not lay.is_even
    assert parse_layouts(["8,8,8,8"]) == ((4, 8),)  # an even layout, not an uneven split
    for bad in ("a;b", "0,4", "2x0"):
        try:
            Layout.parse(bad)
        except InputError as e:
            assert "--layout" in str(e)
        else:
            raise AssertionError(bad)
