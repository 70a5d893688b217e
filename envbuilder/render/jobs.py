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
from pathlib import Path
from pathlib import PurePosixPath
from typing import Any, Iterable, Mapping

from envbuilder import SMOKE_TIMEOUT, __version__
from envbuilder.core import validate
from envbuilder.core import layouts as lay_mod
from envbuilder.core.jobs import JobsConfig
from envbuilder.errors import InputError
from envbuilder.render import jobkinds, precompiled, yamlemit
from envbuilder.render.bccache import environment
# job_name, pod_memory, quantity_bytes, train_program and the labels are named here too
# (callers and tests import them from render.jobs)
from envbuilder.render.jobkinds.base import (CONTAINER, MASTER_PORT, OUT_DIR, PRIORITY_LABEL,
                                             QUEUE_LABEL, RDZV_PORT, Job, JobKind, Requirement,
                                             job_name, pod_memory, pyxis_ref, quantity_bytes,
                                             runtime_name, train_program)
from envbuilder.render.jobkinds.launcher import launching
from envbuilder.render.plan import BuildPlan

DEFAULT_LAYOUTS: tuple[tuple[int, int], ...] = ((1, 12), (2, 6), (3, 4))  # default_layouts(12)

_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?\Z")
_SIF = re.compile(r"^[A-Za-z0-9_./+-]+\Z")
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9._/:@#+=-]+\Z")  # needs no quoting inside "..."


def _sh(value: Any) -> Any:
    """A shell word (emitted: the template prints it as it is)."""
    return yamlemit.emitted(shlex.quote(str(value)))


def _env(kinds: Iterable[JobKind] = ()) -> Any:
    """The job templates' environment; kinds that bring a template folder of their own put it
    first (one environment per set of folders, for the whole process)."""
    dirs = tuple(sorted({str(k.templates) for k in kinds if k.templates is not None}))
    if not dirs:
        return environment(("jobs",), lambda: make_env(precompiled.loader("jobs")))

    def make() -> Any:
        import jinja2

        return make_env(jinja2.ChoiceLoader([jinja2.FileSystemLoader(list(dirs)),
                                             precompiled.loader("jobs")]))

    return environment(("jobs", *dirs), make)


def make_env(loader):
    """The environment of the job files' templates (precompiled.SETS declares its options):
    every value through the one YAML emitter (render.yamlemit): `q` quotes a scalar, `flow` a
    one-line mapping, `sh` a shell word; any other value is written on one line, escaped."""
    return precompiled.make_env("jobs", loader, {**yamlemit.jinja_options()["filters"], "sh": _sh})


precompiled.register("jobs", make_env)


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


def _fits(per_node: int, node_gpus: int | None = None) -> str:
    """Which nodes a layout's per-node GPU count fits, for the README: the project's nodes
    (``node_gpus``, the GPUs per node its layouts declare), else the common node sizes."""
    if node_gpus:
        if per_node > node_gpus:
            return f"nodes of {per_node}+ GPUs (not the project's {node_gpus}-GPU nodes)"
        used = "all" if per_node == node_gpus else f"{per_node} of"
        return f"the project's {node_gpus}-GPU nodes ({used} {node_gpus} GPUs each)"
    sizes = [str(s) for s in (4, 8, 16) if per_node <= s]
    return f"{', '.join(sizes)}-GPU nodes" if sizes else f"nodes of {per_node}+ GPUs"


def _requirements(job: Job) -> list[tuple[JobKind, Requirement]]:
    """What this render's files need of the cluster's controllers, each with its kind."""
    return [(k, r) for k in job.kinds for r in k.requirements(job)]


def _check_controllers(job: Job, needs: list[tuple[JobKind, Requirement]]) -> None:
    """``[jobs] controllers`` states the cluster's versions: a file or field that needs a newer
    one is refused (exit 3) naming both; pyxis by digest on an older enroot is served by the
    tag-pinned file when the tag is known."""
    from packaging.version import Version

    from envbuilder.errors import IncompatibleError

    stated = dict(job.cfg.controllers or {})
    if job.cfg.topology is not None and not job.cfg.queue:
        raise InputError("[jobs] topology is Kueue's topology-aware scheduling: it takes effect "
                         "only for jobs Kueue admits; set [jobs] queue too")
    tagged = any(k.name == "slurm-pyxis-tag" for k in job.kinds)
    for kind, req in needs:
        have = stated.get(req.controller)
        if have is None or Version(have) >= Version(req.version):
            continue
        if req.controller == "enroot" and tagged:
            continue  # slurm-pyxis-tag-*.sbatch runs there
        how = ("give --image REPO:TAG (a tag enroot can pull), or build --push (it writes "
               "slurm-pyxis-tag-NxM.sbatch beside the digest-pinned file)"
               if req.controller == "enroot" else
               f"upgrade {req.controller}, or leave {kind.pattern()} out ([jobs] kubernetes) or "
               f"drop the key that needs it")
        raise IncompatibleError(f"jobs/{kind.pattern()}: {req.why} needs "
                                f"{req.line().split(':')[0]}, and [jobs] controllers says "
                                f"{req.controller} {have}: {how} (source: {req.source})")


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

            "slurm_directives": cfg.slurm.directives(),
            "service_account": cfg.service_account,
            "tailored": bool(cfg.priority_class or cfg.host_network or cfg.node_selector
                             or cfg.tolerations or cfg.image_pull_secrets or cfg.service_account)}


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


def _job(plan: BuildPlan, image: str, cfg: JobsConfig, name: str | None, apptainer_image: str | None,
         gpus: bool, infiniband: bool, options: dict[str, Any], extra: dict[str, Any]) -> Job:
    """What every kind's files share, checked (see render_jobs)."""
    from envbuilder.core.smoke_metrics import JOB

    world = int(plan.smoke_nproc)
    sif = apptainer_image or f"{plan.stack.tag}.sif"
    if not _SIF.fullmatch(sif) or sif.startswith("-"):
        raise InputError(f"apptainer image {sif!r} must be a path of letters, digits and ._/+-")
    for what, v in (("apptainer image", sif), ("image", image), ("image", pyxis_ref(image))):
        if not _SHELL_SAFE.fullmatch(v):  # image_ref and _SIF admit only these; keep it so
            raise InputError(f"{what} {v!r} has characters a job script cannot carry")
    home = str(PurePosixPath(plan.home))
    validate.env_pair("HOME", home, "image home")
    pull_policy, pull_note = _pull(image)
    base = {"version": __version__, "target": plan.target, "tag": plan.stack.tag,
            "image": image, "gpus": bool(gpus), "infiniband": bool(infiniband),
            "timeout": options["timeout"], "backend": "auto" if gpus else "gloo", "world": world,
            "smoke": f"{home}/smoke/ddp_smoke.py", "entrypoint": f"{home}/bin/entrypoint.sh",
            "uid": int(plan.uid), "out_dir": OUT_DIR, "master_port": MASTER_PORT,
            "rdzv_port": RDZV_PORT, "container": CONTAINER, "sif": sif,
            "pyxis_image": pyxis_ref(image), "registry_host": _registry_host(image),
            "pull_policy": pull_policy, "pull_note": pull_note,
            "cpus_per_proc": options["cpus_per_proc"], "metrics_job": JOB, **_tailoring(cfg)}
    base.update(runtime_name=runtime_name(cfg, name or plan.target),
                runtime_kind="TrainingRuntime" if cfg.runtime_namespace else "ClusterTrainingRuntime")
    job = Job(plan=plan, cfg=cfg, image=image, name=name, base=base, options=options, extra=extra)
    job.runs = tuple(r for r in jobkinds.runs() if r.enabled(job))
    enabled = [k for k in jobkinds.kinds() if k.enabled(job)]
    job.kinds = tuple(sorted(enabled, key=lambda k: (k.order, k.position(job))))
    return job


def render_jobs(plan: BuildPlan, *, image: str,
                layouts: Iterable[Iterable[int]] | None = None,
                gpus: bool = True, infiniband: bool = False,
                apptainer_image: str | None = None, timeout: int = SMOKE_TIMEOUT,
                shm_size: str = "16Gi", cpus_per_proc: int = 4, mem_per_proc: str = "4Gi",
                time_limit_min: int = 30, jobs: JobsConfig | None = None,
                name: str | None = None, tag_image: str | None = None,
                node_gpus: int | None = None) -> dict[str, str]:
    """Every file of the ``jobs/`` folder, as relative path -> content: each job kind of the
    table (``render.jobkinds``) the render enables, for each layout and run.

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
    The smoke files request ``cpus_per_proc`` CPUs per rank and memory for their ``shm_size``
    of memory-backed /dev/shm plus ``mem_per_proc`` per rank (the memory limit is the same, CPU
    is not limited: Burstable QoS, not BestEffort); ``time_limit_min`` is their Slurm --time.
    ``apptainer_image``: the SIF the Apptainer scripts run (default ``<tag>.sif``; the scripts
    also read ``ENVBUILDER_SIF``). ``timeout``: the smoke job's process-group timeout (s).
    ``jobs``: the project's [jobs] table (core.jobs.JobsConfig): the Kubernetes kinds, queue,
    scheduling keys, device resources, env, Slurm keys, the team's ``command`` (then
    ``train-*`` files run it beside the smoke files) and the training files' settings; its
    ``controllers`` are checked against what each file needs (exit 3). ``name``: what job
    names are made of (default the plan's target; a project passes its target's name, so two
    project targets of one CUDA line never share a job name). ``tag_image``: the tag ``image``
    (a digest) was pushed under (a tag-pinned pyxis file for enroot < 4.0). ``node_gpus``: the
    GPUs per node of the project's cluster (its layouts), for the README's layout table.
    """
    cfg = jobs or JobsConfig()
    infiniband = _check_options(plan, image, infiniband, timeout, shm_size, mem_per_proc,
                                cpus_per_proc, time_limit_min)
    world = int(plan.smoke_nproc)
    lays = check_layouts(lay_mod.default_layouts(world) if layouts is None else layouts, world)
    options = {"timeout": timeout, "shm_size": shm_size, "cpus_per_proc": cpus_per_proc,
               "mem_per_proc": mem_per_proc, "time_limit_min": time_limit_min}
    if tag_image is not None:
        validate.image_ref(tag_image, "tag image")
    job = _job(plan, image, cfg, name, apptainer_image, gpus, infiniband, options,
               {"tag_image": tag_image})
    needs = _requirements(job)
    _check_controllers(job, needs)
    _check_topology(cfg, lays)
    env = _env(job.kinds)
    files: dict[str, str] = {}
    entries = [_layout_files(env, files, job, n, p, node_gpus) for n, p in lays]
    for kind in job.kinds:
        if not kind.per_layout:
            files.update(kind.render_once(env, job))
    files["jobs/README.md"] = _readme(env, job, entries, needs)
    index: dict[str, Any] = {"world_size": world, "gpus": bool(gpus), "image": image,
                             "pinned": "@sha256:" in image,
                             "layouts": [{k: e[k] for k in ("layout", "nnodes", "nproc", "name",
                                                            "files", "train_name", "train_files")
                                          if k in e} for e in entries]}
    if cfg != JobsConfig():
        index["jobs"] = cfg.to_dict()
    files["jobs/layouts.json"] = json.dumps(index, indent=2) + "\n"
    return files


def _check_topology(cfg: JobsConfig, lays: Iterable[tuple[int, int]]) -> None:
    """Kueue splits a PodSet into slices of ``slice_size`` pods: each layout's node count must
    be a multiple of it."""
    t = cfg.topology
    if t is None or not t.slice_size:
        return
    for n, p in lays:
        if n % t.slice_size:
            raise InputError(f"[jobs] topology slice_size {t.slice_size} does not divide the "
                             f"{n} nodes (pods) of layout {n}x{p}: Kueue needs whole slices")


def _readme(env: Any, job: Job, entries: list[dict[str, Any]],
            needs: list[tuple[JobKind, Requirement]]) -> str:
    world = job.world
    # the README's commands show a multi-node layout when there is one (2x6 by default)
    example = next((e for e in entries if e["layout"] == "2x6"),
                   next((e for e in entries if e["nnodes"] > 1), entries[0]))
    try:  # a valid --layout of this world size with several layouts, for the README
        others = ",".join(lay_mod.fmt(x) for x in lay_mod.default_layouts(world))
    except InputError:
        others = f"1x{world}"
    smoke = job.layout(job.runs[0], example["nnodes"], example["nproc"]).settings
    return env.get_template("jobs/README.md.j2").render(
        job.base, layouts=entries, example=example, other_example=others, kinds=job.cfg.kinds,
        command=job.cfg.command, launchers=[c.launcher(job.plan.stack) for c in launching(job.plan)],
        shm_size=smoke.shm, smoke_settings=smoke, columns=[k for k in job.kinds if k.per_layout and k.title],
        needs=list(dict.fromkeys((k.pattern(), r) for k, r in needs)), runs=[r.name for r in job.runs],
        train=(job.layout(job.runs[-1], example["nnodes"], example["nproc"]).settings
               if len(job.runs) > 1 else None))


def _layout_files(env: Any, files: dict[str, str], job: Job, n: int, p: int,
                  node_gpus: int | None) -> dict[str, Any]:
    """One layout's files (each run's, each kind's) into ``files``; returns its layouts.json
    entry."""
    entry: dict[str, Any] = {"layout": f"{n}x{p}", "nnodes": n, "nproc": p,
                             "fits": _fits(p, node_gpus)}
    for run in job.runs:
        lay = job.layout(run, n, p)
        made: list[str] = []
        for kind in job.kinds:
            if kind.per_layout and run in kind.runs(job):
                got = kind.render(env, lay)
                files.update(got)
                made.extend(got)
        smoke = run.name == "smoke"
        entry["name" if smoke else "train_name"] = lay.name
        entry["files" if smoke else "train_files"] = made
    return entry


def as_yaml_documents(text: str) -> list[dict]:
    """Parse a rendered YAML file into its documents (tests, and callers that post-process)."""
    import yaml

    return [d for d in yaml.safe_load_all(text) if d is not None]


__all__ = ["render_jobs", "job_name", "check_layouts", "DEFAULT_LAYOUTS", "as_yaml_documents",
           "quantity_bytes", "pod_memory", "train_program", "PRIORITY_LABEL", "QUEUE_LABEL"]


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
