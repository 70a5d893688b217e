"""The classes of facts issue 44 filled, through the commands users run (live matrix): aarch64
builds per variant and index with their own arch lists, NVIDIA_REQUIRE_CUDA driver branches,
import-time needs of DeepSpeed and Horovod, Horovod's compiler limit, the next Rocky Linux family
and UBI. Each refusal names the fact and its source; an acceptance at an edge carries evidence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from envbuilder.api import check_combination, resolve_target
from envbuilder.core.matrix import load_matrix
from envbuilder.core.resources import matrices_dir
from envbuilder.core.target import Pins
from envbuilder.errors import IncompatibleError


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=600)


def _refused(*args: str) -> dict:
    p = cli(*args, "--json")
    assert p.returncode == 3, p.stdout + p.stderr
    return json.loads(p.stdout)


def test_arm64_resolve_reports_the_aarch64_builds_arch_list_and_index():
    p = cli("resolve", "cu128-torch2.9", "--platform", "linux/arm64", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    amd = json.loads(cli("resolve", "cu128-torch2.9", "--json").stdout)
    assert d["torch_arch"] == ["sm_80", "sm_90", "sm_100", "sm_120"]
    assert amd["torch_arch"] == ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    # PyPI's aarch64 torch 2.9 is a CPU build: the arm64 stack installs from PyTorch's index
    assert d["torch_index"] == "https://download.pytorch.org/whl/cu128"
    assert amd["torch_index"] == "https://pypi.org/simple"
    (e,) = [e for e in d["evidence"] if e["rule"] == "torch_platform"]
    assert "PyTorch's index only" in e["message"] and "sm_80, sm_90, sm_100, sm_120" in e["message"]
    assert "https://github.com/pytorch/pytorch/pull/163764" in e["source"]
    assert "evidence" not in amd  # nothing at an edge on amd64


def test_a_variant_without_aarch64_wheels_is_refused_for_arm64_with_the_source():
    d = _refused("resolve", "cu129-torch2.13", "--platform", "linux/arm64")
    (v,) = [v for v in d["violations"] if v["rule"] == "torch_platform"]
    assert "no cu129 wheels for linux/arm64" in v["message"] and v["source"]
    # cu118 never had them
    d = _refused("resolve", "cu118-torch2.7", "--platform", "linux/arm64")
    assert any(v["rule"] == "torch_platform" for v in d["violations"])


def test_aarch64_wheels_on_pytorchs_index_resolve_to_that_index():
    for target, index, arch in (("cu126-torch2.12", "cu126", ["sm_80", "sm_90"]),
                                ("cu128-torch2.7", "cu128", ["sm_90", "sm_100", "sm_120"]),
                                ("cu130-torch2.13", None, ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120"])):
        st = resolve_target(target, pins=Pins(platform="linux/arm64"))
        want = "https://pypi.org/simple" if index is None else f"https://download.pytorch.org/whl/{index}"
        assert st.torch_index == want, target
        assert list(st.torch_variant.arch_for("linux/arm64")) == arch, target


def test_an_index_only_variant_resolves_where_it_exists():
    st = resolve_target("cu129-torch2.13")
    assert st.variant == "cu129" and st.torch_index == "https://download.pytorch.org/whl/cu129"
    assert str(resolve_target("cu129-torch2.12").torch.version) == "2.12.1"  # 2.12.0 had no cu129 build


def test_a_cuda_13_0_image_on_an_unlisted_driver_branch_is_refused_with_the_source():
    d = _refused("resolve", "cu130", "--driver", "560.35.03")
    (v,) = [v for v in d["violations"] if v["rule"] == "image_driver_branch"]
    assert "NVIDIA_REQUIRE_CUDA=cuda>=13.0" in v["message"] and "R560" in v["message"]
    assert any("dist/13.0.0/ubuntu2404/base/Dockerfile" in s for s in v["source"])
    c = _refused("check", "--cuda", "13.0", "--driver", "560.35.03", "--flavour", "cuda-base")
    assert "image_driver_branch" in {v["rule"] for v in c["violations"]}


def test_a_listed_branch_is_evidence_where_it_is_supported(tmp_path: Path):
    """A copy of the matrix whose 13.0 images list R580 (supported to 2028): a 580 driver older
    than 13.0.3's own floor starts them because of that line, which the evidence names."""
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(matrices_dir(), folder, ignore=shutil.ignore_patterns("*.md"))
    data = yaml.safe_load((folder / "base_images.yaml").read_text())
    for b in data["images"]:
        if b["cuda"] == "13.0.3":
            b["require_cuda"] = {"cuda": "13.1", "branches": [580], "source": "https://example.org/Dockerfile"}
    (folder / "base_images.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    r = check_combination(matrix_dir=folder, cuda="13.0", driver="580.65.06", flavour="cuda-base").to_dict()
    assert r["ok"] is True
    (e,) = [e for e in r["evidence"] if e["rule"] == "image_driver_branch"]
    assert "lists R580" in e["message"] and e["source"] == ["https://example.org/Dockerfile"]


def test_deepspeed_releases_that_fail_to_import_with_a_torch_are_refused_with_the_source():
    d = _refused("resolve", "cu121-torch2.3-ds0.18.9")
    rules = {v["rule"] for v in d["violations"]}
    assert rules == {"deepspeed_imports"}
    srcs = {s for v in d["violations"] for s in v["source"]}
    assert "https://github.com/deepspeedai/DeepSpeed/blob/v0.18.9/deepspeed/compile/custom_ops/all_to_all.py" in srcs
    d = _refused("check", "--torch", "2.0", "--deepspeed", "0.8.1")
    assert any("torch._six" in v["message"] for v in d["violations"])
    # unpinned, the resolver picks a DeepSpeed that imports with the torch it has
    from packaging.version import Version

    st = resolve_target("cu121-torch2.3-ds")
    assert st.component("deepspeed").version < Version("0.18.7")  # 0.18.7's torch.amp.custom_fwd needs 2.4
    # only 0.17.5 of the ZenFlow releases fails with torch 2.1-2.3: 0.17.6 defines a fallback (#7544)
    assert check_combination(torch="2.3", deepspeed="0.17.6").to_dict()["ok"] is True
    d = _refused("check", "--torch", "2.3", "--deepspeed", "0.17.5")
    assert any("https://github.com/deepspeedai/DeepSpeed/pull/7544" in v["source"] for v in d["violations"])


def test_an_acceptance_at_the_import_edge_names_its_fact():
    r = check_combination(torch="2.4", deepspeed="0.18.9").to_dict()
    assert r["ok"] is True
    ev = [e for e in r["evidence"] if e["rule"] == "deepspeed_imports"]
    assert ev and all("at the edge" in e["message"] and e["source"] for e in ev)
    assert "evidence" not in check_combination(torch="2.6", deepspeed="0.18.9").to_dict()


def test_horovod_limits_python_and_the_compiler():
    d = _refused("check", "--python", "3.12", "--horovod", "0.28.1")
    (v,) = [v for v in d["violations"] if v["rule"] == "horovod_imports"]
    assert "distutils" in v["message"] and "https://peps.python.org/pep-0632/" in v["source"]
    st = resolve_target("cpu-torch2.0-hvd0.28-ubuntu24.04")
    assert st.builder is not None and st.builder.gcc == 12  # not the OS's GCC 13
    assert any(e.rule == "builder" and "GCC 12" in e.message for e in st.evidence)


def test_horovod_is_refused_on_an_os_without_an_old_enough_gcc(tmp_path: Path):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(matrices_dir(), folder, ignore=shutil.ignore_patterns("*.md"))
    data = yaml.safe_load((folder / "toolchains.yaml").read_text())
    hc = next(h for h in data["host_compilers"] if h["os"] == "ubuntu24.04")
    hc["packages"] = {k: v for k, v in hc["packages"].items() if int(k) >= 13}
    (folder / "toolchains.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        resolve_target("cpu-torch2.0-hvd0.28-ubuntu24.04", matrix=load_matrix(folder))
    except IncompatibleError as e:
        v = next(v for v in e.violations if v.rule == "builder")
        assert "builds only with GCC <13" in v.message and "https://github.com/horovod/horovod/pull/3957" in v.source
    else:
        raise AssertionError("Horovod 0.28.1 accepted with GCC 13 and 14 only")


def test_the_next_rocky_linux_family_and_ubi_resolve_and_render(tmp_path: Path):
    st = resolve_target("cu132-rockylinux10")
    assert st.runtime_image == "nvidia/cuda:13.2.1-base-rockylinux10" and st.python == "3.12"
    p = cli("render", "cu130-ubi9", "-o", str(tmp_path / "o"))
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "o" / "Dockerfile").read_text()
    assert "nvidia/cuda:13.0.3-base-ubi9" in text and "dnf install" in text
