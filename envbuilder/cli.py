"""The command line: parse, call the library (envbuilder.api and friends), format.

Exit codes: 0 ok; 1 an operation failed; 2 bad input or usage; 3 an incompatible combination
was refused. Every command takes --json (one JSON document on stdout) and --matrix DIR.
No traceback reaches a user (set ENVBUILDER_DEBUG=1 to see one).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from .errors import EXIT_FAILED, EnvbuilderError

app = typer.Typer(
    name="envbuilder",
    help="Multi-GPU PyTorch training environments that work the first time: a sourced "
         "compatibility matrix, a resolver, Dockerfile/Apptainer renderers, builds with a "
         "12-rank smoke job, locks, and diagnosis of failed jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# -- shared options -------------------------------------------------------------------------
MatrixOpt = typer.Option(None, "--matrix", help="A matrix folder to use instead of the built-in one.",
                         metavar="DIR")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document for machines.")
TorchOpt = typer.Option(None, "--torch", help="Pin torch: a line (2.1) or a version (2.1.2).")
PythonOpt = typer.Option(None, "--python", help="Pin Python, e.g. 3.10.")
DsOpt = typer.Option(None, "--deepspeed", help="Pin DeepSpeed (and include it).")
HvdOpt = typer.Option(None, "--horovod", help="Pin Horovod (and include it).")
NcclOpt = typer.Option(None, "--nccl", help="Pin NCCL (must be the one torch bundles).")
OsOpt = typer.Option(None, "--os", help="Pin the base OS, e.g. ubuntu22.04.")
DriverOpt = typer.Option(None, "--driver", help="The driver of the hosts the image must run on, e.g. 525.60.13.")
WithOpt = typer.Option(None, "--with", help="Include components: deepspeed,horovod.")
WithoutOpt = typer.Option(None, "--without", help="Exclude components: deepspeed,horovod.")


def _echo_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _fail(err: EnvbuilderError, as_json: bool) -> None:
    if as_json:
        _echo_json(err.to_dict())
    msg = str(err).replace("\n", " ")
    sys.stderr.write(f"envbuilder: error: {msg}\n")
    if not as_json:
        for line in err.details:
            sys.stderr.write(f"  {line}\n")
    raise typer.Exit(err.exit_code)


def command(fn: Callable) -> Callable:
    """Turn library errors into one line and an exit code; Ctrl-C into exit 130."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            return fn(*args, **kwargs)
        except EnvbuilderError as e:
            _fail(e, as_json)
        except KeyboardInterrupt:
            sys.stderr.write("envbuilder: interrupted; nothing was recorded for the step in progress\n")
            raise typer.Exit(130) from None
        except typer.Exit:
            raise
        except Exception as e:  # a bug: one line, the trace only on request
            if os.environ.get("ENVBUILDER_DEBUG"):
                raise
            sys.stderr.write(f"envbuilder: internal error: {type(e).__name__}: {e} "
                             f"(set ENVBUILDER_DEBUG=1 for the traceback)\n")
            raise typer.Exit(EXIT_FAILED) from None

    return wrapper


def _pins(torch, python, deepspeed, horovod, nccl, os_, driver, with_, without):
    from .api import Pins

    return Pins(torch=torch, python=python, deepspeed=deepspeed, horovod=horovod, nccl=nccl,
                os=os_, driver=driver, with_=tuple(with_ or ()), without=tuple(without or ()))


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    Console().print(t)


def _print_stack(d: dict) -> None:
    rows = [[k, d[k] if not isinstance(d[k], dict) else d[k].get("version"),
             d["choices"].get(k, {}).get("reason", "") if k in d["choices"] else ""]
            for k in ("cuda_toolkit", "driver_min", "torch", "torch_variant", "python", "nccl",
                      "deepspeed", "horovod", "os", "base_image", "builder_image")]
    rows[0][2] = d["choices"]["cuda"]["reason"]
    _table(f"{d['target']} -> {d['tag']}", ["axis", "value", "why"], rows)
    for w in d["warnings"]:
        sys.stdout.write(f"warning: {w['rule']}: {w['message']}. {w['fix']}\n")


# -- targets, resolve, check, render ---------------------------------------------------------

@app.command()
@command
def targets(matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt,
            github_matrix: bool = typer.Option(False, "--github-matrix",
                                               help="Print the JSON a GitHub Actions matrix consumes.")) -> None:
    """List the built-in targets and what each resolves to."""
    from .api import builtin_targets, resolve_target
    from .errors import IncompatibleError
    from .matrix import load_matrix

    m = load_matrix(matrix)
    rows = []
    for name in builtin_targets(m):
        alias = m.alias(name)
        try:
            d = resolve_target(name, matrix=m).to_dict()
            rows.append({"name": name, "target": alias.target if alias else name,
                         "description": alias.description if alias else "", "ok": True,
                         "tag": d["tag"], "stack": {k: d[k] for k in (
                             "cuda", "cuda_toolkit", "torch", "python", "nccl", "deepspeed",
                             "horovod", "os", "base_image")}})
        except IncompatibleError as e:
            rows.append({"name": name, "target": alias.target if alias else name,
                         "description": alias.description if alias else "", "ok": False,
                         "error": str(e)})
    if github_matrix:
        _echo_json({"include": [{"target": r["name"], "tag": r["tag"]} for r in rows if r["ok"]]})
        return
    if as_json:
        _echo_json({"matrix": {"path": str(m.path), "digest": m.digest}, "targets": rows})
        return
    _table("envbuilder targets", ["target", "cuda", "torch", "python", "os", "extras", "base image"],
           [[r["name"], r["stack"]["cuda_toolkit"] or "cpu", r["stack"]["torch"], r["stack"]["python"],
             r["stack"]["os"], " ".join(f"{k} {r['stack'][k]}" for k in ("deepspeed", "horovod")
                                        if r["stack"][k]), r["stack"]["base_image"]]
            if r["ok"] else [r["name"], "refused", r["error"], "", "", "", ""] for r in rows])


@app.command()
@command
def resolve(target: str = typer.Argument(..., help="e.g. cu118, cu121-torch2.1-py310, cpu"),
            torch: Optional[str] = TorchOpt, python: Optional[str] = PythonOpt,
            deepspeed: Optional[str] = DsOpt, horovod: Optional[str] = HvdOpt,
            nccl: Optional[str] = NcclOpt, os_: Optional[str] = OsOpt,
            driver: Optional[str] = DriverOpt, with_: Optional[List[str]] = WithOpt,
            without: Optional[List[str]] = WithoutOpt,
            matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Print the resolved stack, or why none exists (exit 3)."""
    from .api import resolve_target

    st = resolve_target(target, matrix_dir=matrix,
                        pins=_pins(torch, python, deepspeed, horovod, nccl, os_, driver, with_, without))
    d = st.to_dict()
    if as_json:
        _echo_json(d)
    else:
        _print_stack(d)


@app.command()
@command
def check(cuda: Optional[str] = typer.Option(None, "--cuda", help="CUDA version, e.g. 11.8."),
          driver: Optional[str] = DriverOpt, torch: Optional[str] = TorchOpt,
          python: Optional[str] = PythonOpt, nccl: Optional[str] = NcclOpt,
          deepspeed: Optional[str] = DsOpt, horovod: Optional[str] = HvdOpt,
          os_: Optional[str] = OsOpt, matrix: Optional[str] = MatrixOpt,
          as_json: bool = JsonOpt) -> None:
    """Judge a (partial) combination; explain every violated rule (exit 3)."""
    from .api import check_combination

    r = check_combination(matrix_dir=matrix, cuda=cuda, driver=driver, torch=torch,
                          python=python, nccl=nccl, deepspeed=deepspeed, horovod=horovod, os=os_)
    if as_json:
        _echo_json(r)
        return
    given = ", ".join(f"{k} {v}" for k, v in r["given"].items())
    sys.stdout.write(f"ok: {given} can work together")
    sat = {k: v for k, v in r["satisfied_by"].items() if k not in r["given"] or v != r["given"][k]}
    sys.stdout.write(f" (e.g. {', '.join(f'{k} {v}' for k, v in sat.items())})\n" if sat else "\n")
    for w in r["warnings"]:
        sys.stdout.write(f"warning: {w['rule']}: {w['message']}. {w['fix']}\n")


@app.command()
@command
def render(target: Optional[str] = typer.Argument(None, help="The target; omit with --all."),
           out: Optional[Path] = typer.Option(None, "-o", "--out", help="Output folder (default build/<target>)."),
           all_: bool = typer.Option(False, "--all", help="Render every built-in target into OUT/<target>/."),
           torch: Optional[str] = TorchOpt, python: Optional[str] = PythonOpt,
           deepspeed: Optional[str] = DsOpt, horovod: Optional[str] = HvdOpt,
           nccl: Optional[str] = NcclOpt, os_: Optional[str] = OsOpt,
           driver: Optional[str] = DriverOpt, with_: Optional[List[str]] = WithOpt,
           without: Optional[List[str]] = WithoutOpt,
           base_image: Optional[str] = typer.Option(None, "--base-image", help="Use this base image (both stages)."),
           pip_index_url: Optional[str] = typer.Option(None, "--pip-index-url", help="PyPI mirror."),
           extra_index_url: Optional[List[str]] = typer.Option(None, "--extra-index-url"),
           nproc: int = typer.Option(12, "--nproc", min=1, help="Ranks of the smoke job."),
           matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Write the Dockerfile, envbuilder.def, requirements, stack.json, smoke job and job files."""
    from .api import render_all, render_target
    from .errors import InputError

    pins = _pins(torch, python, deepspeed, horovod, nccl, os_, driver, with_, without)
    kw = dict(matrix_dir=matrix, pins=pins, base_image=base_image, pip_index_url=pip_index_url,
              extra_index_urls=tuple(extra_index_url or ()), nproc=nproc)
    if all_:
        if target is not None:
            raise InputError("render --all takes no TARGET: it renders every built-in target")
        reports = render_all(out or Path("build"), **kw)
        if as_json:
            _echo_json({"rendered": reports})
        else:
            for r in reports:
                sys.stdout.write(f"{r['target']}: {r['stack']['tag']} -> {r['out']}\n")
        return
    if target is None:
        raise InputError("render needs a TARGET (e.g. cu118) or --all")
    r = render_target(target, out or Path("build") / target, **kw)
    if as_json:
        _echo_json(r)
        return
    d = r["stack"]
    sys.stdout.write(f"{target}: {d['tag']} (base {d['base_image']})\n")
    for f in r["files"]:
        sys.stdout.write(f"  {Path(r['out']) / f}\n")
    for w in d["warnings"]:
        sys.stdout.write(f"warning: {w['rule']}: {w['message']}. {w['fix']}\n")


def main() -> None:  # console-script entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
