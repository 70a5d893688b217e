"""envbuilder/components/fabric.py: the RDMA user space (ib, efa) and its checks."""

from dataclasses import replace

import pytest

from core_helpers import builtin
from envbuilder.components.fabric import COMPONENT as FABRIC, EFA_APT_RUNTIME, RDMA_APT, rdma_checks
from envbuilder.core.resolve import resolve_target
from envbuilder.core.target import Pins
from envbuilder.errors import IncompatibleError


def test_ib_by_default_on_cuda_none_on_cpu():
    st = resolve_target("cu121", builtin())
    assert FABRIC.active(st) and FABRIC.runtime_apt(st) == RDMA_APT
    assert FABRIC.build_stage(st, "/x") is None
    assert not FABRIC.active(resolve_target("cpu", builtin()))


def test_efa_builds_the_plugin_and_copies_it():
    st = resolve_target("cu124", builtin(), Pins(fabric="efa"))
    assert FABRIC.runtime_apt(st) == RDMA_APT + EFA_APT_RUNTIME
    stage = FABRIC.build_stage(st, "/opt/venv/lib/python3.11/site-packages")
    assert stage is not None and any("sha256sum -c" in c.text for c in stage.run.commands)
    assert FABRIC.runtime_copies(st)[0].from_stage == stage.name


def test_efa_is_refused_on_dnf():
    st = resolve_target("cu124", builtin(), Pins(fabric="efa"))
    rocky = replace(st.assignment["os"], name="rockylinux9", family="rockylinux")
    with pytest.raises(IncompatibleError, match="--fabric efa"):
        FABRIC.refuse(replace(st, assignment={**st.assignment, "os": rocky}), None)


def test_rdma_checks():
    assert rdma_checks(None, "none") == []
    (missing,) = rdma_checks(None, "ib")
    assert not missing.ok
    facts = {"libs": {"libibverbs.so.1": {"loaded": True, "path": "/usr/lib/libibverbs.so.1", "devices": 0}},
             "ibv_devinfo": {"found": True, "exit": 255, "no_devices": True, "output": "No IB devices found"},
             "providers": ["mlx5"]}
    checks = {c.name: c for c in rdma_checks(facts, "efa")}
    assert checks["rdma_ibverbs"].ok and checks["rdma_ibv_devinfo"].ok
    assert not checks["efa_ofi_nccl"].ok  # no plugin
