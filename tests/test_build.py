"""envbuilder build against real parts: a Docker engine, a local Debian 12 base image, a
wheelhouse with torch 2.13.0 (CPU), and Debian's docker-registry (plain and with htpasswd).

The cpu image is built once per session (conftest.cpu_build); the tests here reuse its cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import re
import sys

import pytest

from envbuilder.api import make_spec
from test_project import OVERLAY_OS  # the team's own Debian 12 image (the suite's local one)
from envbuilder.run.build import BuildFailed, BuildOptions
from envbuilder.run.build import build_target as _build_target

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CPU = "cpu-torch2.13-debian12"


def _opts(base_image, wheelhouse, **kw) -> BuildOptions:
    return BuildOptions(wheelhouse=wheelhouse, **kw)


def build_target(target: str, base_image: str, opts: BuildOptions, *, client):
    """The library's build of one target's spec, on the test base image."""
    return _build_target(make_spec(target, base_image=base_image), opts, client=client)


def _cli(*args, env=None, timeout=900, cwd=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", "from envbuilder.cli import main; main()", *args],
                          capture_output=True, text=True, env=e, timeout=timeout, cwd=cwd)


def _run(client, image, cmd, **kw) -> str:
    out = client.containers.run(image, ["sh", "-c", cmd], remove=True, **kw)
    return out.decode()


def test_cpu_image_is_built_offline_with_labels(cpu_build, docker_client):
    assert cpu_build.ok and cpu_build.steps["build"] == "ok"
    labels = cpu_build.labels
    assert labels["io.envbuilder.torch"] == "2.13.0"
    assert labels["io.envbuilder.python"] == "3.11"
    assert labels["org.opencontainers.image.base.name"] == os.environ.get(
        "ENVBUILDER_TEST_BASE_IMAGE", "envbuilder-test/debian:12")
    # the base by digest: NAME@sha256:... where the engine knows its manifest digest (the
    # containerd image store), the image's own sha256:... otherwise
    assert re.search(r"(\A|@)sha256:[0-9a-f]{64}\Z", labels["io.envbuilder.base-digest"]), labels
    out = _run(docker_client, cpu_build.image_id,
               "id -u; python -c 'import torch, numpy; print(torch.__version__)'")
    uid, version = out.split()
    assert uid == "1000"  # the runtime stage runs as a non-root user
    assert version.startswith("2.13.0")


def test_ca_bundle_stays_in_the_builder_stage(cpu_build, docker_client):
    out = _run(docker_client, cpu_build.image_id,
               "ls /usr/local/share/ca-certificates/envbuilder/ 2>/dev/null; "
               "grep -c 'BEGIN CERT' /etc/ssl/certs/ca-certificates.crt 2>/dev/null; echo end")
    assert "envbuilder-extra-ca.crt" not in out
    # the builder stage did trust it: the context carried it
    assert (cpu_build_context(cpu_build) / "ca-certificates" / "envbuilder-extra-ca.crt").exists()


def cpu_build_context(report):
    from pathlib import Path

    return Path(report.context)


def test_nccl_interface_defaults_and_overrides(cpu_build, docker_client):
    img = cpu_build.image_id
    # the entrypoint fills defaults; a bridge network has eth0 besides lo
    out = docker_client.containers.run(img, ["sh", "-c", "echo $NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME"],
                                       remove=True).decode().split()
    assert out == ["^docker,lo,veth,virbr,br-", "eth0"]
    # no network but lo: a single-node job must still work, so lo is used
    out = docker_client.containers.run(img, ["sh", "-c", "echo $NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME"],
                                       remove=True, network_mode="none").decode().split()
    assert out == ["lo", "lo"]
    # what the user sets wins
    out = docker_client.containers.run(img, ["sh", "-c", "echo $NCCL_SOCKET_IFNAME $NCCL_DEBUG"],
                                       remove=True, environment={"NCCL_SOCKET_IFNAME": "ib0",
                                                                 "NCCL_DEBUG": "INFO"}).decode().split()
    assert out == ["ib0", "INFO"]


def test_second_build_reuses_the_cache(cpu_build, docker_client, base_image, wheelhouse, tmp_path):
    r = build_target(CPU, base_image, _opts(base_image, wheelhouse, ca_cert=None, smoke=False,
                                context=tmp_path / "ctx"), client=docker_client)
    r2 = build_target(CPU, base_image, _opts(base_image, wheelhouse, ca_cert=None, smoke=False,
                                 context=tmp_path / "ctx2"), client=docker_client)
    # the same plan from a fresh context: every step came from the cache, the same image
    assert r2.image_id == r.image_id
    assert r2.cached_steps >= 10


def test_build_smoke_push_pull_by_digest_and_smoke_again(cpu_build, docker_client, base_image,
                                                         wheelhouse, ca_bundle, registry, tmp_path):
    repo = f"{registry.address}/ml/train"
    report = tmp_path / "report.json"
    p = _cli("build", CPU, "--base-image", base_image, "--wheelhouse", str(wheelhouse),
             "--ca-cert", str(ca_bundle), "--push", repo, "--json", "--report", str(report),
             "-t", "myrepo/train:dev")
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    # -t NAME:TAG names the local image as docker does; its TAG part is pushed with the others
    assert "myrepo/train:dev" in d["local_tags"]
    assert docker_client.images.get("myrepo/train:dev").id == d["image_id"]
    docker_client.images.remove("myrepo/train:dev")  # the name only: the image keeps its others
    assert json.loads(report.read_text()) == d
    assert d["steps"] == {"render": "ok", "build": "ok", "verify": "ok", "smoke": "ok", "push": "ok"}
    assert d["smoke"]["world_size"] == 12 and d["smoke"]["ok"]
    assert d["smoke"]["bandwidth"] and all(b["busbw_gbps"] > 0 for b in d["smoke"]["bandwidth"])
    digests = {x["digest"] for x in d["pushed"]}
    assert len(digests) == 1
    digest = digests.pop()
    assert digest.startswith("sha256:") and len(digest) == 71
    tags = {x["tag"] for x in d["pushed"]}
    assert tags == {d["tag"], CPU, "dev"}  # the version tag, -t's tag, the moving alias (the target)

    # pull it back by digest into a clean name and run the smoke job on what came back
    ref = f"{repo}@{digest}"
    for t in list(docker_client.images.get(d["image_id"]).tags):
        if t.startswith(repo):
            docker_client.images.remove(t)
    pulled = docker_client.images.pull(ref)
    assert pulled.id == d["image_id"]
    p = _cli("smoke", ref, "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert s["ok"] and s["world_size"] == 12


def test_push_with_auth(cpu_build, docker_client, base_image, wheelhouse, auth_registry, tmp_path):
    repo = f"{auth_registry.address}/ml/train"
    opts = _opts(base_image, wheelhouse, ca_cert=None, smoke=False, push=repo,
                 context=tmp_path / "ctx")
    os.environ["ENVBUILDER_REGISTRY_USER"] = "ml"
    try:
        os.environ["ENVBUILDER_REGISTRY_PASSWORD"] = "wrong-password"
        with pytest.raises(BuildFailed) as e:
            build_target(CPU, base_image, opts, client=docker_client)
        assert e.value.step == "push"
        assert "authentication" in str(e.value) and "wrong-password" not in str(e.value)
        assert e.value.report.pushed == []
        assert e.value.exit_code == 1
        os.environ["ENVBUILDER_REGISTRY_PASSWORD"] = "s3cret-pass"
        r = build_target(CPU, base_image, opts, client=docker_client)
        assert r.steps["push"] == "ok"
        assert r.pushed[0]["digest"].startswith("sha256:")
        # --no-smoke: the moving alias is not updated without a passing smoke job
        assert [x["tag"] for x in r.pushed] == [r.tag]
    finally:
        os.environ.pop("ENVBUILDER_REGISTRY_USER", None)
        os.environ.pop("ENVBUILDER_REGISTRY_PASSWORD", None)


def test_dead_registry_exits_1_and_records_nothing(cpu_build, base_image, wheelhouse, tmp_path):
    from conftest import _free_port

    repo = f"127.0.0.1:{_free_port()}/ml/train"
    report = tmp_path / "report.json"
    p = _cli("build", CPU, "--base-image", base_image, "--wheelhouse", str(wheelhouse),
             "--no-smoke", "--push", repo, "--report", str(report))
    assert p.returncode == 1
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("envbuilder: error:")]
    assert len(err) == 1 and "not reachable" in err[0] and "Traceback" not in p.stderr
    d = json.loads(report.read_text())
    assert d["steps"]["push"] == "failed" and d["pushed"] == [] and d["failed_step"] == "push"


def test_image_that_fails_the_smoke_job(base_image):
    # the bare base image has no Python: the job cannot start, and the check is named
    p = _cli("smoke", base_image, "--nproc", "2", "--timeout", "20", "--json")
    assert p.returncode == 1
    d = json.loads(p.stdout)
    assert not d["ok"] and d["failed"]
    assert d["failed"][0] in ("python", "launch", "import_torch")
    assert "smoke job failed" in p.stderr and "Traceback" not in p.stderr


def test_smoke_errors_are_one_line(docker_client):
    p = _cli("smoke", "envbuilder-test/no-such-image:1", "--nproc", "2")
    assert p.returncode == 1
    assert "no-such-image" in p.stderr and "Traceback" not in p.stderr
    p = _cli("smoke", "x:1", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert p.returncode == 1
    assert "nonexistent" in p.stderr and "Traceback" not in p.stderr
    p = _cli("build", CPU, "--no-smoke", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "cannot reach the Docker engine" in p.stderr


def test_deepspeed_change_does_not_rebuild_the_torch_layer(cpu_build, docker_client, base_image,
                                                          wheelhouse, tmp_path):
    ids = {}
    for ds in ("0.19.7", "0.19.8"):  # DeepSpeed 0.19.6+ with torch 2.12+ (C++20 headers)
        r = build_target(f"{CPU}-ds{ds}", base_image, _opts(base_image, wheelhouse, ca_cert=None, smoke=False,
                                                context=tmp_path / ds), client=docker_client)
        assert r.labels["io.envbuilder.deepspeed"] == ds
        ids[ds] = r.image_id
    # with the same CA setting as the DS builds, for a like-for-like comparison
    plain = build_target(CPU, base_image, _opts(base_image, wheelhouse, ca_cert=None, smoke=False,
                                    context=tmp_path / "plain"), client=docker_client)

    def layers(image_id):
        return docker_client.images.get(image_id).attrs["RootFS"]["Layers"]

    a, b, base = layers(ids["0.19.7"]), layers(ids["0.19.8"]), layers(plain.image_id)
    # where the plain image and a DeepSpeed image first part ways (DeepSpeed and what it needs)
    i_ds = next((i for i, (x, y) in enumerate(zip(base, a)) if x != y), len(base))
    assert i_ds >= 3  # base OS, Python + user, torch venv come before it
    assert a[:i_ds] == b[:i_ds] == base[:i_ds]  # torch's layer is the same bits in all three
    assert len(a) == len(b) == len(base) + 1  # DeepSpeed adds one layer
    # only DeepSpeed's own layer differs between the two versions (on a cpu target its start-up
    # op and CPU Adam are pre-built: the runtime layer before it, what those ops need, is the
    # same in both); under BuildKit, WORKDIR's layer comes after it, the same bits in all three
    assert [i for i, (x, y) in enumerate(zip(a, b)) if x != y] == [i_ds]
    assert a[:i_ds] + a[i_ds + 1:] == b[:i_ds] + b[i_ds + 1:] == base
    out = _run(docker_client, ids["0.19.8"],
               "python -c 'import deepspeed, torch; print(\"VERSIONS\", deepspeed.__version__, torch.__version__)'")
    line = next(ln for ln in out.splitlines() if ln.startswith("VERSIONS"))  # deepspeed logs too
    assert line.split()[1] == "0.19.8" and line.split()[2].startswith("2.13.0")


def test_ctrl_c_during_push_exits_130_and_records_nothing(cpu_build, base_image, wheelhouse,
                                                        registry, tmp_path):
    import signal
    import time

    from hostile_helpers import interruptible

    repo = f"{registry.address}/ml/interrupted"
    report = tmp_path / "report.json"
    log = tmp_path / "stderr.log"
    # Ctrl-C once the registry has seen the push begin (its first blob upload), not on a line of
    # progress output (rich may hold that back until the command ends when stderr is no tty)
    uploads = registry.root / "data" / "docker" / "registry" / "v2" / "repositories" / "ml" / "interrupted"
    with open(log, "w") as err_f:
        p = subprocess.Popen([sys.executable, "-c", "from envbuilder.cli import main; main()", "build",
                              CPU, "--base-image", base_image, "--wheelhouse", str(wheelhouse),
                              "--no-smoke", "--push", repo, "--report", str(report)],
                             stdout=subprocess.DEVNULL, stderr=err_f, text=True,
                             preexec_fn=interruptible)
        deadline = time.time() + 600
        while not uploads.exists() and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert uploads.exists(), f"the push never reached the registry: {log.read_text()[-2000:]}"
        p.send_signal(signal.SIGINT)
        p.wait(timeout=300)
    err = log.read_text()
    assert p.returncode == 130, err[-2000:]  # an interruption's code, as every command's (issue 47)
    assert "interrupted during push" in err and "Traceback" not in err
    d = json.loads(report.read_text())
    assert d["steps"]["push"] == "interrupted" and d["pushed"] == []


def test_build_all_keeps_going_and_reports_each_target(cpu_build, base_image, wheelhouse, tmp_path):
    import shutil

    from envbuilder.core.resources import matrices_dir

    m = tmp_path / "matrix"
    shutil.copytree(matrices_dir(), m)
    (m / "targets.yaml").write_text(
        "schema_version: 1\ntargets:\n  - name: cpu-torch2.13-debian12\n  - name: cu121\n")
    report = tmp_path / "all.json"
    p = _cli("build", "--all", "--jobs", "2", "--matrix", str(m), "--base-image", base_image,
             "--wheelhouse", str(wheelhouse), "--no-smoke", "--report", str(report))
    # cu121's torch is not in the wheelhouse: bad input, and a set exits with the code of its
    # first failure (each target's own is in the report)
    assert p.returncode == 2, p.stderr
    d = json.loads(report.read_text())
    by = {b["target"]: b for b in d["builds"]}
    assert by["cpu-torch2.13-debian12"]["steps"]["build"] == "ok"
    assert by["cu121"]["failed_step"] == "render" and "wheelhouse" in by["cu121"]["error"]
    assert "cpu-torch2.13-debian12" in p.stdout and "cu121" in p.stdout  # the summary table


def test_doctor_reads_a_built_image_labels(cpu_build):
    p = _cli("doctor", "--image", cpu_build.local_tags[0], "--nproc", "12", "--json")
    d = json.loads(p.stdout)
    names = {c["name"]: c for c in d["checks"]}
    # the labels say CPU-only: no driver is needed, so this GPU-less host passes
    assert p.returncode == 0, p.stderr
    assert names["driver"]["status"] == "skip" and "CPU-only" in names["driver"]["detail"]
    assert names["stack-driver"]["status"] == "skip"
    assert names["shm"]["value"] is not None
    assert "Traceback" not in p.stderr




def test_build_all_with_the_smoke_job_verifies_smokes_and_pushes(cpu_build, base_image, wheelhouse,
                                                                  registry, tmp_path):
    """build --all --only cpu, smoke job on, pushed: the published manifest has the digest; the
    matrix overlay (the team's base image) applies."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "os.yaml").write_text(OVERLAY_OS)
    repo = f"{registry.address}/team/train"
    report = tmp_path / "all.json"
    p = _cli("build", "--all", "--only", "cpu", "--torch", "2.13", "--nproc", "4",
             "--matrix-overlay", str(overlay), "--wheelhouse", str(wheelhouse),
             "--push", repo, "--report", str(report), "--json")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    d = json.loads(report.read_text())
    assert d["ok"] and [b["target"] for b in d["builds"]] == ["cpu"]
    b = d["builds"][0]
    assert [b["steps"][s] for s in ("render", "build", "verify", "smoke", "push")] == ["ok"] * 5
    assert b["smoke"]["world_size"] == 4
    (pub,) = d["published"]
    assert pub["target"] == "cpu" and pub["digest"].startswith("sha256:")
    assert "cpu" in pub["tags"] and pub["smoke"] == {"ok": True, "world_size": 4}
    # no image can be pulled here: the build ran on the overlay's base image, not debian12's


def test_build_a_project_builds_and_pushes_each_target(cpu_build, base_image, wheelhouse,
                                                       registry, tmp_path):
    root = tmp_path / "repo"
    (root / "matrix").mkdir(parents=True)
    (root / "matrix" / "os.yaml").write_text(OVERLAY_OS)
    (root / "envbuilder.toml").write_text(
        f'registry = "{registry.address}/team"\nrepository = "project"\nmatrix_overlay = "matrix"\n'
        f'layouts = ["1x2"]\n'
        '[[targets]]\nname = "train"\ntarget = "cpu-torch2.13-debian12"\n'
        '[[targets]]\nname = "eval"\ntarget = "cpu-torch2.13-debian12"\n')
    p = _cli("build", "--wheelhouse", str(wheelhouse), "--push", f"{registry.address}/team/project",
             "--json", cwd=root)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    d = json.loads(p.stdout)
    assert d["ok"] and d["project"] == str(root / "envbuilder.toml")
    assert [x["target"] for x in d["published"]] == ["train", "eval"]
    assert all(x["digest"].startswith("sha256:") and x["smoke"]["ok"] for x in d["published"])
    assert {b["smoke"]["world_size"] for b in d["builds"]} == {2}  # the project's layouts


# -- names that belong to the project (issue 46, point 3; the rule: core.naming) -------------------

def _named_project(tmp_path, stem: str, base_image: str):
    import uuid

    root = tmp_path / f"{stem}-{uuid.uuid4().hex[:8]}"  # the folder's name: the repository
    root.mkdir()
    (root / "envbuilder.toml").write_text(
        f'base_image = "{base_image}"\n[[targets]]\nname = "train"\ntarget = "{CPU}"\n')
    return root


def test_two_projects_building_one_stack_leave_each_others_tags_alone(docker_client, cpu_build, base_image,
                                                                      wheelhouse, ca_bundle, tmp_path):
    """The session's plain cpu build (a CI's) holds envbuilder:<stack tag>; two projects build
    the same stack: each image gets its project's name, and the generic tag stays on the CI's."""
    from envbuilder.core.project import load_project

    # the generic tag is on a plain (non-project) build of this stack: the session's cpu build,
    # or the plain build of another test that took it since (such builds may move it)
    generic = f"envbuilder:{cpu_build.tag}"
    ci_id = docker_client.images.get(generic).id
    assert "io.envbuilder.project" not in (docker_client.images.get(ci_id).labels or {})
    tag, made = f"train-{cpu_build.tag}", []
    try:
        for stem in ("proj-a", "proj-b"):
            root = _named_project(tmp_path, stem, base_image)
            spec = make_spec("train", project=load_project(root / "envbuilder.toml"))
            r = _build_target(spec, BuildOptions(wheelhouse=wheelhouse, ca_cert=ca_bundle, smoke=False,
                                                 verify=False), client=docker_client)
            assert r.ok, r.error
            made.append((root.name, r))
        (a_name, a), (b_name, b) = made
        assert a.local_tags == [f"{a_name}:{tag}"] and b.local_tags == [f"{b_name}:{tag}"]
        assert len({a.image_id, b.image_id, ci_id}) == 3  # each built for its own project
        assert docker_client.images.get(generic).id == ci_id  # never moved from the CI's image
        assert docker_client.images.get(f"{a_name}:{tag}").id == a.image_id  # b left a's alone
        assert docker_client.images.get(f"{b_name}:{tag}").id == b.image_id
        for name, r in made:
            assert docker_client.images.get(r.image_id).labels["io.envbuilder.project"] == name
            assert [(k["tag"], k["image_id"]) for k in r.kept_tags] == [(generic, ci_id)]
    finally:
        for name, _r in made:
            docker_client.images.remove(f"{name}:{tag}", noprune=True)


def test_registry_namespace_publishes_to_the_projects_repository(cpu_build, base_image, wheelhouse, ca_bundle,
                                                                 registry, tmp_path, docker_client):
    """build --registry HOST/NS --publish pushes to HOST/NS/<repository>:<target>-<stack tag>
    (the repository: the project folder's name) on the suite's real registry, and nothing else."""
    import urllib.request

    root = _named_project(tmp_path, "vision", base_image)
    p = _cli("build", "train", "--registry", f"{registry.address}/ns", "--publish", "--wheelhouse",
             str(wheelhouse), "--ca-cert", str(ca_bundle), "--no-smoke", "--no-verify", "--json", cwd=root)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    d = json.loads(p.stdout)
    repo, tag = f"{registry.address}/ns/{root.name}", f"train-{d['tag']}"
    try:
        # no moving alias without a smoke pass; never the generic stack tag
        assert [(x["repository"], x["tag"]) for x in d["pushed"]] == [(repo, tag)]
        assert d["local_tags"][0] == f"{repo}:{tag}"
        with urllib.request.urlopen(f"http://{registry.address}/v2/ns/{root.name}/tags/list", timeout=30) as r:
            assert json.load(r)["tags"] == [tag]
        with urllib.request.urlopen(f"http://{registry.address}/v2/_catalog", timeout=30) as r:
            assert not any(c.startswith("ns/") and c != f"ns/{root.name}" for c in json.load(r)["repositories"])
    finally:
        docker_client.images.remove(f"{repo}:{tag}", noprune=True)
