#!/bin/sh
# The MPI reduction tests (docs/distributed.md): LogTensorStats over 1, 2, 3 and 4 ranks under
# mpirun, every rank's values compared with a reference over the concatenated shards (check.py)
# and with the other ranks' values bit for bit; then a run whose last rank leaves a step early.
# Skips (77) without mpirun or the mpi module.
# argv: <reduce_rank> <dir of exact_logger.so> <dir of mpi.so> [case...]; cases: 1 2 3 4 fault
# die (the last of 4 ranks is killed by SIGKILL at the second step; mpirun --enable-recovery lets
# the others run on), hostinit (2 ranks of a host that initializes and finalizes MPI itself),
# hostfinal (the same, finalizing MPI before dli_destroy), reinit (2 ranks, a second context after
# dli_destroy, reduced too), badinit (2 ranks, rank 1's dli_init fails and must return at once)
set -u
prog=$1 exact_dir=$2 comm_dir=$3
shift 3
cases=${*:-1 2 3 4 fault die hostinit hostfinal reinit badinit}
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
[ -f "$comm_dir/mpi.so" ] || { echo "SKIP: the mpi module was not built"; exit 77; }
py=$("$DLI_PYENV" numpy) || { echo "FAIL: no Python environment with numpy (tests/pyenv.sh)"; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DLINSPECT_PLUGIN_PATH="$DLINSPECT_PLUGIN_PATH:$exact_dir:$comm_dir"
export DLINSPECT_COMMUNICATOR=mpi DLINSPECT_LOG_LEVEL=debug
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Sanitizer builds: Open MPI's own allocations are not ours to report.
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/lsan-mpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# Whole stacks (Open MPI's libraries have no frame pointers), so that the suppressions match.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
# Containers: no ptrace-based single copy, no other hosts.
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
status=0
for c in $cases; do
	np=$c mode=normal tp=1
	[ "$c" = fault ] && np=4 mode=fault
	[ "$c" = die ] && np=4 mode=fault
	[ "$c" = hostinit ] && np=2
	[ "$c" = hostfinal ] && np=2
	[ "$c" = reinit ] && np=2
	[ "$c" = badinit ] && np=2
	[ "$np" = 4 ] && tp=2
	dir=$work/$c
	mkdir -p "$dir"
	cat >"$dir/config.yaml" <<YAML
loggers: {exact: {}, file: {}}
fc1_stats:
  enabled: true
  layers: {layer_name_regex_pattern: '^fc1$'}
  transformer_engine:
    LogTensorStats:
      enabled: true
      tensors: [activation, gradient, weight]
      stats: [min, max, mean, std, var, l1_norm, l2_norm, cur_amax, dynamic_range, nan_count, inf_count, 'zero%']
      freq: 1
      tensor_parallel_size: $tp
    LogFp8TensorStats:
      enabled: true
      tensors: [activation, gradient]
      stats: [fp8_current_scaling_underflows%, fp8_current_scaling_overflows%, fp8_current_scaling_scale_inv_min, fp8_current_scaling_scale_inv_max, fp8_current_scaling_mse, fp8_current_scaling_cos_sim, fp8_current_scaling_sqnr_db]
      freq: 1
fc2_stats:
  enabled: true
  layers: {layer_name_regex_pattern: '^fc2$'}
  transformer_engine:
    LogTensorStats:
      enabled: true
      tensors: [activation, gradient, weight]
      stats: [min, max, mean, std, var, l1_norm, l2_norm, cur_amax, dynamic_range, nan_count, inf_count, 'zero%']
      freq: 1
      tensor_parallel_size: $tp
      weight_tensor_tp_group_reduce: false
YAML
	extra=
	[ "$mode" = fault ] && extra=$c
	# Open MPI aborts the whole job when a rank dies, unless told to let the others go on.
	recovery=
	[ "$c" = die ] && recovery=--enable-recovery
	[ "$c" = hostinit ] && extra=hostinit
	[ "$c" = hostfinal ] && extra=hostfinal
	[ "$c" = reinit ] && extra=reinit
	[ "$c" = badinit ] && extra=badinit
	# A fault run's collectives wait 3 s for the rank that left; the others have no reason to.
	timeout=60
	[ "$mode" = fault ] && timeout=3
	echo "== case $c: $np rank(s), $mode"
	DLINSPECT_COMM_TIMEOUT=$timeout timeout 120 mpirun --oversubscribe $recovery -np "$np" \
		"$prog" "$dir/config.yaml" "$dir" $extra >"$dir/mpirun.log" 2>&1
	rc=$?
	# A rank that left or died makes the others skip MPI_Finalize, and mpirun may then exit
	# nonzero; the logs are what is checked, and that nothing hung.
	if [ $rc != 0 ] && [ "$mode" != fault ]; then
		echo "mpirun failed:"; cat "$dir/mpirun.log"; status=1; continue
	fi
	[ $rc = 124 ] && { echo "mpirun hung (killed after 120 s)"; cat "$dir/mpirun.log"; status=1; continue; }
	# badinit logs no statistics: that every rank exited 0 is the test.
	[ "$c" = badinit ] && { echo "rank 1's failed dli_init returned at once"; continue; }
	if [ "$c" = reinit ]; then
		for r in 0 1; do
			grep -q "statistics of iteration 2 reduced across group \[0, 1\]" \
				"$dir/again/exact-rank$r.txt" ||
				{ echo "rank $r: the second context did not reduce:"; cat "$dir/mpirun.log"; status=1; }
		done
		[ "$(grep '^S' "$dir/again/exact-rank0.txt")" = "$(grep '^S' "$dir/again/exact-rank1.txt")" ] ||
			{ echo "the second context's values differ between the ranks"; status=1; }
	fi
	# The single-process computation over the concatenated tensors, for the 1e-12 comparison.
	mkdir -p "$dir/pooled"
	if ! env -u DLINSPECT_COMMUNICATOR "$prog" "$dir/config.yaml" "$dir/pooled" pooled "$np" \
		>"$dir/pooled.log" 2>&1; then
		echo "pooled run failed:"; cat "$dir/pooled.log"; status=1; continue
	fi
	"$py" "$here/check.py" "$dir" "$np" "$tp" "$mode" || { cat "$dir/mpirun.log"; status=1; }
done
exit $status
