"""Specs, the matrix and what a target resolves to: what every command acts on (core.spec:
the one cascade), and `check`'s judgement of a partial combination."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from envbuilder.errors import InputError
from envbuilder.core.matrix import Matrix, load_matrix
from envbuilder.core.project import Project, find_project
from envbuilder.core import resolve
from envbuilder.core import spec as spec_mod
from envbuilder.core.resolve import Stack
from envbuilder.core.spec import TargetSpec
from envbuilder.api.parts import DriverRun
from envbuilder.api.results import CheckResult
from envbuilder.core.target import Pins, Request, merge, with_cuda


def make_spec(target: str, *, project: Project | None = None, pins: Pins | None = None,
              **fields: Any) -> TargetSpec:
    """One target's spec through the cascade: ``pins`` and ``fields`` are command-line values
    by the option table's names (core.options.given: base_image, requirements_file, layouts,
    nproc, a pin such as torch ...)."""
    given = {**({} if pins is None else pins.layer()), **fields}
    return spec_mod.make_spec(target, project=project, given=given)


def naming_warnings(specs: Sequence[TargetSpec]) -> list[str]:
    """The warnings about the specs' image names, each once: a project file whose ``registry``
    keeps its old meaning, a whole repository (core.naming.legacy_warning, with the fix)."""
    from envbuilder.core.naming import legacy_warning

    return list(dict.fromkeys(w for w in map(legacy_warning, specs) if w))


def target_specs(target: str | None, *, all_: bool = False, only: Sequence[str] = (),
                 given: Mapping[str, Any] | None = None, command: str = "render",
                 matrix_dir: str | Path | None = None,
                 project: Project | None | bool = True,
                 or_builtin: bool = False) -> list[TargetSpec]:
    """The specs a command acts on: one TARGET (a project target's name too), ``--all``
    (narrowed by ``--only``) or, inside a project, its targets (core.spec.select).
    ``or_builtin``: with no TARGET outside a project (or in one without targets), the
    built-in targets, as ``--all`` (targets, bake)."""
    proj = find_project() if project is True else (project or None)
    if or_builtin and target is None and (proj is None or not proj.targets):
        all_ = True
    builtin: list[str] = []
    if all_:
        builtin = builtin_targets(load_matrix(matrix_dir, (given or {}).get("matrix_overlay")))
    return spec_mod.specs(target, all_=all_, only=only, project=proj, builtin=builtin,
                          given=given, command=command)


def spec_matrix(spec: TargetSpec, matrix_dir: str | Path | None = None) -> Matrix:
    """The matrix a spec resolves against: ``--matrix`` (or the built-in) with its overlay."""
    return load_matrix(matrix_dir, spec.matrix_overlay)


def resolve_spec(spec: TargetSpec, *, matrix_dir: str | Path | None = None,
                 matrix: Matrix | None = None) -> Stack:
    m = matrix or spec_matrix(spec, matrix_dir)
    stack = spec.resolve(m)
    from envbuilder.assemble import as_built  # its images and the team's compiled packages

    return as_built(spec, stack)


def resolve_each(specs: Sequence[TargetSpec], *,
                 matrix_dir: str | Path | None = None) -> list[spec_mod.Outcome[Stack]]:
    """Each spec's resolved stack, or why it was refused; one per target."""
    return spec_mod.run_each(specs, "resolve", lambda s: resolve_spec(s, matrix_dir=matrix_dir))


def resolve_target(target: str, *, matrix_dir: str | Path | None = None, pins: Pins | None = None,
                   matrix: Matrix | None = None, matrix_overlay: str | Path | None = None,
                   exclude_newer: str | None = None) -> Stack:
    """A target with ``pins`` resolved, without a spec (``exclude_newer``: a date or time,
    checked here as the option's check does)."""
    from envbuilder.core.options import check_value

    m = matrix or load_matrix(matrix_dir, matrix_overlay)
    when = None if exclude_newer is None else check_value("exclude_newer", exclude_newer, {})
    return resolve.resolve_target(target, m, pins, exclude_newer=when)


def builtin_targets(matrix: Matrix) -> list[str]:
    return [t.name for t in matrix.targets]


def builtin_target_names(*, matrix_dir: str | Path | None = None) -> list[str]:
    return builtin_targets(load_matrix(matrix_dir))


def out_dir(spec: TargetSpec, out: str | Path | None, *, single: bool) -> Path:
    """Where a target's outputs go: ``-o DIR`` itself for one TARGET, DIR/<name> for several;
    without ``-o``, build/<name> (inside a project, its root's build/)."""
    from envbuilder.core.validate import path_segment

    if single and out is not None:
        return Path(out)
    root = Path(out) if out is not None else (
        spec.project.parent / "build" if spec.project is not None else Path("build"))
    return root / path_segment(spec.name, "target name")


def load(matrix_dir: str | Path | None = None,
         matrix_overlay: str | Path | None = None) -> Matrix:
    """The matrix (built-in, or ``matrix_dir`` in its place) with a team's overlay on top."""
    return load_matrix(matrix_dir, matrix_overlay)


def check_combination(*, matrix_dir: str | Path | None = None, cuda: str | None = None,
                      driver: str | None = None, torch: str | None = None,
                      python: str | None = None, nccl: str | None = None,
                      os: str | None = None, flavour: str | None = None,
                      matrix_overlay: str | Path | None = None, **components: str | None) -> CheckResult:
    """Judge a partial combination using only the axes given (envbuilder check), against the
    matrix with the overlay given (default: the project's); exit 3 naming every violated rule.
    ``components``: a version pin per component of the matrix, by name."""
    m = load_matrix(matrix_dir, spec_mod.settings(find_project(), {"matrix_overlay": matrix_overlay})["matrix_overlay"])
    unknown = set(components) - set(m.component_names)
    if unknown:
        raise TypeError(f"check_combination: no component {', '.join(sorted(unknown))}")
    given = {ax for ax, v in (("cuda", cuda), ("torch", torch), ("python", python), ("nccl", nccl),
                              *components.items(), ("os", os), ("flavour", flavour)) if v is not None}
    if cuda is None and driver is not None and torch is None:
        raise InputError("--driver needs --cuda or --torch: a driver is judged against a CUDA "
                         "version, or against the CUDA builds of a torch release")
    if not given:
        raise InputError("check needs at least one of --cuda, --torch, --python, --nccl, "
                         + "".join(f"--{c}, " for c in m.component_names) + "--os, --flavour")
    req = Request(target="check")
    if cuda is not None:
        req = with_cuda(req, cuda, m)
    values: dict[str, Any] = dict(driver=driver, torch=torch, python=python, nccl=nccl, os=os,
                                  flavour=flavour, **components)
    req = merge(req, Pins.of(**values), m)
    if cuda is None and driver is not None:  # driver first: which CUDA builds of torch run
        from dataclasses import replace as _replace

        resolve.check(_replace(req, driver=None), m, given)  # the other pins, as without a driver
        fits = resolve.driver_check(req, m)
        best = next(f for f in fits if f.mode != "forward-compat")  # driver_check: one runs
        return CheckResult(given={"torch": str(req.torch), "driver": str(req.driver)},
                           satisfied_by={"torch": best.torch, "cuda": best.variant}, warnings=(),
                           driver=tuple(DriverRun(f, resolve.MODES[f.mode]) for f in fits))
    assignment, warnings = resolve.check(req, m, given)
    runs = None
    if driver is not None and assignment.get("cuda") is not None:  # native | minor-compat | forward-compat
        from envbuilder.core.rules import driver_mode
        runs = driver_mode(m, assignment["cuda"], req.driver or driver)
    return CheckResult(
        given={k: v for k, v in req.pins().items()} | ({"driver": driver} if driver else {}),
        satisfied_by={k: "cpu" if k == "cuda" and v is None else resolve._show(v)
                      for k, v in assignment.items() if k in given},
        warnings=tuple(w for w in warnings if w.severity != "info"), runs=runs,
        evidence=tuple(w for w in warnings if w.severity == "info"))
