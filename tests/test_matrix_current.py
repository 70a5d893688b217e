"""The matrix current to December 2026 (issue 32): CUDA 13.4/13.5, advisories, driver branch
lifecycle, the platform search, and matrix verify's candidate overlay. Offline: the live
built-in matrix, a local index for verify."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from core_helpers import edit, live

from envbuilder.api import check_combination, resolve_target
from envbuilder.core.advisories import advisories_for, branch_status, driver_eol_warning, stack_facts
from envbuilder.core.matrix import load_matrix
from envbuilder.core.target import Pins
from envbuilder.errors import IncompatibleError, InputError
from envbuilder.knowledge.indexcheck import Finding, MatrixReport
from envbuilder.knowledge.overlay import write_overlay
from envbuilder.knowledge.show import show_axis

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ("docs.nvidia.com", "developer.download.nvidia.com", "pypi.org", "github.com/pytorch/",
          "github.com/NVIDIA/", "github.com/deepspeedai/", "github.com/horovod/", "download.pytorch.org",
          "gitlab.com/nvidia/", "hub.docker.com/r/nvidia/", "packages.ubuntu.com", "packages.debian.org",
          "launchpad.net", "github.com/microsoft/DeepSpeed", "docs.pytorch.org", "pytorch.org")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envbuilder", *args], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "ENVBUILDER_NO_CACHE": "1",
                                         "PATH": "/usr/bin:/bin", "HOME": "/tmp"})


# -- CUDA 13.4 / 13.5 -------------------------------------------------------------------------

def test_cuda_13_4_on_a_580_driver_runs_by_minor_version_compatibility():
    d = check_combination(cuda="13.4", driver="580.65.06").to_dict()
    assert d["ok"]
    w = [x for x in d["warnings"] if x["rule"] == "driver_cuda"]
    assert w and "615" in w[0]["message"] and "minor-version compatibility" in w[0]["message"]
    assert any("13.4.1" in s for s in w[0]["source"])


def test_cuda_13_4_toolkits_record_the_branch_rule_and_the_new_scheme():
    m = live()
    tks = {str(t.version): t for t in m.toolkits}
    assert "13.4.0" not in tks, "13.4.0 was a developer preview"
    assert tks["13.4.1"].driver_min == "615" and tks["13.4.2"].driver_min == "615"
    assert tks["13.5.0"].driver_min == "620"
    assert m.base_images_for(tks["13.4.1"].version, "ubuntu26.04") is not None


def test_cu134_is_refused_for_want_of_a_torch_build_not_as_unknown():
    with pytest.raises(IncompatibleError) as e:
        resolve_target("cu134", matrix=live())
    assert "no torch release in the matrix has cu134 wheels" in str(e.value)
    assert e.value.exit_code == 3


# -- the platform search: per platform and axis -----------------------------------------------

@pytest.mark.parametrize("target,platform,expect", [
    ("cu128", "linux/amd64", "2.11.0"),        # cuda axis, amd64: the newest cu128 torch
    ("cu128", "linux/arm64", "2.11.0"),        # 2.11's cu128 aarch64 build (RELEASE.md, HF build variants)
    ("cu128-torch2.11", "linux/arm64", "2.11.0"),
    ("cu130", "linux/arm64", "2.14.1"),        # cuda axis, arm64: the newest cu130 arm64 build
    ("cu132", "linux/arm64", "2.15.0"),
    ("cu130-torch2.11", "linux/arm64", "2.11.0"),  # torch axis pinned: 2.11's cu130 aarch64 wheels
    ("cu126-torch2.11", "linux/arm64", "2.11.0"),
    ("cu129-torch2.13", "linux/arm64", None),  # an index-only variant with no aarch64 wheels: the reason
    ("cu118-torch2.7", "linux/arm64", None),
])
def test_platform_search_picks_among_releases_with_the_build(target, platform, expect):
    args = ["resolve", target, "--platform", platform, "--json"]
    r = _cli(*args)
    if expect is None:
        assert r.returncode == 3, r.stderr
        assert f"wheels for {platform}" in r.stderr
        assert "has no cu128 wheels (it has" not in r.stderr  # not the 2.15.0 variant refusal
    else:
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["torch"] == expect


def test_arm64_cuda_wheels_of_a_pypi_default_variant_come_from_pytorchs_index():
    """torch 2.8-2.10's aarch64 wheels on PyPI are CPU builds (pytorch/pytorch#160162): an arm64
    stack of their PyPI-default variant (cu128) installs from download.pytorch.org; amd64 from PyPI."""
    arm = resolve_target("cu128-torch2.9", matrix=live(), pins=Pins(platform="linux/arm64"))
    assert arm.torch_index == "https://download.pytorch.org/whl/cu128"
    amd = resolve_target("cu128-torch2.9", matrix=live())
    assert amd.torch_index.startswith("https://pypi.org")
    new = resolve_target("cu130-torch2.11", matrix=live(), pins=Pins(platform="linux/arm64"))
    assert new.torch_index.startswith("https://pypi.org")  # 2.11: CUDA aarch64 wheels on PyPI


# -- advisories ---------------------------------------------------------------------------------

def test_matrix_show_advisories_lists_at_least_ten_sourced_entries():
    t = show_axis(live(), "advisories")
    assert len(t.rows) >= 10
    comps = {r[1] for r in t.rows}
    assert {"nccl", "cuda", "cublas", "driver", "torch"} <= comps
    assert all(s and all(u.startswith("https://") for u in s) for s in t.sources)
    assert _cli("matrix", "show", "advisories").returncode == 0


def test_advisories_for_reads_facts_with_packaging_specifiers():
    m = live()
    assert [a.id for a in advisories_for({"nccl": "2.29.2"}, m)] == ["nccl-2.29.2-hang"]
    assert advisories_for({"nccl": "2.29.3"}, m) == []
    assert [a.id for a in advisories_for({"driver": "595.71.05"}, m)] == ["driver-595.71.05-xid79"]
    assert [a.id for a in advisories_for({"cublas": "13.2.1.5"}, m)] == ["cublas-13.2-grouped-gemm-wgrad"]
    assert advisories_for({"nccl": "not-a-version", "gpu": "x"}, m) == []
    st = resolve_target("cu121-torch2.2.0", matrix=m)
    assert stack_facts(st)["torch"] == "2.2.0"
    assert "torch-2.2.0-v100-regression" in {a.id for a in advisories_for(stack_facts(st), m)}


def test_resolve_picks_the_fixed_release_and_warns_when_the_bad_one_is_pinned(tmp_path: Path):
    # an advisory on the newest 2.2 release: the line resolves to the one before it
    mdir = tmp_path / "m"
    shutil.copytree(ROOT / "matrices", mdir, ignore=shutil.ignore_patterns("*.md"))
    edit(mdir, "incompatibilities.yaml", "- id: torch-2.2.0-v100-regression\n  component: torch\n"
         "  affected: \"==2.2.0\"", "- id: torch-2.2.0-v100-regression\n  component: torch\n"
         "  affected: \"==2.2.2\"")
    m = load_matrix(mdir)
    st = resolve_target("cu121-torch2.2", matrix=m)
    assert str(st.torch.version) == "2.2.1"
    assert not [w for w in st.warnings if w.rule == "advisory" and "torch" in w.message.split()[0]]
    pinned = resolve_target("cu121-torch2.2.2", matrix=m)
    w = [x for x in pinned.warnings if x.rule == "advisory" and x.message.startswith("torch")]
    assert w and "https://github.com/pytorch/pytorch/issues/119295" in w[0].message
    assert "torch-2.2.0-v100-regression" in json.dumps(pinned.to_dict()["warnings"])


def test_resolve_warns_with_the_advisory_url():
    r = _cli("resolve", "cu121-torch2.2.0")
    assert r.returncode == 0, r.stderr
    assert "advisory" in r.stderr and "https://github.com/pytorch/pytorch/issues/119295" in r.stderr
    assert "warning:" not in r.stdout
    j = _cli("resolve", "cu121-torch2.2.0", "--json")
    assert any(w["rule"] == "advisory" for w in json.loads(j.stdout)["warnings"])


# -- driver branch lifecycle -------------------------------------------------------------------

def test_driver_branch_lifecycle():
    m = live()
    day = dt.date(2026, 12, 1)
    st = branch_status("535.104.05", m, today=day)
    assert st["eol"] == "2026-06" and st["eol_passed"] and st["oldest_supported"] == 580
    assert driver_eol_warning("580.65.06", m, today=day) is None


def test_branches_past_eol_by_nvidias_table_and_its_not_listed_rule():
    """NVIDIA's supported-drivers Table 2: R570 ended February 2026, R580 runs to August 2028,
    and "all other previous driver branches not listed ... are end of life" (R575, R525...)."""
    m = live()
    day = dt.date(2026, 12, 1)
    assert branch_status("580.65.06", m, today=day)["eol"] == "2028-08"
    st = branch_status("570.133.20", m, today=day)
    assert st["eol"] == "2026-02" and st["eol_passed"] and st["designation"] == "production"
    for old in ("575.51.03", "525.60.13", "560.35.03"):
        st = branch_status(old, m, today=day)
        assert st["eol_passed"] and st["eol"] is None and st["oldest_supported"] == 580, old
        w = driver_eol_warning(old, m, today=day)
        assert w and "end of life" in w and "supported-drivers-and-cuda-toolkit-versions.html" in w
    for newer in ("590.44.01", "615.71.09", "620.10.01"):  # unlisted but newer: no verdict
        assert driver_eol_warning(newer, m, today=day) is None, newer
    assert "R535" in (driver_eol_warning("535.104.05", m, today=day) or "")
    assert branch_status("999.1", m) is None
    d = check_combination(cuda="12.2", driver="535.104.05").to_dict()
    w = [x for x in d["warnings"] if x["rule"] == "driver_lifecycle"]
    assert w and "R535" in w[0]["message"] and "R580" in w[0]["fix"] and w[0]["source"]
    # the lifecycle warning is not a compatibility finding: init still sees 12.2 run natively
    assert not [x for x in d["warnings"] if x["rule"] == "driver_cuda"]


# -- DeepSpeed 2026 breakages, torch arch ------------------------------------------------------

def test_deepspeed_2026_breakages_are_rules_with_issue_links():
    m = live()
    ids = {x.id: x for x in m.incompatibilities}
    for i in ("deepspeed-0.18.6-torch-lt-2.4-py312", "deepspeed-0.18.7-torch-lt-2.4-amp",
              "deepspeed-lt-0.19.6-torch-2.12-cxx17", "deepspeed-lt-0.19.7-cuda13-torch-2.12-nvcc-cxx17"):
        assert any("github.com/deepspeedai/DeepSpeed/" in s for s in ids[i].source)
    with pytest.raises(IncompatibleError) as e:
        resolve_target("cu130-torch2.14-ds0.19.5", matrix=m)
    assert "deepspeed-lt-0.19.6-torch-2.12-cxx17" in str(e.value) or "0.19.6" in str(e.value)


def test_torch_2_11_cu128_has_no_volta_kernels():
    m = live()
    t = next(r for r in m.torch if str(r.version) == "2.11.0")
    assert "sm_70" not in t.variants["cu128"].arch
    assert "linux/arm64" in t.variants["cu130"].platforms


def test_horovod_is_marked_legacy_in_matrix_show():
    t = show_axis(live(), "horovod")
    assert t.rows and all(r[-1] == "legacy" for r in t.rows)


# the facts whose every source is neither the vendor's, the project's nor a registry's page
# (2026-12-01, after moving DeepSpeed 0.18/0.19.0 to PyPI's simple index): may only shrink
NON_VENDOR = {
    "advisory cublas-13.5.1.27-rtx50", "advisory nccl-2.19.4-perf-regression",
    "advisory nccl-2.30-gb200-cp-hang", "base 12.9.2 ubuntu24.04/ubuntu22.04/ubuntu20.04",
    "base 13.3.1 ubuntu26.04/ubuntu24.04/ubuntu22.04", "incompatibility deepspeed-aio-prebuild-torch-2.1",
}


def test_facts_from_non_vendor_sources_are_listed_and_the_list_only_shrinks():
    m = live()
    facts = [(f"cuda {t.version}", t.source) for t in m.toolkits]
    facts += [(f"base {b.cuda} {'/'.join(b.os)}", b.source) for b in m.base_images]
    facts += [(f"torch {t.version}", t.source) for t in m.torch]
    facts += [(f"{c.component} {c.version}", c.source) for c in m.component("deepspeed").releases + m.component("horovod").releases]
    facts += [(f"incompatibility {x.id}", x.source) for x in m.incompatibilities]
    facts += [(f"advisory {x.id}", x.source) for x in m.advisories]
    weak = {name for name, src in facts if not any(any(v in s for v in VENDOR) for s in src)}
    assert weak <= NON_VENDOR, f"new facts without a vendor/project/registry source: {sorted(weak - NON_VENDOR)}"


# -- matrix verify --write-overlay ---------------------------------------------------------------

def test_verify_write_overlay_is_loaded_by_matrix_overlay(tmp_path: Path):
    """A recorded verify report (the findings an index answered) -> an overlay that loads."""
    rep = MatrixReport("m", "d")
    pypi = "https://pypi.org/simple"
    rep.findings += [
        Finding("new", "torch 2.15.1", "release", None, "2.15.1", pypi),
        Finding("new", "torch 2.16.0", "release", None, "2.16.0", pypi),
        Finding("new", "torch 2.15.0 cu134", "variant", None, "cu134", "https://download.pytorch.org/whl/cu134"),
        Finding("new", "deepspeed 0.19.9", "release", None, "0.19.9", f"{pypi}/deepspeed/"),
        Finding("new", "NCCL (nvidia-nccl-cu13) 2.30.9", "release", None, "2.30.9", f"{pypi}/nvidia-nccl-cu13/"),
        Finding("new", "CUDA 13.5.1", "release", None, "13.5.1", f"{pypi}/cuda-toolkit/"),
        Finding("disagree", "torch 2.6.0 cu124", "nccl", "2.20.5", "2.21.5", pypi),
    ]
    m = live()
    out = tmp_path / "overlay"
    names = write_overlay(rep, m, out, today=dt.date(2026, 12, 1))
    assert names == ["cuda.yaml", "deepspeed.yaml", "nccl.yaml", "torch.yaml"]
    m2 = load_matrix(overlay=out)
    versions = {str(t.version) for t in m2.torch}
    assert {"2.15.0", "2.15.1", "2.16.0"} <= versions
    assert "cu134" in next(t for t in m2.torch if str(t.version) == "2.15.0").variants
    assert "0.19.9" in {str(c.version) for c in m2.component("deepspeed").releases}
    assert "2.30.9" in {str(n.version) for n in m2.nccl}
    assert "13.5.1" in {str(t.version) for t in m2.toolkits}
    assert all(e["action"] in ("added", "replaced") and e["source"] for e in m2.overlay)
    assert "review before merging" in (out / "torch.yaml").read_text()


# -- free-threaded Python ------------------------------------------------------------------------

def test_free_threaded_python_resolves_where_torch_ships_its_wheels():
    m = live()
    st = resolve_target("cu130", matrix=m, pins=Pins(python="3.14t"))
    assert st.python == "3.14t" and "3.14t" in st.torch.python_ft
    assert st.to_dict()["python"] == "3.14t"
    # 2.12.1 dropped cp313t (2.12.0 had it, as PyPI's files say): 2.12.1 with 3.13t is refused
    # with the reason (2.12.0 has the wheels; no OS of the matrix installs a 3.13t)
    with pytest.raises(IncompatibleError) as e:
        resolve_target("cu130-torch2.12.1", matrix=m, pins=Pins(python="3.13t"))
    assert "cp313t" in str(e.value) and "free-threaded" in str(e.value)
    # a free-threaded Python no torch ships is bad input, named
    with pytest.raises(InputError) as bad:
        resolve_target("cu130", matrix=m, pins=Pins(python="3.12t"))
    assert "3.12t" in str(bad.value) and "3.14t" in str(bad.value)
    # never chosen unpinned
    assert resolve_target("cu130", matrix=m).python.endswith("t") is False


def test_free_threaded_python_is_refused_for_a_torch_without_cp3xxt_wheels():
    with pytest.raises(IncompatibleError) as e:
        check_combination(torch="2.6", python="3.13t")
    assert "cp313t" in str(e.value)
    assert check_combination(torch="2.14", python="3.14t").to_dict()["ok"]


def test_doctor_warns_for_an_end_of_life_driver_branch_of_a_recorded_host():
    from test_doctor import by_name, host

    from envbuilder.diagnose.doctor import run_doctor

    c = by_name(run_doctor(probe=host("hgx-h100-old-driver")))
    assert c["driver"].value == "535.104.05"
    assert c["driver-support"].status == "warn" and "R535" in c["driver-support"].detail
    assert "R580" in c["driver-support"].fix
    healthy = by_name(run_doctor(probe=host("hgx-h100-8gpu")))  # R565: end of life by NVIDIA's table
    assert healthy["driver-support"].status == "warn" and "R565" in healthy["driver-support"].detail
    assert healthy["driver"].value == "565.57.01"


def test_horovod_is_legacy_in_resolve():
    st = resolve_target("cu118-hvd0.28", matrix=live())
    w = [x for x in st.warnings if x.rule == "horovod_legacy"]
    assert w and "2023" in w[0].message and w[0].source
    assert not [x for x in resolve_target("cu118", matrix=live()).warnings if x.rule == "horovod_legacy"]


def test_init_says_what_runs_by_minor_version_compatibility_and_the_branch_eol():
    from envbuilder.core.init import choose, project_toml

    c = choose(live(), driver="550.90.07", gpus_per_node=8, nodes=1)
    assert c.target == "cu124"
    assert {"cu126", "cu128"} <= set(c.minor_compat) and "cu130" not in c.minor_compat
    assert c.warnings and "R550" in c.warnings[0]
    text = project_toml(c, source="test")
    assert "minor-version compatibility only" in text and "# warning: driver 550.90.07" in text
    assert c.to_dict()["minor_compat"] == c.minor_compat


@pytest.mark.parametrize("cuda,driver,mode", [
    ("13.2", "580.65.06", "minor-compat"), ("12.4", "550.90.07", "native"),
    ("12.8", "550.90.07", "minor-compat"), ("13.0", "550.90.07", "forward-compat"),
])
def test_check_and_resolve_say_the_same_of_what_a_driver_runs(cuda, driver, mode):
    from envbuilder.core.rules import driver_mode

    m = live()
    st = resolve_target("cu" + cuda.replace(".", ""), matrix=m, pins=Pins(driver=driver))
    assert st.to_dict()["driver_min"]["runs"] == mode
    if mode != "forward-compat":  # check refuses what runs only by forward compatibility
        assert check_combination(cuda=cuda, driver=driver).to_dict()["runs"] == mode
    assert check_combination(cuda="13.4", driver="580.65.06").to_dict()["runs"] == "minor-compat"
    tk = next(t for t in m.toolkits if str(t.version) == st.to_dict()["driver_min"]["toolkit"])
    assert driver_mode(m, tk, driver) == mode


def test_a_forward_compat_stack_on_a_branch_past_its_end_of_life_is_warned_about():
    """13.0 on R550 runs only by forward compatibility; the 13.0 images' NVIDIA_REQUIRE_CUDA lists
    R550, so they start, but R550 reached end of life (June 2025): a warning naming both facts."""
    st = resolve_target("cu130", matrix=live(), pins=Pins(driver="550.90.07"))
    w = next(v for v in st.warnings if v.rule == "image_driver_branch")
    assert "R550" in w.message and "end of life" in w.message and "forward compatibility" in w.message
    assert any("Dockerfile" in s for s in w.source) and any("gpu-driver-container" in s for s in w.source)


def test_a_v100_host_is_not_offered_torch_2_11_cu128():
    from envbuilder.core.init import choose

    def pick(cap: str):
        c = choose(live(), driver="580.65.06", gpus_per_node=8, nodes=1, compute_caps=[cap],
                   torch="2.11")
        return c.target, c

    target, c = pick("7.0")  # V100: 2.11's cu128 build has no sm_70 kernels
    assert target == "cu126" and "sm_70" in c.stack.to_dict()["torch_arch"]
    assert any(r.startswith("cu128:") and "sm_70" in r for r in c.refused)
    assert pick("7.5")[0] == "cu128"  # T4 (sm_75): the cu128 build is fine
