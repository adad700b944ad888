#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz/ for SECONDS each (default 15), starting from their
# corpora, with ASan and UBSan; the modules come from the gcc build ./build (scripts/setup.sh).
# Builds the whole project with clang on the way (build-fuzz/).
# Exit: 0 no finding, 1 a finding or a build failure, 77 no clang with libFuzzer here.
# A longer run: docs/testing.md.
set -uo pipefail
cd "$(dirname "$0")/.."
budget=${1:-15}

if ! command -v clang >/dev/null ||
	! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
	clang -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null; then
	echo "fuzz: skipped: no clang with libFuzzer (Debian: apt-get install clang libclang-rt-dev)"
	exit 77
fi
mkdir -p build-fuzz
log=build-fuzz/build.log
if [ ! -f build-fuzz/build.ninja ]; then
	CC=clang meson setup build-fuzz -Db_sanitize=address,undefined -Db_lundef=false \
		-Dcuda=disabled >"$log" 2>&1 || { tail -n 30 "$log"; exit 1; }
fi
# Every target, not only the fuzzers: this is also the suite's proof that the project builds with
# clang (the gcc builds are tested; a clang-only error fails here).
echo "== building the project with clang and its fuzz targets (build-fuzz/)"
ninja -C build-fuzz >"$log" 2>&1 ||
	{ tail -n 30 "$log"; exit 1; }
status=0
for t in config tensorfile; do
	mkdir -p "build-fuzz/corpus-$t"
	echo "== fuzz-$t: $budget s"
	if ! meson devenv -C build -w . "$PWD/build-fuzz/tests/fuzz/fuzz-$t" -max_total_time="$budget" \
		-timeout=20 -rss_limit_mb=4096 -artifact_prefix="$PWD/build-fuzz/" \
		"$PWD/build-fuzz/corpus-$t" "tests/fuzz/corpus/$t" >"build-fuzz/fuzz-$t.log" 2>&1; then
		tail -n 40 "build-fuzz/fuzz-$t.log"
		echo "fuzz-$t: FAILED (input saved under build-fuzz/)"
		status=1
	else
		tail -n 1 "build-fuzz/fuzz-$t.log"
	fi
done
exit $status
