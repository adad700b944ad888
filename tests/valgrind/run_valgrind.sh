#!/bin/sh
# Runs a command under valgrind's memcheck and fails on any error or any byte lost (definitely,
# indirectly or possibly: "still reachable" is memory a library keeps until exit, not a leak).
# Usage: run_valgrind.sh NAME COMMAND [ARGS...]; exit 77 when valgrind is not installed.
name=$1
shift
command -v valgrind >/dev/null 2>&1 || { echo "skip: valgrind is not installed"; exit 77; }
log=$(mktemp /tmp/dli-valgrind-XXXXXX)
trap 'rm -f "$log"' EXIT
# AVX-512 is not emulated by valgrind: the AVX2 kernels run instead (the dispatcher's own choice
# under valgrind, forced so that the run is the same on every machine).
DLINSPECT_SIMD=avx2 valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
	--show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
	--track-origins=yes --log-file="$log" "$@" >/dev/null
rc=$?
grep -E "ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|All heap blocks" "$log"
if [ $rc = 99 ] || ! grep -q "ERROR SUMMARY: 0 errors" "$log"; then
	echo "FAIL: $name: valgrind found errors (exit $rc):"
	cat "$log"
	exit 1
fi
if [ $rc != 0 ]; then
	echo "FAIL: $name: the command itself exited $rc"
	cat "$log"
	exit 1
fi
echo "$name: 0 errors, 0 bytes lost"
