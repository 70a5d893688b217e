#!/usr/bin/env bash
# Static checks, run by scripts/test.sh before pytest (and so by .ci/run); fails on the first
# violation. The tools come with the dev extra: pip install -e '.[dev]'.
#   1. import-linter: the layers (cli > api > run > lock | diagnose > render > labels > core >
#      errors, see [tool.importlinter] in pyproject.toml); nothing imports upward
#   2. ruff: pyflakes, pycodestyle, bugbear, pyupgrade, complexity ([tool.ruff]); cli.py <= 500 lines
#   3. mypy: strict on envbuilder/core, labels, errors and lock/uv; normal elsewhere ([tool.mypy])
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "[lint.sh] import-linter (layers)" >&2
# (lint-imports through the interpreter, so the tools of $PY are used, wherever its scripts are)
"$PY" -c "from importlinter.cli import lint_imports_command; lint_imports_command(['--no-cache'])"
echo "[lint.sh] ruff (incl. complexity: C901/PLR0912/PLR0915, see [tool.ruff.lint])" >&2
"$PY" -m ruff check envbuilder tests benchmarks
echo "[lint.sh] the CLI stays thin: envbuilder/cli.py at most 500 lines" >&2
lines=$(wc -l < envbuilder/cli.py)
[ "$lines" -le 500 ] || { echo "envbuilder/cli.py has $lines lines (> 500): move formatting to envbuilder/ui, logic to envbuilder.api" >&2; exit 1; }
echo "[lint.sh] mypy" >&2
"$PY" -m mypy
echo "[lint.sh] ok" >&2
