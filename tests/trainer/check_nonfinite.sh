#!/bin/sh
# dlinspect-train --inject-nonfinite with configs/detect_nonfinite.yaml: DetectNonFinite's report
# names the injected layer's output at the injected step as the first NaN/Inf, its frame ends with
# that call, the run stops after that step (dli_step's -ECANCELED), and a name the model lacks is
# refused.
# usage: check_nonfinite.sh TRAINER SOURCE_ROOT WORK_DIR
set -eu
train=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
small="--width 16 --layers 3 --batch 8 --quiet --steps 12"
msg=nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log

for kind in nan inf; do
	layer=model.layers.1.mlp.fc2 step=7 out=$work/$kind
	rc=0
	"$train" $small --config "$src/configs/detect_nonfinite.yaml" --log-dir "$out" \
		--inject-nonfinite "$step:$layer:$kind" >"$out.stdout" 2>"$out.stderr" || rc=$?
	[ $rc -eq 1 ] || fail "$kind: exit status $rc, expected 1 (stopped)"
	grep -q "stopping after step $step: dli_step: a feature asked the host to stop" "$out.stderr" ||
		fail "$kind: no stop message: $(cat "$out.stderr")"
	[ "$kind" = nan ] && counts="1 NaN and 0 inf" || counts="0 NaN and 1 inf"
	report=$(grep "ERROR - DetectNonFinite: first NaN/Inf" "$out/$msg") || fail "$kind: no report"
	echo "$report" | grep -q "at iteration $step, call [0-9]*: layer '$layer', tensor 'output' holds $counts of 128 elements" ||
		fail "$kind: the report does not name $layer's output at $step: $report"
	# The terminal got the report line once.
	[ "$(grep -c 'DetectNonFinite: first NaN/Inf' "$out.stderr")" = 1 ] || fail "$kind: stderr"
	# The frame: 21 calls, the last one the reported call; none before it holds NaN/Inf.
	[ "$(grep -c 'DetectNonFinite: frame ' "$out/$msg")" = 21 ] || fail "$kind: frame size"
	grep 'DetectNonFinite: frame 21/21 ' "$out/$msg" | grep -q "$layer output: .*, NaN ${counts%% *}" ||
		fail "$kind: the frame's last call is not the reported one"
	if grep 'DetectNonFinite: frame ' "$out/$msg" | grep -v 'frame 21/21' | grep -qv 'NaN 0, inf 0'; then
		fail "$kind: a call before the first bad one holds NaN/Inf"
	fi
	# Steps 0..7 ran, then the run stopped.
	[ "$(wc -l <"$out/loss.csv")" = $((step + 2)) ] || fail "$kind: loss.csv has $(wc -l <"$out/loss.csv") lines"
	echo "$kind: $report" | sed 's/^\([a-z]*\): .* - ERROR - /\1: /'
done

rc=0
"$train" $small --inject-nonfinite 3:model.layers.9.mlp.fc1 --log-dir "$work/bad" \
	2>"$work/bad.stderr" >/dev/null || rc=$?
[ $rc -ne 0 ] || fail "an unknown layer was accepted"
grep -q "has no Linear named 'model.layers.9.mlp.fc1' (its Linears: model.input_layer" "$work/bad.stderr" ||
	fail "unknown layer: $(cat "$work/bad.stderr")"
rc=0
"$train" $small --inject-nonfinite x:model.input_layer --log-dir "$work/bad" 2>"$work/bad.stderr" \
	>/dev/null || rc=$?
[ $rc -eq 2 ] && grep -q "bad value 'x:model.input_layer' for --inject-nonfinite" "$work/bad.stderr" ||
	fail "a bad step was accepted: $(cat "$work/bad.stderr")"
echo "ok"
