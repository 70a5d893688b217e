"""Helpers of the hostile-input tests: run the real CLI in a subprocess, mount a small tmpfs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the entry point as users run it: `python -m envbuilder` is the console script's own code
# (envbuilder._entry.main), which guards the streams and signals before any heavy import
CLI = [sys.executable, "-m", "envbuilder"]
MANIFEST = ".envbuilder-output"
LEFTOVER_MARKS = (".envbuilder-stage-", ".render-all-", ".envbuilder-lock-", ".old-", ".tmp-",
                  ".envbuilder-conda-", ".envbuilder-pylock-", ".envbuilder-wheelhouse-partial")


def env(**extra: str) -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("ENVBUILDER_DEBUG", None)
    e.update(extra)
    return e


def cli(*args: str, cwd: Path | None = None, timeout: float = 300, stdin=subprocess.DEVNULL,
        **env_extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env(**env_extra), stdin=stdin)


def interruptible() -> None:
    """preexec_fn: SIGINT back to its default in the child. A suite started in the background
    (``cmd &`` in a script, nohup) inherits SIGINT ignored, and Python keeps an ignored SIGINT
    ignored, so a Ctrl-C test would otherwise send a signal nobody receives."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


# The interpreter's own start-up (the site module, .pth files) is not envbuilder's code: a
# SIGINT landing there makes Python print "Fatal Python error: init_import_site" and a
# traceback whatever envbuilder does. This runs `python -m envbuilder` after start-up has
# ended and says so on stdout, so a test can time its signal from there.
_AFTER_STARTUP = ("import os, runpy, sys; os.write(1, b'R'); sys.argv[0] = 'envbuilder'; "
                  "runpy.run_module('envbuilder', run_name='__main__', alter_sys=True)")


def start(*args: str, cwd: Path | None = None, after_startup: bool = False,
          **env_extra: str) -> subprocess.Popen:
    """The CLI in the background. ``after_startup``: return once Python's own start-up is over
    (the next thing the child runs is envbuilder's entry module)."""
    if not after_startup:
        return subprocess.Popen([*CLI, *args], cwd=cwd, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=env(**env_extra),
                                preexec_fn=interruptible)
    p = subprocess.Popen([sys.executable, "-c", _AFTER_STARTUP, *args], cwd=cwd,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env(**env_extra), preexec_fn=interruptible)
    assert p.stdout is not None
    assert p.stdout.read(1) == "R", p.communicate(timeout=60)
    return p


def assert_clean_failure(p: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """One line on stderr, the exit code, no traceback, no 'internal error'."""
    err = p.stderr
    assert p.returncode == code, (p.returncode, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    first = err.strip().splitlines()[0] if err.strip() else ""
    assert first.startswith("envbuilder: error: "), err[-2000:]
    assert len(first) < 2500, len(first)
    for n in needles:
        assert n in first, (n, first)
    return first


def leftovers(root: Path) -> list[str]:
    """Temporary files or folders envbuilder may have left anywhere under ``root``."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            if any(m in name for m in LEFTOVER_MARKS):
                out.append(os.path.join(dirpath, name))
    return out


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text())["files"]


def assert_complete(folder: Path) -> dict:
    """Every file the manifest names is there with the bytes it records, and the build folder
    is one render (stack.json and the Dockerfile name the same target)."""
    files = manifest(folder)
    for rel, ent in files.items():
        assert (folder / rel).is_file(), rel
        assert sha(folder / rel) == ent["sha256"], rel
        assert "prev" not in ent, rel
    stack = json.loads((folder / "stack.json").read_text())
    assert f"for target {stack['target']} " in (folder / "Dockerfile").read_text()
    return files


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): sha(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "4m") -> Iterator[Path]:
    """A real small file system (tmpfs) mounted at ``path`` for the test; skipped only when
    this machine cannot mount (not root, no CAP_SYS_ADMIN)."""
    path.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                        str(path)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount(path: Path, opts: str) -> None:
    p = subprocess.run(["mount", "-o", f"remount,{opts}", str(path)], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr


def fill(path: Path, leave: int = 0) -> Path:
    """Fill the file system of ``path`` until at most ``leave`` bytes are free."""
    filler = path / "filler.bin"
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb", buffering=0) as f:
        chunk = b"\0" * (1 << 16)
        todo = max(free - leave, 0)
        try:
            while todo > 0:
                n = f.write(chunk[:min(len(chunk), todo)])
                todo -= n
            f.flush()
        except OSError:
            pass
    return filler


# -- a hostile registry: a small HTTP server on 127.0.0.1 only, one thread, bounded loops -----

LABELS = {"io.envbuilder.torch": "2.5.1", "io.envbuilder.version": "0.0-test",
          "io.envbuilder.python": "3.11", "io.envbuilder.os": "ubuntu22.04",
          "io.envbuilder.cuda": "cpu", "io.envbuilder.target": "cpu"}
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def image_docs(labels: dict | None = None, config: object = None) -> dict[str, bytes]:
    """{"config", "manifest", "index"}: the bytes of a small envbuilder image (no layer)."""
    cfg = json.dumps(config if config is not None else
                     {"created": "2026-11-30T10:00:00Z", "architecture": "amd64", "os": "linux",
                      "config": {"Labels": labels or LABELS}}).encode()
    man = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                 "digest": digest(cfg), "size": len(cfg)},
                      "layers": []}).encode()
    idx = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX,
                      "manifests": [{"mediaType": OCI_MANIFEST, "digest": digest(man),
                                     "size": len(man),
                                     "platform": {"os": "linux", "architecture": "amd64"}}]}).encode()
    return {"config": cfg, "manifest": man, "index": idx}


class HostileRegistry:
    """A registry that plays by its own rules, bound to 127.0.0.1 on a free port.

    ``routes`` maps a request path (without the query) to a function ``fn(handler)`` that
    answers; ``requests`` records (method, path with query, headers) of everything received,
    ``raw`` every request line. ``close()`` (or leaving the ``with``) stops it."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.routes: dict[str, object] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.stop = threading.Event()
        reg = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _any(self):
                reg.requests.append((self.command, self.path, dict(self.headers.items())))
                fn = reg.routes.get(self.path.split("?", 1)[0])
                if fn is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                fn(self)

            do_GET = do_HEAD = do_CONNECT = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                       daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://{self.host}{path}"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> HostileRegistry:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # answers
    @staticmethod
    def send(body: bytes = b"", status: int = 200, ctype: str = OCI_MANIFEST,
             headers: dict | None = None):
        def fn(h) -> None:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(body)
        return fn

    def serve_image(self, repo: str = "ml/x", tag: str = "v1", *, index: bool = False,
                    docs: dict[str, bytes] | None = None, child: bytes | None = None) -> dict:
        """Routes of one image; ``child``: bytes served at the index entry's digest instead
        of the manifest it names."""
        d = docs or image_docs()
        self.routes[f"/v2/{repo}/blobs/{digest(d['config'])}"] = self.send(
            d["config"], ctype="application/octet-stream")
        self.routes[f"/v2/{repo}/manifests/{digest(d['manifest'])}"] = self.send(
            child if child is not None else d["manifest"])
        self.routes[f"/v2/{repo}/manifests/{tag}"] = (
            self.send(d["index"], ctype=OCI_INDEX) if index else self.send(d["manifest"]))
        if index:
            self.routes[f"/v2/{repo}/manifests/{digest(d['index'])}"] = self.send(
                d["index"], ctype=OCI_INDEX)
        return d

    def drip(self, head: bytes, every: float = 0.5, most: int = 240):
        """Answer ``head`` then one byte every ``every`` seconds, at most ``most`` bytes."""
        import time

        def fn(h) -> None:
            h.wfile.write(head)
            h.wfile.flush()
            for _ in range(most):
                if self.stop.wait(every):
                    return
                try:
                    h.wfile.write(b" ")
                    h.wfile.flush()
                except OSError:
                    return
            time.sleep(0)
        return fn

    def raw(self, data: bytes):
        """Answer bytes that are not HTTP (or not well-formed HTTP), then close."""
        def fn(h) -> None:
            h.wfile.write(data)
            h.wfile.flush()
            h.close_connection = True
        return fn

    def seen(self, needle: str) -> list[str]:
        """Request lines and headers that hold ``needle``."""
        return [f"{m} {p} {hd}" for m, p, hd in self.requests if needle in f"{p} {hd}"]


def inspect_registry(image: str, *extra: str, timeout: float = 120, **env_extra: str):
    """``envbuilder inspect IMAGE --from registry --json`` through the CLI."""
    return cli("inspect", image, "--from", "registry", "--json", *extra, timeout=timeout,
               no_proxy="", NO_PROXY="", **env_extra)
