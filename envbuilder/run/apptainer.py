"""Apptainer/Singularity: build ``envbuilder.def`` with the real ``apptainer build``, check the SIF
against its labels and run the smoke job in it with ``apptainer exec``.

``apptainer_command(value)`` is the command: ``--apptainer CMD``, else ``$ENVBUILDER_APPTAINER``,
else ``apptainer`` (or ``singularity``) on PATH; a wrapper that runs Apptainer in a container
works (scripts/test-services.sh makes one). ``build_sif`` bootstraps each stage from the same
base the Dockerfile uses: ``Bootstrap: docker`` for a registry image, ``docker-archive`` of a
``docker save`` when the base is an image of the local engine (the definition's header says
which). Build arguments (index URLs with credentials, proxies) reach ``%post`` through a file in
a folder bound at ``APPTAINER_BUILD_ENV_DIR`` for the build only: no layer holds them.

Apptainer may run as another user than envbuilder (the wrapper runs it as an unprivileged user
in a container): what it reads and writes lives in folders it can enter (0755/0777), inside a
private (0700) work folder beside the SIF. The SIF moves into place when it is complete; a
sidecar ``<sif>.envbuilder.json`` records its inputs' digest, so a rebuild with the same inputs
reuses it (``cached``) and a SIF envbuilder did not write is never replaced.

``parse_definition`` reads a definition's stages and sections (lint, tests).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from envbuilder.errors import InputError, OperationError
from envbuilder.render.templating import APPTAINER_BUILD_ENV_DIR, APPTAINER_SMOKE

if TYPE_CHECKING:
    from docker import DockerClient

    from envbuilder.core.matrix import Matrix
    from envbuilder.render.plan import BuildPlan
    from envbuilder.run.smoke import SmokeResult
    from envbuilder.run.verify import VerifyReport

ENV_COMMAND = "ENVBUILDER_APPTAINER"
BASES_DIR = ".envbuilder-sif-bases"  # in the build folder while a SIF builds: its bases' archives
BUILD_TIMEOUT_S = 4 * 3600
SIDECAR = ".envbuilder.json"
SIDECAR_CAP = 64 << 10  # the SIF's record is a few hundred bytes
_MARKER = re.compile(r"^envbuilder: (stage \S+, .+)\Z")


# -- parsing (lint, tests) ------------------------------------------------------------------

@dataclass
class Stage:
    header: dict[str, str]
    sections: list[tuple[str, str, str]] = field(default_factory=list)  # (name, args, body)

    @property
    def name(self) -> str:
        return self.header.get("Stage", "final")

    def section(self, name: str) -> list[tuple[str, str]]:
        return [(args, body) for n, args, body in self.sections if n == name]


_SECTION = re.compile(r"^%(\w+)\s*(.*)\Z")
BOOTSTRAPS = ("docker", "docker-archive", "docker-daemon", "oci-archive", "localimage")


def parse_definition(text: str) -> list[Stage]:
    """Stages of a definition file: header keys and sections, in order."""
    stages: list[Stage] = []
    current: Stage | None = None
    sec: list | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\n")
        if not line.strip() or (line.lstrip().startswith("#") and sec is None):
            if sec is not None:
                sec[2].append(line)
            continue
        m = re.match(r"^(Bootstrap|From|Stage):\s*(\S+)\s*$", line)
        if m and (sec is None or m.group(1) == "Bootstrap"):
            if m.group(1) == "Bootstrap":
                current = Stage({})
                stages.append(current)
                sec = None
            if current is None:
                raise InputError("definition: a header key before Bootstrap:")
            current.header[m.group(1)] = m.group(2)
            continue
        m = _SECTION.match(line)
        if m:
            if current is None:
                raise InputError(f"definition: section %{m.group(1)} before any Bootstrap:")
            sec = [m.group(1), m.group(2).strip(), []]
            current.sections.append(sec)  # type: ignore[arg-type]
            continue
        if sec is None:
            raise InputError(f"definition: unexpected line outside a section: {line!r}")
        sec[2].append(line)
    for st in stages:
        st.sections = [(n, a, "\n".join(b).strip("\n") + "\n") for n, a, b in st.sections]
        if st.header.get("Bootstrap") not in BOOTSTRAPS or "From" not in st.header:
            raise InputError(f"definition: every stage needs Bootstrap: (one of {', '.join(BOOTSTRAPS)}) and From:")
    if not stages:
        raise InputError("definition: no Bootstrap: header")
    return stages


# -- the command ----------------------------------------------------------------------------

def apptainer_command(value: str | None = None) -> list[str]:
    """The apptainer command line to run: ``value`` (``--apptainer``), $ENVBUILDER_APPTAINER, or
    apptainer/singularity on PATH."""
    value = value or os.environ.get(ENV_COMMAND)
    if value:
        try:
            argv = shlex.split(value)
        except ValueError as e:
            raise InputError(f"--apptainer {value!r} is not a command line: {e}") from None
        exe = shutil.which(argv[0]) if argv else None
        if exe is None:
            raise InputError(f"--apptainer {value!r}: {argv[0] if argv else value!r} is not an executable "
                             f"on PATH; name apptainer, singularity or a wrapper that runs one")
        return [exe, *argv[1:]]
    exe = shutil.which("apptainer") or shutil.which("singularity")
    if exe is None:
        raise InputError("--runtime apptainer needs apptainer (or singularity) on PATH, or --apptainer CMD "
                         f"(or {ENV_COMMAND}) naming one or a wrapper; without it, build envbuilder.def "
                         "on your cluster: apptainer build X.sif envbuilder.def")
    return [exe]


def find_apptainer() -> str | None:
    try:
        return apptainer_command()[0]
    except InputError:
        return None


LOG_CAP = 4 << 20  # the tail of an apptainer command's output kept (the report shows its end)


def _run(cmd: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float,
         on_line: Callable[[str], None] | None = None, step: str,
         cap: int = LOG_CAP) -> tuple[int, str, bool]:
    """Run ``cmd`` through the one child runner (envbuilder._child: its own process group, its
    output lines streamed to ``on_line`` and its tail kept, stopped past ``timeout`` seconds,
    a Ctrl-C or SIGTERM forwarded to it). (exit status, 124 when it ran past; log; timed out)"""
    from envbuilder import _child

    try:
        r = _child.run(list(cmd), cwd=cwd, env={**os.environ, **(env or {})}, timeout=timeout,
                       on_line=on_line, merge=True, cap=cap)
    except OSError as e:
        raise OperationError(f"cannot run {cmd[0]}: {e}", step=step) from None
    log = r.stdout
    if r.dropped:  # a command that printed without end: its tail, saying so
        log = f"[{r.over_cap()}]\n{log}"
    return r.returncode, log.rstrip("\n"), r.timed_out


# -- build ----------------------------------------------------------------------------------

@dataclass
class SifBuild:
    sif: str
    sha256: str
    size_bytes: int
    inputs: str
    bases: dict[str, str]  # image -> how the definition bootstraps from it
    cached: bool = False
    seconds: float = 0.0
    log_tail: str = ""
    # the root file system's partition (squashfs) digest: what two builds of the same inputs
    # share, where the SIF's own sha256 differs (its header's creation time and UUIDs)
    rootfs_sha256: str | None = None
    source_date_epoch: int | None = None
    # the built definition's header lines naming each stage's base (Apptainer keeps no comments
    # in the definition it embeds in the SIF)
    header: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"sif": self.sif, "sha256": self.sha256, "size_bytes": self.size_bytes,
                "inputs": self.inputs, "bases": self.bases, "cached": self.cached,
                "rootfs_sha256": self.rootfs_sha256, "source_date_epoch": self.source_date_epoch,
                "definition_header": self.header, "seconds": round(self.seconds, 3)}


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of a file (a SIF's digest, as its record and its metrics state it)."""
    return _sha256(path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def read_paths(definition: str) -> list[str]:
    """The build folder's paths the definition copies in (the sources of its ``%files``
    sections; ``%files from STAGE`` copies from another stage, not from the folder)."""
    paths: list[str] = []
    for stage in parse_definition(definition):
        for args, body in stage.section("files"):
            if args.startswith("from "):
                continue
            for line in body.splitlines():
                words = line.split()
                if words and not words[0].startswith("#"):
                    paths.append(words[0])
    return list(dict.fromkeys(paths))


def inputs_digest(ctx: Path, definition: str, base_ids: Mapping[str, str],
                  source_date_epoch: int | None = None) -> str:
    """What the SIF is built from: the definition, the base images' ids, SOURCE_DATE_EPOCH and
    every file its ``%files`` sections copy from the folder. Nothing else of the folder counts:
    stack.json records where the matrix was read (a path that differs between checkouts) and
    the SIF does not hold it."""
    h = hashlib.sha256(definition.encode() + b"\0")
    if source_date_epoch is not None:
        h.update(f"SOURCE_DATE_EPOCH={int(source_date_epoch)}\0".encode())
    for image, ident in sorted(base_ids.items()):
        h.update(f"{image}={ident}\0".encode())
    for src in read_paths(definition):
        top = ctx / src
        files = sorted(q for q in top.rglob("*") if q.is_file()) if top.is_dir() else [top]
        h.update(src.encode() + b"\0")
        for q in files:
            rel = q.relative_to(ctx).as_posix()
            h.update(rel.encode() + b"\0" + (_sha256(q) if q.is_file() else "missing").encode() + b"\0")
    return "sha256:" + h.hexdigest()


# The SIF format (https://github.com/apptainer/sif, pkg/sif/sif.go and descriptor.go): a
# 128-byte global header (launch script, "SIF_MAGIC", version, arch, UUID, then eight
# little-endian int64s: created, modified, free and total descriptors, the descriptors' offset
# and size, the data's offset and size), then descriptors of 585 bytes (data type int32, used
# bool, id, group, link uint32, offset, size, ... int64, a 128-byte name and 384 bytes of
# type-specific data: a partition's file system and partition type as int32s).
_SIF_MAGIC = b"SIF_MAGIC\0"
_SIF_DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")  # 585 bytes
_DATA_PARTITION, _FS_SQUASH, _PART_PRIMSYS = 0x4004, 1, 2


def rootfs_digest(sif: Path) -> str | None:
    """The sha256 of the SIF's primary system partition (its squashfs root file system): the
    part two builds of the same inputs share, where the header's creation time and UUIDs (and
    so the file's own sha256) differ. None when the file is no SIF with such a partition."""
    try:
        with open(sif, "rb") as f:
            head = f.read(128)
            if len(head) < 128 or head[32:42] != _SIF_MAGIC:
                return None
            total, off = struct.unpack_from("<qq", head, 88)
            if not 0 < total <= 4096:
                return None
            f.seek(off)
            table = f.read(total * _SIF_DESCRIPTOR.size)
            for i in range(len(table) // _SIF_DESCRIPTOR.size):
                d = _SIF_DESCRIPTOR.unpack_from(table, i * _SIF_DESCRIPTOR.size)
                dtype, used, start, size, extra = d[0], d[1], d[5], d[6], d[13]
                fstype, parttype = struct.unpack_from("<ii", extra, 0)
                if used and dtype == _DATA_PARTITION and fstype == _FS_SQUASH and parttype == _PART_PRIMSYS:
                    return _range_sha256(f, start, size)
    except (OSError, struct.error):
        return None
    return None


def _range_sha256(f: Any, start: int, size: int) -> str:
    h = hashlib.sha256()
    f.seek(start)
    left = size
    while left > 0:
        chunk = f.read(min(left, 1 << 20))
        if not chunk:
            break
        h.update(chunk)
        left -= len(chunk)
    return "sha256:" + h.hexdigest()


def _sidecar(sif: Path) -> Path:
    return sif.with_name(sif.name + SIDECAR)


def _written_by_us(sif: Path) -> dict | None:
    """The sidecar of a SIF envbuilder wrote (None: no file there); refuse any other file."""
    side = _sidecar(sif)
    if os.path.lexists(side) and (side.is_symlink() or not side.is_file()):
        # never read or written through a link (written, it would land wherever it points)
        raise InputError(f"--sif {sif}: {side} is a link or not a file: envbuilder writes "
                         "the SIF's record there; remove it or choose another --sif path")
    if not sif.exists() and not sif.is_symlink():
        return None
    from envbuilder.core.readfile import read_bytes_capped
    from envbuilder.errors import EnvbuilderError

    try:  # the one capped reader: a 3 GiB record costs one fstat; anything but an object is none
        doc = json.loads(read_bytes_capped(side, "the SIF's record", limit=SIDECAR_CAP,
                                           follow_links=False))
        if not isinstance(doc, dict) or not sif.is_file() or sif.is_symlink() \
                or doc.get("written_by") != "envbuilder":
            raise ValueError
    except (EnvbuilderError, OSError, ValueError):
        raise InputError(f"--sif {sif} exists and envbuilder did not write it (no {side.name} "
                         f"of its own): remove it or choose another --sif path") from None
    return doc


def _cached(sif: Path, inputs: str) -> dict | None:
    doc = _written_by_us(sif)
    if doc is not None and doc.get("inputs") == inputs and doc.get("sha256") == _sha256(sif):
        return doc
    return None


def _private_work(near: Path) -> tuple[Path, Path, Path]:
    """(work, shared, env): a 0700 folder beside the SIF holding a folder apptainer may write
    (0777) and one it may read (0755), for an apptainer that runs as another user."""
    work = Path(tempfile.mkdtemp(prefix=".envbuilder-sif-", dir=near))
    shared, env = work / "w", work / "env"
    shared.mkdir()
    env.mkdir()
    os.chmod(shared, 0o777)
    os.chmod(env, 0o755)
    return work, shared, env


def local_bases(client: DockerClient | None, images: Sequence[str], dest: Path) -> tuple[dict, dict]:
    """For each base image the local engine holds: ``docker save`` it into ``dest`` and
    bootstrap from that archive. (bases for render_definition, image -> image id)."""
    bases: dict[str, tuple[str, str, str]] = {}
    ids: dict[str, str] = {}
    if client is None:
        return bases, ids
    import docker.errors

    for n, image in enumerate(dict.fromkeys(images)):
        try:
            img = client.images.get(image)
        except docker.errors.ImageNotFound:
            continue  # a registry image: Bootstrap: docker pulls it
        except docker.errors.DockerException as e:
            raise OperationError(f"cannot inspect the base image {image}: {e}", step="apptainer") from None
        ids[image] = img.id
        tar = dest / f"base-{n}.tar"
        try:
            with open(tar, "wb") as f:
                for chunk in img.save(named=True):
                    f.write(chunk)
        except (OSError, docker.errors.DockerException) as e:
            raise OperationError(f"docker save {image} failed: {e}", step="apptainer") from None
        os.chmod(tar, 0o644)
        bases[image] = ("docker-archive", str(tar),
                        f"a docker save of the local engine's image {image} ({img.id})")
    return bases, ids


_HEADER = re.compile(r"^# Base of the (\w+) stage: Bootstrap: docker, the registry image (\S+) \(the Dockerfile's\)\.\Z")


def localize(text: str, bases: Mapping[str, tuple[str, str, str]]) -> str:
    """The definition with each stage whose base is in ``bases`` (image -> (Bootstrap, From,
    what it is)) bootstrapped that way, and its header saying so."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if m and m.group(2) in bases:
            boot, _, note = bases[m.group(2)]
            lines[i] = f"# Base of the {m.group(1)} stage: Bootstrap: {boot}, {note}."
        elif line == "Bootstrap: docker" and i + 1 < len(lines) and lines[i + 1].startswith("From: "):
            image = lines[i + 1][len("From: "):].strip()
            if image in bases:
                lines[i] = f"Bootstrap: {bases[image][0]}"
                lines[i + 1] = f"From: {bases[image][1]}"
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def _failure(log: str, code: int, timed_out: bool) -> str:
    where = "the build"
    for line in log.splitlines():
        m = _MARKER.match(line.strip())
        if m:
            where = m.group(1)
    fatal = [ln for ln in log.splitlines() if ln.startswith(("FATAL", "ERROR"))]
    last = [ln for ln in log.splitlines() if ln.strip() and not ln.startswith(("INFO", "WARNING", "+ "))]
    why = (fatal or last or ["no output"])[-1].strip()
    if timed_out:
        why = f"ran past {BUILD_TIMEOUT_S} s"
    return f"apptainer build failed in {where} (exit {code}): {why[:400]}"


def build_sif(cmd: Sequence[str], plan: BuildPlan, ctx: Path, out: Path, *,
              client: DockerClient | None = None, build_env: Mapping[str, str] | None = None,
              source_date_epoch: int | None = None,
              on_line: Callable[[str], None] | None = None) -> SifBuild:
    """``apptainer build`` of ``ctx/envbuilder.def`` (its local bases bootstrapped as
    ``local_bases`` says) into ``out``, or the SIF already there when its inputs are unchanged.
    ``source_date_epoch``: in apptainer's environment (mksquashfs dates the root file system's
    files with it) and %post's (build.env)."""
    out = Path(out).absolute()
    if out.suffix != ".sif" or not out.parent.is_dir():
        raise InputError(f"--sif {out}: name a .sif file in an existing folder")
    try:
        rendered = (Path(ctx) / "envbuilder.def").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{ctx} holds no readable envbuilder.def (envbuilder render writes it): {e}") from None
    parse_definition(rendered)
    _written_by_us(out)
    started = time.monotonic()
    work, shared, env_dir = _private_work(out.parent)
    # the base archives at one path relative to the build folder (apptainer's working folder):
    # the definition the SIF keeps, and its deffile.from label, are then the same every build
    bases_dir = Path(ctx) / BASES_DIR
    shutil.rmtree(bases_dir, ignore_errors=True)  # a crashed build's
    bases_dir.mkdir()
    os.chmod(bases_dir, 0o755)
    try:
        bases, ids = local_bases(client, [plan.builder_image, plan.runtime_image], bases_dir)
        bases = {i: (b[0], f"{BASES_DIR}/{Path(b[1]).name}", b[2]) for i, b in bases.items()}
        text = localize(rendered, bases)
        # the archives' paths are temporary: the digest takes the images' ids instead
        digest = inputs_digest(ctx, localize(rendered, {i: (b[0], ids[i], b[2]) for i, b in bases.items()}), ids,
                               source_date_epoch)
        sde_env = {} if source_date_epoch is None else {"SOURCE_DATE_EPOCH": str(int(source_date_epoch))}
        build_env = {**(build_env or {}), **sde_env}
        shown = {i: bases[i][0] if i in bases else "docker" for i in (plan.builder_image, plan.runtime_image)}
        header = [ln for ln in text.splitlines() if ln.startswith("# Base of the ")]
        doc = _cached(out, digest)
        if doc is not None:
            return SifBuild(str(out), doc["sha256"], out.stat().st_size, digest, shown, cached=True,
                            seconds=time.monotonic() - started, header=header,
                            rootfs_sha256=doc.get("rootfs_sha256"), source_date_epoch=source_date_epoch)
        (shared / "envbuilder.def").write_text(text)
        if build_env:
            (env_dir / "build.env").write_text(
                "".join(f"{k}={shlex.quote(v)}\n" for k, v in sorted(build_env.items())))
            os.chmod(env_dir / "build.env", 0o644)
        tmp_sif = shared / out.name
        # --force: the definition's %labels win over Apptainer's own (its build-date is the
        # wall clock before Apptainer 1.5; the definition dates it SOURCE_DATE_EPOCH)
        code, log, timed_out = _run(
            [*cmd, "build", "--fakeroot", "--force", "--bind", f"{env_dir}:{APPTAINER_BUILD_ENV_DIR}:ro",
             str(tmp_sif), str(shared / "envbuilder.def")],
            cwd=ctx, env=sde_env, timeout=BUILD_TIMEOUT_S, on_line=on_line, step="apptainer")
        if code != 0 or not tmp_sif.is_file():
            raise OperationError(_failure(log, code, timed_out), step="apptainer",
                                 details=log.splitlines()[-40:])
        sha = _sha256(tmp_sif)
        rootfs = rootfs_digest(tmp_sif)
        # the record is written beside the SIF in the private folder and renamed into place:
        # a rename replaces whatever has the name, it never writes through a link
        record = shared / (out.name + SIDECAR)
        record.write_text(json.dumps({"inputs": digest, "sha256": sha, "bases": shown,
                                      "rootfs_sha256": rootfs,
                                      "written_by": "envbuilder"}, indent=2) + "\n")
        os.chmod(record, 0o644)
        os.replace(tmp_sif, out)
        os.replace(record, _sidecar(out))
        return SifBuild(str(out), sha, out.stat().st_size, digest, shown,
                        seconds=time.monotonic() - started, log_tail=log[-2000:], header=header,
                        rootfs_sha256=rootfs, source_date_epoch=source_date_epoch)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(bases_dir, ignore_errors=True)


# -- in the SIF -----------------------------------------------------------------------------

def sif_labels(cmd: Sequence[str], sif: Path) -> dict[str, str]:
    """The SIF's labels, as ``apptainer inspect --json`` reports them."""
    code, log, _ = _run([*cmd, "inspect", "--json", "--labels", str(sif)], cwd=Path(sif).parent,
                        timeout=300, step="apptainer")
    start = log.find("{")
    try:
        doc = json.loads(log[start:]) if start >= 0 else None
    except ValueError:
        doc = None
    if code != 0 or not isinstance(doc, dict):
        raise OperationError(f"apptainer inspect {sif} failed (exit {code}): {log.strip()[-300:]}",
                             step="apptainer")
    labels = doc.get("data", {}).get("attributes", {}).get("labels", doc)
    return {str(k): str(v) for k, v in (labels or {}).items()}


def _exec_folder(sif: Path) -> tuple[Path, Path]:
    return _private_work(Path(sif).parent)[:2]


def verify_sif(cmd: Sequence[str], sif: Path, labels: Mapping[str, str],
               matrix: Matrix | None = None) -> VerifyReport:
    """The verification payload run in the SIF with ``apptainer exec``, against its labels."""
    from envbuilder.run.payload import verify_image
    from envbuilder.run.smoke import shell_wrap
    from envbuilder.run.verify import TIMEOUT_S, VerifyReport, compare, parse_facts, payload_args

    work, shared = _exec_folder(sif)
    try:
        script = shared / "verify_image.py"
        shutil.copyfile(verify_image.__file__, script)
        os.chmod(script, 0o644)
        line = shell_wrap(["PY", str(script), *payload_args(labels, matrix)])
        started = time.monotonic()
        code, log, timed_out = _run([*cmd, "exec", "--bind", str(shared), str(sif), "sh", "-c", line],
                                    cwd=shared, timeout=TIMEOUT_S, step="verify")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    facts = parse_facts(log)
    if facts is None:
        why = f"ran past {TIMEOUT_S} s" if timed_out else f"exit {code}"
        raise OperationError(f"the verification payload reported nothing in {sif} ({why}): "
                             f"{log.strip()[-400:]}", step="verify")
    return VerifyReport(str(sif), compare(facts, labels, matrix), facts,
                        time.monotonic() - started, dict(labels))


def smoke_command(cmd: Sequence[str], sif: Path, home: str) -> list[str]:
    """The smoke command of the definition's %help and jobs/README.md, for ``sif``."""
    words = shlex.split(APPTAINER_SMOKE.format(sif=shlex.quote(str(sif)), home=home))
    return [*cmd, *words[1:]]


def smoke_sif(cmd: Sequence[str], sif: Path, home: str, *, nproc: int, backend: str,
              timeout: int) -> tuple[SmokeResult, list[str]]:
    """The smoke job in the SIF, by the command %help shows (``apptainer exec --nv SIF sh
    HOME/smoke/run.sh``; --nv only warns where there is no GPU), its settings in the
    environment; (result, the command that ran)."""
    from envbuilder.run.smoke import _read_out_dir, build_result, job_deadline

    work, shared = _exec_folder(sif)
    try:
        out = shared / "out"
        out.mkdir()
        os.chmod(out, 0o777)
        env = {"APPTAINERENV_NPROC": str(nproc), "APPTAINERENV_BACKEND": backend,
               "APPTAINERENV_TIMEOUT": str(int(timeout)), "APPTAINERENV_OUT": str(out),
               "APPTAINERENV_PYTHONUNBUFFERED": "1", "APPTAINER_BIND": str(shared)}
        argv = smoke_command(cmd, sif, home)
        started = time.monotonic()
        code, log, timed_out = _run(argv, cwd=shared, env=env, timeout=job_deadline(timeout), step="smoke")
        summary, ranks = _read_out_dir(str(out))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = build_result(summary=summary, ranks=ranks, log=log, exit_code=code, nproc_per_node=nproc,
                          nnodes=1, backend=backend, seconds=time.monotonic() - started,
                          where=str(sif), timed_out=timed_out, timeout=timeout)
    return result, argv


def pip_freeze_sif(cmd: Sequence[str], sif: Path) -> list[str]:
    """``pip freeze`` of the SIF's environment (the venv on PATH from %environment)."""
    code, log, _ = _run([*cmd, "exec", str(sif), "python", "-m", "pip", "freeze", "--all"],
                        cwd=Path(sif).parent, timeout=300, step="apptainer")
    if code != 0:
        raise OperationError(f"pip freeze in {sif} failed (exit {code}): {log.strip()[-300:]}",
                             step="apptainer")
    return sorted(ln for ln in log.splitlines() if "==" in ln or " @ " in ln)


# -- a SIF of the pushed image: tied to its digest ------------------------------------------------

IMAGE_REF_LABEL = "io.envbuilder.image-ref"  # REPO@sha256:... the SIF's root file system is
IMAGE_CONFIG_LABEL = "io.envbuilder.image-config"  # that image's config digest (its layers)
ATTESTATION_SUFFIX = ".att.json"  # the SIF's attestation bundle, beside it (run.sign)
_FROM_IMAGE_DEF = """\
# envbuilder: the SIF of {ref} (a docker save of the engine's image whose config digest the
# registry serves for that digest: the same layers). Apptainer imports the image's labels,
# environment and entrypoint; these labels name where it came from.
Bootstrap: docker-archive
From: {tar}

%labels
    {ref_label} {ref}
    {config_label} {config}
"""


def is_sif(path: str | None) -> bool:
    """``path`` names a SIF file (``envbuilder verify X.sif``, ``smoke X.sif``)."""
    return bool(path) and str(path).endswith(".sif") and Path(str(path)).is_file()


def pushed_config(client: DockerClient, image_id: str, ref: str) -> str:
    """The config digest the registry serves for ``ref``, checked to be the local image's:
    the docker save of ``image_id`` holds exactly the pushed image's layers. An engine with the
    legacy image store names an image by its config's digest; one with the containerd image
    store (the BuildKit path, docs/reproducible.md) by its manifest's, which is then the digest
    ``ref`` was pushed as. OperationError otherwise."""
    from envbuilder.run.registry import image_config

    got = image_config(ref)
    config = str(got["config_digest"])
    if image_id not in (config, ref.rpartition("@")[2]):
        raise OperationError(f"{ref}: the registry serves config {config}, the engine's image "
                             f"is {image_id}: the SIF would not be the pushed image", step="sif")
    return config


def build_sif_from_image(cmd: Sequence[str], client: DockerClient, image_id: str, ref: str,
                         out: Path, *, on_line: Callable[[str], None] | None = None) -> SifBuild:
    """A SIF of the pushed image ``ref`` (its engine image ``image_id``, checked against the
    registry by ``pushed_config``), labelled with ``ref`` and the config digest; reused when a
    SIF envbuilder wrote from the same image is already there."""
    import docker.errors

    out = Path(out).absolute()
    if out.suffix != ".sif" or not out.parent.is_dir():
        raise InputError(f"--sif {out}: name a .sif file in an existing folder")
    config = pushed_config(client, image_id, ref)
    previous = _written_by_us(out)
    started = time.monotonic()
    digest = "sha256:" + hashlib.sha256(f"from-image\0{ref}\0{config}".encode()).hexdigest()
    doc = _cached(out, digest)
    if doc is not None:
        return SifBuild(str(out), doc["sha256"], out.stat().st_size, digest, {ref: "docker-archive"},
                        cached=True, seconds=time.monotonic() - started)
    work, shared, _env_dir = _private_work(out.parent)
    try:
        tar = shared / "image.tar"
        try:
            with open(tar, "wb") as f:
                for chunk in client.images.get(image_id).save(named=False):
                    f.write(chunk)
        except (OSError, docker.errors.DockerException) as e:
            raise OperationError(f"docker save {image_id} failed: {e}", step="sif") from None
        os.chmod(tar, 0o644)
        (shared / "from-image.def").write_text(_FROM_IMAGE_DEF.format(
            ref=ref, tar=tar, config=config, ref_label=IMAGE_REF_LABEL,
            config_label=IMAGE_CONFIG_LABEL))
        tmp_sif = shared / out.name
        code, log, timed_out = _run([*cmd, "build", "--fakeroot", str(tmp_sif),
                                     str(shared / "from-image.def")],
                                    cwd=shared, timeout=BUILD_TIMEOUT_S, on_line=on_line, step="sif")
        if code != 0 or not tmp_sif.is_file():
            raise OperationError(_failure(log, code, timed_out), step="sif",
                                 details=log.splitlines()[-40:])
        sha = _sha256(tmp_sif)
        record = shared / (out.name + SIDECAR)
        record.write_text(json.dumps({"inputs": digest, "sha256": sha, "image": ref,
                                      "config_digest": config, "written_by": "envbuilder"},
                                     indent=2) + "\n")
        os.chmod(record, 0o644)
        os.replace(tmp_sif, out)
        os.replace(record, _sidecar(out))
        _drop_stale_attestation(out, previous)
        return SifBuild(str(out), sha, out.stat().st_size, digest, {ref: "docker-archive"},
                        seconds=time.monotonic() - started, log_tail=log[-2000:])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _drop_stale_attestation(sif: Path, previous: Mapping[str, Any] | None) -> None:
    """The attestation bundle envbuilder wrote for the SIF just replaced (its record names it)
    attests other bytes: it goes (run.sign.attest_sif writes the new one)."""
    name = (previous or {}).get("attestation")
    if isinstance(name, str) and "/" not in name and name.startswith(sif.name):
        try:
            os.unlink(sif.with_name(name))
        except FileNotFoundError:
            pass


def sif_sha256(sif: Path) -> str:
    return _sha256(Path(sif))


@dataclass
class SifCheck:
    """``envbuilder verify X.sif``: the SIF against its labels (the verification payload run in
    it), the image digest it came from, and with a key its attestation."""

    sif: str
    sha256: str
    image: str | None  # REPO@sha256:... (its label), None for a SIF built from a definition
    config_digest: str | None
    verify: VerifyReport
    attestation: dict[str, Any] | None = None  # run.sign.check_sif's result, with --key
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verify.ok and not self.errors and (
            self.attestation is None or bool(self.attestation.get("ok")))

    def to_dict(self) -> dict[str, Any]:
        return {"sif": self.sif, "ok": self.ok, "sha256": self.sha256, "image": self.image,
                "config_digest": self.config_digest, "verify": self.verify.to_dict(),
                "attestation": self.attestation, "errors": list(self.errors)}


def check_sif_file(cmd: Sequence[str], sif: Path, *, key: str | None = None,
                   matrix: Matrix | None = None,
                   attest_check: Callable[..., dict[str, Any]] | None = None) -> SifCheck:
    """The SIF's labels (apptainer inspect), the verification payload run in it against them,
    and with ``key`` the attestation beside it (``X.sif.att.json``) checked by
    ``attest_check(sif, key, labels)`` (run.sign.check_sif)."""
    labels = sif_labels(cmd, sif)
    report = verify_sif(cmd, sif, labels, matrix)
    out = SifCheck(str(sif), _sha256(sif), labels.get(IMAGE_REF_LABEL),
                   labels.get(IMAGE_CONFIG_LABEL), report)
    if key is not None and attest_check is not None:
        out.attestation = attest_check(sif, key, labels)
        if not out.attestation.get("ok"):
            out.errors.append(str(out.attestation.get("error") or "the attestation does not check"))
    return out
