"""targets and ci: what each target resolves to, the GitHub matrix, the CI workflow."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from envbuilder.errors import InputError
from envbuilder.core.matrix import load_matrix
from envbuilder.core.project import find_project
from envbuilder.core import spec as spec_mod
from envbuilder.core.spec import TargetSpec

from envbuilder.api.parts import MatrixEntry
from envbuilder.api.results import CiWorkflow, GithubMatrix, TargetRow, TargetsTable
from envbuilder.api.specs import builtin_targets, make_spec, resolve_spec

if TYPE_CHECKING:

    pass


def list_targets(specs: Sequence[TargetSpec] | None = None, *,
                 matrix_dir: str | Path | None = None) -> TargetsTable:
    """What each target (the built-in ones, or ``specs``: a project's) resolves to, or why it
    is refused: targets --json."""
    from envbuilder.errors import IncompatibleError

    m = load_matrix(matrix_dir)
    if specs is None:
        specs = [make_spec(n) for n in builtin_targets(m)]
    rows: list[TargetRow] = []
    for s in specs:
        alias = m.alias(s.target)
        row: dict[str, Any] = {"name": s.name, "target": alias.target if alias else s.target,
                               "description": alias.description if alias else ""}
        try:
            st = resolve_spec(s, matrix_dir=matrix_dir, matrix=m if s.matrix_overlay is None else None)
            d = st.to_dict()
            rows.append(TargetRow(**row, ok=True, tag=st.tag, warnings=st.warnings,
                                  stack={k: d[k] for k in (
                                      "cuda", "cuda_toolkit", "torch", "python", "nccl",
                                      *m.component_names, "os", "base_image")}))
        except IncompatibleError as e:
            rows.append(TargetRow(**row, ok=False, error=str(e)))
    return TargetsTable(matrix_path=str(m.path), matrix_digest=m.digest, targets=rows)


def github_matrix(specs: Sequence[TargetSpec] | None = None, *,
                  matrix_dir: str | Path | None = None) -> GithubMatrix:
    """The GitHub Actions matrix of the targets (built-in, or a project's): targets
    --github-matrix."""
    from envbuilder.render import ci

    m = load_matrix(matrix_dir)
    include = ci.github_matrix(m, targets=None if specs is None else [
        (s.name, resolve_spec(s, matrix_dir=matrix_dir)) for s in specs])["include"]
    return GithubMatrix(include=tuple(MatrixEntry.from_dict(e) for e in include))


def write_ci(out: str | Path, *, registry: str | None, github: bool,
             matrix_dir: str | Path | None = None, install: str | None = None) -> CiWorkflow:
    """Write the CI workflow (envbuilder ci); GitHub Actions is the one CI system so far. The
    registry defaults to the project's; a team matrix (``matrix_dir``) is checked here. When
    this envbuilder runs from a local folder (a checkout) the workflow installs its version,
    which may not be published: the result's ``warnings`` say so (ci prints them on stderr)."""
    from envbuilder.render import ci

    if not github:
        raise InputError("ci needs a CI system: --github")
    from envbuilder.core.naming import repository_of

    proj = find_project()
    values = spec_mod.settings(proj, {"registry": registry})  # the cascade's
    if values["registry"] is None:
        raise InputError("ci needs --registry (or a project file with registry = ...)")
    # the repository the workflow pushes to (core.naming): REGISTRY/REPOSITORY, or a project
    # file's registry without repository as it was meant before (a whole repository)
    if registry is not None or values["repository"] is not None:
        registry = repository_of(values["registry"], values["repository"],
                                 proj.path if proj is not None else None)
    else:
        registry = values["registry"]
    if matrix_dir is not None:
        load_matrix(matrix_dir)  # the folder must exist and be a valid matrix
    # install: what the workflow pip-installs (default: this envbuilder, as CI can install it)
    local = False
    if install is None:
        install, local = ci.default_install(Path(out))
    path = ci.write_github_workflow(Path(out), registry=registry, matrix=matrix_dir,
                                    install=install, local=local,
                                    targets=[t.name for t in proj.targets] if proj is not None else None)
    return CiWorkflow(workflow=str(path), install=install,
                      warnings=(ci.unpublished_warning(install, path),) if local else ())
