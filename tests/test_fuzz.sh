#!/bin/sh
# test_fuzz.sh - each libFuzzer target of tests/fuzz/ for a bounded time
# (SG_FUZZ_SECONDS, default 12 s) on its seed corpus: one TAP line per
# target, `not ok` when it found a crash (the input is kept under
# build-fuzz/crashes/<target>/, see scripts/fuzz.sh). Skipped when clang's
# libFuzzer is not installed.
srcdir=${SG_SRCDIR:-.}
builddir=${SG_BUILDDIR:-.}
secs=${SG_FUZZ_SECONDS:-12}
FUZZ_DIR=${FUZZ_DIR:-$builddir/build-fuzz}
export FUZZ_DIR
fuzz="$srcdir/scripts/fuzz.sh"
. "$srcdir/tests/tap_lib.sh"

targets=$(bash "$fuzz" --list) || skip_all "scripts/fuzz.sh --list failed"
bash "$fuzz" --build-only >"$FUZZ_DIR.build.log" 2>&1
rc=$?
if [ "$rc" = 77 ]; then
	skip_all "no libFuzzer (clang -fsanitize=fuzzer): apt-get install clang libclang-rt-14-dev"
fi
plan "$(echo "$targets" | wc -w)"
if [ "$rc" != 0 ]; then
	sed 's/^/# /' "$FUZZ_DIR.build.log"
	for t in $targets; do
		ok 1 "fuzz $t: the fuzz targets did not build"
	done
	exit 0
fi
for t in $targets; do
	out=$(bash "$fuzz" --seconds "$secs" "$t" 2>&1)
	rc=$?
	line=$(echo "$out" | awk -v t="$t" '$1 == t')
	execs=$(echo "$line" | awk '{ print $2 }')
	s=$(echo "$line" | awk '{ print $3 }')
	if [ "$rc" = 0 ] && [ -n "$execs" ] && [ "$execs" -gt 0 ]; then
		ok 0 "fuzz $t: $execs executions in $s s, no crash"
	else
		ok 1 "fuzz $t: ${line:-no result} (exit $rc)"
		echo "$out" | sed 's/^/# /'
	fi
done
exit 0
