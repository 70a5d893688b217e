"""Daily-use commands (issue 23): ``diff``, ``inspect`` and ``init``, registered on the app by
envbuilder.cli (one api call each; the logic lives in knowledge/ and core/)."""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from envbuilder.ui.options import (COMPONENT_NAMES, COMPONENT_TITLES, COMPONENTS, JsonOpt, MatrixOpt, TorchOpt, complete_target,
                                   spec_options)
from envbuilder.ui.output import command, echo_json, print_package_diff, say, table  # noqa: F401


def _lines(lines: list[str]) -> None:

    say(*lines)


def print_axis(axis: str, t: Any) -> None:
    """matrix show: the rows, the sources as numbered notes below (one whole URL a line)."""
    notes: dict[str, int] = {}
    for s in t.sources:
        for u in s:
            notes.setdefault(u, len(notes) + 1)
    table(f"matrix: {axis} ({len(t.rows)} rows)", [*t.columns, "source"],
          [[*r, " ".join(f"[{notes[u]}]" for u in s)] for r, s in zip(t.rows, t.sources)])
    _lines([f"[{n}] {u}" for u, n in notes.items()])


def diff(a: str = typer.Argument(..., metavar="A", autocompletion=complete_target, help="A target (cu121, cu121-torch2.1), a project target, a build folder, a requirements.lock or an image."),
         b: str = typer.Argument(..., metavar="B", autocompletion=complete_target, help="The same kinds as A: what A would become."),
         matrix_a: Optional[str] = typer.Option(None, "--matrix-a", metavar="DIR", help="Resolve A against this matrix folder (e.g. an older copy), to see what a matrix update moves."),
         source: str = typer.Option("auto", "--from", metavar="auto|engine|registry", help="Where an image's labels are read: the engine, the registry (no layer pulled), or auto (the engine when it has the image)."),
         over: Any = None, matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """What changes from A to B: CUDA, driver floor, torch, NCCL, each component (and its pre-built ops), base image, packages, and which image layers rebuild."""
    from envbuilder import api

    d = api.diff(a, b, matrix_dir=matrix, matrix_a=matrix_a, given=over, where=source)
    if as_json:
        return echo_json(d.to_dict())
    if d.facts:
        table(f"{a} -> {b}", ["", "A", "B"], [[f.title, f.a or "-", f.b or "-"] for f in d.facts])
    else:
        say(f"{a} -> {b}: the same stack")
    _lines(api.diff_lines(d))


def inspect_image(image: str = typer.Argument(..., help="An image built by envbuilder: local, or a registry reference (read without pulling layers)."),
                  source: str = typer.Option("auto", "--from", metavar="auto|engine|registry", help="Where the labels are read: the engine, the registry (manifest and config only), or auto (the engine when it has the image)."),
                  matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Print the stack an image's labels declare, as resolve prints it, with its provenance."""
    from envbuilder import api

    d = api.inspect_image(image, where=source, matrix_dir=matrix)
    if as_json:
        return echo_json(d.to_dict())
    shown = api.inspect_lines(d)
    table(f"{image}: {d.target} -> {d.tag}", ["axis", "value", "from"], shown.rows)
    _lines(shown.lines)


def init(driver: Optional[str] = typer.Option(None, "--driver", metavar="VERSION", help="The cluster's NVIDIA driver, e.g. 535.104.05 (default: this host's, as doctor reads it)."),
         gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", metavar="N", help="GPUs per node (default: this host's GPU count)."),
         nodes: int = typer.Option(1, "--nodes", metavar="N", help="Nodes a training job spans (the job files' layout is NODESxGPUS_PER_NODE)."),
         registry: Optional[str] = typer.Option(None, "--registry", metavar="HOST/NS", help="The registry and namespace images are pushed to, e.g. registry.example.com/ml: images are HOST/NS/REPOSITORY:<target>-<tag>, the repository being the project folder's name (the file's repository key)."),
         with_: Optional[List[str]] = typer.Option(None, "--with", metavar="NAME,...", help=f"Components every image carries: {', '.join(COMPONENTS)}."),
         name: str = typer.Option("train", "--name", metavar="NAME", help="The project target's name (its build folder build/NAME)."),
         torch: Optional[str] = TorchOpt,
         matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Write envbuilder.toml for your cluster: targets that run natively on its driver, a layout that fits its nodes, a requirements stub (never overwrites)."""
    from envbuilder import api

    d = api.init_project(".", driver=driver, gpus_per_node=gpus_per_node, nodes=nodes, registry=registry,
                         with_=tuple(with_ or ()), name=name, torch=torch, matrix_dir=matrix).to_dict()
    if as_json:
        return echo_json(d)
    s = d["stack"]
    _lines([f"wrote {', '.join(d['written'])} (from {d['source']})",
            f"{d['name']}: {d['target']}: {d['why']}",
            f"  torch {s['torch']} ({s['torch_variant']}), Python {s['python']}, {s['os']}, NCCL {s['nccl']}"
            + "".join(f", {COMPONENT_TITLES[c]} {s[c]}" for c in COMPONENTS if s[c]),
            f"  layout {d['layout']}" + (f", images {d['registry']}/{d['repository']}" if d["registry"] else ""),
            "next: envbuilder render; envbuilder lock; envbuilder build"])


def register(app: typer.Typer) -> None:
    """Add diff, inspect and init to the app."""
    app.command("diff", help=f"What changes from A to B: CUDA, driver floor, torch, NCCL, "
                             f"{COMPONENT_NAMES} (and the pre-built ops), base image, packages, "
                             f"and which image layers rebuild.")(
        command(spec_options("pins", "overlay")(diff)))
    app.command("inspect")(command(inspect_image))
    app.command("init")(command(init))
