#!/bin/sh
# test_startup.sh - a run's start-up (scripts/bench_gpu_suite.py reads it):
# the header's "start-up:" line gives the whole and its parts (the process's
# start to the trainer, the compile, the state's shapes and the data, StarPU's
# start, the state's allocation and zeroing, the initial state) and the
# state's size, none of it pinned without CUDA workers; the state is zeroed
# on STEPGRAPH_INIT_THREADS threads (common/first_touch.h) without changing
# any result: three steps of a Llama whose fp32 embedding and head masters
# are 64 MiB each (so that they are cut into pieces zeroed by different
# threads, and converted into StarPU's buffers in parts, common/par_for.h)
# give the same loss and gradient norm, bit for bit, with 1 and with 3
# threads; a bad thread count is refused before StarPU starts. Nothing is
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
"$PY" - "$line" <<'PYEOF'
import re, sys
# "  start-up: T s (config P s, compile C s, state and data D s, StarPU A s,
#  state allocation B s, initial state I s); state X GiB, Y GiB of it pinned"
m = re.fullmatch(r"  start-up: ([0-9.]+) s \(config ([0-9.]+) s, compile ([0-9.]+) s, state and "
                 r"data ([0-9.]+) s, StarPU ([0-9.]+) s, state allocation ([0-9.]+) s, initial "
                 r"state ([0-9.]+) s\); state ([0-9.]+) GiB, ([0-9.]+) GiB of it pinned",
                 sys.argv[1])
assert m, sys.argv[1]
t, *parts = (float(x) for x in m.groups()[:7])
state, pinned = float(m.group(8)), float(m.group(9))
assert t > 0 and sum(parts) <= t + 0.03, (t, parts)
# 35.4 M parameters: bf16 pieces, fp32 masters and two moments, about 0.5 GiB;
# no CUDA worker: nothing pinned
assert 0.3 <= state <= 1.0 and pinned == 0.0, (state, pinned)
PYEOF
ok $? "the header's start-up line: the whole and its six parts, which it covers, the state's GiB, none pinned ($line)"
awk '/^  start-up: / { s = NR } /steps, log every/ { e = NR } END { exit !(s && e == s + 1) }' "$TMP/three.out"
ok $? "the start-up line closes the header's start-up part, just before the steps"
STEPGRAPH_INIT_THREADS=0 "$BIN" run $ARGS >"$TMP/bad.out" 2>&1
[ $? -ne 0 ] && grep -q "STEPGRAPH_INIT_THREADS=0: expected a number of threads from 1 to 256" "$TMP/bad.out"
ok $? "STEPGRAPH_INIT_THREADS=0 refused, naming the variable"
