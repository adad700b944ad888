#!/bin/sh
# The build tree as users use it without installing:
#   - `meson devenv` puts the build tree's plugin dirs in front of the user's own
#     DLINSPECT_PLUGIN_PATH, and keeps it (docs/plugins.md tells users to set it);
#   - the uninstalled pkg-config file (meson-uninstalled/dlinspect-uninstalled.pc) gives include/,
#     so a host program builds and links against the build tree.
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
fi
[ "$fails" -eq 0 ] && echo "ok: meson devenv keeps the user's DLINSPECT_PLUGIN_PATH; the uninstalled .pc gives include/"
exit $((fails != 0))
