#!/usr/bin/env bash
# The `dlinspect` tool as a user runs it: check accepts every shipped config and rejects broken
# ones with path:line:col, check --layer explains, plugins --explain lists what ltdl loaded from the
# build tree. $1: the dlinspect binary, $2: source root.
set -u
tool=$1 src=$2
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

for f in "$src"/configs/*.yaml; do
	if out=$("$tool" check "$f" 2>&1); then ok; else bad "check rejects shipped config $f: $out"; fi
done

for f in "$src"/tests/cli/broken/*.yaml; do
	expect=$(sed -n 's/^# expect: //p' "$f")
	out=$("$tool" check "$f" 2>&1 >/dev/null)
	rc=$?
	[ $rc = 1 ] && ok || bad "$f: exit $rc, expected 1"
	case "$out" in
	"$f:$expect"*) ok ;;
	*) bad "$f: stderr '$out' does not start with '$f:$expect'" ;;
	esac
done

# The TensorBoard logger's own checks run in check too (through its validate method), when it is
# built.
if "$tool" plugins 2>/dev/null | grep -q "^  tensorboard (ABI"; then
	for f in "$src"/tests/cli/broken-tensorboard/*.yaml; do
		expect=$(sed -n 's/^# expect: //p' "$f")
		out=$("$tool" check "$f" 2>&1 >/dev/null)
		rc=$?
		[ $rc = 1 ] && ok || bad "$f: exit $rc, expected 1"
		case "$out" in
		"$f:$expect"*) ok ;;
		*) bad "$f: stderr '$out' does not start with '$f:$expect'" ;;
		esac
	done
	f="$src/tests/cli/broken-tensorboard/tb_ranks.yaml"
	# The logger's own position (the value), once: not the block's with the value's after it.
	out=$("$tool" check "$f" 2>&1)
	grep -qF "$f:4:12: loggers.tensorboard (module 'tensorboard', /" <<<"$out" &&
		grep -qF "/tensorboard.so): invalid logger parameters: ranks: '-1' is neither a rank number nor 'all'" <<<"$out" && ok || bad "tb ranks: the logger's own message, with its module"
fi

# A host's own tensor name passes check only when the user allows it.
allow="$src/tests/cli/broken/misspelled_tensor.yaml"
out=$("$tool" check "$allow" --allow-tensor activaton 2>&1)
[ $? = 0 ] && ok || bad "check --allow-tensor still refuses: $out"
out=$("$tool" check "$allow" --allow-tensor attn_scores 2>&1)
[ $? = 1 ] && grep -qF "not a standard tensor (activation, gradient, weight, output, wgrad, dgrad) nor one the host declares" <<<"$out" && ok || bad "check --allow-tensor other: $out"
# An empty option value is named as the option the user gave, not as dli_options' member.
out=$("$tool" check "$allow" --allow-tensor "" 2>&1)
[ $? = 2 ] && grep -qxF "dlinspect check: --allow-tensor: expected a tensor name, got an empty one" <<<"$out" && ok || bad "check --allow-tensor '': $out"
out=$("$tool" check "$allow" --plugin-dir "" 2>&1)
[ $? = 2 ] && grep -qxF "dlinspect check: --plugin-dir '': expected a directory, got an empty name ('.' for the working directory)" <<<"$out" && ok || bad "check --plugin-dir '': $out"
# A --plugin-dir the user names is meant to be searched: one that is no directory is a mistake
# (the plugin path's own dirs, like PATH's, may be missing).
out=$("$tool" check "$allow" --allow-tensor activaton --plugin-dir "$src/no-such-dir" 2>&1)
[ $? = 2 ] && grep -qxF "dlinspect check: --plugin-dir '$src/no-such-dir': No such file or directory" <<<"$out" && ok || bad "check --plugin-dir missing: $out"
out=$("$tool" plugins --plugin-dir "$allow" 2>&1)
[ $? = 2 ] && grep -qxF "dlinspect plugins: --plugin-dir '$allow': not a directory" <<<"$out" && ok || bad "plugins --plugin-dir a file: $out"

# An empty layer regex selects every layer, as the peers' re.search does: valid, with a warning.
er=$(mktemp --suffix=.yaml)
printf "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: ''}\n  transformer_engine:\n    DisableFP8GEMM: {enabled: true, gemms: [fprop]}\n" >"$er"
out=$("$tool" check "$er" 2>&1)
[ $? = 0 ] && grep -qF "$er:3:38: warning: s.layers.layer_name_regex_pattern: an empty regular expression selects every layer" <<<"$out" && ok || bad "empty regex: $out"
rm -f "$er"

# A config that enables nothing (nvdlfw_inspect refuses it) is valid, with a warning that says so.
for text in "" "{}\n" "s:\n  enabled: false\n  layers: {layer_types: [fc1]}\n"; do
	en=$(mktemp --suffix=.yaml)
	printf "$text" >"$en"
	out=$("$tool" check "$en" 2>&1)
	[ $? = 0 ] && grep -qF "$en:1:1: warning: the config enables nothing: " <<<"$out" && ok || bad "enables nothing ('$text'): $out"
	rm -f "$en"
done

# COMMAND --help: the usage on stdout and exit 0, for every command; an unknown one stays an error.
for c in check plugins stats compare bench doctor "bench stats" "bench dispatch"; do
	for h in --help -h; do
		out=$("$tool" $c $h 2>/dev/null)
		[ $? = 0 ] && grep -q "usage: dlinspect" <<<"$out" && ok || bad "$c $h: exit or output: $out"
	done
done
"$tool" bench dispatch --jsn >/dev/null 2>&1
[ $? = 2 ] && ok || bad "bench dispatch with an unknown option should exit 2"
"$tool" nosuch --help >/dev/null 2>&1
[ $? = 2 ] && ok || bad "an unknown command with --help should exit 2"

# A config's name holding a newline or a terminal escape: check's message stays one line, escaped.
ctl=$(mktemp --suffix=.yaml)
printf 's:\n  enabled: true\n  layers: {layer_types: [fc]}\n  transformer_engine:\n    LogTensorStats: {enabled: true, stats: [max], tensors: ["act\\nfake.yaml:1:1: fine\\e[2J"]}\n' >"$ctl"
out=$("$tool" check "$ctl" 2>&1)
[ $? = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -qF "unknown tensor 'act\nfake.yaml:1:1: fine\x1b[2J'" <<<"$out" && ok || bad "check does not escape a name: $out"
rm -f "$ctl"

cfg=$(mktemp --suffix=.yaml)
trap 'rm -f "$cfg"' EXIT
cat >"$cfg" <<'YAML'
mlp:
  enabled: true
  layers: {layer_name_regex_pattern: 'mlp\.fc[12]$', layer_numbers: [0]}
  transformer_engine:
    DisableFP8GEMM: {enabled: true, gemms: [dgrad, wgrad]}
YAML
out=$("$tool" check "$cfg" --layer model.layers.3.mlp.fc2 --layer model.layers.3.qkv 2>&1)
[ $? = 0 ] && ok || bad "check --layer failed: $out"
grep -q "warning: mlp.layers.layer_numbers: has no effect" <<<"$out" && ok || bad "no warning for layer_numbers beside a regex: $out"
grep -q "transformer_engine.DisableFP8GEMM  *section 'mlp' at $cfg:5:5" <<<"$out" && ok || bad "check --layer does not name the feature and place: $out"
grep -q "at iteration 0: fprop FP8, dgrad high precision, wgrad high precision" <<<"$out" && ok || bad "check --layer GEMM summary: $out"
grep -q "layer model.layers.3.qkv:" <<<"$out" && grep -q "selected by no section" <<<"$out" && ok || bad "unselected layer: $out"

# A regex PCRE2 gives up on (its match limit) is an error naming pattern, section and layer, never
# "selected by no section" (Python's re.search matches the 'c').
cat >"$cfg" <<'YAML'
bomb:
  enabled: true
  layers: {layer_name_regex_pattern: '(a|a)+b|c'}
  transformer_engine: {DisableFP8GEMM: {enabled: true, gemms: [fprop]}}
YAML
out=$("$tool" check "$cfg" --layer aaaaaaaaaaaaaaaaaaaaaaaac 2>&1)
[ $? = 1 ] && ok || bad "check --layer with a regex over PCRE2's limit should exit 1: $out"
grep -qF "$cfg:3:38: section 'bomb': layer_name_regex_pattern '(a|a)+b|c' could not be matched against layer 'aaaaaaaaaaaaaaaaaaaaaaaac': match limit exceeded" <<<"$out" && ok || bad "regex limit message: $out"
! grep -q "selected by no section" <<<"$out" && ok || bad "regex limit reported as not selected: $out"

out=$("$tool" plugins --explain 2>&1)
[ $? = 0 ] && ok || bad "plugins --explain failed: $out"
for want in "feature DisableFP8GEMM (alias disable_fp8_gemm, DisableQuantizationGEMM)" \
	"feature DisableFP8Layer (alias disable_fp8_layer, DisableQuantizationLayer)" \
	"logger file:" "[namespace transformer_engine]" "gemms            list of strings      required" \
	"in [-126, 126]"; do
	grep -qF "$want" <<<"$out" && ok || bad "plugins --explain lacks '$want'"
done
# Loaded from the build tree, not an installed copy.
grep -qE "/features/disable_fp8_gemm\.so$" <<<"$out" && grep -qE "/loggers/file\.so$" <<<"$out" && ok || bad "module paths: $out"

# A plugin dir with two files that are no modules: plugins lists every module that loads, says
# each bad file on stderr, and exits 1.
pd=$(mktemp -d)
echo junk >"$pd/aa_bad.so"
printf '\177ELF' >"$pd/zz_bad.so"
err=$("$tool" plugins --plugin-dir "$pd" 2>&1 >"$pd/out")
rc=$?
[ $rc = 1 ] && ok || bad "plugins with bad modules: exit $rc, expected 1"
grep -qF "cannot load module $pd/aa_bad.so" <<<"$err" && grep -qF "cannot load module $pd/zz_bad.so" <<<"$err" && ok || bad "plugins: bad modules not both named: $err"
grep -q "^  disable_fp8_gemm \[namespace transformer_engine\]" "$pd/out" && grep -q "^  file (ABI" "$pd/out" && ok || bad "plugins: the good modules are not listed: $(cat "$pd/out")"
rm -rf "$pd"

# A config cannot name a module file by path; the user can allow it on the command line.
so=$(grep -oE "[^ ]*/features/disable_fp8_gemm\.so$" <<<"$out" | head -n 1)
printf 'extensions: [%s]\n' "$so" >"$cfg"
out=$("$tool" check "$cfg" 2>&1)
[ $? = 1 ] && ok || bad "check accepted a module path: $out"
grep -qF "$cfg:1:14: extensions: '$so': '$so' is a path, and modules load by name from the plugin dirs only" <<<"$out" && ok || bad "module path refusal: $out"
out=$("$tool" check "$cfg" --allow-module-path 2>&1)
[ $? = 0 ] && ok || bad "check --allow-module-path still refuses: $out"
# The environment alone cannot allow it.
out=$(DLINSPECT_ALLOW_MODULE_PATH=1 "$tool" check "$cfg" 2>&1)
[ $? = 1 ] && ok || bad "an environment variable allowed a module path: $out"

"$tool" check >/dev/null 2>&1; [ $? = 2 ] && ok || bad "check without a config should exit 2"
"$tool" frobnicate >/dev/null 2>&1; [ $? = 2 ] && ok || bad "unknown command should exit 2"
out=$("$tool" check /nonexistent.yaml 2>&1); [ $? = 1 ] && grep -q "cannot open config '/nonexistent.yaml'" <<<"$out" && ok || bad "missing file: $out"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
