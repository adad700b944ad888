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
# GEMM of layer 2's fc2 in high precision, everything else FP8, and no answer ever changes.
for i in 0 1 2 3; do
	for lin in self_attention.qkv self_attention.proj mlp.fc1 mlp.fc2; do
		f=FP8 d=FP8 w=FP8
		case "$i.$lin" in
		0.self_attention.qkv | 3.self_attention.qkv) f="high precision" ;;
		2.mlp.fc2) f="high precision" d="high precision" w="high precision" ;;
		esac
		echo "model.layers.$i.$lin fprop: $f dgrad: $d wgrad: $w next query: never"
	done
done >"$work/expected"

run >"$work/out" 2>"$work/err"
rc=$?
[ "$rc" -eq 0 ] || { fail "demo exited with $rc"; cat "$work/err"; }
grep '^  model\.layers\.' "$work/out" | tr -s ' ' | sed 's/^ //' >"$work/table"
diff -u "$work/expected" "$work/table" >"$work/diff" ||
	{ fail "FP8 table differs:"; cat "$work/diff"; }

# Caching: every query at step 0 (16 Linear x 18), none after; the rest counted as skipped.
grep -qx 'step 0: 288 debug calls' "$work/out" || fail "step 0 should make 288 queries"
grep -qx 'step 1: 0 debug calls' "$work/out" || fail "step 1 should make no debug call"
made='^Debug calls: 288 made (288 \*_enabled queries, 0 inspect_tensor, 0 modify_tensor)'
grep -q "$made" "$work/out" && grep -q '^ *576 queries skipped thanks to' "$work/out" ||
	fail "wrong call counts"

# The log claims must match the files. The demo writes one message (dli_log); nothing in
# demo.yaml writes statistics, so that log must not exist.
claim() { sed -n "s|^  $1: *$2/ *(\(.*\))\$|\1|p" "$work/out"; }
check_claims() { # expected message claim, expected statistics claim
	m=$(claim messages "$logs/nvdlfw_inspect_logs")
	s=$(claim statistics "$logs/nvdlfw_inspect_statistics_logs")
	[ "$m" = "$1" ] || fail "messages: expected '$1', printed '$m'"
	[ "$s" = "$2" ] || fail "statistics: expected '$2', printed '$s'"
}
check_claims "exists, written by this run" "does not exist"
[ -s "$msg_log" ] || fail "$msg_log claimed written but missing or empty"
grep -q 'INFO - dlinspect-demo: 16 Linear layers, 3 steps' "$msg_log" 2>/dev/null ||
	fail "the demo's message is not in $msg_log"
[ ! -e "$stat_log" ] || fail "$stat_log claimed absent but exists"

# A statistics log left by an earlier run must not be passed off as this run's.
mkdir -p "$(dirname "$stat_log")" && echo "old line" >"$stat_log"
run >"$work/out" 2>"$work/err"
check_claims "exists, written by this run" "exists, but left by an earlier run"

# --quiet prints nothing on success; a bad option is a usage error (exit 2).
[ -z "$(run --quiet)" ] || fail "--quiet printed something"
"$demo" --steps -1 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--steps -1 should exit 2"

[ "$fails" -eq 0 ] && echo "ok: FP8 table, call counts and log claims match configs/demo.yaml"
exit $((fails != 0))
