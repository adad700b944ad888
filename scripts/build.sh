#!/usr/bin/env bash
# Configures (once) and builds one meson build dir, showing progress, and on failure the error:
#   scripts/build.sh SOURCE_DIR BUILD_DIR [MESON_OPTIONS...]
# On a terminal ninja's own status line shows progress; otherwise (CI, a pipe) one line every 10%
# of the build steps. Compiler warnings and errors are always shown, and a failure ends with the
# step that failed and its output, never with a bare exit status.
set -uo pipefail
src=$1 dir=$2
shift 2

if [ ! -f "$dir/build.ninja" ]; then
	echo "== configuring $dir"
	log=$(mktemp)
	if ! meson setup "$dir" "$src" "$@" >"$log" 2>&1; then
		# meson's error is its last lines; its log has the details.
		tail -n 30 "$log"
		rm -f "$log"
		echo "== meson setup $dir failed (details: $dir/meson-logs/meson-log.txt)" >&2
		exit 1
	fi
	# meson's warnings, with the list lines under them, are worth seeing; the rest is noise.
	awk '/WARNING:|DEPRECATION:/ { print; more = 1; next } more && /^ \* / { print; next } { more = 0 }' "$log"
	rm -f "$log"
elif [ $# -gt 0 ]; then
	# Configured before: apply the options asked for now (e.g. -Dwerror for the test builds).
	log=$(mktemp)
	if ! meson configure "$dir" "$@" >"$log" 2>&1; then
		tail -n 30 "$log"
		rm -f "$log"
		echo "== meson configure $dir failed" >&2
		exit 1
	fi
	rm -f "$log"
fi

echo "== building $dir"
if [ -t 1 ]; then
	ninja -C "$dir"
	status=$?
else
	# ninja prints "[n/N] what" per step when not on a terminal: keep every 10%, pass the rest.
	ninja -C "$dir" 2>&1 | awk '
		/^\[[0-9]+\/[0-9]+\] / {
			split(substr($1, 2), nm, "/"); n = nm[1] + 0; total = nm[2] + 0
			pct = total ? int(100 * n / total) : 100
			if (pct >= shown + 10 || n == total) { printf "  %3d%% (%d/%d steps)\n", pct, n, total; shown = pct - pct % 10 }
			fflush(); next
		}
		/^ninja: Entering/ { next }
		/^ninja: no work to do/ { print "  up to date"; next }
		{ print; fflush() }'
	status=${PIPESTATUS[0]}
fi
if [ "$status" -ne 0 ]; then
	echo "== building $dir failed: the error is above (ninja -C $dir shows it again)" >&2
	exit "$status"
fi
