"""The matrix cache (core/matrix_cache.py) and the YAML loaders.

No timing here (benchmarks/render.py measures): these tests check that the caches change
nothing but time. Output is byte-identical with and without them; a stale entry (the matrix
edited), a corrupt entry and an unwritable cache folder are handled; two first runs at once
both succeed and leave a valid entry.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envbuilder import api
from envbuilder.core import matrix as matrix_mod
from envbuilder.core import matrix_cache
from envbuilder.core.matrix import load_matrix
from envbuilder.errors import MatrixError

ROOT = Path(__file__).resolve().parents[1]
TARGET = "cu118"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache folder of our own (XDG_CACHE_HOME), the cache switched on."""
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv("ENVBUILDER_NO_CACHE", raising=False)
    # these tests are about the folder: the process's own memo of loaded matrices is off
    monkeypatch.setattr(matrix_mod, "_LOADED", {})
    monkeypatch.setattr(matrix_mod, "_keep", lambda key, m: m)
    return home / "envbuilder"


@pytest.fixture
def matrix_copy(tmp_path) -> Path:
    m = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrices", m)
    return m


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _render(out: Path) -> dict[str, bytes]:
    api.render_target(TARGET, out)
    return _tree(out)


def test_output_identical_without_cold_and_warm_cache(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("ENVBUILDER_NO_CACHE", "1")
    plain = _render(tmp_path / "plain")
    assert not cache.exists()  # switched off: nothing written
    monkeypatch.delenv("ENVBUILDER_NO_CACHE")
    cold = _render(tmp_path / "cold")
    digest = load_matrix().digest
    assert matrix_cache.load(digest) is not None  # the cold run left an entry
    assert not (cache / "templates").exists()  # no bytecode cache: nothing that runs on load
    warm = _render(tmp_path / "warm")
    assert plain == cold == warm
    assert len(plain) > 10


def test_cached_matrix_equals_loaded(cache, matrix_copy):
    first = load_matrix(matrix_copy)
    hit = matrix_cache.load(first.digest)
    assert hit is not None and hit == first
    second = load_matrix(matrix_copy)
    assert second == first and second.path == matrix_copy


def test_one_process_loads_the_same_files_once(tmp_path, monkeypatch, matrix_copy):
    """render --all and a project's targets share one Matrix; an edit is a new one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("ENVBUILDER_NO_CACHE", raising=False)
    monkeypatch.setattr(matrix_mod, "_LOADED", {})
    first = load_matrix(matrix_copy)
    assert load_matrix(matrix_copy) is first
    assert load_matrix(matrix_copy.parent / "matrix") is first  # the same folder, spelt again
    f = matrix_copy / "targets.yaml"
    f.write_text(f.read_text() + "\n# edited\n")
    edited = load_matrix(matrix_copy)
    assert edited is not first and edited.digest != first.digest
    monkeypatch.setenv("ENVBUILDER_NO_CACHE", "1")  # off: every call loads the files
    assert load_matrix(matrix_copy) is not load_matrix(matrix_copy)


def test_cache_entry_keeps_the_callers_path(cache, matrix_copy, tmp_path):
    load_matrix(matrix_copy)
    other = tmp_path / "other"
    shutil.copytree(matrix_copy, other)
    assert load_matrix(other).path == other  # same digest, the entry's path is not reused


def test_stale_cache_matrix_edited(cache, matrix_copy):
    before = load_matrix(matrix_copy)
    f = matrix_copy / "targets.yaml"
    text = f.read_text()
    old = before.targets[0].description
    assert old and old in text
    f.write_text(text.replace(old, "edited description", 1))
    after = load_matrix(matrix_copy)
    assert after.digest != before.digest
    assert after.targets[0].description == "edited description"
    assert matrix_cache.load(after.digest) is not None  # rebuilt under the new digest
    assert matrix_cache.load(before.digest) is not None  # the old one is just another digest


def test_edit_that_breaks_the_matrix_is_still_refused(cache, matrix_copy):
    load_matrix(matrix_copy)  # a valid entry exists for the old files
    f = matrix_copy / "cuda.yaml"
    f.write_text(f.read_text() + "\nunknown_key: 1\n")
    with pytest.raises(MatrixError, match="unknown_key"):
        load_matrix(matrix_copy)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped", "empty", "other-digest"])
def test_corrupt_cache_entry_is_a_miss(cache, matrix_copy, damage):
    good = load_matrix(matrix_copy)
    entry = matrix_cache.entry_path(good.digest)
    data = entry.read_bytes()
    if damage == "garbage":
        entry.write_bytes(b"not a cache entry at all")
    elif damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        i = len(data) - 100
        entry.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:  # a whole, well-formed entry of another matrix under this name
        f = matrix_copy / "targets.yaml"
        f.write_text(f.read_text() + "\n# another digest\n")
        other = load_matrix(matrix_copy)
        f.write_text(f.read_text().replace("\n# another digest\n", ""))
        shutil.copyfile(matrix_cache.entry_path(other.digest), entry)
    assert matrix_cache.load(good.digest) is None
    again = load_matrix(matrix_copy)
    assert again == good
    assert matrix_cache.load(good.digest) == good  # rewritten whole


def test_entry_writable_by_others_is_not_trusted(cache, matrix_copy):
    good = load_matrix(matrix_copy)
    entry = matrix_cache.entry_path(good.digest)
    os.chmod(entry, 0o666)
    assert matrix_cache.load(good.digest) is None
    assert load_matrix(matrix_copy) == good


def test_unwritable_cache_folder_still_works(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would go\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # mkdir fails, even as root
    monkeypatch.delenv("ENVBUILDER_NO_CACHE", raising=False)
    out = _render(tmp_path / "out")
    monkeypatch.setenv("ENVBUILDER_NO_CACHE", "1")
    assert _render(tmp_path / "plain") == out
    assert blocker.read_text() == "a file where the cache folder would go\n"


def test_two_concurrent_first_runs(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), PYTHONPATH=str(ROOT))
    env.pop("ENVBUILDER_NO_CACHE", None)
    cmd = [sys.executable, "-c", "from envbuilder.cli import main; main()", "render", TARGET]
    procs = [subprocess.Popen(cmd + ["-o", str(tmp_path / f"out{i}")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in (1, 2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    assert _tree(tmp_path / "out1") == _tree(tmp_path / "out2")
    folder = tmp_path / "xdg" / "envbuilder"
    entries = list(folder.glob("matrix-*.json"))
    assert len(entries) == 1 and not list(folder.glob(".*.tmp"))
    code = ("import sys; from envbuilder.core import matrix_cache; from envbuilder.core.matrix "
            "import load_matrix; sys.exit(0 if matrix_cache.load(load_matrix().digest) else 1)")
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


# -- the YAML loaders --------------------------------------------------------------------------

LOADERS = [matrix_mod._PyUniqueKeyLoader, matrix_mod._UniqueKeyLoader]


def test_c_loader_in_use_where_libyaml_is():
    if getattr(yaml, "__with_libyaml__", False):
        assert issubclass(matrix_mod._UniqueKeyLoader, yaml.CSafeLoader)
    assert not issubclass(matrix_mod._PyUniqueKeyLoader, getattr(yaml, "CSafeLoader", ()))


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "matrices").glob("*.yaml")))
def test_loaders_agree_on_the_matrix(name):
    text = (ROOT / "matrices" / name).read_text()
    results = [matrix_mod._load_yaml(text, cls) for cls in LOADERS]
    assert results[0] == results[1] == yaml.safe_load(text)


@pytest.mark.parametrize("loader", LOADERS, ids=["python", "libyaml"])
@pytest.mark.parametrize("text, needle", [
    ("a: 1\nb: 2\na: 3\n", "duplicate key 'a'"),
    ("x: &a [1, 2]\ny: *a\n", "aliases"),
    ("a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n", "aliases"),
    ("a: &a [*a]\n", "aliases"),
])
def test_both_loaders_refuse_duplicates_and_aliases(loader, text, needle):
    with pytest.raises(yaml.YAMLError, match=needle):
        matrix_mod._load_yaml(text, loader)


def test_pure_python_fallback_loads_the_matrix(cache, monkeypatch, matrix_copy):
    monkeypatch.setenv("ENVBUILDER_NO_CACHE", "1")
    with_c = load_matrix(matrix_copy)
    monkeypatch.setattr(matrix_mod, "_UniqueKeyLoader", matrix_mod._PyUniqueKeyLoader)
    assert load_matrix(matrix_copy) == with_c


# -- a cache entry is data, never code ------------------------------------------------------------

def test_entry_is_json_with_a_format_version(cache, matrix_copy):
    import json

    good = load_matrix(matrix_copy)
    entry = matrix_cache.entry_path(good.digest)
    assert entry.suffix == ".json"
    head, _, payload = entry.read_bytes().partition(b"\n")
    header = json.loads(head)
    assert header["format"] == "envbuilder-matrix-cache"
    assert header["version"] == matrix_cache.FORMAT_VERSION
    assert json.loads(payload)["raw"]["cuda.yaml"]["toolkits"]


def test_other_format_version_is_rebuilt(cache, matrix_copy):
    import json

    good = load_matrix(matrix_copy)
    entry = matrix_cache.entry_path(good.digest)
    head, _, payload = entry.read_bytes().partition(b"\n")
    header = json.loads(head)
    header["version"] = matrix_cache.FORMAT_VERSION + 1
    entry.write_bytes(json.dumps(header).encode() + b"\n" + payload)
    assert matrix_cache.load(good.digest) is None  # a miss...
    assert load_matrix(matrix_copy) == good
    assert json.loads(entry.read_bytes().partition(b"\n")[0])["version"] == \
        matrix_cache.FORMAT_VERSION  # ...rebuilt and rewritten


def test_a_pickle_in_the_cache_never_runs(cache, matrix_copy, tmp_path):
    """The old format was a pickle: an entry planted by someone who can write the cache folder
    ran code on load. Now a pickle (of the old layout, under the old and the new name) is a
    miss, and its payload never runs."""
    import hashlib
    import pickle

    good = load_matrix(matrix_copy)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    payload = pickle.dumps(Evil())
    old = b"envbuilder-matrix-cache 1\n" + hashlib.sha256(payload).digest() + payload
    entry = matrix_cache.entry_path(good.digest)
    entry.write_bytes(old)
    entry.with_suffix(".pickle").write_bytes(old)
    assert load_matrix(matrix_copy) == good
    assert not marker.exists()
    p = subprocess.run([sys.executable, "-m", "envbuilder", "render", TARGET, "-o",
                        str(tmp_path / "o"), "--matrix", str(matrix_copy)],
                       env=dict(os.environ, XDG_CACHE_HOME=str(cache.parent),
                                PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert not marker.exists()


def test_fifo_in_place_of_an_entry_is_a_miss(cache, matrix_copy, tmp_path):
    good = load_matrix(matrix_copy)
    entry = matrix_cache.entry_path(good.digest)
    entry.unlink()
    os.mkfifo(entry)
    p = subprocess.run([sys.executable, "-m", "envbuilder", "resolve", TARGET, "--matrix",
                        str(matrix_copy)],
                       env=dict(os.environ, XDG_CACHE_HOME=str(cache.parent),
                                PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                       timeout=120)  # a hang guard: the FIFO has no writer
    assert p.returncode == 0, p.stderr
