#!/bin/bash
# bench_attention.sh - times the GPU attention implementations on
# FlashAttention-2's benchmark shapes and says which one `auto` should run
# (docs/gpu.md, "Attention implementations"). Run on a GPU machine, by hand
# or as scripts/gpu_verify.sh's stage attention_bench.
#
#   scripts/bench_attention.sh [--bin bench/bench_attention] [--out attention-bench.md]
#
# Shapes (bf16, causal, B 4, T 4096, hidden 2048 as FlashAttention-2's
# figures): head dim 128 (16 heads) and 64 (32 heads), each with the fp32
# and cuBLAS routes, then the cuBLAS route at 128 and 2048 MiB of score
# tiles (STEPGRAPH_ATTENTION_SCRATCH_MB's range) on head dim 128.
# Prints the table (Markdown, also written to --out) and a last line:
#   attention: D128 fwd+bwd fp32 X TFLOPS, cublas Y (Z MiB) = F of FA2's 294; best B
# Exit 1 when a run fails or the cuBLAS route's out or dq differ from the
# fp32 route's by more than 2^-5 of their largest value (P and dS rounded to
# bf16 move them by a few 2^-8 at most; tests/test_cuda_attention.c holds
# the exact bound). BENCH_ATTENTION_ARGS (words) is appended to every run
# (tests/test_bench_attention.sh shrinks the shapes with it).
set -u
BIN=${SG_BUILDDIR:-.}/bench/bench_attention
OUT=attention-bench.md
while [ "$#" -gt 0 ]; do
	case "$1" in
	--bin) BIN=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	-h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench_attention.sh: unknown option $1 (--help)" >&2; exit 2 ;;
	esac
done
[ -x "$BIN" ] || { echo "bench_attention.sh: no $BIN (a build with CUDA: make bench/bench_attention)" >&2; exit 2; }
unset STEPGRAPH_ATTENTION_IMPL STEPGRAPH_ATTENTION_SCRATCH_MB
# shellcheck disable=SC2206
EXTRA=(${BENCH_ATTENTION_ARGS:-})
LINES=$(mktemp "${TMPDIR:-/tmp}/bench_attention.XXXXXX")
trap 'rm -f "$LINES"' EXIT
rc=0
run() { # run ARGS...: one bench_attention call, its impl= lines kept
	local out
	out=$("$BIN" "$@" "${EXTRA[@]}" 2>&1) || rc=1
	printf '%s\n' "$out" >&2
	printf '%s\n' "$out" | grep '^impl=' >>"$LINES"
	printf '%s\n' "$out" | grep -q '^impl=.* failed' && rc=1
}
run --impl fp32,cublas --D 128 --Hq 16 --Hkv 16
run --impl fp32,cublas --D 64 --Hq 32 --Hkv 32
run --impl cublas --D 128 --Hq 16 --Hkv 16 --scratch-mb 128
run --impl cublas --D 128 --Hq 16 --Hkv 16 --scratch-mb 2048

# the table and the verdict, from the impl= lines (key=value words)
awk -v out="$OUT" '
function f(k,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } return "" }
BEGIN {
	hdr = "| impl | D | heads | T | tile rows | scratch MiB | fwd ms | fwd+bwd ms | fwd TFLOPS | fwd+bwd TFLOPS | of FA2 (294) | out diff | dq diff |"
	cbmb = "-"; print hdr > out; print "|---|---|---|---|---|---|---|---|---|---|---|---|---|" > out
	bad = 0
}
/failed/ { bad = 1; next }
{
	impl = f("impl"); d = f("D"); tf = f("fwdbwd_tflops") + 0
	printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", impl, d, f("Hq"), f("T"),
		f("tile"), f("scratch_mb"), f("fwd_ms"), f("fwdbwd_ms"), f("fwd_tflops"), f("fwdbwd_tflops"),
		f("of_fa2"), f("out_diff"), f("dq_diff") > out
	if (impl == "cublas" && (f("out_diff") + 0 > 0.03125 || f("dq_diff") + 0 > 0.03125 || f("out_diff") == "nan")) bad = 1
	if (d == 128 && impl == "fp32" && tf > fp) fp = tf
	if (d == 128 && impl == "cublas" && tf > cb) { cb = tf; cbmb = f("scratch_mb") }
}
END {
	best = cb > fp ? "cublas" : "fp32"
	printf "attention: D128 fwd+bwd fp32 %.1f TFLOPS, cublas %.1f (%s MiB) = %.2f of FA2'"'"'s 294; best %s%s\n",
		fp, cb, cbmb, (cb > fp ? cb : fp) / 294, best, bad ? "; a run failed or cublas disagrees with fp32" : "" > out
	exit bad
}' "$LINES" || rc=1
cat "$OUT"
exit $rc
