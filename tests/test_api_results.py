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


def test_results_are_typed_all_the_way_down():
    """No field of a result (or of a part of one) is JSON or Any: each nested value has its
    type (api.parts, or the type its layer has); a map keyed by the matrix's axes is text."""
    import dataclasses

    from envbuilder.api import parts

    loose = [f"{cls.__name__}.{f.name}: {f.type}"
             for mod in (results, parts) for cls in vars(mod).values()
             if dataclasses.is_dataclass(cls) and cls.__module__ == mod.__name__
             for f in dataclasses.fields(cls) if "JSON" in str(f.type) or "Any" in str(f.type)]
    assert not loose, loose


def test_results_to_dict_keep_the_json_documents():
    from envbuilder.api.parts import DriverRun
    from envbuilder.core.resolve import MODES, DriverFit
    from envbuilder.core.rules import Violation

    w = Violation("driver_cuda", "old", ("https://example.org/x",), "update", severity="warning")
    c = results.CheckResult(runs="native", given={"cuda": "12.1"}, satisfied_by={"cuda": "12.1"},
                            warnings=(w,))
    assert list(c.to_dict()) == ["runs", "ok", "given", "satisfied_by", "warnings"]
    assert c.to_dict()["warnings"] == [w.to_dict()] and "evidence" not in c.to_dict()
    fit = DriverFit("2.14.0", "cu130", "13.0.0", "580.65.06", "native", ("https://example.org/t",))
    d = results.CheckResult(given={"torch": "2.14", "driver": "580"}, satisfied_by={},
                            warnings=(), driver=(DriverRun(fit, MODES["native"]),)).to_dict()
    assert d == {"ok": True, "given": {"torch": "2.14", "driver": "580"}, "satisfied_by": {},
                 "driver": [fit.to_dict() | {"runs": MODES["native"]}], "warnings": []}
    r = results.TargetRow(name="a", target="cpu", description="", ok=False, error="no")
    assert r.to_dict() == {"name": "a", "target": "cpu", "description": "", "ok": False,
                           "error": "no"}


def test_parts_read_back_what_their_layers_write():
    """The plain data knowledge.diff, knowledge.inspect, the engine and the registry hand
    over is read into the typed parts and written back the same, key order included."""
    import json

    from envbuilder.api.parts import Provenance

    engine = {"source": "engine", "id": "sha256:1", "repo_digests": ["r@sha256:2"],
              "created": "2026-01-01T00:00:00Z"}
    registry = {"source": "registry", "reference": "127.0.0.1:5000/a:b", "manifest_digest": "sha256:3",
                "config_digest": "sha256:4", "created": None, "index_digest": "sha256:5"}
    for where in (engine, registry, {k: v for k, v in registry.items() if k != "index_digest"}):
        assert json.dumps(Provenance.from_dict(where).to_dict()) == json.dumps(where)
    prov = {"envbuilder_version": "0.1", "matrix_digest": "sha256:m", "matrix_digest_now": None,
            "matrix_current": None, "lock_digest": None, "base_digest": "sha256:b",
            "built": "2026-01-01T00:00:00Z",
            **{k: v for k, v in registry.items() if k != "created"}}
    inspected = {"image": "127.0.0.1:5000/a:b", "target": "cpu", "tag": "cpu-torch2.13",
                 "driver_minor_compat": None, "stack": {"torch": "2.13.0", "cuda_toolkit": None},
                 "provenance": prov, "labels": {"io.envbuilder.torch": "2.13.0"},
                 "attestations": [{"type": "https://slsa.dev/provenance/v1", "name": "provenance",
                                   "verified": False, "digest": "sha256:3"}]}
    assert json.dumps(results.Inspection.from_dict(inspected).to_dict()) == json.dumps(inspected)
    diffed = {"a": {"kind": "target", "name": "cu121"}, "b": {"kind": "lock", "name": "x"},
              "facts": [{"fact": "torch", "title": "torch", "a": "2.1.2", "b": "unknown"}],
              "packages": {"added": {"six": "1.17.0"}, "removed": {},
                           "changed": {"numpy": {"from": "1.26.4", "to": "2.1.3", "direction": "up"}},
                           "unchanged": 3},
              "rebuild": [{"stage": "layer-torch", "rebuilds": True, "from": "RUN pip", "steps": 2,
                           "why": "the instruction changed"}],
              "rebuild_from": "dockerfile", "same": False}
    assert json.dumps(results.DiffResult.from_dict(diffed).to_dict()) == json.dumps(diffed)


def test_render_target_returns_a_typed_report(tmp_path):
    r = api.render_target("cpu", tmp_path / "o")
    assert isinstance(r, api.RenderReport) and r.target == "cpu" and "Dockerfile" in r.files
    assert r.to_dict()["stack"] == r.stack.to_dict() and r.stack.tag == r.to_dict()["stack"]["tag"]
    assert r.to_dict()["jobs"] == {"image": r.jobs.image, "pinned": False} and Path(r.out).is_dir()


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
