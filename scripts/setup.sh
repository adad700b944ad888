#!/usr/bin/env bash
# Installs what dlinspect needs (Debian/Ubuntu packages) and builds it into ./build.
# Used by scripts/demo.sh and scripts/test.sh; safe to run again (skips what is already there).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(gcc g++ binutils valgrind python3 python3-dev python3-venv python3-pip meson ninja-build pkg-config libyaml-dev libltdl-dev libpcre2-dev libprotobuf-c-dev protobuf-c-compiler libopenblas-dev)
# Statistics across ranks: the mpi communicator and the tests under mpirun (docs/distributed.md).
packages+=(libopenmpi-dev openmpi-bin)
# The tests also fuzz with clang's libFuzzer (scripts/fuzz.sh), and run the AVX-512 kernels on any
# x86-64 over SIMDe (docs/testing.md, "AVX-512 emulated").
[ "${1:-}" = "--sanitize" ] && packages+=(clang libclang-rt-dev libsimde-dev)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "== installing: ${missing[*]}"
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo"
	# Quiet, but not silent: apt's errors go to stderr, and on failure its output is shown.
	log=$(mktemp)
	if ! $sudo apt-get update -qq >"$log" 2>&1 ||
		! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >>"$log" 2>&1; then
		tail -n 40 "$log"
		rm -f "$log"
		echo "== apt-get failed: the packages above could not be installed" >&2
		exit 1
	fi
	rm -f "$log"
fi

# Progress while building; on failure, the compiler's error (scripts/build.sh). The test builds
# (--sanitize, scripts/test.sh) treat warnings as errors, so a warning cannot land; a user's build
# (the demo) keeps them warnings.
werror=false
[ "${1:-}" = "--sanitize" ] && werror=true
bash scripts/build.sh . build -Dwerror=$werror
if [ "${1:-}" = "--sanitize" ]; then
	# Debug build type turns on DLI_DEBUG_CHECKS (dli_step racing other calls is reported).
	bash scripts/build.sh . build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
		-Dwerror=true
fi
