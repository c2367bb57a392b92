#!/bin/sh
# test_adam_neon.sh - the AArch64 (Grace) NEON variant of CPU Adam, built with
# Debian's cross compiler and run under qemu-aarch64, gives the same bits as
# the AVX2 and AVX-512 variants built natively: steps with the bf16 copy and
# rollbacks, AdamW and Adam with L2, no bias correction, a gradient scale,
# skip_nonfinite with Inf and NaN gradients, Lion and Adagrad, every tail
# length, and the fused 16-bit chain (sg_adam_step_lowp, sg_adam_redo_lowp:
# bf16 gradient in, bf16 parameters out) (tests/adam_variants_dump.c). The AVX variants themselves are checked
# against torch by tests/test_adam. Skips without aarch64-linux-gnu-gcc or
# qemu-aarch64 (scripts/setup.sh installs both) or on a non-x86 host. This
# checks the arithmetic only: the variant's speed on a real Grace is not
# measured here.
set -u
SRC=${SG_SRCDIR:-.}
. "$SRC/tests/tap_lib.sh"
CROSS=${AARCH64_CC:-aarch64-linux-gnu-gcc}
QEMU=${QEMU_AARCH64:-qemu-aarch64}
CC=${CC:-gcc}
if ! command -v "$CROSS" >/dev/null 2>&1 || ! command -v "$QEMU" >/dev/null 2>&1; then
	skip_all "needs $CROSS and $QEMU (Debian: gcc-aarch64-linux-gnu, qemu-user)"
fi
case "$(uname -m)" in x86_64) ;; *)
	skip_all "the comparison is with the x86 AVX variants (this is $(uname -m))" ;;
esac
tap_tmpdir adam_neon

plan 6
check() { if [ "$1" = 0 ]; then ok 0 "$2"; else ok 1 "$2"; fi; }

files="$SRC/codelets/cpu/adam.c $SRC/codelets/cpu/adam_variants.c $SRC/codelets/cpu/adam_lowp.c $SRC/codelets/cpu/cast.c $SRC/codelets/cpu/lion_adagrad.c $SRC/common/error.c $SRC/common/dtype.c $SRC/tests/adam_variants_dump.c"
# lion_adagrad.c's flags in Makefile.am (they let GCC vectorise its loops;
# they change no value, and nothing in adam.c)
fl="-fno-math-errno -fno-trapping-math"
# shellcheck disable=SC2086
"$CROSS" -std=gnu11 -O2 $fl -Wall -Wextra -Werror -static -I"$SRC" $files -lm -lpthread \
	-o "$TMP/dump_arm" 2>"$TMP/cross.err"
check $? "the AArch64 build of adam*.c and lion_adagrad.c compiles without a warning ($CROSS -static)"
[ -s "$TMP/cross.err" ] && sed 's/^/# /' "$TMP/cross.err"
# shellcheck disable=SC2086
"$CC" -std=gnu11 -O2 $fl -I"$SRC" $files -lm -lpthread -o "$TMP/dump_x86" 2>"$TMP/native.err" ||
	sed 's/^/# /' "$TMP/native.err"

"$QEMU" "$TMP/dump_arm" auto >"$TMP/neon.bin" 2>"$TMP/neon.err"
rc=$?
summary=$(cat "$TMP/neon.err")
echo "# qemu: $summary"
case "$summary" in "variant neon "*) r=$rc ;; *) r=1 ;; esac
check "$r" "on AArch64, auto picks the NEON variant and it runs every case under qemu"

# the results are real: every value finite and most parameters moved
finite=$(printf '%s\n' "$summary" | sed -n 's/.* values \([0-9]*\) finite \([0-9]*\) changed \([0-9]*\).*/\1 \2 \3/p')
set -- $finite
r=1
[ $# = 3 ] && [ "$1" -gt 0 ] && [ "$2" = "$1" ] && [ "$3" -gt $(($1 * 9 / 10)) ] && r=0
check $r "NEON results: ${1:-?} values, ${2:-?} finite, ${3:-?} parameters changed"

for isa in avx2 avx512; do
	if ! "$TMP/dump_x86" $isa >"$TMP/$isa.bin" 2>"$TMP/$isa.err"; then
		if grep -q 'lacks' "$TMP/$isa.err"; then
			skip "this CPU has no $isa"
		else
			ok 1 "the $isa variant ran: $(cat "$TMP/$isa.err")"
		fi
		continue
	fi
	if cmp -s "$TMP/neon.bin" "$TMP/$isa.bin"; then
		ok 0 "NEON = $isa, bit for bit ($(wc -c <"$TMP/neon.bin") bytes of p, m, v, bf16 copies and rollbacks)"
	else
		ok 1 "NEON = $isa, bit for bit: $(cmp "$TMP/neon.bin" "$TMP/$isa.bin" 2>&1 | head -n 1)"
	fi
done

# the comparison can fail: the scalar variant (no fused multiply-add) differs
"$QEMU" "$TMP/dump_arm" scalar >"$TMP/scalar.bin" 2>/dev/null
if cmp -s "$TMP/neon.bin" "$TMP/scalar.bin"; then r=1; else r=0; fi
check $r "the AArch64 scalar variant, which rounds each product, does not give NEON's bits"
