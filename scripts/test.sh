#!/usr/bin/env bash
# The whole test suite, with everything it needs, on a fresh Debian 12 machine:
#   1. installs envbuilder with its test extras, and torch 2.13.0 (CPU) for the host smoke tests
#   2. installs and starts a Docker engine, a local base image and a wheelhouse
#      (scripts/test-services.sh; registries are started by the tests themselves)
#   3. runs the static checks (scripts/lint.sh: import-linter layers, ruff, mypy); a violation
#      fails the run before any test
#   4. runs pytest; arguments are passed on (e.g. scripts/test.sh -k resolve)
set -euo pipefail
cd "$(dirname "$0")/.."
export UV_PYTHON_DOWNLOADS=never PIP_DISABLE_PIP_VERSION_CHECK=1
PY=${PYTHON:-python3}
echo "[test.sh] installing this checkout (torch-envbuilder[dev,lock,conda]) and torch 2.13.0 (CPU)" >&2
"$PY" -m pip install -q -e '.[dev,lock,conda]'
# torch's CPU build: on these machines pip's configuration serves it from local disk
"$PY" -m pip install -q torch==2.13.0 numpy \
  || "$PY" -m pip install -q torch==2.13.0 numpy --index-url https://download.pytorch.org/whl/cpu
bash scripts/lint.sh
echo "[test.sh] starting the Docker engine, base image and wheelhouse" >&2
eval "$(bash scripts/test-services.sh)"
echo "[test.sh] set-up done after ${SECONDS} s (install, lint, engine, base images, wheelhouses)" >&2
# fail (not skip) the engine tests if anything above did not come up
export ENVBUILDER_REQUIRE_DOCKER=1
exec "$PY" -m pytest -p no:cacheprovider "$@"
