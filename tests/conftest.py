"""Shared fixtures: a real Docker engine, a local base image, a wheelhouse, real registries.

scripts/test.sh (the README's test command, run by .ci/run) installs and starts the engine,
imports the Debian 12 base image and fills the wheelhouse, and exports:
DOCKER_HOST, ENVBUILDER_TEST_BASE_IMAGE, ENVBUILDER_TEST_WHEELHOUSE, ENVBUILDER_REQUIRE_DOCKER=1.
With ENVBUILDER_REQUIRE_DOCKER=1 a missing engine fails the engine tests instead of skipping
them, so CI cannot pass by skipping.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CPU_TARGET = "cpu-torch2.13-debian12"


def _require() -> bool:
    return os.environ.get("ENVBUILDER_REQUIRE_DOCKER") == "1"


def _missing(what: str):
    if _require():
        pytest.fail(f"{what} (ENVBUILDER_REQUIRE_DOCKER=1: run the tests with scripts/test.sh)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def docker_client():
    try:
        import docker

        client = docker.from_env(timeout=900)
        client.ping()
    except Exception as e:  # noqa: BLE001
        _missing(f"no Docker engine at DOCKER_HOST={os.environ.get('DOCKER_HOST')}: {e}")
    return client


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    name = os.environ.get("ENVBUILDER_TEST_BASE_IMAGE", "envbuilder-test/debian:12")
    try:
        docker_client.images.get(name)
    except Exception:  # noqa: BLE001
        _missing(f"base image {name} is not in the engine (scripts/test-services.sh makes it)")
    return name


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    p = Path(os.environ.get("ENVBUILDER_TEST_WHEELHOUSE",
                            Path.home() / ".cache/envbuilder-test/wheelhouse"))
    if not (p / ".complete").exists():
        _missing(f"wheelhouse {p} is not ready (scripts/test-services.sh fills it)")
    return p


@pytest.fixture(scope="session")
def ca_bundle() -> Path:
    p = Path("/etc/ssl/certs/ca-certificates.crt")
    if not p.exists():
        pytest.skip("no system CA bundle")
    return p


@pytest.fixture(scope="session")
def cpu_build(docker_client, base_image, wheelhouse, ca_bundle, tmp_path_factory):
    """The cpu target built once for the session (offline, from the wheelhouse), no smoke.

    Both engine workers (see ``pytest_collection_modifyitems``) need it: they take turns, so
    the second finds every step in the engine's cache instead of building it beside the first."""
    from envbuilder.api import make_spec
    from envbuilder.run.build import BuildOptions, build_target

    ctx = tmp_path_factory.mktemp("cpu-context") / "ctx"
    opts = BuildOptions(wheelhouse=wheelhouse, ca_cert=ca_bundle, smoke=False, context=ctx)
    # the workers' base folders share a parent (the run's pytest-N folder)
    with open(tmp_path_factory.getbasetemp().parent / "cpu-build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return build_target(make_spec(CPU_TARGET, base_image=base_image), opts, client=docker_client)


@pytest.fixture(scope="session")
def smoke_image(cpu_build) -> str:
    """A Debian 12 image with python3 and torch 2.13.0 (CPU): envbuilder's own cpu build."""
    return cpu_build.local_tags[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry:
    """A real OCI registry (Debian's docker-registry, distribution 2.8) on 127.0.0.1."""

    def __init__(self, root: Path, *, user: str | None = None, password: str | None = None):
        self.root = root
        self.port = _free_port()
        self.user, self.password = user, password
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Registry:
        exe = shutil.which("docker-registry")
        if exe is None:
            _missing("docker-registry is not installed (apt-get install docker-registry)")
        auth = ""
        if self.user:
            htpasswd = self.root / "htpasswd"
            out = subprocess.run(["htpasswd", "-Bbn", self.user, self.password],
                                 capture_output=True, text=True, check=True).stdout
            htpasswd.write_text(out)
            auth = f"auth:\n  htpasswd:\n    realm: envbuilder-test\n    path: {htpasswd}\n"
        cfg = self.root / "config.yml"
        cfg.write_text(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {self.root / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.address}\n{auth}")
        self.log = open(self.root / "registry.log", "w")
        self.proc = subprocess.Popen([exe, "serve", str(cfg)], stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"registry did not start: {(self.root / 'registry.log').read_text()}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
        self.log.close()


@pytest.fixture(scope="session")
def _session_registry(tmp_path_factory):
    r = Registry(tmp_path_factory.mktemp("registry")).start()
    yield r
    r.stop()


@pytest.fixture
def registry(_session_registry) -> Registry:
    """The session's registry (one per xdist worker), as a team's is one: a push finds the
    layers an earlier test pushed (the engine mounts them from the other repository instead of
    compressing and uploading a gigabyte again). Each test pushes to repositories of its own."""
    return _session_registry


@pytest.fixture
def auth_registry(tmp_path):
    r = Registry(tmp_path, user="ml", password="s3cret-pass").start()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def uv_cache(tmp_path_factory):
    """One uv cache for the session (test_lock and test_conda): later resolutions are warm."""
    path = tmp_path_factory.getbasetemp() / "uv-cache"
    path.mkdir(exist_ok=True)
    old = {k: os.environ.get(k) for k in ("UV_CACHE_DIR", "UV_PYTHON_DOWNLOADS")}
    os.environ["UV_CACHE_DIR"] = str(path)
    os.environ["UV_PYTHON_DOWNLOADS"] = "never"
    yield path
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# engine tests that mostly run jobs in images already built (the session's CPU image, the SIF)
_RUNS_IN_BUILT_IMAGES = frozenset({"test_apptainer.py", "test_slurm.py", "test_multinode.py",
                                   "test_sign.py"})


@pytest.hookimpl(tryfirst=True)  # before -m deselects: `-m "not network"` leaves them out
def pytest_collection_modifyitems(session, config, items):
    """Every test that runs uv is marked ``network`` (uv resolves against PyPI): a test runs uv
    through the ``uv_cache`` fixture, directly or through a fixture that uses it (``real_lock``,
    ``locked``); one that runs it otherwise carries the mark itself.

    The engine tests (``docker``) are in two xdist groups: under ``pytest -n 2 --dist
    loadgroup`` (scripts/test.sh) one worker runs the builds, pushes and CUDA images in order,
    the other the jobs that run in built images (the SIF, Slurm, multi-node, signing), and both
    take the rest. xdist hands the two largest groups out first, one to each worker.

    The CUDA image tests run last: on a cold machine their wheelhouses (about 9 GB) download
    in the background while the rest of the suite runs (scripts/test-services.sh)."""
    for item in items:
        if "uv_cache" in getattr(item, "fixturenames", ()) and item.get_closest_marker("network") is None:
            item.add_marker(pytest.mark.network)
        if item.get_closest_marker("docker") is not None:
            runs = item.path.name in _RUNS_IN_BUILT_IMAGES
            item.add_marker(pytest.mark.xdist_group("engine-runs" if runs else "engine"))
    items.sort(key=lambda item: item.get_closest_marker("cuda") is not None)
