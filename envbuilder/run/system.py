"""``lock --system``: the base and builder images by digest, and every apt package each stage
installs by version, resolved through the Docker engine (envbuilder.lock.system is their model).

An image's digest comes from its registry when the registry answers (the manifest digest of
the tag now: an index's for a multi-platform image), from the engine's copy otherwise (an image
the engine pulled keeps its registry digest; one made here, ``docker import``, its own manifest
digest). Each stage's apt packages are resolved in a container of that image by digest, as the
stage installs them: what runs before its install step (the PPA, the archive's other
components), ``apt-get update``, then ``apt-get install -s`` of its packages (the simulation
lists every package the step would install, dependencies included, with its version); the
packages asked for that the image has already are pinned at the image's version. A runtime
stage that copies the builder's apt sources (a PPA) gets them copied the same way.

``lock --check --system`` resolves again and compares (lock.system.moved): a tag that now names
another digest, an apt package the mirror now serves another version of.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

from envbuilder.errors import InputError, OperationError
from envbuilder.lock.system import AptPin, SystemPins, check_apt
from envbuilder.render.templating import AptStep, apt_steps

if TYPE_CHECKING:
    from docker import DockerClient

    from envbuilder.render.plan import BuildPlan

TIMEOUT_S = 900
REGISTRY_TIMEOUT_S = 15.0
_PIN = re.compile(r"^PIN (\S+)=(\S+)\Z")
_HAVE = re.compile(r"^HAVE (\S+)=(\S+) installed\Z")
_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


def image_digest(client: DockerClient, image: str) -> tuple[str, str]:
    """(``name@sha256:...``, where it was read: ``registry`` or ``engine``) of ``image``."""
    import docker.errors

    name = image.split("@", 1)[0]
    local = None
    try:
        local = client.images.get(image)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.DockerException as e:
        raise OperationError(f"cannot inspect the image {image}: {e}", step="lock") from None
    if local is None or local.attrs.get("RepoDigests"):
        got = _from_registry(image)
        if got is not None:
            return f"{name}@{got}", "registry"
    if local is None:
        raise InputError(f"the image {image} is neither in its registry (it did not answer) nor in "
                         f"the engine: pull or build it, or pass --base-image with one it has")
    repo = [d for d in local.attrs.get("RepoDigests") or [] if "@sha256:" in d]
    digest = repo[0].split("@", 1)[1] if repo else str(local.id)
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise OperationError(f"the engine names {image} {digest[:80]!r}, not a digest", step="lock")
    return f"{name}@{digest}", "engine"


def _from_registry(image: str) -> str | None:
    from envbuilder.run.registry import image_config

    try:
        got = image_config(image, timeout=REGISTRY_TIMEOUT_S)
    except (OperationError, InputError):
        return None
    return str(got.get("index_digest") or got["manifest_digest"])


def _script(step: AptStep) -> str:
    pkgs = " ".join(shlex.quote(p) for p in step.packages)
    return "\n".join([
        "set -e", "export DEBIAN_FRONTEND=noninteractive", *step.setup,
        "apt-get update -qq >/dev/null",
        f"apt-get install -s --no-install-recommends {pkgs} "
        r"| sed -n -E 's/^Inst ([^ ]+) (\[[^]]*\] )?\(([^ ]+) .*/PIN \1=\3/p'",
        f"dpkg-query -W -f='HAVE ${{Package}}=${{Version}} ${{db:Status-Status}}\\n' {pkgs} 2>/dev/null || true",
    ])


def _resolve_step(client: DockerClient, stage: str, ref: str, step: AptStep,
                  sources: bytes | None) -> tuple[dict[str, str], bytes | None]:
    """(name -> version the step installs, its apt sources as a tar when a later stage needs
    them) in a container of ``ref`` (the image by digest)."""
    from envbuilder.run.engine import Container

    env = {k: v for k in _PROXIES if (v := os.environ.get(k))}
    with Container(client, ref, ["bash", "-c", _script(step)], step="lock",
                   environment=env, user="0:0") as c:
        if sources is not None:
            c.put_archive("/etc/apt", sources)
        c.start()
        code, timed_out = c.wait(TIMEOUT_S)
        log = c.logs()
        if code != 0:
            why = f"ran past {TIMEOUT_S} s" if timed_out else f"exit {code}"
            last = [ln for ln in log.splitlines() if ln.strip()][-3:]
            raise OperationError(f"lock --system: resolving the {stage} stage's apt packages in "
                                 f"{ref} failed ({why}): {' | '.join(last)[:400]}", step="lock",
                                 details=log.splitlines()[-30:])
        tar = _apt_sources(c) if stage == "builder" else None
    pins: dict[str, str] = {}
    have: dict[str, str] = {}
    for ln in log.splitlines():
        if m := _PIN.match(ln.strip()):
            pins[m.group(1)] = m.group(2)
        elif m := _HAVE.match(ln.strip()):
            have[m.group(1)] = m.group(2)
    for name in step.packages:  # asked for and already there: kept at the image's version
        if name not in pins and name in have:
            pins[name] = have[name]
    for name, version in pins.items():
        check_apt(name, version, f"apt in {ref}")
    return pins, tar


def _apt_sources(c: Any) -> bytes | None:
    """The container's /etc/apt/sources.list.d and trusted.gpg.d, one tar (a PPA's)."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        for sub in ("sources.list.d", "trusted.gpg.d"):
            data = c.get_archive(f"/etc/apt/{sub}")
            if data is None:
                continue
            with tarfile.open(fileobj=io.BytesIO(data)) as src:
                for m in src.getmembers():
                    t.addfile(m, src.extractfile(m) if m.isfile() else None)
    return out.getvalue()


def resolve(client: DockerClient, plan: BuildPlan) -> SystemPins:
    """The plan's images by digest and each apt stage's packages by version (see the module)."""
    steps = apt_steps(plan)
    images: dict[str, str] = {}
    where: dict[str, str] = {}
    for stage, image in (("builder", plan.builder_image), ("runtime", plan.runtime_image)):
        images[stage], where[stage] = image_digest(client, image)
    apt: dict[str, tuple[AptPin, ...]] = {}
    sources: dict[str, bytes | None] = {}
    for stage, step in steps.items():
        ref = _local_ref(client, images[stage])
        got, sources[stage] = _resolve_step(client, stage, ref, step,
                                            sources.get(step.sources_from or "") if step.sources_from else None)
        apt[stage] = tuple(AptPin(n, v) for n, v in sorted(got.items()))
    now = datetime.fromtimestamp(time.time(), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return SystemPins(resolved_at=now, images=images, image_source=where, apt=apt)


def _local_ref(client: DockerClient, ref: str) -> str:
    """What the engine runs for ``NAME@sha256:...``: pulled by digest when it lacks it; its own
    ID when it made the image (a digest of no registry)."""
    import docker.errors

    name, digest = ref.split("@", 1)
    for cand in (ref, f"{name.rsplit(':', 1)[0] if ':' in name.rsplit('/', 1)[-1] else name}@{digest}"):
        try:
            return str(client.images.get(cand).id)
        except docker.errors.ImageNotFound:
            continue
        except docker.errors.DockerException:
            break
    try:
        return str(client.images.get(digest).id)
    except docker.errors.DockerException:
        pass
    try:
        return str(client.images.pull(ref).id)
    except docker.errors.DockerException as e:
        raise OperationError(f"lock --system: the engine cannot run {ref} (not local, and the pull "
                             f"failed: {str(e)[:200]})", step="lock") from None


def now_for(client: DockerClient, plan: BuildPlan,
            system: SystemPins) -> tuple[dict[str, str | None], dict[str, dict[str, str | None]]]:
    """For ``lock --check --system``: each stage's image digest now (None when it cannot be
    read), and the versions each apt stage would install now in its pinned image."""
    images: dict[str, str | None] = {}
    for stage, image in (("builder", plan.builder_image), ("runtime", plan.runtime_image)):
        pinned = system.images.get(stage, image)
        try:
            images[stage] = image_digest(client, pinned.split("@", 1)[0])[0]
        except (InputError, OperationError):
            images[stage] = None
    apt: dict[str, dict[str, str | None]] = {}
    sources: dict[str, bytes | None] = {}
    for stage, step in apt_steps(plan).items():
        if stage not in system.apt or stage not in system.images:
            continue
        ref = _local_ref(client, system.images[stage])
        got, sources[stage] = _resolve_step(client, stage, ref, step,
                                            sources.get(step.sources_from or "") if step.sources_from else None)
        apt[stage] = dict(got)
    return images, apt


def pins_for(system: SystemPins) -> Mapping[str, Any]:
    """The pins as plain data (the report)."""
    return system.to_dict()
