#!/bin/sh
# test_flops_log.sh - the step log, the summary and the metrics of a real run
# print the three rates of docs/flops.md (issue 41 item 1): TFLOPS by
# DeepSpeedExamples' formula, model TFLOPS, Megatron's TFLOPS; each metrics
# line's figures are checked against the formulas evaluated here from the
# model file's sizes (tests/flops_ref.py) and the line's own time_ms, with and
# without activation
# checkpointing (the recompute counts in TFLOPS and Megatron's, not in model
# FLOPs); mfu is null (a real run does not know its GPU's peak). Prints TAP.
set -u
SG_TEST_NAME=flops_log
. "${SG_SRCDIR:-.}/tests/test_env.sh"
plan 9
DEF="$SRC/configs/default.json"
# the default job: tiny-llama, micro-batch 1 x accumulation 4 (4 sequences a step)
check() { # check METRICS CHECKPOINTING
	"$PY" - "$1" "$SRC/models/tiny-llama.json" "$2" "$SRC/tests" <<'PYEOF'
import json, sys
sys.path.insert(0, sys.argv[4])
from flops_ref import rates
lines = [json.loads(l) for l in open(sys.argv[1])]
m = json.load(open(sys.argv[2]))
close = lambda x, y: abs(x - y) <= 1e-9 * abs(y)
assert len(lines) == 3, len(lines)
for a in lines:
    seed, model, meg = rates(m, 4, 64, sys.argv[3] == "1", a["time_ms"] / 1e3)
    assert close(a["tflops"], seed), (a["tflops"], seed)
    assert close(a["model_tflops"], model), (a["model_tflops"], model)
    assert close(a["megatron_tflops"], meg), (a["megatron_tflops"], meg)
    assert a["mfu"] is None, a
PYEOF
}
"$BIN" run "$DEF" --steps 3 --max_length 64 --log_interval 1 --warmup_steps 1 \
	--metrics "$TMP/m.jsonl" >"$TMP/run.out" 2>&1
ok $? "run 3 steps of the default job with --metrics"
grep -q "^Step 3 | Loss: [0-9.]* | Time: [0-9.]* ms | TFLOPS: [0-9.]* | Tokens/s: [0-9.]* | Model TFLOPS: [0-9.]*" "$TMP/run.out"
ok $? "the step line: TFLOPS where DeepSpeed's log has it, then Model TFLOPS, labelled"
grep -q "^  Throughput: [0-9.]* tokens/s | TFLOPS: [0-9.]* | Model TFLOPS: [0-9.]*$" "$TMP/run.out"
ok $? "the summary prints TFLOPS and model TFLOPS"
check "$TMP/m.jsonl" 0
ok $? "metrics: tflops, model_tflops, megatron_tflops are the formulas' values (c = 3), mfu null"
"$BIN" run "$DEF" --steps 3 --max_length 64 --log_interval 1 --warmup_steps 1 \
	--activation_checkpointing --metrics "$TMP/ck.jsonl" >"$TMP/ck.out" 2>&1
ok $? "the same with activation checkpointing"
check "$TMP/ck.jsonl" 1
ok $? "metrics with checkpointing: the recompute in TFLOPS and Megatron's (c = 4), not in model FLOPs"
# the step line's figures are the metrics' (two decimals)
"$PY" - "$TMP/ck.out" "$TMP/ck.jsonl" <<'PYEOF'
import json, re, sys
last = [json.loads(l) for l in open(sys.argv[2])][-1]
line = [l for l in open(sys.argv[1]) if l.startswith("Step 3 |")][0]
tf = float(re.search(r"\| TFLOPS: ([0-9.]+)", line).group(1))
mt = float(re.search(r"\| Model TFLOPS: ([0-9.]+)", line).group(1))
assert abs(tf - last["tflops"]) <= 0.006 and abs(mt - last["model_tflops"]) <= 0.006, (line, last)
PYEOF
ok $? "the step line prints the metrics' TFLOPS and model TFLOPS"
"$PY" -c 'import json, sys
a = [json.loads(l) for l in open(sys.argv[1])][-1]
assert a["tflops"] > a["megatron_tflops"] > a["model_tflops"] > 0, a' "$TMP/ck.jsonl"
ok $? "tiny-llama with checkpointing: seed > Megatron > model FLOPs (recompute, full attention)"
# MFU needs the GPU's peak: a CPU-only run naming a GPU machine prints none
"$BIN" run "$DEF" --steps 2 --max_length 64 --log_interval 1 --machine gh200 \
	--metrics "$TMP/gh.jsonl" >"$TMP/gh.out" 2>&1 && ! grep -q "MFU" "$TMP/gh.out" &&
	"$PY" -c 'import json, sys
assert all(json.loads(l)["mfu"] is None for l in open(sys.argv[1]))' "$TMP/gh.jsonl"
ok $? "a run on CPU workers naming gh200: no MFU (a GPU's peak is no CPU's), mfu null"
