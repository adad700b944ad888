#!/usr/bin/env bash
# Runs a dlinspect.torch test (or the Hugging Face example) from the build tree in the torch venv:
# torch and transformers from PyPI, in a venv kept outside the clone and keyed by its requirements
# and Python version, so CI and later runs on the same machine reuse it. The first run downloads
# torch with its CUDA wheels (about 5.5 GB on x86_64 Linux) and transformers.
# usage: torch-run.sh BUILD_PYTHON_DIR PRELOAD PYTHON TEST.py [args...]
# PYTHON: the interpreter the extension was built for (the venv is made from it).
# Environment: DLINSPECT_TORCH_VENV (the venv's path, instead of the keyed one under
# ${XDG_CACHE_HOME:-~/.cache}/dlinspect/); DLINSPECT_SKIP_TORCH=1 skips (exit 77) instead of
# installing. A machine that cannot install them fails loudly, as tests/pyenv.sh does.
set -u
pydir=$1 preload=$2 base=$3 test=$4
shift 4
# Pinned: the README's figures were measured with these; a new version is a new venv (its key).
reqs="torch==2.15.0 transformers==5.23.0"
if [ "${DLINSPECT_SKIP_TORCH:-0}" = 1 ]; then
	echo "SKIP: DLINSPECT_SKIP_TORCH=1"
	exit 77
fi
if [ -n "$preload" ]; then
	# torch's own native libraries are not built with the sanitizers; an ASan runtime preloaded
	# into them reports their allocator's behaviour, not dlinspect's. The extension's C paths are
	# covered under ASan by python_api.
	echo "SKIP: the torch tests do not run in a sanitized build"
	exit 77
fi
ver=$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || {
	echo "FAIL: $base does not run" >&2
	exit 1
}
key=$(printf '%s|%s' "$reqs" "$ver" | sha256sum | cut -c1-12)
venv=${DLINSPECT_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/dlinspect/venv-torch-py$ver-$key}
py=$venv/bin/python
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ! { [ -x "$py" ] && "$py" -c 'import torch, transformers' 2>/dev/null; }; then
	if [ ! -x "$py" ]; then
		rm -rf "$venv"
		"$base" -m venv "$venv" >&2 || {
			echo "FAIL: $base -m venv $venv failed (Debian: apt-get install python3-venv)" >&2
			exit 1
		}
	fi
	echo "torch-run: installing $reqs into $venv (first run: about 5.5 GB from PyPI)" >&2
	# shellcheck disable=SC2086
	"$py" -m pip install --quiet --disable-pip-version-check $reqs >&2 || {
		echo "FAIL: pip could not install $reqs into $venv (is PyPI reachable?)" >&2
		exit 1
	}
	"$py" -c 'import torch, transformers' || {
		echo "FAIL: torch and transformers do not import after installing into $venv" >&2
		exit 1
	}
fi
flock -u 9
export PYTHONPATH=$pydir
export PYTHONDONTWRITEBYTECODE=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$py" "$test" "$@"
