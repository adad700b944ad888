#!/bin/sh
# scripts/build.sh, which scripts/setup.sh (and so demo.sh and test.sh) builds with: it shows
# progress, and a compile error or a meson error is printed, not swallowed into a bare exit 1.
# usage: test_build_script.sh SOURCE_ROOT WORK_DIR
set -u
src=$1 work=$2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
rm -rf "$work" && mkdir -p "$work/good" "$work/bad" "$work/badmeson" || exit 99

for p in good bad; do
	printf "project('%s', 'c')\nexecutable('a', 'a.c')\nexecutable('b', 'b.c')\n" "$p" >"$work/$p/meson.build"
	echo 'int main(void) { return 0; }' >"$work/$p/a.c"
done
echo 'int main(void) { return 0; }' >"$work/good/b.c"
echo 'int main(void) { return undeclared_thing_xyz; }' >"$work/bad/b.c"
echo "project('badmeson', 'c')
executable('a', 'missing.c')" >"$work/badmeson/meson.build"

bash "$src/scripts/build.sh" "$work/good" "$work/good-build" >"$work/good.out" 2>&1 ||
	{ fail "a good project failed to build:"; cat "$work/good.out"; }
grep -q '100% (' "$work/good.out" || { fail "no progress shown:"; cat "$work/good.out"; }

bash "$src/scripts/build.sh" "$work/bad" "$work/bad-build" >"$work/bad.out" 2>&1 &&
	fail "a compile error exited 0"
grep -q 'undeclared_thing_xyz' "$work/bad.out" && grep -q 'error' "$work/bad.out" ||
	{ fail "the compiler's error is not shown:"; cat "$work/bad.out"; }
grep -q "building $work/bad-build failed" "$work/bad.out" || fail "the failure is not said"

bash "$src/scripts/build.sh" "$work/badmeson" "$work/badmeson-build" >"$work/badmeson.out" 2>&1 &&
	fail "a meson error exited 0"
grep -q 'missing.c' "$work/badmeson.out" && grep -q "meson setup $work/badmeson-build failed" "$work/badmeson.out" ||
	{ fail "meson's error is not shown:"; cat "$work/badmeson.out"; }

[ "$fails" -eq 0 ] && echo "ok: scripts/build.sh shows progress, compile errors and meson errors"
exit $((fails != 0))
