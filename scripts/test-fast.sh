#!/usr/bin/env bash
# The engine-free part of the test suite, from a checkout, installing nothing:
#   1. the static checks (scripts/lint.sh: import-linter layers, ruff, mypy)
#   2. pytest (two workers with pytest-xdist) on every test that needs no Docker engine, no
#      registry, no CUDA image and no long job (-m "not docker and not slow and not cuda and
#      not registry"); tests marked network still reach PyPI (add -m "... and not network"
#      through PYTEST_ADDOPTS to leave them out)
# Arguments are passed on to pytest (e.g. scripts/test-fast.sh -k resolve).
# The whole suite, with the engine and everything it needs, is scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
bash scripts/lint.sh
# on two workers when pytest-xdist (the dev extra) is installed; ENVBUILDER_TEST_WORKERS=0: one
workers=()
"$PY" -c "import xdist" 2>/dev/null && workers=(-n "${ENVBUILDER_TEST_WORKERS:-2}")
exec "$PY" -m pytest -p no:cacheprovider ${workers[@]+"${workers[@]}"} \
  -m "not docker and not slow and not cuda and not registry" "$@"
