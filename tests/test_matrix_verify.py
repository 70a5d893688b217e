"""`envbuilder matrix verify` against the live PyPI, and `envbuilder matrix show`.

The verify tests need PyPI (marked ``network``: deselect offline with ``-m 'not network'``);
they run in CI. PyTorch's own index is not reachable here: it must be reported as skipped,
never counted as agreement. DeepSpeed and Horovod are checked against their pages on the
simple index (PyPI's JSON form, or a local HTML index served by the test).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from envbuilder.core.matrix import load_matrix
from envbuilder.knowledge.indexcheck import MatrixReport, linux_x86_64_files, verify_components
from envbuilder.knowledge.show import AXES, show_axis

from core_helpers import MATRICES, copy_matrix


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
    """No network needed: an index on a closed local port answers nothing; nothing agrees, and
    a verification that could check nothing fails (exit 1, naming the index)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = cli("matrix", "verify", "--json", "--pypi-index-url", f"http://127.0.0.1:{port}/simple",
            "--torch-index", f"http://127.0.0.1:{port}/whl/{{variant}}")
    rep = json.loads(p.stdout)
    assert p.returncode == 1 and rep["agreed"] == [] and rep["disagreements"] == []
    assert rep["ok"] is False and f"127.0.0.1:{port}/simple" in rep["error"]
    assert f"cannot reach the package index http://127.0.0.1:{port}/simple" in p.stderr
    assert all(v.startswith("unreachable") for v in rep["indexes"].values())
    assert len(rep["skipped"]) == len(rep["indexes"])
    # DeepSpeed and Horovod are looked up on the same (unreachable) index: skipped, not agreed
    for name in ("deepspeed", "horovod"):
        url = f"http://127.0.0.1:{port}/simple/{name}/"
        assert rep["indexes"][url].startswith("unreachable")
        (sk,) = [s for s in rep["skipped"] if s["index_url"] == url]
        assert sk["entry"] == f"index {url}" and f"{name} release(s) not checked" in sk["detail"]
    assert not [f for f in rep["unverified"] + rep["new"] if f["entry"].startswith(("deepspeed", "horovod"))]


@pytest.mark.network
def test_verify_checks_deepspeed_and_horovod_on_pypi():
    """The shipped matrix agrees with PyPI's simple index for every DeepSpeed and Horovod
    release it lists: each exists, none is yanked, and Horovod's requires-python is the
    matrix's; DeepSpeed declares none, so its python constraints stay unverified."""
    p = cli("matrix", "verify", "--json")
    rep = json.loads(p.stdout)
    assert p.returncode == 0, rep["disagreements"]
    ds, hv = "https://pypi.org/simple/deepspeed/", "https://pypi.org/simple/horovod/"
    assert rep["indexes"][ds] == "reachable" and rep["indexes"][hv] == "reachable"
    assert not [d for d in rep["disagreements"] if d["index_url"] in (ds, hv)]
    agreed = set(rep["agreed"])
    m = load_matrix()
    for comp in (m.component("deepspeed"), m.component("horovod")):
        for r in comp.releases:
            assert any(a.startswith(f"{comp.name} {r.version}: release on the index") for a in agreed)
    assert "deepspeed 0.9.1: release on the index (uploaded 2023-04-21)" in agreed
    assert {f"horovod {v}: python >=3.6" for v in ("0.24.0", "0.27.0", "0.28.1")} <= agreed
    unv = [(u["entry"], u["field"], u["matrix"]) for u in rep["unverified"] if u["index_url"] == ds]
    assert ("deepspeed 0.9.0..0.9.5", "python", ">=3.6") in unv
    assert not [u for u in rep["unverified"] if u["index_url"] == hv]
    assert not [n for n in rep["new"] if n["index_url"] == hv]  # 0.28.1 is the last release


@pytest.mark.network
def test_verify_fails_on_a_deepspeed_release_pypi_does_not_have(tmp_path: Path):
    folder = copy_matrix(tmp_path / "m")
    data = yaml.safe_load((folder / "deepspeed.yaml").read_text())
    entry = next(r for r in data["releases"] if r["line"] == "0.9")
    entry["versions"].append("0.9.99")
    (folder / "deepspeed.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    p = cli("matrix", "verify", "--matrix", str(folder))
    assert p.returncode == 1, p.stdout + p.stderr
    assert ("disagree: deepspeed 0.9.99: release is listed in the matrix but absent on "
            "https://pypi.org/simple/deepspeed/") in p.stdout
    assert p.stdout.count("disagree: ") == 1


@pytest.mark.network
def test_verify_fails_on_a_horovod_python_constraint_pypi_contradicts(tmp_path: Path):
    folder = copy_matrix(tmp_path / "m")
    data = yaml.safe_load((folder / "horovod.yaml").read_text())
    entry = next(r for r in data["releases"] if r["line"] == "0.28")
    assert entry["requires"]["python"] == ">=3.6"
    entry["requires"]["python"] = ">=3.8"
    (folder / "horovod.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    p = cli("matrix", "verify", "--matrix", str(folder), "--json")
    assert p.returncode == 1, p.stdout + p.stderr
    d = json.loads(p.stdout)["disagreements"]
    assert [(x["entry"], x["field"], x["matrix"], x["index"], x["index_url"]) for x in d] == [
        (f"horovod {v}", "python", ">=3.8", ">=3.6", "https://pypi.org/simple/horovod/")
        for v in ("0.28.0", "0.28.1")]
    assert d[0]["text"].startswith("horovod 0.28.0: python is >=3.8 in the matrix but >=3.6 on ")


def _serve(pages: dict[str, str]):
    class H(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write((body or "").encode())

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_verify_reads_yanked_and_requires_python_from_an_html_index():
    """No network: a PEP 503 HTML index on a local port (a mirror's form) with a yanked
    release, a contradicting requires-python, one release missing and newer ones."""
    m = load_matrix(MATRICES)
    listed = sorted(r.version for r in m.component("horovod").releases)
    links = []
    for v in listed:
        if str(v) == "0.26.0":
            continue  # missing
        rp = ">=3.7" if str(v) == "0.28.1" else ">=3.6"
        y = ' data-yanked="broken build"' if str(v) == "0.27.0" else ""
        links.append(f'<a href="/f/horovod-{v}.tar.gz#sha256=00" '
                     f'data-requires-python="{rp.replace(">", "&gt;")}"{y}>horovod-{v}.tar.gz</a>')
    links += ['<a href="/f/horovod-0.29.0.tar.gz">horovod-0.29.0.tar.gz</a>',
              '<a href="/f/horovod-0.30.0rc1.tar.gz">horovod-0.30.0rc1.tar.gz</a>',
              '<a href="/f/horovod-0.23.0.tar.gz">horovod-0.23.0.tar.gz</a>']
    srv = _serve({"/simple/horovod/": "<html><body>" + "\n".join(links) + "</body></html>"})
    try:
        index = f"http://127.0.0.1:{srv.server_address[1]}/simple"
        rep = MatrixReport("m", "d")
        verify_components(m, rep, pypi=index, names=("horovod",))
    finally:
        srv.shutdown()
    url = f"{index}/horovod/"
    assert rep.indexes == {url: "reachable"}
    got = {(f.kind, f.entry, f.field, f.matrix, f.index) for f in rep.findings}
    assert got == {
        ("disagree", "horovod 0.26.0", "release", "listed", "absent"),
        ("disagree", "horovod 0.27.0", "release", "listed", "yanked"),
        ("disagree", "horovod 0.28.1", "python", ">=3.6", ">=3.7"),
        ("new", "horovod 0.29.0", "release", None, "0.29.0"),  # not 0.30.0rc1, not 0.23.0
    }
    assert "broken build" in str(next(f for f in rep.findings if f.entry == "horovod 0.27.0"))
    assert "horovod 0.28.0: python >=3.6" in rep.agreed and not rep.ok


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


# -- issue 21: toolkits, base-image tags, NCCL; what could not be reached comes first ------------

TABLE3 = """<table><caption>Table 3 CUDA Toolkit and Corresponding Driver Versions</caption>
<tr><td>CUDA Toolkit</td><td>Toolkit Driver Version</td></tr>
<tr><td>CUDA 13.9 Update 1</td><td>&gt;=999.10.01</td><td>N/A</td></tr>
<tr><td>CUDA 13.3 Update 1</td><td>&gt;=610.43.02</td><td>N/A</td></tr>
<tr><td>CUDA 13.3 GA</td><td>&gt;=610.43.02</td><td>N/A</td></tr>
<tr><td>CUDA 13.2 Update 1</td><td>&gt;=595.58.03</td><td>N/A</td></tr>
<tr><td>CUDA 11.1.1 Update 1</td><td>&gt;=455.32</td><td>&gt;=456.81</td></tr>
</table>"""


def test_table3_rows_give_floors_per_patch():
    from envbuilder.knowledge.indexcheck import table3_floors

    assert table3_floors(TABLE3) == {"13.9.1": "999.10.01", "13.3.1": "610.43.02",
                                     "13.3.0": "610.43.02", "13.2.1": "595.58.03",
                                     "11.1.1": "455.32"}


def test_verify_toolkits_names_a_floor_table3_contradicts(tmp_path: Path):
    from envbuilder.knowledge.indexcheck import verify_toolkits

    m = load_matrix(MATRICES)
    srv = _serve({"/notes": TABLE3.replace("595.58.03", "595.99.99")})
    try:
        rep = MatrixReport(str(m.path), m.digest)
        verify_toolkits(m, rep, notes_url=f"http://127.0.0.1:{srv.server_port}/notes",
                        pypi="http://127.0.0.1:9/simple")
    finally:
        srv.shutdown()
    dis = [str(f) for f in rep.of("disagree")]
    assert dis == [f"CUDA 13.2.1: driver_min is 595.58.03 in the matrix but 595.99.99 on "
                   f"http://127.0.0.1:{srv.server_port}/notes"]
    assert "CUDA 13.3.1: driver_min 610.43.02" in rep.agreed
    assert any(f.entry == "CUDA 13.9.1" for f in rep.of("new"))
    # PyPI (cuda-toolkit) did not answer: said, not counted as agreement
    assert rep.unreachable == ["http://127.0.0.1:9/simple/cuda-toolkit/"]


def test_verify_states_what_it_could_not_reach_first():
    from envbuilder.knowledge.indexcheck import verify_matrix

    m = load_matrix(MATRICES)
    dead = "http://127.0.0.1:9"
    rep = verify_matrix(m, pypi=f"{dead}/simple", torch_index=dead + "/whl/{variant}",
                        notes_url=f"{dead}/notes", registry=f"{dead}/v2/repositories")
    # the index asked for did not answer: nothing verified, a failure (exit 1), said first
    assert rep.agreed == [] and not rep.ok and "cannot reach the package index" in rep.error
    assert len(rep.unreachable) == len(rep.indexes) > 10
    assert rep.headline().startswith(f"{len(rep.indexes)} of {len(rep.indexes)} sources could not be reached")
    skipped = {f.entry for f in rep.of("skipped")}
    assert f"index {dead}/notes" in skipped and f"index {dead}/v2/repositories" in skipped
    tags = next(f for f in rep.of("skipped") if f.entry == f"index {dead}/v2/repositories")
    assert "base-image tag(s) not checked" in tags.detail


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A real (tiny) wheel: METADATA with its Requires-Dist, WHEEL, RECORD (PEP 427)."""
    import zipfile

    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    meta = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", meta)
        z.writestr(f"{dist}.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def _index(root: Path, wheels: list[Path]) -> None:
    """A PEP 503 simple index of ``wheels`` under ``root``."""
    import hashlib

    from packaging.utils import parse_wheel_filename

    for w in wheels:
        page = root / str(parse_wheel_filename(w.name)[0])
        page.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(w.read_bytes()).hexdigest()
        (page / w.name).write_bytes(w.read_bytes())
        with (page / "index.html").open("a") as f:
            f.write(f'<a href="{w.name}#sha256={digest}">{w.name}</a><br/>\n')


def test_a_variants_metadata_is_read_first_index_never_best_match(tmp_path: Path):
    """torch of a variant is resolved on PyTorch's index of that variant with PyPI after it, by
    uv's first-index strategy: a dependency PyTorch's index has is never taken from PyPI because
    PyPI offers a higher version (dependency confusion: unsafe-best-match would take 99.0)."""
    from functools import partial
    from http.server import SimpleHTTPRequestHandler

    from envbuilder.knowledge.indexcheck import find_uv, resolve_pins

    made = tmp_path / "made"
    made.mkdir()
    _index(tmp_path / "whl" / "cu124", [
        _wheel(made, "torch", "2.6.0+cu124", ("nvidia-nccl-cu12==2.21.5", "filelock")),
        _wheel(made, "nvidia-nccl-cu12", "2.21.5"), _wheel(made, "filelock", "3.0.0")])
    (made / "pypi").mkdir()
    _index(tmp_path / "pypi", [_wheel(made / "pypi", "filelock", "99.0"),
                               _wheel(made / "pypi", "nvidia-nccl-cu12", "2.99.9")])

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        pins = resolve_pins(find_uv(), "torch==2.6.0+cu124", "3.11", f"{site}/whl/cu124/",
                            (f"{site}/pypi/",))
    finally:
        server.shutdown()
        server.server_close()
    assert pins.packages["filelock"] == Version("3.0.0")
    assert pins.nccl == ("nvidia-nccl-cu12", Version("2.21.5"))
    assert pins.packages["torch"] == Version("2.6.0+cu124")
