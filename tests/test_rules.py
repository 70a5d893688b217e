"""Every compatibility rule both ways, on facts of the built-in matrix.

``CASES`` is the table: each row names a rule, says whether the rule must accept or refuse,
and builds the assignment from matrix objects. ``test_every_rule_is_covered_both_ways`` fails
when a rule is added to envbuilder.rules without a row of each kind here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import pytest
from packaging.specifiers import SpecifierSet

from core_helpers import (
    builtin, component, copy_matrix, edit, live, newest_toolkit, nccl, os_, toolkit, torch,
)
from envbuilder.api import check_combination, resolve_target
from envbuilder.errors import IncompatibleError
from envbuilder.core.matrix import Matrix, load_matrix
from envbuilder.core.rules import RULES, Context, Violation, all_rules, needs_devel, rules_by_name

ACCEPT, REFUSE, WARN = "accept", "refuse", "warn"


def base(m: Matrix, **over) -> dict:
    """A full assignment that breaks no rule (cu121, torch 2.1.2, py3.10, ubuntu22.04)."""
    a = {"cuda": toolkit(m, "12.1.1"), "torch": torch(m, "2.1.2"), "python": "3.10",
         "os": os_(m, "ubuntu22.04"), "flavour": "cuda-base", "nccl": nccl(m, "2.18.1"),
         "deepspeed": None, "horovod": None}
    a.update(over)
    return a


def hvd_strict(m: Matrix) -> Matrix:
    """The built-in matrix with Horovod 0.28 declaring torch <2.0 (no built-in Horovod release
    declares a torch or Python bound the matrix's torch/Python versions can break)."""
    rels = tuple(replace(r, requires={**r.requires, "torch": SpecifierSet(">=1.5.0,<2.0")})
                 if r.line == "0.28" else r for r in m.component("horovod").releases)
    return replace(m, components=tuple(replace(c, releases=rels) if c.name == "horovod" else c
                                        for c in m.components))


# (id, rule, expectation, build(m) -> (assignment, context kwargs, matrix or None), message needles)
Case = tuple[str, str, str, Callable, tuple[str, ...]]
CASES: list[Case] = [
    # driver_cuda: 12.1 needs 530.30.02; 525.60.13 is the CUDA 12 minor-compatibility floor
    ("cu121-driver535", "driver_cuda", ACCEPT,
     lambda m: (base(m), {"driver": "535.104.05"}, None), ()),
    ("cu121-driver530.30.02-exact", "driver_cuda", ACCEPT,
     lambda m: (base(m), {"driver": "530.30.02"}, None), ()),
    ("cpu-any-driver", "driver_cuda", ACCEPT,
     lambda m: (base(m, cuda=None, nccl=None), {"driver": "470.82.01"}, None), ()),
    ("cu121-driver470-os-flavour", "driver_cuda", REFUSE,
     lambda m: (base(m, flavour="os"), {"driver": "470.82.01"}, None),
     ("530.30.02", "470.82.01", "cuda-compat", "--flavour cuda-base")),
    # below the minor-compatibility floor, an nvidia/cuda base can still run it through forward
    # compatibility (its cuda-compat package, datacenter GPUs): a warning, not a refusal
    ("cu121-driver470-forward-compat", "driver_cuda", WARN,
     lambda m: (base(m), {"driver": "470.82.01"}, None), ("forward compatibility", "cuda-compat")),
    ("cu121-driver528-minor-compat", "driver_cuda", WARN,
     lambda m: (base(m), {"driver": "528.02"}, None), ("530.30.02", "525.60.13")),
    # torch_cuda_variant: torch 2.8 has no cu118 wheels, 2.7.1 has
    ("cu118-torch2.7.1", "torch_cuda_variant", ACCEPT,
     lambda m: (base(m, cuda=toolkit(m, "11.8.0"), torch=torch(m, "2.7.1"), nccl=None), {}, None), ()),
    ("cpu-torch2.8", "torch_cuda_variant", ACCEPT,
     lambda m: (base(m, cuda=None, torch=torch(m, "2.8.0"), nccl=None), {}, None), ()),
    ("cu118-torch2.8", "torch_cuda_variant", REFUSE,
     lambda m: (base(m, cuda=toolkit(m, "11.8.0"), torch=torch(m, "2.8.0"), nccl=None), {}, None),
     ("2.8.0", "cu118", "2.7")),
    # torch_platform: the cpu variant of torch 2.15 is known for linux/amd64 only
    ("cpu-torch2.15-amd64", "torch_platform", ACCEPT,
     lambda m: (base(m, cuda=None, torch=torch(m, "2.15.0"), nccl=None),
                {"platform": "linux/amd64"}, None), ()),
    ("cpu-torch2.15-arm64", "torch_platform", REFUSE,
     lambda m: (base(m, cuda=None, torch=torch(m, "2.15.0"), nccl=None),
                {"platform": "linux/arm64"}, None), ("2.15.0", "cpu", "linux/arm64")),
    # torch_python: torch 2.1 has wheels for 3.8-3.11, not 3.12
    ("torch2.1-py311", "torch_python", ACCEPT,
     lambda m: (base(m, python="3.11"), {}, None), ()),
    ("torch2.1-py312", "torch_python", REFUSE,
     lambda m: (base(m, python="3.12"), {}, None), ("2.1.2", "3.12")),
    # os_python: debian12 ships only 3.11; ubuntu24.04 cannot install 3.8
    ("debian12-py311", "os_python", ACCEPT,
     lambda m: (base(m, os=os_(m, "debian12"), python="3.11"), {}, None), ()),
    ("debian12-py310", "os_python", REFUSE,
     lambda m: (base(m, os=os_(m, "debian12")), {}, None), ("debian12", "3.10")),
    ("ubuntu24.04-py38", "os_python", REFUSE,
     lambda m: (base(m, os=os_(m, "ubuntu24.04"), python="3.8"), {}, None), ("ubuntu24.04", "3.8")),
    # base_image: nvidia/cuda has 11.8.0 for ubuntu20.04/22.04 only; none at all for 13.3.x
    ("cu118-ubuntu22.04", "base_image", ACCEPT,
     lambda m: (base(m, cuda=toolkit(m, "11.8.0")), {}, None), ()),
    ("cpu-ubuntu24.04", "base_image", ACCEPT,
     lambda m: (base(m, cuda=None, os=os_(m, "ubuntu24.04"), flavour="os"), {}, None), ()),
    ("cu124-debian12-os-flavour", "base_image", ACCEPT,
     lambda m: (base(m, cuda=toolkit(m, "12.4.1"), os=os_(m, "debian12"), flavour="os"), {}, None), ()),
    ("cu124-debian12-cuda-base", "base_image", REFUSE,
     lambda m: (base(m, cuda=toolkit(m, "12.4.1"), os=os_(m, "debian12")), {}, None),
     ("debian12", "--flavour os")),
    ("cpu-cuda-base", "base_image", REFUSE,
     lambda m: (base(m, cuda=None, nccl=None), {}, None), ("CPU", "--flavour os")),
    ("cu118-ubuntu24.04", "base_image", REFUSE,
     lambda m: (base(m, cuda=toolkit(m, "11.8.0"), os=os_(m, "ubuntu24.04")), {}, None),
     ("11.8.0", "ubuntu24.04", "ubuntu22.04")),
    ("cu132-2-no-images", "base_image", REFUSE,  # 13.2.2: a toolkit nvidia/cuda has no set of
     lambda m: (base(m, cuda=toolkit(m, "13.2.2")), {}, None), ("no images",)),
    # builder: Horovod compiles with nvcc of torch's CUDA major and a GCC nvcc accepts
    ("cu118-hvd-ubuntu22.04-devel", "builder", ACCEPT,
     lambda m: (base(m, cuda=toolkit(m, "11.8.0"), torch=torch(m, "2.0.1"),
                     horovod=component(m, "horovod", "0.28.1")), {}, None), ()),
    ("cu117-hvd-debian12-apt-nvcc11.8", "builder", WARN,
     lambda m: (base(m, cuda=newest_toolkit(m, "11.7"), torch=torch(m, "2.0.1"), os=os_(m, "debian12"),
                     python="3.11", flavour="os", horovod=component(m, "horovod", "0.28.1")), {}, None),
     ("11.8", "11.7", "minor")),
    ("cu121-hvd-debian12-no-cuda12-nvcc", "builder", REFUSE,
     lambda m: (base(m, os=os_(m, "debian12"), python="3.11", flavour="os",
                     horovod=component(m, "horovod", "0.28.1")), {}, None),
     ("CUDA 12.x", "debian12", "11.8")),
    ("cu124-ds-ops-debian13-apt-nvcc12.4", "builder", ACCEPT,
     lambda m: (base(m, cuda=toolkit(m, "12.4.1"), torch=torch(m, "2.6.0"), os=os_(m, "debian13"),
                     python="3.13", flavour="os", deepspeed=component(m, "deepspeed", "0.16.9")),
                {"ops": {"deepspeed": ("fused_adam", "cpu_adam")}}, None), ()),
    # nccl_pin: torch 2.1.2 cu121 bundles NCCL 2.18.1
    ("cu121-torch2.1-nccl2.18", "nccl_pin", ACCEPT,
     lambda m: (base(m), {"nccl_pin": "2.18"}, None), ()),
    ("cu121-torch2.1-nccl2.18.1", "nccl_pin", ACCEPT,
     lambda m: (base(m), {"nccl_pin": "2.18.1"}, None), ()),
    ("cu121-torch2.1-nccl2.19", "nccl_pin", REFUSE,
     lambda m: (base(m), {"nccl_pin": "2.19"}, None), ("2.18.1", "2.19")),
    ("cu121-torch2.1-nccl2.18.3", "nccl_pin", REFUSE,
     lambda m: (base(m), {"nccl_pin": "2.18.3"}, None), ("2.18.1", "2.18.3")),
    ("cpu-nccl2.18", "nccl_pin", REFUSE,
     lambda m: (base(m, cuda=None, nccl=None), {"nccl_pin": "2.18"}, None), ("CPU",)),
    # nccl_cuda: NCCL 2.18.x is built for CUDA 11/12, not 13
    # nccl_torch: an NCCL pin without a CUDA axis implies a CUDA build of the torch release
    ("torch2.1.2-nccl2.18-no-cuda", "nccl_torch", ACCEPT,
     lambda m: ({k: v for k, v in base(m).items() if k != "cuda"}, {"nccl_pin": "2.18"}, None), ()),
    ("torch2.6.0-nccl2.18-no-cuda", "nccl_torch", REFUSE,
     lambda m: ({k: v for k, v in base(m, torch=torch(m, "2.6.0")).items() if k != "cuda"},
                {"nccl_pin": "2.18"}, None), ("2.6.0", "2.18", "implies a CUDA build")),
    ("cu121-nccl2.18.1", "nccl_cuda", ACCEPT,
     lambda m: (base(m), {}, None), ()),
    ("cu130-nccl2.18.3", "nccl_cuda", REFUSE,
     lambda m: (base(m, cuda=newest_toolkit(m, "13.0"), nccl=nccl(m, "2.18.3")), {}, None),
     ("2.18.3", "CUDA 13")),
    # deepspeed_requires: 0.19.2 declares torch>=2.0.0; 0.13 declares python>=3.8
    ("ds0.19.2-torch2.1", "deepspeed_requires", ACCEPT,
     lambda m: (base(m, deepspeed=component(m, "deepspeed", "0.19.2")), {}, None), ()),
    ("ds0.19.2-torch1.13", "deepspeed_requires", REFUSE,
     lambda m: (base(m, cuda=toolkit(m, "11.7.1"), torch=torch(m, "1.13.1"), nccl=None,
                     deepspeed=component(m, "deepspeed", "0.19.2")), {}, None),
     ("0.19.2", ">=2.0.0", "1.13.1")),
    ("ds0.13-py37", "deepspeed_requires", REFUSE,
     lambda m: (base(m, cuda=toolkit(m, "11.7.1"), torch=torch(m, "1.13.1"), python="3.7",
                     os=os_(m, "ubuntu20.04"), nccl=None,
                     deepspeed=component(m, "deepspeed", "0.13.5")), {}, None),
     ("0.13.5", "python", "3.7")),
    # horovod_requires: 0.28.1 declares torch>=1.5.0, python>=3.6 (refusal on a stricter copy)
    ("hvd0.28.1-torch2.0.1", "horovod_requires", ACCEPT,
     lambda m: (base(m, cuda=toolkit(m, "11.8.0"), torch=torch(m, "2.0.1"), nccl=nccl(m, "2.14.3"),
                     horovod=component(m, "horovod", "0.28.1")), {}, None), ()),
    ("hvd0.28.1-torch2.0.1-strict", "horovod_requires", REFUSE,
     lambda m: (base(m, cuda=toolkit(m, "11.8.0"), torch=torch(m, "2.0.1"), nccl=nccl(m, "2.14.3"),
                     horovod=component(hvd_strict(m), "horovod", "0.28.1")), {}, hvd_strict(m)),
     ("0.28.1", "<2.0", "2.0.1")),
    # known_incompatibility: Horovod <=0.28.1 does not build against torch >=2.1 (C++17)
    ("cu118-hvd0.28", "known_incompatibility", ACCEPT,
     lambda m: (base(m, cuda=toolkit(m, "11.8.0"), torch=torch(m, "2.0.1"), nccl=nccl(m, "2.14.3"),
                     horovod=component(m, "horovod", "0.28.1")), {}, None), ()),
    ("cu124-hvd0.28", "known_incompatibility", REFUSE,
     lambda m: (base(m, cuda=newest_toolkit(m, "12.4"), torch=torch(m, "2.6.0"), nccl=None,
                     horovod=component(m, "horovod", "0.28.1")), {}, None),
     ("horovod-0.28-torch-2.1-cxx17", "0.28.1", "2.6.0")),
    # advisory: a known-bad release warns; while the search may steer around it, it is an error
    ("torch2.2.1-no-advisory", "advisory", ACCEPT,
     lambda m: (base(live(), torch=torch(live(), "2.2.1"), nccl=None), {"avoid": frozenset({"torch"})}, live()), ()),
    ("torch2.2.0-avoided", "advisory", REFUSE,
     lambda m: (base(live(), torch=torch(live(), "2.2.0"), nccl=None), {"avoid": frozenset({"torch"})}, live()),
     ("torch-2.2.0-v100-regression", "2.2.1", "https://github.com/pytorch/pytorch/issues/119295")),
    ("torch2.2.0-pinned-warns", "advisory", WARN,
     lambda m: (base(live(), torch=torch(live(), "2.2.0"), nccl=None), {}, live()), ("2.2.1", "V100")),
    ("nccl2.19.3-medium-only-warns", "advisory", WARN,
     lambda m: (base(live(), nccl=nccl(live(), "2.19.3")), {"avoid": frozenset({"nccl"})}, live()),
     ("nccl-2.18.5-usb-netdev", "2.20.3")),
    # image_driver_branch (live matrix: NVIDIA_REQUIRE_CUDA of the 13.0.x sets lists R535, R550,
    # R565, R570, R575): a driver of CUDA 13.0 starts it; R560 is not listed; R575 is (forward
    # compatibility), but past its end of life: a warning
    ("cu130-driver580-native", "image_driver_branch", ACCEPT,
     lambda m: (base(live(), cuda=toolkit(live(), "13.0.3"), torch=torch(live(), "2.14.1"), python="3.12",
                     os=os_(live(), "ubuntu24.04"), nccl=None), {"driver": "580.95.05"}, live()), ()),
    ("cu130-driver560-unlisted", "image_driver_branch", REFUSE,
     lambda m: (base(live(), cuda=toolkit(live(), "13.0.3"), torch=torch(live(), "2.14.1"), python="3.12",
                     os=os_(live(), "ubuntu24.04"), nccl=None), {"driver": "560.35.03"}, live()),
     ("NVIDIA_REQUIRE_CUDA=cuda>=13.0", "R535, R550, R565, R570, R575", "R560", "nvidia-container-cli")),
    ("cu130-driver575-listed-but-eol", "image_driver_branch", WARN,
     lambda m: (base(live(), cuda=toolkit(live(), "13.0.3"), torch=torch(live(), "2.14.1"), python="3.12",
                     os=os_(live(), "ubuntu24.04"), nccl=None), {"driver": "575.57.08"}, live()),
     ("R575", "end of life", "forward compatibility")),
    # deepspeed_imports (live matrix): 0.18.9's module-level torch.library.custom_op needs torch 2.4
    ("ds0.19.8-torch2.6", "deepspeed_imports", ACCEPT,
     lambda m: (base(live(), cuda=toolkit(live(), "12.4.1"), torch=torch(live(), "2.6.0"), nccl=None,
                     deepspeed=component(live(), "deepspeed", "0.19.8")), {}, live()), ()),
    ("ds0.18.9-torch2.3", "deepspeed_imports", REFUSE,
     lambda m: (base(live(), torch=torch(live(), "2.3.1"), nccl=None,
                     deepspeed=component(live(), "deepspeed", "0.18.9")), {}, live()),
     ("0.18.9", "2.3.1", ">=2.4", "custom_op", "0.18.6")),
    ("ds0.8.1-torch2.0", "deepspeed_imports", REFUSE,
     lambda m: (base(live(), cuda=toolkit(live(), "11.8.0"), torch=torch(live(), "2.0.1"), nccl=None,
                     deepspeed=component(live(), "deepspeed", "0.8.1")), {}, live()),
     ("0.8.1", "torch._six", "<2.0")),
    # horovod_imports (live matrix): horovodrun of 0.28.1 imports distutils (gone in Python 3.12)
    ("hvd0.28.1-py3.11", "horovod_imports", ACCEPT,
     lambda m: (base(live(), cuda=toolkit(live(), "11.8.0"), torch=torch(live(), "2.0.1"), python="3.11",
                     nccl=None, horovod=component(live(), "horovod", "0.28.1")), {}, live()), ()),
    ("hvd0.28.1-py3.12", "horovod_imports", REFUSE,
     lambda m: (base(live(), cuda=toolkit(live(), "11.8.0"), torch=torch(live(), "2.0.1"), python="3.12",
                     nccl=None, horovod=component(live(), "horovod", "0.28.1")), {}, live()),
     ("distutils", "3.12", "<3.12")),
    ("hvd0.28.0-gcc12-is-a-warning", "known_incompatibility", WARN,
     lambda m: (base(m, cuda=toolkit(m, "11.8.0"), torch=torch(m, "2.0.1"), nccl=nccl(m, "2.14.3"),
                     horovod=component(m, "horovod", "0.28.0")), {}, None),
     ("horovod-0.28.0-gcc12-gloo",)),
]


def _run(rule_name: str, m: Matrix, a: dict, ctx: dict) -> list[Violation]:
    rules = [r for r in all_rules(m) if r.name == rule_name]
    assert rules, f"no rule named {rule_name}"
    out: list[Violation] = []
    for r in rules:
        assert all(ax in a for ax in r.axes)
        if any(ax in a for ax in r.unless):
            continue  # the search does not apply it either when those axes are assigned
        out += r.check(a, Context(m, **ctx))
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}:{c[2]}:{c[0]}" for c in CASES])
def test_rule(case):
    _, name, expect, build, needles = case
    m0 = builtin()
    a, ctx, m = build(m0)
    m = m or m0
    vs = _run(name, m, a, ctx)
    errors = [v for v in vs if v.severity == "error"]
    warnings = [v for v in vs if v.severity == "warning"]
    if expect == ACCEPT:
        assert not errors, [str(v) for v in errors]
        return
    if expect == REFUSE:
        assert errors, f"{name} accepted a combination it must refuse"
        found = errors
    else:
        assert not errors and warnings, f"{name} should warn, not refuse: {vs}"
        found = warnings
    for v in found:
        assert v.rule == name
        assert v.message and v.fix, "a violation says what is wrong and what to do"
        assert v.source and all(s.startswith(("https://", "http://")) for s in v.source)
        d = v.to_dict()
        assert d["rule"] == name and d["severity"] == v.severity and d["source"] == list(v.source)
    text = " ".join(f"{v.message} {v.fix} {str(v)}" for v in found)
    for n in needles:
        assert n in text, f"{n!r} not in {text!r}"


def test_every_rule_is_covered_both_ways():
    # the frozen matrix has no advisories: the live one adds their rule
    names = {r.name for r in all_rules(builtin())} | {r.name for r in all_rules(live())}
    assert {r.name for r in RULES} <= names
    accepted = {c[1] for c in CASES if c[2] == ACCEPT}
    refused = {c[1] for c in CASES if c[2] == REFUSE}
    assert names - accepted == set(), f"rules without an accept case: {names - accepted}"
    assert names - refused == set(), f"rules without a refuse case: {names - refused}"
    assert accepted | refused <= names, "the table names a rule that does not exist"


def test_rules_are_documented():
    assert set(rules_by_name()) == {r.name for r in RULES}
    for r in RULES:
        assert r.doc, f"rule {r.name} has no docstring"
        assert r.axes


def test_the_base_assignment_breaks_no_rule():
    m = builtin()
    a = base(m)
    for r in all_rules(m):
        assert not [v for v in r.check(a, Context(m)) if v.severity == "error"], r.name


def test_needs_devel():
    m = builtin()
    assert not needs_devel(base(m), m)
    ds = base(m, deepspeed=component(m, "deepspeed", "0.16.9"))
    assert not needs_devel(ds, m), "DeepSpeed without --ds-ops JIT-compiles: nothing to build"
    assert needs_devel(ds, m, {"deepspeed": ("fused_adam",)})
    assert needs_devel(ds, m, {"deepspeed": ("cpu_adam",)}), "on a CUDA torch, CPU ops link cudart and cuBLAS"
    assert needs_devel(base(m, horovod=component(m, "horovod", "0.28.1")), m)
    assert not needs_devel(base(m, cuda=None, horovod=component(m, "horovod", "0.28.1")), m)


# -- base_image branches the built-in data cannot reach (no image set lacks a flavour, none is
#    marked removed): on edited copies of the matrix

def test_base_image_without_devel_refuses_compiling_stacks(tmp_path):
    folder = copy_matrix(tmp_path / "m")
    edit(folder, "base_images.yaml",
         '- cuda: "11.8.0"\n  os:\n  - ubuntu22.04\n  - ubuntu20.04\n  flavours:\n  - base\n  - runtime\n  - devel\n',
         '- cuda: "11.8.0"\n  os:\n  - ubuntu22.04\n  - ubuntu20.04\n  flavours:\n  - base\n  - runtime\n')
    m = load_matrix(folder)
    plain = base(m, cuda=toolkit(m, "11.8.0"))
    assert not _run("base_image", m, plain, {})
    assert not _run("builder", m, plain, {})
    ds = base(m, cuda=toolkit(m, "11.8.0"), deepspeed=component(m, "deepspeed", "0.16.9"))
    assert not _run("builder", m, ds, {}), "JIT ops (no --ds-ops) compile nothing"
    vs = _run("builder", m, ds, {"ops": {"deepspeed": ("fused_adam",)}})
    assert vs and "devel" in vs[0].message and "fused_adam" in vs[0].message


def test_base_image_removed_tags_are_refused(tmp_path):
    folder = copy_matrix(tmp_path / "m")
    edit(folder, "base_images.yaml",
         '- cuda: "11.8.0"\n  os:\n  - ubuntu22.04\n  - ubuntu20.04\n  flavours:\n  - base\n  - runtime\n'
         '  - devel\n  cudnn: cudnn8\n  removed: false\n',
         '- cuda: "11.8.0"\n  os:\n  - ubuntu22.04\n  - ubuntu20.04\n  flavours:\n  - base\n  - runtime\n'
         '  - devel\n  cudnn: cudnn8\n  removed: true\n')
    m = load_matrix(folder)
    vs = _run("base_image", m, base(m, cuda=toolkit(m, "11.8.0")), {})
    assert vs and "no longer serves" in vs[0].message
    # the resolver then refuses cu118 on an nvidia/cuda flavour, suggesting something else...
    from envbuilder.api import Pins
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cu118", matrix=m, pins=Pins(flavour="cuda-base"))
    assert any(v.rule == "base_image" for v in ei.value.violations)
    # ...and, left open, falls back to a plain OS image with CUDA from torch's wheels
    st = resolve_target("cu118", matrix=m)
    assert st.flavour == "os" and st.runtime_image == st.os.image and not st.runtime_image.startswith("nvidia")


# -- the same rules through `envbuilder check` / resolve (the library calls behind the CLI) ---

CHECKS = [
    ("driver_cuda", dict(cuda="12.1", driver="470.82.01"), dict(cuda="12.1", driver="535.104.05")),
    ("torch_cuda_variant", dict(cuda="11.8", torch="2.8"), dict(cuda="11.8", torch="2.7.1")),
    ("torch_python", dict(torch="2.1", python="3.12"), dict(torch="2.1", python="3.11")),
    ("os_python", dict(os="ubuntu24.04", python="3.8"), dict(os="ubuntu24.04", python="3.9")),
    ("base_image", dict(cuda="11.8", os="ubuntu24.04", flavour="cuda-base"),
     dict(cuda="11.8", os="ubuntu22.04", flavour="cuda-base")),
    ("nccl_pin", dict(cuda="12.1", torch="2.1", nccl="2.19"), dict(cuda="12.1", torch="2.1", nccl="2.18")),
    ("nccl_cuda", dict(cuda="13.0", nccl="2.18"), dict(cuda="12.1", nccl="2.18")),
    # (0.19.2 imports only with torch >= 2.4: deepspeed_imports)
    ("deepspeed_requires", dict(torch="1.13", deepspeed="0.19.2"), dict(torch="2.4", deepspeed="0.19.2")),
    ("deepspeed_imports", dict(torch="2.3", deepspeed="0.18.9"), dict(torch="2.4", deepspeed="0.18.9")),
    ("image_driver_branch", dict(cuda="13.0", driver="560.35.03", flavour="cuda-base"),
     dict(cuda="13.0", driver="580.95.05", flavour="cuda-base")),
    ("known_incompatibility", dict(torch="2.6", horovod="0.28"), dict(torch="2.0", horovod="0.28")),
]


@pytest.mark.parametrize("rule,bad,good", CHECKS, ids=[c[0] for c in CHECKS])
def test_check_combination(rule, bad, good):
    with pytest.raises(IncompatibleError) as ei:
        check_combination(**bad)
    assert ei.value.exit_code == 3
    assert rule in {v.rule for v in ei.value.violations}
    r = check_combination(**good).to_dict()
    assert r["ok"] is True
    for k in good:
        if k != "driver":
            assert k in r["satisfied_by"]


def test_check_driver_warning_is_not_a_refusal():
    r = check_combination(cuda="12.1", driver="528.02").to_dict()
    assert r["ok"] is True
    # and its branch is past end of life (older than every branch in NVIDIA's support table)
    assert [w["rule"] for w in r["warnings"]] == ["driver_cuda", "driver_lifecycle"]
    assert all(w["severity"] == "warning" for w in r["warnings"])
    assert "530.30.02" in r["warnings"][0]["message"]


def test_a_listed_branch_past_end_of_life_still_runs_an_image_of_its_own_major():
    """R535 (CUDA 12.2, end of life 2026-06) is in the 12.6.3 images' NVIDIA_REQUIRE_CUDA: the
    image starts, and CUDA 12.6 runs on it by minor-version compatibility, which needs no
    supported branch: accepted, with the fact as evidence."""
    r = check_combination(cuda="12.6.3", os="rockylinux9", flavour="cuda-base", driver="535.54.03").to_dict()
    assert r["ok"] is True and r["runs"] == "minor-compat"
    ev = [e for e in r["evidence"] if e["rule"] == "image_driver_branch"]
    assert ev and "lists R535" in ev[0]["message"] and "minor-version compatibility" in ev[0]["message"]
    assert any(s.endswith("/dist/12.6.3/rockylinux9/base/Dockerfile") for s in ev[0]["source"])
    # another major runs by forward compatibility: a listed branch past its end of life is a warning
    r = check_combination(cuda="13.0", flavour="cuda-base", driver="575.57.08").to_dict()
    w = [w for w in r["warnings"] if w["rule"] == "image_driver_branch"]
    assert r["ok"] is True and w and "end of life" in w[0]["message"] and "forward compatibility" in w[0]["message"]


def test_an_image_set_without_its_require_cuda_is_a_warning_not_agreement():
    """13.3.1's base Dockerfiles were not read: on a driver of an older CUDA (R580: 13.0), whether
    the image starts is unknown, and said so (never silently accepted as if checked)."""
    r = check_combination(cuda="13.3", flavour="cuda-base", driver="580.65.06").to_dict()
    w = [w for w in r["warnings"] if w["rule"] == "image_driver_branch"]
    assert r["ok"] is True and w and "no NVIDIA_REQUIRE_CUDA" in w[0]["message"] and "not known" in w[0]["message"]
    assert w[0]["source"] and "matrix refresh" in w[0]["fix"]
    # a driver of the image's CUDA needs no list
    r = check_combination(cuda="13.3", flavour="cuda-base", driver="610.43.02").to_dict()
    assert not [w for w in r["warnings"] if w["rule"] == "image_driver_branch"]


def test_check_refusal_names_the_driver_needed():
    with pytest.raises(IncompatibleError) as ei:
        check_combination(cuda="12.1", driver="470.82.01")
    assert "530.30.02" in str(ei.value)
    assert "\n" not in str(ei.value)


def test_resolve_nccl_pin_both_ways():
    st = resolve_target("cu121-torch2.1-nccl2.18", matrix=builtin())
    assert str(st.nccl.version) == "2.18.1" and str(st.torch.version) == "2.1.2"
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cu121-torch2.1-nccl2.19", matrix=builtin())
    assert {v.rule for v in ei.value.violations} == {"nccl_pin"}


def test_check_judges_a_component_requirement_without_python():
    """deepspeed 0.19.2 declares torch>=2.0.0: `check --torch 1.13 --deepspeed 0.19.2` refuses
    without --python, and `check --python 3.7 --deepspeed 0.19.2` without --torch."""
    with pytest.raises(IncompatibleError) as ei:
        check_combination(torch="1.13", deepspeed="0.19.2")
    assert "requires torch >=2.0.0" in str(ei.value)
    with pytest.raises(IncompatibleError) as ei:
        check_combination(python="3.7", deepspeed="0.19.2")
    assert "requires python >=3.8" in str(ei.value)


def test_component_cuda_and_nccl_requirements_are_enforced(tmp_path):
    """The schema lets a release declare cuda/nccl specifiers; the rules honour them."""
    folder = copy_matrix(tmp_path / "m")
    edit(folder, "deepspeed.yaml",
         '"0.16.8", "0.16.9"]\n    requires: {torch: ">=1.9", python: ">=3.8"}',
         '"0.16.8", "0.16.9"]\n    requires: {torch: ">=1.9", python: ">=3.8", cuda: ">=12", nccl: ">=2.19"}')
    m = load_matrix(folder)
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cu118-ds0.16", matrix=m)
    assert "deepspeed_requires" in {v.rule for v in ei.value.violations}
    assert "requires cuda >=12" in str(ei.value)
    st = resolve_target("cu121-ds0.16", matrix=m)  # torch 2.5.1 cu121 bundles NCCL 2.21.5
    assert st.deepspeed.line == "0.16" and str(st.nccl.version) == "2.21.5"
    st = resolve_target("cpu-ds0.16", matrix=m)  # no CUDA, no NCCL: nothing to judge
    assert st.deepspeed.line == "0.16"
    with pytest.raises(IncompatibleError) as ei:
        resolve_target("cu121-torch2.1-ds0.16", matrix=m)  # torch 2.1.2 bundles NCCL 2.18.1
    assert "requires nccl >=2.19" in str(ei.value)
