"""The project's ``[jobs]`` table: how the cluster job files are tailored (one frozen value).

A project writes (every key optional; a target's own ``jobs`` table overrides the project's
key by key, and its ``slurm`` table key by key inside that)::

    [jobs]
    command = "torchrun train.py --config configs/a.yaml"   # ranks/rendezvous from the layout
    kubernetes = ["trainjob", "jobset", "indexed-job"]      # + "legacy" for a PyTorchJob
    runtime = "torch-distributed"          # the ClusterTrainingRuntime a TrainJob references
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

from envbuilder.core.validate import ENV_NAME_RE
from envbuilder.errors import InputError

KINDS = ("trainjob", "jobset", "indexed-job", "legacy")  # legacy: the kubeflow.org/v1 PyTorchJob
DEFAULT_KINDS = ("trainjob", "jobset", "indexed-job")
DEFAULT_RUNTIME = "torch-distributed"
# envbuilder sets these itself (from the layout): a team's resources name others
OWN_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?\Z")
# Slurm's --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_SLURM_TIME = re.compile(r"^([0-9]+|[0-9]+:[0-9]{2}|[0-9]+:[0-9]{2}:[0-9]{2}|[0-9]+-[0-9]+"
                         r"|[0-9]+-[0-9]+:[0-9]{2}|[0-9]+-[0-9]+:[0-9]{2}:[0-9]{2})\Z")
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

    @property
    def kinds(self) -> tuple[str, ...]:
        return self.kubernetes if self.kubernetes is not None else DEFAULT_KINDS

    @property
    def runtime_name(self) -> str:
        return self.runtime or DEFAULT_RUNTIME

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
        return JobsConfig(**kw)

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
                out[f.name] = (list(v) if isinstance(v, tuple) else
                               dict(v) if isinstance(v, Mapping) else v)
        return out


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
            raise _bad(where, key, v, "is set by envbuilder from the layout (cpus per rank, "
                                      "memory, one GPU per rank): name another resource, "
                                      "e.g. rdma/ib")
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise _bad(where, key, v, "must be a count such as 1, or a quantity such as \"1\"")
        text = str(v)
        if not _QUANTITY.fullmatch(text) or text in ("0",):
            raise _bad(where, key, v, "must be a positive count or quantity, e.g. 1")
        out[name] = text
    return out


def _env(table: Any, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, v in table.items():
        key = f"env.{name}"
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
}


def parse(table: Mapping[str, Any] | None, where: str = "jobs.") -> JobsConfig:
    """A ``jobs`` table (already shape-checked by the project schema) as a JobsConfig."""
    if not table:
        return JobsConfig()
    unknown = sorted(set(table) - set(_PARSE))
    if unknown:  # the schema refuses them first; a library caller's dict is checked here
        raise _bad(where, unknown[0], table[unknown[0]],
                   f"is not a jobs key (known: {', '.join(_PARSE)})")
    return JobsConfig(**{k: _PARSE[k](v, where) for k, v in table.items()})


__all__ = ["JobsConfig", "SlurmConfig", "parse", "check_command", "KINDS", "DEFAULT_KINDS",
           "DEFAULT_RUNTIME"]
