#!/bin/sh
# test_arm64_build.sh - the AArch64 (Grace) build: scripts/check_arm64.sh
# builds a copy of the tree for aarch64-linux-gnu, trains the default job for
# 6 steps natively and under qemu-aarch64 and compares the losses (within
# 1e-5 relative, every one finite), then runs tests/test_adam_neon.sh. The
# reference is the native build's own training, run beside it. Skips unless
# `scripts/setup.sh --arm64` has cross-built StarPU (STARPU_ARM64_PREFIX;
# CI sets it up: .ci/run), as it needs Debian's arm64 libraries. About 2.5
# minutes, most of it in qemu.
set -u
SRC=${SG_SRCDIR:-.}
BUILD=${SG_BUILDDIR:-.}
. "$SRC/tests/tap_lib.sh"
if [ -z "${STARPU_ARM64_PREFIX:-}" ] && [ -f "$BUILD/.deps-build/env.sh" ]; then
	# shellcheck disable=SC1091
	. "$BUILD/.deps-build/env.sh"
fi
if [ -z "${STARPU_ARM64_PREFIX:-}" ] || ! [ -f "$STARPU_ARM64_PREFIX/lib/pkgconfig/starpu-1.4.pc" ]; then
	skip_all "no arm64 StarPU (scripts/setup.sh --arm64 builds it)"
fi
case "$(uname -m)" in x86_64) ;; *)
	skip_all "cross-building from $(uname -m) is not set up" ;;
esac
if ! [ -x "$BUILD/stepgraph" ] || [ "$(cd "$BUILD" && pwd)" != "$(cd "$SRC" && pwd)" ]; then
	skip_all "needs the in-tree native build (check_arm64.sh compares with ./stepgraph)"
fi
tap_tmpdir arm64_test

plan 3
bash "$SRC/scripts/check_arm64.sh" --steps 6 >"$TMP/out" 2>"$TMP/err"
rc=$?
sed 's/^/# /' "$TMP/out"
grep -E 'check_arm64: (ERROR|AArch64)' "$TMP/err" | sed 's/^/# /'
if grep -q 'is not an AArch64 executable\|aarch64 build failed\|does not start under qemu' "$TMP/err"; then
	ok 1 "stepgraph builds for aarch64-linux-gnu and starts under qemu"
else
	ok 0 "stepgraph builds for aarch64-linux-gnu and starts under qemu"
fi
# six rows, each with a relative difference of at most 1e-5
rows=$(grep -c '^| [0-9]' "$TMP/out")
if [ "$rc" = 0 ] && [ "$rows" = 6 ] && ! grep -q 'losses differ' "$TMP/err"; then
	ok 0 "6 steps of the default job under qemu-aarch64: every loss finite and within 1e-5 of the native build's"
else
	ok 1 "6 steps of the default job under qemu-aarch64 within 1e-5 of the native build ($rows rows, exit $rc)"
fi
if [ "$rc" = 0 ] && grep -q '^ok 5 - NEON = avx512' "$TMP/out"; then
	ok 0 "CPU Adam's NEON variant gives the AVX variants' bits (test_adam_neon)"
elif grep -q '^ok 5 # SKIP' "$TMP/out" && [ "$rc" = 0 ]; then
	ok 0 "CPU Adam's NEON variant gives the AVX2 variant's bits (no AVX-512 here)"
else
	ok 1 "CPU Adam's NEON variant against the AVX variants (see test_adam_neon)"
fi
