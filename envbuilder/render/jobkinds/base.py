"""What every job kind is made of (Spack's container writers: a small object with a template).

A ``JobKind`` is one kind of file in ``jobs/``: its template (under ``templates/jobs/``, or a
folder of its own for a kind that lives outside the package), the file name it writes, when it
is written (``enabled``) and the arguments its template needs beyond the common ones
(``values``). ``per_layout`` kinds write one file per layout and run (``jobs/[train-]STEM-NxM``);
the others one file per render. A ``RunKind`` is what the files run: the smoke job or the
team's command, each with its own settings (``RunSettings``: time limit, CPUs, memory,
/dev/shm, mounts, working directory...).

``Job`` holds what one render shares (the plan, the project's ``[jobs]`` table, the image, the
common template values); ``LayoutJob`` one layout of one run (names, labels, the run's
settings). Every value here was validated by ``core.jobs`` or ``render.jobs``; the templates
print them through the one YAML emitter (``render.yamlemit``).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from envbuilder.core.jobs import quantity_bytes
from envbuilder.errors import InputError

MASTER_PORT = 23456  # the training operator's default for the port named pytorchjob-port
RDZV_PORT = 29400  # torchrun's c10d rendezvous port
CONTAINER = "pytorch"  # the container name the training operator looks for
OUT_DIR = "/tmp/envbuilder-smoke"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue's LocalQueue label
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # Kueue's WorkloadPriorityClass label

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_NAME_MAX = 40  # leaves room for "-worker-NN" / "-NN" suffixes within DNS label limits (63)


@dataclass(frozen=True)
class Requirement:
    """A controller version a file (or one of its fields) needs, and where that is stated."""

    controller: str  # trainer | jobset | kueue | enroot | kubernetes
    version: str  # the first release that has it, e.g. "2.2"
    why: str  # what needs it, e.g. "runtimePatches"
    source: str  # the public URL that shows it

    def line(self) -> str:
        return f"{TITLES.get(self.controller, self.controller)} {self.version}+: {self.why}"


TITLES = {"trainer": "Kubeflow Trainer", "jobset": "JobSet", "kueue": "Kueue", "enroot": "enroot",
          "kubernetes": "Kubernetes", "training-operator": "Kubeflow training operator"}


@dataclass(frozen=True)
class RunSettings:
    """How one run's files are sized and what they see."""

    deadline: int | None  # activeDeadlineSeconds (None: no limit)
    slurm_time: str | None  # --time (None: the partition's default)
    cpus: str  # CPUs per node (a Kubernetes quantity; Slurm's --cpus-per-task rounds it up)
    memory: str  # memory per node, /dev/shm included (a quantity)
    shm: str  # the memory-backed /dev/shm per node
    slurm_memory: str | None = None  # --mem (None: not set)
    exclusive: bool = True  # Slurm --exclusive
    mounts: tuple[Any, ...] = ()  # core.jobs.Mount
    workdir: str | None = None
    env_from: tuple[str, ...] = ()  # secrets whose keys become environment variables
    secret_env: tuple[tuple[str, Mapping[str, str]], ...] = ()  # (variable, {secret, key})
    max_restarts: int = 0  # whole-job restarts (JobSet, PyTorchJob) and torchrun's restarts
    fail_on: tuple[str, ...] = ()  # JobSet failure reasons that fail without a restart
    smoke_out: bool = False  # the smoke job's records volume / folder


class RunKind:
    """What a file runs (the smoke job, the team's command): its program and its settings."""

    name = ""  # "smoke" | "train": job names start with it
    lead = ""  # file names start with it ("" or "train-")
    order = 50  # its place among the runs (the smoke job first)

    def enabled(self, job: Job) -> bool:
        raise NotImplementedError

    def program(self, job: Job) -> list[str]:
        """The words torchrun (or a launcher) runs after the layout's options."""
        raise NotImplementedError

    def settings(self, job: Job, nnodes: int, nproc: int) -> RunSettings:
        raise NotImplementedError

    def what(self, job: Job, world: int) -> str:
        """A job file's first comment line says it runs this."""
        raise NotImplementedError

    def labels_app(self) -> str:
        return self.name


class JobKind:
    """One kind of job file (see the module docstring); subclasses set the class attributes
    and override what they need."""

    name = ""  # the kind's name ([jobs] kubernetes names the Kubernetes ones)
    family = "kubernetes"  # kubernetes | slurm | launcher | other
    order = 50  # its place in the table (and in jobs/layouts.json's lists)
    per_layout = True
    template = ""  # under templates/ (or ``templates``), e.g. "jobs/jobset.yaml.j2"
    templates: Path | None = None  # a folder of this kind's own templates
    stem = ""  # the file name: jobs/[train-]<stem>-<layout><suffix>
    suffix = ".yaml"
    title = ""  # its column in jobs/README.md
    requires: tuple[Requirement, ...] = ()

    def enabled(self, job: Job) -> bool:
        return True

    def position(self, job: Job) -> int:
        """Among kinds of one ``order``: where this render lists it (the Kubernetes kinds in
        the order ``[jobs] kubernetes`` names them)."""
        return 0

    def runs(self, job: Job) -> Sequence[RunKind]:
        """The runs this kind writes a file for (default: every run of the render)."""
        return job.runs

    def path(self, lay: LayoutJob) -> str:
        return f"jobs/{lay.run.lead}{self.stem}-{lay.layout}{self.suffix}"

    def pattern(self) -> str:
        """Its files' names, for jobs/README.md (``jobset-NxM.yaml``)."""
        return f"{self.stem}-NxM{self.suffix}" if self.per_layout else f"{self.stem}{self.suffix}"

    def values(self, lay: LayoutJob) -> dict[str, Any]:
        """The template's arguments beyond the common and the layout's."""
        return {}

    def requirements(self, job: Job) -> tuple[Requirement, ...]:
        """What this render's files of this kind need (the kind's own, and its fields')."""
        return self.requires

    def render(self, env: Any, lay: LayoutJob) -> dict[str, str]:
        rel = self.path(lay)
        ctx = dict(lay.values(), needs=[r.line() for r in self.requirements(lay.job)],
                   **self.values(lay))
        return {rel: env.get_template(self.template).render(ctx, file=rel)}

    def render_once(self, env: Any, job: Job) -> dict[str, str]:
        """A per-render kind's files (``per_layout = False``)."""
        return {}


@dataclass
class Job:
    """What one render of jobs/ shares (made by render.jobs.render_jobs, values checked)."""

    plan: Any  # render.plan.BuildPlan
    cfg: Any  # core.jobs.JobsConfig
    image: str
    name: str | None  # what job names are made of (None: the plan's target)
    base: dict[str, Any]  # the common template values
    options: Mapping[str, Any]  # render_jobs' sizing options (timeout, shm_size, ...)
    runs: tuple[RunKind, ...] = ()
    kinds: tuple[JobKind, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # what kinds share (the runtime's name)

    @property
    def world(self) -> int:
        return int(self.plan.smoke_nproc)

    def layout(self, run: RunKind, nnodes: int, nproc: int) -> LayoutJob:
        return LayoutJob(self, run, nnodes, nproc)


@dataclass
class LayoutJob:
    """One layout of one run: its names, labels, settings and the common values."""

    job: Job
    run: RunKind
    nnodes: int
    nproc: int

    def __post_init__(self) -> None:
        self.layout = f"{self.nnodes}x{self.nproc}"
        self.name = job_name(self.job.name or self.job.plan.target, self.nnodes, self.nproc,
                             prefix=self.run.name)
        self.program = self.run.program(self.job)
        self.settings = self.run.settings(self.job, self.nnodes, self.nproc)
        self.labels = _labels(self.job.plan, self.name, self.layout, self.run.labels_app())

    @property
    def head(self) -> list[str]:
        return ["torchrun", f"--nnodes={self.nnodes}", f"--nproc_per_node={self.nproc}"]

    @property
    def job_labels(self) -> dict[str, str]:
        """The job object's labels: the pods' and Kueue's queue."""
        labels = dict(self.labels)
        if self.job.cfg.queue:
            labels[QUEUE_LABEL] = self.job.cfg.queue
        return labels

    @property
    def pod_annotations(self) -> list[tuple[str, str]]:
        """The pods' annotations: ``[jobs] pod_annotations`` and Kueue's topology request."""
        cfg = self.job.cfg
        out = dict(cfg.pod_annotations or {})
        if cfg.topology is not None:
            out.update(cfg.topology.annotations())
        return sorted(out.items())

    def values(self) -> dict[str, Any]:
        s = self.settings
        cpus = s.cpus
        return dict(self.job.base, nnodes=self.nnodes, nproc=self.nproc, layout=self.layout,
                    name=self.name, labels=self.labels, job_labels=self.job_labels,
                    pod_labels=dict(self.labels, **(self.job.cfg.pod_labels or {})),
                    pod_annotations=self.pod_annotations,
                    is_smoke=self.run.name == "smoke",
                    what=self.run.what(self.job, self.nnodes * self.nproc),
                    deadline=s.deadline, time_limit=s.slurm_time, cpus=cpus,
                    slurm_cpus=math.ceil(float(cpus[:-1]) / 1000 if cpus.endswith("m") else float(cpus)),
                    memory=s.memory, slurm_memory=s.slurm_memory, shm_size=s.shm,
                    exclusive=s.exclusive, mounts=s.mounts, workdir=s.workdir,
                    env_from=s.env_from, secret_env=s.secret_env, smoke_out=s.smoke_out,
                    max_restarts=s.max_restarts, fail_on=s.fail_on,
                    slurm_mounts=[m for m in s.mounts if m.host_path])


# -- names and quantities ---------------------------------------------------------------------

def job_name(target: str, nnodes: int, nproc: int, prefix: str = "smoke") -> str:
    """A DNS-1035 name for a layout's job, e.g. smoke-cu121-ds-2x6 (a target whose name
    already starts with the prefix is not repeated: train-2x6, not train-train-2x6)."""
    low = target.lower()
    base = low if low == prefix or low.startswith(prefix + "-") else f"{prefix}-{low}"
    base = re.sub(r"[^a-z0-9-]+", "-", base).strip("-")
    base = re.sub(r"-+", "-", base)
    suffix = f"-{nnodes}x{nproc}"
    base = base[: _NAME_MAX - len(suffix)].rstrip("-")
    name = base + suffix
    if not _DNS1035.fullmatch(name):
        raise InputError(f"cannot derive a Kubernetes name from target {target!r}: got {name!r}")
    return name


def runtime_name(cfg: Any, base: str) -> str:
    """The Trainer runtime the TrainJobs reference: ``[jobs] runtime``, else
    ``envbuilder-<target>`` (a DNS label)."""
    if cfg.runtime:
        return str(cfg.runtime)
    name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]+", "-", f"envbuilder-{base}".lower())).strip("-")
    return name[:63].rstrip("-")


def _labels(plan: Any, name: str, layout: str, what: str = "smoke") -> dict[str, str]:
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


def pod_memory(shm_size: str, nproc: int, mem_per_proc: str) -> str:
    """The memory a smoke pod requests (and is limited to): its memory-backed /dev/shm, which
    counts against the pod's memory, plus ``mem_per_proc`` for each rank; in Mi, rounded up."""
    total = quantity_bytes(shm_size) + nproc * quantity_bytes(mem_per_proc)
    return f"{-(-total // 2**20)}Mi"


def pyxis_ref(image: str) -> str:
    """docker reference -> pyxis/enroot's [REGISTRY#]IMAGE[:TAG] form (a registry host is
    separated by '#', not '/')."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


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


def short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


# -- the shapes most kinds take ------------------------------------------------------------------

TOPOLOGY = Requirement(
    "kueue", "0.14", "the topology-aware scheduling annotations of [jobs] topology "
    "(TopologyAwareScheduling is beta and on by default from 0.14)",
    "https://github.com/kubernetes-sigs/kueue/blob/v0.14.0/pkg/features/kube_features.go")


class KubernetesKind(JobKind):
    """A Kubernetes file of each layout, written when ``[jobs] kubernetes`` names it."""

    family = "kubernetes"
    order = 10

    def enabled(self, job: Job) -> bool:
        return self.name in job.cfg.kinds

    def position(self, job: Job) -> int:
        return list(job.cfg.kinds).index(self.name)

    def requirements(self, job: Job) -> tuple[Requirement, ...]:
        return self.requires + ((TOPOLOGY,) if job.cfg.topology is not None else ())


class SlurmKind(JobKind):
    """A Slurm batch script of each layout (``jobs/[train-]slurm-RUNTIME-NxM.sbatch``)."""

    family = "slurm"
    order = 20
    template = "jobs/slurm.sbatch.j2"
    suffix = ".sbatch"
    runtime = ""  # apptainer | pyxis | host

    def pattern(self) -> str:
        return f"{self.stem}-NxM{self.suffix}"

    def values(self, lay: LayoutJob) -> dict[str, Any]:
        s = lay.settings
        flag = (None if s.exclusive is False else "--exclusive" if s.exclusive is True
                else f"--exclusive={s.exclusive}")
        return {"runtime": self.runtime, "program_sh": program_sh(lay.program, self.runtime),
                "container_args": [emitted(a) for a in self.container_args(lay)],
                "exclusive_flag": flag,
                "skipped_mounts": [m for m in s.mounts if not m.host_path]}

    def container_args(self, lay: LayoutJob) -> list[str]:
        """The runtime's flags for the records folder, the mounts and the working directory
        (shell words; every path was checked to need no quoting)."""
        s = lay.settings
        binds = ([("$out", OUT_DIR, False)] if s.smoke_out else []) + [
            (m.host_path, m.path, m.read_only) for m in s.mounts if m.host_path]
        if self.runtime == "apptainer":
            args = [f'--bind "{src}:{dst}{":ro" if ro else ""}"' for src, dst, ro in binds]
            return args + ([f"--pwd {shlex.quote(s.workdir)}"] if s.workdir else [])
        if self.runtime == "pyxis":
            mounts = ",".join(f"{src}:{dst}{':ro' if ro else ''}" for src, dst, ro in binds)
            return ([f'--container-mounts="{mounts}"'] if mounts else []) + (
                [f"--container-workdir={shlex.quote(s.workdir)}"] if s.workdir else [])
        # the nodes' own environment: their paths are the mounts; srun starts in the workdir
        return [f"--chdir={shlex.quote(s.workdir)}"] if s.workdir else []


def emitted(text: str) -> Any:
    """Shell text the template prints as it is (render.yamlemit)."""
    from envbuilder.render import yamlemit

    return yamlemit.emitted(text)


def program_sh(program: Sequence[str], runtime: str) -> Any:
    """The program's words for a Slurm script: shell-quoted; on the node's own environment
    (no container mount) the records go straight to ``$out``."""
    from envbuilder.render import yamlemit

    words = [shlex.quote(w) for w in program]
    if runtime == "host":
        words = ['"$out"' if w == OUT_DIR else w for w in words]
    return yamlemit.emitted(" ".join(words))
