#!/usr/bin/env bash
# Installs the dependencies, builds dlinspect and runs the debugging run of docs/trainer.md: an FP8
# training run whose loss ends twice as high as fp32's, with a statistics config that shows why.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
logs="$PWD/dlinspect_train_logs"
echo "== FP8 training run with dlinspect statistics (configs/trainer_debug.yaml)"
# The GEMMs are small: one BLAS thread is as fast, and steadier on a shared machine.
OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} meson devenv -C build -w . \
	dlinspect-train --precision fp8 --bad-step 100 --config configs/trainer_debug.yaml \
	--log-dir "$logs" "$@"

stats="$logs/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
[ -f "$stats" ] || exit 0
echo
echo "== what the statistics say: tensors whose FP8 cast zeroes more than 1% of the values"
# The last logged iteration; per tensor, the trainer's (delayed scaling) underflows% next to what
# current scaling would give, and the scale_inv the trainer used.
awk -F'\t+' '
	{ split($1, a, " - "); name = a[3]; sub(/ +$/, "", name)
	  it = $2; sub(/.*=0*/, "", it); it += 0; v = $3; sub(/.*=/, "", v)
	  val[it, name] = v; if (it > last) last = it }
	END {
	  printf "  at iteration %d:\n", last
	  for (k in val) {
	    split(k, p, SUBSEP); if (p[1] != last || p[2] !~ /[^g]_underflows%$/) continue
	    t = p[2]; sub(/_underflows%$/, "", t)
	    if (val[k] > 1)
	      printf "  %-36s underflows %6.2f%%  (current scaling: %.2f%%)  scale_inv %.3g\n", t,
	        val[k], val[last, t "_fp8_current_scaling_underflows%"], val[last, t "_scale_inv_max"]
	  }
	}' "$stats"
echo
echo "Next (docs/trainer.md): the same run with the fix, and the fp32 baseline:"
echo "  meson devenv -C build -w . dlinspect-train --precision fp8 --bad-step 100 --config configs/trainer_fix.yaml --log-dir /tmp/fix"
echo "  meson devenv -C build -w . dlinspect-train --precision fp32 --bad-step 100 --log-dir /tmp/fp32"
