"""The Docker engine behind one small surface: connect, build, tag, push, inspect, and
``Container``, the one life cycle of every container envbuilder runs (the smoke jobs, single-
and multi-node, and the Apptainer proof): created on entry, GPUs passed through when asked,
always removed on exit.

The docker SDK is imported here and only here (lazily). Every engine failure becomes an
OperationError with one sentence naming the step and what to do; push failures reported inside
the stream (``errorDetail``) are read chunk by chunk, and the pushed digest is recorded only
when the registry confirmed it (``aux.Digest``) and answers for it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from envbuilder.errors import InputError, OperationError

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container as DockerContainer
    from docker.models.networks import Network

MIN_API = (1, 41)
_STEP_RE = re.compile(r"^Step (\d+)/(\d+) : (.*)")
_IMAGE_RE = re.compile(r"^\s*---> ([0-9a-f]{12,64})\s*\Z")  # the image a step left


def _docker():
    try:
        import docker  # noqa: F401
    except ImportError:  # pragma: no cover - docker is a core dependency
        raise OperationError("the docker Python package is missing: pip install docker") from None
    return docker


def connect(base_url: str | None = None, *, timeout: int = 600) -> DockerClient:
    """A DockerClient for DOCKER_HOST (or base_url), checked to answer and be new enough."""
    docker = _docker()
    where = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.DockerClient(base_url=where, timeout=timeout) if base_url else \
            docker.from_env(timeout=timeout)
        version = client.version()
    except Exception as e:  # DockerException, requests errors, FileNotFoundError on the socket
        raise OperationError(
            f"cannot reach the Docker engine at {where}: {_short(e)}; start dockerd or set "
            f"DOCKER_HOST to its socket", step="engine") from None
    client._envbuilder_where = where  # type: ignore[attr-defined] # named in engine errors
    api = tuple(int(x) for x in str(version.get("ApiVersion", "0.0")).split(".")[:2])
    if api < MIN_API:
        raise OperationError(f"the Docker engine at {where} speaks API {version.get('ApiVersion')};"
                             f" envbuilder needs {MIN_API[0]}.{MIN_API[1]} or newer", step="engine")
    return client


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    msg = text[-1] if text else type(e).__name__
    return msg[:300]


@dataclass
class BuildResult:
    image_id: str
    tags: list[str]
    log_tail: list[str] = field(default_factory=list)
    steps: int = 0
    cached_steps: int = 0
    # the last image of each stage before the final one (builder, layers): untagged, they are
    # the builder's cache for the next build, and the disk it holds
    stage_images: list[str] = field(default_factory=list)


def build(client: DockerClient, context: Path, *, tag: str, buildargs: Mapping[str, str] | None = None,
          labels: Mapping[str, str] | None = None, nocache: bool = False,
          on_step: Callable[[int, int, str], None] | None = None,
          on_line: Callable[[str], None] | None = None,
          network_mode: str | None = None) -> BuildResult:
    """Build ``context`` (a folder with a Dockerfile) with the engine's builder; stream the log.
    ``network_mode``: the RUN steps' network (docker build --network), e.g. ``host``."""
    log = _BuildLog(on_step, on_line)
    try:
        stream = client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, decode=True,
                                  buildargs=dict(buildargs or {}), labels=dict(labels or {}),
                                  nocache=nocache, pull=False, network_mode=network_mode)
        for chunk in stream:
            log.feed(chunk)
    except OperationError:
        raise
    except Exception as e:  # noqa: BLE001 - the docker SDK's and requests' errors: named as the engine gone or the build failed
        if _engine_gone(e):
            raise OperationError(
                f"the Docker engine at {_where(client)} went away during the build of {tag} "
                f"({_short(e)}): no image was tagged; check that dockerd is running (its log "
                f"says why it stopped) and build again", step="engine", details=log.tail[-30:]) from None
        raise OperationError(f"the build of {tag} failed: {_short(e)}", step="build",
                             details=log.tail[-30:]) from None
    image_id = log.image_id
    if image_id is None:
        for ln in reversed(log.tail):
            m = re.match(r"Successfully built ([0-9a-f]+)", ln)
            if m:
                image_id = m.group(1)
                break
    if image_id is None:
        raise OperationError(f"the build of {tag} ended without an image; see the log above",
                             step="build", details=log.tail[-30:])
    return BuildResult(image_id, [tag], log.tail, log.steps, log.cached, log.stages)


class _BuildLog:
    """What a build's stream says, chunk by chunk: the last 400 lines, the step count and the
    cached steps, the image ID; an error chunk raises OperationError(step="build")."""

    def __init__(self, on_step: Callable[[int, int, str], None] | None,
                 on_line: Callable[[str], None] | None) -> None:
        self.on_step, self.on_line = on_step, on_line
        self.tail: list[str] = []
        self.image_id: str | None = None
        self.steps = self.cached = 0
        self.stages: list[str] = []  # each earlier stage's last image, in order
        self._last: str | None = None  # the image the last step left
        self._in_stage: int | None = None  # steps since the last FROM (None: before the first)

    def feed(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk or "errorDetail" in chunk:
            msg = chunk.get("error") or chunk.get("errorDetail", {}).get("message", "")
            self.tail.append(msg)
            raise OperationError(_build_error(msg, self.tail), step="build", details=self.tail[-30:])
        for ln in (chunk.get("stream") or "").splitlines():
            if ln.strip():
                self._line(ln)
        aux = chunk.get("aux")
        if isinstance(aux, dict) and aux.get("ID"):
            self.image_id = aux["ID"]

    def _line(self, ln: str) -> None:
        self.tail.append(ln)
        del self.tail[:-400]
        if self.on_line:
            self.on_line(ln)
        m = _STEP_RE.match(ln)
        if m:
            self.steps = int(m.group(2))
            if self.on_step:
                self.on_step(int(m.group(1)), self.steps, m.group(3))
            if m.group(3).upper().startswith("FROM "):
                # the stage before ended with the last image a step of it left (a stage of no
                # step after its FROM left none of its own: its image is its base)
                if self._in_stage and self._last and self._last not in self.stages:
                    self.stages.append(self._last)
                self._in_stage = 0
            elif self._in_stage is not None:
                self._in_stage += 1
        if ln.strip() == "---> Using cache":
            self.cached += 1
        m = _IMAGE_RE.match(ln)
        if m:
            self._last = m.group(1)


def _where(client: Any) -> str:
    """The engine's address as the user gave it (DOCKER_HOST), for messages."""
    return str(getattr(client, "_envbuilder_where", None) or os.environ.get("DOCKER_HOST")
               or "unix:///var/run/docker.sock")


def _engine_gone(e: BaseException) -> bool:
    """The connection to the engine broke (dockerd killed or restarted mid-stream)."""
    names = {type(x).__name__ for x in _chain(e)}
    text = " ".join(str(x) for x in _chain(e)).lower()
    return bool(names & {"ConnectionError", "ProtocolError", "ChunkedEncodingError",
                         "ConnectionResetError", "ConnectionRefusedError",
                         "RemoteDisconnected", "IncompleteRead", "BrokenPipeError"}) or \
        "connection aborted" in text or "connection broken" in text


def _chain(e: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and len(out) < 10:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


_PIP_ERROR_RES = (
    re.compile(r"Could not find a version that satisfies the requirement ([A-Za-z0-9_.\-\[\]=<>!~]+)"),
    re.compile(r"No matching distribution found for ([A-Za-z0-9_.\-\[\]=<>!~]+)"),
    re.compile(r"url: \S*?/simple/([A-Za-z0-9_.\-]+)/"),
    re.compile(r"/([A-Za-z0-9_.]+?)-([0-9][A-Za-z0-9_.+!]*)(?:-[^/\s]*)?\.(?:whl|tar\.gz|zip)\b"),
)
_PIP_COLLECTING_RE = re.compile(r"Collecting ([A-Za-z0-9_.\-]+(?:==[A-Za-z0-9_.+!]+)?)")


def _pip_package(lines: list[str]) -> str | None:
    """The package pip was fetching when it failed, from the end of the build log: what its
    ERROR line names, else the last ``Collecting`` line."""
    recent = lines[-60:]
    for ln in reversed(recent):
        if "ERROR" not in ln:
            continue
        for rx in _PIP_ERROR_RES:
            m = rx.search(ln)
            if m:
                return m.group(1) if m.lastindex == 1 else f"{m.group(1)}=={m.group(2)}"
    for ln in reversed(recent):
        m = _PIP_COLLECTING_RE.search(ln)
        if m:
            return m.group(1)
    return None


def _build_error(msg: str, tail: list[str]) -> str:
    low = msg.lower() + " ".join(tail[-20:]).lower()
    if "no space left on device" in low:
        return ("the build ran out of disk space (no space left on device): free space in the "
                "engine's data root (docker system prune) and build again")
    if "certificate verify failed" in low or "certificate_verify_failed" in low:
        return ("the build could not verify TLS certificates (a proxy intercepting HTTPS?): "
                "pass your CA bundle with --ca-cert FILE")
    if re.search(r"pull access denied|manifest unknown|not found: manifest|repository does not exist", low):
        return f"the base image could not be found: {msg.strip()}; pass --base-image with one the engine has"
    step = next((ln for ln in reversed(tail) if ln.startswith("Step ")), "")
    if re.search(r"pip install|pip3 install|-m pip", step) or any(
            "ERROR: " in ln and ("pip" in ln or "requirement" in ln or "Max retries" in ln)
            for ln in tail[-30:]):
        pkg = _pip_package(tail)
        if pkg is not None:
            gone = any(re.search(r"Max retries exceeded|Connection refused|Connection reset|"
                                 r"Read timed out|RemoteDisconnected|Temporary failure", ln)
                       for ln in tail[-40:])
            why = ("the package index stopped answering" if gone else
                   "pip could not install it")
            return (f"the build failed installing {pkg}: {why} (see the log above); check the "
                    f"index (--pip-index-url) and build again{' at ' + step if step else ''}")
    return f"the build failed{' at ' + step if step else ''}: {msg.strip()[:400]}"


def image_labels(client: DockerClient, image: str) -> dict[str, str]:
    docker = _docker()
    try:
        return dict(client.images.get(image).labels or {})
    except docker.errors.ImageNotFound:
        raise InputError(f"image {image} is not in the engine: build or pull it first") from None
    except docker.errors.DockerException as e:
        raise OperationError(f"cannot inspect image {image}: {_short(e)}", step="engine") from None


def image_provenance(client: DockerClient, image: str) -> tuple[dict[str, str], dict]:
    """(labels, where: the engine's image ID, repo digests, created) of a local image."""
    docker = _docker()
    try:
        img = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise InputError(f"image {image} is not in the engine: build or pull it first") from None
    except docker.errors.DockerException as e:
        raise OperationError(f"cannot inspect image {image}: {_short(e)}", step="engine") from None
    return dict(img.labels or {}), {"source": "engine", "id": img.id,
                                    "repo_digests": list(img.attrs.get("RepoDigests") or []),
                                    "created": img.attrs.get("Created")}


def image_size(client: DockerClient, image: str) -> int | None:
    """The image's size in bytes, as the engine reports it (uncompressed, all layers)."""
    try:
        return int(client.images.get(image).attrs.get("Size") or 0) or None
    except Exception:  # noqa: BLE001 - the size is for the report only: unknown, never a failure
        return None


def image_available(client: DockerClient, image: str) -> bool:
    """The image is local, or the engine can pull it."""
    import docker.errors

    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError:
        return False
    try:
        client.images.pull(image)
        return True
    except docker.errors.APIError:
        return False


def image_digest_ref(client: DockerClient, image: str) -> str:
    """The base image's identity for provenance: a repo digest when it has one, else its ID."""
    docker = _docker()
    try:
        img = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise OperationError(f"base image {image} is not in the engine: pull it or pass "
                             f"--base-image with one it has", step="build") from None
    digests = img.attrs.get("RepoDigests") or []
    return digests[0] if digests else img.id


def tag(client: DockerClient, image_id: str, repository: str, tag_: str) -> str:
    try:
        client.api.tag(image_id, repository, tag_)
    except Exception as e:  # noqa: BLE001 - the docker SDK's errors: one line naming the tag
        raise OperationError(f"cannot tag {image_id} as {repository}:{tag_}: {_short(e)}",
                             step="tag") from None
    return f"{repository}:{tag_}"


def tag_holder(client: DockerClient, ref: str) -> tuple[str, dict[str, str]] | None:
    """(image ID, labels) of the image the engine has under ``ref``, None when none has it."""
    docker = _docker()
    try:
        img = client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.DockerException as e:
        raise OperationError(f"cannot inspect image {ref}: {_short(e)}", step="tag") from None
    return str(img.id), dict(img.labels or {})


def registry_auth(repository: str) -> dict | None:
    """Credentials from the environment (ENVBUILDER_REGISTRY_USER/_PASSWORD); None lets the
    SDK use the docker config (~/.docker/config.json, credential helpers)."""
    user = os.environ.get("ENVBUILDER_REGISTRY_USER")
    password = os.environ.get("ENVBUILDER_REGISTRY_PASSWORD")
    if user and password:
        return {"username": user, "password": password}
    return None


_TRANSIENT = re.compile(r"(timeout|timed out|connection reset|503|502|504|too many requests|429|"
                        r"temporarily unavailable|eof)", re.I)


def push(client: DockerClient, repository: str, tag_: str, *, retries: int = 2,
         on_progress: Callable[[str], None] | None = None) -> str:
    """Push repository:tag; return the manifest digest the registry confirmed."""
    import time

    attempt = 0
    while True:
        try:
            return _push_once(client, repository, tag_, on_progress)
        except OperationError as e:
            attempt += 1
            if attempt > retries or not _TRANSIENT.search(str(e)):
                raise
            time.sleep(min(2 ** attempt, 10))


def _push_once(client: DockerClient, repository: str, tag_: str,
               on_progress: Callable[[str], None] | None) -> str:
    auth = registry_auth(repository)
    digest = None
    try:
        stream = client.api.push(repository, tag=tag_, stream=True, decode=True, auth_config=auth)
        for chunk in stream:
            if "error" in chunk or "errorDetail" in chunk:
                msg = chunk.get("error") or chunk.get("errorDetail", {}).get("message", "")
                raise OperationError(_push_error(repository, msg), step="push")
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = aux["Digest"]
            if on_progress and chunk.get("status"):
                on_progress(f"{chunk.get('id', '')} {chunk['status']}".strip())
    except OperationError:
        raise
    except Exception as e:  # noqa: BLE001 - the docker SDK's and requests' errors: one line naming the push
        raise OperationError(_push_error(repository, _short(e)), step="push") from None
    if not digest or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise OperationError(f"the push of {repository}:{tag_} ended without a digest from the "
                             f"registry; nothing was recorded as published", step="push")
    return digest


def _push_error(repository: str, msg: str) -> str:
    low = msg.lower()
    host = repository.split("/", 1)[0]
    if "unauthorized" in low or "authentication required" in low or "denied" in low:
        return (f"the registry {host} refused the push of {repository} (authentication): log in "
                f"with docker login {host} or set ENVBUILDER_REGISTRY_USER/ENVBUILDER_REGISTRY_PASSWORD")
    if "connection refused" in low or "no such host" in low or "dial tcp" in low or "timeout" in low:
        return (f"the registry {host} is not reachable ({msg.strip()[:200]}): check that it runs "
                f"and the address in --push")
    return f"the push of {repository} failed: {msg.strip()[:300]}"


def verify_pushed(client: DockerClient, repository: str, digest: str) -> bool:
    """Ask the registry (through the engine) whether it serves repository@digest."""
    try:
        data = client.api.inspect_distribution(f"{repository}@{digest}",
                                               auth_config=registry_auth(repository))
    except Exception:  # noqa: BLE001 - any failure to confirm is "not confirmed": nothing recorded as published
        return False
    return data.get("Descriptor", {}).get("digest") == digest


# -- containers ------------------------------------------------------------------------------

def _unreachable_types() -> tuple[type[BaseException], ...]:
    docker = _docker()
    import requests.exceptions

    return (docker.errors.DockerException, requests.exceptions.ConnectionError, ConnectionError)


def unreachable_error(exc: BaseException, step: str) -> OperationError:
    """The engine stopped answering (or never did): one sentence naming where it was looked for."""
    host = os.environ.get("DOCKER_HOST") or "the default socket (DOCKER_HOST is not set)"
    text = str(exc).strip().splitlines()
    return OperationError(
        f"cannot reach the Docker engine at {host}: start it or set DOCKER_HOST "
        f"({type(exc).__name__}: {text[-1][:300] if text else ''})", step=step)


def has_gpu_runtime(client: DockerClient) -> bool:
    """Whether the engine offers the NVIDIA runtime (so a container can be given GPUs)."""
    try:
        runtimes = client.info().get("Runtimes") or {}
    except Exception:  # noqa: BLE001 - an engine that cannot say offers no GPU runtime
        return False
    return "nvidia" in runtimes


class Container:
    """One container, as a context manager (like cibuildwheel's OCIContainer).

    ``with Container(client, image, command, step="smoke", gpus=True) as c:`` creates it (GPUs
    passed through with a device request when ``gpus``), and the block copies files in, starts
    it, waits, execs, reads logs and copies files out; on exit it is removed, whatever happened.
    Engine failures become OperationError naming ``step`` and the image.
    """

    def __init__(self, client: DockerClient, image: str, command: Sequence[str], *,
                 step: str, gpus: bool = False, environment: Mapping[str, str] | None = None,
                 labels: Mapping[str, str] | None = None, shm_size: str | None = None,
                 hostname: str | None = None, name: str | None = None,
                 network: str | None = None, user: str | None = None,
                 entrypoint: Sequence[str] | None = None) -> None:
        self.client = client
        self.image = image
        self.step = step
        self.gpus = gpus
        self._kw: dict[str, Any] = {k: v for k, v in dict(
            command=list(command), environment=dict(environment) if environment else None,
            labels=dict(labels) if labels else None, shm_size=shm_size, hostname=hostname,
            name=name, network=network, user=user,
            entrypoint=list(entrypoint) if entrypoint is not None else None).items()
            if v is not None}
        self._raw: DockerContainer | None = None

    @property
    def raw(self) -> DockerContainer:
        """The docker SDK's container (for hooks that need the engine's own object)."""
        if self._raw is None:
            raise RuntimeError("the container exists only inside its with-block")
        return self._raw

    def __enter__(self) -> Container:
        docker = _docker()
        kw = dict(self._kw)
        if self.gpus:
            kw["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        try:
            self._raw = self.client.containers.create(self.image, **kw)
        except docker.errors.ImageNotFound:
            raise OperationError(f"image {self.image} not found: build or pull it first",
                                 step=self.step) from None
        except docker.errors.APIError as exc:
            raise OperationError(f"the Docker engine could not create a container from "
                                 f"{self.image}: {exc.explanation or exc}", step=self.step) from None
        except _unreachable_types() as exc:
            raise unreachable_error(exc, self.step) from None
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._raw is not None:
            try:
                self._raw.remove(force=True)
            except Exception:  # noqa: BLE001 - cleanup: the container may be gone with its engine; the first error stands
                pass
            self._raw = None

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        docker = _docker()
        try:
            return fn()
        except docker.errors.APIError as exc:
            raise OperationError(f"the Docker engine could not {what} the container from "
                                 f"{self.image}: {exc.explanation or exc}", step=self.step) from None
        except _unreachable_types() as exc:
            raise unreachable_error(exc, self.step) from None

    def put_archive(self, path: str, data: bytes) -> None:
        self._call("copy files into", lambda: self.raw.put_archive(path, data))

    def start(self) -> None:
        self._call("start", self.raw.start)

    def wait(self, timeout: float) -> tuple[int, bool]:
        """Wait for the main process: (exit code, timed out). A timed-out one is killed (124)."""
        import requests.exceptions

        docker = _docker()
        try:
            return int(self.raw.wait(timeout=timeout).get("StatusCode", -1)), False
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            try:
                self.raw.kill()
            except docker.errors.APIError:
                pass
            return 124, True

    def logs(self, *, stderr: bool = True) -> str:
        docker = _docker()
        try:
            return self.raw.logs(stdout=True, stderr=stderr).decode("utf-8", errors="replace")
        except docker.errors.APIError as exc:
            return f"(could not read the container's log: {exc})"

    def get_archive(self, path: str) -> bytes | None:
        """``path`` as a tar archive, or None when the container has no such path."""
        docker = _docker()
        try:
            stream, _ = self.raw.get_archive(path)
            return b"".join(stream)
        except docker.errors.APIError:
            return None

    def commit(self, repository: str, tag_: str) -> str:
        self._call("commit", lambda: self.raw.commit(repository=repository, tag=tag_))
        return f"{repository}:{tag_}"


@contextlib.contextmanager
def private_network(client: DockerClient, name: str, *, step: str,
                    labels: Mapping[str, str] | None = None) -> Iterator[Network]:
    """An internal bridge network for the block's containers; removed afterwards."""
    docker = _docker()
    try:
        network = client.networks.create(name, driver="bridge", internal=True,
                                         labels=dict(labels or {}))
    except docker.errors.APIError as e:
        raise OperationError(f"cannot create the {step} network: {e.explanation or e}",
                             step=step) from None
    try:
        yield network
    finally:
        try:
            network.remove()
        except Exception:  # noqa: BLE001 - cleanup: the network may be gone with its engine; the first error stands
            pass
