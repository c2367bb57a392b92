#!/bin/sh
# test_bench_attention.sh - bench/bench_attention, the program that times
# the GPU attention implementations (docs/gpu.md, "Attention
# implementations"), in its emulated build on a small shape: it runs each
# implementation asked for and names the fastest; it counts FLOPs as
# FlashAttention's benchmarks do (4 B Hq D per visible (query, key) pair,
# recomputed here from the shape); the cuBLAS route's out and dq agree
# with the fp32 route's to bf16 precision; bad options are refused with a
# message naming them. scripts/bench_attention.sh (gpu_verify.sh's stage
# attention_bench) tabulates its runs and fails when the cuBLAS route
# disagrees with the fp32 one. Times are printed, never checked.
set -u
SG_TEST_NAME=bench_attention
. "${SG_SRCDIR:-.}/tests/test_env.sh"
BENCH=$BUILD/bench/bench_attention_emu
if ! [ -x "$BENCH" ]; then
	skip_all "no $BENCH"
fi
unset STEPGRAPH_ATTENTION_IMPL STEPGRAPH_ATTENTION_SCRATCH_MB
plan 10

field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" "$TMP/$1" | head -n1; }

# GQA 2:1, window 20 over T 48, tiles of 16 rows
"$BENCH" --impl fp32,cublas --B 1 --T 48 --Hq 2 --Hkv 1 --D 64 --window 20 --tile 16 \
	--iters 1 --warmup 0 >"$TMP/run" 2>&1
ok $? "bench_attention runs fp32 and cublas"
grep '^impl=fp32 ' "$TMP/run" >"$TMP/fp32"
grep '^impl=cublas ' "$TMP/run" >"$TMP/cublas"
[ -s "$TMP/fp32" ] && [ -s "$TMP/cublas" ] && [ "$(field cublas tile)" = 16 ]
ok $? "one line per implementation (the cuBLAS one with its 16-row tiles)"
best=$(sed -n 's/^best=//p' "$TMP/run")
[ "$best" = fp32 ] || [ "$best" = cublas ]; ok $? "best= names one of them ($best)"

# visible pairs with window 20, T 48: 20 * 21 / 2 + 28 * 20 = 770; 4 B Hq D each
"$PY" -c 'import sys; g = float(sys.argv[1]); w = 4 * 1 * 2 * 64 * (20 * 21 / 2 + 28 * 20) / 1e9; sys.exit(abs(g - w) > 1e-6 * w)' \
	"$(field fp32 fwd_gflop)"
ok $? "forward FLOPs as FlashAttention counts them ($(field fp32 fwd_gflop) GFLOP)"
# P and dS rounded to bf16 (2^-8): a few such roundings of max|out| at most
"$PY" -c 'import sys; sys.exit(not all(0 <= float(x) <= 2**-5 for x in sys.argv[1:]))' \
	"$(field cublas out_diff)" "$(field cublas dq_diff)"
ok $? "cublas out and dq agree with fp32's within 2^-5 of their max (out $(field cublas out_diff), dq $(field cublas dq_diff))"

"$BENCH" --impl auto --B 1 --T 16 --Hq 1 --Hkv 1 --D 8 --iters 1 --warmup 0 >"$TMP/auto" 2>&1
grep -q '^impl=fp32 ' "$TMP/auto"; ok $? "--impl auto runs the documented default, fp32"

"$BENCH" --impl fp32,cudnn >"$TMP/bad1" 2>&1
[ $? = 2 ] && grep -q -- '--impl=cudnn: cuDNN' "$TMP/bad1"
ok $? "--impl cudnn is refused (exit 2), naming the value"
"$BENCH" --T 4k >"$TMP/bad2" 2>&1
[ $? = 2 ] && grep -q -- '--T 4k: expected a whole number' "$TMP/bad2"
ok $? "--T 4k is refused, naming the option"

# scripts/bench_attention.sh on the emulated build, shapes shrunk: 4 runs, 6 rows
BENCH_ATTENTION_ARGS="--B 1 --T 24 --iters 1 --warmup 0" \
	bash "$SRC/scripts/bench_attention.sh" --bin "$BENCH" --out "$TMP/ab.md" >"$TMP/ab.out" 2>"$TMP/ab.err"
rc=$?
[ "$rc" = 0 ] && [ "$(grep -c '^| \(fp32\|cublas\) |' "$TMP/ab.md")" = 6 ] &&
	tail -n1 "$TMP/ab.out" | grep -q "^attention: D128 fwd+bwd fp32 .* TFLOPS, cublas .* of FA2's 294; best "
ok $? "bench_attention.sh: 6 rows and the verdict line (exit $rc)"
# a cuBLAS route that disagrees with fp32 (a stand-in program printing such a line) fails it
cat >"$TMP/fake" <<'FAKE'
#!/bin/sh
echo "impl=fp32 D=128 Hq=16 fwdbwd_tflops=10.0 out_diff=0.00e+00 dq_diff=0.00e+00"
echo "impl=cublas D=128 Hq=16 fwdbwd_tflops=90.0 out_diff=5.00e-01 dq_diff=1.00e-03"
FAKE
chmod +x "$TMP/fake"
bash "$SRC/scripts/bench_attention.sh" --bin "$TMP/fake" --out "$TMP/fake.md" >"$TMP/fake.out" 2>&1
rc=$?
[ "$rc" = 1 ] && tail -n1 "$TMP/fake.out" | grep -q "best cublas; a run failed or cublas disagrees with fp32"
ok $? "bench_attention.sh: out differing by 0.5 fails it (exit $rc)"
