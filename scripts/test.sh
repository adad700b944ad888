#!/usr/bin/env bash
# Installs the dependencies, builds dlinspect twice (plain, and with AddressSanitizer and
# UndefinedBehaviorSanitizer), runs every test in both, the kernels' suites once more with the
# AVX-512 kernels emulated (x86-64), the threads test under ThreadSanitizer, each
# libFuzzer target for a short budget (scripts/fuzz.sh, with clang), and ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --sanitize || { echo "0 passed, 1 failed"; exit 1; }

status=0
for dir in build build-asan; do
	echo "== tests in $dir"
	meson test -C "$dir" --print-errorlogs --num-processes 2 || status=1
done

# The kernels' suites once more with the AVX-512 kernels emulated (docs/testing.md): on a machine
# without AVX-512 the only run they get.
# A build that fails leaves no test log, which counts as a failure below.
emu_log=
if [ "$(uname -m)" = x86_64 ]; then
	echo "== tests in build-emu (the AVX-512 kernels over SIMDe: the kernels' suites)"
	emu_log=build-emu/meson-logs/testlog.json
	rm -f "$emu_log"
	if bash scripts/build.sh . build-emu -Davx512_emulation=true -Dcuda=disabled -Dpython=disabled \
		-Dmpi=disabled -Dnccl=disabled -Dwerror=true; then
		meson test -C build-emu --print-errorlogs --num-processes 2 --suite kernels \
			--suite strided --suite fp8 --suite mx --suite nvfp4 --suite features || status=1
	else
		status=1
	fi
fi

# ThreadSanitizer over the multi-threaded tests (docs/plugins.md, "Threads"): just those tests and
# the modules they load, in build-tsan/.
echo "== tests in build-tsan (ThreadSanitizer: the multi-threaded tests: threads, reload, dump-files)"
tsan_log=build-tsan.log
if { [ -f build-tsan/build.ninja ] || meson setup build-tsan -Dbuildtype=debug -Db_sanitize=thread \
	-Db_lundef=false -Dcuda=disabled >"$tsan_log" 2>&1; } &&
	ninja -C build-tsan build.ninja >"$tsan_log" 2>&1 && # regenerated first: the target list below reads it
	ninja -C build-tsan tests/unit/test_threads tests/unit/test_reload tests/unit/probe.so \
		tests/dump/dump_driver tools/dlinspect $(ninja -C build-tsan -t targets all |
		grep -E '^(features|loggers)/[^:]*\.so:' | cut -d: -f1) >"$tsan_log" 2>&1; then
	meson test -C build-tsan --no-rebuild --print-errorlogs threads reload dump-files || status=1
else
	tail -n 30 "$tsan_log"
	rm -f build-tsan/meson-logs/testlog.json # counted as a failure below
	status=1
fi
rm -f "$tsan_log"

echo "== fuzzing, ${DLI_FUZZ_SECONDS:-15} s a target"
bash scripts/fuzz.sh "${DLI_FUZZ_SECONDS:-15}"
fuzz=$?
[ $fuzz = 0 ] || [ $fuzz = 77 ] || status=1

python3 - $fuzz build/meson-logs/testlog.json build-asan/meson-logs/testlog.json \
	build-tsan/meson-logs/testlog.json $emu_log <<'PY'
import json, sys
passed = failed = skipped = 0
fuzz = int(sys.argv[1])
if fuzz == 0:
    passed += 1
elif fuzz == 77:
    skipped += 1
else:
    failed += 1
    print("FAILED: fuzz (scripts/fuzz.sh)")
for path in sys.argv[2:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        failed += 1
        print(f"FAILED: no test log {path} (its build failed)")
        continue
    for line in lines:
        r = json.loads(line)
        if r["result"] in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r["result"] == "SKIP":
            skipped += 1
        else:
            failed += 1
            print(f"FAILED: {r['name']} ({path})")
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
PY
exit $status
