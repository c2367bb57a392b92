#!/bin/sh
# test_lowering.sh - a real run and a simulation submit the same tasks.
#
# `stepgraph run` (native StarPU) and `stepgraph simulate` (stepgraph-sim,
# StarPU-SimGrid) share one lowering (runtime/exec/lower.c). With
# STEPGRAPH_TASK_LOG set, both write the first step's submission, one line
# per task: name, codelet, priority, where, scheduling context, and the
# buffers with their access modes. For several configs (ZeRO 0 and 3,
# offload, SuperOffload, bf16, activation checkpointing, batch tiles, a
# mixture-of-experts model with its expert tasks) the two lists must
# be identical (also with optimizer tiles), and must hold every node of the graph that `stepgraph graph
# --format json` exports (read here with Python's json, independently).
# Prints TAP.
set -u
SG_TEST_NAME=lower SG_TEST_CUDA=1
. "${SG_SRCDIR:-.}/tests/test_env.sh"
sg_needs_sim

# A machine like this one: two cores, no GPU, so both sides place tasks alike
# and split cpuadam_cores_perc over the same number of CPU workers.
"$PY" - "$SRC/configs/machines/gh200.json" "$TMP/cpu2.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "cpu2"
m["cpu"]["cores"] = 2
m["gpu"]["count"] = 0
json.dump(m, open(sys.argv[2], "w"))
PYEOF

TINY="--model tiny-llama --max_length 64 --sched dmda --ncpus 2"
# compare LABEL CONFIG [OPTIONS...]
compare() {
	label=$1 cfg=$2
	shift 2
	STEPGRAPH_TASK_LOG="$TMP/$label.run" "$BIN" run "$cfg" $TINY --steps 1 "$@" \
		>"$TMP/$label.run.out" 2>&1
	ok $? "$label: stepgraph run"
	STEPGRAPH_TASK_LOG="$TMP/$label.sim" "$BIN" simulate "$cfg" $TINY --machine "$TMP/cpu2.json" \
		"$@" >"$TMP/$label.sim.out" 2>&1
	ok $? "$label: stepgraph simulate"
	"$BIN" graph "$cfg" $TINY "$@" --format json -o "$TMP/$label.graph.json" >/dev/null 2>&1
	ok $? "$label: stepgraph graph --format json"
	cmp -s "$TMP/$label.run" "$TMP/$label.sim"
	ok $? "$label: run and simulate submit the same task list ($(wc -l <"$TMP/$label.run") tasks)"
	PYTHONPATH="$SRC/tests" "$PY" - "$TMP/$label.graph.json" "$TMP/$label.run" <<'PYEOF'
import json, sys
from tasklog import rows as task_rows
g = json.load(open(sys.argv[1]))
names = [n["name"] for n in g["nodes"]]
rows = task_rows(sys.argv[2])
assert len(rows) == len(names), (len(rows), len(names))
assert [r[0] for r in rows] == names, "tasks not in the graph's program order"
for r in rows:
    assert len(r) == 6 and r[1].startswith("sg_"), r
    assert r[5], "a task without buffers: %s" % r[0]
PYEOF
	ok $? "$label: one task per graph node, in program order, each with a codelet and buffers"
}

compare zero0 "$SRC/configs/default.json"
compare zero3 "$SRC/configs/deepspeed/zero3.json"
compare offload "$SRC/configs/deepspeed/zero-offload.json"
# SuperOffload: speculation "always", the step simulate models ("adaptive",
# the default, starts with the waiting graph under clipping in run)
compare superoffload "$SRC/configs/deepspeed/superoffload.json" --speculation always
compare bf16_ckpt "$SRC/configs/default.json" --set bf16.enabled=true --activation_checkpointing
# optimizer tiles: chunks that cut the parameter pieces (read-written h2d)
compare superoffload_tiled "$SRC/configs/deepspeed/superoffload.json" --speculation always \
	--set zero_optimization.sub_group_size=200000 --optimizer_tile 30001
# parameters offloaded: fetch tasks before the gathers, casts into the pieces
compare offload_param "$SRC/configs/deepspeed/superoffload.json" --speculation always \
	--set zero_optimization.offload_param.device=cpu --set zero_optimization.offload_optimizer.ratio=1 \
	--set zero_optimization.sub_group_size=200000 --optimizer_tile 30001
compare tiles_ckpt "$SRC/configs/default.json" --set train_micro_batch_size_per_gpu=3 \
	--batch_tile 2 --activation_checkpointing
# mixture of experts: expert and combine tasks (the later --model wins)
compare moe_zero3 "$SRC/configs/deepspeed/zero3.json" --model tiny-moe --max_length 32
grep -q "^moe_expert\.layer0\.g7\.mb0	sg_moe_expert	" "$TMP/moe_zero3.run" &&
	grep -q "^moe_combine\.layer3\.mb0	sg_moe_combine	" "$TMP/moe_zero3.run" &&
	grep -q "^moe_expert_bwd\.layer2\.g0\.mb0	sg_moe_expert_bwd	" "$TMP/moe_zero3.run"
ok $? "a MoE model's list has expert, combine and expert-backward tasks"
grep -q "sg_validate" "$TMP/superoffload.run" && grep -q "optimizer" "$TMP/superoffload.run"
ok $? "SuperOffload's list has validation tasks and the optimizer context"
grep -q "sg_recompute" "$TMP/bf16_ckpt.run"
ok $? "activation checkpointing's list has recompute tasks"
grep -q "^adam_cpu\.sg0\.t6	" "$TMP/superoffload_tiled.run" &&
	grep -q "^h2d\.param\.sg1\.t0	.*param\.[0-9]*\.sg1:RW" "$TMP/superoffload_tiled.run"
ok $? "the tiled list has chunk tasks, and an h2d that read-writes a piece it cuts"
grep -q "^h2d\.param\.fwd\.layer0\.mb0	sg_h2d	" "$TMP/offload_param.run" &&
	grep -q "^allgather\.fwd\.layer0\.mb0	.*param_shard\.1:R" "$TMP/offload_param.run" &&
	grep -q "^cast\.param\.sg1\.t0	sg_cast	.*param\.[0-9]*\.sg1:RW" "$TMP/offload_param.run" &&
	! grep -q "^h2d\.param\.sg" "$TMP/offload_param.run"
ok $? "parameters offloaded: a fetch task before each gather, which reads its shard, and casts that write the pieces"
grep -q "^recompute\.layer0\.mb0\.t1	sg_recompute	" "$TMP/tiles_ckpt.run" &&
	grep -q "^grad_sum\.embed\.mb3	sg_grad_sum	" "$TMP/tiles_ckpt.run"
ok $? "batch tiles' list has per-tile recompute tasks and a grad_sum per unit and micro-step"
done_testing
