#!/usr/bin/env bash
# The engine-free part of the test suite, from a checkout, installing nothing:
#   1. the static checks (scripts/lint.sh: import-linter layers, ruff, mypy)
#   2. pytest on every test that needs no Docker engine, no registry, no CUDA image and no long
#      job (-m "not docker and not slow and not cuda and not registry"); tests marked network
#      still reach PyPI (add -m "... and not network" through PYTEST_ADDOPTS to leave them out)
# Arguments are passed on to pytest (e.g. scripts/test-fast.sh -k resolve).
# The whole suite, with the engine and everything it needs, is scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
bash scripts/lint.sh
exec "$PY" -m pytest -p no:cacheprovider -m "not docker and not slow and not cuda and not registry" "$@"
