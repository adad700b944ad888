#!/bin/sh
# Runs interop.py (our MXFP8 codec against an ml_dtypes reference) in the tests' shared virtual
# environment (tests/pyenv.sh). A machine that cannot make it fails the test: passing without the
# independent reference would hide that nothing was checked.
set -u
script=${1:?usage: interop.sh interop.py}
py=$("${DLI_PYENV:?DLI_PYENV not set (run through meson test)}" numpy ml_dtypes) || {
	echo "mx-interop: FAIL: no Python environment with numpy and ml_dtypes" >&2
	exit 1
}
exec "$py" "$script"
