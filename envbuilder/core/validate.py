"""Validation of everything from input that can reach a generated file.

Version strings, image references, URLs and names are checked against strict patterns before
any template sees them: nothing from a target, an option or an environment variable can
inject a shell command or a Dockerfile instruction.
"""

from __future__ import annotations

import difflib
import re
from typing import Iterable

from packaging.version import InvalidVersion, Version

from envbuilder.errors import InputError

_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){0,3}\Z")
# docker/distribution reference grammar, simplified but strict: [host[:port]/]path[:tag][@digest]
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_REPO_RE = re.compile(rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*\Z")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_URL_RE = re.compile(r"^(https?|file)://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+\Z")
_SAFE_URL_RE = re.compile(r"^(https?|file)://[A-Za-z0-9._~:/?#@%+=,-]+\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # an environment variable's name
_ENV_VALUE_RE = re.compile(r"^[A-Za-z0-9_.,;:/=+^@%-]*\Z")


def version(value: str, what: str) -> Version:
    """A plain release version like ``2.1`` or ``2.1.2`` (no local part, no markers)."""
    if not isinstance(value, str) or not _VERSION_RE.fullmatch(value):
        raise InputError(f"{what} {value!r} is not a version: use digits and dots, e.g. 2.1 or 2.1.2")
    try:
        return Version(value)
    except InvalidVersion:  # pragma: no cover - the regex admits only valid versions
        raise InputError(f"{what} {value!r} is not a version") from None


_FT_PYTHON_RE = re.compile(r"^3\.[0-9]{1,2}t\Z")


def free_threaded_python(value: str) -> bool:
    """``3.14t``: the free-threaded CPython (wheel tag cp314t), a Python value of its own."""
    return isinstance(value, str) and bool(_FT_PYTHON_RE.fullmatch(value))


_DATE_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")
_TIME_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
                      r"([Zz]|[+-][0-9]{2}:[0-9]{2})?\Z")


def exclude_newer(value: str | None, what: str = "--exclude-newer") -> str | None:
    """``--exclude-newer``: an ISO date (``2024-06-01``: midnight UTC at its start) or an
    ISO/RFC 3339 time (``2024-06-01T12:00:00Z``; without an offset, UTC), returned as the RFC
    3339 UTC timestamp uv is given, the lock records and the resolver compares release dates
    with. Anything else is bad input (exit 2)."""
    import datetime as dt

    if value is None:
        return None
    shown = "".join(c if 32 <= ord(c) != 127 else repr(c)[1:-1] for c in str(value))
    shown = shown if len(shown) <= 60 else shown[:60] + "..."
    bad = InputError(f"{what} {shown!r} is not a date: give an "
                     f"ISO date (2024-06-01, meaning 00:00 UTC) or time (2024-06-01T12:00:00Z)")
    v = value.strip() if isinstance(value, str) else ""
    if not v or len(v) > 64 or not v.isascii():
        raise bad
    try:
        if _DATE_RE.match(v):
            d = dt.date.fromisoformat(v)
            t = dt.datetime(d.year, d.month, d.day, tzinfo=dt.timezone.utc)
        elif _TIME_RE.match(v):
            iso = (v[:-1] + "+00:00" if v[-1] in "Zz" else v).replace("t", "T")
            # Python 3.10 reads 3 or 6 fraction digits only
            iso = re.sub(r"\.([0-9]{1,6})", lambda m: "." + m.group(1).ljust(6, "0"), iso)
            t = dt.datetime.fromisoformat(iso)
            t = (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc)
        else:
            raise ValueError(v)
    except (ValueError, OverflowError):
        raise bad from None
    if t.year < 1970:  # strftime writes year 1 as "1", and no package index is that old
        raise InputError(f"{what} {shown!r} is before 1970, older than any package "
                         f"index: give a date since, e.g. 2024-06-01")
    return (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
            + (f".{t.microsecond:06d}" if t.microsecond else "") + "Z")


PLATFORMS = ("linux/amd64", "linux/arm64")


def platform(value: str, what: str = "--platform") -> str:
    """An image platform envbuilder builds for: linux/amd64 or linux/arm64 (aarch64)."""
    aliases = {"amd64": "linux/amd64", "x86_64": "linux/amd64", "linux/x86_64": "linux/amd64",
               "arm64": "linux/arm64", "aarch64": "linux/arm64", "linux/aarch64": "linux/arm64"}
    v = aliases.get(value, value) if isinstance(value, str) else value
    if v not in PLATFORMS:
        raise InputError(f"{what} {_shown(value)!r} is not a platform envbuilder builds for: use "
                         f"{' or '.join(PLATFORMS)}")
    return str(v)


def driver_version(value: str, what: str = "--driver") -> str:
    """An NVIDIA driver version such as ``535.104.05``; returned unchanged."""
    if not isinstance(value, str) or not re.fullmatch(r"[0-9]{2,4}(\.[0-9]{1,3}){0,2}", value):
        raise InputError(f"{what} {value!r} is not a driver version: use the form nvidia-smi "
                         f"prints, e.g. 535.104.05")
    return value


def image_ref(value: str, what: str = "--base-image") -> str:
    """A container image reference: ``[registry[:port]/]repo[:tag][@sha256:...]``."""
    if not isinstance(value, str) or not value or len(value) > 512:
        raise InputError(f"{what} {_shown(value)} is not an image reference, e.g. nvidia/cuda:12.1.1-runtime-ubuntu22.04")
    rest, digest = value, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
    tag = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
    ok = (_REPO_RE.fullmatch(rest) is not None and _name_ok(rest)
          and (tag is None or _TAG_RE.fullmatch(tag) is not None)
          and (digest is None or _DIGEST_RE.fullmatch(digest) is not None))
    if not ok:
        raise InputError(f"{what} {value!r} is not an image reference: expected "
                         f"[registry/]name[:tag][@sha256:digest], e.g. nvidia/cuda:12.1.1-runtime-ubuntu22.04")
    return value


def _shown(value: object) -> str:
    r = repr(value)
    return r if len(r) <= 120 else r[:120] + f"... ({len(r)} characters)"


_HOST_RE = re.compile(_HOST)
_COMPONENT_RE = re.compile(_COMPONENT)


def _name_ok(name: str) -> bool:
    """A repository name as docker reads it: the first component is a registry host only when
    it has a '.' or a ':' or is ``localhost`` (so ``Upper/x`` is a name with an upper-case
    letter, refused, not a host ``Upper``); every other component is lower case."""
    if len(name) > 255:
        return False
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        host, parts = parts[0], parts[1:]
        if _HOST_RE.fullmatch(host) is None or not _port_ok(host):
            return False
    return all(_COMPONENT_RE.fullmatch(p) is not None for p in parts)


def _port_ok(host_part: str) -> bool:
    """The port of ``host[:port]`` (if any) is 1-65535."""
    if host_part.startswith("["):
        host_part = host_part.rsplit("]", 1)[-1]
    if ":" not in host_part:
        return True
    port = host_part.rsplit(":", 1)[1]
    return port.isdigit() and len(port) <= 5 and 0 < int(port) <= 65535


def repository(value: str, what: str = "--push") -> str:
    """A repository to push to, without tag or digest: ``host:port/path`` (at most 255
    characters, as the registry API allows; a port 1-65535)."""
    if not isinstance(value, str) or len(value) > 255 or "@" in value or \
            _REPO_RE.fullmatch(value) is None or not _name_ok(value):
        raise InputError(f"{what} {_shown(value)} is not a repository: expected registry/name "
                         f"without a tag (at most 255 characters, port 1-65535), e.g. "
                         f"127.0.0.1:5000/ml/train")
    return value


def tag(value: str, what: str = "--tag") -> str:
    if not isinstance(value, str) or _TAG_RE.fullmatch(value) is None:
        raise InputError(f"{what} {value!r} is not a tag: letters, digits, '_', '.', '-', at most 128")
    return value


def tag_ref(value: str, what: str = "--tag") -> tuple[str | None, str]:
    """``--tag`` as docker takes it: ``NAME[:TAG]`` (``myrepo/train:dev``,
    ``registry:5000/ml/train:dev``) or a bare ``TAG`` (``dev``). Returns (name or None, tag);
    a name without a tag gets ``latest``, as docker gives it. A value without ``/`` or ``:``
    is a tag (the meaning ``--tag dev`` always had)."""
    shown = _shown(value)
    if not isinstance(value, str) or not value or len(value) > 512 or "@" in value:
        raise InputError(f"{what} {shown} is not NAME[:TAG] or TAG: e.g. myrepo/train:dev or dev "
                         f"(no digest)")
    if "/" not in value and ":" not in value:
        if _TAG_RE.fullmatch(value) is None:
            raise InputError(f"{what} {shown} is not a tag: letters, digits, '_', '.', '-', at "
                             f"most 128 (or NAME:TAG, e.g. myrepo/train:dev)")
        return None, value
    name, tag_ = value, "latest"
    if ":" in value.rsplit("/", 1)[-1]:  # a ':' in the host part is a port, not a tag
        name, tag_ = value.rsplit(":", 1)
    ok = (_REPO_RE.fullmatch(name) is not None and _name_ok(name)
          and _TAG_RE.fullmatch(tag_) is not None)
    if not ok:
        raise InputError(f"{what} {shown} is not NAME[:TAG]: expected [registry/]name[:tag] "
                         f"(lowercase name; tag of letters, digits, '_', '.', '-'), e.g. "
                         f"myrepo/train:dev")
    return name, tag_


def url(value: str, what: str) -> str:
    """A URL safe to place in a Dockerfile, a shell line or a pip option."""
    if not isinstance(value, str) or _SAFE_URL_RE.fullmatch(value) is None:
        raise InputError(f"{what} {value!r} is not a URL envbuilder accepts: use "
                         f"http(s):// or file:// without spaces, quotes or shell characters")
    return value


def has_credentials(value: str) -> bool:
    """Whether the URL ``value`` carries credentials: ``https://user:token@host/...``, or a
    query (``?token=...``, a signed URL's ``?sig=``: an index URL has a query for nothing
    else), so it is passed as a build argument, never written into a file."""
    from urllib.parse import urlsplit

    try:
        u = urlsplit(value)
        return "@" in u.netloc or bool(u.query)
    except ValueError:
        return "@" in value or "?" in value


def env_pair(name: str, value: str, what: str = "environment") -> tuple[str, str]:
    if ENV_NAME_RE.fullmatch(name) is None or _ENV_VALUE_RE.fullmatch(value) is None:
        raise InputError(f"{what} {name}={value!r} is not allowed: names are identifiers and "
                         f"values use letters, digits and _.,;:/=+^@%- only")
    return name, value


def suggest(value: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' or ''."""
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


_SEGMENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def path_segment(value: str, what: str) -> str:
    """A name that becomes one folder name (build/<name>): letters, digits, '.', '-', '_'."""
    if not isinstance(value, str) or _SEGMENT_RE.fullmatch(value) is None or set(value) == {"."}:
        raise InputError(f"{what} {_shown(value)} cannot name a folder: use letters, digits, "
                         f"'.', '-' and '_' (at most 128)")
    return value
