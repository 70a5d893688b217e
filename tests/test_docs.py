"""Every shell block of README.md and docs/*.md runs against the CLI (doctest-style).

A block is a fenced ```sh or ```bash block. It runs as one bash script in a folder of its own
per document (the document's blocks run in order in that folder, so `init` then `render`
work), with `envbuilder` on the PATH being this checkout's CLI. Each command (a line, with its
`\\` continuation lines) must end with exit 0, or with N where its comment says `# exit N`.

The comment line right above a block says where it runs:

* none: engine-free, always (no Docker, no network);
* `<!-- doctest: network -->`: needs PyPI (pytest marker `network`; with the blocks before it);
* `<!-- doctest: install -->`: installs the checkout (`pip install -e .`) in a fresh venv made
  from this Python (`--system-site-packages`), from a copy of the checkout (markers `slow`,
  `network`: pip fetches the build backend);
* `<!-- doctest: skip: REASON -->`: not run here; REASON names what cannot be (a GPU cluster,
  nvidia/cuda pulls, the suite itself) and the tests that cover it. Only these may be skipped.

A block whose lines start with `envbuilder` must be valid against the CLI even when skipped:
every command and option it names exists (checked through `--help`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"<!--\s*doctest:\s*([a-z]+)(?::\s*(.*?))?\s*-->")
EXIT = re.compile(r"#\s*exit\s+(\d+)\b")
KINDS = ("run", "network", "install", "skip")


@dataclass
class Block:
    doc: Path
    line: int
    kind: str
    reason: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    out: list[Block] = []
    lines = doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(sh|bash)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mk = MARK.search(prev)
        kind, reason = (mk.group(1), mk.group(2) or "") if mk else ("run", "")
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        out.append(Block(doc, start + 1, kind, reason, "\n".join(body)))
        i += 1
    return out


ALL = [b for d in DOCS for b in blocks(d)]


def commands(text: str) -> list[tuple[str, int]]:
    """(command, expected exit code) per logical line; comment-only lines are left out."""
    out: list[tuple[str, int]] = []
    cur = ""
    for raw in text.splitlines():
        s = raw.rstrip()
        if not cur and (not s.strip() or s.strip().startswith("#")):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        m = EXIT.search(cur)
        out.append((cur.strip(), int(m.group(1)) if m else 0))
        cur = ""
    return out


def script(text: str) -> str:
    """The block as a bash script that stops at the first command with another exit code."""
    parts = ["set -o pipefail"]
    for cmd, code in commands(text):
        q = shlex.quote(cmd[:300])
        parts.append(f"{cmd}\nrc=$?; if [ $rc -ne {code} ]; then echo \"doctest: exit $rc, not {code}: \"{q} >&2; exit 97; fi")
    return "\n".join(parts) + "\n"


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    """A bin folder whose `envbuilder` is this checkout's CLI."""
    bindir = tmp_path_factory.mktemp("bin")
    exe = bindir / "envbuilder"
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec {shlex.quote(sys.executable)} "
                   "-c 'import sys; from envbuilder.cli import main; sys.argv[0] = \"envbuilder\"; main()' \"$@\"\n")
    exe.chmod(0o755)
    return bindir


def _run(block: Block, cwd: Path, path: str, tmp: Path) -> None:
    env = dict(os.environ)
    env.update(PATH=path, XDG_CACHE_HOME=str(tmp / "cache"), COLUMNS="200", NO_COLOR="1")
    env.pop("ENVBUILDER_DEBUG", None)
    env.pop("PYTHONPATH", None)
    p = subprocess.run(["bash", "-c", script(block.text)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=1800, stdin=subprocess.DEVNULL)
    if p.returncode == 97 and block.kind == "network" and \
            "cannot reach the package index https://download.pytorch.org" in p.stderr:
        pytest.skip(f"{block.id}: PyTorch's own wheel index is not reachable here")
    assert p.returncode == 0, f"{block.id}:\n{p.stderr[-3000:]}\n{p.stdout[-2000:]}"


def _doc_cases(kinds: tuple[str, ...]) -> list:
    return [pytest.param(d, id=str(d.relative_to(ROOT))) for d in DOCS
            if any(b.kind in kinds for b in blocks(d))]


@pytest.mark.parametrize("doc", _doc_cases(("run",)))
def test_engine_free_blocks_run(doc, shim, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for b in blocks(doc):
        if b.kind == "run":
            _run(b, work, f"{shim}{os.pathsep}{os.environ['PATH']}", tmp_path)


@pytest.mark.network
@pytest.mark.parametrize("doc", _doc_cases(("network",)))
def test_network_blocks_run(doc, shim, tmp_path, uv_cache):
    work = tmp_path / "work"
    work.mkdir()
    for b in blocks(doc):
        if b.kind in ("run", "network"):
            _run(b, work, f"{shim}{os.pathsep}{os.environ['PATH']}", tmp_path)


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in ALL if b.kind == "install"])
def test_install_blocks_run_in_a_fresh_venv(block, tmp_path):
    src = tmp_path / "checkout"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    _run(block, src, f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", tmp_path)
    assert (src / "build" / "cu118" / "Dockerfile").is_file()


def test_every_block_is_marked_with_a_known_kind():
    assert ALL, "no shell blocks found"
    for b in ALL:
        assert b.kind in KINDS, f"{b.id}: unknown doctest kind {b.kind!r} (one of {KINDS})"
        if b.kind == "skip":
            assert len(b.reason) > 20, f"{b.id}: a skipped block says why and what covers it"
    # most of the documentation runs: skipped blocks are the exception
    assert sum(b.kind != "skip" for b in ALL) > sum(b.kind == "skip" for b in ALL)


def _commands_and_options(text: str) -> list[tuple[list[str], list[str]]]:
    out = []
    for cmd, _ in commands(text):
        for part in re.split(r"\|\||&&|\||;", cmd):
            words = part.split("#")[0].split()
            if not words or words[0] != "envbuilder":
                continue
            sub = [w for w in words[1:3] if re.fullmatch(r"[a-z]+", w)]
            opts = [w.split("=")[0] for w in words if w.startswith("--")]
            out.append((sub, opts))
    return out


def test_every_documented_command_and_option_exists():
    """Skipped blocks too: each `envbuilder CMD --opt` of the docs names a real command and
    option (the CLI's --help lists it)."""
    from typer.testing import CliRunner

    from envbuilder.cli import app

    helps: dict[tuple[str, ...], str] = {}
    runner = CliRunner()
    for b in ALL:
        for sub, opts in _commands_and_options(b.text):
            for n in (2, 1, 0):
                key = tuple(sub[:n])
                if key not in helps:
                    r = runner.invoke(app, [*key, "--help"], env={"COLUMNS": "300"})
                    helps[key] = r.output if r.exit_code == 0 else ""
                if helps[key]:
                    break
            assert helps[key], f"{b.id}: `envbuilder {' '.join(sub)}` is not a command"
            for o in opts:
                if o in ("--help", "--version", "--install-completion", "--show-completion"):
                    continue
                assert re.search(rf"(^|[\s,]){re.escape(o)}\b", helps[key]), \
                    f"{b.id}: `envbuilder {' '.join(key)}` has no option {o}"


# the docs files other helpers write on their branches (the lead merges them): linked already
OTHER_HELPERS_DOCS = {"docs/hostile-input.md", "docs/explain.md", "docs/matrix.md", "docs/training.md"}


def test_readme_is_short_and_every_local_link_resolves():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    assert "[tests/test_hostile_inputs.py](tests/test_hostile_inputs.py)" in readme
    for section in ("## Quick start", "## Set-up: two commands", "## What envbuilder promises",
                    "## Documentation", "## Development"):
        assert section in readme
    assert "pip install -e . && envbuilder render cu118" in readme and "bash scripts/test.sh" in readme
    assert "bash scripts/test-fast.sh" in readme and (ROOT / "scripts" / "test-fast.sh").is_file()
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            path = (doc.parent / target).resolve()
            rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
            assert path.exists() or rel in OTHER_HELPERS_DOCS, f"{doc.relative_to(ROOT)}: {target}"
