"""The OS's package manager: how a stage installs OS packages, which packages a compiling
builder needs, and the CA store, for apt (Debian, Ubuntu) and dnf (Rocky Linux).

The plan and the components name packages; which names, and the commands that install them,
come from the stack's OS (``OsInfo.package_manager``) through ``of(os)``: no caller branches
on the OS family. Components return their packages for ``stack.os.package_manager`` in
``builder_apt``/``runtime_apt`` (the hooks keep their historical names).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from envbuilder.core.matrix import OsInfo, OsPython


def _q(packages: tuple[str, ...] | list[str]) -> str:
    return " ".join(shlex.quote(p) for p in packages)


# What apt, dpkg and ldconfig leave behind that differs between two builds of the same step
# (measured, shared/MACHINE.md "Bit-for-bit reproducible images": exactly these six differed
# between two otherwise identical builds; Docker's official images remove them the same way,
# https://github.com/docker-library/ruby/pull/455): removed in the step that installs.
APT_STATE = ("/var/lib/apt/lists/*", "/var/cache/apt/*.bin", "/var/cache/ldconfig/aux-cache",
             "/var/log/apt/history.log", "/var/log/apt/term.log", "/var/log/dpkg.log")
DNF_STATE = ("/var/cache/dnf", "/var/log/dnf*.log", "/var/log/hawkey.log",
             "/var/cache/ldconfig/aux-cache")
# --apt-snapshot URL: a snapshot archive's root; each apt source's http(s)://HOST/ARCHIVE
# becomes URL/ARCHIVE/DATE/ for the step (snapshot.debian.org's and snapshot.ubuntu.com's layout)
SNAPSHOT_URL_RE = re.compile(r"^https?://[A-Za-z0-9._~:/-]+\Z")
SNAPSHOT_DATE_RE = re.compile(r"^[0-9]{8}T[0-9]{6}Z\Z")
SOURCES = "/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources"


@dataclass(frozen=True)
class Snapshot:
    """apt pointed at an archive of the mirror as of ``date`` (YYYYMMDDTHHMMSSZ) for one step,
    its sources restored afterwards (the image keeps the base's own sources)."""

    url: str
    date: str

    def __post_init__(self) -> None:
        if not SNAPSHOT_URL_RE.fullmatch(self.url) or not SNAPSHOT_DATE_RE.fullmatch(self.date):
            raise ValueError(f"snapshot {self.url!r} {self.date!r}")

    def before(self) -> list[str]:
        root = self.url.rstrip("/")
        return [f"for f in {SOURCES}; do if [ -f \"$f\" ]; then cp -p \"$f\" \"$f.envbuilder-orig\" && "
                f"sed -E -i 's#https?://[^/ ]+/([^/ ]+)/?#{root}/\\1/{self.date}/#g' \"$f\"; fi; done"]

    def after(self) -> list[str]:
        return [f"for f in {SOURCES}; do if [ -f \"$f.envbuilder-orig\" ]; then "
                f"mv \"$f.envbuilder-orig\" \"$f\"; fi; done"]


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

    def install(self, packages: tuple[str, ...] | list[str], *,
                pins: Mapping[str, str] | None = None, snapshot: Snapshot | None = None) -> list[str]:
        """One install step, its caches, logs and the state that differs between two builds
        removed in the same step. ``pins`` (apt; a lock's, lock.system): name -> version of
        every package the step installs, deps included: each goes on the line as
        ``name=version`` (the packages asked for that the lock saw installed already are among
        them, at the base's version), so the step installs exactly those. ``snapshot``: apt
        reads a snapshot archive for the step (``--apt-snapshot``)."""
        if self.name == "dnf":
            return ["dnf install -y --setopt=install_weak_deps=False --nodocs " + _q(packages),
                    "dnf clean all", "rm -rf " + " ".join(DNF_STATE)]
        names = list(packages)
        if pins:
            names = [f"{n}={v}" for n, v in sorted(pins.items())] + [p for p in packages if p not in pins]
        update = "apt-get update"
        if snapshot is not None:  # a snapshot's Release files are past their Valid-Until
            update = "apt-get -o Acquire::Check-Valid-Until=false update"
        return [*(snapshot.before() if snapshot else []), update,
                "apt-get install -y --no-install-recommends " + _q(names),
                *(snapshot.after() if snapshot else []), "rm -rf " + " ".join(APT_STATE)]

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
