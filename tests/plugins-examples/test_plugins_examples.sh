#!/bin/sh
# Builds plugins-examples/ out of tree against an installed dlinspect, as a user would, and checks
# that the installed demo loads them from the installed plugin dir and that their output is right.
#   test_plugins_examples.sh SOURCE_ROOT WORKDIR MESON NINJA PYTHON CHECK_OUTPUT_PY JSONL_EDGE_C \
#	DOC_BLOCKS_PY STATS_FEATURE_TAIL_C
set -u
src=$1 work=$2 meson=$3 ninja=$4 python=$5 check=$6 edge_c=$7 blocks=$8 stats_tail=$9
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
die() { echo "FAIL: $*"; exit 1; }
# Runs a command quietly and shows its output only when it fails.
quiet() {
	log=$work/last.log
	"$@" >"$log" 2>&1 || { cat "$log"; die "failed: $*"; }
}

# Whatever the test environment says about plugins, configs or compilers' search paths must not
# leak in: the installed library has to find the installed modules by itself.
unset DLINSPECT_PLUGIN_PATH DLINSPECT_CONFIG DLINSPECT_LOG_DIR DLINSPECT_LOG_LEVEL PKG_CONFIG_PATH \
	LD_LIBRARY_PATH
rm -rf "$work" && mkdir -p "$work" || exit 99
prefix=$work/prefix

# 1. A fresh configure with the prefix: DLI_PLUGINDIR is fixed at configure time, so the build tree
# under test, configured for another prefix, cannot be installed elsewhere and still be honest.
# Tests and CUDA off: a few seconds on two cores.
quiet "$meson" setup "$work/dlinspect-build" "$src" --prefix "$prefix" -Dtests=false \
	-Dcuda=disabled
quiet "$ninja" -C "$work/dlinspect-build" install

pc=$(find "$prefix" -name dlinspect.pc | head -n 1)
[ -n "$pc" ] || die "no dlinspect.pc installed under $prefix"
libdir=$(dirname "$(dirname "$pc")")
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
plugindir=$(pkg-config --variable=plugindir dlinspect) || die "pkg-config does not find dlinspect"
[ "$plugindir" = "$libdir/dlinspect/plugins" ] ||
	fail "plugindir '$plugindir' is not the installed modules' dir $libdir/dlinspect/plugins"
[ -e "$plugindir/file.so" ] || fail "the bundled modules are not in plugindir $plugindir"

# The installed programs run from this non-system prefix as they are (no LD_LIBRARY_PATH: an
# RPATH of $ORIGIN/../{libdir}), and find the installed modules without DLINSPECT_PLUGIN_PATH.
"$prefix/bin/dlinspect" plugins >"$work/plugins.out" 2>&1 ||
	{ cat "$work/plugins.out"; fail "the installed 'dlinspect plugins' failed"; }
grep -q "^ *file (ABI [0-9.]*)  $plugindir/file.so" "$work/plugins.out" ||
	{ cat "$work/plugins.out"; fail "the installed 'dlinspect plugins' does not list $plugindir/file.so"; }
"$prefix/bin/dlinspect" check "$src/configs/demo.yaml" >"$work/check.out" 2>&1 ||
	{ cat "$work/check.out"; fail "the installed 'dlinspect check configs/demo.yaml' failed"; }
grep -q 'valid: ' "$work/check.out" || fail "the installed 'dlinspect check' did not say valid"
"$prefix/bin/dlinspect-demo" --config "$src/configs/demo.yaml" --log-dir "$work/rpath-logs" \
	--steps 1 --quiet >"$work/rpath.out" 2>&1 ||
	{ cat "$work/rpath.out"; fail "the installed dlinspect-demo does not run without LD_LIBRARY_PATH"; }
if command -v readelf >/dev/null; then
	readelf -d "$prefix/bin/dlinspect-demo" | grep -Eq 'R(UN)?PATH.*\$ORIGIN/\.\./' ||
		fail "the installed dlinspect-demo has no \$ORIGIN-relative RPATH"
fi

# 2. Each example from its own directory, with its own build files, into the prefix's plugindir.
# -Werror: the templates must build cleanly, since users copy them.
for ex in clamp-outliers jsonl-logger; do
	quiet "$meson" setup "$work/$ex" "$src/plugins-examples/$ex" -Dwerror=true
	quiet "$ninja" -C "$work/$ex" install
done
for mod in clamp_outliers jsonl; do
	so=$plugindir/$mod.so
	[ -f "$so" ] || { fail "$so not installed"; continue; }
	# The ABI's promise: one exported symbol, and nothing linked from dlinspect.
	if command -v nm >/dev/null; then
		syms=$(nm -D --defined-only "$so" | awk '{print $3}')
		[ "$syms" = dli_module_entry ] || fail "$mod.so exports: $syms"
	fi
	if command -v readelf >/dev/null && readelf -d "$so" | grep -q 'NEEDED.*libdlinspect'; then
		fail "$mod.so links libdlinspect"
	fi
done

# The Makefile alternative: built out of its source dir, and warning-free too.
if command -v make >/dev/null && command -v cc >/dev/null; then
	mkdir -p "$work/make"
	for ex in clamp-outliers jsonl-logger; do
		quiet make -C "$work/make" -f "$src/plugins-examples/$ex/Makefile" CFLAGS="-O2 -Werror"
	done
	[ -f "$work/make/clamp_outliers.so" ] && [ -f "$work/make/jsonl.so" ] ||
		fail "the Makefiles did not build clamp_outliers.so and jsonl.so"
fi

# 3. The installed demo, with a config naming the examples.
cat >"$work/config.yaml" <<'EOF'
extensions: [transformer_engine, file, my_plugins, jsonl]
loggers:
  file: {}
  jsonl: {}
fc1_activation:
  enabled: true
  layers:
    layer_name_regex_pattern: 'mlp\.fc1$'
  my_plugins:                 # in its namespace block
    ClampOutliers:
      enabled: true
      gemms: [fprop]
      tensors: [activation]
      max_abs: 0.9
qkv_weight:
  enabled: true
  layers:
    layer_name_regex_pattern: 'layers\.0\.self_attention\.qkv$'
  ClampOutliers:              # generic: directly in the section
    enabled: true
    gemms: [fprop, dgrad]     # two calls a step: the counts add up
    tensors: [weight]
    max_abs: 0.1
EOF
demo() { "$prefix/bin/dlinspect-demo" --config "$1" --log-dir "$2" --steps 3 --quiet; }
demo "$work/config.yaml" "$work/logs" >"$work/demo.out" 2>&1 ||
	{ cat "$work/demo.out"; die "the installed demo failed"; }
[ ! -s "$work/demo.out" ] || { cat "$work/demo.out"; fail "the demo printed errors"; }

# 4. The JSONL file: valid JSON on every line, the counts the demo's data gives, and the same
# scalars as the file logger's log.
"$python" "$check" "$work/logs/jsonl/rank-0.jsonl" \
	"$work/logs/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log" ||
	fail "the JSONL output is wrong"

# What the demo never logs (NaN, infinities, names to escape), through the logger's ops directly.
if command -v cc >/dev/null; then
	# shellcheck disable=SC2046 # pkg-config's flags are meant to split
	quiet cc -std=c11 -Wall -Werror -o "$work/jsonl_edge" "$edge_c" $(pkg-config --cflags dlinspect) -ldl
	quiet "$work/jsonl_edge" "$plugindir/jsonl.so" "$work/edge.jsonl"
	"$python" "$check" --edge "$work/edge.jsonl" || fail "jsonl: edge values written wrongly"
fi

# The `path` parameter, with {rank}, and appending on a second run.
sed 's|^  jsonl: {}|  jsonl: {path: "'"$work"'/custom/out-{rank}.jsonl"}|' "$work/config.yaml" \
	>"$work/custom.yaml"
demo "$work/custom.yaml" "$work/logs2" >/dev/null 2>&1 &&
	demo "$work/custom.yaml" "$work/logs2" >/dev/null 2>&1 || fail "the demo failed with path:"
n=$(wc -l <"$work/custom/out-0.jsonl" 2>/dev/null)
[ "${n:-0}" -eq 30 ] || fail "path: expected 30 lines after two runs in custom/out-0.jsonl, got ${n:-none}"
[ ! -e "$work/logs2/jsonl" ] || fail "path: the default file was written too"

# A value the plugin refuses: the core names the place, the plugin says why.
sed 's/max_abs: 0.9/max_abs: -1/' "$work/config.yaml" >"$work/bad.yaml"
demo "$work/bad.yaml" "$work/logs3" >"$work/bad.out" 2>&1 && fail "max_abs: -1 was accepted"
grep -q 'bad.yaml:[0-9]*:[0-9]*:.*max_abs must be a finite number > 0, got -1' "$work/bad.out" ||
	{ cat "$work/bad.out"; fail "max_abs: -1: unexpected message"; }

# A path the logger cannot open fails dli_init with the path and the reason.
sed 's|^  jsonl: {}|  jsonl: {path: "'"$work"'/config.yaml/x.jsonl"}|' "$work/config.yaml" >"$work/nodir.yaml"
demo "$work/nodir.yaml" "$work/logs4" >"$work/nodir.out" 2>&1 && fail "an unopenable path was accepted"
grep -q "nodir.yaml:[0-9]*:[0-9]*: loggers.jsonl (module 'jsonl', [^)]*/jsonl.so): could not create the logger: cannot open '$work/config.yaml/x.jsonl': Not a directory" \
	"$work/nodir.out" || { cat "$work/nodir.out"; fail "jsonl path: unexpected message"; }

# `dlinspect plugins --explain` finds both in the installed plugindir, with their parameters.
# Its exit status also reflects the other modules on the path; this test checks the examples only.
"$prefix/bin/dlinspect" plugins --explain >"$work/explain.out" 2>&1 ||
	echo "note: dlinspect plugins --explain exited $? (an error from another module?)"
if grep -E '^dlinspect: .*(clamp_outliers|jsonl)' "$work/explain.out"; then
	fail "dlinspect plugins reports an error for an example"
fi
for want in "clamp_outliers \[namespace my_plugins\] (ABI [0-9.]*)  $plugindir/clamp_outliers.so" \
	"feature ClampOutliers: " "^ *max_abs  *float  *required" \
	"jsonl (ABI [0-9.]*)  $plugindir/jsonl.so" "logger jsonl: " \
	"^ *path  *string  *default jsonl/rank-{rank}.jsonl"; do
	grep -q "$want" "$work/explain.out" || fail "plugins --explain lacks: $want"
done

# 5. docs/plugins.md's own config, run as the page says, prints what the page shows.
doc=$src/docs/plugins.md
mkdir -p "$work/doc/bad" || exit 99
"$python" "$blocks" config "$doc" >"$work/doc/config.yaml" || die "no config in $doc"
sed 's/max_abs: 0.9/max_abs: -1/' "$work/doc/config.yaml" >"$work/doc/bad/config.yaml"
(
	cd "$work/doc" || exit 1
	"$prefix/bin/dlinspect" check config.yaml --layer model.layers.0.mlp.fc1 >check.out 2>&1
	"$prefix/bin/dlinspect-demo" --config config.yaml --log-dir logs --steps 3 >demo.out 2>&1
	"$prefix/bin/dlinspect" plugins --explain >explain.out 2>&1
	cd bad && "$prefix/bin/dlinspect" check config.yaml >../bad.out 2>&1
) || true
"$python" "$blocks" compare "$doc" "$plugindir" "$work/doc" || fail "docs/plugins.md's outputs"

# 6. Names a user's copy of a template can clash on. The template renamed as the page says
# (module and namespace) but its feature not: directly in a section, ClampOutliers could be
# either, and the order of `extensions` must not pick one unseen. In its namespace block it is
# clear. Renamed in its module only, it meets the template in one namespace: refused at load.
clash() { # NAME NAMESPACE: clamp_outliers.c as module NAME of NAMESPACE, in $work/clash-NAME
	mkdir -p "$work/clash-$1" &&
		sed -e "s/\"clamp_outliers\"/\"$1\"/" -e "s/\"my_plugins\"/\"$2\"/g" \
			"$src/plugins-examples/clamp-outliers/clamp_outliers.c" >"$work/clash-$1/$1.c" &&
		# shellcheck disable=SC2046 # pkg-config's flags are meant to split
		quiet cc -std=c11 -fPIC -shared -fvisibility=hidden -Wl,-z,defs \
			$(pkg-config --cflags dlinspect) -o "$work/clash-$1/$1.so" "$work/clash-$1/$1.c" -lm
}
if command -v cc >/dev/null; then
	clash my_clamp acme
	clash clamp_copy my_plugins
	printf '%s\n' 'extensions: [my_plugins, acme]' 's:' '  enabled: true' '  layers:' \
		'    layer_name_regex_pattern: fc1' '  ClampOutliers:' '    enabled: true' \
		'    gemms: [fprop]' '    tensors: [activation]' '    max_abs: 1' >"$work/twice.yaml"
	DLINSPECT_PLUGIN_PATH=$work/clash-my_clamp "$prefix/bin/dlinspect" check "$work/twice.yaml" \
		>"$work/twice.out" 2>&1 && fail "ClampOutliers of two namespaces was taken directly"
	grep -qF "twice.yaml:6:3: s: ClampOutliers is a generic feature of two namespaces, 'my_plugins' ($plugindir/clamp_outliers.so) and 'acme' ($work/clash-my_clamp/my_clamp.so): put the block in the section's 'my_plugins:' or 'acme:' block to say which" \
		"$work/twice.out" || { cat "$work/twice.out"; fail "two generic ClampOutliers: unexpected message"; }
	sed -e 's/^  ClampOutliers:/  acme:\n   ClampOutliers:/' "$work/twice.yaml" >"$work/in-ns.yaml"
	DLINSPECT_PLUGIN_PATH=$work/clash-my_clamp "$prefix/bin/dlinspect" check "$work/in-ns.yaml" \
		--layer fc1 >"$work/in-ns.out" 2>&1 || fail "ClampOutliers in its namespace block refused"
	grep -q "acme.ClampOutliers .*in-ns.yaml:7:4" "$work/in-ns.out" ||
		{ cat "$work/in-ns.out"; fail "acme: ClampOutliers: not the acme module's feature"; }
	sed 's/, acme//' "$work/twice.yaml" >"$work/copy.yaml"
	DLINSPECT_PLUGIN_PATH=$work/clash-clamp_copy "$prefix/bin/dlinspect" check "$work/copy.yaml" \
		>"$work/copy.out" 2>&1 && fail "two modules of one namespace with one feature were loaded"
	grep -qF "feature 'ClampOutliers' is provided by two modules: $work/clash-clamp_copy/clamp_copy.so and $plugindir/clamp_outliers.so; remove one from the plugin path or from 'extensions'" \
		"$work/copy.out" || { cat "$work/copy.out"; fail "one namespace, one feature twice: unexpected message"; }
fi

# 7. The page's statistics feature, built out of tree as the page says (the skeleton's files copied
# beside it), with the templates' flags (strict C11, no _GNU_SOURCE), run on the demo's fc1
# activations and checked against their min and max recomputed from the demo's data.
sk=$work/my-stats
mkdir -p "$sk" && cp "$src/features/stats-skeleton.h" "$src/features/stats-skeleton.c" \
	"$src/features/feature-util.h" "$src/features/feature-reduce.h" "$sk/" || exit 99
{ "$python" "$blocks" stats-feature "$doc" && cat "$stats_tail"; } >"$sk/my_stats.c" ||
	die "no statistics feature in $doc"
if command -v cc >/dev/null; then
	# shellcheck disable=SC2046 # pkg-config's flags are meant to split
	quiet cc -std=c11 -O2 -Wall -Wextra -Wno-unused-parameter -Werror -fPIC -shared \
		-fvisibility=hidden -Wl,-z,defs $(pkg-config --cflags dlinspect) -o "$sk/my_stats.so" \
		"$sk/my_stats.c" "$sk/stats-skeleton.c" -lm
	printf '%s\n' 'extensions: [file, my_stats]' 'fc1:' '  enabled: true' '  layers:' \
		"    layer_name_regex_pattern: 'mlp\\.fc1\$'" '  MyStats:' '    enabled: true' \
		'    tensors: [activation]' '    stats: [min, max]' '    freq: 1' >"$sk/config.yaml"
	DLINSPECT_PLUGIN_PATH=$sk demo "$sk/config.yaml" "$sk/logs" >"$sk/demo.out" 2>&1 ||
		{ cat "$sk/demo.out"; fail "the demo failed with the page's statistics feature"; }
	"$python" "$check" --stats "$sk/logs/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log" ||
		fail "the page's statistics feature logged wrong values"
fi

[ "$fails" -eq 0 ] && echo "ok: both examples build with meson and make against the installed" \
	"dlinspect and run from its plugindir"
exit $((fails != 0))
