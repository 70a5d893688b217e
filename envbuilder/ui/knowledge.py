"""The matrix's own commands: ``matrix verify``, ``matrix show`` and ``matrix refresh``,
registered on the app by envbuilder.cli (one api call each; the logic lives in knowledge/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from envbuilder.errors import EXIT_FAILED
from envbuilder.ui import daily
from envbuilder.ui.options import COMPONENT_NAMES, COMPONENTS, JsonOpt, MatrixOpt, complete_axis
from envbuilder.ui.output import command, console, echo_json, say

REFRESH_SOURCES = ("pypi", "pytorch-index", "release-md", "nvidia-images", "components")

matrix_app = typer.Typer(help="Read the matrix (show), check it against the package indexes (verify), or read "
                              "its facts again from the sources that publish them (refresh).",
                         no_args_is_help=True)


@matrix_app.command("verify", help=f"Check torch releases, variants, NCCL pins and Python tags, "
                                   f"and {COMPONENT_NAMES}'s releases and requires-python, against "
                                   f"the reachable indexes (exit 1 on a disagreement).")
@command
def matrix_verify(pypi: str = typer.Option("https://pypi.org/simple", "--pypi-index-url", help="PyPI or a mirror."),
                  torch_index: Optional[str] = typer.Option(None, "--torch-index", help="PyTorch's index template with {variant}."),
                  write_overlay: Optional[str] = typer.Option(None, "--write-overlay", metavar="DIR", help="Write the new releases as a matrix overlay to review (--matrix-overlay DIR loads it)."),
                  matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Check the matrix against the package indexes (the help above says what)."""
    from envbuilder.api import verify_matrix, write_verify_overlay

    con = console(stderr=True)
    con.quiet = as_json
    with con.status("verify") as st:
        rep = verify_matrix(matrix_dir=matrix, pypi=pypi, torch_index=torch_index,
                            progress=lambda msg: st.update(msg))
    if as_json:
        echo_json(rep.to_dict())
    else:
        say(rep.headline())  # first: what could not be reached
        for f in rep.findings:
            say(f"{f.kind}: {f}")
        say(f"{len(rep.agreed)} facts agree; {len(rep.of('disagree'))} disagreements, "
            f"{len(rep.of('new'))} new, {len(rep.of('skipped'))} skipped, {len(rep.of('unverified'))} unverified")
    if write_overlay:
        say(f"overlay: {', '.join(write_verify_overlay(rep, write_overlay, matrix_dir=matrix)) or 'nothing new'} in {write_overlay}", err=True)
    if rep.error:
        say(f"envbuilder: error: {rep.error}", err=True)
    if not rep.ok:
        raise typer.Exit(EXIT_FAILED)


@matrix_app.command("show")
@command
def matrix_show(axis: str = typer.Argument(..., autocompletion=complete_axis, help=f"cuda, torch, nccl, os, base_images, {', '.join(COMPONENTS)} or incompatibilities."),
                torch: Optional[str] = typer.Option(None, "--torch", metavar="VERSION", help="Only rows of this torch release or line (2.6)."),
                cuda: Optional[str] = typer.Option(None, "--cuda", metavar="VERSION", help="Only rows of this CUDA version or line (12.4; torch: its cu124 variant)."),
                python: Optional[str] = typer.Option(None, "--python", metavar="VERSION", help="Only rows that list this Python (3.11)."),
                os_: Optional[str] = typer.Option(None, "--os", metavar="OS", help="Only rows of this OS (ubuntu22.04, debian)."),
                nccl: Optional[str] = typer.Option(None, "--nccl", metavar="VERSION", help="Only rows of this NCCL release or line."),
                matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Print one axis of the matrix with the source of every row (filters: --torch, --cuda, --python, --os, --nccl)."""
    from envbuilder.api import show_axis

    t = show_axis(axis, matrix_dir=matrix, filters={"torch": torch, "cuda": cuda, "python": python, "os": os_, "nccl": nccl})
    echo_json(t.to_dict()) if as_json else daily.print_axis(axis, t)


@matrix_app.command("refresh", help="Read the matrix's facts again from their sources (PyPI, PyTorch's index, "
                                    "RELEASE.md, NVIDIA's image sources, each component's sources at its release "
                                    "tag) and print what differs, as a diff with each source and date; "
                                    "--write-overlay writes it (exit 1 on a difference).")
@command
def matrix_refresh(source: Optional[List[str]] = typer.Option(None, "--source", metavar="NAME", help=f"Read only these sources ({', '.join(REFRESH_SOURCES)}; repeat the option)."),
                   replay: Optional[Path] = typer.Option(None, "--replay", metavar="DIR", help="Read recorded responses from DIR (its index.json) instead of the network."),
                   component_version: Optional[List[str]] = typer.Option(None, "--component-version", metavar="NAME==V", help="A component release whose sources are read (default: the newest of each line)."),
                   write_overlay: Optional[str] = typer.Option(None, "--write-overlay", metavar="DIR", help="Write the differing facts as a matrix overlay to review (--matrix-overlay DIR loads it)."),
                   record: Optional[Path] = typer.Option(None, "--record", metavar="DIR", help="Keep every response read in a new folder DIR (what --replay reads)."),
                   pypi: str = typer.Option("https://pypi.org/simple", "--pypi-index-url", help="PyPI or a mirror."),
                   show_all: bool = typer.Option(False, "--all", help="Also print the facts that agree."),
                   matrix: Optional[str] = MatrixOpt, as_json: bool = JsonOpt) -> None:
    """Read the matrix's facts again (the help above says what)."""
    from envbuilder.api import refresh_matrix, write_refresh_overlay

    con = console(stderr=True)
    con.quiet = as_json
    with con.status("refresh") as st:
        rep = refresh_matrix(matrix_dir=matrix, sources=source, replay=replay, pypi=pypi, record=record,
                             component_versions=component_version, progress=lambda msg: st.update(msg))
    if as_json:
        echo_json(rep.to_dict())
    else:
        print_refresh(rep, show_all)
    if write_overlay:
        written = write_refresh_overlay(rep, write_overlay, matrix_dir=matrix)
        say(f"overlay: {', '.join(written) or 'nothing differs'} in {write_overlay}", err=True)
    if rep.error:
        say(f"envbuilder: error: {rep.error}", err=True)
    if not rep.ok:
        raise typer.Exit(EXIT_FAILED)


def print_refresh(rep: Any, show_all: bool) -> None:
    """The refresh as a reviewed diff: what could not be read first, then each differing fact
    (the matrix's value, then the source's with its URL and the date read)."""
    out = [rep.headline()]
    for name, state in rep.sources.items():
        if state != "read":
            out.append(f"source {name}: {state}")
    for f in rep.of("differ") + (rep.of("agree") if show_all else []) + rep.of("unverified"):
        out += f.lines(rep.read) if f.status != "agree" else [f"= {f.file}: {f.entry}: {f.field}: {f.found!r} ({f.url})"]
    c = {s: len(rep.of(s)) for s in ("agree", "differ", "unverified")}
    out.append(f"{c['agree']} facts agree; {c['differ']} differ, {c['unverified']} unverified (read {rep.read})")
    say(*out)


def register(app: typer.Typer) -> None:
    """Add the matrix commands (verify, show, refresh) to the app."""
    app.add_typer(matrix_app, name="matrix")
