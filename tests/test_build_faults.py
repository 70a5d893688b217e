"""Faults under a build (issue 24): the engine killed mid-build, the engine's disk full, the
package index going away mid-install, a smoke rank killed mid-collective.

Real parts only. The engine faults run against a dockerd of the test's own (its own data root
on a small tmpfs, its own exec root, socket and pidfile, no bridge), never the shared engine;
its base image is the shared engine's ``envbuilder-test/debian:12``, copied with
``docker save | docker load``. The index test runs pip in a container of the shared engine
(it only builds there) against a local index server the test starts and stops. The smoke
test kills one rank of a real torchrun job on this host (torch is installed here).

The builds go through ``envbuilder.run.engine.build``, the engine step of ``envbuilder
build``: the whole command would render an image that installs Python and torch over the
network, which the test's own engine (no bridge) cannot do and which takes minutes.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from hostile_helpers import CLI, env, interruptible, tmpfs

SHARED = os.environ.get("ENVBUILDER_TEST_DOCKER_HOST", "unix:///var/tmp/envbuilder-test/docker.sock")
BASE = "envbuilder-test/debian:12"



def _docker(host: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "-H", host, *args], capture_output=True, text=True, **kw)


def _shared_has_base() -> bool:
    if shutil.which("docker") is None or shutil.which("dockerd") is None:
        return False
    p = _docker(SHARED, "image", "inspect", BASE, timeout=30)
    return p.returncode == 0


class OwnEngine:
    """A dockerd of the test's own under ``root`` (data root on a tmpfs of ``size``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sock = f"unix://{root}/d.sock"
        self.pidfile = root / "d.pid"
        self.proc: subprocess.Popen | None = None
        self.bridge = f"ebf{os.getpid() % 100000}"

    def start(self) -> None:
        # a bridge of its own: never `--bridge=none`, with which dockerd deletes the host's
        # docker0 at start (moby's removeDefaultBridgeInterface), breaking the shared engine
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)  # a restart
        for cmd in (["ip", "link", "add", self.bridge, "type", "bridge"],
                    ["ip", "addr", "add", "172.31.254.1/24", "dev", self.bridge],
                    ["ip", "link", "set", self.bridge, "up"]):
            subprocess.run(cmd, capture_output=True, check=True)
        log = open(self.root / "dockerd.log", "ab")
        self.proc = subprocess.Popen(
            ["dockerd", "--data-root", str(self.root / "data"), "--exec-root",
             str(self.root / "exec"), "-H", self.sock, "--pidfile", str(self.pidfile),
             f"--bridge={self.bridge}", "--iptables=false", "--ip6tables=false",
             "--ip-masq=false"],
            stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                if _docker(self.sock, "info", timeout=10).returncode == 0:
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError("own dockerd did not start: "
                           + (self.root / "dockerd.log").read_text()[-2000:])

    def kill(self) -> None:
        """SIGKILL dockerd and its containerd (its process group, as a service manager ends a
        crashed engine before it restarts it); the build container's shim stays."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        # where PID 1 does not reap orphans (a container), the killed containerd stays a
        # zombie, and a new dockerd would wait for "still running" containerd: its pidfile goes
        with contextlib.suppress(OSError):
            (self.root / "exec" / "containerd" / "containerd.pid").unlink()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        # what dockerd started under our exec root (containerd, shims), ended by pid
        for pid in _pids_with(str(self.root)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def _pids_with(text: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    out.append(int(d))
        except OSError:
            continue
    return out


@pytest.fixture
def own_engine(tmp_path) -> Iterator[OwnEngine]:
    if os.geteuid() != 0 or not _shared_has_base() or shutil.which("ip") is None:
        pytest.skip(f"needs root, dockerd and {BASE} in the shared engine at {SHARED}")
    import tempfile

    # a short path of its own: containerd's sockets under the exec root must stay within the
    # 108 characters of a unix socket path (pytest's tmp_path is too deep)
    short = Path(tempfile.mkdtemp(prefix="ebf-", dir="/tmp"))
    root = short / "e"
    with tmpfs(root, size="600m"):
        eng = OwnEngine(root)
        eng.start()
        try:
            save = subprocess.Popen(["docker", "-H", SHARED, "save", BASE], stdout=subprocess.PIPE)
            load = subprocess.run(["docker", "-H", eng.sock, "load"], stdin=save.stdout,
                                  capture_output=True, text=True, timeout=300)
            save.wait(timeout=300)
            assert load.returncode == 0, load.stderr
            yield eng
        finally:
            eng.stop()
            subprocess.run(["umount", "-l", str(root / "exec" / "netns")], capture_output=True)
    shutil.rmtree(short, ignore_errors=True)


def _context(tmp_path: Path, name: str, dockerfile: str) -> Path:
    ctx = tmp_path / name
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(dockerfile)
    return ctx


@pytest.mark.docker
@pytest.mark.slow
def test_engine_killed_mid_build(own_engine, tmp_path):
    """dockerd SIGKILLed while a RUN step runs: one OperationError naming the engine (exit 1
    in the CLI), no tag pointing at a partial image; the engine restarted, the same build
    succeeds."""
    from envbuilder.errors import OperationError
    from envbuilder.run import engine

    ctx = _context(tmp_path, "ctx", f"FROM {BASE}\nRUN echo started && sleep 20 && echo done > /done\n")
    client = engine.connect(own_engine.sock)

    def on_line(line: str) -> None:
        if line.strip() == "started":
            own_engine.kill()

    with pytest.raises(OperationError) as err:
        engine.build(client, ctx, tag="faults:killed", on_line=on_line)
    msg = str(err.value)
    assert err.value.exit_code == 1
    assert f"the Docker engine at {own_engine.sock} went away" in msg, msg
    assert "no image was tagged" in msg
    own_engine.start()
    assert _docker(own_engine.sock, "image", "inspect", "faults:killed", timeout=30).returncode != 0
    client = engine.connect(own_engine.sock)
    quick = _context(tmp_path, "ctx2", f"FROM {BASE}\nRUN echo started && echo done > /done\n")
    res = engine.build(client, quick, tag="faults:killed")
    assert res.image_id
    p = _docker(own_engine.sock, "run", "--rm", "--network", "none", "faults:killed", "cat", "/done",
                timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "done", p.stderr


@pytest.mark.docker
@pytest.mark.slow
def test_engine_disk_full_names_disk_space(own_engine, tmp_path):
    """The engine's data root (a 600 MB tmpfs) fills during a RUN step."""
    from envbuilder.errors import OperationError
    from envbuilder.run import engine

    ctx = _context(tmp_path, "ctx", f"FROM {BASE}\nRUN dd if=/dev/zero of=/big bs=1M count=900\n")
    client = engine.connect(own_engine.sock)
    with pytest.raises(OperationError) as err:
        engine.build(client, ctx, tag="faults:full")
    assert err.value.exit_code == 1
    assert "out of disk space" in str(err.value) and "no space left on device" in str(err.value)
    assert _docker(own_engine.sock, "image", "inspect", "faults:full", timeout=30).returncode != 0


# -- a smoke rank killed mid-collective ----------------------------------------------------------

def _children(root: int) -> list[int]:
    """Every descendant of ``root`` (from /proc's PPid)."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                for line in f:
                    if line.startswith("PPid:"):
                        parent[int(d)] = int(line.split()[1])
                        break
        except OSError:
            continue
    out, todo = [], [root]
    while todo:
        cur = todo.pop()
        kids = [p for p, pp in parent.items() if pp == cur]
        out += kids
        todo += kids
    return out


def _env_of(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            pairs = [x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x]
        return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}
    except OSError:
        return {}


def _sockets(pid: int) -> int:
    n = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    n += 1
    except OSError:
        pass
    return n


@pytest.mark.slow
def test_smoke_rank_killed_mid_collective(tmp_path):
    """Rank 1 of a real 4-rank torchrun job on this host is SIGKILLed once its process group
    is up (its sockets to the store and the three peers are open: the collectives run): exit
    1, the rank named, within the smoke timeout (the subprocess timeout is the hang guard)."""
    pytest.importorskip("torch")
    timeout = 60
    p = subprocess.Popen(CLI + ["smoke", "--host", "--nproc", "4", "--timeout", str(timeout),
                                "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env(), cwd=tmp_path, preexec_fn=interruptible)
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and p.poll() is None and time.monotonic() < deadline:
        for pid in _children(p.pid):
            e = _env_of(pid)
            if e.get("RANK") == "1" and "LOCAL_RANK" in e and _sockets(pid) >= 4:
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
        time.sleep(0.005)
    out, err = p.communicate(timeout=timeout + 120)
    assert killed is not None, f"rank 1 never had its process group up: {err[-2000:]}"
    assert p.returncode == 1, err[-2000:]
    data = json.loads(out)
    assert data["failed"][0] == "rank_died", data["failed"]
    assert f"rank 1 (pid {killed}) was killed by SIGKILL" in data["details"]["rank_died"]
    assert "envbuilder: error: " in err and f"rank 1 (pid {killed})" in err, err[-2000:]


# -- the package index going away mid-install ----------------------------------------------------

class _Index(http.server.ThreadingHTTPServer):
    """A PEP 503 index over a folder of real wheels (the simple/ pages and packages/); with
    ``die_at``, the server closes for good when pip asks for that project's page: the index
    going away in the middle of an install."""

    daemon_threads = True

    def __init__(self, folder: Path, die_at: str | None = None) -> None:
        self.folder, self.die_at, self.dead = folder, die_at, threading.Event()
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(index.folder), **kw)

            def do_GET(self):  # noqa: N802
                if index.dead.is_set() or (index.die_at and self.path.startswith(f"/simple/{index.die_at}/")):
                    index.dead.set()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)  # no answer: the index is gone
                    threading.Thread(target=index.shutdown, daemon=True).start()
                    return
                super().do_GET()

            def log_message(self, *a):  # quiet
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def close(self) -> None:
        if not self.dead.is_set():
            self.shutdown()
        self.server_close()


WHEELS = {"six": "six==1.16.0", "idna": "idna==3.7"}


@pytest.fixture(scope="module")
def wheel_index(tmp_path_factory) -> Path:
    """A folder of real wheels from PyPI laid out as a simple index (skipped when PyPI cannot
    be reached)."""
    root = tmp_path_factory.mktemp("index")
    pk = root / "packages"
    p = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary",
                        ":all:", "-d", str(pk), *WHEELS.values()],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        pytest.skip(f"cannot download wheels from the index: {p.stderr.strip()[-300:]}")
    for name in WHEELS:
        page = root / "simple" / name
        page.mkdir(parents=True)
        links = "".join(f'<a href="../../packages/{w.name}">{w.name}</a>\n'
                        for w in pk.glob(f"{name}-*.whl"))
        (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return root


def _pip_image(eng: OwnEngine, tmp_path: Path) -> str:
    """A Debian 12 image with pip, built in the test's own engine (apt over the host's
    network: the engine has no bridge)."""
    from envbuilder.run import engine

    ctx = _context(tmp_path, "pip", f"FROM {BASE}\nRUN apt-get update && apt-get install -y "
                                     f"--no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*\n")
    try:
        engine.build(engine.connect(eng.sock), ctx, tag="faults/pip:1", network_mode="host")
    except Exception as e:  # noqa: BLE001 - no Debian mirror reachable from here
        pytest.skip(f"cannot build an image with pip: {e}")
    return "faults/pip:1"


@pytest.mark.docker
@pytest.mark.slow
def test_index_gone_mid_install_names_the_package(own_engine, wheel_index, tmp_path):
    """pip installs six, then the index dies when pip asks for idna: exit 1 naming idna and
    the index; with the index back, the same build succeeds."""
    from envbuilder.errors import OperationError
    from envbuilder.run import engine

    image = _pip_image(own_engine, tmp_path)
    ctx = _context(tmp_path, "ctx", (
        f"FROM {image}\nARG INDEX\n"
        "RUN pip install --break-system-packages --no-cache-dir --retries 1 --timeout 10 "
        "--index-url \"$INDEX\" " + " ".join(WHEELS.values()) + "\n"))
    client = engine.connect(own_engine.sock)
    index = _Index(wheel_index, die_at="idna")
    try:
        with pytest.raises(OperationError) as err:
            engine.build(client, ctx, tag="faults:index", nocache=True, network_mode="host",
                         buildargs={"INDEX": f"http://127.0.0.1:{index.port}/simple"})
    finally:
        index.close()
    msg = str(err.value)
    assert err.value.exit_code == 1
    assert "installing idna" in msg and "the package index stopped answering" in msg, msg
    assert _docker(own_engine.sock, "image", "inspect", "faults:index", timeout=30).returncode != 0
    index = _Index(wheel_index)  # back
    try:
        res = engine.build(client, ctx, tag="faults:index", nocache=True, network_mode="host",
                           buildargs={"INDEX": f"http://127.0.0.1:{index.port}/simple"})
        assert res.image_id
    finally:
        index.close()
