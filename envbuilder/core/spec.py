"""One spec per target, made by one cascade; one selection of targets; one runner over them.

The cascade (which value wins), in one place:

1. built-in defaults (the fields' defaults below);
2. the project file's top-level keys (``requirements``, ``registry``, ``layouts``,
   ``matrix_overlay``, ``pip_index_url``, ``extra_index_urls``, ``torch_index_url``,
   ``index_strategy``, ``exclude_newer``);
3. the project target's own table (its ``target`` and pins, and any of the keys above);
4. the command line: every option given wins; pin options are merged per axis (``--with`` /
   ``--without`` add to the target's).

``select`` turns what a command was asked for ("one TARGET", ``--all`` [``--only``], or the
project's targets when no TARGET is given inside a project) into names, and ``specs`` turns
those into frozen ``TargetSpec`` values through the cascade. A project target's name works as
a TARGET wherever a target does, with every option. ``run_each`` runs one step over specs,
keeps going past a failure and returns one ``Outcome`` per target that names it.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Sequence, TypeVar

from envbuilder.core import options as options_mod
from envbuilder.core.jobs import JobsConfig
from envbuilder.core.project import Project
from envbuilder.core.target import Pins
from envbuilder.errors import EnvbuilderError, InputError

if TYPE_CHECKING:  # annotations only: a spec is made without loading the matrix
    from envbuilder.core.matrix import Matrix
    from envbuilder.core.resolve import Stack

T = TypeVar("T")



@dataclass(frozen=True)
class TargetSpec:
    """Everything a command needs to know about one target, frozen, and checked when it is
    made (``__post_init__``: every option's check of core.options, naming where its value came
    from): a spec cannot be made unchecked, so no consumer checks its values again.

    What to resolve (``target``, ``pins``, ``matrix_overlay``), what to add (the team's
    requirements), how to build and test it (images, indexes, layouts, registry, smoke)."""

    name: str  # what the user calls it: a project target's name, an alias or a target string
    target: str  # the target string the resolver reads
    pins: Pins = field(default_factory=Pins)
    matrix_overlay: Path | None = None
    # the team's own requirements (a layer of their own)
    requirements_file: Path | None = None
    requirements: tuple[str, ...] = ()
    requirements_source: str = "requirements"
    compiled: tuple[str, ...] = ()  # of those, the ones that compile against torch (render.compiled)
    # how to build it
    base_image: str | None = None
    builder_image: str | None = None
    cuda_arch: tuple[str, ...] = ()
    cpu_isa: str | None = None
    pip_index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    torch_index_url: str | None = None  # PyTorch's index, a template with {variant}
    index_strategy: str | None = None  # uv's, when locking (None: first-index)
    exclude_newer: str | None = None
    # how to run and publish it
    layouts: tuple[tuple[int, int], ...] = ()  # (nodes, ranks per node): --layout 2x8
    nproc: int | None = None
    registry: str | None = None  # the registry and namespace (core.naming)
    repository: str | None = None  # the image's repository under it (default: the project's name)
    image: str | None = None  # the image the job files run
    infiniband: bool = False
    min_busbw: float | None = None
    jobs: JobsConfig = field(default_factory=JobsConfig)  # the project's [jobs] (core.jobs)
    command: str | None = None  # --command: the job files' training command
    # where it came from: the project file, and the pins the command line added
    project: Path | None = None
    from_project: bool = False  # ``name`` is one of the project's targets
    cli_pins: Pins = field(default_factory=Pins)
    # where each option's value came from ("--base-image", or the project file's key), for the
    # errors of the check below
    origin: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        # every value as its check returns it (--exclude-newer as RFC 3339 UTC ...): the spec
        # holds checked values only
        checked = options_mod.check_values({f.name: getattr(self, f.name) for f in fields(self)},
                                           self.origin)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def resolve(self, matrix: Matrix) -> Stack:
        """The stack this spec resolves to against ``matrix`` (its target, its pins and its
        upload cut-off; refused: IncompatibleError, exit 3)."""
        from envbuilder.core.resolve import resolve_target

        return resolve_target(self.target, matrix, self.pins, exclude_newer=self.exclude_newer,
                              torch_index_url=self.torch_index_url)

    def invocation(self, command: str, out: str | Path | None = None) -> str:
        """The command line that makes this spec again: the name as given, the pins the
        command line added (a project target's own pins come from its file; a plain target's
        are all spelled out), its requirements file and ``--exclude-newer``."""
        pins = self.cli_pins if self.from_project else self.pins
        parts = ["envbuilder", command, self.name, *pin_args(pins)]
        if self.requirements_file is not None and not self.from_project:
            parts += ["--requirements", str(self.requirements_file)]
        if self.exclude_newer and not self.from_project:
            parts += ["--exclude-newer", self.exclude_newer]
        if out is not None:
            parts += ["-o", str(out)]
        import shlex

        return " ".join(shlex.quote(p) for p in parts)


def pin_args(pins: Pins) -> list[str]:
    """``pins`` as the command-line options that state them (core.options.pin_flags)."""
    return options_mod.pin_flags(pins.as_options())


def merge_pins(base: Pins, over: Pins) -> Pins:
    """``over``'s pins win per axis; components are merged (``--without`` drops a ``with``)."""
    values, _ = options_mod.cascade([base.layer(), over.layer()], {})
    return Pins.of(**{n: values.get(n) for n in options_mod.PIN_NAMES})


_SPEC_DEFAULTS = {f.name: f.default for f in fields(TargetSpec) if f.default is not MISSING}


def make_spec(name: str, *, project: Project | None = None,
              given: Mapping[str, Any] | None = None) -> TargetSpec:
    """The spec of one target ``name`` (a target string, an alias or a project target's name)
    through the cascade (core.options.cascade) over the project's values and ``given``, the
    command line's (core.options.given: keyed by the option table), every value then checked
    once, where it is kept: the pins in ``Pins``, the rest in the ``TargetSpec``."""
    cli = options_mod.given(given or {})
    t = project.target(name) if project is not None else None
    if project is not None and t is None:
        _check_project_name(name, project)
    layers: list[Mapping[str, Any]] = []
    if project is not None:
        layers += [{"project": project.path}, project.defaults]
    if t is not None:
        layers.append(t.settings)
    layers.append(cli)
    values, where = options_mod.cascade(layers, _SPEC_DEFAULTS)
    pins = Pins.of(origin=where, **{n: values.pop(n) for n in options_mod.PIN_NAMES if n in values})
    # the pins the command line added (the invocation repeats them): the values just checked
    cli_pins = Pins.of(**{n: cli[n] if n in ("with_", "without") else pins.get(n)
                          for n in options_mod.PIN_NAMES if n in cli})
    values = {k: v for k, v in values.items() if k in _SPEC_DEFAULTS or k in ("jobs",)}
    return TargetSpec(name=name, target=t.target if t is not None else name, pins=pins,
                      cli_pins=cli_pins, from_project=t is not None, origin=where, **values)


def settings(project: Project | None, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The cascade without a target (defaults < the project's top level < the command line's
    ``given``): what a command that acts on no one target reads (check's matrix overlay, ci's
    registry), every value checked once."""
    layers = [project.defaults] if project is not None else []
    layers.append(options_mod.given(given or {}))
    values, where = options_mod.cascade(layers, _SPEC_DEFAULTS)
    checked = options_mod.check_values(values, where)
    return {**_SPEC_DEFAULTS, **values, **{k: v for k, v in checked.items() if k in _SPEC_DEFAULTS}}


_BASE = re.compile(r"(cpu|any|cu[0-9]{2,3})(-.*)?")


def _check_project_name(name: str, project: Project) -> None:
    """A name that is no target string but close to a project target's name is a typo of it:
    ``resolve trian-ds`` -> did you mean train-ds (exit 2)."""
    import difflib

    names = [t.name for t in project.targets]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if close and _BASE.fullmatch(name) is None:
        raise InputError(f"{name!r} is not a target of {project.path} (did you mean {close[0]}?) "
                         f"nor a target string such as cu121 or cpu; its targets: {', '.join(names)}")


def select(target: str | None, *, all_: bool = False, only: Sequence[str] = (),
           project: Project | None = None, builtin: Sequence[str] = (),
           command: str = "render") -> list[str]:
    """The names a command acts on: one TARGET; ``--all`` (every built-in target, narrowed by
    ``--only`` text); or, with neither inside a project, the project's targets (narrowed by
    ``--only`` too). ``--only`` that matches nothing is bad input naming the known targets."""
    if all_ and target is not None:
        raise InputError(f"{command} --all takes no TARGET: it acts on every built-in target")
    if target is not None:
        if only:
            raise InputError("--only narrows --all or a project's targets: drop it, or the TARGET")
        return [target]
    if all_:
        names, where = list(builtin), "built-in targets"
    elif project is not None:
        if not project.targets:
            raise InputError(f"the project {project.path} lists no [[targets]]: add one, or "
                             f"give a TARGET")
        names, where = [t.name for t in project.targets], f"targets of {project.path}"
    else:
        also = "" if command == "resolve" else ", --all,"  # resolve takes one TARGET or the project's
        raise InputError(f"{command} needs a TARGET (e.g. cu121){also} or a project file "
                         f"(envbuilder.toml) in this folder or above (see: envbuilder {command} --help)")
    if only:
        picked = [n for n in names if any(o in n for o in only)]
        if not picked:
            raise InputError(f"--only {','.join(only)} matches none of the {where}: "
                             f"{', '.join(names)}")
        names = picked
    return names


def specs(target: str | None, *, all_: bool = False, only: Sequence[str] = (),
          project: Project | None = None, builtin: Sequence[str] = (),
          given: Mapping[str, Any] | None = None, command: str = "render") -> list[TargetSpec]:
    """``select`` then ``make_spec`` for each name: what every command acts on."""
    names = select(target, all_=all_, only=only, project=project, builtin=builtin,
                   command=command)
    # --all means the built-in targets: the project's targets and defaults stay out of it
    proj = None if all_ else project
    out = [make_spec(n, project=proj, given=given) for n in names]
    if len(out) > 1 and (given or {}).get("image") is not None:
        raise InputError("--image names one image: use it with one TARGET")
    return out


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """One target's result of a step: its value, or the error that stopped it."""

    spec: TargetSpec
    value: T | None = None
    error: EnvbuilderError | None = None
    step: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


def run_each(items: Sequence[TargetSpec], step: str,
             fn: Callable[[TargetSpec], T]) -> list[Outcome[T]]:
    """Run ``fn`` on every spec; a failure of one (an EnvbuilderError) is recorded as that
    step's, with its own message, and the others go on. Ctrl-C stops them all."""
    out: list[Outcome[T]] = []
    for s in items:
        try:
            out.append(Outcome(s, fn(s), None, step))
        except EnvbuilderError as e:
            out.append(Outcome(s, None, e, e.step or step))
    return out


__all__ = ["TargetSpec", "Outcome", "make_spec", "merge_pins", "pin_args",
           "run_each", "select", "settings", "specs"]
