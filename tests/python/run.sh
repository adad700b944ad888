#!/usr/bin/env bash
# Runs a Python test of the dlinspect package from the build tree, in the tests' shared venv
# (tests/pyenv.sh) with the packages it needs.
# usage: run.sh BUILD_PYTHON_DIR PRELOAD TEST.py [packages...]
# PRELOAD: the sanitizer runtimes a sanitized build needs loaded before Python ('' if none).
set -u
pydir=$1 preload=$2 test=$3
shift 3
py=$(bash "$DLI_PYENV" "$@") || exit 1
export PYTHONPATH=$pydir
export PYTHONDONTWRITEBYTECODE=1
if [ -n "$preload" ]; then
	# The extension is built with ASan/UBSan; Python is not, so their runtimes go first. Python
	# keeps objects alive until exit on purpose: leaks are not checked here (the C tests do).
	for lib in $preload; do
		[ -f "$lib" ] || { echo "SKIP: sanitizer runtime $lib not found"; exit 77; }
	done
	export LD_PRELOAD="${preload// /:}"
	export ASAN_OPTIONS=detect_leaks=0:${ASAN_OPTIONS:-}
	export PYTHONMALLOC=malloc
fi
exec "$py" "$test"
