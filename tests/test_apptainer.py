"""The Apptainer definition, proven without Apptainer (not installable on the CI machine): its
stages run in Docker the way `apptainer build` runs them (%files, %post per stage, %files from
the builder stage), then %test runs with %environment sourced, as an unprivileged user."""

from __future__ import annotations

import re

import pytest

from envbuilder.run.apptainer import parse_definition, run_definition_in_docker
from envbuilder.errors import InputError

# a compiling target: DeepSpeed's CPU Adam op is built in the builder stage (g++ through
# envbuilder's -march wrapper), so the proof covers the builder logic of compiled components
CPU = "cpu-torch2.13-ds0.16.9-debian12"
DS_OPS = "cpu_adam"


def test_parse_definition_stages_and_sections(tmp_path):
    from envbuilder.api import render_target

    render_target("cu118-hvd", tmp_path / "out")
    stages = parse_definition((tmp_path / "out" / "envbuilder.def").read_text())
    assert [s.name for s in stages] == ["builder", "runtime"]
    assert stages[0].header["From"].endswith("-devel-ubuntu22.04")
    assert stages[1].header["From"].endswith("-base-ubuntu22.04")  # the cuda-base flavour
    assert stages[1].section("files")[0][0] == "from builder"
    assert "horovod" in stages[0].section("post")[0][1]


def test_parse_definition_rejects_garbage():
    with pytest.raises(InputError):
        parse_definition("%post\n echo hi\n")
    with pytest.raises(InputError):
        parse_definition("Bootstrap: library\nFrom: x\n")


@pytest.mark.docker
@pytest.mark.slow
def test_definition_builds_and_tests_in_docker(docker_client, base_image, wheelhouse, tmp_path):
    from envbuilder.api import Pins, resolve_target
    from envbuilder.run.apptainer import environment_of
    from envbuilder.run.build import BuildOptions, prepare_context

    from envbuilder.api import make_spec

    stack = resolve_target(CPU, pins=Pins(ds_ops=DS_OPS))
    assert stack.compiles
    spec = make_spec(CPU, pins=Pins(ds_ops=DS_OPS), base_image=base_image)
    folder, _ = prepare_context(spec, stack, BuildOptions(wheelhouse=wheelhouse), tmp_path / "ctx")
    runs = run_definition_in_docker(folder, docker_client, keep=True)
    try:
        assert [r.stage for r in runs] == ["builder", "runtime", "%test"]
        assert all(r.exit_code == 0 for r in runs)
        assert "torch 2.13.0" in runs[-1].log and "gloo True" in runs[-1].log
        env = environment_of(folder, docker_client, runs[-1].image,
                             ["NCCL_DEBUG", "VIRTUAL_ENV", "NCCL_SOCKET_IFNAME"])
        assert env["NCCL_DEBUG"] == "WARN" and env["VIRTUAL_ENV"] == "/opt/venv"
        assert env["NCCL_SOCKET_IFNAME"]  # chosen by nccl-defaults.sh at start
        # the op was compiled in the builder stage for x86-64-v3 (not -march=native) and loads
        probe = ("import re, torch, deepspeed.ops.adam.cpu_adam_op as m; "
                 "print(sorted(set(re.findall(rb'-march=([A-Za-z0-9_.-]+)', open(m.__file__, 'rb').read()))))")
        out = docker_client.containers.run(runs[-1].image, ["/opt/venv/bin/python", "-c", probe],
                                           remove=True, entrypoint=[]).decode()
        assert "b'x86-64-v3'" in out and set(re.findall(r"b'([^']+)'", out)) <= {"x86-64", "x86-64-v3"}, out
    finally:
        for img in docker_client.images.list("envbuilder-apptainer-sim"):
            docker_client.images.remove(img.id, force=True)
