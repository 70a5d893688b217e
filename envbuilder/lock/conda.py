"""Conda environments for a stack: ``environment.yml`` and ``conda-lock.yml`` (lock --conda).

What to call:

* ``environment_yml(stack, lock_path=None, *, channels=("conda-forge",)) -> str``: conda for
  Python and the system libraries (a C/C++ compiler when a layer compiles), a ``pip:``
  section with every PyPI wheel ``==``-pinned from ``requirements.lock`` (or the top-level
  requirements without a lock) and PyTorch's index when the stack needs it.
* ``write_conda(stack, out_dir, *, lock_path, channels=("conda-forge",),
  platform="linux-64", solver="auto", pip_wheels=None) -> CondaReport``: writes
  ``environment.yml`` and ``conda-lock.yml`` (conda-lock's v1 format) into ``out_dir``.
  ``solver="conda-lock"`` runs conda-lock's CLI (it needs conda, mamba or micromamba and
  reachable channels) on the conda part; ``"rattler"`` solves it with py-rattler's solver
  (works offline against a ``file://`` channel); ``"auto"`` takes conda-lock when a conda
  executable is on the PATH, else rattler. The pip packages come from ``requirements.lock``
  (manager ``pip``): ``pip_wheels`` maps package name -> (wheel URL, sha256); by default it is
  computed with ``uv pip compile --format pylock.toml --no-deps`` of the locked pins (the
  wheel for the stack's Python and platform), and every sha256 must be one the lock allows.
  The file is validated with conda-lock's own models before it is written.

conda-lock and py-rattler are the optional extra ``conda``: MissingExtraError when absent.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from envbuilder.errors import IncompatibleError, InputError, MissingExtraError, OperationError
from envbuilder.lock.entries import LOCK_NAME, read_lock
from envbuilder.lock.uv import PLATFORM
from envbuilder.lock.uv import compile as uv_compile
from envbuilder.core.resolve import PYPI, Stack
from envbuilder.render.yamlemit import dump

ENV_NAME = "environment.yml"
CONDA_LOCK_NAME = "conda-lock.yml"


@dataclass
class CondaReport:
    environment: str
    lock: str
    solver: str
    conda_packages: dict[str, str] = field(default_factory=dict)
    pip_packages: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"environment": self.environment, "lock": self.lock, "solver": self.solver,
                "conda_packages": dict(self.conda_packages),
                "pip_packages": dict(self.pip_packages)}


def _need(module: str, dist: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(dist, "conda") from None


# -- environment.yml ---------------------------------------------------------------------------

def conda_specs(stack: Stack) -> list[str]:
    """The conda part: Python (the stack's minor) and pip; compilers when a layer builds."""
    specs = [f"python {stack.python}.*", "pip"]
    if stack.compiles:
        specs.append("cxx-compiler")
    return specs


def _env_spec(spec: str) -> str:
    """'python 3.10.*' -> 'python=3.10' (environment.yml's spelling)."""
    name, _, ver = spec.partition(" ")
    if not ver:
        return name
    return f"{name}={ver.removesuffix('.*')}" if ver.endswith(".*") else f"{name}{ver}"


def _lock_text(path: str | Path) -> str:
    """The lock through the one capped reader (a regular file, never through a link)."""
    from envbuilder.core.readfile import read_text_capped

    return read_text_capped(path, "lock", limit=64 << 20, follow_links=False)


def environment_yml(stack: Stack, lock_path: str | Path | None = None, *,
                    channels: Sequence[str] = ("conda-forge",)) -> str:
    if lock_path is not None:
        pins = [f"{p.name}=={p.version}" for p in read_lock(_lock_text(lock_path))]
    else:
        from envbuilder.lock.inputs import input_requirements

        pins = input_requirements(stack)
    pip: list[str] = []
    if stack.torch_index != PYPI:
        pip += [f"--index-url {stack.torch_index}", f"--extra-index-url {PYPI}"]
    pip += pins
    doc = {
        "name": f"envbuilder-{stack.tag}",
        "channels": [_channel_url(c) for c in channels] + ["nodefaults"],
        "dependencies": [_env_spec(s) for s in conda_specs(stack)] + [{"pip": pip}],
    }
    head = (f"# {ENV_NAME} for {stack.target} ({stack.tag}), made by envbuilder lock --conda.\n"
            f"# conda provides Python and system libraries, pip the PyPI wheels pinned in "
            f"{LOCK_NAME}.\n# CUDA itself comes from the driver and the torch wheels.\n")
    return head + dump(doc)


# -- solving the conda part --------------------------------------------------------------------

def _virtual_packages(stack: Stack):
    rattler = _need("rattler", "py-rattler")

    def vp(name: str, version: str, build: str = "0"):
        b = rattler.BuildString(build) if hasattr(rattler, "BuildString") else build
        return rattler.GenericVirtualPackage(rattler.PackageName(name), rattler.Version(version), b)

    major, minor = PLATFORM.rsplit("_", 2)[-2:]  # x86_64-manylinux_2_28 -> glibc 2.28
    vps = [vp("__unix", "0"), vp("__linux", "5.4"), vp("__glibc", f"{major}.{minor}"),
           vp("__archspec", "1", "x86_64")]
    if stack.cuda:
        vps.append(vp("__cuda", stack.cuda))
    return vps


def _hex(v) -> str | None:
    if v is None:
        return None
    return v.hex() if isinstance(v, (bytes, bytearray)) else str(v)


def solve_rattler(specs: Sequence[str], channels: Sequence[str], *, platform: str = "linux-64",
                  stack=None) -> list[dict]:
    """Solve conda specs with py-rattler; return conda-lock v1 package entries."""
    rattler = _need("rattler", "py-rattler")
    chans = [rattler.Channel(_channel_url(c)) for c in channels]
    kw = {"virtual_packages": _virtual_packages(stack)} if stack is not None else {}

    async def go():
        return await rattler.solve(chans, list(specs), platforms=[platform, "noarch"], **kw)

    try:
        records = asyncio.run(go())
    except Exception as e:  # rattler raises its own exception types
        msg = str(e).strip().splitlines()
        first = msg[0] if msg else type(e).__name__
        kind = type(e).__name__
        if "Solver" in kind or "Unsolvable" in kind or "cannot be installed" in str(e) \
                or "No candidates" in str(e):
            raise IncompatibleError(f"the conda packages {', '.join(specs)} cannot be solved "
                                    f"from {', '.join(channels)}: {first}", details=msg) from None
        raise OperationError(f"conda solve from {', '.join(channels)} failed ({kind}): {first}; "
                             f"use a reachable channel (a mirror or a file:// channel)",
                             step="lock", details=msg) from None
    out = []
    for r in records:
        deps: dict[str, str] = {}
        for d in r.depends:
            name, _, spec = d.strip().partition(" ")
            deps[name] = spec.strip()
        out.append({
            "name": r.name.normalized,
            "version": str(r.version),
            "manager": "conda",
            "platform": platform,
            "dependencies": deps,
            "url": str(r.url),
            "hash": {k: v for k, v in (("md5", _hex(r.md5)), ("sha256", _hex(r.sha256))) if v},
            "build": str(r.build),
            "category": "main",
            "optional": False,
        })
    return sorted(out, key=lambda p: p["name"])


_CHANNEL_RE = re.compile(r"^[A-Za-z0-9/.~][A-Za-z0-9_.:/@+~%-]{0,511}\Z")


def check_channel(c: str) -> str:
    """A channel name (conda-forge), URL or local folder: one line, no spaces or quotes."""
    if not isinstance(c, str) or _CHANNEL_RE.fullmatch(c) is None:
        shown = c if len(c) <= 80 else c[:80] + "..."
        raise InputError(f"--conda-channel {shown!r} is not a channel: give a name "
                         f"(conda-forge), a URL or a folder, without spaces or newlines")
    return c


def _channel_url(c: str) -> str:
    p = Path(c)
    if "://" not in c and p.is_absolute() and p.exists():
        return p.as_uri()
    return c


def solve_conda_lock(env_file: Path, platform: str, workdir: Path) -> list[dict]:
    """Lock the conda part with conda-lock's CLI; its packages as v1 entries."""
    _need("conda_lock", "conda-lock")
    from conda_lock.lockfile import parse_conda_lock_file

    out = workdir / "conda-only.lock.yml"
    exe = shutil.which("conda-lock")
    cmd = ([exe] if exe else ["python", "-m", "conda_lock"]) + [
        "lock", "--file", str(env_file), "--platform", platform, "--lockfile", str(out)]
    from envbuilder import _child

    try:  # the one child runner: output capped (its tail kept), a deadline, signals forwarded
        r = _child.run(cmd, timeout=1800, cap=8 << 20)
    except OSError as e:
        raise OperationError(f"cannot run conda-lock: {e}", step="lock") from None
    if r.timed_out:
        raise OperationError("conda-lock did not finish in 1800 s", step="lock")
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        raise OperationError(f"conda-lock failed: {lines[-1] if lines else r.returncode}",
                             step="lock", details=lines[-40:])
    lf = parse_conda_lock_file(out)
    return [{"name": p.name, "version": p.version, "manager": "conda", "platform": p.platform,
             "dependencies": dict(p.dependencies), "url": p.url,
             "hash": p.hash.model_dump(exclude_none=True), "build": p.build,
             "category": p.categories and sorted(p.categories)[0] or "main", "optional": False}
            for p in lf.package if p.manager == "conda"]


# -- the pip part ------------------------------------------------------------------------------

def pip_wheels_from_uv(lock_path: Path, stack: Stack, *, index_url: str | None = None,
                       extra_index_urls: Sequence[str] = (), uv: str | None = None,
                       work: Path | None = None) -> dict[str, tuple[str, str]]:
    """name -> (wheel or sdist URL, sha256) for the lock's pins, from uv's pylock.toml."""
    import tomllib

    pkgs = read_lock(_lock_text(lock_path))
    with tempfile.TemporaryDirectory(prefix=".envbuilder-pylock-", dir=work) as d:
        out = Path(d) / "pylock.toml"
        uv_compile(stack, [f"{p.name}=={p.version}" for p in pkgs], out, index_url=index_url,
                   extra_index_urls=extra_index_urls, uv=uv, mode=("--no-deps",))
        data = tomllib.loads(out.read_text("utf-8"))
    result: dict[str, tuple[str, str]] = {}
    for p in data.get("packages", []):
        files = list(p.get("wheels") or []) or ([p["sdist"]] if p.get("sdist") else [])
        if not files:
            continue
        f = files[0]
        result[p["name"]] = (f["url"], f["hashes"]["sha256"])
    return result


def pip_entries(lock_path: Path, wheels: Mapping[str, tuple[str, str]], platform: str
                ) -> list[dict]:
    from packaging.utils import canonicalize_name

    pkgs = read_lock(_lock_text(lock_path))
    wheels = {canonicalize_name(k): v for k, v in wheels.items()}
    children: dict[str, dict[str, str]] = {p.name: {} for p in pkgs}
    versions = {p.name: p.version for p in pkgs}
    for p in pkgs:
        for parent in p.via:
            if parent in children:
                children[parent][p.name] = f"=={versions[p.name]}"
    out = []
    for p in pkgs:
        if p.name not in wheels:
            raise OperationError(f"no wheel or sdist URL found for {p.name}=={p.version} "
                                 f"(needed for {CONDA_LOCK_NAME})", step="lock")
        url, sha = wheels[p.name]
        if f"sha256:{sha}" not in p.hashes:
            raise OperationError(f"{p.name}=={p.version}: the file {url} has sha256 {sha}, "
                                 f"which {LOCK_NAME} does not allow", step="lock")
        out.append({"name": p.name, "version": p.version, "manager": "pip",
                    "platform": platform, "dependencies": dict(sorted(children[p.name].items())),
                    "url": url, "hash": {"sha256": sha}, "category": "main", "optional": False})
    return out


# -- conda-lock.yml ----------------------------------------------------------------------------

def write_conda(stack: Stack, out_dir: str | Path, *, lock_path: str | Path,
                channels: Sequence[str] = ("conda-forge",), platform: str = "linux-64",
                solver: str = "auto", pip_wheels: Mapping[str, tuple[str, str]] | None = None,
                index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                uv: str | None = None) -> CondaReport:
    """Write environment.yml and conda-lock.yml for ``stack`` into ``out_dir`` (both or
    neither; only files envbuilder wrote are replaced)."""
    from envbuilder._fs import Outputs

    with Outputs("lock") as tx:
        files, report = conda_outputs(stack, out_dir, lock_path=lock_path, work=tx.scratch(out_dir),
                                      channels=channels, platform=platform, solver=solver,
                                      pip_wheels=pip_wheels, index_url=index_url,
                                      extra_index_urls=extra_index_urls, uv=uv)
        tx.add(out_dir, files, group="conda")
        tx.commit()
    return report


def conda_outputs(stack, out_dir: str | Path, *, lock_path: str | Path, work: Path,
                  channels: Sequence[str] = ("conda-forge",), platform: str = "linux-64",
                  solver: str = "auto", pip_wheels: Mapping[str, tuple[str, str]] | None = None,
                  index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                  uv: str | None = None) -> tuple[dict[str, str], CondaReport]:
    """environment.yml and conda-lock.yml for ``stack`` as {name: text} and the report naming
    them in ``out_dir``; nothing is written but scratch files in ``work``."""
    _need("conda_lock", "conda-lock")
    from conda_lock.lockfile.v1.models import Lockfile as LockfileV1

    if solver not in ("auto", "rattler", "conda-lock"):
        raise InputError(f"unknown conda solver {solver!r}: auto, rattler or conda-lock")
    lock_path = Path(lock_path)
    if not lock_path.is_file():
        raise InputError(f"no {LOCK_NAME} at {lock_path}: run envbuilder lock first")
    out = Path(out_dir)
    for c in channels:
        check_channel(c)
    env_text = environment_yml(stack, lock_path, channels=channels)
    specs = conda_specs(stack)
    if solver == "auto":
        has_conda = any(shutil.which(x) for x in ("micromamba", "mamba", "conda"))
        solver = "conda-lock" if has_conda else "rattler"
    if solver == "conda-lock":
        conda_only = work / ENV_NAME
        conda_only.write_text(dump({
            "channels": [_channel_url(c) for c in channels],
            "dependencies": [_env_spec(s) for s in specs]}, sort_keys=True), encoding="utf-8")
        conda_pkgs = solve_conda_lock(conda_only, platform, work)
    else:
        _need("rattler", "py-rattler")
        conda_pkgs = solve_rattler(specs, channels, platform=platform, stack=stack)
    if pip_wheels is None:
        pip_wheels = pip_wheels_from_uv(lock_path, stack, index_url=index_url,
                                        extra_index_urls=extra_index_urls, uv=uv, work=work)
    pip_pkgs = pip_entries(lock_path, pip_wheels, platform)
    lock_bytes = _lock_text(lock_path).encode("utf-8")
    content_hash = hashlib.sha256(env_text.encode() + b"\0" + lock_bytes).hexdigest()
    doc = {
        "version": 1,
        "metadata": {
            "content_hash": {platform: content_hash},
            "channels": [{"url": _channel_url(c), "used_env_vars": []} for c in channels],
            "platforms": [platform],
            "sources": [ENV_NAME, LOCK_NAME],
            "custom_metadata": {"envbuilder_target": stack.target,
                                "envbuilder_stack": stack.tag,
                                "envbuilder_matrix_digest": stack.matrix.digest,
                                "envbuilder_solver": solver},
        },
        "package": conda_pkgs + pip_pkgs,
    }
    body = dict(doc)
    body.pop("version")
    try:
        LockfileV1.model_validate(body)  # conda-lock's own model: refuse what it refuses
    except Exception as e:  # noqa: BLE001 - pydantic's ValidationError, or any error of conda-lock's model: a refusal
        raise OperationError(f"the {CONDA_LOCK_NAME} envbuilder made is not valid for "
                             f"conda-lock: {str(e).splitlines()[0]}", step="lock",
                             details=str(e).splitlines()) from None
    text = (f"# {CONDA_LOCK_NAME} for {stack.target} ({stack.tag}); install with\n"
            f"#   conda-lock install -n ENV {CONDA_LOCK_NAME}\n"
            + dump(doc))
    files = {ENV_NAME: env_text, CONDA_LOCK_NAME: text}
    return files, CondaReport(environment=str(out / ENV_NAME), lock=str(out / CONDA_LOCK_NAME),
                       solver=solver,
                       conda_packages={p["name"]: p["version"] for p in conda_pkgs},
                       pip_packages={p["name"]: p["version"] for p in pip_pkgs})
