#!/usr/bin/env bash
# Interop and swap tests: real dlinspect runs (tb_driver) read back with TensorBoard's own Python
# readers (check_run.py), in the tests' shared virtual environment (tests/pyenv.sh).
#   interop: the file and tensorboard loggers together; every scalar and histogram checked.
#   swap:    the same binary with loggers {file}, {tensorboard}, both, and none (the default file).
#   rerun:   two runs in one log dir: the second run's logs hold each statistic once (the file
#            logger truncates, the tensorboard logger removes the first run's event file).
#   lts-histogram: the real LogTensorStats with `histogram` (tb_lts_driver); its histograms
#            checked against numpy over TensorFlow's bucket limits (check_lts_histogram.py).
# $1: interop|swap|rerun|lts-histogram, $2: tb_driver or tb_lts_driver, $3: check_run.py or
# check_lts_histogram.py
set -u
mode=$1 driver=$2 checker=$3
root=${MESON_SOURCE_ROOT:?MESON_SOURCE_ROOT must name the source tree}

py=$("${DLI_PYENV:?DLI_PYENV not set (run through meson test)}" tensorboard numpy) || exit 1

tmp=$(mktemp -d /tmp/dli-test-tb-interop-XXXXXX)
status=0

# run NAME LOGGERS FILE? TENSORBOARD? [HISTOGRAMS?]
run() {
	local dir=$tmp/$1
	mkdir -p "$dir"
	if ! "$driver" "$dir" 6 "$2" 5; then
		echo "FAIL: $1: tb_driver failed"
		status=1
		return
	fi
	"$py" "$checker" "$dir" --file "$3" --tensorboard "$4" --histograms "${5:-yes}" || status=1
}

case $mode in
interop)
	run both '{file: {}, tensorboard: {histograms: true}}' yes yes
	;;
lts-histogram)
	mkdir -p "$tmp/lts"
	if ! "$driver" "$tmp/lts" 4; then
		echo "FAIL: tb_lts_driver failed"
		status=1
	else
		"$py" "$checker" "$tmp/lts" 4 || status=1
	fi
	;;
rerun)
	loggers='{file: {}, tensorboard: {histograms: true}}'
	mkdir -p "$tmp/rerun"
	if ! "$driver" "$tmp/rerun" 6 "$loggers" 5; then
		echo "FAIL: rerun: the first tb_driver run failed"
		status=1
	fi
	rm -f "$tmp/rerun/expected.txt" # the fixture appends what it sent: keep the second run's
	run rerun "$loggers" yes yes
	;;
swap)
	run file '{file: {}}' yes no
	run tensorboard '{tensorboard: {}}' no yes
	run both '{file: {}, tensorboard: {histograms: false}}' yes yes no
	run absent - yes no
	;;
*)
	echo "unknown mode $mode"
	exit 2
	;;
esac
[ $status -eq 0 ] && rm -rf "$tmp"
exit $status
