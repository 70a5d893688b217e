"""Image labels: the one module that writes them (into the build plan) and reads them back
(``doctor --image``).

``LABELS`` is the table: each label key with the stack field it carries and whether every image
has it. ``write`` turns a resolved stack into the labels, in the table's order (the order of the
Dockerfile's LABEL instruction and the definition's %labels); ``read`` turns an image's labels
into ``StackFacts``, the typed input doctor judges a host against. To add a label, add a row
(and, when doctor should read it, a field of StackFacts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from packaging.version import InvalidVersion, Version

from envbuilder import __version__
from envbuilder.core import catalog
from envbuilder.errors import InputError

if TYPE_CHECKING:
    from envbuilder.core.matrix import Matrix
    from envbuilder.core.resolve import Stack

PREFIX = "io.envbuilder."
ARCH_RE = re.compile(r"(sm|compute)_\d+[a-z]?")


@dataclass(frozen=True)
class Label:
    key: str  # the label's name on the image
    field: str  # the field of ``facts(stack)`` it carries
    always: bool = True  # every image carries it; else it is left out when empty


_HEAD: tuple[Label, ...] = (
    Label("org.opencontainers.image.title", "title"),
    Label("org.opencontainers.image.description", "description"),
    Label("org.opencontainers.image.version", "tag"),
    Label("org.opencontainers.image.base.name", "base_image"),
    Label("org.opencontainers.image.vendor", "vendor"),
    Label(PREFIX + "version", "envbuilder_version"),
    Label(PREFIX + "target", "target"),
    Label(PREFIX + "torch", "torch"),
    Label(PREFIX + "torch-variant", "torch_variant"),
    Label(PREFIX + "python", "python"),
    Label(PREFIX + "os", "os"),
    Label(PREFIX + "cuda", "cuda"),  # "cpu" for CPU images: doctor --image reads any image
    Label(PREFIX + "matrix-digest", "matrix_digest"),
    Label(PREFIX + "cuda-toolkit", "cuda_toolkit", always=False),
    Label(PREFIX + "driver-min", "driver_min", always=False),
    Label(PREFIX + "driver-minor-compat", "driver_minor_compat", always=False),
    Label(PREFIX + "torch-arch", "torch_arch", always=False),
    Label(PREFIX + "nccl", "nccl", always=False),
)
_MIDDLE: tuple[Label, ...] = (
    Label(PREFIX + "flavour", "flavour", always=False),  # the runtime base flavour
    Label(PREFIX + "nccl-package", "nccl_package", always=False),
)
_TAIL: tuple[Label, ...] = (
    Label(PREFIX + "cuda-arch-list", "cuda_arch_list", always=False),  # TORCH_CUDA_ARCH_LIST compiled for
    Label(PREFIX + "builder-nvcc", "builder_nvcc", always=False),
    Label(PREFIX + "cpu-isa", "cpu_isa", always=False),  # -march of compiled CPU code
    Label(PREFIX + "fabric", "fabric", always=False),  # RDMA user space (CUDA images): ib, efa, none
)


def _table(components: Sequence[Any]) -> tuple[Label, ...]:
    """The rows for a matrix's components (core.catalog.Identity or core.matrix.Component): each
    one's version after NCCL's, each one's pre-built ops (comma-separated) after the package."""
    return (*_HEAD, *(Label(PREFIX + c.name, c.name, always=False) for c in components), *_MIDDLE,
            *(Label(PREFIX + c.ops_key.replace("_", "-"), c.ops_key, always=False)
              for c in components if c.has_ops), *_TAIL)


LABELS: tuple[Label, ...] = _table(catalog.builtin())  # the built-in matrix's
KEY_OF = {lab.field: lab.key for lab in LABELS}


def table(matrix: Matrix) -> tuple[Label, ...]:
    """The labels of an image made from ``matrix`` (a team's matrix may have other components)."""
    return _table(matrix.components)


def facts(stack: Stack, base_image: str | None = None, *, cuda_arch_list: str | None = None,
          cpu_isa: str | None = None) -> dict[str, str | None]:
    """The label values of ``stack``, by field name (None: the stack has no such value).
    ``cuda_arch_list`` and ``cpu_isa`` are build options of the plan (what compiled code targets)."""
    d = stack.to_dict()
    dm = d["driver_min"]
    return {
        "title": f"envbuilder {stack.target}",
        "description": f"PyTorch {d['torch']} ({d['torch_variant']}), Python {d['python']}, "
                       f"{d['os']}"
                       + "".join(f", {c.title} {d[c.name]}" for c in stack.matrix.components if d[c.name]),
        "tag": stack.tag,
        "base_image": base_image or stack.runtime_image,
        "vendor": "envbuilder",
        "envbuilder_version": __version__,
        "target": stack.target,
        "torch": d["torch"],
        "torch_variant": d["torch_variant"],
        "python": d["python"],
        "os": d["os"],
        "cuda": d["cuda"] or "cpu",
        "matrix_digest": stack.matrix.digest,
        "cuda_toolkit": d["cuda_toolkit"],
        "driver_min": dm["version"] if dm else None,
        "driver_minor_compat": dm["minor_compat"] if dm else None,
        "torch_arch": ",".join(d["torch_arch"]) or None,
        "nccl": d["nccl"],
        **{c: d[c] for c in stack.matrix.component_names},
        "flavour": d["flavour"],
        "nccl_package": d["nccl_package"],
        **{c.ops_key: ",".join(d[c.ops_key]) or None for c in stack.matrix.components if c.has_ops},
        "cuda_arch_list": cuda_arch_list,
        "builder_nvcc": (d["builder"] or {}).get("nvcc"),
        "cpu_isa": cpu_isa,
        "fabric": d.get("fabric") if d["cuda"] else None,
    }


def write(stack: Stack, extra: Mapping[str, str] | None = None,
          base_image: str | None = None, *, cuda_arch_list: str | None = None,
          cpu_isa: str | None = None) -> dict[str, str]:
    """The labels an image of ``stack`` carries (``extra``: the user's own, added last)."""
    values = facts(stack, base_image, cuda_arch_list=cuda_arch_list, cpu_isa=cpu_isa)
    labels: dict[str, str] = {}
    for lab in table(stack.matrix):
        v = values[lab.field]
        if lab.always or v:
            labels[lab.key] = str(v)
    labels.update(extra or {})
    for k, v in labels.items():
        if any(c in f"{k}{v}" for c in '"\\\n\r`$'):
            raise InputError(f"label {k}={v!r} contains a quote, backslash, '$', '`' or newline")
    return labels


# Labels the build adds (engine build arguments, not the Dockerfile): what the image was built
# from, known only when it is built.
BASE_DIGEST = PREFIX + "base-digest"
LOCK_DIGEST = PREFIX + "lock-digest"


def build_labels(*, base_digest: str, lock_digest: str | None = None) -> dict[str, str]:
    labels = {BASE_DIGEST: base_digest}
    if lock_digest is not None:
        labels[LOCK_DIGEST] = lock_digest
    return labels


# -- reading: what a host must offer an image ------------------------------------------------

@dataclass(frozen=True)
class DriverMin:
    version: str  # the CUDA release's minimum driver
    minor_compat: str  # the oldest driver that runs it through minor-version compatibility
    source: str = ""


@dataclass(frozen=True)
class StackFacts:
    """What doctor judges a host against: from a resolved stack or from an image's labels."""

    torch: str
    cuda: str | None = None  # None: a CPU-only stack
    cuda_toolkit: str | None = None
    driver_min: DriverMin | None = None
    torch_arch: tuple[str, ...] = ()
    fabric: str | None = None  # the RDMA user space the image carries: ib, efa, none (None: unknown)

    def __post_init__(self) -> None:
        if self.cuda is not None and self.driver_min is None:
            raise InputError("stack has cuda but no driver_min.version")
        if self.driver_min is not None:
            _version(self.driver_min.version, "driver_min.version")
            _version(self.driver_min.minor_compat, "driver_min.minor_compat")
        bad = [a for a in self.torch_arch if not (isinstance(a, str) and ARCH_RE.fullmatch(a))]
        if bad:
            raise InputError(f"stack torch_arch has unusable entries {bad}: "
                             "expected a list like ['sm_80', 'sm_90']")

    @classmethod
    def from_stack(cls, stack: Stack) -> StackFacts:
        return cls.from_mapping(stack.to_dict())

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any]) -> StackFacts:
        """From data shaped like the resolver's JSON (resolve --json, stack.json)."""
        if not isinstance(d, Mapping):
            raise InputError("stack must be a mapping shaped like the resolver's JSON output")
        dm = d.get("driver_min")
        driver_min = None
        if d.get("cuda") is not None:
            if not isinstance(dm, Mapping) or not dm.get("version"):
                raise InputError("stack has cuda but no driver_min.version")
            driver_min = DriverMin(str(dm["version"]),
                                   str(dm.get("minor_compat") or dm["version"]),
                                   str(dm.get("source") or ""))
        arch = d.get("torch_arch") or ()
        if not isinstance(arch, (list, tuple)):
            raise InputError(f"stack torch_arch {arch!r} is not a list like ['sm_80', 'sm_90']")
        fabric = d.get("fabric")
        return cls(torch=str(d.get("torch") or "?"), cuda=d.get("cuda"),
                   cuda_toolkit=d.get("cuda_toolkit"), driver_min=driver_min,
                   torch_arch=tuple(arch), fabric=str(fabric) if fabric else None)


def _version(v: Any, what: str) -> Version:
    try:
        return Version(str(v).strip())
    except (InvalidVersion, TypeError):
        raise InputError(f"{what} {v!r} is not a version like 535.104.05") from None


def read(labels: Mapping[str, str]) -> StackFacts:
    """The facts an envbuilder image carries in its labels (doctor --image).

    Raises InputError when a label doctor needs is missing or unusable."""
    if not isinstance(labels, Mapping):
        raise InputError("image labels must be a mapping of strings")
    lab = {field: (labels.get(key) or "").strip() for field, key in KEY_OF.items()}
    if KEY_OF["cuda"] not in labels:
        raise InputError(f"image has no {KEY_OF['cuda']} label: it was not built by envbuilder "
                         "(or its labels were stripped)")
    cuda_raw = lab["cuda"]
    cuda = None if cuda_raw.lower() in ("", "none", "cpu") else cuda_raw
    if cuda is not None and not re.fullmatch(r"\d+\.\d+", cuda):
        raise InputError(f"label {KEY_OF['cuda']}={cuda_raw!r} is not a CUDA version like 12.1")
    missing = [KEY_OF[f] for f in ("torch",) + (("driver_min", "torch_arch") if cuda else ())
               if not lab[f]]
    if missing:
        raise InputError("image is missing label(s) " + ", ".join(missing))
    driver_min = None
    if cuda:
        key = KEY_OF["driver_min"]
        _version(lab["driver_min"], f"label {key}")
        minor = lab["driver_minor_compat"] or lab["driver_min"]
        _version(minor, f"label {KEY_OF['driver_minor_compat']}")
        driver_min = DriverMin(lab["driver_min"], minor, f"image label {key}")
    arch = tuple(a.strip() for a in lab["torch_arch"].split(",") if a.strip())
    bad = [a for a in arch if not ARCH_RE.fullmatch(a)]
    if bad:
        raise InputError(f"label {KEY_OF['torch_arch']} has unusable entries {bad}")
    return StackFacts(torch=lab["torch"], cuda=cuda, cuda_toolkit=lab["cuda_toolkit"] or None,
                      driver_min=driver_min, torch_arch=arch, fabric=lab["fabric"] or None)
