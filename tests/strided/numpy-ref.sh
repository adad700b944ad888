#!/bin/sh
# Runs test_strided --export into a fresh directory, then numpy_ref.py in the tests' shared Python
# environment (tests/pyenv.sh: numpy and safetensors). No environment is a failure: passing without
# the independent reference would hide that nothing was checked.
set -u
prog=${1:?usage: numpy-ref.sh test_strided numpy_ref.py}
script=${2:?usage: numpy-ref.sh test_strided numpy_ref.py}
py=$("${DLI_PYENV:?DLI_PYENV not set (run through meson test)}" numpy safetensors) ||
	{ echo "strided-numpy: FAIL: no Python environment with numpy and safetensors" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/dli-strided-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
"$prog" --export "$dir" || { echo "strided-numpy: FAIL: $prog --export failed" >&2; exit 1; }
"$py" "$script" "$dir"
