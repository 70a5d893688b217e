"""Cluster job files for the smoke job and the team's own command: the same DDP check as
``smoke/run.sh`` (12 ranks unless ``render --nproc/--layout`` says otherwise), laid out across
nodes for Kubernetes (a Kubeflow Trainer v2 TrainJob, a JobSet, an indexed batch/v1 Job with a
headless Service; the kubeflow.org/v1 PyTorchJob only as ``legacy``) and Slurm (Apptainer,
pyxis/enroot, or nodes whose slurmd runs in the image: ``slurm-host``).

Call ``envbuilder.jobs.render_jobs(plan, image=REF, jobs=JobsConfig)``; it returns
``{"jobs/...": text}`` to merge into ``envbuilder.render.render_files(plan)`` before
``write_tree`` (``render`` puts it in the build folder as ``jobs/``). ``REF`` is the image as
the cluster pulls it, by digest when known (``build --push --context`` rewrites the files with
it). ``JobsConfig`` (envbuilder.core.jobs, the project's ``[jobs]`` table) tailors them: the
Kubernetes kinds, Kueue queue, priority class, node selector, tolerations, pull secrets, device
resources, hostNetwork, env, Slurm partition/account/QoS/time/constraint, and ``command``: the
``train-*`` files run it with each layout's torchrun and rendezvous settings.

Layouts are NNODES x NPROC_PER_NODE (envbuilder.core.layouts: ``2x8``); each must multiply to
the plan's ``smoke_nproc``, so every file runs the same world size. Without ``layouts`` the
files cover ``default_layouts(smoke_nproc)``: one node plus the splits that fit 8- and 4-GPU
nodes (12 ranks: 1x12, 2x6, 3x4). ``jobs/layouts.json`` indexes them. A job file runs an even
layout (torchrun gives every node the same ``--nproc_per_node``): a 12-rank job on 8-GPU nodes is
2x6, six of each node's eight GPUs (``smoke IMAGE --nnodes 2 --layout 8,4``
tries an uneven split locally).

Every value that reaches a template is validated here or in core.jobs (image references, names,
quantities, label keys, paths, the command's words); the templates under ``templates/jobs/``
only format them: every value goes through the one YAML emitter (``render.yamlemit``): a
string is a double-quoted YAML scalar (``| q``) or a shell word (``| sh``), and any other value
a template prints (in a comment, say) is escaped onto its line, so nothing a value holds (a
U+2028, a C1 control, an emoji) can end a comment, add a key or a document, or break a parser.

How the launcher is wired, per format:

* PyTorchJob (kubeflow.org/v1, no ``elasticPolicy``): the training operator gives every pod
  MASTER_ADDR/MASTER_PORT (the Master's Service and the container port named
  ``pytorchjob-port``), RANK = the node rank (Master 0, Worker i -> i+1), WORLD_SIZE, and the
  torchrun variables PET_NNODES, PET_NPROC_PER_NODE (from ``spec.nprocPerNode``) and
  PET_NODE_RANK. We still pass ``--nnodes/--nproc_per_node/--node_rank=$(RANK)/--master_addr/
  --master_port`` explicitly: older operators set only MASTER_*/RANK/WORLD_SIZE, and torchrun
  reads only PET_-prefixed variables, not MASTER_ADDR. The rendezvous is torchrun's static one
  (its default), which is what the operator's environment describes.
* TrainJob (trainer.kubeflow.org/v1alpha1, on a ClusterTrainingRuntime such as
  ``torch-distributed``): the runtime makes a JobSet and sets PET_NNODES, PET_NPROC_PER_NODE,
  PET_NODE_RANK and PET_MASTER_ADDR/PORT, which torchrun reads: the files pass only
  ``--max_restarts=0``. What the runtime's pod lacks goes in one ``runtimePatches`` entry.
* JobSet (jobset.x-k8s.io/v1alpha2): pod i is ``<job>-node-<i>-0.<job>`` (enableDNSHostnames);
  c10d rendezvous on pod 0, port 29400.
* Indexed Job: pod ``<job>-<i>`` is reachable as ``<job>-<i>.<service>``; every pod runs a c10d
  rendezvous hosted by pod 0 on port 29400 with ``--rdzv_id=<job>``.
* Slurm: one task per node, torchrun with a c10d rendezvous on the first host of the allocation.

Kubernetes ``args`` (not ``command``; a TrainJob's ``command`` names it first) are set so the image's ENTRYPOINT
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
from pathlib import Path
from typing import Any, Iterable, Mapping

from envbuilder import SMOKE_TIMEOUT, __version__
from envbuilder.core import validate
from envbuilder.core import layouts as lay_mod
from envbuilder.core.jobs import JobsConfig
from envbuilder.errors import InputError
from envbuilder.components import registry
from envbuilder.components.base import Component
from envbuilder.render.plan import BuildPlan
from envbuilder.render import precompiled, yamlemit
from envbuilder.render.bccache import environment

DEFAULT_LAYOUTS: tuple[tuple[int, int], ...] = ((1, 12), (2, 6), (3, 4))  # default_layouts(12)
MASTER_PORT = 23456  # the training operator's default for the port named pytorchjob-port
RDZV_PORT = 29400  # torchrun's c10d rendezvous port
CONTAINER = "pytorch"  # the container name the training operator looks for
OUT_DIR = "/tmp/envbuilder-smoke"

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?\Z")
_SIF = re.compile(r"^[A-Za-z0-9_./+-]+\Z")
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9._/:@#+=-]+\Z")  # needs no quoting inside "..."
_NAME_MAX = 40  # leaves room for "-worker-NN" / "-NN" suffixes within DNS label limits (63)


def _sh(value: Any) -> Any:
    """A shell word (emitted: the template prints it as it is)."""
    return yamlemit.emitted(shlex.quote(str(value)))


def _env():
    return environment(("jobs",), lambda: make_env(precompiled.loader("jobs")))


def make_env(loader):
    """The environment of the job files' templates (precompiled.SETS declares its options):
    every value through the one YAML emitter (render.yamlemit): `q` quotes a scalar, `flow` a
    one-line mapping, `sh` a shell word; any other value is written on one line, escaped."""
    return precompiled.make_env("jobs", loader, {**yamlemit.jinja_options()["filters"], "sh": _sh})


precompiled.register("jobs", make_env)


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


def _labels(plan: BuildPlan, name: str, layout: str, what: str = "smoke") -> dict[str, str]:
    # envbuilder.io/layout: dashboards join DCGM's per-pod GPU series to the smoke layout
    labels = {"app.kubernetes.io/name": f"envbuilder-{what}",
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


_SMOKE_KINDS = ("slurm-apptainer", "slurm-pyxis", "slurm-host")
_FILE_OF = {"trainjob": ("trainjob", "jobs/trainjob.yaml.j2"),
            "jobset": ("jobset", "jobs/jobset.yaml.j2"),
            "indexed-job": ("indexed-job", "jobs/indexed-job.yaml.j2"),
            "legacy": ("pytorchjob", "jobs/pytorchjob.yaml.j2")}
_SLURM = {"slurm-apptainer": "apptainer", "slurm-pyxis": "pyxis", "slurm-host": "host"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue's LocalQueue label
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # Kueue's WorkloadPriorityClass label


def train_program(command: str) -> list[str]:
    """What torchrun runs for a team's command, after the layout's options: ``torchrun
    train.py --x`` -> ``train.py --x`` (its own torchrun options kept); ``python train.py`` and
    ``python -m pkg`` -> ``train.py`` / ``-m pkg``; anything else runs with ``--no_python``."""
    words = shlex.split(command)
    if words[0] == "torchrun":
        rest = words[1:]
    elif words[:3] in (["python", "-m", "torch.distributed.run"], ["python3", "-m", "torch.distributed.run"]):
        rest = words[3:]
    elif words[0] in ("python", "python3"):
        rest = words[1:]
    else:
        rest = ["--no_python", *words]
    if not rest:
        raise InputError(f"command {command!r} names no training script: e.g. torchrun train.py")
    return rest


def _pull(image: str) -> tuple[str, str]:
    """(imagePullPolicy, the note the files carry) for an image reference."""
    if "@sha256:" in image:
        return "IfNotPresent", "pinned by digest: every node runs the same image"
    return "Always", ("by tag (no digest known yet): every node pulls the tag when it starts its part of the job; "
                      "`envbuilder build --push` rewrites these files with the pushed digest")


def _registry_host(image: str) -> str:
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "registry-1.docker.io"


def _tailoring(cfg: JobsConfig) -> dict[str, Any]:
    """The project's [jobs] keys as template values (already validated by core.jobs)."""
    return {"queue": cfg.queue, "priority_class": cfg.priority_class,
            "node_selector": sorted((cfg.node_selector or {}).items()),
            "tolerations": [dict(t) for t in (cfg.tolerations or ())],
            "image_pull_secrets": list(cfg.image_pull_secrets or ()),
            "extra_resources": sorted((cfg.resources or {}).items()),
            "host_network": bool(cfg.host_network),
            "env_pairs": sorted((cfg.env or {}).items()),
            "runtime_name": cfg.runtime_name,
            "slurm_directives": cfg.slurm.directives(),
            "tailored": bool(cfg.priority_class or cfg.host_network or cfg.node_selector
                             or cfg.tolerations or cfg.image_pull_secrets)}


def _check_options(plan: BuildPlan, image: str, infiniband: bool, timeout: int, shm_size: str,
                   mem_per_proc: str, cpus_per_proc: int, time_limit_min: int) -> bool:
    """render_jobs' plain options checked; returns whether the files set up RDMA."""
    validate.image_ref(image, "--image")
    fabric = getattr(plan, "fabric", "none")
    if infiniband and fabric == "none" and plan.stack.toolkit is not None:
        from envbuilder.errors import IncompatibleError

        raise IncompatibleError("--infiniband sets the job files up for RDMA but --fabric none "
                                "leaves the RDMA user space (libibverbs, rdmacm) out of the "
                                "image: NCCL would fall back to sockets; drop --fabric none")
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
    return bool(infiniband) or fabric in ("ib", "efa")


def render_jobs(plan: BuildPlan, *, image: str,
                layouts: Iterable[Iterable[int]] | None = None,
                gpus: bool = True, infiniband: bool = False,
                apptainer_image: str | None = None, timeout: int = SMOKE_TIMEOUT,
                shm_size: str = "16Gi", cpus_per_proc: int = 4, mem_per_proc: str = "4Gi",
                time_limit_min: int = 30, jobs: JobsConfig | None = None,
                name: str | None = None) -> dict[str, str]:
    """Every file of the ``jobs/`` folder, as relative path -> content.

    ``image``: the image reference the cluster pulls (by digest when known: then
    ``IfNotPresent``; a tag is pulled ``Always``, so no node runs a stale copy of it).
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
    ``jobs``: the project's [jobs] table (core.jobs.JobsConfig): the Kubernetes kinds, queue,
    scheduling keys, device resources, env, Slurm keys and the team's ``command`` (then
    ``train-*`` files run it beside the smoke files). ``name``: what job names are made of
    (default the plan's target; a project passes its target's name, so two project targets of
    one CUDA line never share a job name).
    """
    from envbuilder.core.smoke_metrics import JOB

    cfg = jobs or JobsConfig()
    infiniband = _check_options(plan, image, infiniband, timeout, shm_size, mem_per_proc,
                                cpus_per_proc, time_limit_min)
    world = int(plan.smoke_nproc)
    lays = check_layouts(lay_mod.default_layouts(world) if layouts is None else layouts, world)
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
    pull_policy, pull_note = _pull(image)
    tailoring = _tailoring(cfg)
    time_limit = cfg.slurm.time or f"{time_limit_min // 60:02d}:{time_limit_min % 60:02d}:00"

    env = _env()
    base = {"version": __version__, "target": plan.target, "tag": plan.stack.tag,
            "image": image, "gpus": bool(gpus), "infiniband": bool(infiniband),
            "shm_size": shm_size, "timeout": timeout, "backend": backend, "world": world,
            "smoke": smoke, "entrypoint": entrypoint, "uid": int(plan.uid),
            "out_dir": OUT_DIR, "master_port": MASTER_PORT, "rdzv_port": RDZV_PORT,
            "container": CONTAINER, "sif": sif, "pyxis_image": _pyxis_ref(image),
            "registry_host": _registry_host(image), "pull_policy": pull_policy,
            "pull_note": pull_note, "cpus_per_proc": cpus_per_proc, "time_limit": time_limit,
            "deadline": timeout * 4 + 600, "metrics_job": JOB, **tailoring}
    smoke_program = [smoke, "--backend", backend, "--timeout", str(timeout), "--out", OUT_DIR]
    runs: list[tuple[str, list[str]]] = [("smoke", smoke_program)]
    if cfg.command:
        runs.append(("train", train_program(cfg.command)))
    files: dict[str, str] = {}
    entries: list[dict[str, Any]] = []
    for n, p in lays:
        sizes = (cpus_per_proc, shm_size, mem_per_proc)
        entries.append(_layout_files(env, files, base, plan, cfg, runs, n, p, name, sizes))
    if cfg.queue and cfg.cluster_queue:
        files["jobs/kueue-localqueue.yaml"] = env.get_template("jobs/kueue-localqueue.yaml.j2").render(
            base, cluster_queue=cfg.cluster_queue)
    # the README's commands show a multi-node layout when there is one (2x6 by default)
    example = next((e for e in entries if e["layout"] == "2x6"),
                   next((e for e in entries if e["nnodes"] > 1), entries[0]))
    try:  # a valid --layout of this world size with several layouts, for the README
        others = ",".join(lay_mod.fmt(x) for x in lay_mod.default_layouts(world))
    except InputError:
        others = f"1x{world}"
    files["jobs/README.md"] = env.get_template("jobs/README.md.j2").render(
        base, layouts=entries, example=example, other_example=others, kinds=cfg.kinds,
        command=cfg.command, launchers=[c.launcher(plan.stack) for c in _launching(plan)])
    index: dict[str, Any] = {"world_size": world, "gpus": bool(gpus), "image": image,
                             "pinned": "@sha256:" in image,
                             "layouts": [{k: e[k] for k in ("layout", "nnodes", "nproc", "name",
                                                            "files", "train_name", "train_files")
                                          if k in e} for e in entries]}
    if cfg != JobsConfig():
        index["jobs"] = cfg.to_dict()
    files["jobs/layouts.json"] = json.dumps(index, indent=2) + "\n"
    return files


def _layout_files(env: Any, files: dict[str, str], base: dict[str, Any], plan: BuildPlan,
                  cfg: JobsConfig, runs: list[tuple[str, list[str]]], n: int, p: int,
                  name: str | None, sizes: tuple[int, str, str]) -> dict[str, Any]:
    """One layout's files (the smoke job's, and the team command's ``train-*``) into
    ``files``; returns its layouts.json entry."""
    lay = f"{n}x{p}"
    world = n * p
    entry: dict[str, Any] = {"layout": lay, "nnodes": n, "nproc": p, "fits": _fits(p)}
    for prefix, program in runs:
        jname = job_name(name or plan.target, n, p, prefix=prefix)
        ctx = dict(base, **_layout_values(plan, jname, n, p, program, cfg, *sizes),
                   is_smoke=prefix == "smoke",
                   what=(f"the {world}-rank smoke job" if prefix == "smoke" else
                         f"the team's command ({_short(cfg.command or '')}) on {world} ranks"))
        lead = "" if prefix == "smoke" else "train-"
        made: list[str] = []
        for stem, tpl in (_FILE_OF[k] for k in cfg.kinds):
            rel = f"jobs/{lead}{stem}-{lay}.yaml"
            files[rel] = env.get_template(tpl).render(ctx, file=rel)
            made.append(rel)
        for kind, runtime in _SLURM.items():
            rel = f"jobs/{lead}{kind}-{lay}.sbatch"
            files[rel] = env.get_template("jobs/slurm.sbatch.j2").render(
                ctx, file=rel, runtime=runtime, program_sh=_program_sh(program, runtime))
            made.append(rel)
        for c in _launching(plan) if prefix == runs[-1][0] else ():
            # a component's own launcher (components.base.Component.smoke): the team's
            # command, else the program given to it
            launcher = c.launcher(plan.stack)
            rel = f"jobs/{launcher}-{lay}.sh"
            files[rel] = env.get_template(f"jobs/{launcher}.sh.j2").render(
                ctx, file=rel, launcher_program=c.launcher_program(program) if cfg.command else None)
            made.append(rel)
        entry["name" if prefix == "smoke" else "train_name"] = jname
        entry["files" if prefix == "smoke" else "train_files"] = made
    return entry


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _layout_values(plan: BuildPlan, name: str, n: int, p: int, program: list[str],
                   cfg: JobsConfig, cpus_per_proc: int, shm_size: str,
                   mem_per_proc: str) -> dict[str, Any]:
    """The values of one layout's files: names, labels and each launcher's arguments."""
    lay = f"{n}x{p}"
    svc = name  # the indexed Job's headless Service shares its name
    labels = _labels(plan, name, lay, "smoke" if name.startswith("smoke-") else "train")
    job_labels = dict(labels)
    if cfg.queue:
        job_labels[QUEUE_LABEL] = cfg.queue
    head = ["torchrun", f"--nnodes={n}", f"--nproc_per_node={p}"]
    return {
        "nnodes": n, "nproc": p, "layout": lay, "name": name, "service": svc,
        "labels": labels, "job_labels": job_labels,
        # Kueue reads a TrainJob's priority from its WorkloadPriorityClass label (the
        # runtime's pod template carries no priorityClassName patch)
        "trainjob_labels": dict(job_labels, **({PRIORITY_LABEL: cfg.priority_class}
                                               if cfg.priority_class else {})),
        "ptj_args": [*head, "--node_rank=$(RANK)", "--master_addr=$(MASTER_ADDR)",
                     "--master_port=$(MASTER_PORT)", "--max_restarts=0", *program],
        "job_args": [*head, "--node_rank=$(JOB_COMPLETION_INDEX)", "--rdzv_backend=c10d",
                     f"--rdzv_endpoint={name}-0.{svc}:{RDZV_PORT}", f"--rdzv_id={name}",
                     "--max_restarts=0", *program],
        # JobSet pod i is <jobset>-<replicatedJob>-<i>-0.<subdomain = jobset name>
        "jobset_args": [*head, "--rdzv_backend=c10d",
                        f"--rdzv_endpoint={name}-node-0-0.{name}:{RDZV_PORT}",
                        f"--rdzv_id={name}", "--max_restarts=0", *program],
        # the trainer gives torchrun PET_NNODES/PET_NPROC_PER_NODE/PET_NODE_RANK/PET_MASTER_*
        "trainjob_args": [f"{plan.home}/bin/entrypoint.sh", "torchrun", "--max_restarts=0",
                          *program],
        "cpus": p * cpus_per_proc, "memory": pod_memory(shm_size, p, mem_per_proc)}


def _program_sh(program: list[str], runtime: str) -> Any:
    """The program's words for a Slurm script: shell-quoted; on the node's own environment
    (no container mount) the records go straight to ``$out``."""
    words = [shlex.quote(w) for w in program]
    if runtime == "host":
        words = ['"$out"' if w == OUT_DIR else w for w in words]
    return yamlemit.emitted(" ".join(words))


def _launching(plan: BuildPlan) -> list[Component]:
    """The stack's components that bring a launcher of their own (jobs/<launcher>-NxM.sh)."""
    return [c for c in registry.active(plan.stack) if c.launcher(plan.stack)]


def as_yaml_documents(text: str) -> list[dict]:
    """Parse a rendered YAML file into its documents (tests, and callers that post-process)."""
    import yaml

    return [d for d in yaml.safe_load_all(text) if d is not None]


__all__ = ["render_jobs", "job_name", "check_layouts", "DEFAULT_LAYOUTS", "as_yaml_documents"]


# -- a hand-edited job file: never overwritten, and the refusal says what to do instead --------

# (a pattern of a line the user added, the [jobs] key that expresses it)
_EDIT_HINTS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), k) for p, k in (
    (r"nodeSelector|nodeAffinity|affinity:", "jobs.node_selector"),
    (r"tolerations|\beffect:|\boperator:\s*\"?(Exists|Equal)", "jobs.tolerations"),
    (r"priorityClassName|kueue\.x-k8s\.io/priority-class", "jobs.priority_class"),
    (r"imagePullSecrets", "jobs.image_pull_secrets"),
    (r"hostNetwork|dnsPolicy", "jobs.host_network"),
    (r"kueue\.x-k8s\.io/queue-name", "jobs.queue"),
    (r"^\s*\"?[a-z0-9.-]+\.[a-z]+/[A-Za-z0-9_.-]+\"?:\s*\"?[0-9]+\"?\s*$|rdma/", "jobs.resources"),
    (r"^\s*-\s*name:\s*\"?[A-Z_][A-Z0-9_]*\"?\s*$|^\s*value:|^export [A-Z_]", "jobs.env"),
    (r"#SBATCH\s+--(partition|-p\b)|#SBATCH\s+-p\s", "jobs.slurm.partition"),
    (r"#SBATCH\s+--account|#SBATCH\s+-A\s", "jobs.slurm.account"),
    (r"#SBATCH\s+--qos", "jobs.slurm.qos"),
    (r"#SBATCH\s+--time|#SBATCH\s+-t\s", "jobs.slurm.time"),
    (r"#SBATCH\s+--constraint|#SBATCH\s+-C\s", "jobs.slurm.constraint"),
    (r"runtimeRef|^\s*name:\s*\"?torch-", "jobs.runtime"),
    (r"\.py\b|torchrun|--config", "jobs.command (or render --command)"),
    (r"^\s*image:|--container-image|docker://", "--image (or the project's registry)"),
))


def edit_keys(written: str, edited: str) -> list[str]:
    """The project keys that express the lines a user added to a job file envbuilder wrote."""
    before = set(written.splitlines())
    keys: list[str] = []
    for line in edited.splitlines():
        if line in before or not line.strip():
            continue
        for pat, key in _EDIT_HINTS:
            if pat.search(line) and key not in keys:
                keys.append(key)
                break
    return keys


EDIT_READ_CAP = 1 << 20  # what a hint about an edit reads of an edited job file (its first MiB)


def guard_edited(folder: str | Path, files: Mapping[str, str | bytes], *,
                 take: bool = False) -> dict[str, str]:
    """Before a render replaces ``folder``'s jobs/: a job file the user edited since envbuilder
    wrote it is refused (exit 2) naming the project key that expresses the edit, or with
    ``take`` (``render --take-jobs``) kept as ``FILE.edited`` beside envbuilder's new version.
    A check only: nothing changes here. Returns {rel: the name to keep it under}, for the
    transaction to do with the rest (``_fs.Outputs.add(aside=...)``: checked with every other
    file, then done, or none of it). Files are reached as the writer reaches them (no link on
    the way, regular files only) and read to at most EDIT_READ_CAP bytes."""
    import hashlib

    from envbuilder import _fs

    root = Path(folder)
    manifest = _fs.read_manifest(root)
    aside: dict[str, str] = {}
    for rel in sorted(r for r in files if r.startswith("jobs/")):
        ent = manifest.get(rel)
        found = _fs.read_owned(root, rel, EDIT_READ_CAP) if ent is not None else None
        if ent is None or found is None:
            continue  # not ours, absent, or behind a link: the writer's own rules refuse it
        have, head = found
        raw = files[rel]
        new: bytes = raw if isinstance(raw, bytes) else raw.encode()
        if have in (ent.sha256, ent.prev, hashlib.sha256(new).hexdigest()):
            continue
        p = root / rel
        if take:
            aside[rel] = _fs.free_name(root, rel + ".edited")
            continue
        keys = edit_keys(new.decode("utf-8", "replace"), head.decode("utf-8", "replace"))
        how = (f"express it as {', '.join(keys)} in the project file ([jobs], or a target's "
               f"jobs table) and render again" if keys else
               "no [jobs] key expresses this edit (see docs/user-guide.md, Jobs)")
        raise InputError(f"{p} was changed since envbuilder wrote it: envbuilder never overwrites "
                         f"such files; {how}, or take envbuilder's new version with `envbuilder "
                         f"render --take-jobs` (your file is kept as {p.name}.edited)")
    return aside
