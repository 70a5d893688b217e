"""Probes of issue 13, one per class of error found in the matrix and the rules, run against
the matrix as shipped (and through the CLI where the class is about exit codes)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from packaging.version import Version

from envbuilder.api import Pins, check_combination, resolve_target
from envbuilder.core.matrix import load_matrix
from envbuilder.errors import IncompatibleError, InputError


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()", *args],
                          capture_output=True, text=True)


M = load_matrix()


def release(version: str):
    return next(t for t in M.torch if str(t.version) == version)


# -- class 1: the newest torch lines list every CUDA variant PyTorch's index has ---------------

@pytest.mark.parametrize("version, variants", [
    ("2.10.0", {"cpu", "cu126", "cu128", "cu130"}),
    ("2.11.0", {"cpu", "cu126", "cu128", "cu130"}),
    # 2.12.1 and 2.13 also have cu129 builds, on PyTorch's index only (issue 44: index-only variants)
    ("2.12.1", {"cpu", "cu126", "cu129", "cu130", "cu132"}),
    ("2.13.0", {"cpu", "cu126", "cu129", "cu130", "cu132"}),
    ("2.14.1", {"cpu", "cu126", "cu130", "cu132"}),
])
def test_newest_lines_have_all_their_cuda_variants(version, variants):
    t = release(version)
    assert set(t.variants) == variants
    for name, v in t.variants.items():
        if name == "cpu":
            continue
        major = int(name[2:-1])
        assert v.nccl is not None, (version, name)
        assert v.nccl_package == f"nvidia-nccl-cu{major}", (version, name)


def test_cu126_and_cu128_resolve_to_the_newest_torch_with_those_wheels():
    assert str(resolve_target("cu126").torch.version) == "2.14.1"
    assert str(resolve_target("cu128").torch.version) == "2.11.0"
    st = resolve_target("cu126-torch2.12")
    assert str(st.nccl.version) == "2.29.3"  # the cu126 pin, not the cu13 wheels' 2.29.7


# -- class 2: NCCL per CUDA variant is sourced per variant, not copied from the PyPI pin ---------

@pytest.mark.parametrize("version, variant, nccl, other, other_nccl", [
    ("2.1.1", "cu118", "2.18.6", "cu121", "2.18.1"),   # static third_party/nccl vs nvidia-nccl-cu12 pin
    ("2.1.0", "cu118", "2.18.5", "cu121", "2.18.1"),
    ("2.10.0", "cu130", "2.28.9", "cu128", "2.27.5"),
    ("2.12.0", "cu126", "2.29.3", "cu130", "2.29.7"),
    ("2.9.1", "cu130", "2.27.7", "cu128", "2.27.5"),
])
def test_variant_nccl_differs_from_the_pypi_pin(version, variant, nccl, other, other_nccl):
    t = release(version)
    assert str(t.variants[variant].nccl) == nccl
    assert str(t.variants[other].nccl) == other_nccl


def test_variant_facts_carry_their_own_source():
    import yaml
    from envbuilder.core.resources import matrices_dir

    data = yaml.safe_load((matrices_dir() / "torch.yaml").read_text())
    e = next(r for r in data["releases"] if "2.1.1" in r["versions"])
    assert e["variants"]["cu118"]["source"].endswith("/pull/111677")
    assert "2.1.0" not in e["versions"]


def test_check_uses_the_variant_nccl():
    check_combination(cuda="11.8", torch="2.1.2", nccl="2.18.6")
    with pytest.raises(IncompatibleError):
        check_combination(cuda="11.8", torch="2.1.2", nccl="2.18.1")


# -- class 3: DeepSpeed floors and breakages from their tags ---------------------------------

def test_deepspeed_0_19_1_torch_floor_is_read_from_its_tag():
    ds = next(c for c in M.component("deepspeed").releases if str(c.version) == "0.19.1")
    assert str(ds.requires["torch"]) == ">=2.0.0"
    assert any("v0.19.1/requirements/requirements.txt" in s for s in ds.source)
    with pytest.raises(IncompatibleError):
        check_combination(torch="1.13", deepspeed="0.19.1")


def test_deepspeed_import_breakage_refuses():
    with pytest.raises(IncompatibleError) as ei:
        check_combination(torch="2.0", deepspeed="0.8.1")
    # the import-time fact of deepspeed.yaml (issue 44) leads; the breakage entry still refuses it too
    assert "torch._six" in str(ei.value)
    assert "deepspeed-lt-0.8.2-torch-2.0-torch-six" in " ".join(ei.value.details)


# -- class 4: logic -----------------------------------------------------------------------

def test_an_nccl_pin_implies_a_cuda_build_cli():
    p = cli("check", "--torch", "2.6", "--nccl", "2.18")
    assert p.returncode == 3 and "no CUDA build of torch 2.6.0 bundles NCCL 2.18" in p.stderr
    assert cli("check", "--torch", "2.6", "--nccl", "2.21").returncode == 0


@pytest.mark.parametrize("args, code, needle", [
    (["resolve", "cu118-hvd0.21"], 3, "horovod-lt-0.24-torch-1.11-thc"),   # range covers an unlisted version
    (["check", "--torch", "2.1", "--deepspeed", "0.7.3"], 3, "deepspeed-lt-0.8.2-torch-2.0-torch-six"),
    (["check", "--horovod", "0.29"], 2, "Horovod 0.29 is not in the matrix"),   # no rule or release knows it
    (["check", "--torch", "2.16"], 2, "torch 2.16 is not in the matrix"),
])
def test_breakage_ranges_cover_unlisted_versions(args, code, needle):
    p = cli(*args)
    assert p.returncode == code, p.stderr
    assert needle in p.stderr


def test_unlisted_version_outside_every_range_is_still_input_error():
    with pytest.raises(InputError):
        check_combination(deepspeed="0.7.3")  # no torch pinned: torch 1.13 avoids the breakage


# -- class 5: OS Pythons up to today ----------------------------------------------------------

def test_ubuntu_24_04_has_python_3_14_from_deadsnakes():
    o = M.os["ubuntu24.04"]
    assert o.python["3.14"].repo == "ppa:deadsnakes/ppa"
    st = resolve_target("cu130-py314-ubuntu24.04")
    assert st.python == "3.14" and Version(str(st.torch.version)) >= Version("2.9")


def test_deepspeed_0_15_3_import_breakage_with_torch_before_2_3():
    with pytest.raises(IncompatibleError) as ei:
        check_combination(torch="2.2", deepspeed="0.15.3")
    assert "deepspeed-0.15.3-torch-lt-2.3-is-compiling" in str(ei.value)
    check_combination(torch="2.3", deepspeed="0.15.3")
    check_combination(torch="2.2", deepspeed="0.15.4")


# == issue 21 ================================================================================
# -- class 5: the matrix as of 2026-12-01 --------------------------------------------------

def test_torch_2_15_keeps_its_cuda_13_0_build():
    t = release("2.15.0")
    assert set(t.variants) == {"cpu", "cu130", "cu132"}
    import yaml
    from envbuilder.core.resources import matrices_dir

    data = yaml.safe_load((matrices_dir() / "torch.yaml").read_text())
    e = next(r for r in data["releases"] if "2.15.0" in r["versions"])
    assert "https://github.com/pytorch/pytorch/issues/190385" in e["variants"]["cu130"]["source"]
    st = resolve_target("cu130")
    assert str(st.torch.version) == "2.15.0" and st.variant == "cu130"
    assert str(st.nccl.version) == "2.30.7"


@pytest.mark.parametrize("version, variant, toolkit", [
    ("2.12.0", "cu130", "13.0.2"), ("2.13.0", "cu130", "13.0.3"),
    ("2.14.1", "cu130", "13.0.3"), ("2.15.0", "cu132", "13.2.2"),
])
def test_pypi_wheels_record_their_cuda_toolkit_pin(version, variant, toolkit):
    assert str(release(version).variants[variant].cuda_toolkit) == toolkit


def test_nccl_2_31_and_2_32_are_listed():
    have = {str(n.version) for n in M.nccl}
    assert {"2.31.2", "2.32.3"} <= have


def test_deepspeed_0_14_0_cannot_import_on_torch_2_4_cli():
    p = cli("check", "--torch", "2.4", "--deepspeed", "0.14.0")
    assert p.returncode == 3, p.stderr
    assert "deepspeed-lt-0.14.1-torch-2.4-elastic-log" in p.stderr
    assert "https://github.com/deepspeedai/DeepSpeed/issues/5337" in p.stderr
    assert cli("check", "--torch", "2.4", "--deepspeed", "0.14.1").returncode == 0


# -- class 6: per-patch driver floors --------------------------------------------------------

def test_resolve_cu132_states_the_floor_of_the_wheels_toolkit_patch():
    """torch 2.15's wheel pins cuda-toolkit==13.2.2, whose driver is newer than 13.2.1's (the
    newest CUDA 13.2 base image): the stack's floor is 13.2.2's."""
    st = resolve_target("cu132")
    assert str(st.toolkit.version) == "13.2.1" and st.toolkit.driver_min == "595.58.03"
    assert st.driver_min["toolkit"] == "13.2.2" and st.driver_min["version"] == "595.71.05"
    p = cli("check", "--driver", "595.58.03", "--torch", "2.15")
    assert p.returncode == 0, p.stderr  # 13.2.1's driver runs it by minor-version compatibility only
    assert "595.71.05" in p.stdout and "minor-version compatibility" in p.stdout
    from envbuilder.core.resolve import resolve_target as core_resolve

    with pytest.raises(IncompatibleError):  # the os flavour has no cuda-compat: 580 < 13.x floor
        core_resolve("cu132", M, Pins(driver="575.57.08", flavour="os"))


def test_driver_floor_uses_the_wheel_patch_only_when_newer():
    from dataclasses import replace

    from envbuilder.core.resolve import resolve_target as core_resolve

    st = core_resolve("cu132", M)
    pin = st.torch_variant.cuda_toolkit
    m = replace(M, toolkits=tuple(t for t in M.toolkits if t.version != pin))
    st2 = core_resolve("cu132", m)  # the matrix does not know the pinned patch: the base's floor
    assert st2.driver_min["version"] == st2.toolkit.driver_min
    assert st2.driver_min["wheel_toolkit"] == str(pin) and "does not list" in st2.driver_min["note"]


# -- class 7: driver first ---------------------------------------------------------------------

def test_driver_575_runs_no_torch_2_15_cli():
    p = cli("check", "--driver", "575.57.08", "--torch", "2.15")
    assert p.returncode == 3, p.stderr
    assert "forward compatibility" in p.stderr


def test_driver_575_runs_torch_2_14_through_cuda_12_cli():
    p = cli("check", "--driver", "575.57.08", "--torch", "2.14")
    assert p.returncode == 0, p.stderr
    assert "cu126" in p.stdout and "runs natively" in p.stdout
    r = check_combination(driver="575.57.08", torch="2.14").to_dict()
    modes = {d["variant"]: d["mode"] for d in r["driver"]}
    assert modes["cu126"] == "native"
    assert modes["cu130"] == "forward-compat"  # 13.x needs >= 580 even with minor-version compat
    assert r["satisfied_by"]["cuda"] == "cu126"


def test_driver_within_minor_compat_is_named():
    r = check_combination(driver="580.95.05", torch="2.14").to_dict()
    modes = {d["variant"]: d["mode"] for d in r["driver"]}
    assert modes["cu130"] == "native" and modes["cu132"] == "minor-compat"
    # 13.0 GA's driver is not enough natively: torch 2.14's wheel pins cuda-toolkit 13.0.3
    r = check_combination(driver="580.65.06", torch="2.14").to_dict()
    fit = next(d for d in r["driver"] if d["variant"] == "cu130")
    assert fit["mode"] == "minor-compat" and fit["toolkit"] == "13.0.3"


def test_any_target_with_a_driver_picks_the_newest_native_stack():
    st = resolve_target("any", pins=Pins(driver="575.57.08"))
    assert st.variant == "cu126" and str(st.torch.version) == "2.14.1"
    assert Version(st.driver_min["version"]) <= Version("575.57.08")


def test_cuda_suggestion_runs_on_the_driver_the_pin_implies():
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cu122")
    alts = ei.value.alternatives
    assert alts and "cu121" in alts[0] and "cu13" not in alts[0]


def test_cu12_gets_a_useful_message_cli():
    p = cli("resolve", "cu12")
    assert p.returncode == 2
    assert "CUDA 1.2" not in p.stderr and "cu110" not in p.stderr
    assert "without a minor version" in p.stderr and "cu126" in p.stderr


# -- class 8: dates ----------------------------------------------------------------------------

def test_every_release_carries_its_upload_date():
    assert all(t.released for t in M.torch)
    assert all(c.released for c in M.component("deepspeed").releases + M.component("horovod").releases)
    assert all(n.released for n in M.nccl if any("." not in c for c in n.cuda))  # PyPI wheels


def test_exclude_newer_changes_the_resolved_stack():
    new = resolve_target("cu126", pins=Pins(with_=("deepspeed",)))
    old = resolve_target("cu126", pins=Pins(with_=("deepspeed",)), exclude_newer="2025-06-01")
    assert str(new.deepspeed.version) == "0.19.8"
    assert old.deepspeed.version < Version("0.17") and old.torch.version < Version("2.8")
    assert old.torch.released <= "2025-06-01" and old.deepspeed.released <= "2025-06-01"


def test_exclude_newer_cli_and_bad_date():
    p = cli("resolve", "cu126", "--with", "deepspeed", "--exclude-newer", "2025-06-01", "--json")
    assert p.returncode == 0, p.stderr
    assert '"deepspeed": "0.19.8"' not in p.stdout
    assert cli("resolve", "cu126", "--exclude-newer", "2025-13-01").returncode == 2


# -- class 9: DeepSpeed's nvcc of torch's exact CUDA minor (CUDA 13) ---------------------------

def test_deepspeed_ops_get_nvcc_of_torch_cuda_minor():
    st = resolve_target("cu132-debian12", pins=Pins.of(ds_ops="fused_adam"))
    assert str(st.builder.nvcc).startswith("13.2")
    st = resolve_target("cu130-debian12", pins=Pins.of(ds_ops="fused_adam"))
    assert str(st.builder.nvcc).startswith("13.0")


def test_deepspeed_refuses_a_minor_mismatch_on_cuda_13():
    from dataclasses import replace

    from envbuilder.core.resolve import resolve_target as core_resolve

    tc = M.toolchains
    m = replace(M, toolchains=replace(tc, builder_toolkits=tuple(
        k for k in tc.builder_toolkits if str(k.cuda) != "13.2.86")))
    with pytest.raises(IncompatibleError) as ei:
        core_resolve("cu132-debian12", m, Pins.of(ds_ops="fused_adam"))
    assert "exact CUDA 13.2" in str(ei.value) + " ".join(ei.value.details)


# -- class 10: platforms -----------------------------------------------------------------------

def test_arm64_has_the_recorded_cuda_builds_only():
    st = resolve_target("cu132", pins=Pins(platform="linux/arm64"))
    assert st.request.platform == "linux/arm64" and st.variant == "cu132"
    # cu126 aarch64 builds are on PyTorch's index from 2.9 (the 2.9 release blog) to 2.14 (RELEASE.md's
    # aarch64 table for 2.12-2.14, issue 44): the newest is chosen, from that index
    st = resolve_target("cu126", pins=Pins(platform="linux/arm64"))
    assert str(st.torch.version) == "2.14.1" and st.torch_index.endswith("/whl/cu126")
    p = cli("resolve", "cu118", "--platform", "linux/arm64")
    assert p.returncode == 3, p.stderr
    assert cli("resolve", "cu132", "--platform", "sparc").returncode == 2


def test_cu132_on_ubuntu_26_04_resolves():
    st = resolve_target("cu132-ubuntu26.04")
    assert st.os.name == "ubuntu26.04" and st.python == "3.14" and str(st.torch.version) == "2.15.0"
    assert st.runtime_image == "ubuntu:26.04"  # no CUDA 13.2 nvidia/cuda tag for 26.04 is listed
    assert M.base_images_for(Version("13.3.1"), "ubuntu26.04") is not None


def test_exclude_newer_and_platform_as_project_keys(tmp_path):
    from envbuilder.core.project import load_project

    (tmp_path / "envbuilder.toml").write_text(
        '[[targets]]\nname = "old"\ntarget = "cu126"\nwith = ["deepspeed"]\n'
        'exclude_newer = "2025-06-01"\n\n'
        '[[targets]]\nname = "gh200"\ntarget = "cu132"\nplatform = "linux/arm64"\n')
    from envbuilder.api import make_spec, resolve_spec

    p = load_project(tmp_path / "envbuilder.toml")
    # the project's keys reach the resolver through the one cascade (core.spec.make_spec)
    st = resolve_spec(make_spec("old", project=p))
    assert str(st.deepspeed.version) != "0.19.8" and st.torch.version < Version("2.8")
    assert resolve_spec(make_spec("gh200", project=p)).platform == "linux/arm64"
    (tmp_path / "envbuilder.toml").write_text(
        '[[targets]]\nname = "x"\ntarget = "cu126"\nexclude_newer = "June 2025"\n')
    with pytest.raises(InputError):
        resolve_spec(make_spec("x", project=load_project(tmp_path / "envbuilder.toml")))
