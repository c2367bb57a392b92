#!/bin/sh
# test_cpu_gemm.sh - the CPU's bf16 products (codelets/cpu/gemm.h) in whole
# runs. The references: the CPU's flag list in /proc/cpuinfo (read here, not
# through the program's cpuid probe) for which engine `stepgraph version`
# must name, and PyTorch's bf16 mixed precision (bench/torch_train_bench.py
# --bf16: torch.autocast on the CPU, Debian's torch) training the default
# job's model from the same weights on the same batches: every one of 10
# steps' losses within 2e-3 relative of PyTorch's, and finite. Where the CPU
# has AMX-BF16 the bf16 run must have used it (its losses differ in the bits
# from SG_CPU_GEMM=sgemm's, which still agree with PyTorch within 2e-3), and
# an fp32 run must be untouched by it (the same bits with either setting).
# SG_CPU_GEMM's bad values are refused by name.
set -u
SG_TEST_NAME=cpu_gemm
. "${SG_SRCDIR:-.}/tests/test_env.sh"
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*://')
amx=0
case " $flags " in *" amx_bf16 "*) case " $flags " in *" amx_tile "*) amx=1 ;; esac ;; esac

plan 7

# 1. the engine `version` names follows the CPU's flags
line=$("$BIN" version | grep '^CPU products of bf16 runs:')
echo "# $line (cpuinfo amx_bf16 and amx_tile: $amx)"
if [ $amx = 1 ]; then
	case "$line" in *": amx,"*) r=0 ;; *) r=1 ;; esac
else
	case "$line" in *": sgemm,"*) r=0 ;; *) r=1 ;; esac
fi
ok $r "version names the engine the CPU's flags call for"

# 2-3. SG_CPU_GEMM's bad values are refused by name
SG_CPU_GEMM=fast "$BIN" run --steps 1 >"$TMP/bad.out" 2>&1
r=$?
grep -q 'SG_CPU_GEMM=fast: unknown engine' "$TMP/bad.out" && [ $r -eq 1 ]
ok $? "SG_CPU_GEMM=fast: refused, naming the variable (exit 1)"
if [ $amx = 1 ]; then
	skip "this CPU has AMX: SG_CPU_GEMM=amx is not refused here"
else
	SG_CPU_GEMM=amx "$BIN" run --steps 1 >"$TMP/noamx.out" 2>&1
	r=$?
	grep -q 'SG_CPU_GEMM=amx: ' "$TMP/noamx.out" && [ $r -eq 1 ]
	ok $? "SG_CPU_GEMM=amx without AMX: refused, saying why (exit 1)"
fi

# the default job (tiny-llama, 4 sequences of 256 tokens per step) in bf16
train() { # NAME ENGINE [ARGS...]: 10 steps, every loss in NAME.jsonl
	name=$1 engine=$2
	shift 2
	SG_CPU_GEMM=$engine "$BIN" run --steps 10 --warmup_steps 1 --ncpus 2 "$@" \
		--metrics "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1 ||
		{ sed 's/^/# /' "$TMP/$name.out" | tail -5; return 1; }
}
train bf16 auto --set bf16.enabled=true
r1=$?
train bf16_sgemm sgemm --set bf16.enabled=true
r2=$?

# 4-5. against PyTorch's bf16 mixed precision
if ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
	skip "no torch and numpy in $PY"
	skip "no torch and numpy in $PY"
else
	# the default job's model, data, batch (4 x 256 tokens) and seed
	"$PY" "$SRC/bench/torch_train_bench.py" --bf16 --threads 2 --steps 10 --warmup 1 \
		--losses "$TMP/torch.txt" >"$TMP/torch.out" 2>&1 || sed 's/^/# /' "$TMP/torch.out"
	compare() { # METRICS: every loss within 2e-3 relative of PyTorch's, finite
		"$PY" "$SRC/tests/compare_losses.py" "$1" "$TMP/torch.txt" --steps 10 --rel 2e-3 \
			--learns 0.1
	}
	[ $r1 -eq 0 ] && compare "$TMP/bf16.jsonl"
	ok $? "bf16 run (engine $( [ $amx = 1 ] && echo amx || echo sgemm)): 10 losses within 2e-3 of PyTorch's autocast bf16"
	[ $r2 -eq 0 ] && compare "$TMP/bf16_sgemm.jsonl"
	ok $? "bf16 run, SG_CPU_GEMM=sgemm: 10 losses within 2e-3 of PyTorch's autocast bf16"
fi

# 6. AMX engaged: the bf16 run's bits differ from sgemm's
if [ $amx = 1 ]; then
	[ $r1 -eq 0 ] && [ $r2 -eq 0 ] && "$PY" - "$TMP/bf16.jsonl" "$TMP/bf16_sgemm.jsonl" <<'PYEOF'
import json, math, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
sys.exit(0 if len(a) == len(b) == 10 and all(math.isfinite(x) for x in a + b) and a != b else 1)
PYEOF
	ok $? "with AMX the bf16 run's products are not sgemm's (the losses differ in their bits)"
else
	skip "no AMX-BF16 on this CPU"
fi

# 7. fp32 runs never use it: the same bits with SG_CPU_GEMM=auto and sgemm
train fp32 auto && train fp32_sgemm sgemm &&
	"$PY" "$SRC/tests/sglog.py" same "$TMP/fp32.jsonl" "$TMP/fp32_sgemm.jsonl" --steps 10
ok $? "fp32 runs: the same losses, bit for bit, whatever SG_CPU_GEMM says"
