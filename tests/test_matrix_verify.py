"""`envbuilder matrix verify` against the live PyPI, and `envbuilder matrix show`.

The verify tests need PyPI (marked ``network``: deselect offline with ``-m 'not network'``);
they run in CI. PyTorch's own index is not reachable here: it must be reported as skipped,
never counted as agreement.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envbuilder.core.matrix import load_matrix
from envbuilder.knowledge.indexcheck import linux_x86_64_files
from envbuilder.knowledge.show import AXES, show_axis

from core_helpers import copy_matrix


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=900)


def test_wheel_names_give_linux_x86_64_cpython_tags():
    files = linux_x86_64_files([
        "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.13.0-cp314-cp314t-manylinux_2_28_x86_64.whl",  # free-threaded: not counted
        "torch-2.13.0-cp312-cp312-manylinux_2_28_aarch64.whl",  # not x86_64
        "torch-2.13.0-cp312-cp312-win_amd64.whl",
        "torch-2.6.0%2Bcu126-cp310-cp310-manylinux_2_28_x86_64.whl",  # local version, quoted
        "torch-1.12.1-cp37-cp37m-manylinux1_x86_64.whl",
        "torch-2.0.0.tar.gz",
    ])
    got = {str(f.version): set(f.pythons) for f in files}
    assert got == {"2.13.0": {"3.11"}, "2.6.0+cu126": {"3.10"}, "1.12.1": {"3.7"}}
    assert {f.local for f in files} == {None, "cu126"}


@pytest.mark.network
def test_verify_passes_on_the_shipped_matrix_against_pypi():
    p = cli("matrix", "verify", "--json")
    rep = json.loads(p.stdout)
    assert p.returncode == 0, rep["disagreements"]
    assert rep["ok"] is True and rep["indexes"]["https://pypi.org/simple"] == "reachable"
    # real facts read from PyPI's metadata, for the PyPI default variants
    agreed = set(rep["agreed"])
    assert "torch 2.6.0 cu124: nccl nvidia-nccl-cu12==2.21.5" in agreed
    assert "torch 2.0.1 cu117: nccl nvidia-nccl-cu11==2.14.3" in agreed
    assert "torch 2.11.0: pypi_default cu130" in agreed
    # every index that did not answer is listed as skipped, with what it left unchecked
    unreachable = [u for u, s in rep["indexes"].items() if s != "reachable"]
    assert {s["index_url"] for s in rep["skipped"]} >= set(unreachable)
    for u in unreachable:
        assert not any(a for a in agreed if u in a)


@pytest.mark.network
def test_verify_fails_naming_the_entry_whose_nccl_was_altered(tmp_path: Path):
    folder = copy_matrix(tmp_path / "m")
    data = yaml.safe_load((folder / "torch.yaml").read_text())
    entry = next(r for r in data["releases"] if r["line"] == "2.6")
    assert entry["variants"]["cu124"]["nccl"] == "2.21.5"
    entry["variants"]["cu124"]["nccl"] = "2.20.5"
    (folder / "torch.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    p = cli("matrix", "verify", "--matrix", str(folder))
    assert p.returncode == 1, p.stdout + p.stderr
    assert ("disagree: torch 2.6.0 cu124: nccl is 2.20.5 in the matrix but 2.21.5 on "
            "https://pypi.org/simple") in p.stdout
    pj = cli("matrix", "verify", "--matrix", str(folder), "--json")
    assert pj.returncode == 1
    d = json.loads(pj.stdout)["disagreements"]
    assert [(x["entry"], x["field"], x["matrix"], x["index"]) for x in d] == [
        ("torch 2.6.0 cu124", "nccl", "2.20.5", "2.21.5")]


def test_verify_reports_an_unreachable_index_as_skipped(tmp_path: Path):
    """No network needed: an index on a closed local port answers nothing; nothing agrees."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = cli("matrix", "verify", "--json", "--pypi-index-url", f"http://127.0.0.1:{port}/simple",
            "--torch-index", f"http://127.0.0.1:{port}/whl/{{variant}}")
    rep = json.loads(p.stdout)
    assert p.returncode == 0 and rep["agreed"] == [] and rep["disagreements"] == []
    assert all(v.startswith("unreachable") for v in rep["indexes"].values())
    assert len(rep["skipped"]) == len(rep["indexes"])


@pytest.mark.parametrize("axis", AXES)
def test_show_every_axis_with_sources(axis):
    t = show_axis(load_matrix(), axis)
    assert t.rows and len(t.rows) == len(t.sources)
    assert all(s and all(u.startswith("http") for u in s) for s in t.sources)
    p = cli("matrix", "show", axis, "--json")
    assert p.returncode == 0
    assert json.loads(p.stdout)["rows"][0]["source"]


def test_show_unknown_axis_is_bad_input():
    p = cli("matrix", "show", "torh")
    assert p.returncode == 2 and "did you mean" in p.stderr and "torch" in p.stderr
