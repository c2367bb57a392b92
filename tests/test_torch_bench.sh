#!/bin/sh
# test_torch_bench.sh - bench/torch_train_bench.py, the PyTorch side of
# `MODE=bench-3m scripts/bench_train.sh`, trains what stepgraph trains: on
# models/bench-3m.json (untied head) with the two DeepSpeed splits of the
# benchmark (configs/deepspeed/bench-3m-8x1.json: one micro-batch of 8;
# bench-3m-2x4.json: 4 accumulated micro-batches of 2), sequence 32 to stay
# quick, both start from stepgraph's initial weights on stepgraph's batches and
# run 5 AdamW steps (WarmupLR, clipping): every loss within 1e-5 relative and
# finite, in Debian's torch ($SYSTEM_PYTHON). The benchmark's ratios mean
# something only if this holds. Prints TAP.
set -u
SG_TEST_NAME=torch_bench
. "${SG_SRCDIR:-.}/tests/test_env.sh"
DATA=$(ls /usr/share/vim/vim*/doc/version8.txt 2>/dev/null | head -n 1)
if ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1 || [ -z "$DATA" ]; then
	skip_all "needs $BIN, python3 with torch and numpy, and vim-runtime's version8.txt"
fi
STEPS=5 SEQ=32
MODELS=${STEPGRAPH_MODELS_DIR:-$SRC/models}

for split in 8x1 2x4; do
	mb=${split%x*} ga=${split#*x}
	"$BIN" run "$SRC/configs/deepspeed/bench-3m-$split.json" --model "$MODELS/bench-3m.json" \
		--data "$DATA" --max_length $SEQ --seed 42 --steps $STEPS --ncpus 2 \
		--metrics "$TMP/sg-$split.jsonl" >"$TMP/sg-$split.out" 2>&1
	rc=$?
	ok $rc "stepgraph trains bench-3m $STEPS steps at $mb x $ga"
	[ $rc -eq 0 ] || sed 's/^/# /' "$TMP/sg-$split.out" | tail -5
	OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 "$PY" "$SRC/bench/torch_train_bench.py" \
		--model "$MODELS/bench-3m.json" --data "$DATA" --seq $SEQ --seed 42 \
		--micro-batch "$mb" --accum "$ga" --steps $STEPS --warmup 1 --threads 2 \
		--losses "$TMP/torch-$split.txt" >"$TMP/torch-$split.out" 2>&1
	rc=$?
	ok $rc "torch_train_bench.py trains the same $STEPS steps at --micro-batch $mb --accum $ga"
	[ $rc -eq 0 ] || sed 's/^/# /' "$TMP/torch-$split.out" | tail -5
	"$PY" - "$TMP/sg-$split.jsonl" "$TMP/torch-$split.txt" "$STEPS" <<'PYEOF'
import json, math, sys
sg = [json.loads(l)["loss"] for l in open(sys.argv[1])]
ref = [float(l) for l in open(sys.argv[2])]
steps = int(sys.argv[3])
assert len(sg) == len(ref) == steps, (sg, ref)
assert all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in sg + ref), (sg, ref)
for i, (a, b) in enumerate(zip(sg, ref)):
    print("# step %d: stepgraph %.7f torch %.7f rel %.1e" % (i + 1, a, b, abs(a - b) / abs(b)))
bad = [(i + 1, a, b) for i, (a, b) in enumerate(zip(sg, ref)) if abs(a - b) > 1e-5 * abs(b)]
assert not bad, bad
PYEOF
	ok $? "$mb x $ga: the $STEPS losses agree within 1e-5 relative and are finite"
done
# the two splits are the same global batch on the same sequences: the same first loss
"$PY" - "$TMP/sg-8x1.jsonl" "$TMP/sg-2x4.jsonl" <<'PYEOF'
import json, math, sys
a = json.loads(open(sys.argv[1]).readline())["loss"]
b = json.loads(open(sys.argv[2]).readline())["loss"]
print("# step 1: 8x1 %.7f 2x4 %.7f" % (a, b))
assert math.isfinite(a) and abs(a - b) <= 1e-5 * abs(a), (a, b)
PYEOF
ok $? "8 x 1 and 2 x 4 start from the same loss (same weights, same 8 sequences)"
done_testing
