"""The project's ``[jobs]`` table: how the cluster job files are tailored (one frozen value).

A project writes (every key optional; a target's own ``jobs`` table overrides the project's
key by key, and its ``slurm`` table key by key inside that)::

    [jobs]
    command = "torchrun train.py --config configs/a.yaml"   # ranks/rendezvous from the layout
    kubernetes = ["trainjob", "jobset", "indexed-job"]      # + "legacy" for a PyTorchJob
    runtime = "team-torch"                 # the runtime jobs/ renders, the TrainJobs reference
    queue = "team-a"                       # Kueue LocalQueue (label kueue.x-k8s.io/queue-name)
    cluster_queue = "gpu-cluster"          # with queue: jobs/kueue-localqueue.yaml points there
    priority_class = "high"
    node_selector = { "nvidia.com/gpu.product" = "NVIDIA-H100-80GB-HBM3" }
    tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
    image_pull_secrets = ["regcred"]
    resources = { "rdma/ib" = 1 }
    host_network = false
    env = { NCCL_IB_HCA = "mlx5" }
    slurm = { partition = "gpu", account = "ml", qos = "normal", time = "02:00:00", constraint = "h100" }
    # the training files (train-*) only; the smoke files keep their own short limits
    time = "72:00:00"                      # activeDeadlineSeconds and --time (none by default)
    smoke_time = "00:20:00"                # the smoke files' limit (default: from the timeout)
    cpu = 64                               # per node (default: 4 per rank)
    memory = "400Gi"                       # per node, /dev/shm included; Slurm --mem
    shm = "64Gi"                           # the memory-backed /dev/shm per node
    exclusive = true                       # Slurm --exclusive (or "user", "mcs", "topo")
    mounts = [{ pvc = "team-data", path = "/data" }, { host = "/scratch", path = "/scratch" },
              { nfs = "nfs.example.com:/exports/ds", path = "/datasets", read_only = true,
                slurm = "/mnt/datasets" }, { configmap = "train-config", path = "/config" }]
    workdir = "/workspace"                 # workingDir, --container-workdir, --pwd, cd
    service_account = "trainer"
    pod_labels = { team = "vision" }
    pod_annotations = { "k8s.v1.cni.cncf.io/networks" = "ib-net" }
    env_from_secrets = ["wandb"]           # every key of the secret as a variable
    secret_env = { HF_TOKEN = { secret = "hf", key = "token" } }
    restart = { max_restarts = 3, fail_on = ["PodFailurePolicy"] }
    topology = { level = "cloud.provider.com/topology-block", mode = "required",
                 slice_level = "cloud.provider.com/topology-rack", slice_size = 2 }
    runtime_namespace = "team-a"           # a namespaced TrainingRuntime, not a cluster one
    controllers = { trainer = "2.3", jobset = "0.12", kueue = "0.19", enroot = "4.0" }
    admission = { require = ["backend=nccl"], issuer = "https://token.actions.githubusercontent.com",
                  subject = "https://github.com/org/repo/.github/workflows/build.yml@refs/heads/main" }

``parse(table, where)`` checks every value that can reach a job file (label keys and values,
DNS names, quantities, Slurm's time format, the command's words) and returns a ``JobsConfig``;
a bad value is an InputError naming the key (``where`` + key) and what would work.
``JobsConfig.merged(other)`` is the cascade's step (the target's table over the project's).
The JSON Schema (``envbuilder/data/project.schema.json``, ``$defs.jobs``) checks the shape.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

from packaging.version import InvalidVersion, Version

from envbuilder.core import attestreq
from envbuilder.core.validate import ENV_NAME_RE
from envbuilder.errors import InputError

KINDS = ("trainjob", "jobset", "indexed-job", "legacy")  # legacy: the kubeflow.org/v1 PyTorchJob
DEFAULT_KINDS = ("trainjob", "jobset", "indexed-job")
# envbuilder sets these itself (from the layout, or [jobs] cpu and memory): a team's resources
# name others
OWN_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
# the pod labels envbuilder sets (a Service selects the pods by the instance label)
OWN_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/part-of", "app.kubernetes.io/instance",
              "envbuilder.io/tag", "envbuilder.io/layout", "kueue.x-k8s.io/queue-name",
              "kueue.x-k8s.io/priority-class")
# the controllers whose versions [jobs] controllers states (render.jobkinds checks a file's needs)
CONTROLLERS = ("trainer", "jobset", "kueue", "enroot", "kubernetes")
# why a batch/v1 Job failed (its Failed condition's reason), as JobSet's failure policy rules
# name them: https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/job-v1/
# (JobStatus conditions) and https://jobset.sigs.k8s.io/docs/concepts/#failure-policy
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes",
                       "MaxFailedIndexesExceeded", "PodFailurePolicy")
MOUNT_SOURCES = ("pvc", "host", "nfs", "configmap")
MAX_SECONDS = 366 * 24 * 3600

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?\Z")
# Slurm's --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_SLURM_TIME = re.compile(r"^([0-9]+|[0-9]+:[0-9]{2}|[0-9]+:[0-9]{2}:[0-9]{2}|[0-9]+-[0-9]+"
                         r"|[0-9]+-[0-9]+:[0-9]{2}|[0-9]+-[0-9]+:[0-9]{2}:[0-9]{2})\Z")
_CPU = re.compile(r"^([0-9]+(\.[0-9]{1,3})?|[0-9]+m)\Z")  # a Kubernetes CPU quantity
_PATH = re.compile(r"^/[A-Za-z0-9_.@+/-]*\Z")  # an absolute path a job script carries unquoted
_NFS = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):(/[A-Za-z0-9_.@+/-]*)\Z")
_SECRET_KEY = re.compile(r"^[-._A-Za-z0-9]{1,253}\Z")
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_.,+-]{1,128}\Z")  # partition(s), account, qos
_SLURM_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.,&|()\[\]*:!+-]{1,256}\Z")
_TOLERATION_KEYS = ("key", "operator", "value", "effect", "toleration_seconds")
_OPERATORS = ("Exists", "Equal")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# torchrun options the layout sets: a command naming them is refused (they would disagree)
LAYOUT_FLAGS = ("--nnodes", "--nproc_per_node", "--nproc-per-node", "--node_rank", "--node-rank",
                "--rdzv_backend", "--rdzv-backend", "--rdzv_endpoint", "--rdzv-endpoint",
                "--rdzv_id", "--rdzv-id", "--master_addr", "--master-addr", "--master_port",
                "--master-port", "--standalone")
MAX_COMMAND = 4000


@dataclass(frozen=True)
class SlurmConfig:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None  # --time (default: the smoke job's 30 minutes)
    constraint: str | None = None

    def directives(self) -> list[tuple[str, str]]:
        """(option, value) of the #SBATCH lines the team's keys add."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)
                if f.name != "time" and getattr(self, f.name) is not None]


@dataclass(frozen=True)
class Mount:
    """A volume the training files mount: a PVC, a host path, an NFS export or a config map
    (Kubernetes volumes), and on the Slurm nodes a host path (pyxis --container-mounts,
    Apptainer --bind): ``host`` itself, or ``slurm`` for the others (none: not mounted there)."""

    source: str  # pvc | host | nfs | configmap
    ref: str  # the claim, the host path, SERVER:/EXPORT, the config map's name
    path: str  # where it is mounted in the container
    read_only: bool = False
    name: str = ""  # the Kubernetes volume's name
    slurm: str | None = None  # the path on the Slurm nodes

    @property
    def host_path(self) -> str | None:
        return self.ref if self.source == "host" else self.slurm

    @property
    def volume(self) -> dict[str, Any]:
        """The Kubernetes volume source."""
        if self.source == "pvc":
            return {"persistentVolumeClaim": {"claimName": self.ref, "readOnly": self.read_only}}
        if self.source == "host":
            return {"hostPath": {"path": self.ref, "type": "Directory"}}
        if self.source == "nfs":
            server, _, export = self.ref.rpartition(":")
            return {"nfs": {"server": server.strip("[]"), "path": export,
                            "readOnly": self.read_only}}
        return {"configMap": {"name": self.ref}}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {self.source: self.ref, "path": self.path}
        if self.read_only:
            out["read_only"] = True
        if self.slurm:
            out["slurm"] = self.slurm
        return out


@dataclass(frozen=True)
class Restart:
    """Restart rules of the training files: whole-job restarts (JobSet failurePolicy, the
    PyTorchJob's and the indexed Job's backoffLimit) that torchrun's c10d rendezvous rejoins
    (--max_restarts), and the Job failure reasons that fail the JobSet without one."""

    max_restarts: int = 0
    fail_on: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"max_restarts": self.max_restarts, "fail_on": list(self.fail_on)}


@dataclass(frozen=True)
class Topology:
    """Kueue's topology-aware scheduling: every pod of a job in one domain of ``level``
    (``required``, or ``preferred``), and optionally slices of ``slice_size`` pods each in one
    domain of ``slice_level``."""

    level: str
    mode: str = "required"
    slice_level: str | None = None
    slice_size: int | None = None

    def annotations(self) -> dict[str, str]:
        out = {f"kueue.x-k8s.io/podset-{self.mode}-topology": self.level}
        if self.slice_level:
            out["kueue.x-k8s.io/podset-slice-required-topology"] = self.slice_level
            out["kueue.x-k8s.io/podset-slice-size"] = str(self.slice_size)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("level", self.level), ("mode", self.mode),
                                  ("slice_level", self.slice_level),
                                  ("slice_size", self.slice_size)) if v is not None}


@dataclass(frozen=True)
class Admission:
    """What the admission policies require beyond the key's signature: smoke attestation
    fields (``field=value``, a dotted path of the smoke predicate), and for keyless signing the
    identity (OIDC issuer and certificate subject) the keyless policy admits."""

    require: tuple[attestreq.Requirement, ...] = ()  # core.attestreq
    issuer: str | None = None
    subject: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"require": [attestreq.shown(r) for r in self.require]}
        if self.issuer:
            out.update(issuer=self.issuer, subject=self.subject)
        return out


@dataclass(frozen=True)
class JobsConfig:
    """How the job files are tailored: every field None / empty means "not set"."""

    command: str | None = None
    kubernetes: tuple[str, ...] | None = None  # the Kubernetes kinds written (default DEFAULT_KINDS)
    runtime: str | None = None
    queue: str | None = None
    cluster_queue: str | None = None  # with queue: also write a Kueue LocalQueue pointing here
    priority_class: str | None = None
    node_selector: Mapping[str, str] | None = None
    tolerations: tuple[Mapping[str, Any], ...] | None = None
    image_pull_secrets: tuple[str, ...] | None = None
    resources: Mapping[str, str] | None = None
    host_network: bool | None = None
    env: Mapping[str, str] | None = None
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    # the training files (train-*) only
    time: str | None = None  # Slurm's format; activeDeadlineSeconds and --time
    cpu: str | None = None  # per node, a Kubernetes CPU quantity
    memory: str | None = None  # per node, /dev/shm included
    shm: str | None = None
    exclusive: bool | str | None = None  # Slurm --exclusive[=user|mcs|topo]; False: shared nodes
    mounts: tuple[Mount, ...] | None = None
    workdir: str | None = None
    env_from_secrets: tuple[str, ...] | None = None
    secret_env: Mapping[str, Mapping[str, str]] | None = None  # variable -> {secret, key}
    restart: Restart | None = None
    # the smoke files only
    smoke_time: str | None = None
    # every pod
    service_account: str | None = None
    pod_labels: Mapping[str, str] | None = None
    pod_annotations: Mapping[str, str] | None = None
    topology: Topology | None = None
    runtime_namespace: str | None = None  # a namespaced TrainingRuntime in it
    controllers: Mapping[str, str] | None = None  # the cluster's controller versions
    admission: Admission | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        return self.kubernetes if self.kubernetes is not None else DEFAULT_KINDS

    @property
    def time_seconds(self) -> int | None:
        return slurm_seconds(self.time) if self.time else None

    @property
    def smoke_seconds(self) -> int | None:
        return slurm_seconds(self.smoke_time) if self.smoke_time else None

    def merged(self, over: JobsConfig) -> JobsConfig:
        """``over``'s keys win one by one (a target's table over the project's)."""
        kw: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "slurm":
                continue
            v = getattr(over, f.name)
            kw[f.name] = v if v is not None else getattr(self, f.name)
        kw["slurm"] = SlurmConfig(**{f.name: (getattr(over.slurm, f.name)
                                              if getattr(over.slurm, f.name) is not None
                                              else getattr(self.slurm, f.name))
                                     for f in fields(SlurmConfig)})
        cfg = JobsConfig(**kw)
        check(cfg)
        return cfg

    def with_command(self, command: str | None, where: str = "--command") -> JobsConfig:
        if command is None:
            return self
        return replace(self, command=check_command(command, where))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "slurm":
                s = {k.name: getattr(v, k.name) for k in fields(SlurmConfig)
                     if getattr(v, k.name) is not None}
                if s:
                    out["slurm"] = s
            elif v is not None:
                out[f.name] = _plain(v)
        return out


def _plain(v: Any) -> Any:
    if hasattr(v, "to_dict"):
        return v.to_dict()
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _bad(where: str, key: str, value: Any, why: str) -> InputError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:80] + "..."
    return InputError(f"{where}{key} {shown}: {why}")


def _label_key(k: Any, where: str, key: str) -> str:
    """A Kubernetes label/selector key: [DNS-subdomain prefix/]name (63 characters)."""
    if not isinstance(k, str):
        raise _bad(where, key, k, "is not a string")
    prefix, _, name = k.rpartition("/")
    if (prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix))) \
            or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        raise _bad(where, key, k, "is not a Kubernetes label key ([prefix/]name of letters, "
                                  "digits, '-', '_', '.'; e.g. nvidia.com/gpu.product)")
    return k


def _label_value(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.fullmatch(v):
        raise _bad(where, key, v, "is not a Kubernetes label value (at most 63 letters, digits, "
                                  "'-', '_', '.')")
    return v


def _dns_name(v: Any, where: str, key: str, *, subdomain: bool = False) -> str:
    pat, limit = (_DNS1123_SUBDOMAIN, 253) if subdomain else (_DNS1123_LABEL, 63)
    if not isinstance(v, str) or len(v) > limit or not pat.fullmatch(v):
        raise _bad(where, key, v, f"is not a Kubernetes name (lower-case letters, digits, '-'"
                                  f"{', ' + chr(39) + '.' + chr(39) if subdomain else ''}; "
                                  f"at most {limit} characters)")
    return v


def _tolerations(items: Any, where: str) -> tuple[Mapping[str, Any], ...]:
    out = []
    for i, t in enumerate(items):
        at = f"tolerations[{i}]."
        if not isinstance(t, Mapping):
            raise _bad(where, f"tolerations[{i}]", t, "is not a table such as "
                       "{ key = \"nvidia.com/gpu\", operator = \"Exists\", effect = \"NoSchedule\" }")
        unknown = sorted(set(t) - set(_TOLERATION_KEYS))
        if unknown:
            raise _bad(where, at + unknown[0], t[unknown[0]],
                       f"is not a toleration key (known: {', '.join(_TOLERATION_KEYS)})")
        tol: dict[str, Any] = {}
        op = t.get("operator", "Equal")
        if op not in _OPERATORS:
            raise _bad(where, at + "operator", op, f"must be one of {', '.join(_OPERATORS)}")
        if "key" in t:
            tol["key"] = _label_key(t["key"], where, at + "key")
        elif op != "Exists":
            raise _bad(where, at + "key", None, "is needed unless operator is Exists")
        tol["operator"] = op
        if "value" in t:
            if op == "Exists":
                raise _bad(where, at + "value", t["value"], "must be left out with operator Exists")
            tol["value"] = _label_value(t["value"], where, at + "value")
        if "effect" in t:
            if t["effect"] not in _EFFECTS:
                raise _bad(where, at + "effect", t["effect"], f"must be one of {', '.join(_EFFECTS)}")
            tol["effect"] = t["effect"]
        if "toleration_seconds" in t:
            s = t["toleration_seconds"]
            if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= 10**9 \
                    or tol.get("effect") != "NoExecute":
                raise _bad(where, at + "toleration_seconds", s,
                           "must be a whole number of seconds, with effect NoExecute")
            tol["tolerationSeconds"] = s
        out.append(tol)
    return tuple(out)


def _resources(table: Any, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, v in table.items():
        key = f"resources.{name}"
        _label_key(name, where, key)
        if name in OWN_RESOURCES:
            raise _bad(where, key, v, "is set by envbuilder from the layout (one GPU per rank) "
                                      "and from [jobs] cpu and memory (per node): set those, or "
                                      "name another resource here, e.g. rdma/ib")
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise _bad(where, key, v, "must be a count such as 1, or a quantity such as \"1\"")
        text = str(v)
        if not _QUANTITY.fullmatch(text) or text in ("0",):
            raise _bad(where, key, v, "must be a positive count or quantity, e.g. 1")
        out[name] = text
    return out


def _env(table: Any, where: str, key_of: str = "env") -> dict[str, str]:
    out: dict[str, str] = {}
    for name, v in table.items():
        key = f"{key_of}.{name}"
        if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name) or len(name) > 128:
            raise _bad(where, key, name, "is not an environment variable name (letters, "
                                         "digits, '_')")
        if name.startswith("PET_") or name in ("MASTER_ADDR", "MASTER_PORT", "RANK",
                                               "WORLD_SIZE", "LOCAL_RANK"):
            raise _bad(where, key, name, "is set by the launcher from the layout")
        if not isinstance(v, str) or len(v) > 4096 or any(ord(c) < 32 or ord(c) == 127 for c in v):
            raise _bad(where, key, v, "must be a one-line string (no control characters)")
        out[name] = v
    return out


def check_command(command: Any, where: str) -> str:
    """A training command: one line of words (split like a shell does), at most 4000
    characters; torchrun's layout options are refused (the layout sets them)."""
    if not isinstance(command, str) or not command.strip():
        raise _bad("", where, command, "must be a command such as \"torchrun train.py\"")
    if len(command) > MAX_COMMAND or any(ord(c) < 32 or ord(c) == 127 for c in command):
        raise _bad("", where, command, f"must be one line of at most {MAX_COMMAND} characters")
    try:
        words = shlex.split(command)
    except ValueError as e:
        raise _bad("", where, command, f"cannot be split into words ({e})") from None
    for w in words:
        flag = w.split("=", 1)[0]
        if flag in LAYOUT_FLAGS:
            raise _bad("", where, command,
                       f"sets {flag}, which the layout sets (layouts / --layout): drop it")
    return command


def _kinds(v: Any, where: str) -> tuple[str, ...]:
    kinds = tuple(v)
    for k in kinds:
        if k not in KINDS:
            raise _bad(where, "kubernetes", k, f"is not one of {', '.join(KINDS)}")
    if len(set(kinds)) != len(kinds):
        raise _bad(where, "kubernetes", list(kinds), "names a kind twice")
    return kinds


def _slurm(s: Mapping[str, Any], where: str) -> SlurmConfig:
    skw: dict[str, str] = {}
    for key in ("partition", "account", "qos"):
        if key in s:
            if not isinstance(s[key], str) or not _SLURM_NAME.fullmatch(s[key]):
                raise _bad(where, f"slurm.{key}", s[key], "must be a Slurm name (letters, digits, "
                                                          "'_', '.', ',', '+', '-')")
            skw[key] = s[key]
    if "constraint" in s:
        if not isinstance(s["constraint"], str) or not _SLURM_CONSTRAINT.fullmatch(s["constraint"]):
            raise _bad(where, "slurm.constraint", s["constraint"],
                       "must be a Slurm feature expression such as h100 or \"h100&ib\" (no spaces)")
        skw["constraint"] = s["constraint"]
    if "time" in s:
        if not isinstance(s["time"], str) or not _SLURM_TIME.fullmatch(s["time"]):
            raise _bad(where, "slurm.time", s["time"], "is not a Slurm time limit: MINUTES, "
                                                       "HH:MM:SS or D-HH:MM:SS, e.g. \"02:00:00\"")
        skw["time"] = s["time"]
    return SlurmConfig(**skw)


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity_bytes(q: str) -> int:
    """A Kubernetes memory quantity (``16Gi``, ``512M``, ``1.5Gi``) in bytes."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", q)
    if not m:
        raise InputError(f"{q!r} is not a quantity such as 16Gi")
    return int(float(m.group(1)) * _UNITS[m.group(2) or ""])


# -- the training files' settings ------------------------------------------------------------

def slurm_seconds(text: str) -> int:
    """A Slurm time limit (MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds."""
    days, _, rest = text.rpartition("-") if "-" in text else ("0", "", text)
    parts = [int(x) for x in rest.split(":")]
    if days != "0" or "-" in text:  # D-HH[:MM[:SS]]
        h, m, sec = (parts + [0, 0])[:3]
    elif len(parts) == 1:  # minutes
        h, m, sec = 0, parts[0], 0
    elif len(parts) == 2:  # MM:SS
        h, m, sec = 0, parts[0], parts[1]
    else:
        h, m, sec = parts
    return int(days) * 86400 + h * 3600 + m * 60 + sec


def _time(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str) or not _SLURM_TIME.fullmatch(v):
        raise _bad(where, key, v, "is not a time limit in Slurm's format: MINUTES, HH:MM:SS or "
                                  "D-HH:MM:SS, e.g. \"72:00:00\"")
    if not 0 < slurm_seconds(v) <= MAX_SECONDS:
        raise _bad(where, key, v, "must be more than 0 and at most 366 days")
    return v


def _cpu(v: Any, where: str) -> str:
    text = str(v) if isinstance(v, int) and not isinstance(v, bool) else v
    if not isinstance(text, str) or not _CPU.fullmatch(text) or float(text.rstrip("m")) <= 0 \
            or float(text.rstrip("m")) > (4096000 if text.endswith("m") else 4096):
        raise _bad(where, "cpu", v, "must be CPUs per node: a whole number such as 64, or a "
                                    "Kubernetes CPU quantity such as \"62.5\" or \"500m\"")
    return text


def _quantity(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str) or not _QUANTITY.fullmatch(v) or float(re.sub("[A-Za-z]", "", v)) <= 0:
        raise _bad(where, key, v, "must be a memory quantity per node such as \"400Gi\"")
    return v


def _exclusive(v: Any, where: str) -> bool | str:
    if isinstance(v, bool) or v in ("user", "mcs", "topo"):
        return v  # type: ignore[no-any-return]
    raise _bad(where, "exclusive", v, "must be true, false, or one of Slurm's --exclusive modes "
                                      "\"user\", \"mcs\", \"topo\"")


def _path(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str) or not _PATH.fullmatch(v) or len(v) > 1024 \
            or any(part == ".." for part in v.split("/")):
        raise _bad(where, key, v, "must be an absolute path of letters, digits and ._@+/- "
                                  "(no '..'), e.g. /workspace")
    return v.rstrip("/") or "/"


_RESERVED_PATHS = ("/", "/dev/shm", "/tmp/envbuilder-smoke", "/proc", "/sys", "/dev")


def _mount(m: Any, where: str, i: int, names: set[str], paths: set[str]) -> Mount:
    at = f"mounts[{i}]."
    if not isinstance(m, Mapping):
        raise _bad(where, f"mounts[{i}]", m, "is not a table such as { pvc = \"team-data\", "
                                             "path = \"/data\" }")
    unknown = sorted(set(m) - set(MOUNT_SOURCES) - {"path", "read_only", "name", "slurm"})
    if unknown:
        raise _bad(where, at + unknown[0], m[unknown[0]], "is not a mount key (known: "
                   f"{', '.join(MOUNT_SOURCES)}, path, read_only, name, slurm)")
    given = [k for k in MOUNT_SOURCES if k in m]
    if len(given) != 1:
        raise _bad(where, f"mounts[{i}]", dict(m), f"must name one source: {', '.join(MOUNT_SOURCES)}")
    source, ref = given[0], m[given[0]]
    if source == "host":
        ref = _path(ref, where, at + "host")
    elif source == "nfs":
        if not isinstance(ref, str) or not _NFS.fullmatch(ref) or len(ref) > 1024 \
                or ".." in ref.split(":", 1)[-1].split("/"):
            raise _bad(where, at + "nfs", ref, "must be SERVER:/EXPORT, e.g. nfs.example.com:/exports/data")
    else:
        ref = _dns_name(ref, where, at + source, subdomain=True)
    if "path" not in m:
        raise _bad(where, at + "path", None, "is needed: where the volume is mounted, e.g. /data")
    path = _path(m["path"], where, at + "path")
    if path in _RESERVED_PATHS or path in paths:
        raise _bad(where, at + "path", path, "is mounted by envbuilder or the runtime, or twice: "
                                             "choose another path")
    read_only = m.get("read_only", source == "configmap")
    if not isinstance(read_only, bool):
        raise _bad(where, at + "read_only", read_only, "must be true or false")
    name = _dns_name(m.get("name", f"mount-{i}"), where, at + "name")
    if name in names or name in ("dshm", "smoke-out"):
        raise _bad(where, at + "name", name, "names another volume: choose another name")
    slurm = _path(m["slurm"], where, at + "slurm") if "slurm" in m else None
    if slurm is not None and source == "host":
        raise _bad(where, at + "slurm", slurm, "is the host path itself for a host mount: drop it")
    names.add(name)
    paths.add(path)
    return Mount(source, ref, path, read_only, name, slurm)


def _mounts(items: Any, where: str) -> tuple[Mount, ...]:
    names: set[str] = set()
    paths: set[str] = set()
    return tuple(_mount(m, where, i, names, paths) for i, m in enumerate(items))


def _secret_env(table: Any, where: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for name, v in table.items():
        key = f"secret_env.{name}"
        _env({name: "x"}, where, "secret_env")  # the same rule as [jobs] env's names
        if not isinstance(v, Mapping) or set(v) != {"secret", "key"}:
            raise _bad(where, key, v, "must be a table { secret = \"NAME\", key = \"KEY\" }")
        secret = _dns_name(v["secret"], where, key + ".secret", subdomain=True)
        if not isinstance(v["key"], str) or not _SECRET_KEY.fullmatch(v["key"]):
            raise _bad(where, key + ".key", v["key"], "is not a secret's key (letters, digits, "
                                                      "'-', '_', '.')")
        out[name] = {"secret": secret, "key": v["key"]}
    return out


def _restart(v: Any, where: str) -> Restart:
    unknown = sorted(set(v) - {"max_restarts", "fail_on"})
    if unknown:
        raise _bad(where, "restart." + unknown[0], v[unknown[0]], "is not a restart key (known: "
                   "max_restarts, fail_on)")
    n = v.get("max_restarts", 0)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 100:
        raise _bad(where, "restart.max_restarts", n, "must be a whole number 0..100")
    reasons = v.get("fail_on", [])
    for r in reasons:
        if r not in JOB_FAILURE_REASONS:
            raise _bad(where, "restart.fail_on", r, f"is not a Job failure reason "
                                                    f"({', '.join(JOB_FAILURE_REASONS)})")
    return Restart(n, tuple(dict.fromkeys(reasons)))


def _topology(v: Any, where: str) -> Topology:
    unknown = sorted(set(v) - {"level", "mode", "slice_level", "slice_size"})
    if unknown:
        raise _bad(where, "topology." + unknown[0], v[unknown[0]], "is not a topology key "
                   "(known: level, mode, slice_level, slice_size)")
    if "level" not in v:
        raise _bad(where, "topology.level", None, "is needed: a node label of the cluster's "
                                                  "Kueue Topology, e.g. cloud.provider.com/topology-block")
    level = _label_key(v["level"], where, "topology.level")
    mode = v.get("mode", "required")
    if mode not in ("required", "preferred"):
        raise _bad(where, "topology.mode", mode, "must be required or preferred")
    sl, size = v.get("slice_level"), v.get("slice_size")
    if (sl is None) != (size is None):
        raise _bad(where, "topology.slice_size" if size is None else "topology.slice_level",
                   None, "slice_level and slice_size go together")
    if sl is not None:
        sl = _label_key(sl, where, "topology.slice_level")
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 1024:
            raise _bad(where, "topology.slice_size", size, "must be a number of pods 1..1024")
    return Topology(level, mode, sl, size)


def _controllers(v: Any, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, version in v.items():
        if name not in CONTROLLERS:
            raise _bad(where, f"controllers.{name}", version,
                       f"is not a controller envbuilder checks (known: {', '.join(CONTROLLERS)})")
        try:
            if not isinstance(version, str) or len(version) > 32:
                raise InvalidVersion
            Version(version.lstrip("v"))
        except InvalidVersion:
            raise _bad(where, f"controllers.{name}", version, "is not a version such as "
                                                              "\"0.12\"") from None
        out[name] = version.lstrip("v")
    return out


def _admission(v: Any, where: str) -> Admission:
    unknown = sorted(set(v) - {"require", "issuer", "subject"})
    if unknown:
        raise _bad(where, "admission." + unknown[0], v[unknown[0]], "is not an admission key "
                   "(known: require, issuer, subject)")
    req = []
    for i, item in enumerate(v.get("require", [])):
        got = attestreq.read(item)
        if isinstance(got, str):
            raise _bad(where, f"admission.require[{i}]", item, f"must be FIELD=VALUE of the smoke "
                       f"attestation: {got}")
        req.append(got)
    issuer, subject = v.get("issuer"), v.get("subject")
    if (issuer is None) != (subject is None):
        raise _bad(where, "admission.subject" if subject is None else "admission.issuer", None,
                   "issuer and subject go together (the keyless signer's identity)")
    for key, val in (("issuer", issuer), ("subject", subject)):
        if val is not None and (not isinstance(val, str) or not _IDENTITY.fullmatch(val)):
            raise _bad(where, f"admission.{key}", val, "must be an https:// URL or an e-mail "
                                                       "address (the certificate's identity)")
    return Admission(tuple(req), issuer, subject)


_IDENTITY = re.compile(r"^(https://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]{1,1000}"
                       r"|[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,253})\Z")


def _pod_labels(v: Any, where: str) -> dict[str, str]:
    out = {}
    for k, x in v.items():
        key = _label_key(k, where, f"pod_labels.{k}")
        if key in OWN_LABELS:
            raise _bad(where, f"pod_labels.{k}", x, "is set by envbuilder (names, layout, Kueue's "
                                                    "queue): choose another label")
        out[key] = _label_value(x, where, f"pod_labels.{k}")
    return out


def _pod_annotations(v: Any, where: str) -> dict[str, str]:
    out = {}
    for k, x in v.items():
        key = _label_key(k, where, f"pod_annotations.{k}")
        if key.startswith("kueue.x-k8s.io/podset-"):
            raise _bad(where, f"pod_annotations.{k}", x, "is set from [jobs] topology")
        if not isinstance(x, str) or len(x) > 8192 or any(ord(c) < 32 or ord(c) == 127 for c in x):
            raise _bad(where, f"pod_annotations.{k}", x, "must be a one-line string (no control "
                                                         "characters) of at most 8192 characters")
        out[key] = x
    return out


def _queue(v: Any, where: str) -> str:
    return _label_value(_dns_name(v, where, "queue", subdomain=True), where, "queue")


# key -> its check (value, where) -> the JobsConfig field's value
_PARSE: dict[str, Callable[[Any, str], Any]] = {
    "command": lambda v, w: check_command(v, w + "command"),
    "kubernetes": _kinds,
    "runtime": lambda v, w: _dns_name(v, w, "runtime", subdomain=True),
    "queue": _queue,
    "cluster_queue": lambda v, w: _dns_name(v, w, "cluster_queue", subdomain=True),
    "priority_class": lambda v, w: _dns_name(v, w, "priority_class", subdomain=True),
    "node_selector": lambda v, w: {_label_key(k, w, f"node_selector.{k}"):
                                   _label_value(x, w, f"node_selector.{k}") for k, x in v.items()},
    "tolerations": lambda v, w: _tolerations(v, w),
    "image_pull_secrets": lambda v, w: tuple(
        _dns_name(s, w, f"image_pull_secrets[{i}]", subdomain=True) for i, s in enumerate(v)),
    "resources": lambda v, w: _resources(v, w),
    "host_network": lambda v, w: bool(v),
    "env": lambda v, w: _env(v, w),
    "slurm": lambda v, w: _slurm(v or {}, w),
    "time": lambda v, w: _time(v, w, "time"),
    "cpu": _cpu,
    "memory": lambda v, w: _quantity(v, w, "memory"),
    "shm": lambda v, w: _quantity(v, w, "shm"),
    "exclusive": _exclusive,
    "mounts": _mounts,
    "workdir": lambda v, w: _path(v, w, "workdir"),
    "env_from_secrets": lambda v, w: tuple(
        _dns_name(s, w, f"env_from_secrets[{i}]", subdomain=True) for i, s in enumerate(v)),
    "secret_env": _secret_env,
    "restart": _restart,
    "smoke_time": lambda v, w: _time(v, w, "smoke_time"),
    "service_account": lambda v, w: _dns_name(v, w, "service_account", subdomain=True),
    "pod_labels": _pod_labels,
    "pod_annotations": _pod_annotations,
    "topology": _topology,
    "runtime_namespace": lambda v, w: _dns_name(v, w, "runtime_namespace"),
    "controllers": _controllers,
    "admission": _admission,
}


def parse(table: Mapping[str, Any] | None, where: str = "jobs.") -> JobsConfig:
    """A ``jobs`` table (already shape-checked by the project schema) as a JobsConfig."""
    if not table:
        return JobsConfig()
    unknown = sorted(set(table) - set(_PARSE))
    if unknown:  # the schema refuses them first; a library caller's dict is checked here
        raise _bad(where, unknown[0], table[unknown[0]],
                   f"is not a jobs key (known: {', '.join(_PARSE)})")
    cfg = JobsConfig(**{k: _PARSE[k](v, where) for k, v in table.items()})
    check(cfg, where)
    return cfg


def check(cfg: JobsConfig, where: str = "jobs.") -> None:
    """What one key cannot check alone (also after a target's table merged over the
    project's): /dev/shm counts against the pod's memory; a variable is set once."""
    if cfg.memory and cfg.shm and quantity_bytes(cfg.shm) >= quantity_bytes(cfg.memory):
        raise _bad(where, "shm", cfg.shm, f"must be less than memory ({cfg.memory}): the "
                                          "memory-backed /dev/shm counts against the pod's memory")
    both = sorted(set(cfg.env or {}) & set(cfg.secret_env or {}))
    if both:
        raise _bad(where, f"secret_env.{both[0]}", both[0], "is also set by [jobs] env: set it once")


__all__ = ["JobsConfig", "SlurmConfig", "Mount", "Restart", "Topology", "Admission", "parse",
           "check", "check_command", "slurm_seconds", "KINDS", "DEFAULT_KINDS",
           "CONTROLLERS"]
