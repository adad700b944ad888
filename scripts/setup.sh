#!/usr/bin/env bash
# Installs what dlinspect needs (Debian/Ubuntu packages) and builds it into ./build.
# Used by scripts/demo.sh and scripts/test.sh; safe to run again (skips what is already there).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(gcc g++ binutils python3 python3-venv python3-pip meson ninja-build pkg-config libyaml-dev libltdl-dev libpcre2-dev libprotobuf-c-dev protobuf-c-compiler libopenblas-dev)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "== installing: ${missing[*]}"
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# $1: build dir, rest: meson options.
build() {
	local dir=$1
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" "$@" >/dev/null
	fi
	echo "== building $dir"
	ninja -C "$dir" >/dev/null
}

build build
if [ "${1:-}" = "--sanitize" ]; then
	# Debug build type turns on DLI_DEBUG_CHECKS (dli_step racing other calls is reported).
	build build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false
fi
