#!/usr/bin/env bash
# Static checks, run by scripts/test.sh before pytest (and so by .ci/run); fails on the first
# violation. The tools come with the dev extra: pip install -e '.[dev]'.
#   1. import-linter: the layers (cli > api > run > lock | diagnose > render > labels > core >
#      errors, see [tool.importlinter] in pyproject.toml); nothing imports upward
#   2. ruff: pyflakes, pycodestyle, bugbear, pyupgrade ([tool.ruff])
#   3. mypy: strict on envbuilder/core, labels, errors and lock/uv; normal elsewhere ([tool.mypy])
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "[lint.sh] import-linter (layers)" >&2
# (lint-imports through the interpreter, so the tools of $PY are used, wherever its scripts are)
"$PY" -c "from importlinter.cli import lint_imports_command; lint_imports_command(['--no-cache'])"
echo "[lint.sh] ruff" >&2
"$PY" -m ruff check envbuilder tests benchmarks
echo "[lint.sh] mypy" >&2
"$PY" -m mypy
echo "[lint.sh] ok" >&2
