#!/usr/bin/env bash
# libdlinspect.so exports exactly the functions declared in dlinspect.h, each under the version node
# of the symbol map that lists it (DLINSPECT_1.0 for the first release, 1.1, 1.2, ... for what
# came after: a program built against a newer header then fails to start against an older library
# instead of failing at its first call), and has a SONAME.
# $1: the library, $2: dlinspect.h, $3: the symbol map (core/libdlinspect.map)
set -u
lib=$1 header=$2 map=$3
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | sed 's/@.*//' | sort -u)
declared=$(grep -oE '\bdli_[a-z0-9_]+\(' "$header" | tr -d '(' | sort -u)
if [ "$exported" != "$declared" ]; then
	echo "FAIL: exported and declared functions differ (< exported, > declared):"
	diff <(echo "$exported") <(echo "$declared")
	exit 1
fi
# "name version" for every function the map lists, from the map's own text.
listed=$(awk '/^DLINSPECT_[0-9.]+ *\{/ {node = $1; sub(/\{.*/, "", node)}
	      /^\t\tdli_[a-z0-9_]+;/ {gsub(/[\t;]/, ""); print $0, node}' "$map" | sort)
found=$(objdump -T "$lib" | awk '$4 == ".text" && $NF ~ /^dli_/ {print $NF, $6}' | sort)
if [ "$listed" != "$found" ]; then
	echo "FAIL: exported functions and their version nodes differ from the map (< map, > library):"
	diff <(echo "$listed") <(echo "$found")
	exit 1
fi
# Released nodes are frozen: a new function goes in a new node, never into one a program may
# already have been linked against.
frozen="DLINSPECT_1.1: dli_last_error dli_layer_plan dli_mode_get dli_mode_set
DLINSPECT_1.2: dli_block_fake_quant dli_config_reload dli_detect_overflow"
while IFS=: read -r node names; do
	have=$(echo "$found" | awk -v n="$node" '$2 == n {print $1}' | tr '\n' ' ')
	if [ "$have" != "${names# } " ]; then
		echo "FAIL: $node holds '$have', expected '${names# } ' (released nodes do not change)"
		exit 1
	fi
done <<<"$frozen"
if [ "$(echo "$found" | awk '$2 == "DLINSPECT_1.0"' | wc -l)" != 25 ]; then
	echo "FAIL: DLINSPECT_1.0 no longer holds its 25 functions"
	exit 1
fi
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
if [ "$soname" != "libdlinspect.so.0" ]; then
	echo "FAIL: SONAME is '$soname', expected libdlinspect.so.0"
	exit 1
fi
echo "$(echo "$exported" | wc -l) functions exported, all declared in dlinspect.h and versioned as the map says; SONAME $soname"
