"""`envbuilder matrix refresh`: the matrix's facts read again from the sources that publish them.

Recorded responses of each source (tests/fixtures/refresh/index.json names each URL and where it
was recorded) go through the real parsers and comparison; the live test (marked ``network``)
reads PyPI. PyTorch's index is not reachable from these machines: a refresh asked to read it
fails with the network error, naming the source.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envbuilder.core.matrix import load_matrix
from envbuilder.core.resources import matrices_dir
from envbuilder.knowledge import sources as src
from envbuilder.knowledge.refresh import Replay, refresh, write_overlay

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "refresh"
DS_VERSIONS = ("0.8.1", "0.17.4", "0.17.5", "0.18.9")  # their import chains are recorded


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=600)


def _replay_args() -> list[str]:
    out = ["--replay", str(FIXTURE)]
    for v in DS_VERSIONS:
        out += ["--component-version", f"deepspeed=={v}"]
    return out


def _recorded(url: str) -> bytes:
    body, _ = Replay(FIXTURE).get(url)
    return body


def _live_copy(tmp_path: Path) -> Path:
    import shutil

    dest = tmp_path / "m"
    shutil.copytree(matrices_dir(), dest, ignore=shutil.ignore_patterns("*.md"))
    return dest


# -- the parsers, on recorded responses --------------------------------------------------------

def test_pytorch_index_page_gives_each_wheels_platform():
    url = "https://download.pytorch.org/whl/cu128/torch/"
    files = src.wheel_files(_recorded(url), url, "text/html")
    mine = [w for w in files if w.local == "cu128"]
    assert {str(w.public) for w in mine} == {"2.7.0"}
    assert {w.platform for w in mine} == {"linux/amd64", "linux/arm64", None}  # None: win_amd64
    assert {w.python for w in mine if w.platform == "linux/arm64"} == {"3.9", "3.10", "3.11", "3.12", "3.13", "3.13t"}
    assert all(w.metadata_url for w in mine)  # data-core-metadata


def test_wheel_metadata_tells_a_cuda_build_from_a_cpu_one():
    base = "https://files.pythonhosted.org/packages/"
    index = json.loads((FIXTURE / "index.json").read_text())
    urls = {r["url"].rsplit("/", 1)[-1]: r["url"] for r in index["responses"] if r["url"].startswith(base)
            and r.get("file")}
    x86 = src.metadata_pins(_recorded(urls["torch-2.9.1-cp312-cp312-manylinux_2_28_x86_64.whl.metadata"]).decode(),
                            "linux/amd64")
    assert x86.variant == "cu128" and x86.nccl is not None and str(x86.nccl[1]) == "2.27.5"
    arm = src.metadata_pins(_recorded(urls["torch-2.9.1-cp312-cp312-manylinux_2_28_aarch64.whl.metadata"]).decode(),
                            "linux/arm64")
    assert arm.variant is None and arm.nvidia == ()  # every nvidia-* pin is for x86_64: a CPU build on PyPI
    arm11 = src.metadata_pins(_recorded(urls["torch-2.11.0-cp312-cp312-manylinux_2_28_aarch64.whl.metadata"]).decode(),
                              "linux/arm64")
    assert arm11.variant == "cu130" and str(arm11.cuda_toolkit) == "13.0.2"  # 2.11: a CUDA build on PyPI


def test_release_md_tables_give_variants_and_arch_lists_per_platform():
    t = src.release_tables(_recorded("https://raw.githubusercontent.com/pytorch/pytorch/main/RELEASE.md").decode())
    assert t.cuda["2.13"] == ["12.6", "13.0", "13.2"] and t.cuda["2.8"] == ["12.6", "12.8", "12.9"]
    assert t.arch_lines == ["2.12", "2.13", "2.14"]
    assert t.arch["linux/arm64"]["12.6"] == ["sm_80", "sm_90"]  # Ampere and Hopper only
    assert "sm_110" in t.arch["linux/arm64"]["13.0"] and "sm_110" not in t.arch["linux/amd64"]["13.0"]
    assert t.arch["linux/amd64"]["12.6"][0] == "sm_50"


def test_nvidia_sources_give_tags_and_require_cuda():
    raw = "https://gitlab.com/nvidia/container-images/cuda/-/raw/master"
    tags = src.supported_tags(_recorded(f"{raw}/doc/supported-tags.md").decode())
    assert tags[("13.0.0", "ubuntu24.04")]["flavours"] == {"base", "runtime", "devel"}
    assert ("13.0.0", "rockylinux10") in tags and ("13.0.0", "ubi10") in tags
    cuda, branches = src.require_cuda(_recorded(f"{raw}/dist/13.0.0/ubuntu2404/base/Dockerfile").decode())
    assert str(cuda) == "13.0" and branches == (535, 550, 565, 570, 575)  # no R560, no R580
    assert src.require_cuda('ENV NVIDIA_REQUIRE_CUDA "cuda>=11.4"') is not None  # the older ENV form


# -- the refresh against recorded responses -------------------------------------------------------

def test_replay_reproduces_the_matrix_facts_of_every_source():
    p = cli("matrix", "refresh", "--json", *_replay_args())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    rep = json.loads(p.stdout)
    assert rep["ok"] is True and rep["differ"] == []
    assert set(rep["sources"].values()) == {"read"} and len(rep["sources"]) == 5
    agree = {(f["entry"], f["field"]): f for f in rep["agree"]}
    # PyPI: 2.9.1's PyPI default is cu128 with NCCL 2.27.5; its aarch64 wheel on PyPI is not that build
    assert agree[("torch 2.9.1", "pypi_default")]["found"] == "cu128"
    assert agree[("torch 2.9.1 cu128", "linux/arm64 on PyPI")]["found"] == "not cu128"
    assert agree[("torch 2.11.0 cu130", "linux/arm64 on PyPI")]["found"] == "cu130"
    # PyTorch's index: 2.7.0's cu128 aarch64 wheels
    assert agree[("torch 2.7.0 cu128", "platforms")]["found"] == ["linux/amd64", "linux/arm64"]
    # RELEASE.md: the aarch64 arch lists of 2.12-2.14
    assert agree[("torch 2.13 cu126", "arch (linux/arm64)")]["found"] == ["sm_80", "sm_90"]
    # NVIDIA: NVIDIA_REQUIRE_CUDA of the 13.0.0 images
    assert agree[("nvidia/cuda 13.0.0 ubuntu24.04", "require_cuda")]["found"]["branches"] == [535, 550, 565, 570, 575]
    # DeepSpeed at its tags: the import-time torch range, derived from the sources
    assert "custom_op" in agree[("deepspeed 0.18.9", "imports torch")]["detail"]
    assert agree[("deepspeed 0.18.9", "imports torch")]["found"][0] == "2.4"
    assert "torch._six" in agree[("deepspeed 0.8.1", "imports torch")]["detail"]
    assert agree[("deepspeed 0.17.4", "imports torch")]["detail"].startswith("any torch")
    # a fact the recording cannot confirm is unverified, never agreement
    assert rep["counts"]["unverified"] > 0
    for f in rep["unverified"]:
        assert (f["entry"], f["field"]) not in agree


def test_plain_output_is_a_reviewed_diff(tmp_path: Path):
    folder = _live_copy(tmp_path)
    data = yaml.safe_load((folder / "base_images.yaml").read_text())
    entry = next(b for b in data["images"] if b["cuda"] == "13.0.0")
    entry["require_cuda"]["branches"] = [535, 550, 560, 565, 570, 575]  # R560 added by hand
    (folder / "base_images.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    p = cli("matrix", "refresh", "--matrix", str(folder), "--source", "nvidia-images", "--replay", str(FIXTURE))
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "all 1 sources were read (replay of %s)" % FIXTURE
    i = lines.index("base_images.yaml: nvidia/cuda 13.0.0 ubuntu24.04: require_cuda")
    assert "560" in lines[i + 1] and lines[i + 1].startswith("  - matrix:")
    assert lines[i + 2].startswith("  + https://gitlab.com/nvidia/container-images/cuda/-/raw/master/dist/13.0.0/"
                                   "ubuntu2404/base/Dockerfile (read ") and "560" not in lines[i + 2]


def test_a_changed_fact_differs_and_the_written_overlay_restores_it(tmp_path: Path):
    folder = _live_copy(tmp_path)
    data = yaml.safe_load((folder / "torch.yaml").read_text())
    rel = next(r for r in data["releases"] if r["line"] == "2.7")
    var = rel["variants"]["cu128"]
    var["platforms"] = ["linux/amd64"]  # as the matrix had it before the index was read
    del var["platform_arch"]
    (folder / "torch.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    m = load_matrix(folder)
    rep = refresh(m, sources=["pytorch-index"], fetch=Replay(FIXTURE))
    diff = [(f.entry, f.field, f.matrix, f.found) for f in rep.of("differ")]
    assert diff == [("torch 2.7.0 cu128", "platforms", ["linux/amd64"], ["linux/amd64", "linux/arm64"])]
    assert rep.of("differ")[0].url == "https://download.pytorch.org/whl/cu128/torch/"
    written = write_overlay(rep, m, tmp_path / "overlay")
    assert written == ["torch.yaml"]
    text = (tmp_path / "overlay" / "torch.yaml").read_text()
    assert "written by envbuilder matrix refresh on " in text and "https://download.pytorch.org/whl/cu128/torch/" in text
    again = refresh(load_matrix(folder, tmp_path / "overlay"), sources=["pytorch-index"], fetch=Replay(FIXTURE))
    assert again.of("differ") == []


def test_a_source_that_cannot_be_reached_is_a_clear_network_error(tmp_path: Path):
    """PyTorch's index is not reachable here: a refresh that must read it fails with the network
    error, naming the source (a closed local port stands in for the index, so the test does not
    depend on the network)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    folder = _live_copy(tmp_path)
    text = (folder / "torch.yaml").read_text().replace(
        "index: https://download.pytorch.org/whl/{variant}", f"index: http://127.0.0.1:{port}/whl/{{variant}}")
    (folder / "torch.yaml").write_text(text)
    p = cli("matrix", "refresh", "--matrix", str(folder), "--source", "pytorch-index")
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("envbuilder: error:")]
    assert err and "cannot read source pytorch-index" in err[0] and f"127.0.0.1:{port}" in err[0]
    assert p.stdout.splitlines()[0].startswith("1 of 1 sources could not be read (pytorch-index)")
    pj = cli("matrix", "refresh", "--matrix", str(folder), "--source", "pytorch-index", "--json")
    rep = json.loads(pj.stdout)
    assert pj.returncode == 1 and rep["ok"] is False and rep["agree"] == [] and rep["differ"] == []


def test_bad_replay_folder_and_source_are_bad_input(tmp_path: Path):
    p = cli("matrix", "refresh", "--replay", str(tmp_path))
    assert p.returncode == 2 and "no index.json" in p.stderr
    p = cli("matrix", "refresh", "--source", "pypy", "--replay", str(FIXTURE))
    assert p.returncode == 2 and "--source pypy: not a source" in p.stderr


def test_record_then_replay_gives_the_same_report(tmp_path: Path):
    p1 = cli("matrix", "refresh", "--json", "--source", "release-md", "--replay", str(FIXTURE),
             "--record", str(tmp_path / "rec"))
    assert p1.returncode == 0, p1.stderr
    assert (tmp_path / "rec" / "index.json").is_file()
    p2 = cli("matrix", "refresh", "--json", "--source", "release-md", "--replay", str(tmp_path / "rec"))
    a, b = json.loads(p1.stdout), json.loads(p2.stdout)
    assert a["counts"] == b["counts"] and a["agree"] == b["agree"]


@pytest.mark.network
def test_live_pypi_reports_no_disagreement_for_the_matrix_torch_releases():
    p = cli("matrix", "refresh", "--source", "pypi", "--json")
    rep = json.loads(p.stdout)
    assert p.returncode == 0, rep["differ"]
    assert rep["sources"] == {"pypi": "read"} and rep["differ"] == []
    agree = {(f["entry"], f["field"]) for f in rep["agree"]}
    for t in load_matrix().torch:  # every release the matrix carries exists there with its Pythons
        assert (f"torch {t.version}", "python") in agree
    assert ("torch 2.9.1 cu128", "linux/arm64 on PyPI") in agree  # PyPI's aarch64 2.9.1 is not cu128
