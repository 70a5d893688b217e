"""The plain ``explain [--json] [--top N] LOG...`` runs without typer (envbuilder.ui.fastpath):
the same inputs through both ways print the same bytes and exit with the same code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envbuilder.ui import fastpath

RUNS = Path(__file__).parent / "fixtures" / "gpu_runs" / "h200-1gpu"
DUP = str(RUNS / "smoke-nccl-dup.log")
HEALTHY = str(RUNS / "smoke-gloo-12.log")


def _run(args: list[str], cwd: Path, *, fast: bool, stdin: bytes | None = None):
    env = {k: v for k, v in os.environ.items() if k != "ENVBUILDER_NO_FAST_PATH"}
    if not fast:
        env["ENVBUILDER_NO_FAST_PATH"] = "1"
    env["COLUMNS"] = "120"
    p = subprocess.run([sys.executable, "-m", "envbuilder", "explain", *args], cwd=cwd, env=env,
                       input=stdin if stdin is not None else b"", capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


@pytest.mark.parametrize("args", [
    [DUP],
    [DUP, "--json"],
    ["--top", "1", DUP],
    [DUP, HEALTHY, "--top=2", "--json"],
    [HEALTHY],                      # nothing matched: exit 1
    ["no-such.log"],                # bad input: exit 2, one line
    ["no-such.log", "--json"],      # its JSON error document
    ["."],                          # a folder
    ["-"],                          # stdin
], ids=["plain", "json", "top", "two-logs", "nothing", "missing", "missing-json", "folder", "stdin"])
def test_both_ways_say_the_same(args: list[str], tmp_path: Path) -> None:
    stdin = Path(DUP).read_bytes() if args == ["-"] else None
    fast = _run(args, tmp_path, fast=True, stdin=stdin)
    slow = _run(args, tmp_path, fast=False, stdin=stdin)
    assert fast == slow
    assert fast[0] in (0, 1, 2)


@pytest.mark.parametrize("argv", [
    ["explain"], ["explain", "--help"], ["explain", "--learn", "x.log", "--category", "shm"],
    ["explain", "--top", "0", "a.log"], ["explain", "--top", "x", "a.log"], ["explain", "--top"],
    ["explain", "--", "a.log"], ["explain", "--verbose", "a.log"], ["render", "cu118"],
    ["--version"], ["explain", "--top", "²", "a.log"],
])
def test_anything_but_the_plain_form_goes_to_typer(argv: list[str]) -> None:
    assert fastpath.parse(argv) is None


def test_the_plain_form_is_read_whole() -> None:
    assert fastpath.parse(["explain", "a.log", "--json", "--top=3", "-", "b.log"]) == (
        ["a.log", "-", "b.log"], 3, True)


def test_the_fast_path_imports_no_typer_and_no_rich(tmp_path: Path) -> None:
    code = ("import sys; from envbuilder.ui import fastpath; "
            f"rc = fastpath.run(['explain', {DUP!r}, '--json']); "
            "print(rc, 'typer' in sys.modules, 'rich' in sys.modules, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, env={k: v for k, v in os.environ.items()
                                         if k != "ENVBUILDER_NO_FAST_PATH"})
    assert p.stderr.strip().splitlines()[-1] == "0 False False"
