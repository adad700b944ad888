#!/bin/sh
# dli_cuda.so exports exactly its module entry (the static CUDA runtime inside stays private) and
# needs no CUDA runtime library at load time: only the driver, which dlopen finds on a GPU machine.
set -eu
so=$1
exports=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sort)
if [ "$exports" != "dli_module_entry" ]; then
	echo "$so exports:" $exports "(expected only dli_module_entry)"
	exit 1
fi
if readelf -d "$so" | grep NEEDED | grep -q 'libcudart'; then
	echo "$so links libcudart dynamically; expected the static runtime"
	exit 1
fi
echo "$so exports only dli_module_entry"
