#!/bin/sh
# `dlinspect plugins --explain DetectNonFinite` shows that feature alone with its keys and defaults;
# a name nothing provides fails with a message. usage: check_explain.sh DLINSPECT
set -u
tool=$1
fail() { echo "FAIL: $*"; exit 1; }
out=$("$tool" plugins --explain DetectNonFinite 2>&1) || fail "exit status $?: $out"
for want in "feature DetectNonFinite: Reports the first NaN/Inf" "frame_size       int                  default 21" \
	"on_detect        string               default stop" "one of: stop continue" \
	"trace_batch_nums list of strings      default (none)" "abort_after_batch_num int                  default -1" \
	"tensors          list of strings      required"; do
	printf '%s\n' "$out" | grep -qF "$want" || fail "lacks '$want': $out"
done
printf '%s\n' "$out" | grep -q "feature LogTensorStats" && fail "shows other features: $out"
out=$("$tool" plugins --explain NoSuchFeature 2>&1) && fail "an unknown name succeeded"
printf '%s\n' "$out" | grep -qF "no feature or logger called 'NoSuchFeature'" || fail "$out"
echo ok
