"""The OS's package manager: how a stage installs OS packages, which packages a compiling
builder needs, and the CA store, for apt (Debian, Ubuntu) and dnf (Rocky Linux).

The plan and the components name packages; which names, and the commands that install them,
come from the stack's OS (``OsInfo.package_manager``) through ``of(os)``: no caller branches
on the OS family. Components return their packages for ``stack.os.package_manager`` in
``builder_apt``/``runtime_apt`` (the hooks keep their historical names).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envbuilder.core.matrix import OsInfo, OsPython


def _q(packages: tuple[str, ...] | list[str]) -> str:
    return " ".join(shlex.quote(p) for p in packages)


@dataclass(frozen=True)
class PackageManager:
    """One package manager's commands and package names."""

    name: str  # apt | dnf
    ca_bundle: str  # the OS's CA bundle (pip's PIP_CERT)
    build_tools: tuple[str, ...]  # a compiling builder's C/C++ compilers, make, git
    runtime_tools: tuple[str, ...] = ()  # what the runtime stage needs beyond Python (useradd)
    # gcc-N/g++-N packages and commands beside the default (Debian, Ubuntu); dnf: the OS's GCC
    # only (RHEL's newer ones are gcc-toolset-N software collections, not used)
    versioned_gcc: bool = True

    def install(self, packages: tuple[str, ...] | list[str]) -> list[str]:
        """One install step, its caches removed in the same step."""
        if self.name == "dnf":
            return ["dnf install -y --setopt=install_weak_deps=False --nodocs " + _q(packages),
                    "dnf clean all", "rm -rf /var/cache/dnf"]
        return ["apt-get update", "apt-get install -y --no-install-recommends " + _q(packages),
                "rm -rf /var/lib/apt/lists/*"]

    def python_devel(self, python: str, os_py: OsPython) -> tuple[str, ...]:
        """The builder's Python headers: the matrix's ``devel`` entry, else python{X.Y}-dev(el)."""
        if os_py.devel:
            return os_py.devel
        return (f"python{python}-devel",) if self.name == "dnf" else (f"python{python}-dev",)

    def trust_ca(self) -> list[str]:
        """Make the CA certificates both formats copy to /usr/local/share/ca-certificates/envbuilder
        trusted: Debian's update-ca-certificates reads that folder itself; RHEL's trust store
        reads /etc/pki/ca-trust/source/anchors."""
        if self.name == "dnf":
            return ["find /usr/local/share/ca-certificates/envbuilder -name '*.crt' "
                    "-exec cp {} /etc/pki/ca-trust/source/anchors/ \\;", "update-ca-trust"]
        return ["update-ca-certificates"]


APT = PackageManager("apt", "/etc/ssl/certs/ca-certificates.crt", ("build-essential", "git"))
# Rocky Linux 9 (RHEL 9): build-essential's counterpart; shadow-utils (useradd, userdel) is not
# in every RHEL-family base image
# https://docs.redhat.com/en/documentation/red_hat_enterprise_linux/9/html/developing_c_and_cpp_applications_in_rhel_9/index
DNF = PackageManager("dnf", "/etc/pki/tls/certs/ca-bundle.crt", ("gcc", "gcc-c++", "make", "git"),
                     runtime_tools=("shadow-utils",), versioned_gcc=False)
MANAGERS = {pm.name: pm for pm in (APT, DNF)}


def of(os: OsInfo) -> PackageManager:
    """The package manager of an OS of the matrix."""
    return MANAGERS[os.package_manager]
