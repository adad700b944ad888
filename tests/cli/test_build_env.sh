#!/bin/sh
# The build tree as users use it without installing:
#   - `meson devenv` puts the build tree's plugin dirs in front of the user's own
#     DLINSPECT_PLUGIN_PATH, and keeps it (docs/plugins.md tells users to set it);
#   - the uninstalled pkg-config file (meson-uninstalled/dlinspect-uninstalled.pc) gives include/,
#     so a host program builds and links against the build tree;
#   - with no DLINSPECT_PLUGIN_PATH, the tree's dlinspect, and a host program anywhere that runs
#     the tree's libdlinspect, find the tree's modules (core/loader.c, dli_search_dirs).
# usage: test_build_env.sh MESON BUILD_ROOT WORK_DIR [B_SANITIZE]
set -u
meson=$1 build=$2 work=$3 sanitize=${4:-none}
# A sanitized libdlinspect needs its runtime in the host program too.
san_flags=
[ "$sanitize" = none ] || san_flags="-fsanitize=$sanitize"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
rm -rf "$work" && mkdir -p "$work" || exit 99

got=$(DLINSPECT_PLUGIN_PATH=/opt/my-plugins:/srv/more "$meson" devenv -C "$build" \
	sh -c 'printf %s "$DLINSPECT_PLUGIN_PATH"' 2>"$work/devenv.err")
case $got in
*"$build"/loggers*:/opt/my-plugins:/srv/more) ;;
*) fail "meson devenv: DLINSPECT_PLUGIN_PATH is '$got', expected the build dirs then the user's /opt/my-plugins:/srv/more"; cat "$work/devenv.err" ;;
esac
got=$(env -u DLINSPECT_PLUGIN_PATH "$meson" devenv -C "$build" sh -c 'printf %s "$DLINSPECT_PLUGIN_PATH"' 2>/dev/null)
case $got in
*"$build"/loggers*) ;;
*) fail "meson devenv without a user value: DLINSPECT_PLUGIN_PATH is '$got'" ;;
esac

if command -v pkg-config >/dev/null && command -v cc >/dev/null; then
	export PKG_CONFIG_PATH="$build/meson-uninstalled"
	cflags=$(pkg-config --cflags dlinspect) || fail "pkg-config does not find dlinspect-uninstalled.pc"
	libs=$(pkg-config --libs dlinspect)
	cat >"$work/host.c" <<'C'
#include <dlinspect/dlinspect.h>
#include <dlinspect/plugin.h>
int main(void)
{
	struct dli_options o;
	dli_options_init(&o);
	return o.size == sizeof o ? 0 : 1;
}
C
	# shellcheck disable=SC2086 # pkg-config's flags are meant to split
	cc -std=c11 $san_flags -o "$work/host" "$work/host.c" $cflags $libs >"$work/cc.out" 2>&1 ||
		{ fail "a host program does not build with the uninstalled pkg-config file ($cflags $libs):"; cat "$work/cc.out"; }
	[ -x "$work/host" ] && { LD_LIBRARY_PATH="$build/core" "$work/host" || fail "the host program built against the build tree fails"; }
	# A host program outside the tree, with no DLINSPECT_PLUGIN_PATH, runs the tree's
	# libdlinspect: that finds the tree's modules.
	outside=$(mktemp -d) || exit 99
	cat >"$outside/modules.c" <<'C'
#include <stdio.h>
#include <dlinspect/dlinspect.h>
int main(void)
{
	struct dli_options o;
	struct dli_context *ctx;
	struct dli_error err;
	dli_options_init(&o);
	o.config_yaml = "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: .*}\n"
			"  transformer_engine:\n    LogTensorStats:\n      enabled: true\n"
			"      tensors: [activation]\n      stats: [max]\n";
	o.log_dir = OUT_DIR;
	if (dli_init(&o, &ctx, &err)) {
		printf("%s\n", err.message);
		return 1;
	}
	dli_destroy(ctx);
	return 0;
}
C
	# shellcheck disable=SC2086
	if cc -std=c11 $san_flags -DOUT_DIR="\"$outside\"" -o "$outside/modules" "$outside/modules.c" \
		$cflags $libs >"$work/cc2.out" 2>&1; then
		got=$(env -u DLINSPECT_PLUGIN_PATH LD_LIBRARY_PATH="$build/core" "$outside/modules" 2>&1) ||
			fail "a host program outside the tree, on its libdlinspect, finds no modules: $got"
	else
		fail "the host program outside the tree does not build:"; cat "$work/cc2.out"
	fi
	rm -rf "$outside"
fi
# The tree's dlinspect tool, with no DLINSPECT_PLUGIN_PATH: the tree's modules, before the install
# dir.
got=$(env -u DLINSPECT_PLUGIN_PATH "$build/tools/dlinspect" plugins 2>&1)
case $got in
*"plugin search path:
  $build/"*"0 modules"*) fail "dlinspect from the tree lists no modules: $got" ;;
*"plugin search path:
  $build/"*" modules:"*) ;;
*) fail "dlinspect from the tree, with no DLINSPECT_PLUGIN_PATH, does not search the tree first: $got" ;;
esac
[ "$fails" -eq 0 ] && echo "ok: meson devenv keeps the user's DLINSPECT_PLUGIN_PATH; the uninstalled .pc gives include/; the tree's programs and library find its modules"
exit $((fails != 0))
