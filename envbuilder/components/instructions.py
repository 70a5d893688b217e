"""Typed build instructions: each one renders itself as Dockerfile text or as the lines of an
Apptainer definition section, for the format it is given (never a global).

A component says what a stage runs once (``Run`` of ``Cmd`` lines, ``Env``, ``Copy``); the two
templates place the rendered text. The formats' differences are handled here, once:

- a ``Run`` is one ``RUN a \\ && b`` in a Dockerfile and one line each in a ``%post`` section;
  Apptainer binds a /tmp of its own over the image's during ``%post``, so the staging folder
  ``STAGE`` is ``APPTAINER_STAGE_DIR`` there;
- a ``Cmd`` marked ``docker_only`` (a layer's bookkeeping for multi-stage COPY, the non-root
  account Apptainer does not need: it runs as the calling user) is left out of Apptainer;
- an ``Env`` of defaults is ``ENV K=V`` in a Dockerfile and ``export K="${K:-V}"`` in
  ``%environment`` (a user's ``--env`` wins);
- a ``Copy`` from a stage is ``COPY --from=S`` in a Dockerfile and a line of a ``%files from
  builder`` section (Apptainer builds every layer, and every ``Stage``, in its one builder
  stage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Union

Format = Literal["docker", "apptainer"]
FORMATS: tuple[Format, ...] = ("docker", "apptainer")
STAGE = "/tmp/envbuilder"  # a stage's staging folder (the Dockerfile's)
APPTAINER_STAGE_DIR = "/opt/envbuilder-build"  # the same in the Apptainer builder stage
INDENT = "    "


def _check(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")


@dataclass(frozen=True)
class Cmd:
    """One shell command of a ``Run``."""

    text: str
    docker_only: bool = False  # multi-stage bookkeeping and the image's own account

    def line(self, fmt: Format) -> str | None:
        if fmt == "apptainer":
            return None if self.docker_only else self.text.replace(STAGE, APPTAINER_STAGE_DIR)
        return self.text


def docker_only(*lines: str) -> tuple[Cmd, ...]:
    return tuple(Cmd(ln, docker_only=True) for ln in lines)


def cmds(*lines: str) -> tuple[Cmd, ...]:
    return tuple(Cmd(ln) for ln in lines)


@dataclass(frozen=True)
class Run:
    """Shell commands run in one step: ``RUN a \\ && b`` or lines of a ``%post`` section."""

    commands: tuple[Cmd, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.commands)

    def __add__(self, other: Run) -> Run:
        return Run(self.commands + other.commands)

    def lines(self, fmt: Format) -> list[str]:
        _check(fmt)
        return [ln for c in self.commands if (ln := c.line(fmt)) is not None]

    def render(self, fmt: Format) -> str:
        lines = self.lines(fmt)
        if fmt == "docker":
            return "RUN " + " \\\n && ".join(lines)
        return "".join(f"{INDENT}{ln}\n" for ln in lines)


@dataclass(frozen=True)
class Env:
    """Environment variables: ``fixed`` ones, then ``defaults`` a user may override at run time."""

    fixed: Mapping[str, str]
    defaults: Mapping[str, str]

    def render(self, fmt: Format) -> str:
        _check(fmt)
        if fmt == "docker":
            pairs = [f"{k}={v}" for k, v in (*self.fixed.items(), *self.defaults.items())]
            return "ENV " + " \\\n    ".join(pairs)
        return ("".join(f"{INDENT}export {k}={v}\n" for k, v in self.fixed.items())
                + "".join(f'{INDENT}export {k}="${{{k}:-{v}}}"\n' for k, v in self.defaults.items()))


@dataclass(frozen=True)
class Copy:
    """A path copied into the stage, from the build context or from another stage."""

    src: str
    dst: str
    from_stage: str | None = None

    def render(self, fmt: Format) -> str:
        _check(fmt)
        if fmt == "docker":
            frm = f"--from={self.from_stage} " if self.from_stage else ""
            return f"COPY {frm}{self.src} {self.dst}"
        return f"{INDENT}{self.src} {self.dst}\n"


@dataclass(frozen=True)
class Stage:
    """A build stage of a component's own, after the torch layer: in a Dockerfile a stage
    ``FROM`` the torch layer, in Apptainer more of the builder stage's ``%post``."""

    name: str  # the Dockerfile's stage name, what a runtime ``Copy`` names as from_stage
    title: str  # the Dockerfile's heading comment
    short: str  # what Apptainer's %post says as it starts it
    run: Run


Instruction = Union[Run, Env, Copy]


def render_all(items: tuple[Instruction, ...] | list[Instruction], fmt: Format) -> str:
    """Several instructions: one a line in a Dockerfile, one section's lines in Apptainer."""
    if fmt == "docker":
        return "".join(i.render(fmt) + "\n" for i in items)
    return "".join(i.render(fmt) for i in items)
