"""Tests for ``envbuilder doctor``: recorded real hosts, the live host, a fake nvidia-smi."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import types
from pathlib import Path

import pytest

from envbuilder.diagnose.doctor import (
    Check,
    Probe,
    RecordedProbe,
    compute_capability_for,
    parse_nvidia_smi_text,
    parse_nvidia_smi_xml,
    parse_topology,
    run_doctor,
    select_interfaces,
)
from envbuilder.errors import InputError
from envbuilder.labels import StackFacts
from envbuilder.labels import read as stack_from_image_labels

HOSTS = Path(__file__).parent / "fixtures" / "hosts"

# CUDA 12.4 as the resolver would emit it (driver floors from the CUDA release notes).
STACK_124 = {
    "cuda": "12.4", "cuda_toolkit": "12.4.1",
    "driver_min": {"version": "550.54.15", "minor_compat": "525.60.13",
                   "source": "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"},
    "torch": "2.5.1",
    "torch_arch": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
}


def facts(**change) -> StackFacts:
    """STACK_124 with some fields changed, as doctor's typed input."""
    return StackFacts.from_mapping({**STACK_124, **change})


def by_name(checks: list[Check]) -> dict[str, Check]:
    names = [c.name for c in checks]
    assert len(names) == len(set(names)), names
    return {c.name: c for c in checks}


def statuses(checks: list[Check]) -> dict[str, str]:
    return {c.name: c.status for c in checks}


def host(name: str) -> RecordedProbe:
    return RecordedProbe(HOSTS / name)


# ---------------------------------------------------------------------------------------------
# Recorded hosts
# ---------------------------------------------------------------------------------------------

HEALTHY_H100 = {
    "driver": "ok", "gpus": "ok", "cuda-visible-devices": "ok", "persistence-mode": "ok",
    "mig-mode": "ok", "compute-mode": "ok", "topology": "ok", "fabric-manager": "ok",
    "shm": "ok", "infiniband": "ok", "memlock": "ok", "socket-ifname": "ok", "nccl-env": "ok",
    "container": "ok", "stack-driver": "ok", "stack-ranks": "ok", "stack-arch": "ok",
    "stack-rdma": "skip",  # STACK_124 does not say which RDMA user space it carries
    # driver 565.57.01: NVIDIA's support table names R565 among the branches past end of life
    "driver-support": "warn",
}


def test_every_fixture_host_documents_its_source() -> None:
    folders = [p for p in HOSTS.iterdir() if p.is_dir()]
    assert len(folders) >= 7
    for p in folders:
        src = (p / "SOURCE.md").read_text()
        # a public recording, a variant of one (BASE), or a host recorded by doctor --record
        assert "https://" in src or (p / "BASE").is_file() or "doctor --record" in src, p.name


def test_healthy_h100_host() -> None:
    checks = run_doctor(probe=host("hgx-h100-8gpu"), stack=facts(), nproc=8)
    assert statuses(checks) == HEALTHY_H100
    c = by_name(checks)
    assert c["driver"].value == "565.57.01"
    assert c["gpus"].value == 8 and "8 x NVIDIA H100 80GB HBM3" in c["gpus"].detail
    assert c["topology"].value == "NV18"
    assert "28 GPU pairs" in c["topology"].detail
    assert c["infiniband"].value == "9/9 active"
    assert c["stack-arch"].value == "sm_90"
    assert all(set(x.to_dict()) == {"name", "status", "value", "detail", "fix"} for x in checks)


def test_old_driver_is_warned_as_minor_version_compat() -> None:
    c = by_name(run_doctor(probe=host("hgx-h100-old-driver"), stack=facts(), nproc=8))
    assert c["driver"].status == "ok" and c["driver"].value == "535.104.05"
    assert c["stack-driver"].status == "warn"
    assert "535.104.05" in c["stack-driver"].detail and "550.54.15" in c["stack-driver"].detail
    assert "cuda-compat" in c["stack-driver"].fix
    # the same host against a stack its driver fully supports
    stack = facts(cuda="12.2", driver_min={"version": "535.54.03", "minor_compat": "525.60.13"})
    assert by_name(run_doctor(probe=host("hgx-h100-old-driver"), stack=stack))[
        "stack-driver"].status == "ok"


def test_driver_below_minor_compat_fails_on_t4() -> None:
    checks = run_doctor(probe=host("aws-t4-old-driver"), stack=facts(), nproc=1)
    c = by_name(checks)
    assert c["driver"].value == "515.105.01"
    assert c["stack-driver"].status == "fail"
    assert "525.60.13" in c["stack-driver"].detail
    assert c["persistence-mode"].status == "warn"  # the recording says Disabled
    assert c["stack-arch"].status == "ok" and c["stack-arch"].value == "sm_75"
    assert c["stack-ranks"].status == "ok"
    assert c["topology"].status == "skip" and c["memlock"].status == "skip"


def test_small_shm_in_docker_on_pcie_box() -> None:
    checks = run_doctor(probe=host("pcie-4090x8-small-shm"), stack=facts(), nproc=8)
    c = by_name(checks)
    assert c["shm"].status == "fail" and c["shm"].value == 64 * 1024 * 1024
    assert "--shm-size" in c["shm"].fix
    assert c["container"].status == "ok" and c["container"].value == "container"
    assert c["topology"].status == "warn" and c["topology"].value == "SYS"
    assert "nvidia-smi topo -p2p r" in c["topology"].fix
    assert "NCCL_P2P_DISABLE=1 only if" in c["topology"].fix
    assert c["fabric-manager"].status == "skip"
    assert c["stack-driver"].status == "warn"  # 535.154.05 < 550.54.15
    # sm_89 served by the sm_86 cubins (same major)
    assert c["stack-arch"].status == "ok" and c["stack-arch"].value == "sm_89"


def test_shm_thresholds_depend_on_job_size(tmp_path: Path) -> None:
    base = HOSTS / "aws-t4-old-driver"

    def shm_status(size: int, nproc: int) -> str:
        d = tmp_path / f"h{size}_{nproc}"
        d.mkdir()
        (d / "BASE").write_text(str(base.resolve()))
        (d / "shm.json").write_text(f'{{"total_bytes": {size}, "free_bytes": {size}}}')
        return by_name(run_doctor(probe=RecordedProbe(d), nproc=nproc))["shm"].status

    assert shm_status(64 * 2**20, 1) == "warn"
    assert shm_status(64 * 2**20, 2) == "fail"
    assert shm_status(512 * 2**20, 2) == "warn"
    assert shm_status(2 * 2**30, 8) == "ok"


def test_socket_ifname_naming_missing_interface_fails() -> None:
    c = by_name(run_doctor(probe=host("hgx-h100-bad-ifname")))
    assert c["socket-ifname"].status == "fail"
    assert "eth0" in c["socket-ifname"].detail
    assert "bond0" in c["socket-ifname"].fix  # lists the interfaces that do exist


def test_fewer_visible_gpus_than_ranks() -> None:
    c = by_name(run_doctor(probe=host("hgx-h100-4-visible"), stack=facts(), nproc=8))
    assert c["cuda-visible-devices"].status == "ok"
    assert c["stack-ranks"].status == "fail" and c["stack-ranks"].value == 4
    assert "8 ranks" in c["stack-ranks"].detail
    assert c["topology"].detail.startswith("all 6 GPU pairs")  # only the visible GPUs


def test_nproc_argument_overrides_stack() -> None:
    c = by_name(run_doctor(probe=host("hgx-h100-8gpu"), stack=facts(), nproc=12))
    assert c["stack-ranks"].status == "fail" and "12 ranks" in c["stack-ranks"].detail
    c = by_name(run_doctor(probe=host("hgx-h100-8gpu"), nproc=8))
    assert c["stack-ranks"].status == "ok" and "stack-driver" not in c


def test_ib_host_with_low_memlock_fails() -> None:
    c = by_name(run_doctor(probe=host("hgx-h100-memlock-low")))
    assert c["memlock"].status == "fail" and c["memlock"].value == 65536
    assert "memlock" in c["memlock"].fix
    # the same limit on a host without RDMA devices does not matter
    assert by_name(run_doctor(probe=host("aws-t4-old-driver")))["memlock"].status == "skip"


def test_arch_missing_from_torch_build_fails() -> None:
    arch = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"]
    c = by_name(run_doctor(probe=host("hgx-h100-8gpu"), stack=facts(torch_arch=arch)))[
        "stack-arch"]
    assert c.status == "fail" and "sm_90" in c.detail
    ptx = facts(torch_arch=arch + ["compute_86"])
    c = by_name(run_doctor(probe=host("hgx-h100-8gpu"), stack=ptx))["stack-arch"]
    assert c.status == "warn" and "PTX" in c.detail
    arch_a = facts(torch_arch=["sm_80", "sm_90a"])  # sm_90a cubins run on exactly 9.0
    assert by_name(run_doctor(probe=host("hgx-h100-8gpu"), stack=arch_a))[
        "stack-arch"].status == "ok"
    # cubins run on later minors of the same major only: sm_70 serves a T4 (7.5), sm_80 does not
    t4 = host("aws-t4-old-driver")
    assert by_name(run_doctor(probe=t4, stack=facts(torch_arch=["sm_70"])))[
        "stack-arch"].status == "ok"
    assert by_name(run_doctor(probe=t4, stack=facts(torch_arch=["sm_80", "compute_80"])))[
        "stack-arch"].status == "fail"


def test_exclusive_process_with_several_ranks_per_gpu_fails(tmp_path: Path) -> None:
    xml = (HOSTS / "aws-t4-old-driver" / "nvidia-smi-q-x.xml").read_text()
    xml = xml.replace("<compute_mode>Default</compute_mode>",
                      "<compute_mode>Exclusive_Process</compute_mode>")
    d = tmp_path / "excl"
    d.mkdir()
    (d / "BASE").write_text(str((HOSTS / "aws-t4-old-driver").resolve()))
    (d / "nvidia-smi-q-x.xml").write_text(xml)
    assert by_name(run_doctor(probe=RecordedProbe(d), nproc=2))["compute-mode"].status == "fail"
    assert by_name(run_doctor(probe=RecordedProbe(d), nproc=1))["compute-mode"].status == "warn"


def test_fabric_not_completed_fails(tmp_path: Path) -> None:
    q = (HOSTS / "hgx-h100-8gpu" / "nvidia-smi-q.txt").read_text()
    q = q.replace("State                             : Completed",
                  "State                             : In Progress", 1)
    d = tmp_path / "fab"
    d.mkdir()
    (d / "BASE").write_text(str((HOSTS / "hgx-h100-8gpu").resolve()))
    (d / "nvidia-smi-q.txt").write_text(q)
    c = by_name(run_doctor(probe=RecordedProbe(d)))["fabric-manager"]
    assert c.status == "fail" and c.value == "In Progress" and "802" in c.detail


@pytest.mark.parametrize("cvd,status,visible", [
    ("0,7", "ok", "0, 7"),
    ("GPU-33135771", "ok", "7"),          # unique UUID prefix, as CUDA accepts
    ("0,8", "fail", None),                # index out of range
    ("GPU-00000000-dead-beef", "fail", None),
    ("1,1", "fail", None),
    ("-1", "warn", None),                 # hidden on purpose; no stack says GPUs are needed
])
def test_cuda_visible_devices(tmp_path: Path, cvd: str, status: str, visible: str | None) -> None:
    d = tmp_path / "cvd"
    d.mkdir()
    (d / "BASE").write_text(str((HOSTS / "hgx-h100-8gpu").resolve()))
    (d / "env.json").write_text('{"CUDA_VISIBLE_DEVICES": "%s"}' % cvd)
    c = by_name(run_doctor(probe=RecordedProbe(d)))["cuda-visible-devices"]
    assert c.status == status, c.detail
    if visible:
        assert c.detail.endswith(f"visible: {visible}")


# ---------------------------------------------------------------------------------------------
# Parsers and helpers
# ---------------------------------------------------------------------------------------------

def test_parse_recorded_outputs() -> None:
    inv = parse_nvidia_smi_text((HOSTS / "hgx-h100-8gpu" / "nvidia-smi-q.txt").read_text())
    assert inv.driver == "565.57.01" and inv.cuda == "12.7" and len(inv.gpus) == 8
    assert inv.gpus[7]["uuid"] == "GPU-33135771-a848-ece1-b61e-489e221d663c"
    assert inv.gpus[7]["bus_id"] == "00000000:DB:00.0"
    assert inv.gpus[0]["fabric_state"] == "Completed"
    xml = parse_nvidia_smi_xml((HOSTS / "aws-t4-old-driver" / "nvidia-smi-q-x.xml").read_text())
    assert xml.driver == "515.105.01" and xml.gpus[0]["name"] == "Tesla T4"
    assert xml.gpus[0]["mig"] is None  # "N/A"
    with pytest.raises(ValueError):
        parse_nvidia_smi_xml("<other/>")
    with pytest.raises(ValueError):
        parse_nvidia_smi_text("Segmentation fault")


def test_parse_topology_both_layouts() -> None:
    spaces = parse_topology((HOSTS / "hgx-h100-8gpu" / "nvidia-smi-topo-m.txt").read_text())
    tabs = parse_topology((HOSTS / "pcie-4090x8-small-shm" / "nvidia-smi-topo-m.txt").read_text())
    assert len(spaces) == len(tabs) == 28
    assert set(spaces.values()) == {"NV18"} and set(tabs.values()) == {"SYS"}
    ansi = "\x1b[4m\tGPU0\tGPU1\tNIC0\tCPU Affinity\x1b[0m\nGPU0\t X \tPIX\tSYS\t0-51\n" \
           "GPU1\tPIX\t X \tSYS\t0-51\n"
    assert parse_topology(ansi) == {(0, 1): "PIX"}


@pytest.mark.parametrize("spec,expected", [
    ("eth", ["eth0", "eth1"]),
    ("=eth0", ["eth0"]),
    ("=eth", []),
    ("^docker,lo", ["eth0", "eth1", "ib0"]),
    ("^=eth0", ["docker0", "eth1", "ib0", "lo"]),
    ("ib,eth1", ["eth1", "ib0"]),
    ("bond", []),
])
def test_nccl_ifname_syntax(spec: str, expected: list[str]) -> None:
    assert select_interfaces(spec, ["docker0", "eth0", "eth1", "ib0", "lo"]) == expected


def test_gloo_ifname_needs_exact_names(tmp_path: Path) -> None:
    d = tmp_path / "gloo"
    d.mkdir()
    (d / "BASE").write_text(str((HOSTS / "hgx-h100-8gpu").resolve()))
    (d / "env.json").write_text('{"GLOO_SOCKET_IFNAME": "bond"}')  # a prefix is not enough
    assert by_name(run_doctor(probe=RecordedProbe(d)))["socket-ifname"].status == "fail"
    (d / "env.json").write_text(
        '{"GLOO_SOCKET_IFNAME": "bond0", "NCCL_SOCKET_IFNAME": "^lo,docker"}')
    assert by_name(run_doctor(probe=RecordedProbe(d)))["socket-ifname"].status == "ok"


def test_compute_capability_names() -> None:
    assert compute_capability_for("NVIDIA A100-SXM4-80GB") == "8.0"
    assert compute_capability_for("NVIDIA A10G") == "8.6"
    assert compute_capability_for("Quadro RTX 5000") == "7.5"
    assert compute_capability_for("NVIDIA RTX 6000 Ada Generation") == "8.9"
    assert compute_capability_for("Mystery GPU", "Hopper") == "9.0"
    assert compute_capability_for("Mystery GPU") is None


# ---------------------------------------------------------------------------------------------
# Image labels
# ---------------------------------------------------------------------------------------------

LABELS = {
    "io.envbuilder.cuda": "12.1", "io.envbuilder.cuda-toolkit": "12.1.1",
    "io.envbuilder.driver-min": "530.30.02", "io.envbuilder.driver-minor-compat": "525.60.13",
    "io.envbuilder.torch": "2.5.1", "io.envbuilder.torch-arch": "sm_50,sm_80, sm_90",
    "org.opencontainers.image.title": "x",
}


def test_stack_from_image_labels() -> None:
    s = stack_from_image_labels(LABELS)
    assert s.cuda == "12.1" and s.cuda_toolkit == "12.1.1"
    assert s.driver_min is not None and s.driver_min.version == "530.30.02"
    assert s.driver_min.minor_compat == "525.60.13"
    assert s.torch_arch == ("sm_50", "sm_80", "sm_90")
    c = by_name(run_doctor(probe=host("aws-t4-old-driver"), stack=s, nproc=8))
    assert c["stack-driver"].status == "fail" and c["stack-ranks"].status == "fail"
    cpu = stack_from_image_labels({"io.envbuilder.cuda": "none", "io.envbuilder.torch": "2.5.1"})
    assert cpu.cuda is None and cpu.driver_min is None


def test_labels_written_for_a_stack_read_back_to_the_same_facts() -> None:
    # The writer (render's build plan) and the reader (doctor --image) are one table: every
    # built-in target's labels read back to exactly what doctor gets from the resolved stack.
    from envbuilder import labels
    from envbuilder.api import builtin_targets, resolve_target
    from envbuilder.core.matrix import load_matrix

    m = load_matrix(None)
    for name in builtin_targets(m):
        stack = resolve_target(name, matrix=m)
        want = StackFacts.from_stack(stack)
        got = labels.read(labels.write(stack))
        assert got.cuda == want.cuda and got.torch == want.torch, name
        assert got.cuda_toolkit == want.cuda_toolkit and got.torch_arch == want.torch_arch, name
        assert (got.driver_min is None) == (want.driver_min is None), name
        if want.driver_min is not None:
            assert got.driver_min.version == want.driver_min.version, name
            assert got.driver_min.minor_compat == want.driver_min.minor_compat, name


@pytest.mark.parametrize("change", [
    {"io.envbuilder.cuda": None},
    {"io.envbuilder.driver-min": None},
    {"io.envbuilder.driver-min": "latest"},
    {"io.envbuilder.torch-arch": "sm_80,ampere"},
    {"io.envbuilder.cuda": "twelve"},
])
def test_unusable_labels_raise_input_error(change: dict) -> None:
    labels = dict(LABELS)
    for k, v in change.items():
        if v is None:
            labels.pop(k)
        else:
            labels[k] = v
    with pytest.raises(InputError) as e:
        stack_from_image_labels(labels)
    assert e.value.exit_code == 2


def test_bad_stack_or_nproc_raise_input_error() -> None:
    with pytest.raises(InputError):
        run_doctor(probe=host("hgx-h100-8gpu"), stack=facts(driver_min={"version": "x"}))
    with pytest.raises(InputError):
        run_doctor(probe=host("hgx-h100-8gpu"), nproc=0)


def test_cpu_stack_needs_no_gpu() -> None:
    stack = StackFacts(torch="2.5.1")
    c = by_name(run_doctor(probe=_NoHostProbe(), stack=stack, nproc=4))
    assert c["driver"].status == "skip" and c["stack-driver"].status == "skip"
    assert c["stack-ranks"].status == "skip"


class _NoHostProbe(Probe):
    """A host with nothing: no commands, no files."""

    def run(self, argv):  # type: ignore[override]
        return super().run(["envbuilder-test-no-such-program-xyz", *argv[1:]])

    def read_text(self, path):  # type: ignore[override]
        return None

    def exists(self, path):  # type: ignore[override]
        return False

    def listdir(self, path):  # type: ignore[override]
        return None

    def env(self):  # type: ignore[override]
        return {}


# ---------------------------------------------------------------------------------------------
# The real host (CI: no GPU, no nvidia-smi) and a fake nvidia-smi through the default Probe
# ---------------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has nvidia-smi")
def test_real_host_without_gpu() -> None:
    checks = run_doctor()
    c = by_name(checks)
    if os.path.exists("/proc/driver/nvidia/version"):
        assert c["driver"].status == "warn"
    else:
        assert c["driver"].status == "fail"
        assert "nvidia-smi" in c["driver"].detail and "not found" in c["driver"].detail
        assert c["driver"].fix
    st = os.statvfs("/dev/shm")
    assert c["shm"].value == st.f_blocks * st.f_frsize
    assert c["shm"].status in ("ok", "warn", "fail")


def _fake_smi(tmp_path: Path, body: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bindir


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    # Make NVML unusable so the nvidia-smi path is the one under test on any machine.
    monkeypatch.setitem(sys.modules, "pynvml", None)


def test_fake_nvidia_smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 no_nvml: None) -> None:
    xml = HOSTS / "aws-t4-old-driver" / "nvidia-smi-q-x.xml"
    bindir = _fake_smi(tmp_path, f'if [ "$1" = "-q" ] && [ "$2" = "-x" ]; then cat "{xml}"; '
                                 'exit 0; fi\necho "unsupported: $*" >&2\nexit 2\n')
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    c = by_name(run_doctor(stack=facts(), nproc=1))
    assert c["driver"].status == "ok" and c["driver"].value == "515.105.01"
    assert "nvidia-smi -q -x" in c["driver"].detail
    assert c["gpus"].value == 1 and "Tesla T4" in c["gpus"].detail
    assert c["stack-driver"].status == "fail"


def test_doctor_record_replays_to_the_same_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 no_nvml: None) -> None:
    """doctor --record: what the live checks read (here a T4's nvidia-smi on PATH, this host's
    files) replays through RecordedProbe to the same checks, and keeps no other variable."""
    from envbuilder.api import doctor as api_doctor
    from envbuilder.diagnose.probe import RecordingProbe

    xml = HOSTS / "aws-t4-old-driver" / "nvidia-smi-q-x.xml"
    bindir = _fake_smi(tmp_path, f'if [ "$1" = "-q" ] && [ "$2" = "-x" ]; then cat "{xml}"; '
                                 'exit 0; fi\necho "unsupported: $*" >&2\nexit 2\n')
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "=lo")
    monkeypatch.setenv("ENVBUILDER_TEST_SECRET_TOKEN", "s3cr3t")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    probe = RecordingProbe()
    live = run_doctor(probe=probe, stack=facts(), nproc=1)
    rec = probe.recording()
    assert rec["nvidia-smi-q-x.xml"] == xml.read_text()
    assert "s3cr3t" not in "".join(rec.values())
    # through the API as the CLI calls it: one transaction into a new folder
    out = tmp_path / "host"
    first = api_doctor(nproc=1, record=out)
    env = (out / "env.json").read_text()
    assert "NCCL_SOCKET_IFNAME" in env and "SECRET" not in env
    replayed = run_doctor(probe=RecordedProbe(out), nproc=1)
    assert [c.to_dict() for c in replayed] == [c.to_dict() for c in first]
    assert by_name(live)["gpus"].value == 1 and by_name(replayed)["gpus"].value == 1
    assert by_name(replayed)["nccl-env"].detail == by_name(live)["nccl-env"].detail


def test_doctor_record_never_replaces_a_users_file(tmp_path: Path) -> None:
    from envbuilder.api import doctor as api_doctor

    out = tmp_path / "host"
    out.mkdir()
    (out / "env.json").write_text("mine\n")
    with pytest.raises(InputError, match="env.json") as e:
        api_doctor(record=out)
    assert "choose another --record" in str(e.value)  # the option that named the folder
    assert (out / "env.json").read_text() == "mine\n"
    assert sorted(p.name for p in out.iterdir()) == ["env.json"]


def test_fake_nvidia_smi_garbage_and_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            no_nvml: None) -> None:
    bindir = _fake_smi(tmp_path, 'echo "NVIDIA-SMI has failed because it couldn\'t communicate '
                                 'with the NVIDIA driver."\nexit 9\n')
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    probe = Probe()
    c = by_name(run_doctor(probe=probe))
    if not os.path.exists("/proc/driver/nvidia/version"):
        assert c["driver"].status == "fail"
        assert "exited with 9" in c["driver"].detail
        assert "couldn't communicate" in c["driver"].detail
    (bindir / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 30\n")
    res = Probe(timeout=0.5).run(["nvidia-smi", "-q", "-x"])
    assert res.error == "timeout" and not res.ok
    c = by_name(run_doctor(probe=Probe(timeout=0.5)))
    if not os.path.exists("/proc/driver/nvidia/version"):
        assert c["driver"].status == "fail" and "timed out" in c["driver"].detail


def test_nvml_path_with_a_stand_in_module(monkeypatch: pytest.MonkeyPatch) -> None:
    class Pci:
        busId = b"00000000:18:00.0"

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "550.54.15",
        nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetPciInfo=lambda h: Pci(),
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetPersistenceMode=lambda h: 0,
        nvmlDeviceGetMigMode=lambda h: (0, 0),
        nvmlDeviceGetComputeMode=lambda h: 3,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    inv = Probe().nvml()
    assert inv and inv["driver"] == "550.54.15" and inv["cuda"] == "12.4"
    assert inv["gpus"][1]["compute_mode"] == "Exclusive_Process"

    def boom():
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(fake, "nvmlInit", boom)
    assert Probe().nvml() is None


def test_stack_rdma_checks_the_host_against_the_images_fabric(tmp_path) -> None:
    """The recorded HGX host (9 mlx5 ports ACTIVE) against an image's fabric: without verbs in
    the image NCCL uses sockets; with them the process needs the host's uverbs devices (the
    recording has no /dev: they are added to a copy, as a container gets them with --device)."""
    import shutil

    d = tmp_path / "host"
    shutil.copytree(HOSTS / "hgx-h100-8gpu", d)

    def rdma(fabric):
        return by_name(run_doctor(probe=RecordedProbe(d), stack=facts(fabric=fabric),
                                  nproc=8))["stack-rdma"]

    c = rdma("none")
    assert c.status == "fail" and "sockets" in c.detail and "--fabric ib" in c.fix
    c = rdma("ib")
    assert c.status == "fail" and "/dev/infiniband" in c.fix
    (d / "dev" / "infiniband").mkdir(parents=True)
    for i in range(9):
        (d / "dev" / "infiniband" / f"uverbs{i}").write_text("")
    c = rdma("ib")
    assert c.status == "ok" and "uverbs8" in c.detail and "mlx5_4" in c.detail
    assert rdma(None).status == "skip"
    # a host without RDMA devices: nothing to agree on
    c = by_name(run_doctor(probe=host("aws-t4-old-driver"), stack=facts(fabric="none"),
                           nproc=1))["stack-rdma"]
    assert c.status == "skip" and "no InfiniBand/RoCE device" in c.detail
