#!/usr/bin/env bash
# `pip install .` and `pip install -e .` of the repository into a fresh venv (meson-python, meson
# and ninja come from PyPI), each followed by tests/python/smoke.py run from outside the repo: the
# installed package must find its plugins relative to itself, with no DLINSPECT_PLUGIN_PATH.
# usage: test_pip_install.sh REPO
set -u
repo=$(cd "$1" && pwd)
tmp=$(mktemp -d /tmp/dli-pip-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
base=/usr/bin/python3
[ -x "$base" ] || base=$(command -v python3) || { echo "FAIL: python3 not found"; exit 1; }
unset DLINSPECT_PLUGIN_PATH PYTHONPATH
step() {
	echo "== $*"
	"$@" >"$tmp/log" 2>&1 || { tail -n 40 "$tmp/log"; echo "FAIL: $*"; exit 1; }
}
step "$base" -m venv "$tmp/venv"
pip=("$tmp/venv/bin/python" -m pip --disable-pip-version-check)
# The CUDA backend is left out of the test build: nvcc takes minutes (the default, cuda=auto,
# builds it into the wheel where nvcc is found).
nocuda=--config-settings=setup-args=-Dcuda=disabled
step "${pip[@]}" install numpy
step "${pip[@]}" install "$nocuda" "$repo"
cd "$tmp" || exit 1
step "$tmp/venv/bin/python" "$repo/tests/python/smoke.py" "$repo"
cat "$tmp/log"

# Editable: meson-python rebuilds on import, so its build tools live in the venv, and its build
# dir goes outside the repo.
step "${pip[@]}" uninstall -y dlinspect
step "${pip[@]}" install meson-python meson ninja
step "${pip[@]}" install --no-build-isolation "$nocuda" --config-settings=build-dir="$tmp/editable-build" -e "$repo"
step "$tmp/venv/bin/python" "$repo/tests/python/smoke.py" "$repo" --editable
cat "$tmp/log"
echo "pip install . and pip install -e . work"
