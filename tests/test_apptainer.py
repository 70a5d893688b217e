"""The Apptainer half for real: envbuilder.def built by `apptainer build`, verified and smoke-tested
in the SIF with `apptainer exec` (scripts/test-services.sh puts an `apptainer` on PATH: Debian
sid's 1.4 run in a container as an unprivileged user).

The CPU target's SIF is built once per session (offline, from the wheelhouse, as cpu_build) and
kept between runs under $ENVBUILDER_TEST_STATE/sif: envbuilder reuses a SIF whose inputs are unchanged
(its sidecar records their digest), so a warm run verifies and smoke-tests without rebuilding.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from envbuilder.errors import InputError, OperationError
from envbuilder.run.apptainer import parse_definition

CPU = "cpu-torch2.13-debian12"
SIF_SECRET = "eb-sif-s3cret-token"
SIF_INDEX = f"https://ml:{SIF_SECRET}@pypi.example.invalid/simple"


def test_parse_definition_stages_and_sections(tmp_path):
    from envbuilder.api import render_target

    render_target("cu118-hvd", tmp_path / "out")
    stages = parse_definition((tmp_path / "out" / "envbuilder.def").read_text())
    assert [s.name for s in stages] == ["builder", "runtime"]
    assert stages[0].header["From"].endswith("-devel-ubuntu22.04")
    assert stages[1].header["From"].endswith("-base-ubuntu22.04")  # the cuda-base flavour
    assert stages[1].section("files")[0][0] == "from builder"
    assert "horovod" in stages[0].section("post")[0][1]
    # Apptainer binds its own /tmp during %post: nothing is staged there
    assert "/tmp/envbuilder" not in (tmp_path / "out" / "envbuilder.def").read_text()


def test_parse_definition_rejects_garbage():
    with pytest.raises(InputError):
        parse_definition("%post\n echo hi\n")
    with pytest.raises(InputError):
        parse_definition("Bootstrap: library\nFrom: x\n")


def test_localize_bootstraps_local_bases_and_says_so(tmp_path):
    from envbuilder.api import render_target
    from envbuilder.run.apptainer import localize

    render_target(CPU, tmp_path / "out", base_image="local/base:1")
    text = (tmp_path / "out" / "envbuilder.def").read_text()
    out = localize(text, {"local/base:1": ("docker-archive", "/w/base-0.tar", "a docker save of local/base:1")})
    stages = parse_definition(out)
    assert [s.header["Bootstrap"] for s in stages] == ["docker-archive", "docker-archive"]
    assert [s.header["From"] for s in stages] == ["/w/base-0.tar", "/w/base-0.tar"]
    assert "# Base of the builder stage: Bootstrap: docker-archive, a docker save of local/base:1." in out
    assert localize(text, {}) == text  # a registry base stays Bootstrap: docker


def test_sif_inputs_are_what_the_definition_copies_in_and_not_where_the_checkout_is(tmp_path):
    """The SIF kept between runs is reused when its inputs are unchanged: a file %files copies
    in changes them, stack.json (which names the matrix's folder, a path that differs between
    checkouts, and is not in the SIF) does not."""
    import shutil

    from envbuilder.api import render_target
    from envbuilder.run.apptainer import inputs_digest, read_paths

    out = tmp_path / "out"
    render_target(CPU, out)
    text = (out / "envbuilder.def").read_text()
    paths = read_paths(text)
    assert {"files/entrypoint.sh", "smoke", "requirements/torch.txt"} <= set(paths)
    assert "/opt/venv" not in paths and "stack.json" not in paths  # %files from builder; not copied
    ids = {"local/base:1": "sha256:" + "a" * 64}
    first = inputs_digest(out, text, ids)
    other = tmp_path / "elsewhere" / "out"
    shutil.copytree(out, other)
    stack = other / "stack.json"
    stack.write_text(stack.read_text().replace('"path": "', '"path": "/another/checkout'))
    (other / "jobs" / "note.txt").write_text("not read by the definition\n")
    assert inputs_digest(other, text, ids) == first
    with open(other / "smoke" / "ddp_smoke.py", "a") as f:  # a file the SIF holds
        f.write("# changed\n")
    assert inputs_digest(other, text, ids) != first
    assert inputs_digest(out, text, {"local/base:1": "sha256:" + "b" * 64}) != first
    assert inputs_digest(out, text + "\n# another definition\n", ids) != first


def test_runtime_option_refuses_bad_input(monkeypatch, tmp_path):
    """BuildOptions are checked when made (exit 2 naming the option)."""
    from envbuilder.run.build import BuildOptions

    with pytest.raises(InputError, match="--runtime 'podman'"):
        BuildOptions(runtime="podman")
    with pytest.raises(InputError, match="--push publishes the Docker image"):
        BuildOptions(runtime="apptainer", push="127.0.0.1:5000/x")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ENVBUILDER_APPTAINER", raising=False)
    with pytest.raises(InputError, match="needs apptainer"):
        BuildOptions(runtime="apptainer")
    with pytest.raises(InputError, match="is not an executable"):
        BuildOptions(runtime="both", apptainer="no-such-apptainer --flag")


# -- the real thing -------------------------------------------------------------------------

def _apptainer() -> list[str]:
    from envbuilder.run.apptainer import apptainer_command

    try:
        return apptainer_command()
    except InputError as e:
        if os.environ.get("ENVBUILDER_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{e} (scripts/test-services.sh installs the apptainer wrapper)")
        pytest.skip(str(e))


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


@pytest.fixture(scope="session")
def cpu_sif(docker_client, base_image, wheelhouse, ca_bundle, tmp_path_factory):
    """envbuilder build CPU --runtime apptainer (offline, from the wheelhouse, the local base as
    a docker save archive): the report, once per session; the SIF kept between runs."""
    from envbuilder.api import make_spec
    from envbuilder.run.build import BuildOptions, build_target

    _apptainer()
    # kept between runs in the suite's state folder (where the engine's images live too; a
    # folder the apptainer wrapper's unprivileged user can reach, unlike /root/.cache)
    state = os.environ.get("ENVBUILDER_TEST_STATE")
    where = Path(state) / "sif" if state else tmp_path_factory.mktemp("sif")
    where.mkdir(parents=True, exist_ok=True)
    ctx = tmp_path_factory.mktemp("sif-context") / "ctx"
    opts = BuildOptions(wheelhouse=wheelhouse, ca_cert=ca_bundle, context=ctx, runtime="apptainer",
                        sif=where / f"{CPU}.sif")
    # an index URL with credentials travels as a build argument (the bound file), as a team's
    # private index would; the wheelhouse build installs --no-index, so it is never contacted
    spec = make_spec(CPU, base_image=base_image, extra_index_urls=[SIF_INDEX])
    return build_target(spec, opts, client=docker_client)


@pytest.mark.docker
@pytest.mark.slow
def test_sif_builds_verifies_and_passes_the_12_rank_smoke(cpu_sif):
    r = cpu_sif
    a = r.apptainer
    assert r.ok and r.steps["apptainer"] == "ok"
    assert r.steps["build"] == r.steps["smoke"] == "skipped"  # no Docker image for --runtime apptainer
    assert a["steps"]["build"] in ("ok", "cached") and a["steps"]["verify"] == a["steps"]["smoke"] == "ok"
    sif = Path(a["sif"])
    assert a["sha256"] == _sha(sif) and a["size_bytes"] == sif.stat().st_size > 100 << 20
    assert a["bases"] == {"envbuilder-test/debian:12": "docker-archive"}
    assert a["verify"]["ok"] and a["verify"]["facts"]["torch"]["version"].startswith("2.13.0")
    assert a["verify"]["facts"]["torch"]["file"].startswith("/opt/venv/")  # the venv of the SIF
    s = a["smoke"]
    assert s["ok"] and s["world_size"] == 12 and s["backend"] in ("gloo", "auto") and not s["failed"]


@pytest.mark.docker
@pytest.mark.slow
def test_sif_inspect_shows_labels_and_the_definition_it_was_built_from(cpu_sif):
    from envbuilder.run.apptainer import sif_labels

    cmd = _apptainer()
    sif = Path(cpu_sif.apptainer["sif"])
    labels = sif_labels(cmd, sif)
    assert labels["io.envbuilder.target"] == CPU and labels["io.envbuilder.torch"] == "2.13.0"
    assert labels["org.opencontainers.image.version"] == cpu_sif.tag
    deffile = subprocess.run([*cmd, "inspect", "--deffile", str(sif)], capture_output=True, text=True,
                             cwd=sif.parent, check=True).stdout
    stages = parse_definition(deffile[deffile.find("Bootstrap:"):])  # (Apptainer keeps no comments)
    assert [s.header["Bootstrap"] for s in stages] == ["docker-archive", "docker-archive"]
    assert [s.name for s in stages] == ["builder", "runtime"]
    # the header of the definition it was built from names the base and how
    for what, line in zip(("builder", "runtime"), cpu_sif.apptainer["definition_header"]):
        assert line.startswith(f"# Base of the {what} stage: Bootstrap: docker-archive, a docker save of "
                               "the local engine's image envbuilder-test/debian:12 (sha256:")


@pytest.mark.docker
@pytest.mark.slow
def test_help_and_jobs_readme_show_the_smoke_command_that_ran(cpu_sif):
    ctx = Path(cpu_sif.context)
    ran = cpu_sif.apptainer["smoke"]["command"]
    sif = cpu_sif.apptainer["sif"]
    helps = [ln.split(": ", 1)[1] for ln in (ctx / "envbuilder.def").read_text().splitlines()
             if ln.strip().startswith("Smoke test")]
    assert helps and shlex.split(helps[0].replace("IMAGE.sif", sif))[1:] == ran[1:]
    readme = (ctx / "jobs" / "README.md").read_text()
    shown = re.search(r"smoke-test it on one node: `([^`]+)`", readme).group(1)
    assert shlex.split(shown)[1:3] == ran[1:3] and shlex.split(shown)[4:] == ran[4:]
    # run by hand (no NPROC set), that command starts as many ranks as the job that ran
    default = re.search(r'--nproc_per_node="\$\{NPROC:-(\d+)\}"', (ctx / "smoke" / "run.sh").read_text())
    assert default and int(default.group(1)) == cpu_sif.apptainer["smoke"]["world_size"] == 12


@pytest.mark.docker
@pytest.mark.slow
def test_ca_bundle_credentials_and_staging_stay_out_of_the_sif(cpu_sif):
    """The session's SIF was built with --ca-cert and an index URL with credentials (bound
    for the build as /run/envbuilder-build/build.env): neither the CA files, nor the staged
    files, nor the credential is anywhere the SIF keeps files, environment or its definition."""
    cmd = _apptainer()
    sif = cpu_sif.apptainer["sif"]
    assert "PIP_EXTRA_INDEX_URL_1" in (Path(cpu_sif.context) / "envbuilder.def").read_text()
    probe = ("ls /usr/local/share/ca-certificates/envbuilder /opt/envbuilder-build 2>&1; "
             "echo mount:; ls -A /run/envbuilder-build; echo env:; env; cat /.singularity.d/env/*; "
             "echo files:; grep -rlF \"$1\" /etc /root /opt /.singularity.d /var/lib /usr/local/share "
             "2>/dev/null; echo done")
    p = subprocess.run([*cmd, "exec", sif, "sh", "-c", probe, "probe", SIF_SECRET],
                       capture_output=True, text=True, cwd=Path(sif).parent, timeout=900)
    out = p.stdout
    assert "No such file" in out and "extra-ca" not in out and "done" in out, out[-2000:]
    assert out.split("mount:\n", 1)[1].startswith("env:\n")  # an empty mount point
    assert "PIP_EXTRA_INDEX_URL" not in out and SIF_SECRET not in out
    assert out.split("files:\n", 1)[1] == "done\n"  # no file holds it (the venv included)
    deffile = subprocess.run([*cmd, "inspect", "--deffile", sif], capture_output=True, text=True,
                             cwd=Path(sif).parent, check=True).stdout
    assert SIF_SECRET not in deffile and "PIP_EXTRA_INDEX_URL_1" in deffile  # named, not held
    assert SIF_SECRET not in json.dumps(cpu_sif.to_dict())


@pytest.mark.docker
@pytest.mark.slow
def test_docker_image_and_sif_have_the_same_pip_freeze(cpu_sif, cpu_build, docker_client):
    """The Dockerfile and the definition are two views of one plan: same venv, same packages."""
    from envbuilder.run.apptainer import pip_freeze_sif

    sif = pip_freeze_sif(_apptainer(), Path(cpu_sif.apptainer["sif"]))
    out = docker_client.containers.run(cpu_build.image_id, ["python", "-m", "pip", "freeze", "--all"],
                                       remove=True, entrypoint=[]).decode()
    image = sorted(ln for ln in out.splitlines() if "==" in ln or " @ " in ln)
    assert any(ln.startswith("torch==2.13.0") for ln in sif)
    assert sif == image


@pytest.mark.docker
@pytest.mark.slow
def test_a_broken_post_fails_the_build_naming_the_step(cpu_sif, docker_client, tmp_path):
    """A definition that cannot build: exit 1, the stage and section named; nothing at --sif."""
    from envbuilder.api import make_spec, resolve_target
    from envbuilder.run.apptainer import build_sif
    from envbuilder.run.build import BuildOptions, prepare_context

    cmd = _apptainer()
    spec = make_spec(CPU, base_image="envbuilder-test/debian:12")
    ctx, plan = prepare_context(spec, resolve_target(CPU), BuildOptions(), tmp_path / "ctx")
    d = ctx / "envbuilder.def"
    marker = 'echo "envbuilder: stage builder, %post"\n'
    d.write_text(d.read_text().replace(marker, marker + "    no-such-command-envbuilder\n", 1))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(OperationError) as e:
        build_sif(cmd, plan, ctx, out / "broken.sif", client=docker_client)
    assert e.value.exit_code == 1 and e.value.step == "apptainer"
    assert "in stage builder, %post" in str(e.value) and "exit" in str(e.value)
    assert os.listdir(out) == []  # no half-written SIF, no work folder left


def _apptainer_containers(client, under: Path) -> list:
    """The apptainer wrapper's containers (scripts/test-services.sh) that bind a path under
    ``under`` (this test's own: other sessions may share the engine)."""
    found = []
    for c in client.containers.list(filters={"ancestor": "envbuilder-test/apptainer:sid"}):
        if any(str(m.get("Source", "")).startswith(str(under)) for m in c.attrs.get("Mounts") or ()):
            found.append(c)
    return found


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [("INT", 130), ("TERM", 143)])
def test_an_interrupted_sif_build_exits_130_or_143_and_apptainer_stops(docker_client, wheelhouse,
                                                                      tmp_path, sig, code):
    """Issue 47: a Ctrl-C (or SIGTERM) while the real ``apptainer build`` runs is the signal's
    exit code (f06a763 said 1), the signal reaches Apptainer (the wrapper's ``docker run``
    passes it on: its container ends), and nothing is left at --sif or beside it."""
    import signal
    import time

    from hostile_helpers import start

    _apptainer()
    out = tmp_path / "out"
    out.mkdir()
    p = start("build", CPU, "--runtime", "apptainer", "--base-image", "envbuilder-test/debian:12",
              "--wheelhouse", str(wheelhouse), "--sif", str(out / "x.sif"), "--no-smoke",
              "--no-verify", cwd=tmp_path)
    try:
        seen, t0 = None, time.monotonic()
        while p.poll() is None and time.monotonic() - t0 < 300:
            if _apptainer_containers(docker_client, tmp_path):
                seen = seen or time.monotonic()
                if time.monotonic() - seen > 8:  # apptainer has been building for a while
                    break
            time.sleep(0.5)
        assert seen is not None and p.poll() is None, p.communicate(timeout=60)[1][-2000:]
        p.send_signal(getattr(signal, f"SIG{sig}"))
        err = p.communicate(timeout=120)[1]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(30)
    assert p.returncode == code, err[-2000:]
    assert "interrupted during apptainer" in err and "Traceback" not in err, err[-2000:]
    deadline = time.monotonic() + 60
    while _apptainer_containers(docker_client, tmp_path) and time.monotonic() < deadline:
        time.sleep(1)
    assert _apptainer_containers(docker_client, tmp_path) == []  # Apptainer got the signal
    assert os.listdir(out) == []  # no SIF, no record, no work folder


@pytest.mark.docker
def test_an_existing_file_at_sif_is_never_replaced(cpu_sif, docker_client, tmp_path):
    from envbuilder.api import make_spec, resolve_target
    from envbuilder.run.apptainer import build_sif
    from envbuilder.run.build import BuildOptions, prepare_context

    cmd = _apptainer()
    ctx, plan = prepare_context(make_spec(CPU, base_image="envbuilder-test/debian:12"), resolve_target(CPU),
                                BuildOptions(), tmp_path / "ctx")
    mine = tmp_path / "mine.sif"
    mine.write_text("my own file")
    with pytest.raises(InputError, match="envbuilder did not write it"):
        build_sif(cmd, plan, ctx, mine, client=docker_client)
    assert mine.read_text() == "my own file"
    assert sorted(os.listdir(tmp_path)) == ["ctx", "mine.sif"]
    shutil.rmtree(ctx)


@pytest.mark.docker
@pytest.mark.slow
def test_index_credentials_reach_post_through_a_bound_file_only(cpu_sif, docker_client, tmp_path):
    """An index URL with credentials is a build argument: %post reads it from the file bound for
    the build (as Docker's build arguments), the definition only names it, and the SIF of the
    session holds an empty mount point where that file was."""
    from envbuilder.api import make_spec, resolve_target
    from envbuilder.run.apptainer import build_sif
    from envbuilder.run.build import BuildOptions, prepare_context

    cmd = _apptainer()
    secret = "https://ml:s3cret-token@pypi.example.invalid/simple"
    spec = make_spec(CPU, base_image="envbuilder-test/debian:12", extra_index_urls=[secret])
    ctx, plan = prepare_context(spec, resolve_target(CPU), BuildOptions(), tmp_path / "ctx")
    d = ctx / "envbuilder.def"
    text = d.read_text()
    assert "s3cret" not in text and "PIP_EXTRA_INDEX_URL_1" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("export PIP_EXTRA_INDEX_URL_1="))
    probe = '    echo "credential: $(printf %s "$PIP_EXTRA_INDEX_URL_1" | sha256sum | cut -c1-16)"; exit 7\n'
    d.write_text(text.replace(line + "\n", line + "\n" + probe, 1))
    lines: list[str] = []
    (tmp_path / "out").mkdir()
    with pytest.raises(OperationError, match="stage builder, %post"):
        build_sif(cmd, plan, ctx, tmp_path / "out" / "c.sif", client=docker_client,
                  build_env=plan.index_build_args, on_line=lines.append)
    want = hashlib.sha256(secret.encode()).hexdigest()[:16]
    assert f"credential: {want}" in lines
    assert not any("s3cret" in ln for ln in lines)
    # without the file, %post stops at once naming the build argument
    lines.clear()
    with pytest.raises(OperationError):
        build_sif(cmd, plan, ctx, tmp_path / "out" / "c.sif", client=docker_client, on_line=lines.append)
    assert any("set PIP_EXTRA_INDEX_URL_1" in ln for ln in lines)


@pytest.mark.docker
@pytest.mark.slow
def test_the_sif_built_twice_has_one_root_file_system(cpu_sif, docker_client, base_image, wheelhouse,
                                                      ca_bundle, tmp_path):
    """Issue 42: the same inputs and SOURCE_DATE_EPOCH, built again into another SIF (no cache:
    a new path), give the same root file system (the squashfs partition) byte for byte; the SIF
    files differ only in their header (creation time, UUIDs)."""
    from envbuilder.api import make_spec
    from envbuilder.run.apptainer import rootfs_digest
    from envbuilder.run.build import BuildOptions, build_target

    a = cpu_sif.apptainer
    first = Path(a["sif"])
    assert a["source_date_epoch"] and rootfs_digest(first) is not None
    out = tmp_path / "again"
    out.mkdir()
    os.chmod(out, 0o777)  # the wrapper's unprivileged user writes here
    opts = BuildOptions(wheelhouse=wheelhouse, ca_cert=ca_bundle, context=tmp_path / "ctx",
                        runtime="apptainer", sif=out / f"{CPU}.sif", verify=False, smoke=False)
    spec = make_spec(CPU, base_image=base_image, extra_index_urls=[SIF_INDEX])
    r = build_target(spec, opts, client=docker_client)
    b = r.apptainer
    assert r.ok and b["steps"]["build"] == "ok", r.error  # built, not the cached one
    assert b["inputs"] == a["inputs"] and b["source_date_epoch"] == a["source_date_epoch"]
    assert b["rootfs_sha256"] == rootfs_digest(first) == rootfs_digest(Path(b["sif"]))
    assert b["sha256"] != a["sha256"]  # the header: its times and UUID
