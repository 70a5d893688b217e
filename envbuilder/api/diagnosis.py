"""doctor, verify and the matrix's own checks (matrix verify, matrix show); explain is
``envbuilder.api.explaining``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from envbuilder.errors import InputError
from envbuilder.core.matrix import load_matrix
from envbuilder.core.spec import TargetSpec

from envbuilder.api.specs import resolve_spec
from envbuilder.api.daily import image_source

if TYPE_CHECKING:
    from envbuilder.knowledge.indexcheck import MatrixReport as MatrixVerifyReport
    from envbuilder.knowledge.refresh import RefreshReport
    from envbuilder.knowledge.show import AxisTable
    from envbuilder.run.sign import CheckReport
    from docker import DockerClient

    from envbuilder.diagnose.doctor import Check
    from envbuilder.run.verify import VerifyReport
    from envbuilder.run.apptainer import SifCheck


def doctor(*, spec: TargetSpec | None = None, image: str | None = None, nproc: int | None = None,
           matrix_dir: str | Path | None = None, key: str | None = None,
           record: str | Path | None = None, from_: str | Path | None = None) -> list[Check]:
    """Check this host, and judge it against a target's stack or an image's labels.

    ``record``: also write what the checks read into this new folder (the layout
    ``envbuilder.diagnose.probe.RecordedProbe`` replays: a host to attach to a bug report, or
    to test the checks with), in one transaction; it holds no environment variable but those
    the checks read. ``from_``: check the host such a folder recorded instead of this one,
    with the same checks (``--from DIR``)."""
    from envbuilder import labels
    from envbuilder.core.validate import image_ref
    from envbuilder.diagnose.doctor import run_doctor
    from envbuilder.diagnose.probe import RecordingProbe

    if spec is not None and image:
        raise InputError("doctor takes --target or --image, not both")
    recorded = recorded_host(from_, record) if from_ is not None else None
    facts = None
    if spec is not None:
        facts = labels.StackFacts.from_stack(resolve_spec(spec, matrix_dir=matrix_dir))
    elif image:
        from envbuilder.run.registry import parse_reference

        image_ref(image, "--image")
        named = parse_reference(image).registry != "registry-1.docker.io"
        # a registry's image is read from the engine, else from the registry (no layer pulled)
        facts = labels.read(image_source(image).labels if named else image_labels(image))
    probe = recorded or (RecordingProbe() if record is not None else None)
    checks = run_doctor(probe=probe, stack=facts, nproc=nproc)
    if probe is not None and record is not None:
        from envbuilder._fs import write_tree

        write_tree(record, probe.recording(), group="doctor-record", step="doctor --record",
                   option="--record")
    if image:
        checks.append(smoke_proof(image, key=key, nproc=nproc, probe=recorded))
    return checks


def recorded_host(folder: str | Path, record: str | Path | None = None) -> Any:
    """``doctor --from DIR``: the host ``DIR`` recorded (a ``doctor --record`` folder, replayed
    by diagnose.probe.RecordedProbe); bad input (exit 2) when DIR is no such folder."""
    import os

    from envbuilder.diagnose.probe import RecordedProbe

    if record is not None:
        raise InputError("doctor --from DIR checks a recorded host and --record writes this "
                         "one: give one of them")
    path = Path(folder)
    if not path.is_dir() or os.path.islink(path):
        raise InputError(f"--from {folder}: not a folder; give the folder `envbuilder doctor "
                         f"--record DIR` wrote on the host to check")
    base = path / "BASE"  # doctor --record writes none; a hand-made one names a sibling folder
    if os.path.lexists(base):
        from envbuilder.core.readfile import read_text_capped

        name = read_text_capped(base, "--from's BASE file", limit=4096, follow_links=False).strip()
        if not name or "/" in name or name in (".", ".."):
            raise InputError(f"--from {folder}: its BASE file must name a sibling folder "
                             f"(got {name[:80]!r}); remove it, or give the folder doctor --record wrote")
    probe = RecordedProbe(path)
    if probe._find("env.json") is None:  # every recording holds the variables the checks read
        raise InputError(f"--from {folder}: no env.json in it, so not a folder `envbuilder "
                         f"doctor --record DIR` wrote; give such a folder")
    return probe


def smoke_proof(image: str, *, key: str | None = None, nproc: int | None = None,
                probe: Any = None) -> Check:
    """doctor --image: the host the image's smoke attestation was proven on (its registry,
    verified with ``key``) against this host, or the recorded one ``probe`` replays
    (run.sign.proof_check)."""
    from envbuilder.diagnose.doctor import Check, inventory
    from envbuilder.errors import OperationError
    from envbuilder.run.registry import parse_reference
    from envbuilder.run.sign import proof_check, smoke_attestation

    if parse_reference(image).registry == "registry-1.docker.io" and "@" not in image:
        return Check("smoke-proof", "skip", None, "a local image name: the smoke attestation is "
                     "read from a registry (give REGISTRY/REPO:TAG or @DIGEST)", "")
    try:
        pred = smoke_attestation(image, key)
    except (InputError, OperationError) as e:
        return Check("smoke-proof", "skip", None, f"no smoke attestation read: {e}", "")
    return proof_check(pred, inventory(probe), verified=key is not None, nproc=nproc)


def is_sif(image: str) -> bool:
    """``image`` names an Apptainer SIF file (verify and smoke run it with apptainer)."""
    from envbuilder.run.apptainer import is_sif as _is_sif

    return _is_sif(image)


def verify_sif(sif: str, *, key: str | None = None, matrix_dir: str | Path | None = None,
               apptainer: str | None = None) -> SifCheck:
    """``envbuilder verify X.sif [--key PUB]``: the verification payload run in the SIF against
    its labels (apptainer exec), the image digest it came from (its label), and with ``key``
    its attestation (``X.sif.att.json``: signed by the key, naming this file, that digest and
    config). A run.apptainer.SifCheck."""
    from envbuilder.run.apptainer import apptainer_command, check_sif_file
    from envbuilder.run.sign import check_sif

    cmd = apptainer_command(apptainer)
    m = load_matrix(matrix_dir)
    return check_sif_file(cmd, Path(sif).absolute(), key=key, matrix=m,
                          attest_check=lambda path, pub, labels: check_sif(path, pub, labels))


def verify_image(image: str, *, matrix_dir: str | Path | None = None,
                 client: DockerClient | None = None) -> VerifyReport:
    """Run the verification payload in ``image`` and compare with its labels (envbuilder verify)."""
    from envbuilder.core import validate
    from envbuilder.run.engine import connect, image_labels as _labels
    from envbuilder.run.verify import verify_image_labels

    validate.image_ref(image, "IMAGE")
    c = client or connect()
    m = load_matrix(matrix_dir)
    return verify_image_labels(c, image, _labels(c, image), m)


def image_labels(image: str, client: DockerClient | None = None) -> Mapping[str, str]:
    """The labels of a local image (docker SDK), for doctor --image."""
    from envbuilder.run.engine import connect, image_labels as _labels

    return _labels(client or connect(), image)


def check_signed(image: str, key: str, require: Sequence[str] = ()) -> CheckReport:
    """``envbuilder verify IMAGE --key PUB``: the signature and the four attestations of
    ``image``'s digest, verified from its registry with cosign (no layer pulled), and what the
    smoke attestation says the digest was proven to do (run.sign.check_image)."""
    from envbuilder.core import validate
    from envbuilder.run.sign import check_image

    validate.image_ref(image, "IMAGE")
    return check_image(image, key, require=require)


def verify_matrix(*, matrix_dir: str | Path | None = None, pypi: str = "https://pypi.org/simple",
                  torch_index: str | None = None,
                  progress: Callable[[str], None] | None = None) -> MatrixVerifyReport:
    """Check the matrix's torch and component facts against the package indexes it can
    reach (matrix verify)."""
    from envbuilder.knowledge.indexcheck import verify_matrix as _verify

    return _verify(load_matrix(matrix_dir), pypi=pypi, torch_index=torch_index,
                   progress=progress)


def write_verify_overlay(rep: MatrixVerifyReport, dest: str | Path, *,
                         matrix_dir: str | Path | None = None) -> list[str]:
    """matrix verify --write-overlay DIR: the report's new releases as a matrix overlay."""
    from envbuilder.knowledge.overlay import write_overlay

    return write_overlay(rep, load_matrix(matrix_dir), dest)


def refresh_matrix(*, matrix_dir: str | Path | None = None, sources: Sequence[str] | None = None,
                   replay: str | Path | None = None, pypi: str = "https://pypi.org/simple",
                   component_versions: Sequence[str] | None = None, record: str | Path | None = None,
                   progress: Callable[[str], None] | None = None) -> RefreshReport:
    """Read the matrix's facts again from the sources that publish them (matrix refresh):
    ``sources`` names some of them (all by default), ``replay`` a folder of recorded responses
    read instead of the network, ``component_versions`` the component releases whose sources
    are read (``deepspeed==0.18.9``); ``record`` a new folder where every response read is
    kept (what ``replay`` reads)."""
    from envbuilder.core import validate
    from envbuilder.knowledge.refresh import SOURCES, Fetch, Recorder, Replay, refresh

    validate.url(pypi, "--pypi-index-url")
    versions: dict[str, list[str]] = {}
    for item in component_versions or ():
        name, sep, v = item.partition("==")
        if not sep or not name or not v:
            raise InputError(f"--component-version {item!r}: write NAME==VERSION, e.g. deepspeed==0.18.9")
        versions.setdefault(name, []).append(v)
    fetch: Fetch = Replay(replay) if replay is not None else Fetch()
    recorder = Recorder(fetch) if record is not None else None
    rep = refresh(load_matrix(matrix_dir), sources=list(sources or SOURCES), fetch=recorder or fetch,
                  pypi=pypi, component_versions=versions, progress=progress, asked=list(sources or ()))
    if recorder is not None and record is not None:
        from envbuilder._fs import write_tree

        write_tree(record, recorder.files(rep.read), group="recording", step="matrix refresh --record",
                   option="--record")
    return rep


def write_refresh_overlay(rep: RefreshReport, dest: str | Path, *,
                          matrix_dir: str | Path | None = None) -> list[str]:
    """matrix refresh --write-overlay DIR: the differing facts as a matrix overlay to review."""
    from envbuilder.knowledge.refresh import write_overlay

    return write_overlay(rep, load_matrix(matrix_dir), dest)


def show_axis(axis: str, *, matrix_dir: str | Path | None = None,
              filters: Mapping[str, str | None] | None = None) -> AxisTable:
    """One axis of the matrix with the source of every row (matrix show); ``filters``
    (``{"torch": "2.6", "cuda": "12.4"}``) keep the rows they match."""
    from envbuilder.knowledge.show import filter_rows, show_axis as _show

    t = _show(load_matrix(matrix_dir), axis)
    given = {k: v for k, v in (filters or {}).items() if v}
    return filter_rows(t, given) if given else t


def safe_text(value: Any) -> str:
    """User text fit for a terminal (no escape sequences)."""
    from envbuilder._safety import terminal_safe

    return terminal_safe(value)


def apptainer_available() -> bool:
    from envbuilder.run.apptainer import find_apptainer

    return find_apptainer() is not None
