#!/bin/sh
# Runs dlinspect-demo and checks what it prints against the config and the file system.
#   check_demo.sh table   DEMO SOURCE_ROOT WORKDIR  the FP8 table of configs/demo.yaml, the call
#                                                   counts, and the log-file claims
#   check_demo.sh configs DEMO SOURCE_ROOT WORKDIR  every configs/*.yaml loads and runs
set -u
mode=$1 demo=$2 src=$3 work=$4
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

rm -rf "$work" && mkdir -p "$work" || exit 99

if [ "$mode" = configs ]; then
	n=0
	for c in "$src"/configs/*.yaml; do
		n=$((n + 1))
		"$demo" --config "$c" --log-dir "$work/logs" --steps 2 --quiet >"$work/out" 2>&1 ||
			{ fail "$c does not load:"; cat "$work/out"; }
	done
	[ "$n" -gt 0 ] || fail "no config found in $src/configs"
	[ "$fails" -eq 0 ] && echo "ok: $n configs load"
	exit $((fails != 0))
fi

logs=$work/logs
msg_log=$logs/nvdlfw_inspect_logs/nvdlfw_inspect_globalrank-0.log
stat_log=$logs/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log
run() { "$demo" --config "$src/configs/demo.yaml" --log-dir "$logs" --steps 3 "$@"; }

# What configs/demo.yaml says for the default 4 layers: the qkv fprop of layers 0 and 3 and every
# GEMM of layer 2's fc2 in high precision, everything else FP8. The FP8 answers never change; the
# MLP Linears' statistics (every 5 steps) make their next query 5 once step 1 has asked.
for i in 0 1 2 3; do
	for lin in self_attention.qkv self_attention.proj mlp.fc1 mlp.fc2; do
		f=FP8 d=FP8 w=FP8 next=never
		case "$lin" in mlp.*) next=5 ;; esac
		case "$i.$lin" in
		0.self_attention.qkv | 3.self_attention.qkv) f="high precision" ;;
		2.mlp.fc2) f="high precision" d="high precision" w="high precision" ;;
		esac
		echo "model.layers.$i.$lin fprop: $f dgrad: $d wgrad: $w next query: $next"
	done
done >"$work/expected"

run >"$work/out" 2>"$work/err"
rc=$?
[ "$rc" -eq 0 ] || { fail "demo exited with $rc"; cat "$work/err"; }
grep '^  model\.layers\.' "$work/out" | tr -s ' ' | sed 's/^ //' >"$work/table"
diff -u "$work/expected" "$work/table" >"$work/diff" ||
	{ fail "FP8 table differs:"; cat "$work/diff"; }

# Caching: every query at step 0 (16 Linear x 18) plus the 16 inspect_tensor of the statistics
# (8 MLP Linears x 2 tensors); at step 1 the MLP Linears ask again (their statistics were on at
# step 0, so the answer may have changed: 8 x 18) and learn that the next change is at step 5;
# step 2 makes no debug call. Everything not asked is counted as skipped.
grep -qx 'step 0: 304 debug calls' "$work/out" || fail "step 0 should make 304 debug calls"
grep -qx 'step 1: 144 debug calls' "$work/out" || fail "step 1 should make 144 queries"
grep -qx 'step 2: 0 debug calls' "$work/out" || fail "step 2 should make no debug call"
made='^Debug calls: 448 made (432 \*_enabled queries, 16 inspect_tensor, 0 modify_tensor)'
grep -q "$made" "$work/out" && grep -q '^ *432 queries skipped thanks to' "$work/out" ||
	fail "wrong call counts"

# The log claims must match the files. The demo writes one message (dli_log) and, through
# LogTensorStats, the statistics of step 0 (the only selected step of 0..2).
claim() { sed -n "s|^  $1: *$2/ *(\(.*\))\$|\1|p" "$work/out"; }
check_claims() { # expected message claim, expected statistics claim
	m=$(claim messages "$logs/nvdlfw_inspect_logs")
	s=$(claim statistics "$logs/nvdlfw_inspect_statistics_logs")
	[ "$m" = "$1" ] || fail "messages: expected '$1', printed '$m'"
	[ "$s" = "$2" ] || fail "statistics: expected '$2', printed '$s'"
}
check_claims "exists, written by this run" "exists, written by this run"
# configs/demo.yaml lists the tensorboard logger: the list of logs names its directory.
grep -qF "  tensorboard: $logs/tensorboard/  (open it with: tensorboard --logdir $logs/tensorboard)" "$work/out" ||
	fail "the list of logs leaves out tensorboard/"
[ -s "$msg_log" ] || fail "$msg_log claimed written but missing or empty"
grep -q 'INFO - dlinspect-demo: 16 Linear layers, 3 steps' "$msg_log" 2>/dev/null ||
	fail "the demo's message is not in $msg_log"
# Statistics lines at exactly the steps freq: 5 selects, each with one line per (MLP Linear,
# tensor, stat): 8 x 2 x 5. With 12 steps: 0, 5 and 10.
stat_steps() { sed -n 's/.* iteration=\([0-9]*\) .*/\1/p' "$stat_log" | uniq -c | tr -s ' ' | tr '\n' ';'; }
[ "$(stat_steps)" = " 80 000000;" ] || fail "3 steps: statistics at '$(stat_steps)', expected 80 at step 0"
rm -rf "$logs"
run --steps 12 --quiet >"$work/out" 2>"$work/err" || { fail "12 steps failed"; cat "$work/err"; }
[ "$(stat_steps)" = " 80 000000; 80 000005; 80 000010;" ] ||
	fail "12 steps: statistics at '$(stat_steps)', expected 80 each at steps 0, 5, 10"
names=$(sed 's/.* - INFO - \([^ ]*\) .*/\1/' "$stat_log" | sort -u)
want=$(for i in 0 1 2 3; do for f in fc1 fc2; do for t in activation gradient; do
	for s in min max std cur_amax dynamic_range; do echo "model.layers.$i.mlp.${f}_${t}_$s"; done
	done; done; done | sort)
[ "$names" = "$want" ] || fail "statistics names differ from {layer}_{tensor}_{stat} of demo.yaml"
grep -v -q 'value=[-0-9.e+]*$' "$stat_log" && fail "a statistics value is not a finite number"

# A statistics log left by an earlier run must not be passed off as this run's: a config without
# statistics leaves it as it was when overwriting is off (NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE=0),
# and by default (nvdlfw_inspect's: overwrite) it is emptied at start.
rm -rf "$logs"
mkdir -p "$(dirname "$stat_log")" && echo "old line" >"$stat_log" && touch -d '1 minute ago' "$stat_log"
NVDLFW_INSPECT_ENABLE_LOG_OVERWRITE=0 "$demo" --config "$src/configs/disable_fp8_gemm.yaml" \
	--log-dir "$logs" --steps 3 >"$work/out" 2>"$work/err"
check_claims "exists, written by this run" "exists, but left by an earlier run"
[ "$(cat "$stat_log")" = "old line" ] || fail "overwrite off: the earlier run's line was not kept"
"$demo" --config "$src/configs/disable_fp8_gemm.yaml" --log-dir "$logs" --steps 3 >"$work/out" 2>"$work/err"
check_claims "exists, written by this run" "exists, emptied at start: an earlier run's lines were removed"
[ -s "$stat_log" ] && fail "default (overwrite): the earlier run's statistics log was not emptied"

# Running twice in one log dir (scripts/demo.sh again): each statistic once, as nvdlfw_inspect's
# truncation at initialize gives; the message log holds only the second run's messages.
rm -rf "$logs"
run --quiet && run --quiet || fail "the repeated runs failed"
[ "$(stat_steps)" = " 80 000000;" ] || fail "second run: statistics at '$(stat_steps)', expected 80 at step 0 once"
[ "$(grep -c 'dlinspect-demo: 16 Linear layers' "$msg_log")" = 1 ] || fail "second run: the message log kept the first run's lines"

# nvdlfw_inspect's NVDLFW_INSPECT_LOG_LEVEL: ERROR drops the INFO messages; DLINSPECT_LOG_LEVEL wins.
rm -rf "$logs"
NVDLFW_INSPECT_LOG_LEVEL=error run --quiet || fail "NVDLFW_INSPECT_LOG_LEVEL=error: the run failed"
grep -q ' - INFO - ' "$msg_log" 2>/dev/null && fail "NVDLFW_INSPECT_LOG_LEVEL=error: INFO messages logged"
rm -rf "$logs"
NVDLFW_INSPECT_LOG_LEVEL=error DLINSPECT_LOG_LEVEL=info run --quiet || fail "DLINSPECT_LOG_LEVEL=info: the run failed"
grep -q 'INFO - dlinspect-demo: 16 Linear layers' "$msg_log" 2>/dev/null || fail "DLINSPECT_LOG_LEVEL=info should win over NVDLFW_INSPECT_LOG_LEVEL"
rm -rf "$logs"
NVDLFW_INSPECT_LOG_LEVEL=loud run --quiet 2>"$work/err" || fail "NVDLFW_INSPECT_LOG_LEVEL=loud: the run failed (the peer uses INFO)"
grep -q "NVDLFW_INSPECT_LOG_LEVEL='loud' is no logging level" "$work/err" || fail "an unknown NVDLFW_INSPECT_LOG_LEVEL is not reported on stderr"

# The Megatron flow: NV_DEBUG_TOOL_CONFIG counts while NV_DEBUG_TOOL_ENABLED=1; DLINSPECT_CONFIG wins.
nv() { "$demo" --log-dir "$logs" --steps 3 --quiet; }
rm -rf "$logs"
NV_DEBUG_TOOL_ENABLED=1 NV_DEBUG_TOOL_CONFIG="$src/configs/demo.yaml" nv 2>"$work/err" || fail "NV_DEBUG_TOOL_CONFIG run failed"
[ "$(stat_steps)" = " 80 000000;" ] || fail "NV_DEBUG_TOOL_CONFIG with NV_DEBUG_TOOL_ENABLED=1 is not used"
rm -rf "$logs"
NV_DEBUG_TOOL_CONFIG="$src/configs/demo.yaml" nv 2>"$work/err" || fail "NV_DEBUG_TOOL_CONFIG alone: the run failed"
[ -e "$stat_log" ] && fail "NV_DEBUG_TOOL_CONFIG without NV_DEBUG_TOOL_ENABLED=1 should leave debugging off"
grep -q 'NV_DEBUG_TOOL_CONFIG is set but NV_DEBUG_TOOL_ENABLED is not 1' "$work/err" || fail "NV_DEBUG_TOOL_CONFIG alone is not reported"
rm -rf "$logs"
NV_DEBUG_TOOL_ENABLED=1 NV_DEBUG_TOOL_CONFIG=/nonexistent.yaml DLINSPECT_CONFIG="$src/configs/demo.yaml" nv ||
	fail "DLINSPECT_CONFIG should win over NV_DEBUG_TOOL_CONFIG"
rm -rf "$logs"
NV_DEBUG_TOOL_ENABLED=0 NV_DEBUG_TOOL_CONFIG="$src/configs/demo.yaml" nv 2>"$work/err" || fail "NV_DEBUG_TOOL_ENABLED=0: the run failed"
[ -e "$stat_log" ] && fail "NV_DEBUG_TOOL_ENABLED=0 should leave debugging off"
[ -s "$work/err" ] && fail "NV_DEBUG_TOOL_ENABLED=0 is the user's choice, yet stderr says: $(cat "$work/err")"
NV_DEBUG_TOOL_ENABLED=maybe nv 2>"$work/err" && fail "NV_DEBUG_TOOL_ENABLED=maybe should fail"
grep -q "NV_DEBUG_TOOL_ENABLED='maybe': expected 1 or 0" "$work/err" || fail "NV_DEBUG_TOOL_ENABLED=maybe: wrong message: $(cat "$work/err")"

# --quiet prints nothing on success; a bad option is a usage error (exit 2).
[ -z "$(run --quiet)" ] || fail "--quiet printed something"
"$demo" --steps -1 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--steps -1 should exit 2"

[ "$fails" -eq 0 ] && echo "ok: FP8 table, call counts, statistics steps and log claims match configs/demo.yaml"
exit $((fails != 0))
