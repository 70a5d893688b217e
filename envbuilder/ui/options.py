"""Every option that feeds a target's spec, declared once, and the decorator that adds a
group of them to a command and hands it one ``over`` (an ``envbuilder.api.Overrides``: the
command line's layer of the cascade, core.spec) instead of many parameters."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from envbuilder import SMOKE_TIMEOUT

def complete_target(incomplete: str) -> list[str]:
    """Shell completion: built-in targets, cuXYZ bases, the project's target names, parts."""
    from envbuilder.api import complete

    return complete("target", incomplete)


def complete_axis(incomplete: str) -> list[str]:
    from envbuilder.api import complete

    return complete("axis", incomplete)


def complete_flavour(incomplete: str) -> list[str]:
    from envbuilder.api import complete

    return complete("flavour", incomplete)


CASCADE = " (cascade: the command line > the project's target > the project > the defaults; see README: Which value wins)"

MatrixOpt = typer.Option(None, "--matrix", metavar="DIR",
                         help="A matrix folder to use instead of the built-in one (replaces it entirely).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document for machines.")
TorchOpt = typer.Option(None, "--torch", help="Pin torch: a line (2.1) or a version (2.1.2).")
PythonOpt = typer.Option(None, "--python", help="Pin Python, e.g. 3.10.")
DsOpt = typer.Option(None, "--deepspeed", help="Pin DeepSpeed (and include it).")
HvdOpt = typer.Option(None, "--horovod", help="Pin Horovod (and include it).")
NcclOpt = typer.Option(None, "--nccl", help="Pin NCCL (must be the one torch bundles).")
OsOpt = typer.Option(None, "--os", help="Pin the base OS, e.g. ubuntu22.04.")
DriverOpt = typer.Option(None, "--driver", help="The driver of the hosts the image must run on, e.g. 525.60.13.")
FlavourOpt = typer.Option(None, "--flavour", metavar="NAME", autocompletion=complete_flavour,
                          help="Runtime base flavour: cuda-base (default), cuda-runtime, cudnn-runtime or os.")
BackendOpt = typer.Option("auto", "--backend", help="auto, nccl or gloo.")
ShmOpt = typer.Option("2g", "--shm-size", help="The containers' /dev/shm size, e.g. 2g (NCCL's shared-memory transport needs room).")
SmokeTimeoutOpt = typer.Option(SMOKE_TIMEOUT, "--smoke-timeout", min=5,
                               help="Seconds before a collective of the smoke job counts as hung (smoke --timeout).")

# name -> (annotation, typer option, Overrides field or None for pins)
_OPTIONS: dict[str, tuple[Any, Any]] = {
    "torch": (Optional[str], TorchOpt), "python": (Optional[str], PythonOpt),
    "deepspeed": (Optional[str], DsOpt), "horovod": (Optional[str], HvdOpt),
    "nccl": (Optional[str], NcclOpt), "os_": (Optional[str], OsOpt),
    "driver": (Optional[str], DriverOpt),
    "with_": (Optional[List[str]], typer.Option(None, "--with", help="Include components: deepspeed,horovod.")),
    "without": (Optional[List[str]], typer.Option(None, "--without", help="Exclude components: deepspeed,horovod.")),
    "flavour": (Optional[str], FlavourOpt),
    "platform": (Optional[str], typer.Option(None, "--platform", help="The image's platform: linux/amd64 (default) or linux/arm64.")),
    "ds_ops": (Optional[str], typer.Option(None, "--ds-ops", metavar="OPS", help="DeepSpeed ops to pre-build, e.g. fused_adam,cpu_adam (default on CUDA: fused_adam,cpu_adam); none: JIT (needs nvcc in the runtime).")),
    "fabric": (Optional[str], typer.Option(None, "--fabric", metavar="FABRIC", help="RDMA user space in CUDA images and the job files' RDMA settings: ib (default: verbs, rdmacm, ibv_devinfo), efa (+ libfabric, aws-ofi-nccl), none.")),
    "matrix_overlay": (Optional[Path], typer.Option(None, "--matrix-overlay", metavar="DIR", help="A team's matrix folder whose entries are added to (or replace) the matrix's (default: the project's matrix_overlay).")),
    "requirements": (Optional[Path], typer.Option(None, "--requirements", help="The team's own requirements file, in a layer of its own and locked with the stack (default: the project's).")),
    "base_image": (Optional[str], typer.Option(None, "--base-image", help="The runtime base image (and the builder's, unless it is a CUDA devel image).")),
    "builder_image": (Optional[str], typer.Option(None, "--builder-image", metavar="IMAGE", help="The builder stage's image (a CUDA devel image when something compiles).")),
    "cuda_arch": (Optional[str], typer.Option(None, "--cuda-arch", metavar="LIST", help="Narrow the CUDA archs compiled code is built for, e.g. 8.0,9.0 (default: torch's own).")),
    "cpu_isa": (Optional[str], typer.Option(None, "--cpu-isa", metavar="ISA", help="-march of compiled CPU code (DeepSpeed CPU ops): x86-64-v3 (default), x86-64-v4, x86-64-v2.")),
    "pip_index_url": (Optional[str], typer.Option(None, "--pip-index-url", help="The package index (a PyPI mirror) to install and lock from (default: the project's).")),
    "extra_index_url": (Optional[List[str]], typer.Option(None, "--extra-index-url", help="Another package index to install and lock from; repeatable (default: the project's).")),
    "exclude_newer": (Optional[str], typer.Option(None, "--exclude-newer", metavar="DATE", help="Leave out releases and files uploaded after DATE (ISO date = 00:00 UTC, or a time): the resolver's candidates and uv's; recorded in the lock (default: the project's).")),
    "nproc": (Optional[int], typer.Option(None, "--nproc", min=1, help="Ranks of the smoke job (default 12, or the layouts'): job files for one node of N plus splits for 8- and 4-GPU nodes.")),
    "layout": (Optional[List[str]], typer.Option(None, "--layout", help="Job files for NNODESxNPROC_PER_NODE, e.g. 2x8 (repeat or comma-separate; one world size; default: the project's layouts).")),
    "image": (Optional[str], typer.Option(None, "--image", help="The image the jobs/ files run (default: REGISTRY:TAG, the project's registry, else envbuilder:TAG).")),
    "infiniband": (bool, typer.Option(False, "--infiniband", help="Job files request IPC_LOCK for RDMA.")),
    "min_busbw": (Optional[float], typer.Option(None, "--min-busbw", help="monitoring/ alerts when the smoke job's all-reduce busbw falls below this (GB/s).")),
    "registry": (Optional[str], typer.Option(None, "--registry", help="The repository tags go under and the job files pull REPO:<tag> from, as build --push REPO tags it (default: the project's registry, else the local envbuilder:<tag>).")),
}
GROUPS = {
    "pins": ("torch", "python", "deepspeed", "horovod", "nccl", "os_", "driver", "with_",
             "without", "flavour", "ds_ops", "platform", "fabric"),
    "overlay": ("matrix_overlay",),
    "requirements": ("requirements",),
    "images": ("base_image", "builder_image", "cuda_arch", "cpu_isa"),
    "index": ("pip_index_url", "extra_index_url"),
    "exclude_newer": ("exclude_newer",),
    "jobs": ("nproc", "layout", "image", "infiniband", "min_busbw"),
    "registry": ("registry",),
}
_FIELD = {"requirements": "requirements_file", "extra_index_url": "extra_index_urls",
          "layout": "layouts"}


def _split(value: Optional[str]) -> tuple[str, ...]:
    return tuple(a.strip() for a in (value or "").replace(";", ",").split(",") if a.strip())


def overrides(values: dict[str, Any]) -> Any:
    """The command line's values as an api.Overrides (pins merged per axis later)."""
    from envbuilder.api import Overrides, Pins

    pin_names = GROUPS["pins"]
    pin_kw: dict[str, Any] = {("os" if n == "os_" else n): (tuple(values[n] or ()) if n in ("with_", "without") else values[n])
                              for n in pin_names if n in values}
    pins = Pins(**pin_kw)
    kw: dict[str, Any] = {}
    for name, value in values.items():
        if name in pin_names:
            continue
        if name == "cuda_arch":
            value = _split(value)
        elif name in ("extra_index_url", "layout"):
            value = tuple(value or ())
        kw[_FIELD.get(name, name)] = value
    return Overrides(pins=pins, **kw)


def spec_options(*groups: str) -> Callable[[Callable], Callable]:
    """Add the options of ``groups`` (GROUPS) to a command that takes ``over``: the wrapper
    collects them into one Overrides."""
    names = [n for g in groups for n in GROUPS[g]]

    def deco(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.name != "over"]
        at = next((i for i, p in enumerate(params) if p.name in ("matrix", "as_json")), len(params))
        added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=_OPTIONS[n][1],
                                   annotation=_OPTIONS[n][0]) for n in names]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs["over"] = overrides({n: kwargs.pop(n, None) for n in names})
            return fn(*args, **kwargs)

        wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[:at]]
            + added + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[at:]])
        wrapper.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "over"}
        return wrapper

    return deco
