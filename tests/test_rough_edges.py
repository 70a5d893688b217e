"""Daily-use rough edges (issue 23, part 5): help for every option, shell completion, matrix show
filters and whole URLs, render --quiet, registry-aware image names in job files, one layout
rule across render, smoke and jobs/README.md, the link state in the interface choice, and pods
with CPU/memory requests sized for their /dev/shm."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from envbuilder.api import load, show_axis
from hostile_helpers import CLI, ROOT, assert_clean_failure, cli, env


def _commands():
    import typer.main

    from envbuilder.cli import app

    def walk(c, path):
        yield path, c
        for n, sub in (getattr(c, "commands", None) or {}).items():
            yield from walk(sub, [*path, n])

    return list(walk(typer.main.get_command(app), ["envbuilder"]))


def test_every_option_and_argument_has_help():
    missing = []
    for path, c in _commands():
        for p in c.params:
            kind = getattr(p, "param_type_name", "")
            if kind in ("option", "argument") and not (p.help or "").strip():
                missing.append(f"{' '.join(path)} {p.opts[-1]}")
    assert not missing, missing


def test_help_shows_the_new_options():
    for args, opt in ((["build"], "--extra-index-url"), (["build"], "--shm-size"),
                      (["build"], "--http-proxy"), (["smoke"], "--shm-size"),
                      (["render"], "--quiet"), (["matrix", "show"], "--torch")):
        p = cli(*args, "--help", COLUMNS="200")
        line = next(ln for ln in p.stdout.splitlines() if ln.lstrip().startswith(opt) or f", {opt}" in ln)
        assert len(line.split(opt, 1)[1].strip()) > 10, line  # a description follows


def _complete(words: str, cwd: Path | None = None) -> list[str]:
    """What the shell gets from `envbuilder --install-completion`'s bash protocol."""
    n = len(words.split()) - (0 if words.endswith(" ") else 1)
    p = subprocess.run(CLI, capture_output=True, text=True, cwd=cwd,
                       env=env(_ENVBUILDER_COMPLETE="complete_bash", COMP_WORDS=words,
                               COMP_CWORD=str(n)))
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_completion_of_targets_axes_flavours_and_project_names(tmp_path):
    m = load()
    got = _complete("envbuilder render cu12")
    assert "cu121" in got and "cu124" in got and all(g.startswith("cu12") for g in got)
    assert {a.name for a in m.targets if a.name.startswith("cu12")} <= set(got)
    parts = _complete("envbuilder resolve cu121-tor")
    assert f"cu121-torch{m.torch[0].line}" in parts and all(p.startswith("cu121-tor") for p in parts)
    assert _complete("envbuilder matrix show to") == ["torch"]
    assert set(_complete("envbuilder render cu121 --flavour cu")) == {"cuda-base", "cuda-runtime", "cudnn-runtime"}
    (tmp_path / "envbuilder.toml").write_text('[[targets]]\nname = "trainer"\ntarget = "cu121"\n')
    assert "trainer" in _complete("envbuilder build tr", cwd=tmp_path)
    assert "trainer" in _complete("envbuilder diff cu121 tr", cwd=tmp_path)


def test_matrix_show_filters():
    full = show_axis("torch").to_dict()["rows"]
    p = cli("matrix", "show", "torch", "--torch", "2.6", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["rows"]
    assert rows and rows == [r for r in full if re.fullmatch(r"2\.6\.\d+", r["torch"])]
    rows = json.loads(cli("matrix", "show", "torch", "--torch", "2.6", "--cuda", "12.4", "--json").stdout)["rows"]
    assert rows and all(r["variant"] == "cu124" and r["torch"].startswith("2.6.") for r in rows)
    rows = json.loads(cli("matrix", "show", "os", "--python", "3.12", "--json").stdout)["rows"]
    assert rows and all("3.12" in r["python"] for r in rows)
    assert_clean_failure(cli("matrix", "show", "cuda", "--torch", "2.6"), 2, "cannot filter by --torch")


def test_matrix_show_prints_whole_urls():
    """Narrow terminal or not, each source URL is printed whole on a line of its own; --json
    carries them as they are in the matrix."""
    t = show_axis("torch")
    urls = {u for s in t.sources for u in s}
    assert any(len(u) > 80 for u in urls)
    p = cli("matrix", "show", "torch", COLUMNS="80")
    assert p.returncode == 0, p.stderr
    lines = {ln.split(" ", 1)[1] for ln in p.stdout.splitlines() if re.match(r"\[\d+\] ", ln)}
    assert lines == urls
    js = json.loads(cli("matrix", "show", "torch", "--json").stdout)
    assert {u for r in js["rows"] for u in r["source"]} == urls


def test_render_quiet(tmp_path):
    p = cli("render", "cu121", "-o", str(tmp_path / "a"), "--quiet")
    assert p.returncode == 0 and p.stdout == "" and (tmp_path / "a" / "Dockerfile").is_file()
    p = cli("render", "cu121", "--driver", "525.60.13", "-o", str(tmp_path / "b"), "-q")
    assert p.returncode == 0 and p.stderr.startswith("warning: driver_cuda")  # warnings stay (stderr)


def _apptainer_ref(folder: Path, lay: str) -> str:
    text = (folder / "jobs" / f"slurm-apptainer-{lay}.sbatch").read_text()
    return re.search(r"docker://(\S+)", text).group(1)


def test_job_files_pull_from_the_projects_registry(tmp_path):
    (tmp_path / "envbuilder.toml").write_text(
        'registry = "registry.example.com/ml"\nrepository = "team"\nlayouts = ["2x8"]\n\n[[targets]]\n'
        'name = "train"\ntarget = "cu121"\n')
    assert cli("render", "-q", cwd=tmp_path).returncode == 0
    out = tmp_path / "build" / "train"
    stack = json.loads((out / "stack.json").read_text())
    tag = stack["tag"]
    # a project target's own tag: its name, then the stack's (two targets of a stack never collide)
    ptag = stack["image_tag"]
    assert ptag == f"train-{tag}"
    assert _apptainer_ref(out, "2x8") == f"registry.example.com/ml/team:{ptag}"
    pyxis = (out / "jobs" / "slurm-pyxis-2x8.sbatch").read_text()
    assert f"registry.example.com#ml/team:{ptag}" in pyxis  # pyxis/enroot's registry#image form
    (job,) = [d for d in yaml.safe_load_all((out / "jobs" / "trainjob-2x8.yaml").read_text())]
    assert job["spec"]["trainer"]["image"] == f"registry.example.com/ml/team:{ptag}"
    # bake --registry R tags the images R/<repository>:<tag>, and its job files pull those
    p = cli("bake", "--registry", "ghcr.io/acme", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f'"ghcr.io/acme/team:{ptag}"' in (tmp_path / "build" / "docker-bake.hcl").read_text()
    assert _apptainer_ref(out, "2x8") == f"ghcr.io/acme/team:{ptag}"
    # outside a project: --registry (and --repository, default envbuilder), else the local name
    assert cli("render", "cu121", "-o", str(tmp_path / "r"), "--registry", "ghcr.io/acme",
               "--repository", "train", "-q").returncode == 0
    assert _apptainer_ref(tmp_path / "r", "2x6") == f"ghcr.io/acme/train:{tag}"
    assert cli("render", "cu121", "-o", str(tmp_path / "l"), "-q").returncode == 0
    assert _apptainer_ref(tmp_path / "l", "2x6") == f"envbuilder:{tag}"


def test_one_layout_rule_for_render_and_jobs_readme(tmp_path):
    p = cli("render", "cu121", "-o", str(tmp_path / "u"), "--layout", "8,4")
    assert_clean_failure(p, 2, "uneven split", "smoke IMAGE --layout 8,4")
    assert not (tmp_path / "u").exists()
    for args in ((), ("--nproc", "16"), ("--layout", "3x4")):
        out = tmp_path / ("o" + "".join(args).replace("-", ""))
        assert cli("render", "cu121", "-o", str(out), "-q", *args).returncode == 0
        readme = (out / "jobs" / "README.md").read_text()
        assert "1x8,2x8" not in readme
        suggested = re.findall(r"`--layout ([0-9x,]+)`", readme)
        assert suggested
        for lay in suggested:  # every layout the README suggests, render accepts
            again = cli("render", "cu121", "-o", str(tmp_path / f"s{lay}"), "-q", "--layout", lay)
            assert again.returncode == 0, (lay, again.stderr)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
                    reason="needs root, unshare and ip to make interfaces in a private network namespace")
def test_gloo_interface_is_one_whose_link_is_up(tmp_path):
    """Real interfaces in a private network namespace: eth0 (down) sorts first, eth1 (up) is
    chosen; with only a down interface, lo."""
    script = ROOT / "templates" / "files" / "nccl-defaults.sh"

    def choose(setup: str) -> str:
        body = (f"mount -t sysfs sysfs /sys && {setup}\n. {script}\n"
                'echo "$NCCL_SOCKET_IFNAME|$GLOO_SOCKET_IFNAME"\n')
        p = subprocess.run(["unshare", "-n", "-m", "sh", "-c", body], capture_output=True,
                           text=True, env={"PATH": os.environ["PATH"]})
        if p.returncode != 0 and "Operation not permitted" in p.stderr:
            pytest.skip(f"no network namespaces here: {p.stderr.strip()}")
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    up = ("ip link add eth0 type bridge && ip link add eth1 type veth peer name eth9 && "
          "ip link set eth1 up && ip link set eth9 up")
    assert choose(up) == "^docker,lo,veth,virbr,br-|eth1"
    assert choose("ip link add eth0 type bridge") == "lo|lo"
    # a value the user set is kept
    assert choose(up + " && export GLOO_SOCKET_IFNAME=eth0").endswith("|eth0")


def test_pods_request_cpu_and_memory_for_their_shm(tmp_path):
    from envbuilder.render.jobs import quantity_bytes

    assert cli("render", "cpu", "-o", str(tmp_path / "c"), "-q", "--layout", "2x2").returncode == 0
    svc, job = yaml.safe_load_all((tmp_path / "c" / "jobs" / "indexed-job-2x2.yaml").read_text())
    spec = job["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"]
    req, lim = c["resources"]["requests"], c["resources"]["limits"]
    assert quantity_bytes(req["memory"]) > quantity_bytes(shm)
    assert lim == {"memory": req["memory"]} and int(req["cpu"]) >= 2  # Burstable, no GPU
    assert quantity_bytes("1.5Gi") == 3 * 2**29 and quantity_bytes("512M") == 512 * 10**6


@pytest.mark.docker
def test_interface_choice_in_a_container(docker_client, base_image):
    """The same script in containers of the real engine: a bridge network's eth0 (up), and lo
    when the container has no network."""
    import io
    import tarfile
    import uuid

    script = (ROOT / "templates" / "files" / "nccl-defaults.sh").read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("Dockerfile", f"FROM {base_image}\nCOPY nccl-defaults.sh /nccl-defaults.sh\n".encode()),
                           ("nccl-defaults.sh", script)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    tag = f"envbuilder-ifname-test:{uuid.uuid4().hex[:8]}"
    docker_client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True)
    try:
        cmd = ["sh", "-c", '. /nccl-defaults.sh; echo "$NCCL_SOCKET_IFNAME|$GLOO_SOCKET_IFNAME"']
        assert docker_client.containers.run(tag, cmd, remove=True).decode().strip() == \
            "^docker,lo,veth,virbr,br-|eth0"
        assert docker_client.containers.run(tag, cmd, remove=True, network_mode="none").decode().strip() == "lo|lo"
    finally:
        docker_client.images.remove(tag)
