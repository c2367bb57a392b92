#!/bin/sh
# test_blas_core.sh - stepgraph gives OpenBLAS the kernels this CPU can run
# (codelets/cpu/blas_core.h). The reference is the CPU's own flag list in
# /proc/cpuinfo, read here independently of the compiler's cpuid probe: on
# an Intel CPU with AVX-512 (F, VL, BW, DQ) the kernels must be AVX-512
# ones, with AVX2 and FMA no older than Haswell. A caller's OPENBLAS_CORETYPE is kept, and a
# run whose process was re-executed trains as one that was not (same
# arguments, losses within float rounding of a run on the caller's kernels).
set -u
SG_TEST_NAME=blas_core
. "${SG_SRCDIR:-.}/tests/test_env.sh"
unset OPENBLAS_CORETYPE STEPGRAPH_BLAS_DETECTED

line=$("$BIN" version | grep '^BLAS:')
case "$line" in *OpenBLAS*) ;; *)
	skip_all "the build's BLAS is not OpenBLAS ($line)" ;;
esac
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*://')
has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
if [ -z "$flags" ]; then
	skip_all "no /proc/cpuinfo flags"
fi

plan 6

kernels=$(printf '%s\n' "$line" | sed -n 's/.*kernels \([A-Za-z0-9()]*\).*/\1/p')
echo "# $line"
echo "# cpu flags: avx512f $(has avx512f && echo y || echo n), avx512_bf16 $(has avx512_bf16 && echo y || echo n), avx2 $(has avx2 && echo y || echo n)"
old="Unknown Katmai Coppermine Northwood Prescott Banias Atom Core2 Penryn Dunnington Nehalem Sandybridge Opteron Barcelona Bobcat"
is_old() { case " $old " in *" $1 "*) return 0 ;; esac; return 1; }

# 1. the kernels match the instructions the CPU has: on an Intel CPU with
# AVX-512, AVX-512 kernels; OpenBLAS's AMD kernels ("Zen", AVX2-class, whose
# FMA rate Zen 4's 256-bit datapaths match) are kept
vendor=$(grep -m1 '^vendor_id' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*: *//')
if [ "$vendor" = GenuineIntel ] && has avx512f && has avx512vl && has avx512bw && has avx512dq; then
	case "$kernels" in SkylakeX | Cooperlake | SapphireRapids) ok 0 "Intel AVX-512 CPU: AVX-512 kernels ($kernels)" ;;
	*) ok 1 "Intel AVX-512 CPU but kernels $kernels" ;; esac
elif has avx2 && has fma; then
	if is_old "$kernels"; then ok 1 "AVX2 CPU but pre-Haswell kernels $kernels"; else ok 0 "AVX2 CPU: kernels $kernels"; fi
else
	skip "no AVX2 on this CPU: OpenBLAS's own choice ($kernels) stands"
fi

# 2. the line says who chose: stepgraph when OpenBLAS's own choice was old
case "$line" in
*"chosen by stepgraph; OpenBLAS's own choice: "*)
	own=$(printf '%s\n' "$line" | sed -n "s/.*OpenBLAS's own choice: \([A-Za-z0-9()]*\)).*/\1/p")
	if is_old "$own"; then ok 0 "stepgraph replaced OpenBLAS's $own by $kernels"; else ok 1 "replaced a modern choice $own"; fi ;;
*"(OpenBLAS's own choice)"*)
	if is_old "$kernels" && has avx2; then ok 1 "kept old kernels $kernels"; else ok 0 "OpenBLAS's own choice $kernels kept"; fi ;;
*) ok 1 "unexpected line: $line" ;;
esac

# 3. a caller's OPENBLAS_CORETYPE is kept
forced=$(OPENBLAS_CORETYPE=Prescott "$BIN" version | grep '^BLAS:')
case "$forced" in *"kernels Prescott (OPENBLAS_CORETYPE=Prescott)"*) ok 0 "OPENBLAS_CORETYPE=Prescott kept" ;;
*) ok 1 "OPENBLAS_CORETYPE=Prescott gave: $forced" ;; esac

# 4-6. a run on the chosen kernels (re-executed, same arguments) against one
# on Prescott's: both finish, the losses agree to float rounding (different
# kernels sum in different orders) and are finite
steps="--steps 4 --ncpus 1 --seed 7"
"$BIN" run $steps --metrics "$TMP/a.jsonl" >"$TMP/a.out" 2>&1
ra=$?
OPENBLAS_CORETYPE=Prescott "$BIN" run $steps --metrics "$TMP/b.jsonl" >"$TMP/b.out" 2>&1
rb=$?
if [ $ra -eq 0 ] && [ $rb -eq 0 ]; then ok 0 "both runs finish"; else
	ok 1 "runs failed ($ra, $rb)"
	tail -n 5 "$TMP/a.out" "$TMP/b.out" | sed 's/^/# /'
fi
if "$PY" - "$TMP/a.jsonl" "$TMP/b.jsonl" <<'EOF'; then ok 0 "4 steps: losses agree within 1e-5 relative"; else ok 1 "losses differ"; fi
import json, math, sys
def losses(p):
    with open(p) as f:
        return [json.loads(l)["loss"] for l in f if l.strip() and "loss" in json.loads(l)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("# chosen kernels:", a)
print("# Prescott:      ", b)
ok = len(a) == 4 and len(b) == 4 and all(math.isfinite(x) and math.isfinite(y) and abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b))
sys.exit(0 if ok else 1)
EOF
if [ "$(grep -c '"loss"' "$TMP/a.jsonl" 2>/dev/null)" = 4 ]; then
	ok 0 "the re-executed run kept its arguments (4 steps in its --metrics file)"
else
	ok 1 "the re-executed run's output"
	tail -n 5 "$TMP/a.out" | sed 's/^/# /'
fi
