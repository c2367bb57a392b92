#!/bin/sh
# test_fused_casts.sh - cast_placement "fused" end to end: a mixed-precision
# CPU sub-group's chain without cast nodes, Adam reading the 16-bit host
# gradients and writing the 16-bit host parameters (graph/compile_optimizer.c,
# codelets/cpu/adam_lowp.h).
#
# Graph: no cast node and no fp32 gradient copy on a CPU sub-group; adam_cpu
# reads grad_host and writes param_host, validate read-writes it, h2d.param
# reads it; the chain's bytes per element (every node of a chunk between the
# d2h and the h2d) are 2 + 12 + 12 + 2 = 28 fused against 40 with casts (the
# arrays' sizes, counted here from the formula). Simulation and tuning accept
# it. Runs: tiny-llama's losses and checkpoint files equal the unfused
# run's bit for bit - SuperOffload bf16 (every speculative step rolled back
# by clipping, so the redo's rewrite of the bf16 parameters is exercised),
# untiled and in chunks, with 1 and 2 CPU workers, with adaptive speculation
# (two graphs on the same handles); ZeRO-Offload bf16
# (non-speculative); fp16 with loss scaling (an overflow skips a step: the
# fp16 parameters are still written); Lion. The fused runs compile other
# graphs (fewer tasks), so equal losses are not vacuous. Prints TAP.
set -u
SG_TEST_NAME=fused_casts
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"

SO="$SRC/configs/deepspeed/superoffload.json"
OFF="$SRC/configs/deepspeed/zero-offload.json"
FP16="$SRC/configs/deepspeed/zero3-offload-fp16.json"
SG="--set zero_optimization.sub_group_size=200000 --batch_tile 0"
TILE=30001

# -- the graph
for pl in cpu fused; do
	"$BIN" graph "$SO" --model tiny-llama --max_length 32 $SG --optimizer_tile $TILE \
		--cast_placement $pl --format json -o "$TMP/g_$pl.json" >"$TMP/g_$pl.out" 2>&1
	ok $? "stepgraph graph --cast_placement $pl"
done
"$PY" - "$TMP/g_cpu.json" "$TMP/g_fused.json" <<'PYEOF'
import json, re, sys
def load(p):
    return json.load(open(p))["nodes"]
def names(nd, mode):  # the buffers a node accesses in mode, without their .sgN.tK
    return {a["name"].split(".")[0] for a in nd["buffers"] if mode in a["mode"]}
cpu_nodes, nodes = load(sys.argv[1]), load(sys.argv[2])
cpu_sg = {n["subgroup"] for n in nodes if n["name"].startswith("adam_cpu.")}
assert cpu_sg, "no CPU sub-group"
# no cast of a CPU sub-group, no fp32 gradient copy
assert not [n for n in nodes if n["name"].startswith("cast.") and n["subgroup"] in cpu_sg]
assert not [n for n in nodes if "grad_host_f32" in names(n, "RW")]
assert [n for n in cpu_nodes if n["name"].startswith("cast.")], "the unfused graph has casts"
for n in nodes:
    if n["name"].startswith("adam_cpu."):
        assert "grad_host" in names(n, "R") and "param_host" in names(n, "W"), n
    if n["name"].startswith("validate."):
        assert {"grad_host", "param_host"} <= names(n, "R"), n
        assert "param_host" in names(n, "W"), n
    if n["name"].startswith("h2d.param."):
        assert "param_host" in names(n, "R"), n
# bytes per element of each chunk's host chain (the casts and Adam; validate
# is costed as a task's overhead), the elements being the chunk master's
# bytes / 4
def chain_bytes(nodes):
    per = {}
    for n in nodes:
        m = re.fullmatch(r"(cast\.grad|cast\.param|adam_cpu)\.(sg\d+(\.t\d+)?)", n["name"])
        if m and n["subgroup"] in cpu_sg:
            b, e = per.get(m.group(2), (0, 0))
            if m.group(1) == "adam_cpu":
                e = [a["bytes"] for a in n["buffers"] if a["name"].startswith("master.")][0] // 4
            per[m.group(2)] = (b + n["bytes_read"] + n["bytes_written"], e)
    return {k: b / e for k, (b, e) in per.items()}
fused, unfused = chain_bytes(nodes), chain_bytes(cpu_nodes)
assert len(fused) == len(unfused) > 1, (len(fused), len(unfused))
assert set(fused.values()) == {2 + 12 + 12 + 2.0}, set(fused.values())
assert set(unfused.values()) == {(2 + 4) + (16 + 12) + (4 + 2.0)}, set(unfused.values())
PYEOF
ok $? "graph JSON: no casts on CPU sub-groups, Adam reads grad_host and writes param_host, 28 B per element against 40"

if [ -x "$BUILD/stepgraph-sim" ]; then
	STEPGRAPH_TASK_LOG="$TMP/sim.log" "$BIN" simulate "$SO" --model tiny-llama --max_length 32 \
		$SG --machine gh200 --sched dmda --cast_placement fused >"$TMP/sim.out" 2>&1 &&
		grep -q "^adam_cpu\." "$TMP/sim.log" && ! grep -q "^cast\.grad" "$TMP/sim.log"
	ok $? "simulate on gh200 with --cast_placement fused: Adam tasks, no gradient casts"
	"$BIN" tune "$SO" --model tiny-llama --max_length 32 $SG --machines gh200 --sched dmda \
		--priorities on --jobs 1 --vary cast_placement=cpu,fused -o "$TMP/tune" >"$TMP/tune.out" 2>&1 &&
		grep -q "cast_placement=\(cpu\|fused\)" "$TMP/tune.md"
	ok $? "tune --vary cast_placement=cpu,fused"
fi

# -- runs (train_lib.sh's ck_run: tiny-llama, 3 steps, metrics and checkpoint)
# pair LABEL CONFIG ARGS...: the unfused and fused runs, compared
pair() {
	l=$1 cfg=$2
	shift 2
	ck_run "${l}_cpu" "$cfg" --cast_placement cpu "$@"
	ck_run "${l}_fused" "$cfg" --cast_placement fused "$@"
	differs "${l}_cpu" "${l}_fused" && same "${l}_cpu" "${l}_fused" && same_ck "${l}_cpu" "${l}_fused"
	ok $? "$l: fused casts give the unfused losses and checkpoint bit for bit ($*)"
}
pair so "$SO" --optimizer_tile 0 --ncpus 2
grep -q "rolled back" "$TMP/so_fused.out"
ok $? "so: speculative steps were rolled back (the redo rewrote the bf16 parameters)"
pair so_tiled "$SO" --optimizer_tile $TILE --ncpus 2 --sched dmda
pair so_1cpu "$SO" --optimizer_tile $TILE --ncpus 1
# adaptive speculation: a speculative and a waiting graph on the same handles
pair so_adaptive "$SO" --optimizer_tile $TILE --ncpus 2 --steps 6 --speculation adaptive
pair offload "$OFF" --ncpus 2
# fp16 from a loss scale of 2^18: the first step overflows and is skipped;
# a learning rate from the first step on, so the steps taken move the master
pair fp16 "$FP16" --ncpus 2 --set fp16.initial_scale_power=18 --set fp16.hysteresis=1 \
	--set scheduler.params.warmup_min_lr=1e-4
grep -q '"skipped":true' "$TMP/fp16_fused.jsonl" && grep -q '"skipped":false' "$TMP/fp16_fused.jsonl"
ok $? "fp16: the loss scaler skipped a step on overflow and took one (skips write the fp16 parameters too)"
ds lion '{"optimizer": {"type": "Lion", "params": {"lr": 1e-4, "betas": [0.9, 0.99]}},
	"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}'
pair lion "$TMP/lion.json" --ncpus 2

# -- bad values name the option and the choices
"$BIN" graph "$SO" --model tiny-llama --cast_placement sideways >"$TMP/bad.out" 2>&1
[ $? -ne 0 ] && grep -q 'cast_placement.*fused.*"sideways"' "$TMP/bad.out"
ok $? "cast_placement sideways is refused, the message naming fused among the choices"
done_testing
