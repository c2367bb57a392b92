#!/usr/bin/env bash
# sanitize.sh - the pure-C unit tests (no StarPU at run time) under
# AddressSanitizer + UndefinedBehaviorSanitizer, leak detection on.
#
#   scripts/sanitize.sh                 # configure (once), build, run; TAP results in
#                                       # build-asan/tests/*.trs, summary last
#   scripts/sanitize.sh tests/test_data # only these tests (no TSan run)
#
# By default also tests/test_adam under ThreadSanitizer (the threads of
# sg_adam_step_parallel), as tests/test_adam_tsan.
#
# A VPATH build in ${ASAN_BUILD_DIR:-<repo>/build-asan}, from a copy of the
# sources in build-asan/src (the tree itself is configured in place, and
# autoconf refuses a VPATH build from a configured tree): src/configure
# $STEPGRAPH_CONFIGURE_FLAGS --without-cuda (nvcc objects cannot be
# instrumented) with clang and -fsanitize=address,undefined
# -fno-sanitize-recover=all, so any report fails the test that caused it.
# Only the test programs and the libraries they link are built (make
# check-TESTS), not the StarPU side: the shell tests that run `stepgraph`
# start StarPU's threads, which are not checked here. LeakSanitizer is on
# (ASAN_OPTIONS=detect_leaks=1): these programs do not link StarPU, and they
# free what they allocate. Needs .deps-build/env.sh (scripts/setup.sh).
# Exit status: that of make check-TESTS (0 when every test passed); 77 when
# clang or its sanitizer runtimes are missing.
# Environment: ASAN_BUILD_DIR (the build directory), CLANG and CLANGXX (the
# compilers, default clang and clang++), JOBS (make -j, default nproc),
# ASAN_OPTIONS and UBSAN_OPTIONS (default: leaks detected, halt on the first
# report), STEPGRAPH_CONFIGURE_FLAGS (from .deps-build/env.sh). --help prints
# this.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BUILD=${ASAN_BUILD_DIR:-$REPO_ROOT/build-asan}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
CC_=${CLANG:-clang}
CXX_=${CLANGXX:-clang++}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# C++ (the CUDA emulator): the function and vptr checks need UBSan's C++
# runtime, which clang links only when it links with clang++; the emulated
# tests link with the C driver.
CXXSAN="$SAN -fno-sanitize=function,vptr"


# The test programs of Makefile.am (check_PROGRAMS without the CUDA-device
# ones), but tests/test_cuda_emu: it tests the emulator's own fault detection
# (kernels that write past an allocation must die of SIGSEGV on its guard
# pages, which ASan intercepts first) and passes out-of-range enum values on
# purpose. The emulated kernels still run under ASan in the *_emu tests.
# Shell tests are not picked, tests/test_ranks.sh among them: it runs
# `stepgraph` under mpirun, several processes each with StarPU's threads
# and Open MPI's, neither built with the sanitizers (this script builds only
# the test programs, not StarPU's side nor Open MPI); the MPI-free part it relies on, the dp > 1 graphs, is in tests/test_graph here.
# tests/test_dist (runtime/dist/, linked with Open MPI) is left out for the
# same reason: Makefile.am adds it after the first check_PROGRAMS list; so is
# tests/test_buffer_cache, which starts StarPU (its allocations at shutdown
# are not freed).
default_tests() {
	awk '/^check_PROGRAMS =/ { on = 1; sub(/^check_PROGRAMS =/, "") }
		on { for (i = 1; i <= NF; i++) if ($i ~ /^tests\// && $i != "tests/test_cuda_emu") print $i
			if ($NF != "\\") exit }' \
		"$REPO_ROOT/Makefile.am"
}

if ! command -v "$CC_" >/dev/null 2>&1 ||
	! echo 'int main(void) { return 0; }' | "$CC_" -x c $SAN - -o /dev/null >/dev/null 2>&1; then
	say "$CC_ with -fsanitize=address,undefined is not available (apt-get install clang libclang-rt-14-dev)"
	exit 77
fi

if [ -z "${STEPGRAPH_CONFIGURE_FLAGS+x}" ]; then
	# shellcheck disable=SC1091
	. "$REPO_ROOT/.deps-build/env.sh" || { say "no .deps-build/env.sh: run scripts/setup.sh"; exit 2; }
fi
[ -x "$REPO_ROOT/configure" ] || (cd "$REPO_ROOT" && autoreconf -fi)

tests=("$@")
tsan=0
[ "${#tests[@]}" -gt 0 ] || { mapfile -t tests < <(default_tests); tsan=1; }

# The sources (tracked and new files, git's view; every file without git) and
# the autotools outputs, mtimes kept so that make rebuilds only what changed.
mkdir -p "$BUILD/src"
(
	cd "$REPO_ROOT"
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git ls-files -co --exclude-standard -z
	else
		find . -path ./build-asan -prune -o -path ./build-fuzz\* -prune -o -path ./.git -prune \
			-o -type f -print0
	fi
	for f in configure Makefile.in aclocal.m4 sg_autoconf.h.in build-aux m4; do
		if [ -e "$f" ]; then find "$f" -type f -print0; fi
	done
) | (cd "$REPO_ROOT" && tar --null -T - -cf -) | tar -C "$BUILD/src" -xf -
cd "$BUILD"
flags_now="$STEPGRAPH_CONFIGURE_FLAGS|$CC_|$CXX_|$SAN|$CXXSAN"
if [ ! -f Makefile ] || [ ! -f config.status ] || [ config.status -ot src/configure ] ||
	[ "$(cat .sanitize-flags 2>/dev/null)" != "$flags_now" ]; then
	cfg=()
	read -r -a cfg <<<"$STEPGRAPH_CONFIGURE_FLAGS"
	say "configuring $BUILD (clang, ASan + UBSan, --without-cuda)"
	./src/configure "${cfg[@]}" --without-cuda CC="$CC_" CXX="$CXX_" \
		CFLAGS="-O1 -g $SAN" CXXFLAGS="-O1 -g $CXXSAN" LDFLAGS="$SAN" >configure.log 2>&1 ||
		{ tail -30 configure.log >&2; say "configure failed ($BUILD/configure.log)"; exit 2; }
	# objects built with other flags would stay: start clean
	[ ! -f .sanitize-flags ] || make clean >/dev/null 2>&1 || true
	printf '%s\n' "$flags_now" >.sanitize-flags
fi

# Reports go to the test's log (and fail it); leaks included.
# detect_stack_use_after_return stays off: it makes the emulated kernels
# (a fiber per CUDA thread) 8x slower.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
rm -f tests/*.trs tests/*.log test-suite.log
say "make -j$JOBS check-TESTS (${#tests[@]} tests)"
rc=0
make -j"$JOBS" check-TESTS TESTS="${tests[*]}" >make.log 2>&1 || rc=$?
grep -E '^(PASS|FAIL|SKIP|ERROR|XPASS|XFAIL):' make.log | grep -v '^PASS' >&2 || true
if [ "$rc" != 0 ]; then
	tail -40 make.log >&2
	[ -f test-suite.log ] && cat test-suite.log >&2
fi
# ThreadSanitizer on the one multi-threaded kernel outside StarPU:
# sg_adam_step_parallel (codelets/cpu/adam.c, pthreads), through
# tests/test_adam, built directly with clang -fsanitize=thread; its TAP
# results become tests/test_adam_tsan.trs.
if [ "$tsan" = 1 ]; then
	say "tests/test_adam under ThreadSanitizer"
	mkdir -p tsan
	if "$CC_" -std=gnu11 -O1 -g -fsanitize=thread -I"$REPO_ROOT" \
		"$REPO_ROOT"/codelets/cpu/adam.c "$REPO_ROOT"/codelets/cpu/adam_variants.c \
		"$REPO_ROOT"/codelets/cpu/adam_lowp.c "$REPO_ROOT"/codelets/cpu/lion_adagrad.c \
		"$REPO_ROOT"/codelets/cpu/cast.c \
		"$REPO_ROOT"/common/error.c "$REPO_ROOT"/common/dtype.c "$REPO_ROOT"/tests/test_adam.c \
		-lm -lpthread -o tsan/test_adam >tsan/build.log 2>&1; then
		TSAN_OPTIONS=halt_on_error=1:exitcode=66 SG_SRCDIR="$REPO_ROOT" \
			"${SHELL:-/bin/sh}" src/build-aux/tap-driver.sh --test-name tests/test_adam_tsan \
			--log-file tests/test_adam_tsan.log --trs-file tests/test_adam_tsan.trs \
			--color-tests no --enable-hard-errors yes --expect-failure no -- tsan/test_adam \
			>/dev/null 2>&1 || true
		grep -q ':global-test-result: PASS' tests/test_adam_tsan.trs 2>/dev/null || {
			rc=${rc/#0/1}
			say "test_adam under TSan failed: $BUILD/tests/test_adam_tsan.log"
		}
	else
		say "could not build test_adam with -fsanitize=thread ($BUILD/tsan/build.log); skipped"
	fi
fi
cat tests/*.trs 2>/dev/null | awk '$1 == ":test-result:" {
		if ($2 == "PASS") p++; else if ($2 == "SKIP") s++; else f++ }
	END { printf "sanitize: %d passed, %d failed, %d skipped (ASan + UBSan; TSan: test_adam_tsan)\n", p, f, s }' >&2
exit "$rc"
