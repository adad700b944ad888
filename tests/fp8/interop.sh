#!/bin/sh
# Runs interop.py (our FP8 cast against ml_dtypes) in the tests' shared virtual environment
# (tests/pyenv.sh), made on first use and reused after. A machine that cannot make it (no python3, no
# venv module, no PyPI) fails the test: passing without the independent reference would hide that
# nothing was checked.
set -u
script=${1:?usage: interop.sh interop.py}

fail() {
	echo "fp8-interop: FAIL: $*" >&2
	exit 1
}

py=$("${DLI_PYENV:?DLI_PYENV not set (run through meson test)}" numpy ml_dtypes) || fail "no Python environment with numpy and ml_dtypes"
exec "$py" "$script"
