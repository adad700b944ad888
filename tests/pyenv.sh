#!/usr/bin/env bash
# The tests' shared Python virtual environment, for the independent references (numpy, ml_dtypes,
# safetensors, TensorBoard's reader). Makes sure every package named in the arguments imports
# (pip and import names are the same for all of them), creating or extending the environment under
# a lock so tests running at once share one, then prints its python on stdout.
# Environment: DLI_PYENV_DIR (default: .venv-tests beside this tests/ directory).
# A machine that cannot provide them fails loudly: passing without the reference would hide that
# nothing was checked.
set -u
here=$(cd "$(dirname "$0")" && pwd)
venv=${DLI_PYENV_DIR:-$here/../.venv-tests}
py=$venv/bin/python

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

imports_ok() {
	[ -x "$py" ] && "$py" -c 'import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' "$@" 2>/dev/null
}

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ! imports_ok "$@"; then
	if [ ! -x "$py" ]; then
		base=/usr/bin/python3
		[ -x "$base" ] || base=$(command -v python3) || fail "python3 not found (Debian: apt-get install python3 python3-venv python3-pip)"
		rm -rf "$venv"
		"$base" -m venv "$venv" >&2 ||
			fail "$base -m venv $venv failed: install the venv module (Debian: apt-get install python3-venv python3-pip)"
	fi
	echo "pyenv: installing $* into $venv" >&2
	"$py" -m pip install --quiet --disable-pip-version-check "$@" >&2 ||
		fail "pip could not install $* into $venv (is PyPI reachable?)"
	imports_ok "$@" || fail "$* do not import after installing into $venv"
fi
flock -u 9
echo "$py"
