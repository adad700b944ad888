#!/bin/sh
# dlinspect-train under mpirun (docs/distributed.md, "The trainer under mpirun"): at iteration 0,
# before any update, the statistics of every tensor reduced across the ranks of a data-parallel
# run on 2, 3 and 4 ranks and of tensor-parallel runs are compared with single-process runs on the
# same global batch (trainer_check.py says which comparison holds to what, and why); the loss and
# the model are compared too. The batch (67 rows) splits unevenly on 2, 3 and 4 ranks.
# argv: <dlinspect-train> <dir of exact_logger.so> <dir of mpi.so> [case...]; cases: dp2 dp3 dp4
# tp2 tp2dp2. Skips (77) without mpirun or the mpi module.
set -u
prog=$1 exact_dir=$2 comm_dir=$3
shift 3
cases=${*:-dp2 dp3 dp4 tp2 tp2dp2}
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (Debian: openmpi-bin)"; exit 77; }
[ -f "$comm_dir/mpi.so" ] || { echo "SKIP: the mpi module was not built"; exit 77; }
py=$("$DLI_PYENV" numpy) || { echo "FAIL: no Python environment with numpy (tests/pyenv.sh)"; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DLINSPECT_PLUGIN_PATH="$DLINSPECT_PLUGIN_PATH:$exact_dir:$comm_dir"
export DLINSPECT_LOG_LEVEL=debug OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LSAN_OPTIONS="suppressions=$here/lsan-mpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
model="--width 32 --layers 2 --batch 67 --inputs 8 --outputs 16 --steps 2 --seed 3 --quiet"

config() { # <file> <tensor_parallel_size> <weight_tensor_tp_group_reduce>
	cat >"$1" <<YAML
loggers: {exact: {}}
every_linear:
  enabled: true
  layers: {layer_name_regex_pattern: '.'}
  transformer_engine:
    LogTensorStats:
      enabled: true
      tensors: [activation, gradient, weight, output, wgrad, dgrad]
      stats: [min, max, mean, std, var, l1_norm, l2_norm, cur_amax, dynamic_range, nan_count, inf_count, 'zero%']
      freq: 1
      tensor_parallel_size: $2
      weight_tensor_tp_group_reduce: $3
    LogFp8TensorStats:
      enabled: true
      tensors: [activation, gradient, weight]
      stats: ['underflows%', 'overflows%', scale_inv_min, scale_inv_max]
      freq: 1
YAML
}

# <dir> <precision> [trainer options...]: one single-process run (no communicator).
single() {
	d=$1 p=$2
	shift 2
	mkdir -p "$d"
	config "$d/config.yaml" 1 true
	DLINSPECT_COMMUNICATOR= "$prog" $model --precision "$p" --config "$d/config.yaml" \
		--log-dir "$d" "$@" >"$d/out.txt" 2>&1 || { echo "single run $d failed:"; cat "$d/out.txt"; return 1; }
}

# <dir> <ranks> <precision> <tp> <weight reduce> [trainer options...]: one run under mpirun.
ranks() {
	d=$1 np=$2 p=$3 tp=$4 wr=$5
	shift 5
	mkdir -p "$d"
	config "$d/config.yaml" "$tp" "$wr"
	DLINSPECT_COMM_TIMEOUT=60 timeout 300 mpirun --oversubscribe -np "$np" "$prog" $model \
		--precision "$p" --config "$d/config.yaml" --log-dir "$d" "$@" >"$d/out.txt" 2>&1 ||
		{ echo "mpirun -np $np in $d failed:"; cat "$d/out.txt"; return 1; }
}

status=0
single "$work/fp8-1" fp8 || exit 1
single "$work/fp32-1" fp32 || exit 1
for c in $cases; do
	echo "== case $c"
	case $c in
	dp[234])
		n=${c#dp}
		single "$work/fp8-mb$n" fp8 --microbatches "$n" &&
			ranks "$work/$c" "$n" fp8 1 true --parallel data &&
			"$py" "$here/trainer_check.py" dp "$n" "$work/$c" "$work/fp8-1" "$work/fp8-mb$n" ||
			status=1 ;;
	tp2)
		# fp32: a row-parallel GEMM's output is a sum of the ranks' partial products, rounded
		# apart from one GEMM's; FP8 casts downstream would turn that into whole FP8 steps.
		ranks "$work/tp2" 2 fp32 2 true --parallel tensor &&
			ranks "$work/tp2-off" 2 fp32 2 false --parallel tensor &&
			"$py" "$here/trainer_check.py" tp 2 "$work/tp2" "$work/fp32-1" "$work/tp2-off" ||
			status=1 ;;
	tp2dp2)
		single "$work/fp32-mb2" fp32 --microbatches 2 &&
			ranks "$work/tp2dp2" 4 fp32 2 true --parallel tensor --tp 2 &&
			"$py" "$here/trainer_check.py" tp2dp2 4 "$work/tp2dp2" "$work/fp32-1" "$work/fp32-mb2" ||
			status=1 ;;
	*) echo "unknown case $c"; status=1 ;;
	esac
done
exit $status
