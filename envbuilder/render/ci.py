"""GitHub Actions outputs: the target matrix and a workflow that locks, renders, builds, smoke
tests and pushes every built-in target.

Call ``envbuilder.ci.github_matrix(matrix)`` for ``envbuilder targets --github-matrix`` (print
``json.dumps`` of the dict it returns; ``matrix`` is an ``envbuilder.matrix.Matrix``, e.g.
``load_matrix(dir)``), and ``envbuilder.ci.write_github_workflow(out, registry=REPO)`` for
``envbuilder ci --github -o DIR``: it writes ``DIR/.github/workflows/envbuilder.yml`` and
returns that path.

The matrix: ``{"include": [{"target", "tag", "cuda", "runs_on"}, ...]}``, one entry per built-in
target that resolves (``cuda`` is the CUDA line such as "12.1", or "cpu"). ``runs_on`` is the
runner: CUDA targets need a GPU runner for their 12-rank smoke job (default labels
``[self-hosted, linux, x64, gpu]``), CPU targets run on ``ubuntu-latest``.

The workflow: a ``targets`` job prints the matrix (``envbuilder targets --github-matrix``) into
a job output; a ``build`` job per target runs ``envbuilder lock $T --check``, ``envbuilder render
$T``, ``envbuilder build $T --push $REGISTRY --json`` (which pushes the moving alias only after
the smoke job passed) and uploads the JSON report as an artifact, also when the build failed.
"""

from __future__ import annotations

import re

from pathlib import Path
from typing import Sequence

from envbuilder.core import validate
from envbuilder.core.matrix import Matrix, load_matrix
from envbuilder.core.resolve import Stack, resolve_target
from envbuilder.errors import IncompatibleError, InputError
from envbuilder.render.templating import write_file_atomic

GPU_RUNNER: tuple[str, ...] = ("self-hosted", "linux", "x64", "gpu")
CPU_RUNNER = "ubuntu-latest"
WORKFLOW = Path(".github") / "workflows" / "envbuilder.yml"


def github_matrix(matrix: Matrix | None = None, *, gpu_runner: Sequence[str] | str = GPU_RUNNER,
                  cpu_runner: Sequence[str] | str = CPU_RUNNER,
                  skip_refused: bool = True,
                  targets: Sequence[tuple[str, Stack]] | None = None) -> dict:
    """The GitHub Actions matrix of every built-in target (``matrix``: a Matrix, or None for
    the built-in one), or of ``targets`` already resolved (a project's: ``[(name, stack)]``).
    A built-in target the resolver refuses is left out (or raises, when ``skip_refused`` is
    false)."""
    m = matrix if matrix is not None else load_matrix(None)
    if targets is None:
        resolved = []
        for name in [t.name for t in m.targets]:
            try:
                resolved.append((name, resolve_target(name, m)))
            except IncompatibleError:
                if skip_refused:
                    continue
                raise
        targets = resolved
    include = []
    for name, stack in targets:
        gpu = stack.toolkit is not None
        runner = gpu_runner if gpu else cpu_runner
        include.append({"target": name, "tag": stack.tag, "cuda": stack.cuda or "cpu",
                        "runs_on": runner if isinstance(runner, str) else list(runner)})
    return {"include": include}


def _registry_host(registry: str) -> str | None:
    first, sep, _ = registry.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return None  # Docker Hub


def install_spec(direct_url: dict | None, version: str, *, repo_is_envbuilder: bool = False) -> str:
    """What the workflow pip-installs, from how this envbuilder was installed (PEP 610's
    ``direct_url.json``): the checkout itself (``.[lock]``) when the workflow goes into
    envbuilder's own repository; the same commit of a git install (``git+URL@COMMIT``); the
    same version from the index pip took it from. A local folder or file exists only on this
    machine: then the version, and the workflow's header says to give ``ci --install``."""
    from envbuilder import DISTRIBUTION

    if repo_is_envbuilder:
        return ".[lock]"
    if not direct_url:
        return f"{DISTRIBUTION}[lock]=={version}"
    url = str(direct_url.get("url", ""))
    vcs = direct_url.get("vcs_info") or {}
    if vcs.get("vcs") == "git" and vcs.get("commit_id") and re.fullmatch(r"(https|ssh)://[^\s'\"$;&|<>`\\]+", url):
        return f"{DISTRIBUTION}[lock] @ git+{url}@{vcs['commit_id']}"
    if re.fullmatch(r"https://[^\s'\"$;&|<>`\\]+\.whl", url):
        return f"{DISTRIBUTION}[lock] @ {url}"
    # a local folder or file exists only on this machine: the version, which the header flags
    return f"{DISTRIBUTION}[lock]=={version}"


def local_install(direct_url: dict | None) -> bool:
    """Whether this envbuilder came from a local folder or file (CI cannot install that)."""
    return bool(direct_url) and str((direct_url or {}).get("url", "")).startswith("file:")


def running_from_checkout() -> Path | None:
    """The source checkout this envbuilder's code is imported from (its package's parent
    holds envbuilder's pyproject.toml), else None: its version may be one no index has."""
    from envbuilder import DISTRIBUTION

    root = Path(__file__).resolve().parent.parent.parent
    py = root / "pyproject.toml"
    try:
        return root if py.is_file() and f'name = "{DISTRIBUTION}"' in py.read_text(errors="replace") else None
    except OSError:
        return None


def unpublished_warning(install: str, workflow: Path) -> str:
    """What ``ci`` says on stderr when the workflow installs a version this checkout made."""
    where = running_from_checkout()
    return (f"{workflow} installs envbuilder as {install!r}, but this envbuilder runs from a local "
            f"folder{f' ({where})' if where else ''}, which CI cannot install: if that version "
            f"is not on your index, write the workflow again with `envbuilder ci --github "
            f"--install SPEC` (e.g. 'torch-envbuilder[lock] @ git+https://HOST/REPO@COMMIT')")


def default_install(out: Path | None = None) -> tuple[str, bool]:
    """(``install_spec`` for this installation and the repository the workflow goes into,
    whether it came from a local folder that CI cannot install: a local install, or code
    imported from a source checkout)."""
    import importlib.metadata as md
    import json

    from envbuilder import DISTRIBUTION, __version__

    own = False
    if out is not None:
        py = Path(out) / "pyproject.toml"
        own = py.is_file() and f'name = "{DISTRIBUTION}"' in py.read_text(errors="replace")
    try:
        raw = md.distribution(DISTRIBUTION).read_text("direct_url.json")
    except md.PackageNotFoundError:
        raw = None
    direct = json.loads(raw) if raw else None
    return (install_spec(direct, __version__, repo_is_envbuilder=own),
            (local_install(direct) or running_from_checkout() is not None) and not own)


def workflow(registry: str, *, python: str = "3.11", install: str | None = None,
             timeout_minutes: int = 240, matrix: str | None = None) -> dict:
    """The workflow as data (what write_github_workflow writes). ``matrix``: a matrix folder
    relative to the repository root, passed as --matrix to every command."""
    install = default_install()[0] if install is None else install
    validate.repository(registry, "--registry")
    mx = ""
    if matrix is not None:
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,255}", matrix) or ".." in matrix.split("/"):
            raise InputError(f"--matrix {matrix[:100]!r} for CI must be a folder inside the "
                             f"repository, relative to it (letters, digits, ._/-)")
        mx = f" --matrix {matrix}"
    if not isinstance(python, str) or not python.replace(".", "").isdigit():
        raise InputError(f"python {python!r} is not a version such as 3.11")
    if not isinstance(install, str) or not install or any(c in install for c in "\n\r'\"`$;&|<>\\"):
        raise InputError(f"install spec {install!r} is not a pip requirement or path")
    host = _registry_host(registry)
    setup = [
        {"uses": "actions/checkout@v4"},
        {"uses": "actions/setup-python@v5", "with": {"python-version": python}},
        {"name": "Install envbuilder", "run": 'python -m pip install "$ENVBUILDER_INSTALL"'},
    ]
    login: dict = {"name": "Log in to the registry", "uses": "docker/login-action@v3",
                   "with": {"username": "${{ secrets.REGISTRY_USERNAME || github.actor }}",
                            "password": "${{ secrets.REGISTRY_PASSWORD || secrets.GITHUB_TOKEN }}"}}
    if host:
        login["with"] = {"registry": host, **login["with"]}
    return {
        "name": "envbuilder",
        "on": {"workflow_dispatch": {}, "push": {"branches": ["main"]},
               "schedule": [{"cron": "17 4 * * 1"}]},
        "permissions": {"contents": "read", "packages": "write"},
        "concurrency": {"group": "envbuilder-${{ github.ref }}", "cancel-in-progress": False},
        "env": {"REGISTRY": registry, "ENVBUILDER_INSTALL": install},
        "jobs": {
            "targets": {
                "name": "Targets",
                "runs-on": CPU_RUNNER,
                "outputs": {"matrix": "${{ steps.matrix.outputs.matrix }}"},
                "steps": setup + [{
                    "name": "Target matrix",
                    "id": "matrix",
                    "run": "set -euo pipefail\n"
                           f"matrix=\"$(envbuilder targets --github-matrix{mx})\"\n"
                           "echo \"$matrix\"\n"
                           "{ echo 'matrix<<ENVBUILDER_EOF'; echo \"$matrix\"; echo 'ENVBUILDER_EOF'; } >> \"$GITHUB_OUTPUT\"\n",
                }],
            },
            "build": {
                "name": "${{ matrix.target }}",
                "needs": "targets",
                "runs-on": "${{ matrix.runs_on }}",
                "timeout-minutes": timeout_minutes,
                "strategy": {"fail-fast": False,
                             "matrix": "${{ fromJSON(needs.targets.outputs.matrix) }}"},
                "env": {"T": "${{ matrix.target }}"},
                "steps": setup + [
                    login,
                    {"name": "Lock is current", "run": f'envbuilder lock "$T" --check{mx}'},
                    {"name": "Render", "run": f'envbuilder render "$T"{mx}'},
                    {"name": "Build, smoke test, push",
                     "run": "set -o pipefail\n"
                            f'envbuilder build "$T" --push "$REGISTRY" --json{mx} | tee "envbuilder-report-$T.json"\n'},
                    {"name": "Upload the report", "if": "${{ always() }}",
                     "uses": "actions/upload-artifact@v4",
                     "with": {"name": "envbuilder-report-${{ matrix.target }}",
                              "path": "envbuilder-report-${{ matrix.target }}.json",
                              "if-no-files-found": "warn"}},
                ],
            },
        },
    }


def write_github_workflow(out: Path, *, registry: str, **kw) -> Path:
    """Write OUT/.github/workflows/envbuilder.yml; returns its path."""
    from envbuilder import __version__
    # the one YAML emitter: no anchors (GitHub's parser long rejected them), multi-line
    # scripts as literal blocks
    from envbuilder.render.yamlemit import dump

    targets = kw.pop("targets", None)
    local = bool(kw.pop("local", False))  # the install spec is a local folder's version
    if kw.get("install") is None:
        kw["install"], local = default_install(Path(out))
    data = workflow(registry, **kw)
    which = (f"the project's targets ({', '.join(targets)})" if targets else
             "every built-in target")
    text = (f"# Written by envbuilder {__version__} (ci --github). For {which}, as\n"
            "# `envbuilder targets --github-matrix` lists them: lock --check (offline), render, build\n"
            "# the image, verify it, run the smoke job in it, push it to $REGISTRY by its version tag;\n"
            "# the moving alias tag is pushed by `envbuilder build` only after its smoke job passed.\n"
            f"# envbuilder itself is installed from: {kw['install']}\n"
            + ("# (this envbuilder came from a local folder, which CI cannot install: if that version\n"
               "# is not on your index, write the workflow again with `envbuilder ci --install SPEC`)\n"
               if local else "")
            + dump(data, width=100))
    path = Path(out) / WORKFLOW

    write_file_atomic(path, text, step="ci", group="ci", root=out)
    return path
