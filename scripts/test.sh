#!/usr/bin/env bash
# The whole test suite, with everything it needs, on a fresh Debian 12 machine:
#   1. installs envbuilder with its test extras, and torch 2.13.0 (CPU) for the host smoke tests
#   2. installs and starts a Docker engine, a local base image and a wheelhouse
#      (scripts/test-services.sh; registries are started by the tests themselves)
#   3. runs the static checks (scripts/lint.sh: import-linter layers, ruff, mypy); a violation
#      fails the run before any test
#   4. runs pytest on two workers (the engine tests on one); arguments are passed on (e.g.
#      scripts/test.sh -k resolve); it prints the 25 slowest tests and, last, the set-up, test and
#      total times (docs/internals.md keeps a record)
set -euo pipefail
cd "$(dirname "$0")/.."
export UV_PYTHON_DOWNLOADS=never PIP_DISABLE_PIP_VERSION_CHECK=1
# bytecode is written and kept between runs (outside the checkout): hundreds of tests start the
# CLI in a fresh interpreter, and without it each one compiles envbuilder again
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-${ENVBUILDER_TEST_CACHE:-$HOME/.cache/envbuilder-test}/pycache}
PY=${PYTHON:-python3}
echo "[test.sh] installing this checkout (torch-envbuilder[dev,lock,conda]) and torch 2.13.0 (CPU)" >&2
"$PY" -m pip install -q -e '.[dev,lock,conda]'
# torch's CPU build: on these machines pip's configuration serves it from local disk
"$PY" -m pip install -q torch==2.13.0 numpy \
  || "$PY" -m pip install -q torch==2.13.0 numpy --index-url https://download.pytorch.org/whl/cpu
bash scripts/lint.sh
echo "[test.sh] starting the Docker engine, base image and wheelhouse" >&2
eval "$(bash scripts/test-services.sh)"
setup=$SECONDS
echo "[test.sh] set-up done after ${setup} s (install, lint, engine, base images, wheelhouses)" >&2
# fail (not skip) the engine tests if anything above did not come up
export ENVBUILDER_REQUIRE_DOCKER=1
rc=0
# two workers (pytest-xdist): one runs the engine tests in order (they share the session's
# images), the other the rest beside it; ENVBUILDER_TEST_WORKERS=0 runs everything in this process
workers=${ENVBUILDER_TEST_WORKERS:-2}
"$PY" -m pytest -p no:cacheprovider --durations=25 -n "$workers" --dist loadgroup "$@" || rc=$?
echo "[test.sh] set-up ${setup} s, tests $((SECONDS - setup)) s, total ${SECONDS} s (exit $rc)" >&2
exit $rc
