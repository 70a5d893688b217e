"""Indexes as a site has them (issue 46, point 1): PyTorch's index replaced through one project
key (``torch_index_url``, a template with the variant), an explicit index strategy that no
option switches by itself, credentials from ~/.netrc never written into a file.

The indexes are real: PEP 503 simple indexes on 127.0.0.1 built from the suite's wheelhouse
(torch's CPU wheel and its dependencies), served by python's http.server, resolved by real uv.
PyTorch's index of the site asks for a password (HTTP Basic), which uv reads from a netrc file."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

from envbuilder.api import make_spec
from envbuilder.errors import InputError
from envbuilder.lock.uv import compile_command, indexes
from hostile_helpers import assert_clean_failure, cli

TARGET = "cpu-torch2.13-debian12"
USER, PASSWORD = "ml-team", "s3cret-w0rd"


def _name(filename: str) -> str:
    if filename.endswith(".whl"):
        return canonicalize_name(parse_wheel_filename(filename)[0])
    return canonicalize_name(parse_sdist_filename(filename)[0])


def _simple_index(root: Path, files: list[Path]) -> None:
    """A PEP 503 simple index of ``files`` under ``root``: ``root/<name>/index.html`` with each
    file's link and sha256 (https://peps.python.org/pep-0503/)."""
    by_name: dict[str, list[Path]] = {}
    for f in files:
        by_name.setdefault(_name(f.name), []).append(f)
    (root / "files").mkdir(parents=True)
    for name, fs in by_name.items():
        links = []
        for f in fs:
            (root / "files" / f.name).symlink_to(f)
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            links.append(f'<a href="../files/{html.escape(f.name)}#sha256={digest}">'
                         f"{html.escape(f.name)}</a><br/>")
        (root / name).mkdir()
        (root / name / "index.html").write_text(
            "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")


class _Handler(SimpleHTTPRequestHandler):
    """Files of the site's folder; under /whl/ (PyTorch's index of the site) only with the
    team's password. A file named in ``tampered`` is served with a byte more (a broken mirror)."""

    tampered: set[str] = set()
    json_pages = False  # answer PEP 691 JSON to a client that asks for it (PyPI's form)
    json_served = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        name = self.path.rsplit("/", 1)[-1]
        if (self.json_pages and self.path.startswith("/pypi/") and self.path.endswith("/")
                and "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")):
            page = Path(self.directory) / self.path.lstrip("/") / "index.html"
            if page.is_file():
                files = [{"filename": h.rsplit("/", 1)[-1].split("#")[0], "url": h.split("#")[0],
                          "hashes": {"sha256": h.split("#sha256=")[1]}}
                         for h in re.findall(r'href="([^"]+)"', page.read_text())]
                body = json.dumps({"meta": {"api-version": "1.0"}, "files": files}).encode()
                type(self).json_served += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
        if name in self.tampered:
            body = (Path(self.directory) / "pypi" / "files" / name).read_bytes() + b"\0"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/whl/"):
            want = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            if self.headers.get("Authorization") != want:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="whl"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site(wheelhouse, tmp_path_factory):
    """A site's two indexes on 127.0.0.1: /whl/cpu/ (PyTorch's, torch's CPU wheel alone, behind
    a password) and /pypi/ (its PyPI mirror: everything else the wheelhouse has)."""
    root = tmp_path_factory.mktemp("site")
    wheels = sorted(p for p in wheelhouse.iterdir() if p.name.endswith((".whl", ".tar.gz")))
    torch = [p for p in wheels if _name(p.name) == "torch"]
    assert torch, f"no torch wheel in {wheelhouse}"
    _simple_index(root / "whl" / "cpu", torch)
    _simple_index(root / "pypi", [p for p in wheels if _name(p.name) != "torch"])
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _project(folder: Path, site: str, **extra: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    keys = {"torch_index_url": f"{site}/whl/{{variant}}/", "pip_index_url": f"{site}/pypi/", **extra}
    (folder / "envbuilder.toml").write_text(
        "".join(f'{k} = "{v}"\n' for k, v in keys.items())
        + f'\n[[targets]]\nname = "box"\ntarget = "{TARGET}"\n')
    return folder


def _netrc(tmp_path: Path) -> Path:
    p = tmp_path / "netrc"
    p.write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    p.chmod(0o600)
    return p


def _offline_env(tmp_path: Path) -> dict[str, str]:
    """Nothing but the site: no proxy reaches out, uv's cache is the test's own."""
    return {"UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_HTTP_RETRIES": "0",
            "NETRC": str(_netrc(tmp_path)), "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}


def test_a_cpu_target_locks_and_renders_with_pytorchs_index_replaced_by_one_project_key(site, tmp_path):
    proj = _project(tmp_path / "proj", site)
    out = tmp_path / "proj" / "build"
    p = cli("lock", "box", "-o", str(out), "--json", cwd=proj, **_offline_env(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    lock = json.loads(p.stdout)["lock"]
    # the strategy is stated, and it is the safe one: nothing asked for another
    assert lock["index_strategy"] == "first-index"
    assert lock["index"] == f"{site}/pypi/"
    assert lock["extra_indexes"] == [f"{site}/whl/cpu/"]
    assert lock["packages"]["torch"] == "2.13.0+cpu"
    text = (out / "requirements.lock").read_text()
    assert "--index-strategy first-index" in text and "# index strategy: first-index" in text
    assert f"{site}/whl/cpu/" in text
    assert "download.pytorch.org" not in text and "pypi.org" not in text
    # the password came from the netrc file and is in no file envbuilder wrote
    r = cli("render", "box", "-o", str(out), cwd=proj, **_offline_env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    dockerfile = (out / "Dockerfile").read_text()
    assert f"{site}/whl/cpu/" in dockerfile and "download.pytorch.org" not in dockerfile
    definition = (out / "envbuilder.def").read_text()  # the Apptainer definition too
    assert f"{site}/whl/cpu/" in definition and "download.pytorch.org" not in definition
    for f in out.rglob("*"):
        if f.is_file():
            body = f.read_bytes()
            assert PASSWORD.encode() not in body and USER.encode() not in body, f


def test_without_the_netrc_the_sites_torch_index_refuses_and_nothing_is_written(site, tmp_path):
    proj = _project(tmp_path / "proj", site)
    env = {**_offline_env(tmp_path), "NETRC": str(tmp_path / "none")}
    p = cli("lock", "box", "-o", str(tmp_path / "out"), cwd=proj, **env)
    assert_clean_failure(p, 1, f"{site}/whl/cpu/", "401", "netrc")
    assert not (tmp_path / "out").exists()


def test_an_unsafe_strategy_is_used_only_when_asked(site, tmp_path):
    proj = _project(tmp_path / "proj", site, index_strategy="unsafe-first-match")
    out = tmp_path / "out"
    p = cli("lock", "box", "-o", str(out), "--json", cwd=proj, **_offline_env(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "--index-strategy unsafe-first-match" in (out / "requirements.lock").read_text()


def test_credentials_in_the_project_files_torch_index_are_refused(tmp_path):
    proj = _project(tmp_path / "proj", f"http://{USER}:{PASSWORD}@127.0.0.1:9")
    p = cli("lock", "box", "-o", str(tmp_path / "out"), cwd=proj)
    err = assert_clean_failure(p, 2, "torch_index_url", "netrc")
    assert PASSWORD not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bad", ["http://h/whl/{variant", "http://h/{arch}/", "http://h/a b/{variant}",
                                 "http://h/{variant}/?token=x"])
def test_a_bad_torch_index_template_is_bad_input(bad):
    with pytest.raises(InputError) as e:
        make_spec(TARGET, torch_index_url=bad)
    assert "--torch-index-url" in str(e.value) and e.value.exit_code == 2


def test_no_index_option_switches_the_strategy_by_itself():
    """--pip-index-url and --extra-index-url keep first-index (they used to switch uv to
    unsafe-best-match silently) and keep PyTorch's index first."""
    from envbuilder.api.specs import resolve_spec

    spec = make_spec(TARGET, pip_index_url="https://mirror.example/simple",
                     extra_index_urls=("https://private.example/simple",))
    stack = resolve_spec(spec)
    idx = indexes(stack, spec.pip_index_url, spec.extra_index_urls, spec.index_strategy)
    assert idx.strategy == "first-index"
    assert idx.index == "https://mirror.example/simple"
    assert idx.extras == (stack.torch_index, "https://private.example/simple")
    cmd = compile_command("uv", stack, idx, None)
    assert cmd[cmd.index("--index-strategy") + 1] == "first-index"
    asked = make_spec(TARGET, index_strategy="unsafe-best-match")
    assert indexes(stack, None, (), asked.index_strategy).strategy == "unsafe-best-match"
    # the template replaces PyTorch's index for the target's variant
    site = resolve_spec(make_spec(TARGET, torch_index_url="https://mirror.example/whl/{variant}"))
    assert site.torch_index == "https://mirror.example/whl/cpu"
    assert os.path.basename(stack.torch_index.rstrip("/")) == "cpu"


# -- envbuilder wheelhouse LOCK -o DIR: exactly the lock's files, resumable, verified ------------

@pytest.fixture(scope="module")
def site_lock(site, tmp_path_factory):
    """The box target locked against the site (its indexes recorded in the lock)."""
    tmp = tmp_path_factory.mktemp("site-lock")
    proj = _project(tmp / "proj", site)
    p = cli("lock", "box", "-o", str(tmp / "build"), cwd=proj, **_offline_env(tmp))
    assert p.returncode == 0, p.stderr[-3000:]
    return tmp / "build" / "requirements.lock"


def _locked_hashes(lock: Path) -> dict[str, set[str]]:
    from envbuilder.lock.entries import read_lock

    return {p.name: set(p.hashes) for p in read_lock(lock.read_text())}


def _sha(p: Path) -> str:
    return "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()


def test_wheelhouse_downloads_exactly_the_locks_files_then_keeps_them(site_lock, tmp_path):
    wh = tmp_path / "wheels"
    p = cli("wheelhouse", str(site_lock), "-o", str(wh), "--json", **_offline_env(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads(p.stdout)
    locked = _locked_hashes(site_lock)
    assert rep["python"] == "3.11" and rep["platform"] == "x86_64-manylinux_2_28"
    assert sorted(f["name"] for f in rep["files"]) == sorted(locked)  # one file per entry
    assert rep["downloaded"] == len(locked) and rep["kept"] == 0
    on_disk = sorted(x.name for x in wh.iterdir())
    assert on_disk == sorted(f["file"] for f in rep["files"])  # nothing else, no partial folder
    for f in rep["files"]:
        assert _sha(wh / f["file"]) == f["sha256"] and f["sha256"] in locked[f["name"]]
    assert any(n.startswith("torch-2.13.0+cpu-cp311-cp311-") for n in on_disk)
    # resumable: what is there with a right hash is kept without the network (no netrc now:
    # the site's torch index, asked first, would refuse), and only a missing file is fetched
    env = {**_offline_env(tmp_path), "NETRC": str(tmp_path / "none")}
    p = cli("wheelhouse", str(site_lock.parent), "-o", str(wh), "--json", **env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["kept"] == len(locked)
    numpy = next(x for x in wh.iterdir() if x.name.startswith("numpy-"))
    numpy.unlink()
    p = cli("wheelhouse", str(site_lock.parent), "-o", str(wh), "--json", **_offline_env(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    again = json.loads(p.stdout)
    assert again["downloaded"] == 1 and again["kept"] == len(locked) - 1
    assert [f["file"] for f in again["files"] if f["status"] == "downloaded"] == [numpy.name]
    # --check: offline, every file there and right
    p = cli("wheelhouse", str(site_lock), "-o", str(wh), "--check", "--json", **env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["checked"] is True


def test_wheelhouse_refuses_a_file_whose_hash_the_lock_does_not_hold(site_lock, tmp_path):
    wh = tmp_path / "wheels"
    wh.mkdir()
    locked = _locked_hashes(site_lock)
    # a file in DIR that is not the locked one: named, never overwritten
    numpy = next(f for f in (_wheelhouse_dir()).iterdir() if f.name.startswith("numpy-"))
    (wh / numpy.name).write_bytes(numpy.read_bytes() + b"x")
    p = cli("wheelhouse", str(site_lock), "-o", str(wh), **_offline_env(tmp_path))
    assert_clean_failure(p, 1, numpy.name, "does not hold")
    assert (wh / numpy.name).read_bytes() == numpy.read_bytes() + b"x"
    assert "numpy" in locked


def test_wheelhouse_refuses_a_download_whose_hash_is_wrong(site_lock, tmp_path):
    mpmath = next(f for f in _wheelhouse_dir().iterdir() if f.name.startswith("mpmath-"))
    _Handler.tampered = {mpmath.name}
    try:
        wh = tmp_path / "wheels"  # --json: no progress on stderr, the error is its one line
        p = cli("wheelhouse", str(site_lock), "-o", str(wh), "--json", **_offline_env(tmp_path))
    finally:
        _Handler.tampered = set()
    assert_clean_failure(p, 1, mpmath.name, "does not hold")
    assert not (wh / mpmath.name).exists()
    assert not any(x.name.startswith(".envbuilder") for x in wh.iterdir())


def test_wheelhouse_check_names_the_missing_files_and_the_command(site_lock, tmp_path):
    wh = tmp_path / "wheels"
    wh.mkdir()
    p = cli("wheelhouse", str(site_lock), "-o", str(wh), "--check")
    err = assert_clean_failure(p, 2, "torch==2.13.0+cpu", "numpy==", f"envbuilder wheelhouse {site_lock} -o {wh}")
    assert "lacks" in err


def _wheelhouse_dir() -> Path:
    return Path(os.environ.get("ENVBUILDER_TEST_WHEELHOUSE",
                               Path.home() / ".cache/envbuilder-test/wheelhouse"))


def test_build_context_hard_links_the_wheelhouse_and_names_missing_files_before_any_build(
        site, site_lock, tmp_path):
    """What build --wheelhouse DIR puts in its build folder (run.build.prepare_context, the
    step before the engine is asked): the wheelhouse's files hard-linked, not copied; a
    wheelhouse that lacks a locked file is refused first, naming it and the fetch command."""
    from envbuilder.api.specs import resolve_spec
    from envbuilder.core.project import load_project
    from envbuilder.run.build import BuildOptions, prepare_context

    wh = tmp_path / "wheels"
    p = cli("wheelhouse", str(site_lock), "-o", str(wh), **_offline_env(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    proj = _project(tmp_path / "proj", site)
    spec = make_spec("box", project=load_project(proj / "envbuilder.toml"))
    stack = resolve_spec(spec)
    notes: list[str] = []
    ctx, _ = prepare_context(spec, stack, BuildOptions(wheelhouse=wh), tmp_path / "ctx",
                             lock=site_lock, on_note=notes.append)
    placed = [f for f in (ctx / "wheels").rglob("*") if f.is_file() and f.name != ".keep"]
    assert sorted(f.name for f in placed) == sorted(x.name for x in wh.iterdir())
    for f in placed:
        assert f.stat().st_ino == (wh / f.name).stat().st_ino  # the same file: a hard link
    assert notes == []  # nothing was copied, so nothing to say
    torch = next(x for x in wh.iterdir() if x.name.startswith("torch-"))
    torch.unlink()
    with pytest.raises(InputError) as e:
        prepare_context(spec, stack, BuildOptions(wheelhouse=wh), tmp_path / "ctx2", lock=site_lock)
    assert "torch==2.13.0+cpu" in str(e.value) and f"envbuilder wheelhouse {site_lock}" in str(e.value)
    assert e.value.exit_code == 2 and not (tmp_path / "ctx2").exists()


def test_credentials_in_an_extra_index_reach_neither_the_lock_nor_the_rendered_files(site, tmp_path):
    """An extra index given with user:token@ (uv gets it as given) is recorded without it,
    and the Dockerfile takes it as a build argument, never as text."""
    token = "xtra-t0ken-9"
    proj = _project(tmp_path / "proj", site)
    (proj / "envbuilder.toml").write_text(
        # another host name for the same server: uv keeps one set of credentials per host
        f'extra_index_urls = ["http://deploy:{token}@localhost:{site.rsplit(":", 1)[1]}/pypi/"]\n'
        + (proj / "envbuilder.toml").read_text())
    out = tmp_path / "proj" / "build"
    p = cli("lock", "box", "-o", str(out), cwd=proj, **_offline_env(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    r = cli("render", "box", "-o", str(out), cwd=proj, **_offline_env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    local = site.replace("127.0.0.1", "localhost")
    assert f"{local}/pypi/" in (out / "requirements.lock").read_text()  # recorded, without the token
    assert "PIP_EXTRA_INDEX_URL_1" in (out / "Dockerfile").read_text()
    for f in out.rglob("*"):
        if f.is_file():
            assert token.encode() not in f.read_bytes(), f
    assert token not in p.stdout + p.stderr + r.stdout + r.stderr


@pytest.mark.docker
def test_a_locked_cpu_target_builds_offline_from_its_wheelhouse(site, site_lock, base_image, docker_client,
                                                                tmp_path):
    """The done-when of issue 46 (points 1 and 2) on the suite's engine: the lock made through the
    site's PyTorch index, its wheelhouse filled by envbuilder wheelhouse, the image built from
    it with no index (the build folder's wheels are hard links to the wheelhouse's)."""
    wh = tmp_path / "wheels"
    p = cli("wheelhouse", str(site_lock), "-o", str(wh), **_offline_env(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    proj = _project(tmp_path / "proj", site)
    ctx = tmp_path / "proj" / "ctx"
    p = cli("build", "box", "--base-image", base_image, "--lock-file", str(site_lock),
            "--wheelhouse", str(wh), "--context", str(ctx), "--no-smoke", "--json", cwd=proj,
            timeout=1800, **_offline_env(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads(p.stdout)
    assert rep["wheelhouse"] == {"path": str(wh), "copied": False, "note": None}
    torch = next((ctx / "wheels").rglob("torch-2.13.0+cpu-*.whl"))
    assert torch.stat().st_ino == (wh / torch.name).stat().st_ino
    out = docker_client.containers.run(rep["image_id"],
                                       ["python3", "-c", "import torch; print(torch.__version__)"],
                                       remove=True, entrypoint=[])
    assert out.decode().strip() == "2.13.0+cpu"


def test_wheelhouse_reads_pep_691_json_pages(site_lock, tmp_path):
    """An index that answers PEP 691 JSON (PyPI's form) gives the same files as its HTML."""
    _Handler.json_pages = True
    try:
        p = cli("wheelhouse", str(site_lock), "-o", str(tmp_path / "w"), "--json", **_offline_env(tmp_path))
    finally:
        _Handler.json_pages = False
    assert p.returncode == 0, p.stderr[-3000:]
    rep = json.loads(p.stdout)
    assert rep["downloaded"] == len(_locked_hashes(site_lock))
    assert _Handler.json_served >= len(_locked_hashes(site_lock)) - 1  # every page but torch's


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm (another file system)")
def test_build_context_copies_a_wheelhouse_on_another_file_system_and_says_so(site, site_lock, tmp_path):
    """A wheelhouse on another file system (tmpfs /dev/shm beside the build folder's) cannot
    be hard-linked: its files are copied and the build is told how many."""
    import tempfile

    from envbuilder.api.specs import resolve_spec
    from envbuilder.core.project import load_project
    from envbuilder.run.build import BuildOptions, prepare_context

    if os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is on the build folder's file system here")
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        wh = Path(shm) / "wheels"
        p = cli("wheelhouse", str(site_lock), "-o", str(wh), **_offline_env(tmp_path))
        assert p.returncode == 0, p.stderr[-3000:]
        proj = _project(tmp_path / "proj", site)
        spec = make_spec("box", project=load_project(proj / "envbuilder.toml"))
        notes: list[str] = []
        ctx, _ = prepare_context(spec, resolve_spec(spec), BuildOptions(wheelhouse=wh),
                                 tmp_path / "ctx", lock=site_lock, on_note=notes.append)
        placed = [f for f in (ctx / "wheels").rglob("*") if f.is_file() and f.name != ".keep"]
        assert len(placed) == len(list(wh.iterdir()))
        assert all(f.stat().st_ino != (wh / f.name).stat().st_ino for f in placed)
        assert len(notes) == 1 and f"copied {len(placed)} wheelhouse files" in notes[0]
        assert "another file system" in notes[0]
