"""Reproducible builds without an engine (issue 42): what BuildKit is told and how its progress
is read (recorded real output), the build's SOURCE_DATE_EPOCH, the rendered files (every stage
dated, apt state removed, a locked render's images by digest and apt packages by version, a
snapshot archive's sources rewritten by real sed and put back), rebuild's layer and config
comparison on real gzip'd tars, the lock's moved pins, the SIF parser on what is not a SIF.

The engine tests (tests/test_reproducible_engine.py) build for real."""

from __future__ import annotations

import gzip
import json
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from envbuilder.api import make_spec, resolve_target
from envbuilder.assemble import folder_files
from envbuilder.components.os_packages import APT, APT_STATE, Snapshot
from envbuilder.errors import InputError
from envbuilder.lock import model
from envbuilder.lock.inputs import lock_inputs
from envbuilder.lock.system import AptPin, SystemPins, moved
from envbuilder.run import buildkit
from envbuilder.run.apptainer import rootfs_digest
from envbuilder.run.build import BuildOptions, choose_builder, source_date_epoch
from envbuilder.run.rebuild import config_diff, diff_entries, layer_entries

DATA = Path(__file__).parent / "data" / "buildx"
TARGET = "cu121-torch2.1-py310"  # its lock's entries as tests/test_lock_model.py writes them
HASH = "    --hash=sha256:" + "a" * 64
BODY = "".join(f"{line} \\\n{HASH}\n" for line in (
    "numpy==1.26.4", "nvidia-nccl-cu12==2.18.1", "torch==2.1.2+cu121"))
DIGEST_A, DIGEST_B = "sha256:" + "1" * 64, "sha256:" + "2" * 64


# -- BuildKit: the command and its progress ----------------------------------------------------

def test_credentials_travel_by_name_never_on_the_command_line(tmp_path):
    argv = buildkit.build_argv("docker", tmp_path, output=buildkit.output_option(image="envbuilder:x"),
                               metadata=tmp_path / "m.json",
                               build_args={"PIP_INDEX_URL": "https://u:secret@idx/simple",
                                           "SOURCE_DATE_EPOCH": "100"},
                               labels={"io.envbuilder.base-digest": DIGEST_A}, nocache=True)
    assert "secret" not in " ".join(argv)
    assert argv[argv.index("--build-arg") + 1] == "PIP_INDEX_URL"  # the value comes from the env
    assert {"--provenance=false", "--sbom=false", "--no-cache"} <= set(argv)
    out = argv[argv.index("--output") + 1]
    assert out.startswith("type=oci,dest=-,name=envbuilder:x,")  # streamed into docker load
    assert "rewrite-timestamp=true" in out and "oci-mediatypes=true" in out
    env = buildkit.cli_env(type("C", (), {"_envbuilder_where": "unix:///x.sock"})(),
                           {"PIP_INDEX_URL": "https://u:secret@idx/simple"})
    assert env["DOCKER_HOST"] == "unix:///x.sock" and env["PIP_INDEX_URL"].endswith("idx/simple")


def test_no_reproducible_builds_straight_into_the_engine_and_says_so(tmp_path):
    out = buildkit.output_option(image="envbuilder:x", rewrite=False)
    assert out.startswith("type=image,name=envbuilder:x,") and "rewrite-timestamp" not in out
    with pytest.raises(ValueError):  # not into a tar: the comparison a rebuild makes needs rewriting
        buildkit.output_option(oci=tmp_path / "x.tar", rewrite=False)
    assert BuildOptions(reproducible=False).reproducible is False
    from envbuilder.cli import app
    from typer.testing import CliRunner

    helptext = CliRunner().invoke(app, ["build", "--help"], env={"COLUMNS": "300"}).output
    assert "--no-reproducible" in helptext


def _feed(name: str, **kw) -> buildkit.ProgressLog:
    log = buildkit.ProgressLog(**kw)
    for line in (DATA / name).read_text().splitlines():
        log.feed(line)
    return log


def test_the_recorded_progress_of_a_build_gives_its_steps_and_cached_ones():
    steps: list[tuple[int, int, str]] = []
    log = _feed("rawjson-ok.txt", on_step=lambda i, n, t: steps.append((i, n, t)), on_line=None)
    assert log.error is None
    assert log.steps == 4  # builder 2 steps, runtime 2 (its FROM is the builder's, one vertex)
    assert [t for _, _, t in steps] == ["FROM docker.io/envbuilder-test/debian:12@sha256:184e53df1c60f38564789aea5a7fd2a925358d57c8b2e2f65effc516145e83ef",
                                       "RUN echo built > /b", "COPY --from=builder /b /b"]
    assert [i for i, _, _ in steps] == [1, 2, 3]


def test_the_recorded_progress_of_a_failed_build_names_the_step_and_its_output():
    lines: list[str] = []
    log = _feed("rawjson-failed.txt", on_step=None, on_line=lines.append)
    assert "about to fail" in lines
    err = log.failure(1)
    assert err.exit_code == 1 and err.step == "build"
    assert str(err).startswith("the build failed at [runtime 3/3] RUN echo about to fail; ls /nonexistent")
    assert "exit code: 2" in str(err)
    assert "about to fail" in err.details  # the failing step's own lines


def test_the_legacy_builder_is_chosen_when_asked_and_says_why():
    # no engine is asked: legacy needs no probe
    use, why = choose_builder(None, "legacy")  # type: ignore[arg-type]
    assert use is False and "legacy builder dates every file at build time" in why
    with pytest.raises(InputError, match="--builder 'bk' is not one of auto, buildkit, legacy"):
        BuildOptions(builder="bk")


# -- SOURCE_DATE_EPOCH ---------------------------------------------------------------------------

def test_a_build_is_dated_by_its_lock_else_the_stack_else_the_environment(monkeypatch):
    stack = resolve_target(TARGET)
    spec = make_spec(TARGET)
    plan, files = folder_files(spec, stack)
    assert f"ARG SOURCE_DATE_EPOCH={plan.source_date_epoch}\n" in files["Dockerfile"]
    assert plan.source_date_epoch > 1_600_000_000  # the stack's newest release (the matrix's date)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert source_date_epoch(plan, locked=False) == 1700000000  # the convention's variable
    assert source_date_epoch(plan, locked=True) == plan.source_date_epoch  # a lock's date wins
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(InputError, match="SOURCE_DATE_EPOCH='yesterday' is not a number"):
        source_date_epoch(plan, locked=False)


def test_every_stage_declares_the_date_and_drops_the_apt_state_in_the_install_step():
    stack = resolve_target(TARGET)
    _, files = folder_files(make_spec(TARGET), stack)
    docker = files["Dockerfile"]
    stages = docker.count("\nFROM ")
    assert docker.count("\nARG SOURCE_DATE_EPOCH\n") == stages  # pip, CPython and useradd see it
    for path in APT_STATE:  # the six files two builds differed in, and the lists
        assert docker.count(path) == docker.count("apt-get install")
    assert 'export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-' in files["envbuilder.def"]


# -- a locked render: images by digest, apt packages by version ----------------------------------

def _pins(builder="nvidia/cuda:12.1.1-devel-ubuntu22.04", runtime="nvidia/cuda:12.1.1-base-ubuntu22.04"):
    return SystemPins(resolved_at="2026-12-05T08:40:12Z",
                      images={"builder": f"{builder}@{DIGEST_A}", "runtime": f"{runtime}@{DIGEST_B}"},
                      image_source={"builder": "registry", "runtime": "registry"},
                      apt={"builder": (AptPin("ca-certificates", "20240203~22.04.1"),),
                           "runtime": (AptPin("libpython3.10-stdlib", "3.10.12-1~22.04.7"),
                                       AptPin("python3.10", "3.10.12-1~22.04.7"))})


def _locked(stack, system) -> str:
    text = model.dump(stack, "uv pip compile -", lock_inputs(stack), "0.5.0", BODY, epoch=1717200000)
    return model.with_pins(text, epoch=1717200000, system=system)


def test_a_locked_render_names_every_image_by_digest_and_pins_every_apt_package():
    stack = resolve_target(TARGET)
    spec = make_spec(TARGET)
    plan0, _ = folder_files(spec, stack)
    plan, files = folder_files(spec, stack, lock_text=_locked(stack, _pins(plan0.builder_image, plan0.runtime_image)))
    docker = files["Dockerfile"]
    assert f"ARG BUILDER_IMAGE={plan0.builder_image}@{DIGEST_A}\n" in docker
    assert f"ARG RUNTIME_IMAGE={plan0.runtime_image}@{DIGEST_B}\n" in docker
    assert "ARG SOURCE_DATE_EPOCH=1717200000\n" in docker  # the lock's date
    # every FROM is an image by digest (its ARG) or an earlier stage
    names = {ln.split()[-1] for ln in docker.splitlines() if ln.startswith("FROM ")}
    for ln in docker.splitlines():
        if ln.startswith("FROM "):
            src = ln.split()[-3] if " AS " in ln else ln.split()[1]
            assert src in ("${BUILDER_IMAGE}", "${RUNTIME_IMAGE}") or src in names, ln
    # the lock's closure, every package name=version (quoted for the shell), then what it names
    assert ("apt-get install -y --no-install-recommends 'libpython3.10-stdlib=3.10.12-1~22.04.7' "
            "'python3.10=3.10.12-1~22.04.7' ibverbs-providers") in docker
    assert "'ca-certificates=20240203~22.04.1' python3.10 python3.10-venv" in docker
    assert plan.labels["org.opencontainers.image.base.digest"] == DIGEST_B
    assert "ca-certificates=20240203~22.04.1" in files["envbuilder.def"]  # both views


def test_a_lock_pinned_for_another_base_image_is_refused_naming_both():
    stack = resolve_target(TARGET)
    plan0, _ = folder_files(make_spec(TARGET), stack)
    with pytest.raises(InputError) as e:
        folder_files(make_spec(TARGET), stack,
                     lock_text=_locked(stack, _pins(builder=plan0.builder_image, runtime="debian:12")))
    assert "pins the runtime image debian:12 by digest" in str(e.value)
    assert "lock again with --system" in str(e.value) and e.value.exit_code == 2


def test_lock_check_names_a_moved_base_and_a_moved_apt_version():
    pins = _pins()
    assert moved(pins, {"builder": pins.images["builder"], "runtime": pins.images["runtime"]},
                 {"runtime": {"python3.10": "3.10.12-1~22.04.7"}}) == []
    out = moved(pins, {"builder": pins.images["builder"],
                       "runtime": f"nvidia/cuda:12.1.1-base-ubuntu22.04@{DIGEST_A}"},
                {"runtime": {"python3.10": "3.10.12-1~22.04.8", "libpython3.10-stdlib": None}})
    assert out[0] == (f"the runtime image nvidia/cuda:12.1.1-base-ubuntu22.04 moved: the lock pins "
                      f"{DIGEST_B}, it is now {DIGEST_A}")
    assert any(o.startswith("apt runtime: libpython3.10-stdlib=3.10.12-1~22.04.7 is no longer on the mirror") for o in out)
    assert any(o.startswith("apt runtime: python3.10 3.10.12-1~22.04.7 -> 3.10.12-1~22.04.8") for o in out)


# -- --apt-snapshot: the sources rewritten for the step and put back (real bash and sed) ----------

SOURCES = {
    "sources.list.d/debian.sources": "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
                                     "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
                                     "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n"
                                     "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
    "sources.list": "deb http://archive.ubuntu.com/ubuntu/ jammy main restricted\n"
                    "deb [signed-by=/usr/share/keyrings/x.gpg] https://security.ubuntu.com/ubuntu jammy-security main\n",
}


def test_a_snapshot_archive_is_read_for_the_step_and_the_sources_are_put_back(tmp_path):
    root = tmp_path / "etc-apt"
    for rel, text in SOURCES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    snap = Snapshot("http://snapshot.debian.org/archive", "20241205T000000Z")

    def run(lines: list[str]) -> None:
        script = " && ".join(lines).replace("/etc/apt", str(root))
        subprocess.run(["bash", "-c", script], check=True)

    run(snap.before())
    deb822 = (root / "sources.list.d/debian.sources").read_text()
    assert "URIs: http://snapshot.debian.org/archive/debian/20241205T000000Z/\n" in deb822
    assert "URIs: http://snapshot.debian.org/archive/debian-security/20241205T000000Z/\n" in deb822
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in deb822  # untouched
    one_line = (root / "sources.list").read_text()
    assert "deb http://snapshot.debian.org/archive/ubuntu/20241205T000000Z/ jammy main restricted\n" in one_line
    assert "deb [signed-by=/usr/share/keyrings/x.gpg] http://snapshot.debian.org/archive/ubuntu/20241205T000000Z/ jammy-security" in one_line
    run(snap.after())
    for rel, text in SOURCES.items():
        assert (root / rel).read_text() == text  # the image keeps the base's own sources
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == ["debian.sources", "sources.list"]
    install = APT.install(["python3"], snapshot=snap)
    assert install[1] == "apt-get -o Acquire::Check-Valid-Until=false update"  # snapshots expire


@pytest.mark.parametrize("url", ["http://x/a b", "http://x/$(id)", "ftp://x", "http://x/'"])
def test_a_snapshot_url_that_could_inject_a_command_is_refused(url):
    with pytest.raises(InputError, match="--apt-snapshot"):
        make_spec(TARGET, apt_snapshot=url)


# -- rebuild: layers and configs compared --------------------------------------------------------

def _layer(files: dict[str, tuple[bytes, int]]) -> io.BytesIO:
    """A gzip'd layer tar of {path: (content, mtime)}."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        for path, (data, mtime) in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            t.addfile(info, io.BytesIO(data))
    return io.BytesIO(gzip.compress(raw.getvalue(), mtime=0))


def test_two_layers_are_compared_file_by_file_with_path_size_and_digest():
    a = layer_entries(_layer({"etc/shadow": (b"envbuilder:!:19000::::::\n", 100),
                              "opt/venv/x.py": (b"print(1)\n", 100), "var/log/dpkg.log": (b"x", 100)}))
    b = layer_entries(_layer({"etc/shadow": (b"envbuilder:!:19001::::::\n", 100),
                              "opt/venv/x.py": (b"print(1)\n", 101)}))
    d = {f.path: f for f in diff_entries(a, b)}
    assert set(d) == {"etc/shadow", "opt/venv/x.py", "var/log/dpkg.log"}
    assert d["etc/shadow"].differs == ("content",)
    assert d["etc/shadow"].original.sha256 != d["etc/shadow"].rebuilt.sha256
    assert d["etc/shadow"].original.size == d["etc/shadow"].rebuilt.size == 25
    assert d["opt/venv/x.py"].differs == ("mtime",)
    assert d["var/log/dpkg.log"].differs == ("only in the original",)
    line = d["etc/shadow"].line()
    assert line.startswith("etc/shadow: content (original 25 B sha256:") and "rebuilt 25 B sha256:" in line
    assert diff_entries(a, a) == []


def test_two_configs_are_compared_field_by_field():
    a = {"created": "2024-06-01T00:00:00Z", "config": {"Labels": {"x": "1", "y": "2"}}}
    b = {"created": "2024-06-01T00:00:01Z", "config": {"Labels": {"x": "1", "y": "3"}}}
    assert config_diff(a, b) == ['config.Labels.y: "2" -> "3"',
                                 'created: "2024-06-01T00:00:00Z" -> "2024-06-01T00:00:01Z"']


def test_what_is_not_a_sif_has_no_root_file_system_digest(tmp_path):
    p = tmp_path / "x.sif"
    p.write_bytes(b"#!/usr/bin/env run-singularity\n" + b"\0" * 200)
    assert rootfs_digest(p) is None
    assert rootfs_digest(tmp_path / "missing.sif") is None


def test_the_provenance_records_what_a_rebuild_needs_and_fits_its_schema():
    from envbuilder.run.rebuild import _inputs, spec_of
    from envbuilder.run.sign import BY_NAME, check_predicate, provenance_predicate

    stack = resolve_target(TARGET)
    rebuild = {"target": TARGET, "pins": {"python": "3.10"}, "options": {"base_image": "debian:12", "cuda_arch": ["8.0"]},
               "requirements": ["six==1.16.0"], "wheelhouse": False, "lock": "# a lock\n",
               "source_date_epoch": 1717200000,
               "images": {"BUILDER_IMAGE": f"debian@{DIGEST_A}", "RUNTIME_IMAGE": f"debian@{DIGEST_A}"},
               "labels": {"io.envbuilder.base-digest": f"debian@{DIGEST_A}"}}
    pred = provenance_predicate(
        target=TARGET, stack=stack, build_args={"PIP_INDEX_URL": "https://u:tok@idx/simple"},
        base_image="debian:12", base_digest=f"debian@{DIGEST_A}", builder_image="debian:12",
        builder_digest=f"debian@{DIGEST_A}", lock_digest=None, push="127.0.0.1:5000/x", seconds=1.0,
        image_id=DIGEST_B, reproducible={"builder": "buildkit", "reproducible": True, "why": "BuildKit",
                                         "digest": DIGEST_B, "source_date_epoch": 1717200000},
        rebuild=rebuild)
    assert check_predicate(BY_NAME["provenance"], pred) is None
    assert "tok" not in str(pred["buildDefinition"]["externalParameters"]["build_args"])
    rb = _inputs("x@sha256:...", pred, stack.matrix.digest)
    spec = spec_of(rb)
    assert spec.target == TARGET and spec.base_image == "debian:12" and spec.cuda_arch == ("8.0",)
    assert spec.requirements == ("six==1.16.0",) and str(spec.pins.python) == "3.10"
    # another matrix, another envbuilder or a legacy build: refused before any work (exit 2)
    with pytest.raises(InputError, match="was built against the matrix"):
        _inputs("x", pred, "sha256:other")
    legacy = json.loads(json.dumps(pred))
    legacy["buildDefinition"]["internalParameters"]["reproducible"].update(
        builder="legacy", reproducible=False, why="the legacy builder dates every file")
    with pytest.raises(InputError, match="was not built reproducibly .the legacy builder"):
        _inputs("x", legacy, stack.matrix.digest)
    old = json.loads(json.dumps(pred))
    old["buildDefinition"]["internalParameters"]["envbuilder_version"] = "0.0.9"
    with pytest.raises(InputError, match="was built by envbuilder 0.0.9"):
        _inputs("x", old, stack.matrix.digest)


def test_the_recorded_pins_and_options_make_the_same_spec_again():
    """What build records (run.rebuild.pin_record and the options, through JSON) gives the
    cascade the same pins and options back: versions, a component's ops, --with, layouts."""
    from envbuilder.core.spec import make_spec
    from envbuilder.run.rebuild import pin_record, spec_of

    given = {"python": "3.10", "deepspeed": "0.16", "ds_ops": "fused_adam,cpu_adam", "with_": ("horovod",),
             "fabric": "none", "layouts": ("2x4",), "cuda_arch": ("8.0",), "apt_snapshot": "http://snapshot.debian.org/archive"}
    spec = make_spec("cu121", given=given)
    recorded = json.loads(json.dumps({"target": spec.target, "pins": pin_record(spec.pins),
                                      "options": {"layouts": list(spec.layouts), "cuda_arch": list(spec.cuda_arch),
                                                  "apt_snapshot": spec.apt_snapshot}}))
    assert "origin" not in recorded["pins"] and recorded["pins"]["deepspeed"] == "0.16"
    again = spec_of(recorded)
    assert again.pins == spec.pins and again.layouts == spec.layouts == ((2, 4),)
    assert (again.cuda_arch, again.apt_snapshot) == (spec.cuda_arch, spec.apt_snapshot)
    with pytest.raises(InputError, match="does not know"):
        spec_of({**recorded, "options": {"no_such_option": 1}})


def test_a_project_targets_record_makes_the_same_spec_names_and_dockerfile_again(tmp_path):
    """A project target built with a site's indexes (issue 46) is recorded by its name, its
    PyTorch index, index strategy, registry and repository (run.build.spec_record), and
    spec_of gives them back: the same image names, io.envbuilder.target label and Dockerfile.
    An older project file's whole-repository registry comes back as registry + repository."""
    from envbuilder.api import make_spec
    from envbuilder.assemble import as_built, folder_files
    from envbuilder.core import naming
    from envbuilder.core.matrix import load_matrix
    from envbuilder.core.project import load_project
    from envbuilder.run.build import spec_record
    from envbuilder.run.rebuild import spec_of

    matrix = load_matrix()

    def dockerfile(s):
        return folder_files(s, as_built(s, s.resolve(matrix)))[1]["Dockerfile"]

    root = tmp_path / "vision"
    root.mkdir()
    (root / "envbuilder.toml").write_text(
        'registry = "127.0.0.1:5077/ml"\nrepository = "detect"\n'
        'torch_index_url = "https://mirror.example/whl/{variant}/"\nindex_strategy = "unsafe-first-match"\n'
        '[[targets]]\nname = "train"\ntarget = "cpu"\n')
    spec = make_spec("train", project=load_project(root / "envbuilder.toml"))
    tag = spec.resolve(matrix).tag
    recorded = json.loads(json.dumps(spec_record(spec, naming.image_names(spec, tag))))
    assert recorded["name"] == "train" and recorded["options"]["index_strategy"] == "unsafe-first-match"
    # the record is what the signed provenance carries: its schema (no other key) accepts it
    jsonschema = pytest.importorskip("jsonschema")
    from envbuilder.run.sign import BY_NAME, schema as predicate_schema

    rebuild_schema = (predicate_schema(BY_NAME["provenance"])["properties"]["buildDefinition"]
                      ["properties"]["externalParameters"]["properties"]["rebuild"])
    jsonschema.validate({**recorded, "source_date_epoch": 0}, rebuild_schema)
    again = spec_of(recorded)
    assert (again.name, again.from_project, again.torch_index_url, again.index_strategy) == (
        "train", True, spec.torch_index_url, "unsafe-first-match")
    assert naming.image_names(again, tag).ref == naming.image_names(spec, tag).ref == (
        f"127.0.0.1:5077/ml/detect:train-{tag}")
    assert 'io.envbuilder.target="train"' in dockerfile(again)
    assert "mirror.example/whl/cpu" in dockerfile(again)
    assert dockerfile(again) == dockerfile(spec)
    (root / "envbuilder.toml").write_text('registry = "127.0.0.1:5077/ml/old"\n'
                                         '[[targets]]\nname = "train"\ntarget = "cpu"\n')
    legacy = make_spec("train", project=load_project(root / "envbuilder.toml"))
    assert naming.image_names(legacy, tag).legacy
    again = spec_of(json.loads(json.dumps(spec_record(legacy, naming.image_names(legacy, tag)))))
    assert naming.image_names(again, tag).ref == naming.image_names(legacy, tag).ref == (
        f"127.0.0.1:5077/ml/old:train-{tag}")
    with pytest.raises(InputError, match="target name"):
        spec_of({**recorded, "name": "train; rm -rf /"})


def test_a_rebuild_report_says_reproduced_or_names_the_layer_and_the_first_file():
    from envbuilder.run.rebuild import Entry, FileDiff, FirstLayer, RebuildReport

    ok = RebuildReport(image="r/x@" + DIGEST_A, digest=DIGEST_A, rebuilt_digest=DIGEST_A, reproduced=True)
    assert ok.summary() == f"reproduced: r/x@{DIGEST_A} is {DIGEST_A}, bit for bit"
    e1 = Entry("etc/shadow", "file", 25, "sha256:" + "a" * 64, 0o640, "0:42", 100)
    e2 = Entry("etc/shadow", "file", 25, "sha256:" + "b" * 64, 0o640, "0:42", 100)
    bad = RebuildReport(image="r/x", digest=DIGEST_A, rebuilt_digest=DIGEST_B, layers=6,
                        first_layer=FirstLayer(1, DIGEST_A, DIGEST_B),
                        files=(FileDiff("etc/shadow", ("content",), e1, e2),), files_total=9)
    assert bad.summary() == (f"r/x: the rebuild is {DIGEST_B}; layer 2 of 6 is the first that differs "
                             f"(9 files): etc/shadow: content (original 25 B sha256:aaaaaaaaaaaa...; "
                             f"rebuilt 25 B sha256:bbbbbbbbbbbb...)")
    assert bad.to_dict()["files"][0]["original"]["sha256"] == "sha256:" + "a" * 64
    assert bad.to_dict()["first_layer"] == {"index": 1, "original": DIGEST_A, "rebuilt": DIGEST_B}
    assert ok.to_dict()["first_layer"] is None and ok.to_dict()["config"] == []


def test_a_push_from_the_containerd_image_store_names_its_digest_in_a_status_line():
    """Recorded: dockerd 28.5's push stream (containerd image store) has no aux.Digest; the
    digest is in its last status line."""
    from envbuilder.run import engine

    recorded = [
        {"status": "The push refers to repository [127.0.0.1:45999/t/deb]"},
        {"status": "Pushing", "progressDetail": {"current": 23068672, "total": 50935695},
         "id": "d3c36508889e"},
        {"status": "Pushed", "progressDetail": {}, "id": "d3c36508889e"},
        {"status": "1: digest: sha256:184e53df1c60f38564789aea5a7fd2a925358d57c8b2e2f65effc516145e83ef size: 406"}]

    class Api:
        def push(self, *a, **kw):
            return iter(recorded)

    client = type("C", (), {"api": Api()})()
    assert engine.push(client, "127.0.0.1:45999/t/deb", "1") == \
        "sha256:184e53df1c60f38564789aea5a7fd2a925358d57c8b2e2f65effc516145e83ef"


def test_the_docker_cli_probes_run_through_the_one_child_runner(monkeypatch):
    """buildx version/inspect and the probe build: the exit status and both streams, the engine
    named by DOCKER_HOST; a command past its deadline is stopped and says so; one that cannot
    start is a failure, not a traceback."""
    import types

    from envbuilder.run import buildkit

    client = types.SimpleNamespace(_envbuilder_where="unix:///run/envbuilder-test.sock")
    code, out = buildkit._quick(["sh", "-c", 'echo "$DOCKER_HOST $SOURCE_DATE_EPOCH"; echo err >&2; exit 3'],
                                client, {"SOURCE_DATE_EPOCH": "7"})
    assert (code, out) == (3, "unix:///run/envbuilder-test.sock 7\nerr\n")
    assert buildkit._quick(["/nonexistent/docker", "buildx"], client)[0] == 1
    monkeypatch.setattr(buildkit, "PROBE_TIMEOUT_S", 1)
    code, out = buildkit._quick(["sleep", "30"], client)
    assert code == 1 and "did not finish in 1 s" in out
