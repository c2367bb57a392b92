#!/bin/sh
# test_idle_workers.sh - StarPU's CPU workers are paused while the trainer's
# main thread works alone: from StarPU's start to the first step (allocating
# and loading the state), and while a checkpoint is saved (runtime/exec/
# exec.h, sg_exec_idle). StarPU's native drivers poll for tasks when idle:
# before this, on 2 cores, the two workers used 3.2 s of CPU during a 4.0 s
# start-up and 12.8 s during an 8.8 s save of a 139.5 M-parameter model,
# taking the cores the main thread initialised and wrote on.
#
# tests/worker_cpu.py samples the user and system time of the threads named
# "CPU <n>" from /proc while the run goes on, and notes it as each output line
# arrives. The checks are of CPU use, not of speed: a paused worker uses none
# whatever the load, and a polling one uses a share of a core whenever the
# kernel runs it. Checks: the workers ran the step (their time grows there:
# the sampling sees them); they used at most 50 ms plus 5% of the interval's
# wall time before the run's header (start-up) and between the summary and
# "saved checkpoint" (the save at the end), and as much during a save after
# step 1 of 2 (--save_interval 1). Step 2 after that save, where the workers
# resume, gives the loss of the same run without --save, bit for bit.
# Prints TAP.
set -u
SG_TEST_NAME=idle_workers
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"

plan 6

# a Llama of 35.4 M parameters, most of them its untied embedding and head
# (vocabulary 65536 x hidden 256): a save of 0.4 GB
cp "$SRC/tests/data/models/wide-head-llama.json" "$TMP/model.json"
cat >"$TMP/ds.json" <<'EOF'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
EOF
ARGS="$TMP/ds.json --model $TMP/model.json --max_length 32 --ncpus 2"

# within FILE FROM TO: the workers' CPU seconds and the wall seconds between
# the first line matching regex FROM (START: the run's start) and the first
# later one matching TO
within() {
	"$PY" - "$@" <<'PYEOF'
import json, re, sys
lines = json.load(open(sys.argv[1]))["lines"]
i = -1 if sys.argv[2] == "START" else \
    next(k for k, l in enumerate(lines) if re.search(sys.argv[2], l[0]))
j = next(k for k in range(i + 1, len(lines)) if re.search(sys.argv[3], lines[k][0]))
at = lines[i] if i >= 0 else ["", 0.0, 0.0]
print("%.3f %.3f" % (lines[j][2] - at[2], lines[j][1] - at[1]))
PYEOF
}
# idle CPU WALL: at most 50 ms plus 5% of the wall time
idle() {
	awk -v c="$1" -v w="$2" 'BEGIN { exit !(c >= 0 && w > 0 && c <= 0.05 + 0.05 * w) }'
}

"$PY" "$SRC/tests/worker_cpu.py" "$TMP/end.json" "$BIN" run $ARGS --steps 1 \
	--save "$TMP/ck" >"$TMP/end.err" 2>&1
"$PY" - "$TMP/end.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
text = [l[0] for l in d["lines"]]
assert d["rc"] == 0 and d["workers"] == 2, (d["rc"], d["workers"], text[-5:])
assert any(t.startswith("Step 1 |") for t in text) and \
    any(t.startswith("saved checkpoint") for t in text), text
PYEOF
ok $? "a run with --save: exit 0, two workers named CPU 0 and CPU 1 seen, the step and the save logged"
read -r cpu wall <<EOF
$(within "$TMP/end.json" '^  lookahead|steps?, log every' '^Step 1 \|')
EOF
awk -v c="$cpu" 'BEGIN { exit !(c >= 0.05) }'
ok $? "the workers ran the step: $cpu s of their CPU in its $wall s"
# the header ends the start-up: allocation, initialisation, load
read -r cpu wall <<EOF
$(within "$TMP/end.json" START 'steps?, log every')
EOF
idle "$cpu" "$wall"
ok $? "start-up: the workers used $cpu s of CPU in its $wall s"
read -r cpu wall <<EOF
$(within "$TMP/end.json" '^Summary:' '^saved checkpoint')
EOF
idle "$cpu" "$wall"
ok $? "the save at the end: the workers used $cpu s of CPU in its $wall s"

# a save after step 1 of 2: between step 1's line and "saved checkpoint"
"$PY" "$SRC/tests/worker_cpu.py" "$TMP/mid.json" "$BIN" run $ARGS --steps 2 --log_interval 1 \
	--lookahead 1 --save "$TMP/ck2" --save_interval 1 --metrics "$TMP/mid.jsonl" \
	>"$TMP/mid.err" 2>&1
read -r cpu wall <<EOF
$(within "$TMP/mid.json" '^Step 1 \|' '^saved checkpoint')
EOF
idle "$cpu" "$wall"
ok $? "a save after step 1 of 2: the workers used $cpu s of CPU in its $wall s"
"$BIN" run $ARGS --steps 2 --log_interval 1 --lookahead 1 \
	--metrics "$TMP/plain.jsonl" >"$TMP/plain.out" 2>&1
"$PY" - "$TMP/mid.json" "$TMP/mid.jsonl" "$TMP/plain.jsonl" <<'PYEOF'
import json, math, sys
d = json.load(open(sys.argv[1]))
def steps(path):
    return [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(path))]
a, b = steps(sys.argv[2]), steps(sys.argv[3])
assert d["rc"] == 0 and len(a) == 2 and a == b, (a, b)
assert all(math.isfinite(v) for s in a for v in s), a
PYEOF
ok $? "step 2 after that save, the workers resumed: losses and gradient norms of the run without --save, bit for bit"
