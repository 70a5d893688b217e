"""Render a BuildPlan into a build folder: Dockerfile, envbuilder.def, requirements, stack.json,
the smoke job and the files they copy.

The shell commands both formats run are built once here (``Steps``) and formatted by the two
templates, so the Dockerfile and the Apptainer definition cannot drift apart. Output is written
through envbuilder._fs: only files envbuilder wrote are replaced, and a failed render leaves
the old output as it was.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from envbuilder import __version__, _fs
from envbuilder.render import precompiled
from envbuilder.render.bccache import environment
from envbuilder.render.plan import CXX_WRAPPER, PIP_TOOLKIT_DIR, BuildPlan, PipLayer
from envbuilder.core import validate
from envbuilder.core.resources import payload_dir, templates_dir
from envbuilder.components import registry
from envbuilder.components.instructions import (APPTAINER_STAGE_DIR, STAGE, Copy, Env, Run, Stage, cmds,
                                                docker_only, render_all)



@dataclass(frozen=True)
class Steps:
    """The commands of a plan as typed instructions; each renders itself per format
    (``envbuilder.components.instructions``), so the two views cannot drift apart."""

    builder_system: Run
    runtime_system: Run  # the Dockerfile's also creates the non-root account (docker_only)
    layer_files: dict[str, list[str]]
    layer_install: dict[str, Run]
    stages: tuple[Stage, ...]  # the components' own build stages (EFA: AWS's OFI NCCL plugin)
    runtime_copies: tuple[Copy, ...]  # what the runtime copies from them
    runtime_after: Run  # what it runs after those copies (EFA: the plugin on the loader's path)
    runtime_env: Env  # PATH and VIRTUAL_ENV, then the plan's defaults


# Apptainer: the folder the build arguments' file is bound at, and the smoke command %help and
# jobs/README.md show (envbuilder build --runtime apptainer runs exactly this); its staging
# folder is instructions.APPTAINER_STAGE_DIR
APPTAINER_BUILD_ENV_DIR = "/run/envbuilder-build"
APPTAINER_SMOKE = "apptainer exec --nv {sif} sh {home}/smoke/run.sh"


def _q(s: str) -> str:
    return shlex.quote(s)


def _pip_source(plan: BuildPlan, layer: PipLayer) -> list[str]:
    if plan.wheelhouse:
        return ["--no-index", "--find-links", "/tmp/envbuilder/wheels"]
    if layer.index_url:
        out = ["--index-url", _q(layer.index_url)]
        if layer.extra_index_url:
            out += ["--extra-index-url", '"${PIP_INDEX_URL}"']
    else:
        out = ["--index-url", '"${PIP_INDEX_URL}"']
        torch_index = plan.torch_layer.index_url
        if plan.hashes and torch_index:
            # one lock for every layer: an entry uv took from PyTorch's index (torch's small
            # dependencies it mirrors) may be placed in any layer
            out += ["--extra-index-url", _q(torch_index)]
    for i, url in enumerate(plan.extra_index_urls, 1):
        # an index with credentials is a build argument: its value is in no rendered file
        out += ["--extra-index-url", f'"${{PIP_EXTRA_INDEX_URL_{i}}}"'
                if validate.has_credentials(url) else _q(url)]
    return out


def make_steps(plan: BuildPlan) -> Steps:
    py, pm = plan.python, plan.package_manager
    builder: list[str] = []
    if plan.ppa:
        builder += ["apt-get update",
                    "apt-get install -y --no-install-recommends software-properties-common gpg-agent",
                    f"add-apt-repository -y {_q(plan.ppa)}"]
    if plan.builder.apt_components:
        # the OS archive's CUDA toolkit lives in other components (Debian: contrib non-free);
        # they are enabled in the builder stage only
        comps = " ".join(plan.builder.apt_components)
        builder += [
            "if [ -f /etc/apt/sources.list.d/debian.sources ]; then sed -i -E "
            f"'s/^Components: main$/Components: main {comps}/' /etc/apt/sources.list.d/debian.sources; fi",
            "if [ -f /etc/apt/sources.list ]; then sed -i -E "
            f"'s/^(deb [^#]* main)$/\\1 {comps}/' /etc/apt/sources.list; fi"]
    builder += pm.install(plan.builder_apt)
    builder += [*pm.trust_ca(), f"python{py} -m venv {plan.venv}"]
    if plan.builder.pip_toolkit:
        # NVIDIA's CUDA 13 wheels carry nvcc; composed into one CUDA_HOME (nvcc.profile links
        # from lib64, torch's extensions link -lcudart): builder stage only
        home = plan.builder.cuda_home
        builder += [f"{plan.venv}/bin/pip install --no-cache-dir --no-deps --index-url \"${{PIP_INDEX_URL}}\" "
                    f"--target {PIP_TOOLKIT_DIR} " + " ".join(_q(p) for p in plan.builder.pip_toolkit),
                    f"ln -s lib {home}/lib64", f"ln -s libcudart.so.13 {home}/lib/libcudart.so",
                    f"{home}/bin/nvcc --version"]

    runtime_pkgs = [p for p in plan.python_apt if not p.endswith("-venv")]
    # the fabric's RDMA user space (verbs, providers, rdmacm, ibv_devinfo) with the runtime's
    # own packages, and what the OS's base may lack (dnf: shadow-utils' useradd): one layer
    runtime_pkgs += [*plan.rdma_apt, *pm.runtime_tools]
    # Apptainer runs as the calling user: the account is the Dockerfile's only
    runtime = Run(cmds(*pm.install(runtime_pkgs)) + docker_only(
        f"if getent passwd {plan.uid} >/dev/null; then userdel --remove \"$(getent passwd {plan.uid} | cut -d: -f1)\"; fi",
        f"useradd --no-log-init --create-home --uid {plan.uid} --shell /bin/bash {plan.user}"))
    stages, copies, after = _component_stages(plan)
    files, install = _layer_steps(plan)
    env = Env({"PATH": f"{plan.venv}/bin:$PATH", "VIRTUAL_ENV": plan.venv}, plan.env)
    return Steps(Run(cmds(*builder)), runtime, files, install, stages, copies, after, env)


def _layer_steps(plan: BuildPlan) -> tuple[dict[str, list[str]], dict[str, Run]]:
    """What each layer's stage copies in, and the ``Run`` that installs it. The Dockerfile's
    stages also stamp, collect and clean up (``docker_only``): each later layer is collected
    into /opt/layers/<name> for its own COPY; Apptainer builds them all in one stage."""
    files: dict[str, list[str]] = {}
    install: dict[str, Run] = {}
    # a lock is the whole environment, placed in layers (lock.requirements.split_by_layer):
    # each layer installs exactly its own entries
    hashes = ["--no-deps", "--require-hashes"] if plan.hashes else []
    for i, layer in enumerate(plan.layers):
        src = " ".join(_pip_source(plan, layer))
        req = f"{STAGE}/{layer.name}.txt"
        pip = f"pip install --no-cache-dir {src}"
        if i == 0:
            files[layer.name] = [layer.file]
            install[layer.name] = Run(cmds(f"{pip} {' '.join(hashes)} -r {req}".replace("  ", " "))
                                      + docker_only(f"rm -rf {STAGE}"))
            continue
        constraints = [] if plan.hashes else [f"-c {STAGE}/constraints.txt"]
        freeze = [] if plan.hashes else [f"pip freeze > {STAGE}/constraints.txt"]
        if not layer.build_requirements and not layer.no_build_isolation:
            # a team's own packages (the team layer): plain installs, with what the layers
            # before it hold as constraints (nothing below is upgraded or replaced)
            files[layer.name] = [layer.file, "files/collect-layer.sh"]
            core = [*freeze, " ".join([pip, *hashes, *constraints, "-r", req])]
        else:
            build_req = f"{STAGE}/{layer.name}.build.txt"
            files[layer.name] = [layer.file, f"requirements/{layer.name}.build.txt",
                                 "files/collect-layer.sh"]
            env = " ".join(f"{k}={_q(v)}" for k, v in sorted(layer.build_env.items()))
            core = [
                *freeze,
                " ".join([pip, *hashes, *constraints, "-r", build_req]),
                *layer.pre_install,
                " ".join(["env", env, pip, "--no-build-isolation", "--verbose" if plan.compiles else "",
                          *hashes, *constraints, "-r", req]).replace("  ", " "),
            ]
        install[layer.name] = Run(
            docker_only(f"touch {STAGE}/stamp") + cmds(*core)
            + docker_only(f"sh {STAGE}/collect-layer.sh {STAGE}/stamp {plan.venv} /opt/layers/{layer.name}",
                          f"rm -rf {STAGE}"))
    return files, install


def _component_stages(plan: BuildPlan) -> tuple[tuple[Stage, ...], tuple[Copy, ...], Run]:
    """The components' own build stages (after the torch layer: the fabric's OFI NCCL plugin
    for EFA), what the runtime stage copies from them and runs after."""
    stages: list[Stage] = []
    copies: tuple[Copy, ...] = ()
    after = Run()
    for c in registry.active(plan.stack):
        stage = c.build_stage(plan.stack, plan.site_packages)
        if stage is not None:
            stages.append(stage)
        copies += c.runtime_copies(plan.stack)
        after += c.runtime_steps(plan.stack)
    return tuple(stages), copies, after


# -- the output folder ----------------------------------------------------------------------

def _env(extra_dir: Path | None = None):
    return environment(("build", None if extra_dir is None else str(extra_dir)),
                       lambda: make_env(precompiled.loader("build", extra_dir)))


def make_env(loader):
    """The environment of the build files' templates (precompiled.SETS declares its options)."""
    return precompiled.make_env("build", loader)


precompiled.register("build", make_env)


def render_files(plan: BuildPlan, *, layer_requirements: Mapping[str, str] | None = None,
                 template_dir: Path | None = None,
                 stack_extra: Mapping[str, object] | None = None) -> dict[str, str | bytes]:
    """Every file of the build folder, as relative path -> content; ``stack_extra`` adds
    entries to stack.json (the lock's digest, the smoke layouts: envbuilder.assemble)."""
    env = _env(template_dir)
    steps = make_steps(plan)
    ctx = _context(plan, steps)
    out: dict[str, str | bytes] = {
        "Dockerfile": env.get_template("Dockerfile.j2").render(ctx),
        "envbuilder.def": env.get_template("apptainer.def.j2").render(ctx),
        "requirements.in": plan.requirements_in(),
        ".dockerignore": "# the build context is this folder; keep locks and job files out of it\njobs/\n*.sif\n",
        "ca-certificates/README": "Put extra CA certificates here as *.crt (envbuilder build --ca-cert FILE does);\n"
                                  "they are trusted in the builder stage only.\n",
    }
    for layer in plan.layers:
        reqs = (layer_requirements or {}).get(layer.name)
        out[layer.file] = reqs if reqs is not None else "\n".join(layer.requirements) + "\n"
        if layer.build_requirements:
            build = (layer_requirements or {}).get(f"{layer.name}.build")
            out[f"requirements/{layer.name}.build.txt"] = (
                build if build is not None else "\n".join(layer.build_requirements) + "\n")
    for name in ("entrypoint.sh", "nccl-defaults.sh", "collect-layer.sh"):
        out[f"files/{name}"] = (templates_dir() / "files" / name).read_text()
    if plan.hashes:
        out["files/constraints.txt"] = _constraints(plan, layer_requirements or {})
    if plan.builder.cpu_isa:
        out["files/cxx-isa.sh"] = (templates_dir() / "files" / "cxx-isa.sh").read_text()
    for name in ("ddp_smoke.py", "nccl_info.py"):  # the smoke job (run.smoke.PAYLOAD_FILES)
        out[f"smoke/{name}"] = (payload_dir() / name).read_bytes() \
            if (payload_dir() / name).exists() else b""
    out["smoke/run.sh"] = env.get_template("smoke_run.sh.j2").render(ctx)
    stack = plan.stack.to_dict()
    stack["image"] = {"builder": plan.builder_image, "runtime": plan.runtime_image,
                      "labels": dict(plan.labels)}
    stack["layers"] = [{"name": la.name, "requirements": list(la.requirements),
                        "index_url": la.index_url} for la in plan.layers]
    stack.update(stack_extra or {})
    out["stack.json"] = json.dumps(stack, indent=2, sort_keys=False) + "\n"
    return out


def _context(plan: BuildPlan, steps: Steps) -> dict:
    return {"plan": plan, "steps": steps, "version": __version__, "cxx_wrapper": CXX_WRAPPER,
            "render_all": render_all,
            "stage_dir": APPTAINER_STAGE_DIR, "build_env_dir": APPTAINER_BUILD_ENV_DIR,
            "smoke_command": APPTAINER_SMOKE.format(sif="IMAGE.sif", home=plan.home)}


def _constraints(plan: BuildPlan, layer_requirements: Mapping[str, str]) -> str:
    """The pins of a locked plan's layer files (``name==version``, no hashes): the image's
    PIP_CONSTRAINT file."""
    pins: list[str] = []
    for text in layer_requirements.values():
        for line in text.splitlines():
            if line[:1].isalnum() and "==" in line:
                pins.append(line.split(";")[0].rstrip(" \\").strip())
    head = f"# {plan.target}: the versions of requirements.lock (PIP_CONSTRAINT in the image)\n"
    return head + "\n".join(sorted(dict.fromkeys(pins), key=str.lower)) + "\n"


# the output folder's writers live in envbuilder._fs (ownership manifest, atomic commit)
write_tree = _fs.write_tree
write_file_atomic = _fs.write_file_atomic
