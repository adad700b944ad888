#!/usr/bin/env bash
# Every public header compiles on its own as strict C11 and as C++, with warnings as errors (and
# the warnings trainers often add: -Wconversion, -Wshadow, and -Wold-style-cast in C++).
# $1: source include dir, $2: build include dir (version.h), $3: C compiler, $4: C++ compiler
set -u
src=$1 gen=$2 cc=$3 cxx=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for h in dlinspect.h tensor.h plugin.h stats.h version.h; do
	printf '#include <dlinspect/%s>\nint dli_header_test_dummy;\n' "$h" >"$tmp/t.c"
	cp "$tmp/t.c" "$tmp/t.cpp"
	if ! "$cc" -std=c11 -pedantic -Wall -Wextra -Wconversion -Wshadow -Werror -I"$src" -I"$gen" -c "$tmp/t.c" -o "$tmp/t.o"; then
		echo "FAIL: $h as C11"
		fail=1
	fi
	if ! "$cxx" -std=c++11 -pedantic -Wall -Wextra -Wconversion -Wshadow -Wold-style-cast -Werror -I"$src" -I"$gen" -c "$tmp/t.cpp" -o "$tmp/t.o"; then
		echo "FAIL: $h as C++11"
		fail=1
	fi
	# g++ says nothing of C-style casts inside extern "C"; clang++ does, where installed.
	if command -v clang++ >/dev/null &&
		! clang++ -std=c++11 -pedantic -Wall -Wextra -Wconversion -Wshadow -Wold-style-cast -Werror -I"$src" -I"$gen" -c "$tmp/t.cpp" -o "$tmp/t.o"; then
		echo "FAIL: $h as C++11 (clang++)"
		fail=1
	fi
done
[ $fail = 0 ] && echo "all public headers compile alone as C11 and C++11"
exit $fail
