"""envbuilder lock --conda: environment.yml and a conda-lock.yml that conda-lock's parser
accepts, solved offline with py-rattler against a conda channel built in tmp_path."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from envbuilder.api import resolve_target
from envbuilder.errors import IncompatibleError, MissingExtraError, OperationError
from envbuilder.lock.requirements import LOCK_NAME, read_lock
from envbuilder.lock.write import lock_stack

# found, not imported: importing conda-lock costs ~0.7 s of CPU, which every collection (every
# `pytest -k`) would pay; the one test that reads its models imports them itself
for _mod, _extra in (("rattler", "py-rattler"), ("conda_lock", "conda-lock")):
    if importlib.util.find_spec(_mod) is None:
        pytest.skip(f"the conda extra ({_extra}) is not installed", allow_module_level=True)

from envbuilder.lock.conda import (CONDA_LOCK_NAME, ENV_NAME, environment_yml, pip_entries,  # noqa: E402
                              solve_rattler, write_conda)

TARGET = "cu121-torch2.1-py310"


def _package(channel: Path, name: str, version: str, depends=(), build="0") -> None:
    """A tiny noarch conda package (.tar.bz2 with info/index.json and info/paths.json)."""
    index = {"name": name, "version": version, "build": build, "build_number": 0,
             "depends": list(depends), "subdir": "noarch", "noarch": "generic",
             "license": "MIT", "timestamp": 1700000000000}
    members = {"info/index.json": json.dumps(index).encode(),
               "info/paths.json": json.dumps({"paths": [], "paths_version": 1}).encode()}
    (channel / "noarch").mkdir(parents=True, exist_ok=True)
    with tarfile.open(channel / "noarch" / f"{name}-{version}-{build}.tar.bz2", "w:bz2") as t:
        for path, data in members.items():
            info = tarfile.TarInfo(path)
            info.size, info.mtime = len(data), 0
            t.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def channel(tmp_path_factory) -> Path:
    import asyncio
    import inspect

    from rattler.index import index_fs

    ch = tmp_path_factory.mktemp("channel")
    _package(ch, "python", "3.10.14", ["libzlib >=1.2", "__glibc >=2.17"])
    _package(ch, "python", "3.11.9", ["libzlib >=1.2"])
    _package(ch, "libzlib", "1.3.1")
    _package(ch, "pip", "24.0", ["python >=3.8"])
    (ch / "linux-64").mkdir()
    done = index_fs(ch)
    if inspect.iscoroutine(done):
        asyncio.run(done)
    assert (ch / "noarch" / "repodata.json").is_file()
    return ch


@pytest.fixture(scope="module")
def stack():
    return resolve_target(TARGET)


@pytest.fixture(scope="module")
def locked(uv_cache, stack, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("conda-lock")
    lock_stack(stack, out)
    return out


def test_environment_yml(stack, locked, channel):
    text = environment_yml(stack, locked / LOCK_NAME, channels=[str(channel)])
    doc = yaml.safe_load(text)
    deps = doc["dependencies"]
    assert "python=3.10" in deps and "pip" in deps
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    pins = {p.name: p.version for p in read_lock((locked / LOCK_NAME).read_text())}
    assert pip == [f"{n}=={v}" for n, v in pins.items()]  # every wheel, ==-pinned
    assert doc["channels"][0] == channel.as_uri()


def test_environment_yml_torch_index_and_compilers():
    st = resolve_target("cu118-hvd0.28")
    doc = yaml.safe_load(environment_yml(st))
    pip = next(d["pip"] for d in doc["dependencies"] if isinstance(d, dict))
    assert pip[0] == f"--index-url {st.torch_index}"
    assert f"torch=={st.torch.version}" in pip and f"horovod=={st.horovod.version}" in pip
    assert "cxx-compiler" in doc["dependencies"]


def test_conda_lock_round_trips_through_conda_lock(stack, locked, channel, uv_cache):
    from conda_lock.lockfile import parse_conda_lock_file
    from conda_lock.lockfile.v1.models import Lockfile as LockfileV1

    report = write_conda(stack, locked, lock_path=locked / LOCK_NAME, channels=[str(channel)],
                         solver="rattler")
    assert report.solver == "rattler"
    assert report.conda_packages == {"python": "3.10.14", "libzlib": "1.3.1", "pip": "24.0"}
    path = locked / CONDA_LOCK_NAME
    raw = yaml.safe_load(path.read_text())
    assert raw["version"] == 1
    LockfileV1.model_validate({k: v for k, v in raw.items() if k != "version"})
    lf = parse_conda_lock_file(path)  # conda-lock's own parser (v1 -> v2 models)
    conda = {p.name: p for p in lf.package if p.manager == "conda"}
    pip = {p.name: p for p in lf.package if p.manager == "pip"}
    assert set(conda) == {"python", "libzlib", "pip"}
    py = conda["python"]
    assert py.version == "3.10.14" and py.url.startswith(channel.as_uri())
    assert py.hash.md5 and len(py.hash.sha256) == 64 and "libzlib" in py.dependencies
    assert py.platform == "linux-64" and py.categories == {"main"}
    pins = {p.name: p for p in read_lock((locked / LOCK_NAME).read_text())}
    assert set(pip) == set(pins)
    torch = pip["torch"]
    assert torch.version == pins["torch"].version
    assert f"sha256:{torch.hash.sha256}" in pins["torch"].hashes
    assert torch.url.endswith(".whl") and "cp310" in torch.url
    assert "nvidia-nccl-cu12" in torch.dependencies
    assert (locked / ENV_NAME).is_file()
    assert sorted(p.name for p in locked.iterdir()) == sorted([LOCK_NAME, ENV_NAME, CONDA_LOCK_NAME,
                                                               ".envbuilder-output"])


def test_pip_entry_with_a_hash_the_lock_does_not_allow(stack, locked):
    pins = read_lock((locked / LOCK_NAME).read_text())
    wheels = {p.name: (f"https://example.org/{p.name}.whl", p.hashes[0].split(":")[1])
              for p in pins}
    assert len(pip_entries(locked / LOCK_NAME, wheels, "linux-64")) == len(pins)
    wheels["torch"] = ("https://example.org/torch.whl", "0" * 64)
    with pytest.raises(OperationError, match="does not allow"):
        pip_entries(locked / LOCK_NAME, wheels, "linux-64")


def test_unsolvable_conda_specs_are_exit_3(channel, stack):
    with pytest.raises(IncompatibleError) as e:
        solve_rattler(["python 3.12.*", "pip"], [str(channel)], stack=stack)
    assert e.value.exit_code == 3 and "python 3.12.*" in str(e.value)


def test_missing_conda_extra(stack, locked, monkeypatch):
    monkeypatch.setitem(sys.modules, "rattler", None)
    with pytest.raises(MissingExtraError, match=r"envbuilder\[conda\]"):
        write_conda(stack, locked, lock_path=locked / LOCK_NAME, channels=["/nonexistent"],
                    solver="rattler")
