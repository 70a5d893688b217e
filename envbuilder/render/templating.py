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
from envbuilder.render.bccache import environment
from envbuilder.render.plan import (CXX_WRAPPER, EFA_APT_BUILD, OFI_NCCL_PREFIX, OFI_NCCL_SHA256,
                                    OFI_NCCL_URL, PIP_TOOLKIT_DIR, BuildPlan, PipLayer)
from envbuilder.core import validate
from envbuilder.core.resources import payload_dir, templates_dir



@dataclass(frozen=True)
class Steps:
    """The commands of a plan, as lists of shell lines (joined with && by the Dockerfile)."""

    builder_system: list[str]
    runtime_system: list[str]
    runtime_system_apptainer: list[str]
    layer_files: dict[str, list[str]]
    layer_install: dict[str, list[str]]
    layer_install_apptainer: dict[str, list[str]]
    fabric_build: list[str]  # EFA: AWS's OFI NCCL plugin, built after the torch layer
    fabric_runtime: list[str]  # EFA: the plugin on the loader's path in the runtime stage


def _q(s: str) -> str:
    return shlex.quote(s)


def _apt(packages: list[str] | tuple[str, ...]) -> list[str]:
    return ["apt-get update",
            "apt-get install -y --no-install-recommends " + " ".join(_q(p) for p in packages),
            "rm -rf /var/lib/apt/lists/*"]


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
    py = plan.python
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
    builder += _apt(plan.builder_apt)
    builder += ["update-ca-certificates", f"python{py} -m venv {plan.venv}"]
    if plan.builder.pip_toolkit:
        # NVIDIA's CUDA 13 wheels carry nvcc; composed into one CUDA_HOME (nvcc.profile links
        # from lib64, torch's extensions link -lcudart): builder stage only
        home = plan.builder.cuda_home
        builder += [f"{plan.venv}/bin/pip install --no-cache-dir --no-deps --index-url \"${{PIP_INDEX_URL}}\" "
                    f"--target {PIP_TOOLKIT_DIR} " + " ".join(_q(p) for p in plan.builder.pip_toolkit),
                    f"ln -s lib {home}/lib64", f"ln -s libcudart.so.13 {home}/lib/libcudart.so",
                    f"{home}/bin/nvcc --version"]

    runtime_pkgs = [p for p in plan.python_apt if not p.endswith("-venv")]
    user = [f"if getent passwd {plan.uid} >/dev/null; then userdel --remove \"$(getent passwd {plan.uid} | cut -d: -f1)\"; fi",
            f"useradd --no-log-init --create-home --uid {plan.uid} --shell /bin/bash {plan.user}"]
    # the fabric's RDMA user space (verbs, providers, rdmacm, ibv_devinfo) with the runtime's
    # own packages: one apt layer
    runtime_pkgs += list(plan.rdma_apt)
    runtime = _apt(runtime_pkgs) + user
    runtime_app = _apt(runtime_pkgs)  # Apptainer runs as the calling user: no account needed
    fabric_build, fabric_runtime = _efa_steps(plan)

    files: dict[str, list[str]] = {}
    install: dict[str, list[str]] = {}
    install_app: dict[str, list[str]] = {}
    # a lock is the whole environment, placed in layers (lock.requirements.split_by_layer):
    # each layer installs exactly its own entries
    hashes = ["--no-deps", "--require-hashes"] if plan.hashes else []
    for i, layer in enumerate(plan.layers):
        src = " ".join(_pip_source(plan, layer))
        req = f"/tmp/envbuilder/{layer.name}.txt"
        pip = f"pip install --no-cache-dir {src}"
        if i == 0:
            files[layer.name] = [layer.file]
            cmds = [f"{pip} {' '.join(hashes)} -r {req}".replace("  ", " ")]
            install[layer.name] = cmds + ["rm -rf /tmp/envbuilder"]
            install_app[layer.name] = cmds
            continue
        constraints = [] if plan.hashes else ["-c /tmp/envbuilder/constraints.txt"]
        freeze = [] if plan.hashes else ["pip freeze > /tmp/envbuilder/constraints.txt"]
        if not layer.build_requirements and not layer.no_build_isolation:
            # a team's own packages (the team layer): plain installs, with what the layers
            # before it hold as constraints (nothing below is upgraded or replaced)
            files[layer.name] = [layer.file, "files/collect-layer.sh"]
            core = [*freeze, " ".join([pip, *hashes, *constraints, "-r", req])]
        else:
            build_req = f"/tmp/envbuilder/{layer.name}.build.txt"
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
        install[layer.name] = (["touch /tmp/envbuilder/stamp"] + core +
                               [f"sh /tmp/envbuilder/collect-layer.sh /tmp/envbuilder/stamp "
                                f"{plan.venv} /opt/layers/{layer.name}", "rm -rf /tmp/envbuilder"])
        install_app[layer.name] = core
    return Steps(builder, runtime, runtime_app, files, install, install_app, fabric_build,
                 fabric_runtime)


def _efa_steps(plan: BuildPlan) -> tuple[list[str], list[str]]:
    """--fabric efa: build AWS's OFI NCCL plugin from its pinned, checksummed release tarball
    against the OS's libfabric and the CUDA runtime headers of torch's nvidia wheel (in the
    venv), into OFI_NCCL_PREFIX; the runtime puts its lib on the loader's path (NCCL opens
    libnccl-net.so by name)."""
    if plan.fabric != "efa":
        return [], []
    src, tgz = "/tmp/aws-ofi-nccl", "/tmp/aws-ofi-nccl.tar.gz"
    cuda = (f'cuda="$(dirname "$(dirname "$(find {plan.site_packages}/nvidia -path '
            "'*/include/cuda_runtime_api.h' | head -n 1)\")\")\"")
    build = _apt(EFA_APT_BUILD) + [
        f"curl -fsSL -o {tgz} {_q(OFI_NCCL_URL)}",
        f'echo "{OFI_NCCL_SHA256}  {tgz}" | sha256sum -c -',
        f"mkdir -p {src}", f"tar -xzf {tgz} -C {src} --strip-components=1",
        cuda,
        f'env -C {src} ./configure --prefix={OFI_NCCL_PREFIX} --with-libfabric=/usr '
        f'--with-cuda="$cuda" --disable-tests',
        f'make -C {src} -j"$(nproc)"', f"make -C {src} install",
        f"rm -rf {src} {tgz}"]
    runtime = [f"echo {OFI_NCCL_PREFIX}/lib > /etc/ld.so.conf.d/aws-ofi-nccl.conf", "ldconfig"]
    return build, runtime


# -- the output folder ----------------------------------------------------------------------

def _env(extra_dir: Path | None = None):
    return environment(("build", None if extra_dir is None else str(extra_dir)),
                       lambda: _make_env(extra_dir))


def _make_env(extra_dir: Path | None):
    import jinja2

    loaders: list = []
    if extra_dir is not None:
        loaders.append(jinja2.FileSystemLoader(str(extra_dir)))
    loaders.append(jinja2.FileSystemLoader(str(templates_dir())))
    return jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


def render_files(plan: BuildPlan, *, layer_requirements: Mapping[str, str] | None = None,
                 template_dir: Path | None = None,
                 stack_extra: Mapping[str, object] | None = None) -> dict[str, str | bytes]:
    """Every file of the build folder, as relative path -> content; ``stack_extra`` adds
    entries to stack.json (the lock's digest, the smoke layouts: envbuilder.assemble)."""
    env = _env(template_dir)
    steps = make_steps(plan)
    ctx = {"plan": plan, "steps": steps, "version": __version__, "cxx_wrapper": CXX_WRAPPER,
           "fabric_prefix": OFI_NCCL_PREFIX}
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
    if plan.builder.cpu_isa:
        out["files/cxx-isa.sh"] = (templates_dir() / "files" / "cxx-isa.sh").read_text()
    out["smoke/ddp_smoke.py"] = (payload_dir() / "ddp_smoke.py").read_bytes() \
        if (payload_dir() / "ddp_smoke.py").exists() else b""
    out["smoke/run.sh"] = env.get_template("smoke_run.sh.j2").render(ctx)
    stack = plan.stack.to_dict()
    stack["image"] = {"builder": plan.builder_image, "runtime": plan.runtime_image,
                      "labels": dict(plan.labels)}
    stack["layers"] = [{"name": la.name, "requirements": list(la.requirements),
                        "index_url": la.index_url} for la in plan.layers]
    stack.update(stack_extra or {})
    out["stack.json"] = json.dumps(stack, indent=2, sort_keys=False) + "\n"
    return out


# the output folder's writers live in envbuilder._fs (ownership manifest, atomic commit)
write_tree = _fs.write_tree
write_file_atomic = _fs.write_file_atomic
