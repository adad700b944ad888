#!/usr/bin/env bash
# libdlinspect.so exports exactly the functions declared in dlinspect.h, each under a version node
# of the symbol map (DLINSPECT_1.0, or DLINSPECT_1.1 / 1.2 for what came after), and has a
# SONAME.
# $1: the library, $2: dlinspect.h
set -u
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | sed 's/@.*//' | sort -u)
declared=$(grep -oE '\bdli_[a-z0-9_]+\(' "$header" | tr -d '(' | sort -u)
if [ "$exported" != "$declared" ]; then
	echo "FAIL: exported and declared functions differ (< exported, > declared):"
	diff <(echo "$exported") <(echo "$declared")
	exit 1
fi
unversioned=$(objdump -T "$lib" | awk '$4 == ".text" && $6 != "DLINSPECT_1.0" && $6 != "DLINSPECT_1.1" && $6 != "DLINSPECT_1.2" {print $NF}')
if [ -n "$unversioned" ]; then
	echo "FAIL: functions outside the DLINSPECT_1.0, 1.1 and 1.2 version nodes: $unversioned"
	exit 1
fi
late=$(objdump -T "$lib" | awk '$4 == ".text" && $6 == "DLINSPECT_1.1" {print $NF}' | sort | tr '\n' ' ')
if [ "$late" != "dli_last_error dli_layer_plan dli_mode_get dli_mode_set " ]; then
	echo "FAIL: DLINSPECT_1.1 holds '$late', expected the calls added after 1.0"
	exit 1
fi
late=$(objdump -T "$lib" | awk '$4 == ".text" && $6 == "DLINSPECT_1.2" {print $NF}' | sort | tr '\n' ' ')
if [ "$late" != "dli_block_fake_quant dli_config_reload dli_detect_overflow " ]; then
	echo "FAIL: DLINSPECT_1.2 holds '$late', expected the calls added after 1.1"
	exit 1
fi
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
if [ "$soname" != "libdlinspect.so.0" ]; then
	echo "FAIL: SONAME is '$soname', expected libdlinspect.so.0"
	exit 1
fi
echo "$(echo "$exported" | wc -l) functions exported, all declared in dlinspect.h; SONAME $soname"
