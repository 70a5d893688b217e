"""Apptainer/Singularity: parse envbuilder.def, build a SIF where apptainer exists, and prove a
definition without apptainer by running it in Docker the way ``apptainer build`` would.

``run_definition_in_docker(folder, client)`` executes each stage of ``folder/envbuilder.def``
in a container of its ``From:`` image: ``%files`` copied in (from the folder, or ``from`` an
earlier stage), ``%post`` run with the shell it names, the result committed; then ``%test`` runs
in the final stage with ``%environment`` sourced. It is how CI, where Apptainer cannot be
installed, checks that the definition builds and works: a test, not a claim.
"""

from __future__ import annotations

import io
import re
import secrets
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envbuilder.errors import InputError, OperationError
from envbuilder.run import engine

if TYPE_CHECKING:
    from docker import DockerClient


@dataclass
class Stage:
    header: dict[str, str]
    sections: list[tuple[str, str, str]] = field(default_factory=list)  # (name, args, body)

    @property
    def name(self) -> str:
        return self.header.get("Stage", "final")

    def section(self, name: str) -> list[tuple[str, str]]:
        return [(args, body) for n, args, body in self.sections if n == name]


_SECTION = re.compile(r"^%(\w+)\s*(.*)$")


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
        if st.header.get("Bootstrap") != "docker" or "From" not in st.header:
            raise InputError("definition: every stage needs Bootstrap: docker and From:")
    if not stages:
        raise InputError("definition: no Bootstrap: header")
    return stages


def _files(body: str) -> list[tuple[str, str]]:
    out = []
    for line in body.splitlines():
        parts = line.split()
        if parts:
            out.append((parts[0], parts[1] if len(parts) > 1 else parts[0]))
    return out


def find_apptainer() -> str | None:
    return shutil.which("apptainer") or shutil.which("singularity")


def build_sif(image: str, out: Path) -> Path:
    """apptainer build OUT.sif docker-daemon://IMAGE (the image envbuilder just built)."""
    exe = find_apptainer()
    if exe is None:
        raise OperationError("apptainer (or singularity) is not installed here: install it to "
                             "build a SIF, or build from envbuilder.def on your cluster",
                             step="apptainer")
    p = subprocess.run([exe, "build", "--force", str(out), f"docker-daemon://{image}"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        raise OperationError(f"apptainer build of {out} failed: {tail[0]}", step="apptainer")
    return out


@dataclass
class StageRun:
    stage: str
    image: str
    exit_code: int
    log: str


def _tar_paths(folder: Path, src: str, dest: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(folder / src), arcname=dest.lstrip("/"))
    return buf.getvalue()


def run_definition_in_docker(folder: Path, client: DockerClient, *, keep: bool = False,
                             gpus: bool | None = None) -> list[StageRun]:
    """Run every stage's %files and %post in Docker, then %test with %environment sourced.

    ``gpus``: give the %test container the GPUs (default: when the engine has the NVIDIA
    runtime), as ``apptainer test --nv`` would."""
    import docker.errors

    folder = Path(folder)
    stages = parse_definition((folder / "envbuilder.def").read_text(encoding="utf-8"))
    run_id = secrets.token_hex(4)
    built: dict[str, str] = {}
    runs: list[StageRun] = []
    use_gpus = engine.has_gpu_runtime(client) if gpus is None else gpus
    try:
        for st in stages:
            with engine.Container(client, st.header["From"], ["sleep", "infinity"],
                                  step="apptainer", entrypoint=[], user="0") as c:
                c.start()
                for args, body in st.section("files"):
                    m = re.match(r"from\s+(\S+)", args)
                    for src, dest in _files(body):
                        if m:  # %files from <stage>: copy out of that stage's image
                            with engine.Container(client, built[m.group(1)], ["true"],
                                                  step="apptainer") as tmp:
                                data = tmp.get_archive(src)
                            if data is None:
                                raise OperationError(f"%files from {m.group(1)}: {src} is not in "
                                                     "that stage", step="apptainer")
                            # the archive's top entry is src's basename: unpack it in dest's parent
                            # (or in dest itself when dest names a folder with a trailing /)
                            parent = dest.rstrip("/") if dest.endswith("/") else str(Path(dest).parent)
                            c.exec(["mkdir", "-p", parent])
                            c.put_archive(parent, data)
                        else:
                            c.exec(["mkdir", "-p", str(Path(dest).parent)])
                            c.put_archive("/", _tar_paths(folder, src, dest))
                for args, body in st.section("post"):
                    shell = "/bin/sh"
                    m = re.match(r"-c\s+(\S+)", args)
                    if m:
                        shell = m.group(1)
                    code, log = c.exec([shell, "-c", body], user="0")
                    runs.append(StageRun(st.name, st.header["From"], code, log))
                    if code != 0:
                        raise OperationError(f"%post of stage {st.name} failed (exit {code}): "
                                             f"{log.strip().splitlines()[-1:] or ['']}", step="apptainer")
                repo, t = f"envbuilder-apptainer-sim:{run_id}-{st.name}".split(":")
                built[st.name] = c.commit(repo, t)
        final = stages[-1]
        env = "\n".join(body for _, body in final.section("environment"))
        for _, body in final.section("test"):
            with engine.Container(client, built[final.name], ["sleep", "infinity"],
                                  step="apptainer", entrypoint=[], user="1000",
                                  gpus=use_gpus) as c:
                c.start()
                code, out = c.exec(["/bin/sh", "-c", f"{env}\n{body}"])
                runs.append(StageRun("%test", built[final.name], code, out))
                if code != 0:
                    raise OperationError(f"%test failed (exit {code}): {out.strip()[-300:]}",
                                         step="apptainer")
        return runs
    finally:
        if not keep:
            for tag in built.values():
                try:
                    client.images.remove(tag, force=True)
                except docker.errors.APIError:
                    pass


def environment_of(folder: Path, client: DockerClient, image: str,
                   names: list[str]) -> dict[str, str]:
    """Values of ``names`` after sourcing the definition's %environment in ``image``."""
    stages = parse_definition((Path(folder) / "envbuilder.def").read_text(encoding="utf-8"))
    env = "\n".join(body for _, body in stages[-1].section("environment"))
    script = env + "\n" + "".join(f'echo "{n}=${{{n}}}"\n' for n in names)
    with engine.Container(client, image, ["/bin/sh", "-c", script], step="apptainer",
                          entrypoint=[]) as c:
        c.start()
        c.wait(120)
        out = c.logs(stderr=False)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
