"""The format-neutral build plan: one description that the Dockerfile and the Apptainer
definition are two views of.

A plan says which images to start from, which OS packages and Python to install, which Python
packages go into which layer (torch first, then Horovod, then DeepSpeed, so bumping DeepSpeed
never rebuilds torch), the environment, the labels, the files to copy and the smoke command.
Everything in it is validated data: templates only format it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from packaging.version import Version

from envbuilder import labels as image_labels
from envbuilder.core import validate
from envbuilder.errors import InputError
from envbuilder.core.resolve import PYPI, Stack

VENV = "/opt/venv"
HOME = "/opt/envbuilder"
USER = "envbuilder"
UID = 1000

# Defaults a user overrides with `docker run -e` / `apptainer --env`: the Dockerfile sets them
# with ENV, Apptainer's %environment with ${VAR:-default}. NCCL_SOCKET_IFNAME and
# GLOO_SOCKET_IFNAME are chosen at container start by files/nccl-defaults.sh (exclude docker0,
# lo and veth when another interface exists; use lo when it is the only one).
RUNTIME_ENV: dict[str, str] = {
    "NCCL_DEBUG": "WARN",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


@dataclass(frozen=True)
class PipLayer:
    """One group of Python packages installed in its own stage and layer."""

    name: str  # torch | horovod | deepspeed
    requirements: tuple[str, ...]  # PEP 508 lines, e.g. "torch==2.5.1"
    index_url: str | None  # None: the PIP_INDEX_URL build argument
    extra_index_url: bool = True  # also look at PIP_INDEX_URL (deps not on the torch index)
    build_env: Mapping[str, str] = field(default_factory=dict)
    no_build_isolation: bool = False  # builds that import torch (Horovod, DeepSpeed)

    @property
    def stage(self) -> str:
        return f"layer-{self.name}"

    @property
    def file(self) -> str:
        return f"requirements/{self.name}.txt"


@dataclass(frozen=True)
class BuildPlan:
    target: str
    stack: Stack
    builder_image: str
    runtime_image: str
    os_family: str
    python: str
    python_apt: tuple[str, ...]  # runtime apt packages for Python
    builder_apt: tuple[str, ...]  # builder apt packages (Python dev, compilers)
    ppa: str | None  # e.g. ppa:deadsnakes/ppa
    layers: tuple[PipLayer, ...]
    env: Mapping[str, str]
    labels: Mapping[str, str]
    wheelhouse: bool = False  # install offline from wheels/ in the build context
    hashes: bool = False  # requirements files carry hashes: --require-hashes
    pip_index_url: str = PYPI
    extra_index_urls: tuple[str, ...] = ()
    venv: str = VENV
    home: str = HOME
    user: str = USER
    uid: int = UID
    smoke_nproc: int = 12

    @property
    def torch_layer(self) -> PipLayer:
        return self.layers[0]

    @property
    def extra_layers(self) -> tuple[PipLayer, ...]:
        return self.layers[1:]

    def requirements_in(self) -> str:
        lines = [f"# {self.target}: the top-level requirements envbuilder resolved",
                 f"# (lock them with: envbuilder lock {self.target})"]
        for layer in self.layers:
            lines += list(layer.requirements)
        return "\n".join(lines) + "\n"


def make_plan(stack: Stack, *, base_image: str | None = None, builder_image: str | None = None,
              pip_index_url: str | None = None, extra_index_urls: tuple[str, ...] = (),
              wheelhouse: bool = False, hashes: bool = False,
              labels: Mapping[str, str] | None = None, smoke_nproc: int = 12) -> BuildPlan:
    """Turn a resolved stack and the build options into a plan."""
    if base_image is not None:
        validate.image_ref(base_image, "--base-image")
    if builder_image is not None:
        validate.image_ref(builder_image, "--builder-image")
    index = validate.url(pip_index_url, "--pip-index-url") if pip_index_url else PYPI
    extras = tuple(validate.url(u, "--extra-index-url") for u in extra_index_urls)

    m = stack.matrix
    os_py = stack.os.python.get(stack.python)
    if os_py is None:  # the resolver's os_python rule makes this unreachable
        raise InputError(f"{stack.os.name} cannot install Python {stack.python}")
    py = stack.python
    compiles = stack.compiles
    builder_apt = [*os_py.packages, "ca-certificates"]
    if compiles:
        builder_apt += [f"python{py}-dev", "build-essential", "git"]
    if stack.horovod is not None:
        builder_apt += ["cmake"]

    # numpy belongs with torch: torch.distributed's object collectives (all_gather_object,
    # broadcast_object_list) fail with "Numpy is not available" without it (found by the smoke
    # job). Wheels before torch 2.3 were built against NumPy 1.x and break under NumPy 2
    # (https://github.com/pytorch/pytorch/issues/107302, fixed for 2.3: https://github.com/pytorch/pytorch/releases/tag/v2.3.0).
    numpy = "numpy" if stack.torch.version >= Version("2.3") else "numpy<2"
    torch_req = [f"torch=={stack.torch.version}", numpy]
    torch_index = None if wheelhouse else stack.torch_index
    if torch_index == PYPI or torch_index == index:
        torch_index = None
    layers = [PipLayer("torch", tuple(torch_req), torch_index,
                       extra_index_url=torch_index is not None)]
    gpu = stack.toolkit is not None
    if stack.horovod is not None:
        env = dict(m.horovod.build_env)
        env.setdefault("HOROVOD_WITH_PYTORCH", "1")
        env.update({"HOROVOD_WITHOUT_TENSORFLOW": "1", "HOROVOD_WITHOUT_MXNET": "1",
                    "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1"})
        if not gpu:
            env.pop("HOROVOD_GPU_OPERATIONS", None)
        layers.append(PipLayer("horovod", (f"horovod=={stack.horovod.version}",), None,
                               build_env=env, no_build_isolation=True))
    if stack.deepspeed is not None:
        arch = ";".join(_arch_list(stack.torch_variant.arch))
        env = {"DS_BUILD_OPS": "0"}
        if gpu:
            # pre-build the ops a ZeRO training step needs; the rest JIT-compile where nvcc exists
            env.update({"DS_BUILD_FUSED_ADAM": "1", "DS_BUILD_CPU_ADAM": "1",
                        "TORCH_CUDA_ARCH_LIST": arch})
        layers.append(PipLayer("deepspeed", (f"deepspeed=={stack.deepspeed.version}",), None,
                               build_env=env, no_build_isolation=True))
    for layer in layers:
        for k, v in layer.build_env.items():
            validate.env_pair(k, v, "build environment")

    return BuildPlan(
        target=stack.target,
        stack=stack,
        builder_image=builder_image or base_image or stack.builder_image,
        runtime_image=base_image or stack.runtime_image,
        os_family=stack.os.family,
        python=py,
        python_apt=tuple(os_py.packages),
        builder_apt=tuple(dict.fromkeys(builder_apt)),
        ppa=os_py.ppa,
        layers=tuple(layers),
        env=dict(RUNTIME_ENV),
        labels=_labels(stack, labels or {}, base_image),
        wheelhouse=wheelhouse,
        hashes=hashes,
        pip_index_url=index,
        extra_index_urls=extras,
        smoke_nproc=smoke_nproc,
    )


def _arch_list(arch: tuple[str, ...]) -> list[str]:
    """torch's sm_86 / compute_90 names -> TORCH_CUDA_ARCH_LIST entries 8.6 / 9.0+PTX."""
    out = []
    for a in arch:
        kind, num = a.split("_", 1)
        digits = "".join(ch for ch in num if ch.isdigit())
        suffix = num[len(digits):]
        v = f"{digits[:-1]}.{digits[-1]}{suffix}"
        out.append(v + "+PTX" if kind == "compute" else v)
    return out or ["7.0", "8.0", "9.0"]


def _labels(stack: Stack, extra: Mapping[str, str], base_image: str | None = None) -> dict[str, str]:
    return image_labels.write(stack, extra, base_image)
