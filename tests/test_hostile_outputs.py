"""Hostile inputs, class 1 and 2 of issue 10: outputs envbuilder owns, atomic for real.

Every writing command leaves the user's files alone; SIGTERM, SIGINT, a full disk (a real
tmpfs), a read-only folder (a tmpfs remounted read-only) and concurrent runs leave the old or
the new complete output and no temporary files. The CLI runs in a subprocess, as users run it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuilder._fs import Outputs, owned, write_tree
from envbuilder.errors import InputError
from hostile_helpers import (MANIFEST, assert_clean_failure, assert_complete, cli, fill,
                             leftovers, manifest, remount, snapshot, start, tmpfs)


# -- 1. outputs envbuilder owns -----------------------------------------------------------------

def test_render_keeps_the_users_files(tmp_path):
    out = tmp_path / "p"
    out.mkdir()
    (out / "train.py").write_text("print('my training script')\n")
    (out / "data").mkdir()
    (out / "data" / "x.csv").write_text("1,2\n")
    p = cli("render", "cu118", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert (out / "train.py").read_text() == "print('my training script')\n"
    assert (out / "data" / "x.csv").read_text() == "1,2\n"
    files = assert_complete(out)
    assert "train.py" not in files and "Dockerfile" in files
    # a render of another target replaces only what render wrote
    assert cli("render", "cpu", "-o", str(out)).returncode == 0
    assert (out / "train.py").exists() and (out / "data" / "x.csv").exists()
    assert_complete(out)
    assert leftovers(tmp_path) == []


def test_render_into_home_keeps_ssh(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (home / "notes.txt").write_text("mine")
    before = snapshot(home)
    for o in (str(home), "~"):  # `-o ~` as a shell passes it, and the literal ~
        p = cli("render", "cpu", "-o", o, cwd=tmp_path, HOME=str(home))
        assert p.returncode == 0, p.stderr
    after = snapshot(home)
    for rel, h in before.items():
        assert after[rel] == h, rel
    assert not (tmp_path / "~").exists()
    assert leftovers(home) == []


@pytest.mark.parametrize("where", [".", ".."])
def test_dot_and_dotdot(tmp_path, where):
    cwd = tmp_path / "repo" / "sub"
    cwd.mkdir(parents=True)
    (cwd / "keep.txt").write_text("k")
    (tmp_path / "repo" / "keep.txt").write_text("k")
    p = cli("render", "cpu", "-o", where, cwd=cwd)
    assert p.returncode == 0, p.stderr
    folder = (cwd / where).resolve()
    assert_complete(folder)
    assert (cwd / "keep.txt").read_text() == "k" and (tmp_path / "repo" / "keep.txt").exists()
    assert leftovers(tmp_path) == []


def test_mount_point_as_output(tmp_path):
    with tmpfs(tmp_path / "mnt") as mnt:
        (mnt / "keep.txt").write_text("k")
        for target in ("cu118", "cpu"):  # the second replaces files on the mount point itself
            p = cli("render", target, "-o", str(mnt))
            assert p.returncode == 0, p.stderr
        assert_complete(mnt)
        assert (mnt / "keep.txt").read_text() == "k"
        assert leftovers(mnt) == []


def test_render_all_and_bake_keep_other_files(tmp_path):
    out = tmp_path / "D"
    out.mkdir()
    (out / "README.team").write_text("ours")
    (out / "cpu").mkdir()
    (out / "cpu" / "extra.txt").write_text("ours too")
    p = cli("render", "--all", "-o", str(out))
    assert p.returncode == 0, p.stderr
    p = cli("bake", "-o", str(out), "--registry", "127.0.0.1:5000/ml/train")
    assert p.returncode == 0, p.stderr
    assert (out / "README.team").read_text() == "ours"
    assert (out / "cpu" / "extra.txt").read_text() == "ours too"
    assert (out / "docker-bake.hcl").is_file() and "docker-bake.hcl" in owned(out)
    assert_complete(out / "cpu")
    assert leftovers(tmp_path) == []


def test_a_foreign_file_in_the_way_is_refused_and_kept(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "Dockerfile").write_text("FROM my-own-image\n")
    p = cli("render", "cpu", "-o", str(out))
    assert_clean_failure(p, 2, "Dockerfile", "did not write")
    assert (out / "Dockerfile").read_text() == "FROM my-own-image\n"
    assert sorted(x.name for x in out.iterdir()) == ["Dockerfile"]
    # a file envbuilder wrote and the user then edited is the user's
    (out / "Dockerfile").unlink()
    assert cli("render", "cpu", "-o", str(out)).returncode == 0
    (out / "Dockerfile").write_text((out / "Dockerfile").read_text() + "# my edit\n")
    p = cli("render", "cu118", "-o", str(out))
    assert_clean_failure(p, 2, "Dockerfile", "changed")
    assert (out / "Dockerfile").read_text().endswith("# my edit\n")
    # a folder where envbuilder needs a file (or the other way round)
    out2 = tmp_path / "o2"
    (out2 / "stack.json").mkdir(parents=True)
    assert_clean_failure(cli("render", "cpu", "-o", str(out2)), 2, "stack.json")
    assert leftovers(tmp_path) == []


def test_lock_render_sbom_outputs_coexist(tmp_path):
    """render, lock's files and the SBOM share a folder: each command replaces only its own."""
    out = tmp_path / "D"
    # what `lock -o D --sbom --conda` leaves (written through the same transaction code)
    with Outputs("lock") as tx:
        tx.add(out, {"sbom.cdx.json": "{}\n"}, group="sbom")
        tx.add(out, {"environment.yml": "name: x\n", "conda-lock.yml": "version: 1\n"},
               group="conda")
        tx.commit()
    p = cli("render", "cpu", "-o", str(out))
    assert p.returncode == 0, p.stderr
    for name in ("sbom.cdx.json", "environment.yml", "conda-lock.yml"):
        assert (out / name).is_file(), name
    files = manifest(out)
    assert files["sbom.cdx.json"]["group"] == "sbom" and files["Dockerfile"]["group"] == "render"
    # a render that no longer writes a file removes it, but only its own
    write_tree(out, {"Dockerfile": "x\n"}, group="render")
    assert not (out / "stack.json").exists() and (out / "sbom.cdx.json").exists()


def test_paths_that_escape_are_refused(tmp_path):
    for rel in ("../x", "/etc/passwd", "a/../../x", "a\nb", MANIFEST):
        with pytest.raises(InputError):
            write_tree(tmp_path / "o", {rel: "x"})
    assert not (tmp_path / "x").exists()


# -- 2. atomic for real -------------------------------------------------------------------------

def _first_render(out: Path) -> dict[str, str]:
    p = cli("render", "cu118", "-o", str(out))
    assert p.returncode == 0, p.stderr
    return snapshot(out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_leave_old_or_new_output(tmp_path, sig):
    """Kill a render at many moments: every time the folder holds one complete render (the
    old or the new) and nothing temporary."""
    out = tmp_path / "o"
    old = _first_render(out)
    t0 = time.perf_counter()
    assert cli("render", "cpu", "-o", str(tmp_path / "probe")).returncode == 0
    span = time.perf_counter() - t0
    outcomes = set()
    for i in range(8):
        p = start("render", "cpu", "-o", str(out), after_startup=True)
        time.sleep(span * (0.3 + 0.9 * i / 8))
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        assert "Traceback" not in err and "internal error" not in err, err
        # 0: it finished first; 128+n: envbuilder stopped; -n: the signal came after envbuilder
        # finished and ended the interpreter (the timer starts once Python's start-up is over)
        assert p.returncode in (0, 128 + sig, -sig), (p.returncode, err)
        assert leftovers(tmp_path) == []
        files = assert_complete(out)
        now = snapshot(out)
        stack = json.loads((out / "stack.json").read_text())
        outcomes.add(stack["target"])
        if stack["target"] == "cu118":
            assert now == old
        else:
            assert set(files) | {MANIFEST} == set(now)
        # back to the old output for the next round
        if stack["target"] != "cu118":
            assert cli("render", "cu118", "-o", str(out)).returncode == 0
            old = snapshot(out)
    assert outcomes  # (which ones depends on timing; each one was complete)


@pytest.fixture
def sigint_raises():
    """SIGINT raising KeyboardInterrupt in this process, whatever the suite inherited: started
    in the background (``cmd &`` in a script), Python keeps SIGINT ignored."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.mark.parametrize("where", ["cleanup", "staging"])
def test_a_signal_inside_cleanup_or_staging_leaves_no_staging_folder(tmp_path, monkeypatch, where,
                                                                      sigint_raises):
    """The two windows a random kill rarely hits (CI hit one): Ctrl-C while the staging folder
    is being removed, and Ctrl-C right after it is created. Either way the KeyboardInterrupt
    still reaches the caller, and no staging folder is left."""
    import shutil
    import tempfile

    from envbuilder import _fs

    def interrupt_before(real):
        def wrapped(*a, **k):
            os.kill(os.getpid(), signal.SIGINT)  # delivered at the next bytecode boundary
            return real(*a, **k)
        return wrapped

    def interrupt_after(real):
        def wrapped(*a, **k):
            made = real(*a, **k)
            os.kill(os.getpid(), signal.SIGINT)  # the folder exists, the caller has not seen it
            return made
        return wrapped

    if where == "cleanup":
        monkeypatch.setattr(_fs.shutil, "rmtree", interrupt_before(shutil.rmtree))
    else:
        monkeypatch.setattr(_fs.tempfile, "mkdtemp", interrupt_after(tempfile.mkdtemp))
    out = tmp_path / "o"
    out.mkdir()
    with pytest.raises(KeyboardInterrupt):
        with Outputs("render") as o:
            o.add(out, {"a.txt": "x" * 100000, "sub/b.txt": "y"}, group="render")
    assert leftovers(tmp_path) == []
    assert sorted(p.name for p in out.iterdir()) == []


class _SignalWhileMade:
    """A class attribute whose ``__set_name__`` gets the SIGTERM: what a signal does when it
    lands while a dataclass is being made (CI: a SIGTERM during the import of envbuilder._fs
    came out as "internal error: RuntimeError: Error calling __set_name__ ...")."""

    def __set_name__(self, owner, name):
        from envbuilder._safety import Terminated

        raise Terminated(signal.SIGTERM)


def test_a_signal_while_a_class_is_made_is_an_interruption(capfd):
    from envbuilder.ui.plain import guarded

    def make():
        type("Made", (), {"field": _SignalWhileMade()})
    assert guarded(make, as_json=False) == 128 + signal.SIGTERM
    err = capfd.readouterr().err
    assert "interrupted" in err and "internal error" not in err, err


def _python(code: str, *argv: str, cwd: Path):
    """``python -c CODE ARGV`` with this checkout and tests/ on the path: the entry point run
    with a piece of it replaced."""
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=120, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)])})


def test_a_signal_during_the_entry_points_imports_is_an_interruption(tmp_path):
    """The same, before any command runs (the entry point imports the CLI): exit 143, one
    line, no traceback."""
    code = ("import signal, envbuilder.ui.fastpath as f\n"
            "from test_hostile_outputs import _SignalWhileMade\n"
            "def run(argv):\n"
            "    type('Made', (), {'field': _SignalWhileMade()})\n"
            "f.run = run\n"
            "from envbuilder._entry import main\n"
            "main()\n")
    p = _python(code, "render", "cpu", cwd=tmp_path)
    assert p.returncode == 128 + signal.SIGTERM, p.stderr
    assert p.stderr.strip() == "envbuilder: interrupted", p.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_inside_a_weakref_callback_still_ends_the_command(tmp_path, sig):
    """A signal whose handler runs inside a weakref callback (as importlib's module-lock ``cb``
    did on CI) raises where Python can only print "Exception ignored" and go on: the command
    must still end as interrupted, exit 128+n, one line, no traceback."""
    code = ("import os, signal, time, weakref, envbuilder.ui.fastpath as f\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "class Obj: pass\n"
            "def cb(ref):\n"
            f"    os.kill(os.getpid(), {int(sig)})\n"
            "    for _ in range(1000): pass\n"  # the handler runs in here
            "def run(argv):\n"
            "    o = Obj(); r = weakref.ref(o, cb); del o\n"
            "    deadline = time.monotonic() + 30\n"
            "    while time.monotonic() < deadline: time.sleep(0.01)\n"
            "    print('went on'); return 0\n"
            "f.run = run\n"
            "from envbuilder._entry import main\n"
            "main()\n")
    p = _python(code, "render", "cpu", cwd=tmp_path)
    assert p.returncode == 128 + sig, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.strip() == "envbuilder: interrupted" and "went on" not in p.stdout, p.stderr


def test_other_unraisable_exceptions_still_reach_the_previous_hook(tmp_path):
    code = ("from envbuilder import _safety\n"
            "_safety.install_early()\n"
            "class Obj:\n"
            "    def __del__(self): raise ValueError('from __del__')\n"
            "o = Obj(); del o\n"
            "print('went on')\n")
    p = _python(code, cwd=tmp_path)
    assert p.returncode == 0 and "went on" in p.stdout
    assert "Exception ignored in" in p.stderr and "ValueError: from __del__" in p.stderr


def test_full_disk_keeps_the_old_output(tmp_path):
    with tmpfs(tmp_path / "mnt", size="2m") as mnt:
        out = mnt / "o"
        old = _first_render(out)
        filler = fill(mnt)
        p = cli("render", "cpu", "-o", str(out))
        first = assert_clean_failure(p, 1, "No space left on device")
        assert str(out) in first  # names the file it could not write
        assert snapshot(out) == old
        assert leftovers(mnt) == []
        filler.unlink()
        assert cli("render", "cpu", "-o", str(out)).returncode == 0
        assert_complete(out)


def test_read_only_folder(tmp_path):
    with tmpfs(tmp_path / "mnt") as mnt:
        out = mnt / "o"
        old = _first_render(out)
        remount(mnt, "ro")
        try:
            p = cli("render", "cpu", "-o", str(out))
            assert_clean_failure(p, 2, "Read-only file system")
            p = cli("render", "cpu", "-o", str(mnt / "new" / "deeper"))
            assert_clean_failure(p, 2, "Read-only file system")
            assert snapshot(out) == old
        finally:
            remount(mnt, "rw")
        assert leftovers(mnt) == []


def test_concurrent_runs_take_turns(tmp_path):
    out = tmp_path / "o"
    targets = ["cpu", "cu118", "cu121", "cpu", "cu118"]
    procs = [start("render", t, "-o", str(out)) for t in targets]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    files = assert_complete(out)
    assert set(files) | {MANIFEST} == set(snapshot(out))
    assert leftovers(tmp_path) == []


def test_a_folder_made_by_another_run_between_open_and_mkdir_is_used(tmp_path, monkeypatch):
    """The race behind a rare failure of the test above (one of five concurrent renders said
    "o is a symbolic link", about one run in three with cold bytecode): run A finds no folder,
    run B makes it, A's mkdir fails with EEXIST. A now opens B's folder; a dangling link is
    still refused."""
    import os as _os

    from envbuilder import _fs

    real_open = _os.open
    raced = []

    def open_after_the_other_run(path, flags, *args, **kwargs):
        if path == "o" and not raced:  # the other run makes it just after our first look
            raced.append(True)
            _os.mkdir(tmp_path / "o")
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(_fs.os, "open", open_after_the_other_run)
    made: list = []
    parent = real_open(tmp_path, _os.O_RDONLY | _os.O_DIRECTORY)
    try:
        fd = _fs._open_or_make(parent, "o", tmp_path / "o", made)
        _os.close(fd)
        assert raced and made == []  # not ours: a failure of ours would not remove it
        (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
        with pytest.raises(InputError, match="is a symbolic link"):
            _fs._open_or_make(parent, "dangling", tmp_path / "dangling", made)
    finally:
        _os.close(parent)


def test_a_stale_staging_folder_is_cleaned(tmp_path):
    out = tmp_path / "o"
    _first_render(out)
    stale = out / ".envbuilder-stage-killed"  # what a SIGKILL mid-write leaves
    (stale / "x").mkdir(parents=True)
    assert cli("render", "cpu", "-o", str(out)).returncode == 0
    assert not stale.exists() and leftovers(tmp_path) == []


def _hanging_index() -> tuple[socket.socket, int]:
    """A TCP server that accepts and never answers: uv waits on it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns = []

    def accept():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)

    threading.Thread(target=accept, daemon=True).start()
    return srv, srv.getsockname()[1]


def _uv_children(port: int) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"pip" == c for c in cmd) and any(f":{port}/".encode() in c for c in cmd):
            out.append(int(pid))
    return out


# timing-dependent (the signal must land while uv waits on the hanging index): seen to time out
# once in a full CI run under load; rerun before failing (pytest-rerunfailures, dev extra)
@pytest.mark.flaky(reruns=2)
@pytest.mark.network  # runs uv (against a local index that never answers)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_lock_child_uv_ends_with_envbuilder(tmp_path, sig):
    pytest.importorskip("uv")
    srv, port = _hanging_index()
    out = tmp_path / "o"
    p = start("lock", "cpu", "-o", str(out), "--pip-index-url", f"http://127.0.0.1:{port}/simple",
              "--torch-index-url", f"http://127.0.0.1:{port}/simple",
              UV_CACHE_DIR=str(tmp_path / "uv-cache"), UV_HTTP_TIMEOUT="300")
    deadline = time.time() + 60
    while not _uv_children(port) and time.time() < deadline:
        time.sleep(0.2)
    assert _uv_children(port), "uv did not start"
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    srv.close()
    assert p.returncode == 128 + sig, err
    assert "Traceback" not in err
    time.sleep(0.5)
    assert _uv_children(port) == []
    assert not out.exists() and leftovers(tmp_path) == []


# -- the manifest's text: laid out by _fs itself, byte for byte what json.dumps(indent=2) gives

_keys = st.text(max_size=8)
_leaf = st.one_of(st.text(max_size=12), st.integers(), st.booleans(), st.none(),
                  st.floats(allow_nan=False), st.lists(st.integers(), max_size=2))
_tree = st.recursive(_leaf, lambda c: st.dictionaries(_keys, c, max_size=4), max_leaves=20)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(_keys, _tree, max_size=5))
def test_manifest_layout_is_json_dumps_indent_2(doc):
    from envbuilder._fs import _dumps_indent2

    assert _dumps_indent2(doc) == json.dumps(doc, indent=2)


def test_write_tree_records_the_sha_of_what_it_wrote_and_of_what_extra_rewrote(tmp_path):
    import hashlib

    def rewrite(folder: Path) -> None:  # a writer that changes a file add() staged
        (folder / "a.txt").write_text("rewritten\n")
        (folder / "b.txt").write_text("extra\n")

    write_tree(tmp_path / "o", {"a.txt": "first\n", "é.txt": "ü\n"}, extra=rewrite)
    files = manifest(tmp_path / "o")
    for rel in ("a.txt", "b.txt", "é.txt"):
        assert files[rel]["sha256"] == hashlib.sha256((tmp_path / "o" / rel).read_bytes()).hexdigest()
    assert (tmp_path / "o" / "a.txt").read_text() == "rewritten\n"


def test_rerender_leaves_unchanged_files_in_place_and_replaces_the_rest(tmp_path):
    # a file that already holds the bytes and mode to be written is not created again (same
    # inode); a changed one, one with other permissions, or one with a second name is replaced
    out = tmp_path / "o"
    write_tree(out, {"same.txt": "a\n", "changes.txt": "old\n", "run.sh": "echo\n",
                     "linked.txt": "l\n"})
    before = {n: os.stat(out / n).st_ino for n in ("same.txt", "changes.txt", "run.sh", "linked.txt")}
    os.chmod(out / "run.sh", 0o700)
    os.link(out / "linked.txt", tmp_path / "other-name")
    write_tree(out, {"same.txt": "a\n", "changes.txt": "new\n", "run.sh": "echo\n",
                     "linked.txt": "l\n"})
    assert os.stat(out / "same.txt").st_ino == before["same.txt"]
    for n in ("changes.txt", "run.sh", "linked.txt"):
        assert os.stat(out / n).st_ino != before[n], n
    assert (out / "changes.txt").read_text() == "new\n"
    assert os.stat(out / "run.sh").st_mode & 0o777 == 0o755
    assert (tmp_path / "other-name").read_text() == "l\n"
    import hashlib

    for rel, ent in manifest(out).items():
        assert hashlib.sha256((out / rel).read_bytes()).hexdigest() == ent["sha256"], rel
        assert "prev" not in ent
    assert leftovers(out) == []


def test_an_unchanged_file_edited_before_commit_is_refused_not_kept(tmp_path):
    # add() saw the file unchanged; a user edit before commit() is caught as before
    out = tmp_path / "o"
    write_tree(out, {"f.txt": "mine\n"})
    with Outputs("render") as tx:
        tx.add(out, {"f.txt": "mine\n"}, group="render")
        (out / "f.txt").write_text("edited\n")
        with pytest.raises(InputError, match="changed since envbuilder wrote it"):
            tx.commit()
    assert (out / "f.txt").read_text() == "edited\n"


def test_extra_writer_sees_unchanged_files_in_the_staging_folder(tmp_path):
    out = tmp_path / "o"
    write_tree(out, {"f.txt": "x\n"})
    seen = []
    write_tree(out, {"f.txt": "x\n"}, extra=lambda folder: seen.append((folder / "f.txt").read_text()))
    assert seen == ["x\n"]
    assert (out / "f.txt").read_text() == "x\n"


def test_rewriting_an_unchanged_folder_touches_nothing(tmp_path):
    out = tmp_path / "o"
    files = {"a.txt": "a\n", "sub/run.sh": "echo\n"}
    write_tree(out, files)
    names = ["a.txt", "sub/run.sh", MANIFEST]
    before = {n: os.stat(out / n).st_ino for n in names}
    write_tree(out, files)
    assert {n: os.stat(out / n).st_ino for n in names} == before
    assert leftovers(out) == []
    write_tree(out, {"a.txt": "a\n"})  # sub/run.sh no longer written: removed, manifest new
    assert not (out / "sub").exists()
    assert os.stat(out / "a.txt").st_ino == before["a.txt"]
    assert sorted(manifest(out)) == ["a.txt"]


# ==============================================================================================
# Issue 34, mechanism H5: no link in any output path. Every destination is opened from the
# output root down, one component at a time with O_NOFOLLOW (_fs.open_folder): a link at any
# level (a target's folder, build/, .github, .github/workflows, init's files) is exit 2 and
# nothing is written outside. Each case fails on c7f5d41.
# ==============================================================================================

PROJECT = """requirements = "requirements.txt"
layouts = ["1x2"]

[[targets]]
name = "a"
target = "cpu"

[[targets]]
name = "b"
target = "cpu"
"""


def _project(tmp_path: Path) -> tuple[Path, Path]:
    proj, outside = tmp_path / "proj", tmp_path / "outside"
    proj.mkdir()
    outside.mkdir()
    (proj / "envbuilder.toml").write_text(PROJECT)
    (proj / "requirements.txt").write_text("")
    return proj, outside


def _refused_nothing_outside(p, outside: Path, *needles: str) -> None:
    assert_clean_failure(p, 2, *needles)
    assert list(outside.rglob("*")) == [], list(outside.rglob("*"))


@pytest.mark.parametrize("where", ["build/b", "build", "o/b", "o"])
def test_a_link_at_any_level_of_a_project_output_is_refused(tmp_path, where):
    proj, outside = _project(tmp_path)
    link = proj / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    args = ["render"] + (["-o", str(proj / "o")] if where.startswith("o") else [])
    _refused_nothing_outside(cli(*args, cwd=proj), outside, "symbolic link")
    assert leftovers(tmp_path) == []
    assert not (proj / "build" / "a").exists() or where.startswith("o")  # all or nothing


def test_a_link_under_render_all_and_bake_is_refused(tmp_path):
    out, outside = tmp_path / "o", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "cu121").symlink_to(outside)
    _refused_nothing_outside(cli("render", "--all", "--only", "cu121", "--only", "cpu", "-o", str(out)),
                             outside, "symbolic link")
    _refused_nothing_outside(cli("bake", "--all", "--only", "cu121", "--only", "cpu", "-o", str(out)),
                             outside, "symbolic link")
    assert sorted(x.name for x in out.iterdir()) == ["cu121"]


def test_a_link_to_an_identical_copy_of_an_output_folder_is_refused(tmp_path):
    """An unchanged file is left in place after one check through descriptors: a folder of the
    output swapped for a link to a byte-identical copy elsewhere still counts as in the way,
    and nothing outside is written or counted as envbuilder's."""
    out, outside = tmp_path / "o", tmp_path / "outside"
    _first_render(out)
    outside.mkdir()
    (out / "jobs").rename(outside / "jobs")
    before = snapshot(outside)
    (out / "jobs").symlink_to(outside / "jobs", target_is_directory=True)
    assert_clean_failure(cli("render", "cu118", "-o", str(out)), 2, "in the way")
    assert snapshot(outside) == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("where", [".github", ".github/workflows"])
def test_a_link_on_the_way_of_the_ci_workflow_is_refused(tmp_path, where):
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    link = repo / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    _refused_nothing_outside(cli("ci", "--github", "--registry", "ghcr.io/acme/ml", "-o", str(repo)),
                             outside, "symbolic link")


def test_output_at_a_dangling_link_is_2(tmp_path):
    out = tmp_path / "o"
    out.symlink_to(tmp_path / "nowhere")
    assert_clean_failure(cli("render", "cpu", "-o", str(out)), 2, "symbolic link")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("name", ["requirements.txt", "envbuilder.toml"])
def test_init_writes_through_no_link(tmp_path, name):
    proj = tmp_path / "p"
    proj.mkdir()
    (proj / name).symlink_to(tmp_path / "elsewhere.txt")  # dangling
    p = cli("init", "--driver", "550.54.15", "--gpus-per-node", "4", cwd=proj)
    assert_clean_failure(p, 2, name)
    assert not (tmp_path / "elsewhere.txt").exists()
    assert sorted(x.name for x in proj.iterdir()) == [name]


def test_init_on_a_full_disk_leaves_nothing(tmp_path):
    with tmpfs(tmp_path / "small", "64k") as small:
        fill(small)
        p = cli("init", "--driver", "550.54.15", "--gpus-per-node", "4", cwd=small)
        assert_clean_failure(p, 1, "space")
        assert sorted(x.name for x in small.iterdir()) == ["filler.bin"]


@pytest.mark.parametrize("kind", ["link", "dangling-link", "folder"])
def test_the_sif_record_is_written_through_no_link(tmp_path, kind):
    """build --sif PATH keeps a record beside the SIF (PATH.envbuilder.json): a link there is
    refused before anything is built, never written through (an apptainer stand-in writes the
    SIF; no engine is needed)."""
    from envbuilder.api import make_spec, resolve_target
    from envbuilder.errors import InputError
    from envbuilder.run.apptainer import build_sif
    from envbuilder.run.build import BuildOptions, prepare_context

    fake = tmp_path / "apptainer"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in *.sif) out="$a";; esac; done\n'
                    'echo SIF > "$out"\n')
    fake.chmod(0o755)
    ctx, plan = prepare_context(make_spec("cpu"), resolve_target("cpu"), BuildOptions(),
                                tmp_path / "ctx")
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    out.mkdir()
    record = out / "c.sif.envbuilder.json"
    if kind == "link":
        victim.write_text("mine\n")
        record.symlink_to(victim)
    elif kind == "dangling-link":
        record.symlink_to(victim)
    else:
        record.mkdir()
    with pytest.raises(InputError, match="is a link or not a file") as e:
        build_sif([str(fake)], plan, ctx, out / "c.sif")
    assert e.value.exit_code == 2
    assert (victim.read_text() == "mine\n") if kind == "link" else not victim.exists()
    assert sorted(os.listdir(out)) == ["c.sif.envbuilder.json"]  # no SIF, no work folder
    # without anything in the way: the SIF and its record, a regular file
    record.unlink() if kind != "folder" else record.rmdir()
    built = build_sif([str(fake)], plan, ctx, out / "c.sif")
    assert not built.cached and not record.is_symlink() and record.is_file()
    assert json.loads(record.read_text())["written_by"] == "envbuilder"
    assert build_sif([str(fake)], plan, ctx, out / "c.sif").cached
