"""Every option of a target, declared once, and the one cascade over them.

An option is one row of ``OPTIONS``: its name (the field of ``Pins`` for a pin, else of
``TargetSpec``), its kind, its command-line flag, its project key, the type of its value, its
help, and the check its value passes. Everything else is derived from the table:

* the command line's options (``ui.options`` builds each ``typer.Option`` from its row);
* the project file: which keys a file and each of its ``[[targets]]`` may set (``project_keys``:
  an unknown key gets a did-you-mean, core.project) and the value each key becomes
  (``project_value``);
  ``data/project.schema.json`` is checked against the table by a test (tests/test_options.py);
* the cascade (``cascade``): defaults < the project's top-level keys < the project target's own
  table < the command line, one generic loop; the spec is then checked once (``check_values``),
  each value's error naming where it came from (``--base-image`` or the project file's key);
* the lock's "made by" line (``pin_flags``: the pins a command line states).

Kinds: ``pin`` pins an axis of the stack (``Pins``); ``spec`` says what to resolve and add;
``build`` how to build it; ``job`` how to run and publish it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from envbuilder.core import catalog
from envbuilder.errors import InputError

KINDS = ("pin", "spec", "build", "job")
# the matrix's components: a pin option (and a project key) each, and a --TAG-ops option for a
# component with pre-built ops, read from the built-in matrix's component files
# (core.catalog: their one-line identity, without PyYAML: --help imports no resolver)
COMPONENTS = tuple(c.name for c in catalog.builtin())
COMPONENT_TITLES = {c.name: c.title for c in catalog.builtin()}  # their names in sentences
COMPONENT_CHECKS = {c.name: c.checks for c in catalog.builtin()}  # what verify checks of each
# what a project file holds besides options: its targets, and settings of the project itself
PROJECT_ONLY_KEYS = ("targets", "jobs", "signing_key", "explain_cases")
TARGET_ONLY_KEYS = ("name", "target", "jobs")
# the options of the command line that are not a target's: what to act on, where to write,
# how to print. Every other option `render --help` shows is a project key (tests/test_options.py)
COMMAND_LINE_ONLY = ("--out", "--all", "--only", "--lock", "--quiet", "--take-jobs", "--matrix",
                     "--json", "--help")

_STR = {"type": "string", "minLength": 1, "maxLength": 64}
_STRS = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 64}}
_URL = {"type": "string", "minLength": 1, "maxLength": 1000}
_LAYOUTS = {"type": "array", "maxItems": 64,
            "items": {"type": "string", "pattern": "^[0-9]{1,4}x[0-9]{1,4}$"}}
_REQUIREMENTS = {"oneOf": [
    {"type": "string", "minLength": 1, "maxLength": 1000},
    {"type": "array", "maxItems": 1000, "items": {"type": "string", "minLength": 1, "maxLength": 500}}]}


@dataclass(frozen=True)
class Option:
    """One option: what it is, how the command line and the project file spell it."""

    name: str  # the field: of Pins (kind "pin"; a component's pin or ops: Pins.of), else of TargetSpec
    kind: str  # pin | spec | build | job
    flag: str | None  # the command-line flag (None: a project key only)
    key: str | None  # the project key (None: the command line only); "jobs.command": a subkey
    value: str  # str | int | float | bool | path | list | csv | requirements
    help: str
    group: str  # the group of options a command takes (ui.options.spec_options)
    schema: Mapping[str, Any] = field(default_factory=dict)  # the project key's JSON Schema
    param: str | None = None  # the CLI function's parameter (default: the name)
    metavar: str | None = None
    min: int | None = None
    complete: str | None = None  # api.complete's kind for shell completion
    scope: str = "both"  # project file: "both" (top level and each target) or "target"
    # check(value, what) -> value: the one validation of a value (what: "--flag" or the key)
    check: Callable[[Any, str], Any] | None = None

    @property
    def fields(self) -> tuple[str, ...]:
        """The spec fields the option sets (requirements: a file or lines, and where from)."""
        if self.value == "requirements":
            return ("requirements_file", "requirements", "requirements_source")
        return (self.name,)

    @property
    def param_name(self) -> str:
        return self.param or self.name


def _image(v: str, what: str) -> str:
    from envbuilder.core import validate

    return validate.image_ref(v, what)


def _url(v: str, what: str) -> str:
    from envbuilder.core import validate

    return validate.url(v, what)


def _urls(v: Sequence[str], what: str) -> tuple[str, ...]:
    return tuple(_url(u, what) for u in v)


def _torch_index(v: str, what: str) -> str:
    """A URL template with ``{variant}`` (or a plain URL), safe once the variant is in it, and
    without credentials: those come from the environment or ~/.netrc, never from a file."""
    from envbuilder.core import validate

    if not isinstance(v, str):
        raise InputError(f"{what} {v!r} is not a URL: use e.g. https://mirror.example/whl/{{variant}}")
    probe = v.replace("{variant}", "cpu")
    if "{" in probe or "}" in probe:
        raise InputError(f"{what} {v!r} has a placeholder other than {{variant}}: use e.g. "
                         f"https://mirror.example/whl/{{variant}}")
    validate.url(probe, what)
    if validate.has_credentials(probe):
        raise InputError(f"{what} carries credentials (user:password@ or a ?query): remove them and put them in "
                         f"~/.netrc (machine HOST login USER password TOKEN), which uv and pip read; "
                         f"envbuilder never writes them into a file")
    return v


INDEX_STRATEGIES = ("first-index", "unsafe-first-match", "unsafe-best-match")


def _index_strategy(v: str, what: str) -> str:
    if v not in INDEX_STRATEGIES:
        raise InputError(f"{what} {v!r} is not an index strategy: use one of {', '.join(INDEX_STRATEGIES)}")
    return v


def _repository(v: str, what: str) -> str:
    from envbuilder.core import validate

    return validate.repository(v, what)


def _layouts(v: Sequence[Any], what: str) -> tuple[tuple[int, int], ...]:
    """``2x8`` (or ``8,8``: even) layouts as (nodes, ranks per node) pairs, in order."""
    from envbuilder.core import layouts

    if all(isinstance(x, tuple) for x in v):  # already the pairs
        return tuple(v)
    return layouts.parse_layouts(v, what)


def _nproc(v: int, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InputError(f"{what} {v!r} must be at least 1")
    return v


def _min_busbw(v: Any, what: str) -> float:
    """A bandwidth floor in GB/s: above 0 (and below 100000)."""
    try:
        value = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{what} {v!r} is not a number of GB/s") from None
    if not 0 < value < 100000:
        raise InputError(f"{what} {v!r} must be a bandwidth in GB/s above 0, e.g. 100 for an NVLink node")
    return value


def _exclude_newer(v: str, what: str) -> str:
    """A date or time, as the RFC 3339 UTC timestamp the resolver, uv and the lock read."""
    from envbuilder.core import validate

    return str(validate.exclude_newer(v, what))


def _version_pin(v: Any, what: str) -> Any:
    """A version pin (``2.1``: a line; ``2.1.2``: a version) as a core.target.Pin."""
    from envbuilder.core.target import Pin

    return v if isinstance(v, Pin) else Pin.parse(v, what)


def _python_pin(v: Any, what: str) -> Any:
    """A Python pin: major.minor (a longer version names its line), or a free-threaded 3.14t."""
    from envbuilder.core import validate
    from envbuilder.core.target import Pin

    if isinstance(v, Pin):
        return v
    if validate.free_threaded_python(v):
        return Pin(v, exact=False)  # "3.14t": matched by name (rules, unknown_pins)
    ver = validate.version(v, what)
    if len(ver.release) < 2:
        raise InputError(f"{what} {v!r} is not a Python version: give major.minor, e.g. 3.11")
    return Pin(f"{ver.major}.{ver.minor}", exact=False)


def _driver(v: str, what: str) -> str:
    from envbuilder.core import validate

    return validate.driver_version(v, what)


def _platform(v: str, what: str) -> str:
    from envbuilder.core import validate

    return validate.platform(v, what)


FABRICS = ("ib", "efa", "none")


def _fabric(v: str, what: str) -> str:
    from envbuilder.core import validate

    if v not in FABRICS:
        raise InputError(f"{what} {str(v)[:40]!r} is not a fabric{validate.suggest(str(v), FABRICS)}; "
                         f"known: {', '.join(FABRICS)}")
    return v


def _names(v: Iterable[Any], what: str) -> tuple[str, ...]:
    """``--with``/``--without``: component names (each item may be comma-separated)."""
    return tuple(dict.fromkeys(n.strip() for item in v for n in str(item).split(",") if n.strip()))


def _ops_option(c: catalog.Identity) -> Option:
    """``--TAG-ops``: the ops of component ``c`` to pre-build (a list in a project file)."""
    ops = ",".join(c.ops_default or ())
    return Option(c.ops_option, "pin", f"--{c.ops_option.replace('_', '-')}", c.ops_option, "csv",
                  f"{c.title} ops to pre-build, e.g. {ops} (default on CUDA: {ops}); "
                  "none: JIT (needs nvcc in the runtime).", _P,
                  {"description": f"{c.title} ops to pre-build, e.g. {json.dumps(list(c.ops_default or ()))} (as "
                                  "in matrices/targets.yaml); [] builds none (JIT: needs nvcc in the runtime).",
                   "type": "array", "maxItems": 32, "items": {"type": "string", "minLength": 1, "maxLength": 64}},
                  metavar="OPS")


# the options that name a component's ops to pre-build, to the component they belong to
OPS_OPTIONS = {c.ops_option: c.name for c in catalog.builtin() if c.ops_default is not None}

_P = "pins"
OPTIONS: tuple[Option, ...] = (
    # -- pins: the axes a target's parts pin (core.target.Pins holds them, checked when made) -----
    Option("torch", "pin", "--torch", "torch", "str", "Pin torch: a line (2.1) or a version (2.1.2).", _P, _STR,
           check=_version_pin),
    Option("python", "pin", "--python", "python", "str", "Pin Python, e.g. 3.10.", _P, _STR, check=_python_pin),
    *(Option(c.name, "pin", f"--{c.name}", c.name, "str", f"Pin {c.title} (and include it).", _P, _STR,
             check=_version_pin) for c in catalog.builtin()),
    Option("nccl", "pin", "--nccl", "nccl", "str", "Pin NCCL (must be the one torch bundles).", _P, _STR,
           check=_version_pin),
    Option("os", "pin", "--os", "os", "str", "Pin the base OS, e.g. ubuntu22.04.", _P, _STR, param="os_"),
    Option("driver", "pin", "--driver", "driver", "str",
           "The driver of the hosts the image must run on, e.g. 525.60.13.", _P, _STR, check=_driver),
    Option("with_", "pin", "--with", "with", "list", f"Include components: {','.join(COMPONENTS)}.", _P, _STRS,
           check=_names),
    Option("without", "pin", "--without", "without", "list", f"Exclude components: {','.join(COMPONENTS)}.", _P,
           _STRS, check=_names),
    Option("flavour", "pin", "--flavour", "flavour", "str",
           "Runtime base flavour: cuda-base (default), cuda-runtime, cudnn-runtime or os.", _P, _STR,
           metavar="NAME", complete="flavour"),
    *(_ops_option(c) for c in catalog.builtin() if c.ops_default is not None),
    Option("platform", "pin", "--platform", "platform", "str",
           "The image's platform: linux/amd64 (default) or linux/arm64.", _P,
           {"description": "The image's platform.", "enum": ["linux/amd64", "linux/arm64"]}, check=_platform),
    Option("fabric", "pin", "--fabric", "fabric", "str",
           "RDMA user space in CUDA images and the job files' RDMA settings: ib (default: verbs, rdmacm, "
           "ibv_devinfo), efa (+ libfabric, aws-ofi-nccl), none.", _P,
           {"description": "RDMA user space in CUDA images: ib (default), efa or none.", "type": "string",
            "enum": list(FABRICS)}, metavar="FABRIC", check=_fabric),
    # -- spec: what to resolve and what to add ----------------------------------------------------
    Option("matrix_overlay", "spec", "--matrix-overlay", "matrix_overlay", "path",
           "A team's matrix folder whose entries are added to (or replace) the matrix's (default: the "
           "project's matrix_overlay).", "overlay",
           {"description": "A folder of matrix files whose entries are added to (or replace) the built-in "
                           "matrix's.", "type": "string", "minLength": 1, "maxLength": 1000},
           metavar="DIR"),
    Option("requirements", "spec", "--requirements", "requirements", "requirements",
           "The team's own requirements file, in a layer of its own and locked with the stack (default: "
           "the project's).", "requirements",
           {"description": "The team's own Python packages, installed in their own layer above torch and "
                           "the compiled components: a requirements file (path) or a list of requirement "
                           "lines. A target's own replace the project's.", **_REQUIREMENTS}),
    Option("compiled", "spec", None, "compiled", "list",
           "Packages of the requirements that compile against torch.", "requirements",
           {"description": "Packages of the requirements that compile C++/CUDA extensions against torch, "
                           "besides those envbuilder knows (flash-attn, apex, xformers ...): built in a "
                           "team-compiled layer after torch with --no-build-isolation and the target's nvcc "
                           "and TORCH_CUDA_ARCH_LIST.",
            "type": "array", "maxItems": 100,
            "items": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"}}),
    Option("exclude_newer", "spec", "--exclude-newer", "exclude_newer", "str",
           "Leave out releases and files uploaded after DATE (ISO date = 00:00 UTC, or a time): the "
           "resolver's candidates and uv's; recorded in the lock (default: the project's).", "exclude_newer",
           {"description": "Leave out releases and files uploaded after this date (ISO date = 00:00 UTC, or "
                           "an RFC 3339 time), for the resolver's candidates and uv's: a lock made from this "
                           "file alone is reproducible.", "type": "string", "minLength": 1, "maxLength": 64},
           metavar="DATE", check=_exclude_newer),
    # -- build: how to build it -------------------------------------------------------------------
    Option("base_image", "build", "--base-image", "base_image", "str",
           "The runtime base image (and the builder's, unless it is a CUDA devel image).", "images",
           {"description": "The runtime base image (and the builder's, unless it is a CUDA devel image).",
            "type": "string", "minLength": 1, "maxLength": 512}, check=_image),
    Option("builder_image", "build", "--builder-image", "builder_image", "str",
           "The builder stage's image (a CUDA devel image when something compiles).", "images",
           {"description": "The builder stage's image (a CUDA devel image when something compiles).",
            "type": "string", "minLength": 1, "maxLength": 512}, metavar="IMAGE", check=_image),
    Option("cuda_arch", "build", "--cuda-arch", "cuda_arch", "csv",
           "Narrow the CUDA archs compiled code is built for, e.g. 8.0,9.0 (default: torch's own).", "images",
           {"description": "The CUDA archs compiled code is built for, e.g. [\"8.0\", \"9.0\"] (default: "
                           "torch's own).", "type": "array", "maxItems": 32,
            "items": {"type": "string", "minLength": 1, "maxLength": 16}}, metavar="LIST"),
    Option("cpu_isa", "build", "--cpu-isa", "cpu_isa", "str",
           "-march of compiled CPU code (pre-built CPU ops): x86-64-v3 (default), x86-64-v4, x86-64-v2.",
           "images", {"description": "-march of compiled CPU code (pre-built CPU ops): x86-64-v3 (default), "
                                     "x86-64-v4, x86-64-v2.", **_STR}, metavar="ISA"),
    Option("pip_index_url", "build", "--pip-index-url", "pip_index_url", "str",
           "The package index (a PyPI mirror) to install and lock from (default: the project's).", "index",
           {"description": "The package index (a PyPI mirror) to install and lock from.", **_URL}, check=_url),
    Option("extra_index_urls", "build", "--extra-index-url", "extra_index_urls", "list",
           "Another package index to install and lock from; repeatable (default: the project's).", "index",
           {"description": "More package indexes to install and lock from.", "type": "array", "maxItems": 16,
            "items": _URL}, param="extra_index_url", check=_urls),
    Option("torch_index_url", "build", "--torch-index-url", "torch_index_url", "str",
           "PyTorch's wheel index for a variant, a template with {variant} (e.g. "
           "https://mirror.example/whl/{variant}): replaces download.pytorch.org in the lock and the "
           "image (default: the project's, else PyTorch's own).", "index",
           {"description": "PyTorch's wheel index, a template with {variant} (cpu, cu121 ...), e.g. "
                           "https://mirror.example/whl/{variant}: replaces download.pytorch.org in the lock "
                           "and the rendered files. Credentials come from the environment or ~/.netrc, "
                           "never from this file.", **_URL}, metavar="URL", check=_torch_index),
    Option("index_strategy", "build", "--index-strategy", "index_strategy", "str",
           "How uv picks among indexes when locking: first-index (default: each package from the first "
           "index that has it), unsafe-first-match or unsafe-best-match (open to dependency confusion).",
           "index", {"description": "How uv picks among the indexes when locking (first-index, "
                                    "unsafe-first-match, unsafe-best-match; default first-index).",
                     "enum": ["first-index", "unsafe-first-match", "unsafe-best-match"]},
           metavar="STRATEGY", check=_index_strategy),
    # -- job: how to run and publish it -----------------------------------------------------------
    Option("nproc", "job", "--nproc", "nproc", "int",
           "Ranks of the smoke job (default 12, or the layouts'): job files for one node of N plus splits "
           "for 8- and 4-GPU nodes.", "jobs",
           {"description": "Ranks of the smoke job (default 12, or the layouts').", "type": "integer",
            "minimum": 1, "maximum": 65536}, min=1, check=_nproc),
    Option("layouts", "job", "--layout", "layouts", "list",
           "Job files for NNODESxNPROC_PER_NODE, e.g. 2x8 (repeat or comma-separate; one world size; "
           "default: the project's layouts).", "jobs",
           {"description": "GPU layouts (nodes x ranks, e.g. 1x8) the team's jobs run with; a target's own "
                           "replace the project's.", **_LAYOUTS}, param="layout", check=_layouts),
    Option("image", "job", "--image", "image", "str",
           "The image the jobs/ files run (default: the image's name, [REGISTRY/]REPOSITORY:TAG).",
           "jobs", {"description": "The image this target's jobs/ files run (default: [REGISTRY/]REPOSITORY:TAG).",
                    "type": "string", "minLength": 1, "maxLength": 512}, scope="target", check=_image),
    Option("infiniband", "job", "--infiniband", "infiniband", "bool",
           "Job files request IPC_LOCK for RDMA.", "jobs",
           {"description": "Job files request IPC_LOCK for RDMA.", "type": "boolean"}),
    Option("min_busbw", "job", "--min-busbw", "min_busbw", "float",
           "monitoring/ alerts when the smoke job's all-reduce busbw falls below this (GB/s).", "jobs",
           {"description": "monitoring/ alerts when the smoke job's all-reduce busbw falls below this (GB/s).",
            "type": "number", "exclusiveMinimum": 0}, check=_min_busbw),
    Option("command", "job", "--command", "jobs.command", "str",
           "The team's training command the job files also run (train-* files), e.g. 'torchrun train.py "
           "--config a.yaml': ranks and rendezvous come from the layout (default: the project's [jobs] "
           "command).", "jobs"),
    Option("registry", "job", "--registry", "registry", "str",
           "The registry and namespace images go under, e.g. 127.0.0.1:5077/ml: images are "
           "REGISTRY/REPOSITORY:<tag>, the job files pull them and build --push pushes there (default: the "
           "project's registry, else local names).", "registry",
           {"description": "The registry and namespace images are pushed to and tagged under (host/ns); the "
                           "image is registry/repository. A file that sets registry and no repository keeps "
                           "registry's old meaning, a whole repository (with a warning). A target's own "
                           "replaces the project's.", "type": "string", "minLength": 1,
            "maxLength": 500}, metavar="HOST/NS", check=_repository),
    Option("repository", "job", "--repository", "repository", "str",
           "The image's repository under the registry (default: the project's folder name, else envbuilder).",
           "registry",
           {"description": "The image's repository under the registry (default: the project's folder name).",
            "type": "string", "minLength": 1, "maxLength": 200}, metavar="NAME", check=_repository),
)
BY_NAME = {o.name: o for o in OPTIONS}
BY_KEY = {o.key: o for o in OPTIONS if o.key is not None and "." not in o.key}
_FIELDS = frozenset(f for o in OPTIONS for f in o.fields)
PIN_NAMES = tuple(o.name for o in OPTIONS if o.kind == "pin")
GROUPS: dict[str, tuple[str, ...]] = {}
for _o in OPTIONS:
    GROUPS.setdefault(_o.group, ())
    GROUPS[_o.group] += (_o.name,)


def get(name: str) -> Option:
    """The option ``name``; a name the table lacks is a programming error, named."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no option {name!r} in envbuilder.core.options.OPTIONS") from None


def split_csv(value: str | None) -> tuple[str, ...]:
    return tuple(a.strip() for a in (value or "").replace(";", ",").split(",") if a.strip())


_BY_FIELD = {f: o for o in OPTIONS for f in o.fields}


def given(values: Mapping[str, Any]) -> dict[str, Any]:
    """A layer of the cascade as the command line (or a library caller) gives it: values by
    the option table's names (a pin's, a field of TargetSpec; a requirements file as
    ``requirements_file``, requirement lines as ``requirements``), only the values given
    (None, False and () mean "not given"; 0 is a value), each as the cascade holds it: a list
    as a tuple, a comma-separated list (``--cuda-arch 8.0,9.0``) split, a path as a Path. A
    name no option has is a programming error (TypeError)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        opt = _BY_FIELD.get(name)
        if opt is None:
            import difflib

            close = difflib.get_close_matches(name, list(_BY_FIELD), n=1)
            raise TypeError(f"no option {name!r} in envbuilder.core.options.OPTIONS"
                            + (f" (did you mean {close[0]}?)" if close else ""))
        if value is None or value is False or (isinstance(value, (tuple, list)) and not value):
            continue
        if name == "requirements":  # the lines of a library caller
            value = (value,) if isinstance(value, str) else tuple(value)
        elif opt.value == "list" or (opt.value == "csv" and opt.kind != "pin"):
            value = split_csv(value) if isinstance(value, str) else tuple(value)
        elif opt.value in ("path", "requirements") and name != "requirements_source":
            value = Path(value)
        if value != ():
            out[name] = value
    return out


# -- the project file ---------------------------------------------------------------------------

def project_keys(where: str) -> tuple[str, ...]:
    """The keys a project file's top level (``where="top"``) or a target's table may set."""
    opts = tuple(o.key for o in OPTIONS if o.key is not None and "." not in o.key
                 and (where == "target" or o.scope == "both"))
    return opts + (PROJECT_ONLY_KEYS if where == "top" else TARGET_ONLY_KEYS)


def schema_properties(where: str) -> dict[str, Any]:
    """The JSON Schema of the option keys a project file's top level (``where="top"``) or a
    target's table may set: data/project.schema.json holds them (tests/test_options.py)."""
    return {o.key: dict(o.schema) for o in OPTIONS if o.key is not None and "." not in o.key
            and (where == "target" or o.scope == "both")}


def project_value(opt: Option, value: Any, path: Path, where: str) -> dict[str, Any]:
    """A project key's value as the spec fields it sets (paths are relative to the file)."""
    root = path.parent
    if opt.value == "requirements":
        req_file = root / value if isinstance(value, str) else None
        if req_file is not None and not req_file.is_file():
            raise InputError(f"project file {path}, key {where}: {req_file} is not a file")
        return {"requirements_file": req_file,
                "requirements": tuple(value) if isinstance(value, list) else (),
                "requirements_source": f"{path} {where}"}
    if opt.value == "path":
        p = root / value
        if opt.name == "matrix_overlay" and not p.is_dir():
            raise InputError(f"project file {path}, key {where}: {p} is not a folder")
        return {opt.name: p}
    if opt.name in OPS_OPTIONS:  # a list, as in matrices/targets.yaml; [] = none (JIT)
        return {opt.name: ",".join(value) if value else "none"}
    if opt.value in ("list", "csv"):
        return {opt.name: tuple(value)}
    return {opt.name: value}


def project_values(table: Mapping[str, Any], path: Path, prefix: str) -> dict[str, Any]:
    """The options a project table sets, as fields (``prefix``: "" or "targets.NAME.")."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        opt = BY_KEY.get(key)
        if opt is not None:
            out.update(project_value(opt, value, path, prefix + key))
            out.setdefault("_where", {})[opt.name] = f"project file {path}, key {prefix}{key}:"
    return out


# -- the cascade ----------------------------------------------------------------------------------

def with_without(with_: Iterable[Any], without: Iterable[Any]) -> dict[str, bool]:
    """``--with``/``--without`` (each a list of comma-separated names) as {name: on}; a name
    in both is bad input."""
    out: dict[str, bool] = {}
    for raw, on in ((with_, True), (without, False)):
        for item in raw or ():
            for name in str(item).split(","):
                name = name.strip()
                if name:
                    if name in out and out[name] != on:
                        raise InputError(f"--with {name} and --without {name} contradict each other")
                    out[name] = on
    return out


def _components(value: Mapping[str, Any]) -> dict[str, bool]:
    return with_without(value.get("with_", ()), value.get("without", ()))


def cascade(layers: Iterable[Mapping[str, Any]],
            defaults: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(values, where each came from): later layers win, option by option (an option's fields
    together: a layer that gives a requirements file replaces the lines too); ``with``/``without``
    merge per component (``--without`` drops a ``with``). Keys of no option (the project's
    ``jobs``, the spec's ``project``) are taken as they are, later layers winning."""
    values: dict[str, Any] = {}
    where: dict[str, str] = {}
    comps: dict[str, bool] = {}
    for layer in layers:
        origin = layer.get("_where", {})
        comps.update(_components(layer))
        for opt in OPTIONS:
            if opt.name in ("with_", "without") or not any(f in layer for f in opt.fields):
                continue
            for f in opt.fields:
                values[f] = layer.get(f, defaults.get(f))
            where[opt.name] = origin.get(opt.name, opt.flag or opt.name)
        values.update({k: v for k, v in layer.items() if k != "_where" and k not in _FIELDS})
    values["with_"] = tuple(c for c, on in comps.items() if on)
    values["without"] = tuple(c for c, on in comps.items() if not on)
    return values, where


def check_value(name: str, value: Any, where: Mapping[str, str]) -> Any:
    """The check of option ``name``'s value (naming where it came from: ``where[name]``, else
    its flag), as the value the check returns; a name the table lacks is a component's version
    pin (a team matrix's component: its ``--NAME``)."""
    opt = BY_NAME.get(name)
    if opt is None:
        return _version_pin(value, where.get(name, f"--{name}"))
    return value if opt.check is None else opt.check(value, where.get(name, opt.flag or name))


def check_values(values: Mapping[str, Any], where: Mapping[str, str]) -> dict[str, Any]:
    """The one check of every value the cascade chose, naming where it came from: the values
    as their checks return them (only those an option checks)."""
    return {opt.name: opt.check(values[opt.name], where.get(opt.name, opt.flag or opt.name))
            for opt in OPTIONS
            if opt.check is not None and values.get(opt.name) is not None and values.get(opt.name) != ()}


def pin_flags(values: Mapping[str, Any]) -> list[str]:
    """The pins in ``values`` (a Pins' fields) as the command-line options that state them."""
    out: list[str] = []
    for opt in OPTIONS:
        if opt.kind != "pin" or opt.value == "list":
            continue
        v = values.get(opt.name)
        if v:
            out += [opt.flag or "", str(v)]
    for name in ("with_", "without"):
        for item in values.get(name) or ():
            out += [get(name).flag or "", item]
    return out


def schema_with_table(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (data/project.schema.json) with the option keys' properties the table's
    (kept in place; new ones appended): what ``python -m envbuilder.core.options`` writes."""
    def merged(props: dict[str, Any], table: dict[str, Any]) -> dict[str, Any]:
        return {**{k: table.get(k, v) for k, v in props.items()}, **table}

    out = dict(schema)
    out["properties"] = merged(schema["properties"], schema_properties("top"))
    items = out["properties"]["targets"]["items"]
    items["properties"] = merged(items["properties"], schema_properties("target"))
    return out


if __name__ == "__main__":  # regenerate the schema's option keys from the table
    import json

    from envbuilder.core.resources import data_path

    target = data_path("project.schema.json")
    data = schema_with_table(json.loads(target.read_text(encoding="utf-8")))
    Path(str(target)).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
