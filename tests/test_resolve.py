"""The resolver: targets to consistent stacks, refusals with reasons and alternatives, and a
property test that every stack it returns satisfies every rule and honours every pin."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.version import Version

from core_helpers import builtin
from envbuilder.api import Pins, request, resolve_target
from envbuilder.errors import IncompatibleError, InputError
from envbuilder.core.resolve import axis_order, resolve
from envbuilder.core.rules import Context, all_rules
from envbuilder.core.target import parse_target


def _is_url(s: str) -> bool:
    return s.startswith(("https://", "http://"))


# -- examples from the issue ----------------------------------------------------------------

def test_cu118_is_the_newest_torch_with_cu118_wheels():
    m = builtin()
    newest = max(t.version for t in m.torch if "cu118" in t.variants)
    s = resolve_target("cu118", matrix=m)
    assert s.cuda == "11.8" and str(s.toolkit.version) == "11.8.0"
    assert s.torch.version == newest
    assert s.torch.line == "2.7"  # per the issue (torch 2.8 dropped cu118)
    assert s.variant == "cu118"
    assert s.torch_index == "https://download.pytorch.org/whl/cu118"
    assert s.flavour == "cuda-base"
    assert s.runtime_image == f"nvidia/cuda:11.8.0-base-{s.os.name}"
    assert s.deepspeed is None and s.horovod is None and s.builder is None


def test_cu121_torch21_py310():
    s = resolve_target("cu121-torch2.1-py310", matrix=builtin())
    assert str(s.torch.version) == "2.1.2"
    assert s.python == "3.10"
    assert str(s.nccl.version) == "2.18.1"
    assert s.cuda == "12.1"
    assert s.torch_variant.nccl_package == "nvidia-nccl-cu12"


def test_cpu_is_debian12():
    m = builtin()
    s = resolve_target("cpu", matrix=m)
    assert s.os.name == "debian12"
    assert s.toolkit is None and s.cuda is None and s.variant == "cpu"
    assert s.nccl is None and s.driver_min is None
    assert s.runtime_image == m.os["debian12"].image == s.builder_image
    assert s.python == "3.11"
    newest_cpu = max(t.version for t in m.torch if "cpu" in t.variants and "3.11" in t.python)
    assert s.torch.version == newest_cpu


def test_exact_torch_pin_and_os_pin():
    s = resolve_target("cu118-torch2.1.1-ubuntu20.04", matrix=builtin())
    assert str(s.torch.version) == "2.1.1" and s.os.name == "ubuntu20.04"


def test_options_pin_like_target_parts():
    m = builtin()
    a = resolve_target("cu121", matrix=m, pins=Pins(torch="2.1", python="3.10"))
    b = resolve_target("cu121-torch2.1-py310", matrix=m)
    assert a.tag == b.tag
    with pytest.raises(InputError):
        resolve_target("cu121-torch2.1", matrix=m, pins=Pins(torch="2.2"))


def test_with_adds_a_component_and_without_removes_it():
    m = builtin()
    s = resolve_target("cu121", matrix=m, pins=Pins.of(with_=("deepspeed",), ds_ops="none"))
    assert s.deepspeed is not None and s.builder is None, "JIT ops (--ds-ops none) compile nothing"
    assert s.builder_image == s.runtime_image == f"nvidia/cuda:12.1.1-base-{s.os.name}"
    s = resolve_target("cu121", matrix=m, pins=Pins(with_=("deepspeed",)))
    assert s.ops["deepspeed"] == ("fused_adam", "cpu_adam"), "a standard ZeRO config's ops, pre-built"
    assert s.builder is not None and s.builder.image_kind == "devel"
    s = resolve_target("cu121", matrix=m, pins=Pins.of(ds_ops="fused_adam"))
    assert s.deepspeed is not None and s.ops["deepspeed"] == ("fused_adam",), "--ds-ops implies DeepSpeed"
    assert s.builder is not None and s.builder.image_kind == "devel" and str(s.builder.nvcc) == "12.1.1"
    assert s.builder_image == f"nvidia/cuda:12.1.1-devel-{s.os.name}"
    assert s.runtime_image.endswith("-base-" + s.os.name)
    with pytest.raises(InputError):
        resolve_target("cu121-ds0.16", matrix=m, pins=Pins(without=("deepspeed",)))
    with pytest.raises(InputError):
        resolve_target("cu121", matrix=m, pins=Pins(with_=("deepspeed",), without=("deepspeed",)))


# -- the driver -------------------------------------------------------------------------------

def test_driver_excludes_stacks():
    m = builtin()
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cu121", matrix=m, pins=Pins(driver="470.82.01", flavour="os"))
    e = ei.value
    assert e.exit_code == 3
    assert "530.30.02" in str(e) and "470.82.01" in str(e)
    assert [v.rule for v in e.violations] == ["driver_cuda"]
    assert any("cu118" in a for a in e.alternatives)
    assert "cuda-compat" in str(e) and "os flavour" in str(e)
    # on an nvidia/cuda base it can run only through forward compatibility (cuda-compat): a warning
    s = resolve_target("cu121", matrix=m, pins=Pins(driver="470.82.01"))
    assert s.flavour == "cuda-base"
    assert [w.rule for w in s.warnings][0] == "driver_cuda" and "forward compatibility" in s.warnings[0].message
    # the frozen matrix records no NVIDIA_REQUIRE_CUDA for the 12.1.1 images: whether they start on
    # R470 is said to be unknown, never taken as agreement
    assert [w.rule for w in s.warnings] == ["driver_cuda", "image_driver_branch"]
    assert "no NVIDIA_REQUIRE_CUDA" in s.warnings[1].message and "R470" in s.warnings[1].message
    # the same driver runs CUDA 11.8 through minor-version compatibility: a warning, not a refusal
    # (and, in the frozen matrix, that whether the 11.8.0 images start on R470 is not recorded)
    s = resolve_target("cu118", matrix=m, pins=Pins(driver="470.82.01"))
    assert [w.rule for w in s.warnings] == ["driver_cuda", "image_driver_branch"]
    # the live matrix has the 11.8.0 images' NVIDIA_REQUIRE_CUDA: R470 is listed, the image starts
    s = resolve_target("cu118", pins=Pins(driver="470.82.01"))
    assert "image_driver_branch" not in [w.rule for w in s.warnings]
    assert any(e.rule == "image_driver_branch" and "lists R470" in e.message for e in s.evidence)
    # and a new enough driver leaves no warning
    s = resolve_target("cu121", matrix=m, pins=Pins(driver="535.104.05"))
    assert s.warnings == ()
    # a CPU target ignores the driver
    assert resolve_target("cpu", matrix=m, pins=Pins(driver="470.82.01")).toolkit is None


# -- refusals ---------------------------------------------------------------------------------

def test_refusal_carries_violations_and_alternatives():
    m = builtin()
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cu124-hvd0.28", matrix=m)
    e = ei.value
    assert e.exit_code == 3
    assert e.violations and {v.rule for v in e.violations} == {"known_incompatibility"}
    v = e.violations[0]
    assert "horovod-0.28-torch-2.1-cxx17" in v.message
    assert "C++17" in v.detail
    assert v.source and all(_is_url(s) for s in v.source)
    alts = " | ".join(e.alternatives)
    assert "cu118-hvd0.28" in alts
    assert "cu124 resolves" in alts
    # the suggestions really resolve
    assert resolve_target("cu118-hvd0.28", matrix=m).horovod.line == "0.28"
    d = e.to_dict()
    assert d["exit_code"] == 3 and d["error"] == "IncompatibleError"
    assert d["violations"][0]["rule"] == "known_incompatibility"
    json.dumps(d)


def test_cu118_hvd_uses_the_last_torch_horovod_builds_against():
    s = resolve_target("cu118-hvd0.28", matrix=builtin())
    assert s.torch.version < Version("2.1")
    assert str(s.horovod.version) == "0.28.1"  # 0.28.0 only warns (GCC 12): 0.28.1 is newer anyway
    assert s.flavour == "cuda-base" and s.builder is not None and s.builder.image_kind == "devel"
    assert s.builder_image == f"nvidia/cuda:11.8.0-devel-{s.os.name}" and s.builder.gcc == 11


@pytest.mark.parametrize("target", ["cu133", "cu124-hvd0.28", "cu121-torch2.1-nccl2.19"])
def test_every_suggested_alternative_resolves_as_described(target):
    # cu133: CUDA 13.3 has neither torch wheels nor images. Each suggestion names a target that
    # really resolves, to the torch and Python it says (a suggestion that fails is worse than none)
    m = builtin()
    with pytest.raises(IncompatibleError) as ei:
        resolve_target(target, matrix=m)
    assert ei.value.violations and ei.value.alternatives
    for alt in ei.value.alternatives:
        found = re.search(r": (\S+) resolves \(torch (\S+), Python (\S+),", alt)
        assert found, alt
        s = resolve_target(found.group(1), matrix=m)
        assert (str(s.torch.version), s.python) == (found.group(2), found.group(3)), alt


# -- aliases ----------------------------------------------------------------------------------

def test_aliases_from_targets_yaml():
    m = builtin()
    aliases = [t for t in m.targets if t.target != t.name]
    assert {a.name for a in aliases} >= {"cu121-ds", "cu118-hvd"}
    for a in aliases:
        s = resolve_target(a.name, matrix=m)
        assert s.target == a.name
        direct = resolve(parse_target(a.target, m), m)
        assert s.tag == direct.tag
    assert resolve_target("cu121-ds", matrix=m).deepspeed.line == "0.16"
    assert resolve_target("cu118-hvd", matrix=m).horovod.line == "0.28"


def test_every_builtin_target_resolves():
    m = builtin()
    for t in m.targets:
        s = resolve_target(t.name, matrix=m)
        assert s.tag


# -- resolve --json ---------------------------------------------------------------------------

def test_to_dict_keys_choices_and_sources():
    m = builtin()
    d = resolve_target("cu121-ds", matrix=m).to_dict()
    json.dumps(d)
    for k in ("cuda", "torch", "python", "nccl", "deepspeed", "horovod", "os", "base_image",
              "driver_min", "cuda_toolkit", "torch_variant", "builder_image", "tag", "choices",
              "warnings", "matrix", "envbuilder_version"):
        assert k in d, k
    assert d["cuda"] == "12.1" and d["deepspeed"].startswith("0.16.") and d["horovod"] is None
    assert isinstance(d["driver_min"], dict) and d["driver_min"]["version"] == "530.30.02"
    assert d["driver_min"]["minor_compat"] == "525.60.13" and _is_url(d["driver_min"]["source"])
    assert d["matrix"]["digest"] == m.digest
    assert set(d["choices"]) == set(axis_order(m))
    for axis, c in d["choices"].items():
        assert c["reason"], axis
        assert isinstance(c["source"], list)
        if c["value"] is not None:
            assert c["source"] and all(_is_url(s) for s in c["source"]), axis
    assert d["choices"]["torch"]["value"] == d["torch"]
    assert d["choices"]["deepspeed"]["value"] == d["deepspeed"]
    assert "pinned" in d["choices"]["deepspeed"]["reason"]
    assert "not requested" in d["choices"]["horovod"]["reason"]


def test_choices_record_what_was_skipped_and_why():
    d = resolve_target("cu118", matrix=builtin()).to_dict()
    skipped = d["choices"]["torch"]["skipped"]
    assert skipped, "newer torch releases without cu118 wheels were passed over"
    assert skipped[0]["value"] == str(builtin().torch[0].version)
    assert "torch_cuda_variant" in skipped[0]["rules"]


# -- property: whatever resolves is consistent and honours the pins --------------------------

@st.composite
def _targets(draw):
    """(cuda minor, torch line | None, python | None, (component, line) | None, os | None).

    Half of the draws start from a torch release and take a CUDA variant and a Python it has
    wheels for, so that a good share of targets resolves; the rest combine freely."""
    m = builtin()
    lines = sorted({t.line for t in m.torch}, key=Version)
    rel = draw(st.sampled_from(m.torch))
    minors = [v.cuda for v in rel.variants.values() if v.cuda in m.cuda_minors]
    cuda = draw(st.sampled_from(minors) if minors and draw(st.booleans())
                else st.sampled_from(m.cuda_minors))
    line = draw(st.none() | st.just(rel.line) | st.sampled_from(lines))
    py = draw(st.none() | st.sampled_from(rel.python) | st.sampled_from(m.pythons))
    ds = sorted({r.line for r in m.component("deepspeed").releases}, key=Version)
    hvd = sorted({r.line for r in m.component("horovod").releases}, key=Version)
    comp = draw(st.none() | st.tuples(st.just("deepspeed"), st.sampled_from(ds))
                | st.tuples(st.just("horovod"), st.sampled_from(hvd)))
    os_name = draw(st.none() | st.none() | st.sampled_from(sorted(m.os)))
    return cuda, line, py, comp, os_name


def _target_string(cuda, line, py, comp, os_name) -> str:
    parts = ["cu" + cuda.replace(".", "")]
    if line:
        parts.append(f"torch{line}")
    if py:
        parts.append("py" + py.replace(".", ""))
    if comp:
        parts.append(("ds" if comp[0] == "deepspeed" else "hvd") + comp[1])
    if os_name:
        parts.append(os_name)
    return "-".join(parts)


def _resolve_or_refusal(req, m):
    try:
        return resolve(req, m).to_dict()
    except IncompatibleError as e:
        return ("refused", str(e), [str(v) for v in e.violations])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_targets())
def test_property_forward_checking_changes_no_answer(t):
    """The search prunes a value as soon as a later component has no release left that the
    rules allow (forward checking): the same stack, or the same refusal, as the plain
    search that tries every value down to the component."""
    from unittest import mock

    from envbuilder.core import resolve as resolve_mod

    m = builtin()
    req = request(_target_string(*t), m)
    pruned = _resolve_or_refusal(req, m)
    with mock.patch.object(resolve_mod._Search, "_ahead_ok", lambda self, axis, a: True):
        plain = _resolve_or_refusal(req, m)
    assert pruned == plain


def test_a_horovod_target_does_not_walk_every_stack_of_a_torch_horovod_rejects(monkeypatch):
    """cu118-hvd: Horovod 0.28 builds only against torch < 2.1, the newest torch lines come
    first, and Horovod is the last axis. The search used to try every (os, flavour, python,
    nccl) under each newer torch (3,121 values) before it reached torch 2.0."""
    from envbuilder.core import resolve as resolve_mod

    m = builtin()
    seen: list[int] = []
    first = resolve_mod._Search.first

    def counting(self):
        got = first(self)
        seen.append(self.nodes)
        return got
    monkeypatch.setattr(resolve_mod._Search, "first", counting)
    s = resolve_target("cu118-hvd", matrix=m)
    assert s.horovod is not None and s.torch.version < Version("2.1")
    assert seen and max(seen) < 200, seen


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_targets())
def test_property_resolution_is_consistent(t):
    m = builtin()
    cuda, line, py, comp, os_name = t
    text = _target_string(*t)
    req = request(text, m)
    try:
        s = resolve(req, m)
    except IncompatibleError as e:
        assert e.exit_code == 3
        assert e.violations, f"{text}: a refusal without a reason"
        assert all(v.severity == "error" for v in e.violations)
        return
    a = s.assignment
    assert set(a) == set(axis_order(m))
    ctx = Context(m, driver=req.driver, nccl_pin=req.nccl.text if req.nccl else None)
    for r in all_rules(m):
        errors = [v for v in r.check(a, ctx) if v.severity == "error"]
        assert not errors, f"{text} -> {s.tag}: {[str(v) for v in errors]}"
    # every pin honoured
    assert s.cuda == cuda
    assert line is None or s.torch.line == line
    assert py is None or s.python == py
    assert os_name is None or s.os.name == os_name
    if comp is None:
        assert s.deepspeed is None and s.horovod is None
    else:
        got = s.deepspeed if comp[0] == "deepspeed" else s.horovod
        other = s.horovod if comp[0] == "deepspeed" else s.deepspeed
        assert got is not None and got.line == comp[1] and other is None
    # the stack is renderable data
    d = s.to_dict()
    json.dumps(d)
    assert d["base_image"] == s.runtime_image


@settings(max_examples=25, deadline=None)
@given(_targets())
def test_property_resolution_is_deterministic(t):
    m = builtin()
    text = _target_string(*t)
    try:
        first = resolve(request(text, m), m).tag
    except IncompatibleError as e:
        with pytest.raises(IncompatibleError) as again:
            resolve(request(text, m), m)
        assert str(again.value) == str(e)
        return
    assert resolve(request(text, m), m).tag == first


# -- base flavours and builders (issues 11 and 12) --------------------------------------------

def test_debian_targets_resolve_to_the_os_flavour():
    d = resolve_target("cu124-torch2.6-debian12", matrix=builtin()).to_dict()
    assert d["flavour"] == "os" and d["base_image"] == "debian:12" and d["builder_image"] == "debian:12"
    assert d["cuda"] == "12.4" and d["nccl"] == "2.21.5" and d["nccl_package"] == "nvidia-nccl-cu12"
    assert d["builder"] is None


def test_cuda_base_is_the_default_flavour():
    d = resolve_target("cu121", matrix=builtin()).to_dict()
    assert d["flavour"] == "cuda-base" and "-base-" in d["base_image"]
    assert "pinned" not in d["choices"]["flavour"]["reason"]


@pytest.mark.parametrize("flavour,image", [
    ("cuda-runtime", "nvidia/cuda:12.1.1-runtime-ubuntu22.04"),
    ("cudnn-runtime", "nvidia/cuda:12.1.1-cudnn8-runtime-ubuntu22.04"),
    ("os", "ubuntu:22.04"),
])
def test_flavour_pin(flavour, image):
    s = resolve_target("cu121-ubuntu22.04", matrix=builtin(), pins=Pins(flavour=flavour))
    assert s.flavour == flavour and s.runtime_image == image
    assert "pinned" in s.choices["flavour"].reason


def test_unknown_flavour_is_bad_input():
    with pytest.raises(InputError) as ei:
        resolve_target("cu121", matrix=builtin(), pins=Pins(flavour="cuda-bse"))
    assert ei.value.exit_code == 2 and "cuda-base" in str(ei.value)


def test_cpu_targets_have_no_cuda_flavour():
    assert resolve_target("cpu", matrix=builtin()).flavour == "os"
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cpu", matrix=builtin(), pins=Pins(flavour="cuda-base"))
    assert {v.rule for v in ei.value.violations} == {"base_image"}


def test_horovod_on_debian12_compiles_with_the_archive_nvcc():
    s = resolve_target("cu117-torch2.0-hvd0.28-debian12", matrix=builtin())
    b = s.builder
    assert s.flavour == "os" and b is not None and b.image_kind == "os"
    assert str(b.nvcc) == "11.8.89" and b.toolkit.install == "apt" and b.cuda_home == "/usr"
    assert b.gcc == 11 and b.gcc_packages == ("gcc-11", "g++-11"), "nvcc 11.8 refuses Debian 12's GCC 12"
    assert [w.rule for w in s.warnings] == ["builder"], "nvcc 11.8 for torch's CUDA 11.7: a warning"


def test_a_compiling_stack_without_a_same_major_nvcc_is_refused():
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cu124-torch2.6-hvd0.28-debian12", matrix=builtin())
    assert "builder" in {v.rule for v in ei.value.violations} or \
        "known_incompatibility" in {v.rule for v in ei.value.violations}
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cu124-torch2.6-debian12", matrix=builtin(), pins=Pins.of(ds_ops="fused_adam"))
    v = [v for v in ei.value.violations if v.rule == "builder"]
    assert v and "CUDA 12.x" in v[0].message and "debian12" in v[0].message


def test_deepspeed_ops_on_debian13_and_cuda13_wheels():
    s = resolve_target("cu124-torch2.6-debian13", matrix=builtin(), pins=Pins.of(ds_ops="fused_adam,cpu_adam"))
    assert s.ops["deepspeed"] == ("fused_adam", "cpu_adam") and str(s.builder.nvcc) == "12.4.131"
    assert s.builder.gcc == 13, "nvcc 12.4 accepts GCC <= 13; Debian 13's default is 14"
    assert not s.warnings
    s = resolve_target("cu130-torch2.11-debian12", matrix=builtin(), pins=Pins.of(ds_ops="fused_adam"))
    assert s.builder.toolkit.install == "pip" and str(s.builder.nvcc).startswith("13.0")
    with pytest.raises(InputError) as ei:
        resolve_target("cu121", matrix=builtin(), pins=Pins.of(ds_ops="fused_adm"))
    assert "fused_adam" in str(ei.value)
