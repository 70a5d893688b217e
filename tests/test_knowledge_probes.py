"""Probes of issue 13, one per class of error found in the matrix and the rules, run against
the matrix as shipped (and through the CLI where the class is about exit codes)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from packaging.version import Version

from envbuilder.api import check_combination, resolve_target
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
    ("2.12.1", {"cpu", "cu126", "cu130", "cu132"}),
    ("2.13.0", {"cpu", "cu126", "cu130", "cu132"}),
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
    ds = next(c for c in M.deepspeed.releases if str(c.version) == "0.19.1")
    assert str(ds.requires["torch"]) == ">=2.0.0"
    assert any("v0.19.1/requirements/requirements.txt" in s for s in ds.source)
    with pytest.raises(IncompatibleError):
        check_combination(torch="1.13", deepspeed="0.19.1")


def test_deepspeed_import_breakage_refuses():
    with pytest.raises(IncompatibleError) as ei:
        check_combination(torch="2.0", deepspeed="0.8.1")
    assert "deepspeed-lt-0.8.2-torch-2.0-torch-six" in str(ei.value)


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
