"""BuildKit through ``docker buildx``: the builds that are reproducible bit for bit.

envbuilder drives the engine's own BuildKit (buildx's ``docker`` driver) with the ``docker``
CLI: ``docker buildx build`` with ``SOURCE_DATE_EPOCH`` (the image config's and history's
dates, and, declared in every stage, what pip and CPython see) and ``rewrite-timestamp=true``
(every file of every layer the build makes is dated no later than it), no provenance or SBOM
attestation of BuildKit's own (they hold the build's clock), OCI media types and gzip: two
builds of one build folder make the same manifest digest.

``support(client)`` says whether an engine can do that, and if not why (the build report and
the provenance repeat it, and the build falls back to the legacy builder):

- the ``docker`` CLI with the buildx plugin (``docker buildx version``);
- a BuildKit that rewrites timestamps (0.13 or newer; Debian 12's dockerd 20.10 has 0.8);
- the containerd image store (``"features": {"containerd-snapshotter": true}``): it keeps the
  compressed layers BuildKit made, so ``docker push`` sends the very manifest that was built
  (the classic store compresses again at push time).

``build`` makes an OCI layout (``type=oci``), streamed into ``docker load`` for an image in the
engine (the containerd store keeps its blobs as they are: the image's ID is the manifest digest
BuildKit made, and a push sends exactly that) or written to a tar (``rebuild`` compares one
without touching the engine's images). ``type=image`` cannot be used: this engine's exporter
refuses ``rewrite-timestamp`` there ("conflicts with unpack", even with ``unpack=false``). The
build log arrives as buildx's ``rawjson`` progress: each vertex (a step) with its name,
``cached`` and error, each log line base64; a failure is one OperationError naming the step.

Build arguments with credentials (index URLs, proxies) are given by name (``--build-arg NAME``)
with their values in the CLI's environment, never on its command line.

Sources: https://github.com/moby/buildkit/blob/master/docs/build-repro.md (SOURCE_DATE_EPOCH,
rewrite-timestamp, BuildKit 0.13), https://docs.docker.com/build/exporters/image-registry/
(``rewrite-timestamp``, ``oci-mediatypes``, ``unpack``),
https://reproducible-builds.org/docs/source-date-epoch/.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from packaging.version import InvalidVersion, Version

from envbuilder.errors import OperationError

if TYPE_CHECKING:
    from docker import DockerClient

MIN_BUILDKIT = Version("0.13")  # rewrite-timestamp
BUILD_TIMEOUT_S = 6 * 3600
PROBE_TIMEOUT_S = 60
_STEP = re.compile(r"^\[(?P<stage>[^\]]*?)\s*(?P<i>\d+)/(?P<n>\d+)\]\s*(?P<text>.*)\Z")
_BK_VERSION = re.compile(r"^BuildKit version:\s*v?(\S+)", re.M)


@dataclass(frozen=True)
class Support:
    """Whether an engine builds reproducibly through BuildKit (``ok``), and why not."""

    ok: bool
    why: str  # why not; or what builds (the BuildKit version)
    docker: str | None = None  # the docker CLI
    buildkit: str | None = None  # the engine's BuildKit version

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "why": self.why, "buildkit": self.buildkit}


def _where(client: Any) -> str:
    return str(getattr(client, "_envbuilder_where", None) or os.environ.get("DOCKER_HOST")
               or "unix:///var/run/docker.sock")


def cli_env(client: Any, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The docker CLI's environment: this process's, the engine's address (DOCKER_HOST), and
    ``extra`` (build arguments' values, SOURCE_DATE_EPOCH)."""
    env = {**os.environ, "DOCKER_HOST": _where(client)}
    env.pop("DOCKER_CONTEXT", None)  # DOCKER_HOST names the engine; a context would override it
    env.update(extra or {})
    return env


_SUPPORT: dict[str, Support] = {}


def support(client: DockerClient) -> Support:
    """Whether ``client``'s engine builds reproducibly through BuildKit (memoized per engine)."""
    where = _where(client)
    if where not in _SUPPORT:
        _SUPPORT[where] = _probe(client)
    return _SUPPORT[where]


def _probe(client: DockerClient) -> Support:
    docker = shutil.which("docker")
    if docker is None:
        return Support(False, "the docker CLI is not on PATH (envbuilder drives BuildKit through "
                              "docker buildx)")
    code, out = _quick([docker, "buildx", "version"], client)
    if code != 0:
        return Support(False, "docker buildx is not installed (the docker CLI has no buildx "
                              "plugin: install docker-buildx, or put its binary in "
                              "$DOCKER_CONFIG/cli-plugins/)", docker)
    try:
        info = client.info()
    except Exception as e:  # noqa: BLE001 - the engine's docker SDK and requests errors: an engine that cannot say is not used
        return Support(False, f"the engine did not describe itself ({type(e).__name__})", docker)
    status = " ".join(str(v) for pair in info.get("DriverStatus") or [] for v in pair)
    if "io.containerd.snapshotter" not in status:
        return Support(False, f"the engine's image store is {info.get('Driver') or 'unknown'}, not "
                              f"containerd's (dockerd's \"features\": {{\"containerd-snapshotter\": "
                              f"true}}): a push would compress the layers again, so the pushed "
                              f"digest would not be the one built", docker)
    version = _buildkit_version(client, docker)
    why = _rewrites_timestamps(client, docker)
    if why is not None:
        return Support(False, f"the engine's BuildKit ({version or 'version unknown'}) does not "
                              f"rewrite file timestamps ({why}): that needs BuildKit "
                              f"{MIN_BUILDKIT} or newer", docker, version)
    return Support(True, f"BuildKit {version or '(version not reported)'} (docker buildx, the "
                         f"engine's builder)", docker, version)


def _buildkit_version(client: Any, docker: str) -> str | None:
    """What ``docker buildx inspect`` reports (Debian's build says v0.0.0+unknown: None)."""
    _, out = _quick([docker, "buildx", "inspect"], client)
    m = _BK_VERSION.search(out)
    if m is None:
        return None
    try:
        return None if Version(m.group(1).split("+")[0]) == Version("0") else m.group(1)
    except InvalidVersion:
        return m.group(1)


PROBE_EPOCH = 86400  # 1970-01-02: no file of a probe context is that old


def _rewrites_timestamps(client: Any, docker: str) -> str | None:
    """Build a one-file image FROM scratch into an OCI layout tar with SOURCE_DATE_EPOCH and
    rewrite-timestamp=true, and read the file's time back from its layer: None when the engine
    dated it SOURCE_DATE_EPOCH, else what went wrong (a version string can lie or be absent:
    Debian's build reports none)."""
    import gzip
    import tarfile

    with tempfile.TemporaryDirectory(prefix="envbuilder-bkprobe-") as tmp:
        ctx = Path(tmp) / "ctx"
        ctx.mkdir()
        (ctx / "Dockerfile").write_text("FROM scratch\nCOPY probe /probe\n")
        (ctx / "probe").write_text("envbuilder\n")
        out = Path(tmp) / "probe.tar"
        argv = build_argv(docker, ctx, output=output_option(oci=out), metadata=Path(tmp) / "m.json",
                          build_args={"SOURCE_DATE_EPOCH": str(PROBE_EPOCH)}, labels={},
                          nocache=True)
        code, text = _quick(argv, client, {"SOURCE_DATE_EPOCH": str(PROBE_EPOCH)})
        if code != 0:
            last = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("{")]
            return (last[-1] if last else f"docker buildx build exited {code}")[:200]
        try:
            layout = oci_layout(out)
            layer = layout.layers[-1]
            with tarfile.open(fileobj=gzip.open(layout.blob(layer)), mode="r|") as t:
                times = {m.name.lstrip("./"): int(m.mtime) for m in t}
        except (OSError, ValueError, IndexError, KeyError, tarfile.TarError) as e:
            return f"its OCI output could not be read: {e}"
    if times.get("probe") != PROBE_EPOCH:
        return f"the probe file is dated {times.get('probe')}, not SOURCE_DATE_EPOCH {PROBE_EPOCH}"
    return None


@dataclass
class OciLayout:
    """An OCI image layout tar (``type=oci``): its one manifest's digest, config and layers."""

    path: Path
    manifest_digest: str
    manifest: dict[str, Any]
    _tar: Any = None

    @property
    def layers(self) -> list[str]:
        return [str(d["digest"]) for d in self.manifest.get("layers") or []]

    @property
    def config_digest(self) -> str:
        return str(self.manifest["config"]["digest"])

    def blob(self, digest: str) -> Any:
        """A file object of the blob ``digest`` (read from the tar, not extracted)."""
        import tarfile

        if self._tar is None:
            self._tar = tarfile.open(self.path)
        f = self._tar.extractfile(f"blobs/{digest.replace(':', '/', 1)}")
        if f is None:
            raise KeyError(digest)
        return f

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()
            self._tar = None


def oci_layout(path: Path) -> OciLayout:
    """The OCI layout tar ``path`` (index.json -> its one image manifest)."""
    import tarfile

    with tarfile.open(path) as t:
        def read(name: str) -> dict[str, Any]:
            f = t.extractfile(name)
            if f is None:
                raise KeyError(name)
            doc = json.loads(f.read())
            if not isinstance(doc, dict):
                raise ValueError(f"{name} is not a JSON object")
            return doc

        index = read("index.json")
        desc = index["manifests"][0]
        digest = str(desc["digest"])
        manifest = read(f"blobs/{digest.replace(':', '/', 1)}")
        if "manifests" in manifest:  # an index of one image (and its attestations)
            digest = str(manifest["manifests"][0]["digest"])
            manifest = read(f"blobs/{digest.replace(':', '/', 1)}")
    return OciLayout(Path(path), digest, manifest)


def _quick(argv: list[str], client: Any, extra: Mapping[str, str] | None = None) -> tuple[int, str]:
    """A short docker command through the one child runner (envbuilder._child: its own
    process group, a deadline, output capped): its exit status and its output."""
    from envbuilder import _child

    try:
        p = _child.run(argv, env=cli_env(client, extra), timeout=PROBE_TIMEOUT_S, cap=1 << 20)
    except OSError as e:
        return 1, str(e)
    if p.timed_out:
        return 1, f"{' '.join(argv[:3])} did not finish in {PROBE_TIMEOUT_S} s"
    return p.returncode, p.stdout + p.stderr


@dataclass
class BuildKitResult:
    """What a build made: the manifest digest (the pushed digest), the config digest, the
    image's name in the engine (``type=image``) or the OCI layout tar (``type=oci``)."""

    manifest_digest: str
    config_digest: str | None
    image: str | None
    oci: Path | None
    steps: int = 0
    cached_steps: int = 0
    log_tail: list[str] = field(default_factory=list)


def output_option(*, image: str | None = None, oci: Path | None = None,
                  rewrite: bool = True) -> str:
    """The ``--output`` of a reproducible build: an OCI layout, to the tar ``oci`` or to stdout
    (``docker load`` names it ``image``); timestamps rewritten, OCI media types, gzip. Without
    ``rewrite`` (``build --no-reproducible``): the image straight into the engine's store, its
    layers the build cache's own (no second copy, no second gzip, no load), file times as built."""
    if not rewrite:
        if image is None or oci is not None:
            raise ValueError("a build without rewritten timestamps goes into the engine, by name")
        return f"type=image,name={image},oci-mediatypes=true,compression=gzip"
    common = "oci-mediatypes=true,compression=gzip,rewrite-timestamp=true"
    if oci is not None:
        return f"type=oci,dest={oci},{common}"
    assert image is not None
    return f"type=oci,dest=-,name={image},{common}"


def build_argv(docker: str, context: Path, *, output: str, metadata: Path,
               build_args: Mapping[str, str], labels: Mapping[str, str], nocache: bool,
               network: str | None = None) -> list[str]:
    """``docker buildx build`` of ``context``: build arguments by name (their values go in the
    environment, cli_env), labels, no attestations of BuildKit's own, rawjson progress."""
    argv = [docker, "buildx", "build", "--progress", "rawjson", "--provenance=false",
            "--sbom=false", "--pull=false", "--metadata-file", str(metadata), "--output", output]
    for name in build_args:
        argv += ["--build-arg", name]
    for k, v in labels.items():
        argv += ["--label", f"{k}={v}"]
    if nocache:
        argv.append("--no-cache")
    if network:
        argv += ["--network", network]
    return [*argv, str(context)]


class ProgressLog:
    """buildx's rawjson progress, line by line: the steps (``[stage i/n] text``), which came
    from the cache, the log lines, and the first error with its step."""

    def __init__(self, on_step: Callable[[int, int, str], None] | None,
                 on_line: Callable[[str], None] | None) -> None:
        self.on_step, self.on_line = on_step, on_line
        self.names: dict[str, str] = {}  # vertex digest -> name
        self.totals: dict[str, int] = {}  # stage -> its step count
        self.done: set[str] = set()
        self.cached: set[str] = set()
        self.tail: list[str] = []
        self.error: tuple[str, str] | None = None  # (step, message)
        self.by_vertex: dict[str, list[str]] = {}

    @property
    def steps(self) -> int:
        return sum(self.totals.values())

    def feed(self, raw: str) -> None:
        raw = raw.strip()
        if not raw.startswith("{"):
            if raw:
                self._line(raw, None)
            return
        try:
            status = json.loads(raw)
        except ValueError:
            self._line(raw, None)
            return
        for v in status.get("vertexes") or ():
            self._vertex(v)
        for lg in status.get("logs") or ():
            try:
                text = base64.b64decode(lg.get("data") or "").decode("utf-8", "replace")
            except (ValueError, TypeError):
                continue
            for ln in text.splitlines():
                if ln.strip():
                    self._line(ln, lg.get("vertex"))

    def _vertex(self, v: Mapping[str, Any]) -> None:
        digest, name = str(v.get("digest") or ""), str(v.get("name") or "")
        self.names[digest] = name
        m = _STEP.match(name)
        if m:
            self.totals[m.group("stage")] = int(m.group("n"))
            if v.get("cached"):
                self.cached.add(name)
            if (v.get("completed") or v.get("cached")) and name not in self.done:
                self.done.add(name)
                if self.on_step:
                    self.on_step(len(self.done), max(self.steps, len(self.done)), m.group("text"))
        if v.get("error") and self.error is None:
            self.error = (name, str(v["error"]))

    def _line(self, ln: str, vertex: str | None) -> None:
        self.tail.append(ln)
        del self.tail[:-400]
        if vertex:
            lines = self.by_vertex.setdefault(vertex, [])
            lines.append(ln)
            del lines[:-60]
        if self.on_line:
            self.on_line(ln)

    def failure(self, code: int) -> OperationError:
        """The build's failure in one sentence: the step that failed and why (engine's rules
        for pip, certificates and the disk), the step's last lines as details."""
        from envbuilder.run.engine import build_error

        step, msg = self.error or ("", f"docker buildx build exited {code}")
        digest = next((d for d, n in self.names.items() if n == step), None)
        lines = self.by_vertex.get(digest or "", []) or self.tail[-30:]
        return OperationError(build_error(msg, lines, step=step), step="build",
                              details=(lines or self.tail)[-30:])


def build(client: DockerClient, context: Path, *, image: str | None = None,
          oci: Path | None = None, build_args: Mapping[str, str] | None = None,
          labels: Mapping[str, str] | None = None, source_date_epoch: int,
          nocache: bool = False, network: str | None = None, rewrite: bool = True,
          on_step: Callable[[int, int, str], None] | None = None,
          on_line: Callable[[str], None] | None = None,
          timeout: float = BUILD_TIMEOUT_S) -> BuildKitResult:
    """Build ``context`` reproducibly into the engine as ``image`` or into the OCI layout tar
    ``oci`` (see the module's doc). ``build_args`` travel by name, their values in the CLI's
    environment; SOURCE_DATE_EPOCH is one of them and the CLI's own."""
    sup = support(client)
    if not sup.ok or sup.docker is None:
        raise OperationError(f"this engine cannot build reproducibly: {sup.why}", step="build")
    args = {**dict(build_args or {}), "SOURCE_DATE_EPOCH": str(int(source_date_epoch))}
    log = ProgressLog(on_step, on_line)
    with tempfile.TemporaryDirectory(prefix="envbuilder-buildx-") as tmp:
        meta = Path(tmp) / "metadata.json"
        argv = build_argv(sup.docker, Path(context), output=output_option(image=image, oci=oci, rewrite=rewrite),
                          metadata=meta, build_args=args, labels=dict(labels or {}),
                          nocache=nocache, network=network)
        load = None if oci is not None or not rewrite else [sup.docker, "load", "--quiet"]
        code = _stream(argv, cli_env(client, args), log, timeout, load=load)
        if code != 0:
            if code == 124:
                raise OperationError(f"the build of {image or oci} ran past {int(timeout)} s",
                                     step="build", details=log.tail[-30:])
            raise log.failure(code)
        try:
            md = json.loads(meta.read_text())
        except (OSError, ValueError):
            md = {}
    digest = md.get("containerimage.digest")
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise OperationError(f"the build of {image or oci} ended without an image digest "
                             f"(buildx's metadata file)", step="build", details=log.tail[-30:])
    return BuildKitResult(digest, md.get("containerimage.config.digest"), image, oci,
                          log.steps, len(log.cached), log.tail)


def _stream(argv: list[str], env: Mapping[str, str], log: ProgressLog, timeout: float, *,
            load: list[str] | None = None) -> int:
    """Run ``argv`` in its own process group, its stderr (the rawjson progress) fed to ``log``
    line by line, its stdout into ``load`` (``docker load``) when given; past ``timeout`` (or on
    Ctrl-C) both are stopped. The exit status (124: ran past; a failed load's own)."""
    procs: list[subprocess.Popen] = []
    try:
        proc = subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE if load else subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        procs.append(proc)
        if load:
            loader = subprocess.Popen(load, env=dict(env), stdin=proc.stdout,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      start_new_session=True)
            procs.append(loader)
            assert proc.stdout is not None
            proc.stdout.close()  # the loader holds it: buildx sees a closed pipe if it dies
    except OSError as e:
        _stop(procs)
        raise OperationError(f"cannot run {argv[0]}: {e}", step="build") from None

    def read() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            log.feed(raw.decode("utf-8", errors="replace"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    timed_out = False
    try:
        for p in procs:
            p.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        _stop(procs)
        reader.join(20)
    if timed_out:
        return 124
    if proc.returncode != 0 or len(procs) == 1:
        return int(proc.returncode)
    loader = procs[1]
    if loader.returncode != 0:
        out = loader.stdout.read().decode("utf-8", "replace") if loader.stdout else ""
        log.error = ("docker load", out.strip().splitlines()[-1] if out.strip() else
                     f"docker load exited {loader.returncode}")
        return int(loader.returncode)
    return 0


def _stop(procs: list[subprocess.Popen]) -> None:
    """Stop what still runs (ran past, or interrupted): buildx cancels its build."""
    for proc in procs:
        if proc.poll() is not None:
            continue
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(20)
                break
            except subprocess.TimeoutExpired:
                continue
            except (ProcessLookupError, PermissionError):
                break
