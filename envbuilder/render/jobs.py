"""Cluster job files for the smoke job: the same DDP check as ``smoke/run.sh``
(12 ranks unless ``render --nproc/--layout`` says otherwise), laid out
across nodes for Kubernetes (Kubeflow PyTorchJob, or an indexed batch/v1 Job with a headless
Service) and Slurm (Apptainer or pyxis/enroot).

Call ``envbuilder.jobs.render_jobs(plan, image=REF)``; it returns ``{"jobs/...": text}`` to merge
into ``envbuilder.render.render_files(plan)`` before ``write_tree`` (``render`` puts it in the
build folder as ``jobs/``). ``REF`` is the image as the cluster pulls it, by digest when known.

Layouts are NNODES x NPROC_PER_NODE (envbuilder.core.layouts: ``2x8``); each must multiply to
the plan's ``smoke_nproc``, so every file runs the same world size. Without ``layouts`` the
files cover ``default_layouts(smoke_nproc)``: one node plus the splits that fit 8- and 4-GPU
nodes (12 ranks: 1x12, 2x6, 3x4). ``jobs/layouts.json`` indexes them. A job file runs an even
layout (torchrun gives every node the same ``--nproc_per_node``): a 12-rank job on 8-GPU nodes is
2x6, six of each node's eight GPUs (``smoke IMAGE --nnodes 2 --layout 8,4``
tries an uneven split locally).

Every value that reaches a template is validated here (image references, names, quantities,
paths); the templates under ``templates/jobs/`` only format them (strings are emitted
JSON-quoted in YAML and shell-quoted in scripts).

How the launcher is wired, per format:

* PyTorchJob (kubeflow.org/v1, no ``elasticPolicy``): the training operator gives every pod
  MASTER_ADDR/MASTER_PORT (the Master's Service and the container port named
  ``pytorchjob-port``), RANK = the node rank (Master 0, Worker i -> i+1), WORLD_SIZE, and the
  torchrun variables PET_NNODES, PET_NPROC_PER_NODE (from ``spec.nprocPerNode``) and
  PET_NODE_RANK. We still pass ``--nnodes/--nproc_per_node/--node_rank=$(RANK)/--master_addr/
  --master_port`` explicitly: older operators set only MASTER_*/RANK/WORLD_SIZE, and torchrun
  reads only PET_-prefixed variables, not MASTER_ADDR. The rendezvous is torchrun's static one
  (its default), which is what the operator's environment describes.
* Indexed Job: pod ``<job>-<i>`` is reachable as ``<job>-<i>.<service>``; every pod runs a c10d
  rendezvous hosted by pod 0 on port 29400 with ``--rdzv_id=<job>``.
* Slurm: one task per node, torchrun with a c10d rendezvous on the first host of the allocation.

Kubernetes ``args`` (not ``command``) are set so the image's ENTRYPOINT
(``/opt/envbuilder/bin/entrypoint.sh``, which picks NCCL/Gloo interface defaults) still runs;
the Slurm scripts call that entrypoint explicitly because ``apptainer exec`` and pyxis do not.
torchrun's flags are spelled with underscores, which every torch 2.x accepts (the hyphenated
aliases are newer than some torch versions in the matrix).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import PurePosixPath
from typing import Any, Iterable

from envbuilder import SMOKE_TIMEOUT, __version__
from envbuilder.core import validate
from envbuilder.core import layouts as lay_mod
from envbuilder.errors import InputError
from envbuilder.render.plan import BuildPlan
from envbuilder.core.resources import templates_dir
from envbuilder.render.bccache import environment

DEFAULT_LAYOUTS: tuple[tuple[int, int], ...] = ((1, 12), (2, 6), (3, 4))  # default_layouts(12)
MASTER_PORT = 23456  # the training operator's default for the port named pytorchjob-port
RDZV_PORT = 29400  # torchrun's c10d rendezvous port
CONTAINER = "pytorch"  # the container name the training operator looks for
OUT_DIR = "/tmp/envbuilder-smoke"

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_SIF = re.compile(r"^[A-Za-z0-9_./+-]+$")
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9._/:@#+=-]+$")  # needs no quoting inside "..."
_NAME_MAX = 40  # leaves room for "-worker-NN" / "-NN" suffixes within DNS label limits (63)


def _q(value) -> str:
    """A YAML double-quoted scalar (JSON string syntax is valid YAML): what json.dumps gives
    for a string, from json's C string encoder directly (the job files quote thousands)."""
    return _json_str(str(value))


_json_str = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


def _sh(value) -> str:
    return shlex.quote(str(value))


def _env():
    return environment(("jobs",), _make_env)


def _make_env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False, trim_blocks=True, lstrip_blocks=True)
    env.filters["q"] = _q
    env.filters["sh"] = _sh
    return env


def job_name(target: str, nnodes: int, nproc: int, prefix: str = "smoke") -> str:
    """A DNS-1035 name for a layout's job, e.g. smoke-cu121-ds-2x6."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{prefix}-{target}".lower()).strip("-")
    base = re.sub(r"-+", "-", base)
    suffix = f"-{nnodes}x{nproc}"
    base = base[: _NAME_MAX - len(suffix)].rstrip("-")
    name = base + suffix
    if not _DNS1035.fullmatch(name):
        raise InputError(f"cannot derive a Kubernetes name from target {target!r}: got {name!r}")
    return name


def check_layouts(layouts: Iterable[Iterable[int]], world: int) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for lay in layouts:
        try:
            n, p = (int(x) for x in lay)
        except (TypeError, ValueError):
            raise InputError(f"layout {lay!r} is not NNODES x NPROC_PER_NODE, e.g. (2, 6)") from None
        lay_mod.check(n, p, "layout")
        if n * p != world:
            raise InputError(f"layout {n}x{p} runs {n * p} ranks, the smoke job is {world}: "
                             f"choose NNODES x NPROC_PER_NODE = {world}")
        if (n, p) in out:
            raise InputError(f"layout {n}x{p} is given twice")
        out.append((n, p))
    if not out:
        raise InputError("no layouts given: e.g. (1, 12), (2, 6), (3, 4)")
    return tuple(out)


def _labels(plan: BuildPlan, name: str, layout: str) -> dict[str, str]:
    # envbuilder.io/layout: dashboards join DCGM's per-pod GPU series to the smoke layout
    labels = {"app.kubernetes.io/name": "envbuilder-smoke",
              "app.kubernetes.io/part-of": "envbuilder",
              "app.kubernetes.io/instance": name,
              "envbuilder.io/tag": plan.stack.tag,
              "envbuilder.io/layout": layout}
    for k, v in labels.items():
        if len(v) > 63 or not _LABEL_VALUE.fullmatch(v):
            raise InputError(f"label {k}={v!r} is not a Kubernetes label value (63 characters "
                             f"of letters, digits, '-', '_', '.')")
    return labels


def _fits(per_node: int) -> str:
    """Which common node sizes a layout's per-node GPU count fits, for the README."""
    sizes = [str(s) for s in (4, 8, 16) if per_node <= s]
    return f"{', '.join(sizes)}-GPU nodes" if sizes else f"nodes of {per_node}+ GPUs"


def _pyxis_ref(image: str) -> str:
    """docker reference -> pyxis/enroot's [REGISTRY#]IMAGE[:TAG] form (a registry host is
    separated by '#', not '/')."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity_bytes(q: str) -> int:
    """A Kubernetes memory quantity (``16Gi``, ``512M``, ``1.5Gi``) in bytes."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", q)
    if not m:
        raise InputError(f"{q!r} is not a quantity such as 16Gi")
    return int(float(m.group(1)) * _UNITS[m.group(2) or ""])


def pod_memory(shm_size: str, nproc: int, mem_per_proc: str) -> str:
    """The memory a smoke pod requests (and is limited to): its memory-backed /dev/shm, which
    counts against the pod's memory, plus ``mem_per_proc`` for each rank; in Mi, rounded up."""
    total = quantity_bytes(shm_size) + nproc * quantity_bytes(mem_per_proc)
    return f"{-(-total // 2**20)}Mi"


def render_jobs(plan: BuildPlan, *, image: str,
                layouts: Iterable[Iterable[int]] | None = None,
                gpus: bool = True, infiniband: bool = False,
                apptainer_image: str | None = None, timeout: int = SMOKE_TIMEOUT,
                shm_size: str = "16Gi", cpus_per_proc: int = 4, mem_per_proc: str = "4Gi",
                time_limit_min: int = 30) -> dict[str, str]:
    """Every file of the ``jobs/`` folder, as relative path -> content.

    ``image``: the image reference the cluster pulls (by digest when known).
    ``layouts``: (NNODES, NPROC_PER_NODE) pairs of ``plan.smoke_nproc`` ranks (default
    ``default_layouts(plan.smoke_nproc)``).
    ``gpus``: request ``nvidia.com/gpu`` (Kubernetes) / ``--gpus-per-node`` (Slurm) and use the
    ``auto`` backend (NCCL); without, the job runs on CPUs with gloo.
    ``infiniband``: add the IPC_LOCK capability (RDMA memory registration). A CUDA plan's
    fabric (``--fabric``, default ib) turns it on by itself: the image's RDMA user space and
    the job files' RDMA settings come from one flag; ``--infiniband`` with ``--fabric none``
    is refused (exit 3).
    Each pod requests ``cpus_per_proc`` CPUs per rank and memory for its ``shm_size`` of
    memory-backed /dev/shm plus ``mem_per_proc`` per rank (the memory limit is the same, CPU is
    not limited: Burstable QoS, not BestEffort).
    ``apptainer_image``: the SIF the Apptainer scripts run (default ``<tag>.sif``; the scripts
    also read ``ENVBUILDER_SIF``). ``timeout``: the smoke job's process-group timeout (s).
    """
    from envbuilder.core.smoke_metrics import JOB

    validate.image_ref(image, "--image")
    fabric = getattr(plan, "fabric", "none")
    if infiniband and fabric == "none" and plan.stack.toolkit is not None:
        from envbuilder.errors import IncompatibleError

        raise IncompatibleError("--infiniband sets the job files up for RDMA but --fabric none "
                                "leaves the RDMA user space (libibverbs, rdmacm) out of the "
                                "image: NCCL would fall back to sockets; drop --fabric none")
    infiniband = bool(infiniband) or fabric in ("ib", "efa")
    world = int(plan.smoke_nproc)
    lays = check_layouts(lay_mod.default_layouts(world) if layouts is None else layouts, world)
    if not isinstance(timeout, int) or not 10 <= timeout <= 3600:
        raise InputError(f"timeout {timeout!r} must be 10..3600 seconds")
    if not isinstance(shm_size, str) or not _QUANTITY.fullmatch(shm_size):
        raise InputError(f"shm size {shm_size!r} is not a quantity such as 16Gi")
    if not isinstance(mem_per_proc, str) or not _QUANTITY.fullmatch(mem_per_proc):
        raise InputError(f"memory per process {mem_per_proc!r} is not a quantity such as 4Gi")
    if not isinstance(cpus_per_proc, int) or not 1 <= cpus_per_proc <= 64:
        raise InputError(f"cpus per process {cpus_per_proc!r} must be 1..64")
    if not isinstance(time_limit_min, int) or not 5 <= time_limit_min <= 24 * 60:
        raise InputError(f"time limit {time_limit_min!r} must be 5..1440 minutes")
    sif = apptainer_image or f"{plan.stack.tag}.sif"
    if not _SIF.fullmatch(sif) or sif.startswith("-"):
        raise InputError(f"apptainer image {sif!r} must be a path of letters, digits and ._/+-")
    for what, v in (("apptainer image", sif), ("image", image), ("image", _pyxis_ref(image))):
        if not _SHELL_SAFE.fullmatch(v):  # image_ref and _SIF admit only these; keep it so
            raise InputError(f"{what} {v!r} has characters a job script cannot carry")
    home = str(PurePosixPath(plan.home))
    validate.env_pair("HOME", home, "image home")
    smoke = f"{home}/smoke/ddp_smoke.py"
    entrypoint = f"{home}/bin/entrypoint.sh"
    backend = "auto" if gpus else "gloo"

    env = _env()
    base = {"version": __version__, "target": plan.target, "tag": plan.stack.tag,
            "image": image, "gpus": bool(gpus), "infiniband": bool(infiniband),
            "shm_size": shm_size, "timeout": timeout, "backend": backend, "world": world,
            "smoke": smoke, "entrypoint": entrypoint, "uid": int(plan.uid),
            "out_dir": OUT_DIR, "master_port": MASTER_PORT, "rdzv_port": RDZV_PORT,
            "container": CONTAINER, "sif": sif, "pyxis_image": _pyxis_ref(image),
            "cpus_per_proc": cpus_per_proc, "time_limit": f"{time_limit_min // 60:02d}:"
                                                          f"{time_limit_min % 60:02d}:00",
            "deadline": timeout * 4 + 600, "metrics_job": JOB}
    files: dict[str, str] = {}
    entries: list[dict[str, Any]] = []
    for n, p in lays:
        lay = f"{n}x{p}"
        name = job_name(plan.target, n, p)
        svc = name  # the indexed Job's headless Service shares its name
        smoke_args = [smoke, "--backend", backend, "--timeout", str(timeout), "--out", OUT_DIR]
        ptj_args = ["torchrun", f"--nnodes={n}", f"--nproc_per_node={p}",
                    "--node_rank=$(RANK)", "--master_addr=$(MASTER_ADDR)",
                    "--master_port=$(MASTER_PORT)", "--max_restarts=0", *smoke_args]
        job_args = ["torchrun", f"--nnodes={n}", f"--nproc_per_node={p}",
                    "--node_rank=$(JOB_COMPLETION_INDEX)", "--rdzv_backend=c10d",
                    f"--rdzv_endpoint={name}-0.{svc}:{RDZV_PORT}", f"--rdzv_id={name}",
                    "--max_restarts=0", *smoke_args]
        ctx = dict(base, nnodes=n, nproc=p, layout=lay, name=name, service=svc,
                   labels=_labels(plan, name, lay), ptj_args=ptj_args, job_args=job_args,
                   cpus=p * cpus_per_proc, memory=pod_memory(shm_size, p, mem_per_proc))
        for kind, tpl in (("pytorchjob", "jobs/pytorchjob.yaml.j2"),
                          ("indexed-job", "jobs/indexed-job.yaml.j2"),
                          ("slurm-apptainer", "jobs/slurm.sbatch.j2"),
                          ("slurm-pyxis", "jobs/slurm.sbatch.j2")):
            ext = "sbatch" if kind.startswith("slurm") else "yaml"
            rel = f"jobs/{kind}-{lay}.{ext}"
            files[rel] = env.get_template(tpl).render(
                ctx, file=rel, runtime="pyxis" if kind == "slurm-pyxis" else "apptainer")
        entries.append({"layout": lay, "nnodes": n, "nproc": p, "name": name,
                        "fits": _fits(p),
                        "files": [f"jobs/{k}-{lay}.{'sbatch' if k.startswith('slurm') else 'yaml'}"
                                  for k in ("pytorchjob", "indexed-job", "slurm-apptainer",
                                            "slurm-pyxis")]})
    # the README's commands show a multi-node layout when there is one (2x6 by default)
    example = next((e for e in entries if e["layout"] == "2x6"),
                   next((e for e in entries if e["nnodes"] > 1), entries[0]))
    try:  # a valid --layout of this world size with several layouts, for the README
        others = ",".join(lay_mod.fmt(x) for x in lay_mod.default_layouts(world))
    except InputError:
        others = f"1x{world}"
    files["jobs/README.md"] = env.get_template("jobs/README.md.j2").render(
        base, layouts=entries, example=example, other_example=others)
    files["jobs/layouts.json"] = json.dumps(
        {"world_size": world, "gpus": bool(gpus), "image": image,
         "layouts": [{k: e[k] for k in ("layout", "nnodes", "nproc", "name", "files")}
                     for e in entries]}, indent=2) + "\n"
    return files


def as_yaml_documents(text: str) -> list[dict]:
    """Parse a rendered YAML file into its documents (tests, and callers that post-process)."""
    import yaml

    return [d for d in yaml.safe_load_all(text) if d is not None]


__all__ = ["render_jobs", "job_name", "check_layouts", "DEFAULT_LAYOUTS", "as_yaml_documents"]
