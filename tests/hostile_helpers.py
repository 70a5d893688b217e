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
                  ".envbuilder-conda-", ".envbuilder-pylock-")


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


def start(*args: str, cwd: Path | None = None, **env_extra: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env(**env_extra),
                            preexec_fn=interruptible)


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
