"""What a lock pins beyond Python: the date of its builds and, with ``lock --system``, the base
and builder images by digest and every apt package each stage installs, by version.

A lock's header (format 5) keeps them below its inputs, with their own digest::

    # source date epoch: 1733356800 (2024-12-05T00:00:00Z)
    # system pins (envbuilder lock --system; lock --check compares them with the images and the mirror):
    #   resolved at: 2026-12-05T08:40:12Z
    #   image builder: envbuilder-test/debian:12@sha256:... (engine)
    #   image runtime: envbuilder-test/debian:12@sha256:... (engine)
    #   apt builder: ca-certificates=20230311+deb12u1
    #   apt runtime: python3.11=3.11.2-6+deb12u6
    # pins digest: sha256:...

``SOURCE_DATE_EPOCH`` is the lock's date: ``--exclude-newer`` when the lock was made with it,
else the newest release date among the stack's torch, NCCL and components (the matrix's
``released:``), so locking twice still gives the same bytes. Every build of the lock uses it
(file times, the image's dates, hash-checked ``.pyc`` files).

The system pins are resolved through a Docker engine (``envbuilder.run.system``: each stage's
apt installs simulated in its base image, pinned by digest); this module is their model: the
header lines, read and written, their digest, and the comparison ``lock --check`` makes with
what the registry, the engine and the mirror say now. Only apt stages are pinned package by
package; a dnf (Rocky Linux) stack's packages are not (its images still are, by digest).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

from envbuilder.errors import InputError

from envbuilder.render.plan import stack_epoch

if TYPE_CHECKING:
    from envbuilder.core.resolve import Stack

SDE_LINE = "# source date epoch: "
SYSTEM_TITLE = ("# system pins (envbuilder lock --system; lock --check compares them with the "
                "images and the mirror):")
PINS_DIGEST = "# pins digest: "
_ITEM = "#   "
STAGES = ("builder", "runtime")
# an apt package name and version as Debian policy allows them (5.6.1, 5.6.12)
APT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9]+)?\Z")
APT_VERSION_RE = re.compile(r"^(?:[0-9]+:)?[A-Za-z0-9.+~-]+\Z")
DIGEST_REF_RE = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}\Z")


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(int(epoch), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_of(when: str) -> int:
    """An RFC 3339 UTC time (``2024-06-01T00:00:00Z``) as seconds since the epoch."""
    return int(datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp())


def lock_epoch(stack: Stack, exclude_newer: str | None) -> int:
    """A lock's SOURCE_DATE_EPOCH: its ``--exclude-newer`` date, else the stack's (stack_epoch)."""
    return epoch_of(exclude_newer) if exclude_newer else stack_epoch(stack)


@dataclass(frozen=True)
class AptPin:
    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}={self.version}"


@dataclass(frozen=True)
class SystemPins:
    """The images by digest (stage -> ``name@sha256:...``, and where the digest was read:
    ``registry`` or ``engine``) and each stage's apt packages (stage -> pins, sorted)."""

    resolved_at: str
    images: Mapping[str, str]
    image_source: Mapping[str, str] = field(default_factory=dict)
    apt: Mapping[str, tuple[AptPin, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for stage, ref in self.images.items():
            check_digest_ref(ref, f"the lock's {stage} image")
        for stage, pins in self.apt.items():
            for p in pins:
                check_apt(p.name, p.version, f"the lock's apt {stage} pin")

    def apt_versions(self, stage: str) -> dict[str, str]:
        return {p.name: p.version for p in self.apt.get(stage, ())}

    def to_dict(self) -> dict[str, Any]:
        return {"resolved_at": self.resolved_at, "images": dict(self.images),
                "image_source": dict(self.image_source),
                "apt": {s: [str(p) for p in ps] for s, ps in self.apt.items()}}

    def lines(self) -> list[str]:
        out = [f"{_ITEM}resolved at: {self.resolved_at}"]
        for stage in STAGES:
            if stage in self.images:
                src = self.image_source.get(stage)
                out.append(f"{_ITEM}image {stage}: {self.images[stage]}" + (f" ({src})" if src else ""))
        for stage in STAGES:
            out += [f"{_ITEM}apt {stage}: {p}" for p in self.apt.get(stage, ())]
        return out


def check_digest_ref(ref: str, what: str) -> str:
    if not DIGEST_REF_RE.match(ref) or any(c in ref for c in "\"'`$\\\n\r "):
        raise InputError(f"{what} {ref[:200]!r} is not an image by digest (NAME@sha256:<64 hex>)")
    return ref


def check_apt(name: str, version: str, what: str) -> None:
    """A package name and version that can go on an ``apt-get install`` line as they are."""
    if not APT_NAME_RE.match(name) or not APT_VERSION_RE.match(version):
        raise InputError(f"{what} {name[:80]!r}={version[:80]!r} is not a Debian package name "
                         f"and version")


def pins_digest(epoch: int | None, system: SystemPins | None) -> str:
    doc = {"source_date_epoch": epoch, "system": system.to_dict() if system else None}
    canon = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def header_lines(epoch: int, system: SystemPins | None) -> list[str]:
    """The lock header's lines for the date and the system pins, with their digest."""
    lines = [f"{SDE_LINE}{int(epoch)} ({iso(epoch)})"]
    if system is not None:
        lines += [SYSTEM_TITLE, *system.lines()]
    return lines + [f"{PINS_DIGEST}{pins_digest(epoch, system)}"]


@dataclass(frozen=True)
class ReadPins:
    """What a header says: the date, the system pins, the digest recorded and the one they have."""

    epoch: int | None
    system: SystemPins | None
    recorded: str | None
    actual: str

    @property
    def intact(self) -> bool:
        return self.recorded is None or self.recorded == self.actual


def read_header(lines: list[str], where: str) -> ReadPins:
    """The date and system pins in a lock header's lines (format 5); none in older formats."""
    epoch = None
    recorded = None
    items: list[str] = []
    in_system = False
    for ln in lines:
        if ln.startswith(SDE_LINE):
            raw = ln[len(SDE_LINE):].split(" ", 1)[0]
            if not raw.isdigit():
                raise InputError(f"{where}: the source date epoch {raw[:30]!r} is not a number of seconds")
            epoch = int(raw)
        elif ln == SYSTEM_TITLE:
            in_system = True
            continue
        elif ln.startswith(PINS_DIGEST):
            recorded = ln[len(PINS_DIGEST):].strip()
        if in_system and ln.startswith(_ITEM):
            items.append(ln[len(_ITEM):])
        elif ln != SYSTEM_TITLE:
            in_system = False
    system = _system(items, where) if items else None
    return ReadPins(epoch, system, recorded, pins_digest(epoch, system))


def _system(items: list[str], where: str) -> SystemPins:
    resolved, images, source = "", {}, {}
    apt: dict[str, list[AptPin]] = {}
    for item in items:
        key, sep, val = item.partition(": ")
        if not sep:
            continue
        kind, _, stage = key.partition(" ")
        if key == "resolved at":
            resolved = val
        elif kind == "image" and stage in STAGES:
            ref, _, src = val.partition(" (")
            images[stage] = ref
            if src:
                source[stage] = src.rstrip(")")
        elif kind == "apt" and stage in STAGES:
            name, eq, version = val.partition("=")
            if not eq:
                raise InputError(f"{where}: the apt pin {val[:80]!r} is not NAME=VERSION")
            apt.setdefault(stage, []).append(AptPin(name, version))
    return SystemPins(resolved, images, source, {s: tuple(p) for s, p in apt.items()})


# -- lock --check: the pins against what the images and the mirror say now -------------------

def moved(system: SystemPins, images_now: Mapping[str, str | None],
          apt_now: Mapping[str, Mapping[str, str | None]]) -> list[str]:
    """Each pin that is no longer what the lock says, named: a base image whose tag now names
    another digest (``images_now``: stage -> the digest reference it resolves to now, None when
    it could not be read), an apt package the mirror now gives another version of, or no
    longer has (``apt_now``: stage -> name -> version, None: not installable)."""
    out: list[str] = []
    for stage, ref in system.images.items():
        now = images_now.get(stage)
        if now is None:
            out.append(f"the {stage} image {ref.split('@')[0]} could not be read from its "
                       f"registry or the engine: its pin {ref.split('@')[1][:19]}... is unchecked")
        elif now != ref:
            out.append(f"the {stage} image {ref.split('@')[0]} moved: the lock pins "
                       f"{ref.split('@')[1]}, it is now {now.split('@')[1]}")
    for stage, pins in system.apt.items():
        now_versions = apt_now.get(stage, {})
        for p in pins:
            if p.name not in now_versions:
                continue
            v = now_versions[p.name]
            if v is None:
                out.append(f"apt {stage}: {p} is no longer on the mirror (build with "
                           f"--apt-snapshot, or lock again with --system --upgrade)")
            elif v != p.version:
                out.append(f"apt {stage}: {p.name} {p.version} -> {v} (the mirror moved; the "
                           f"pinned version builds only from a snapshot: --apt-snapshot)")
    return out
