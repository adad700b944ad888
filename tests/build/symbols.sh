#!/usr/bin/env bash
# libdlinspect.so exports exactly the functions declared in dlinspect.h, all under the version node
# of the symbol map, and has a SONAME.
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
unversioned=$(objdump -T "$lib" | awk '$4 == ".text" && $6 != "DLINSPECT_1.0" {print $NF}')
if [ -n "$unversioned" ]; then
	echo "FAIL: functions outside the DLINSPECT_1.0 version node: $unversioned"
	exit 1
fi
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
if [ "$soname" != "libdlinspect.so.0" ]; then
	echo "FAIL: SONAME is '$soname', expected libdlinspect.so.0"
	exit 1
fi
echo "$(echo "$exported" | wc -l) functions exported, all declared in dlinspect.h; SONAME $soname"
