"""The fabric (--fabric): the RDMA user space NCCL's IB transport opens, in the runtime stage of
CUDA images (ib, the default, and efa), and for EFA AWS's OFI NCCL plugin, built in a stage of
its own from its pinned, checksummed release; verify checks each library loads."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Mapping

from envbuilder.components.base import Component, VerifyCheck, VerifyContext
from envbuilder.components.instructions import Copy, Run, Stage, cmds
from envbuilder.components.os_packages import APT
from envbuilder.errors import IncompatibleError

if TYPE_CHECKING:
    from envbuilder.core.resolve import Stack

# The RDMA user space NCCL's IB transport opens (libibverbs.so.1, librdmacm.so.1, the verbs
# providers that drive the HCA) and ibv_devinfo, from the OS's own rdma-core packages. The
# -utils packages are named so that the library packages come as their dependencies under the
# names each release gives them (librdmacm1 on Debian 12, librdmacm1t64 on Ubuntu 24.04).
# https://packages.debian.org/bookworm/ibverbs-providers
# https://packages.debian.org/bookworm/ibverbs-utils  https://packages.debian.org/bookworm/rdmacm-utils
# https://packages.ubuntu.com/noble/rdmacm-utils
RDMA_APT = ("ibverbs-providers", "ibverbs-utils", "rdmacm-utils")
# the same user space on Rocky Linux (dnf): rdma-core's verbs providers and tools
# https://docs.rockylinux.org/ (RHEL 9: "Configuring InfiniBand and RDMA networks")
RDMA_DNF = ("rdma-core", "libibverbs-utils", "librdmacm-utils")
RDMA = {"apt": RDMA_APT, "dnf": RDMA_DNF}  # by the OS's package manager (OsInfo.package_manager)
# EFA (--fabric efa): libfabric from the OS (its efa provider) and AWS's OFI NCCL plugin, built
# in the builder stage from its pinned, checksummed release tarball
# https://github.com/aws/aws-ofi-nccl/releases/tag/v1.20.0 (sha256 as NixOS/nixpkgs
# pkgs/by-name/aw/aws-ofi-nccl/package.nix records it); https://packages.debian.org/bookworm/libfabric1
EFA_APT_RUNTIME = ("libfabric1", "libhwloc15")
EFA_APT_BUILD = ("libfabric-dev", "libhwloc-dev", "curl", "build-essential")
OFI_NCCL_VERSION = "1.20.0"
OFI_NCCL_URL = (f"https://github.com/aws/aws-ofi-nccl/releases/download/v{OFI_NCCL_VERSION}/"
                f"aws-ofi-nccl-{OFI_NCCL_VERSION}.tar.gz")
OFI_NCCL_SHA256 = "2f723c4af5fc1fa4b3efd2025822b31b3af0c340f75a312a37e932b77b824250"
OFI_NCCL_PREFIX = "/opt/amazon/ofi-nccl"
EFA_STAGE = "fabric-efa"


def apt(packages: tuple[str, ...] | list[str]) -> list[str]:
    """One apt-get install, its lists removed in the same step (the EFA stage: Debian/Ubuntu)."""
    return APT.install(packages)


class Fabric(Component):
    name = "fabric"
    facts_key = "rdma"

    def active(self, stack: Stack) -> bool:
        return stack.fabric != "none"

    def refuse(self, stack: Stack, base_image: str | None) -> None:
        """EFA's libfabric packages and the OFI NCCL plugin's build are Debian/Ubuntu's (apt)."""
        if stack.fabric == "efa" and stack.os.package_manager != "apt":
            raise IncompatibleError(f"--fabric efa is not supported on {stack.os.name} yet (AWS's OFI NCCL "
                                    "plugin is built against Debian/Ubuntu's libfabric); use an Ubuntu OS "
                                    "or --fabric ib")

    def runtime_apt(self, stack: Stack) -> tuple[str, ...]:
        """Runtime OS packages of the fabric, for the OS's package manager (verbs, rdmacm,
        ibv_devinfo; + libfabric for EFA)."""
        if stack.fabric == "none":
            return ()
        return RDMA[stack.os.package_manager] + (EFA_APT_RUNTIME if stack.fabric == "efa" else ())

    def build_stage(self, stack: Stack, site_packages: str) -> Stage | None:
        """--fabric efa: build AWS's OFI NCCL plugin from its pinned, checksummed release tarball
        against the OS's libfabric and the CUDA runtime headers of torch's nvidia wheel (in the
        venv), into OFI_NCCL_PREFIX."""
        if stack.fabric != "efa":
            return None
        src, tgz = "/tmp/aws-ofi-nccl", "/tmp/aws-ofi-nccl.tar.gz"
        cuda = (f'cuda="$(dirname "$(dirname "$(find {site_packages}/nvidia -path '
                "'*/include/cuda_runtime_api.h' | head -n 1)\")\")\"")
        run = Run(cmds(*apt(EFA_APT_BUILD), *[
            f"curl -fsSL -o {tgz} {shlex.quote(OFI_NCCL_URL)}",
            f'echo "{OFI_NCCL_SHA256}  {tgz}" | sha256sum -c -',
            f"mkdir -p {src}", f"tar -xzf {tgz} -C {src} --strip-components=1",
            cuda,
            f'env -C {src} ./configure --prefix={OFI_NCCL_PREFIX} --with-libfabric=/usr '
            f'--with-cuda="$cuda" --disable-tests',
            f'make -C {src} -j"$(nproc)"', f"make -C {src} install",
            f"rm -rf {src} {tgz}"]))
        return Stage(EFA_STAGE, "fabric: AWS's OFI NCCL plugin (EFA), against torch's CUDA runtime headers",
                     "fabric (AWS's OFI NCCL plugin, EFA)", run)

    def runtime_copies(self, stack: Stack) -> tuple[Copy, ...]:
        if stack.fabric != "efa":
            return ()
        return (Copy(OFI_NCCL_PREFIX, OFI_NCCL_PREFIX, from_stage=EFA_STAGE),)

    def runtime_steps(self, stack: Stack) -> Run:
        """NCCL opens libnccl-net.so by name: the plugin's lib on the loader's path."""
        if stack.fabric != "efa":
            return Run()
        return Run(cmds(f"echo {OFI_NCCL_PREFIX}/lib > /etc/ld.so.conf.d/aws-ofi-nccl.conf", "ldconfig"))

    def verify_checks(self, facts: Mapping[str, Any], ctx: VerifyContext) -> list[VerifyCheck]:
        return rdma_checks(facts.get("rdma"), ctx.labels.get("fabric"))


def rdma_checks(r: Mapping[str, Any] | None, fabric: str | None) -> list[VerifyCheck]:
    """An image labelled with a fabric (ib, efa) carries the RDMA user space NCCL's IB
    transport opens: each soname loads (dlopen, as NCCL does; no HCA needed), ibv_devinfo
    runs (here: no devices), and for EFA the OFI NCCL plugin is there."""
    if fabric not in ("ib", "efa"):
        return []
    if r is None:
        return [VerifyCheck("rdma", False, fabric, None,
                            "the verification payload reported no RDMA facts")]
    out = []
    providers = r.get("providers") or []
    for so, rec in sorted((r.get("libs") or {}).items()):
        ok = bool(rec.get("loaded"))
        name = "rdma_" + so.split(".so")[0].removeprefix("lib")
        detail = (f"{so} loads ({rec.get('path')}; {rec.get('devices', 'n/a')} verbs devices, "
                  f"{len(providers)} providers)" if ok and "devices" in rec else
                  f"{so} loads ({rec.get('path')})" if ok else
                  f"{so} does not load: {rec.get('error')}: NCCL would use sockets, not "
                  f"InfiniBand/RoCE (NET/IB : No device found)")
        out.append(VerifyCheck(name, ok, "loads", {"loaded": ok, "path": rec.get("path")}, detail))
    d = r.get("ibv_devinfo") or {}
    ran = d.get("found") and "error" not in d and (d.get("exit") == 0 or d.get("no_devices"))
    if not d.get("found"):
        detail = "ibv_devinfo is not in the image (ibverbs-utils)"
    elif ran:
        hca = d.get("hca") or []
        detail = (f"ibv_devinfo runs: {', '.join(hca)}" if hca else
                  f"ibv_devinfo runs and reports no devices ({(d.get('output') or '').splitlines()[0]})")
    else:
        detail = f"ibv_devinfo failed: {d.get('error') or d.get('output')}"
    out.append(VerifyCheck("rdma_ibv_devinfo", bool(ran), "runs",
                           {k: d.get(k) for k in ("exit", "no_devices", "hca")}, detail))
    if fabric == "efa":
        plugins = r.get("ofi_nccl") or []
        out.append(VerifyCheck("efa_ofi_nccl", bool(plugins), "libnccl-net*.so", plugins,
                               f"AWS's OFI NCCL plugin: {', '.join(plugins)}" if plugins else
                               "no OFI NCCL plugin (libnccl-net*.so) under /opt/amazon/ofi-nccl/lib"))
    return out


COMPONENT = Fabric()
ORDER = 40
