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

targets=$(bash "$fuzz" --list) || { echo "1..0 # SKIP scripts/fuzz.sh --list failed"; exit 0; }
bash "$fuzz" --build-only >"$FUZZ_DIR.build.log" 2>&1
rc=$?
if [ "$rc" = 77 ]; then
	echo "1..0 # SKIP no libFuzzer (clang -fsanitize=fuzzer): apt-get install clang libclang-rt-14-dev"
	exit 0
fi
n=$(echo "$targets" | wc -w)
echo "1..$n"
if [ "$rc" != 0 ]; then
	sed 's/^/# /' "$FUZZ_DIR.build.log"
	i=0
	for t in $targets; do
		i=$((i + 1))
		echo "not ok $i - fuzz $t: the fuzz targets did not build"
	done
	exit 0
fi
i=0
for t in $targets; do
	i=$((i + 1))
	out=$(bash "$fuzz" --seconds "$secs" "$t" 2>&1)
	rc=$?
	line=$(echo "$out" | awk -v t="$t" '$1 == t')
	execs=$(echo "$line" | awk '{ print $2 }')
	s=$(echo "$line" | awk '{ print $3 }')
	if [ "$rc" = 0 ] && [ -n "$execs" ] && [ "$execs" -gt 0 ]; then
		echo "ok $i - fuzz $t: $execs executions in $s s, no crash"
	else
		echo "not ok $i - fuzz $t: ${line:-no result} (exit $rc)"
		echo "$out" | sed 's/^/# /'
	fi
done
exit 0
