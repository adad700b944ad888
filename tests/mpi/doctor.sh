#!/bin/sh
# `dlinspect doctor` under mpirun -np 4 (docs/distributed.md): every rank reports, the all-reduce
# sums right; then with rank 2 never joining, the others name it within the time limit.
# argv: <dlinspect> <dir of mpi.so>. Skips (77) without mpirun or the mpi module.
set -u
tool=$1 comm_dir=$2
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
[ -f "$comm_dir/mpi.so" ] || { echo "SKIP: the mpi module was not built"; exit 77; }
export DLINSPECT_PLUGIN_PATH="${DLINSPECT_PLUGIN_PATH:-}:$comm_dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sanitizer builds: Open MPI's own allocations are not ours to report.
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/lsan-mpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# Whole stacks (Open MPI's libraries have no frame pointers), so that the suppressions match.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
out=$(mktemp) errf=$(mktemp)
trap 'rm -f "$out" "$errf"' EXIT
fail=0
timeout 120 mpirun --oversubscribe -np 4 "$tool" doctor --communicator mpi >"$out" 2>"$errf"
rc=$?
cat "$out"
[ $rc = 0 ] || { echo "FAIL: doctor exited $rc"; cat "$errf"; fail=1; }
for r in 0 1 2 3; do
	grep -q "^  rank $r  host .* pid [0-9]" "$out" || { echo "FAIL: rank $r did not report"; fail=1; }
done
grep -q "all-reduce (sum of rank + 1 = 10)" "$out" || { echo "FAIL: no all-reduce line"; fail=1; }
grep -q "^ok: every rank answered" "$out" || { echo "FAIL: no ok line"; fail=1; }

timeout 120 mpirun --oversubscribe -np 4 "$tool" doctor --communicator mpi --timeout 2 \
	--test-absent 2 >"$out" 2>"$errf"
rc=$?
[ $rc != 0 ] || { echo "FAIL: doctor passed with rank 2 absent"; fail=1; }
for r in 0 1 3; do
	grep -q "rank $r: the roll call (all-gather) timed out after 2 s: rank(s) 2 did not join" \
		"$errf" || { echo "FAIL: rank $r did not name rank 2"; cat "$errf"; fail=1; }
done
exit $fail
