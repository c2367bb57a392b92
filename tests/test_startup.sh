#!/bin/sh
# test_startup.sh - a run's start-up (scripts/bench_gpu_suite.py reads it):
# the header's "start-up:" line gives the whole and its parts (StarPU's start,
# the state's allocation and zeroing, the initial state); the state is zeroed
# on STEPGRAPH_INIT_THREADS threads (common/first_touch.h) without changing
# any result: three steps of a Llama whose fp32 embedding and head masters
# are 64 MiB each (so that they are cut into pieces zeroed by different
# threads) give the same loss and gradient norm, bit for bit, with 1 and with
# 3 threads; a bad thread count is refused before StarPU starts. Nothing is
# timed. Prints TAP.
set -u
SG_TEST_NAME=startup
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"
plan 5

# 35.4 M parameters, most of them the untied embedding and head
# (vocabulary 65536 x hidden 256: 64 MiB of fp32 each)
cp "$SRC/tests/data/models/wide-head-llama.json" "$TMP/model.json"
cat >"$TMP/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
JSON
ARGS="$TMP/ds.json --model $TMP/model.json --max_length 32 --ncpus 2 --steps 3"

STEPGRAPH_INIT_THREADS=1 "$BIN" run $ARGS --metrics "$TMP/one.jsonl" >"$TMP/one.out" 2>&1
r1=$?
STEPGRAPH_INIT_THREADS=3 "$BIN" run $ARGS --metrics "$TMP/three.jsonl" >"$TMP/three.out" 2>&1
[ $r1 -eq 0 ] && [ $? -eq 0 ]
ok $? "3 steps with the state zeroed on 1 and on 3 threads"
"$PY" - "$TMP/one.jsonl" "$TMP/three.jsonl" <<'PYEOF'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 3, (len(a), len(b))
for x, y in zip(a, b):
    assert (x["loss"], x["grad_norm"]) == (y["loss"], y["grad_norm"]), (x, y)
PYEOF
ok $? "the same losses and gradient norms, bit for bit, every step"
line=$(grep -m1 '^  start-up: ' "$TMP/three.out")
echo "$line" | awk '{
	# "  start-up: T s (StarPU A s, state allocation B s, initial state C s)"
	gsub(/[(),]/, " ")
	t = $2; a = $5; b = $9; c = $13
	exit !($3 == "s" && t > 0 && a >= 0 && b >= 0 && c >= 0 && a + b + c <= t + 0.01)
}'
ok $? "the header's start-up line: the whole and its three parts, which it covers ($line)"
awk '/^  start-up: / { s = NR } /steps, log every/ { e = NR } END { exit !(s && e == s + 1) }' "$TMP/three.out"
ok $? "the start-up line closes the header's start-up part, just before the steps"
STEPGRAPH_INIT_THREADS=0 "$BIN" run $ARGS >"$TMP/bad.out" 2>&1
[ $? -ne 0 ] && grep -q "STEPGRAPH_INIT_THREADS=0: expected a number of threads from 1 to 256" "$TMP/bad.out"
ok $? "STEPGRAPH_INIT_THREADS=0 refused, naming the variable"
