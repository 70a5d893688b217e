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

from envbuilder.errors import InputError, OperationError


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


def run_definition_in_docker(folder: Path, client, *, keep: bool = False) -> list[StageRun]:
    """Run every stage's %files and %post in Docker, then %test with %environment sourced."""
    import docker.errors

    folder = Path(folder)
    stages = parse_definition((folder / "envbuilder.def").read_text(encoding="utf-8"))
    run_id = secrets.token_hex(4)
    built: dict[str, str] = {}
    runs: list[StageRun] = []
    try:
        for st in stages:
            c = client.containers.create(st.header["From"], command=["sleep", "infinity"],
                                         entrypoint=[], user="0")
            try:
                c.start()
                for args, body in st.section("files"):
                    m = re.match(r"from\s+(\S+)", args)
                    for src, dest in _files(body):
                        if m:  # %files from <stage>: copy out of that stage's image
                            tmp = client.containers.create(built[m.group(1)], command=["true"])
                            try:
                                stream, _ = tmp.get_archive(src)
                                data = b"".join(stream)
                            finally:
                                tmp.remove(force=True)
                            # the archive's top entry is src's basename: unpack it in dest's parent
                            # (or in dest itself when dest names a folder with a trailing /)
                            parent = dest.rstrip("/") if dest.endswith("/") else str(Path(dest).parent)
                            c.exec_run(["mkdir", "-p", parent])
                            c.put_archive(parent, data)
                        else:
                            c.exec_run(["mkdir", "-p", str(Path(dest).parent)])
                            c.put_archive("/", _tar_paths(folder, src, dest))
                for args, body in st.section("post"):
                    shell = "/bin/sh"
                    m = re.match(r"-c\s+(\S+)", args)
                    if m:
                        shell = m.group(1)
                    res = c.exec_run([shell, "-c", body], user="0")
                    log = res.output.decode("utf-8", "replace")
                    runs.append(StageRun(st.name, st.header["From"], res.exit_code, log))
                    if res.exit_code != 0:
                        raise OperationError(f"%post of stage {st.name} failed (exit {res.exit_code}): "
                                             f"{log.strip().splitlines()[-1:] or ['']}", step="apptainer")
                tag = f"envbuilder-apptainer-sim:{run_id}-{st.name}"
                repo, t = tag.split(":")
                c.commit(repository=repo, tag=t)
                built[st.name] = tag
            finally:
                c.remove(force=True)
        final = stages[-1]
        env = "\n".join(body for _, body in final.section("environment"))
        for _, body in final.section("test"):
            c = client.containers.create(built[final.name], command=["sleep", "infinity"],
                                         entrypoint=[], user="1000")
            try:
                c.start()
                script = f"{env}\n{body}"
                res = c.exec_run(["/bin/sh", "-c", script])
                runs.append(StageRun("%test", built[final.name], res.exit_code,
                                     res.output.decode("utf-8", "replace")))
                if res.exit_code != 0:
                    raise OperationError(f"%test failed (exit {res.exit_code}): "
                                         f"{res.output.decode(errors='replace').strip()[-300:]}",
                                         step="apptainer")
            finally:
                c.remove(force=True)
        return runs
    finally:
        if not keep:
            for tag in built.values():
                try:
                    client.images.remove(tag, force=True)
                except docker.errors.APIError:
                    pass


def environment_of(folder: Path, client, image: str, names: list[str]) -> dict[str, str]:
    """Values of ``names`` after sourcing the definition's %environment in ``image``."""
    stages = parse_definition((Path(folder) / "envbuilder.def").read_text(encoding="utf-8"))
    env = "\n".join(body for _, body in stages[-1].section("environment"))
    script = env + "\n" + "".join(f'echo "{n}=${{{n}}}"\n' for n in names)
    out = client.containers.run(image, ["/bin/sh", "-c", script], entrypoint=[], remove=True)
    return dict(line.split("=", 1) for line in out.decode().splitlines() if "=" in line)
