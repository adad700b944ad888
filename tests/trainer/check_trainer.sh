#!/bin/sh
# Checks of dlinspect-train that run the program itself:
#   skipping     the *_enabled queries happen exactly at the iterations the next-iteration answers
#                allow (computed here from the schedule rule of docs/config.md)
#   converges    fp32 training gets near the task's loss floor
#   story        the three configs of docs/trainer.md: the statistics single out the poisoned
#                tensor, and both fixes run
#   recipes      --recipe: a short story run with each recipe; delayed scaling ends worse than
#                the others, MXFP8's row-wise copy of the corrupted batch loses nothing where
#                current scaling loses > 5%, and a block-scaled run gets no warning from
#                configs/trainer_recipes.yaml; bad --recipe uses are refused
# usage: check_trainer.sh MODE TRAINER SOURCE_ROOT WORK_DIR
set -eu
mode=$1 train=$2 src=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
small="--width 16 --layers 2 --batch 8 --quiet"

case $mode in
skipping)
	freq=5 steps=20
	cat >"$work/cfg.yaml" <<YAML
one_layer:
  enabled: true
  layers: {layer_name_regex_pattern: 'layers\.1\.mlp\.fc1\$'}
  transformer_engine:
    LogTensorStats: {enabled: true, tensors: [activation], stats: [max], freq: $freq}
YAML
	"$train" $small --steps $steps --config "$work/cfg.yaml" --log-dir "$work/logs" \
		--trace-queries "$work/trace" >/dev/null
	# The schedule: selected at it % freq == 0. Idle, the answer may change at the next selected
	# step; active, at the step right after. The host asks at 0 and then at each `next`.
	want=$(awk -v f=$freq -v n=$steps 'BEGIN {
		for (it = 0; it < n; ) { printf "%d ", it; it = it % f == 0 ? it + 1 : (int(it / f) + 1) * f } }')
	got=$(awk '$2 == "model.layers.1.mlp.fc1" { printf "%d ", $1 }' "$work/trace")
	echo "selected layer queried at: $got (schedule says: $want)"
	[ "$got" = "$want" ] || fail "model.layers.1.mlp.fc1 queried at '$got', expected '$want'"
	[ "$want" = "0 1 5 6 10 11 15 16 " ] || fail "the schedule rule changed: '$want'"
	# A layer no section selects answers "never": asked once, at iteration 0.
	for l in model.input_layer model.layers.0.mlp.fc1 model.layers.1.mlp.fc2 model.output_layer; do
		got=$(awk -v l=$l '$2 == l { printf "%d ", $1 }' "$work/trace")
		[ "$got" = "0 " ] || fail "$l queried at '$got', expected only '0 '"
	done
	echo "ok: queries only where the next-iteration answers say"
	;;
converges)
	# A smaller task and model than the story's, so that it stays fast under ASan; seeds 1-3 end
	# at 1.4-1.6 times the floor.
	out=$("$train" --precision fp32 --no-dlinspect --inputs 4 --width 64 --batch 128 --lr 0.004 \
		--steps 400 --quiet --log-dir "$work")
	echo "$out"
	ratio=$(echo "$out" | sed -n 's/.*ratio \([0-9.]*\).*/\1/p')
	awk -v r="$ratio" 'BEGIN { exit !(r != "" && r < 2.0) }' ||
		fail "fp32 loss is $ratio times the floor after 400 steps (want < 2)"
	;;
story)
	args="--width 32 --layers 2 --batch 64 --steps 60 --bad-step 10 --quiet"
	"$train" $args --config "$src/configs/trainer_debug.yaml" --log-dir "$work/debug"
	log="$work/debug/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
	value() { awk -v n="$1" '$6 == n && $0 ~ /iteration=000050/ { sub(/.*value=/, ""); print }' "$log"; }
	poisoned=$(value model.input_layer_activation_underflows%)
	current=$(value model.input_layer_activation_fp8_current_scaling_underflows%)
	other=$(value model.layers.0.mlp.fc1_activation_underflows%)
	echo "step 50: input_layer activation underflows% $poisoned (current scaling: $current), layers.0.mlp.fc1's: $other"
	awk -v p="$poisoned" -v c="$current" -v o="$other" \
		'BEGIN { exit !(p > 5 && c + 0 < 1 && o + 0 < 1) }' ||
		fail "the statistics do not single out model.input_layer's activation"
	for fix in trainer_fix trainer_fix_disable; do
		"$train" $args --config "$src/configs/$fix.yaml" --log-dir "$work/$fix" ||
			fail "$fix.yaml: the trainer failed"
	done
	# scripts/demo.sh's list of logs names the TensorBoard directory the README tells you to open.
	out=$("$train" --width 16 --layers 2 --batch 8 --steps 2 --config "$src/configs/trainer_debug.yaml" \
		--log-dir "$work/list")
	echo "$out" | grep -qF "$work/list/tensorboard/ (TensorBoard: tensorboard --logdir $work/list/tensorboard)" ||
		fail "the list of logs leaves out tensorboard/: $out"
	echo "ok: the debug config points at model.input_layer's activation; both fixes run"
	;;
recipes)
	args="--width 32 --layers 2 --batch 64 --steps 100 --bad-step 50 --quiet"
	for r in delayed current mxfp8 block; do
		out=$("$train" $args --recipe $r --config "$src/configs/trainer_recipes.yaml" \
			--log-dir "$work/$r") || fail "--recipe $r: the trainer failed"
		echo "--recipe $r: $out"
		loss=$(echo "$out" | sed -n 's/.*mean of the last [0-9]* steps \([0-9.]*\).*/\1/p')
		[ -n "$loss" ] || fail "--recipe $r: no loss summary"
		eval "loss_$r=$loss"
		if grep -q WARNING "$work/$r/nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log"; then
			fail "--recipe $r: configs/trainer_recipes.yaml gave a warning"
		fi
	done
	for r in current mxfp8 block; do
		eval "other=\$loss_$r"
		awk -v d="$loss_delayed" -v o="$other" 'BEGIN { exit !(d > 1.05 * o) }' ||
			fail "delayed scaling ($loss_delayed) does not end worse than --recipe $r ($other)"
	done
	log="$work/mxfp8/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
	value() { awk -v n="$1" '$6 == n && $0 ~ /iteration=000050/ { sub(/.*value=/, ""); print }' "$log"; }
	row=$(value model.input_layer_activation_mxfp8_underflows%)
	current=$(value model.input_layer_activation_fp8_current_scaling_underflows%)
	echo "step 50 (corrupted): input_layer activation mxfp8_underflows% $row, current scaling $current"
	awk -v r="$row" -v c="$current" 'BEGIN { exit !(r != "" && r + 0 == 0 && c > 5) }' ||
		fail "MXFP8's row-wise blocks do not confine the corrupted record"
	"$train" $args --recipe nvfp5 --log-dir "$work/bad" >/dev/null 2>&1 && fail "--recipe nvfp5 accepted"
	"$train" $args --precision bf16 --recipe mxfp8 --log-dir "$work/bad" >/dev/null 2>&1 &&
		fail "--recipe mxfp8 accepted with --precision bf16"
	echo "ok: only delayed scaling is hurt; MXFP8 confines the outlier to its blocks"
	;;
*)
	fail "unknown mode $mode"
	;;
esac
