#!/bin/sh
# test_tiles_optimizer.sh - optimizer tiles and cast placement end to end.
#
# With optimizer_tile N, a CPU sub-group's host chain (d2h, cast, Adam,
# validation, cast, h2d) becomes chunks of N elements, each a task of its
# own (graph/compile_optimizer.c). Chunks cut the parameter pieces at odd places here
# (tile 30001 over sub-groups of 200000), so every copy and every chunk's
# Adam touches a sub-range. Adam, SuperOffload's validation and the casts are
# element-wise, so the tiled runs must give the untiled run's losses and
# checkpoint files bit for bit, under every scheduling policy and with 1 or
# 2 CPU workers; the losses must be finite (a diverging pair fails). Also:
# the non-speculative ZeRO-Offload step (bf16), ZeRO-2 offload in fp32, fp16
# with loss scaling, adaptive speculation (two graphs on the same handles);
# a run resumed with another tile size continues as uninterrupted; the tile
# changes the graph (task counts, .tK tasks in STEPGRAPH_TASK_LOG);
# cast_placement cpu / gpu / scheduler change where the casts may run (graph
# JSON and the simulated lowering's where column); bad values are refused
# naming the option. Prints TAP.
set -u
SG_TEST_NAME=tiles SG_TEST_CUDA=1
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"

SO="$SRC/configs/deepspeed/superoffload.json"
OFF="$SRC/configs/deepspeed/zero-offload.json"
FP16="$SRC/configs/deepspeed/zero3-offload-fp16.json"
# batch tiles off: the runs compared differ in worker count, and batch_tile
# auto tiles on 2 workers only (tests/test_tiles_batch.sh covers batch tiles)
SG="--set zero_optimization.sub_group_size=200000 --batch_tile 0"
TILE=30001
# run NAME CONFIG ARGS...: tiny-llama, 3 steps; metrics NAME.jsonl, checkpoint ck_NAME
# (train_lib.sh's ck_run; same_ck compares the checkpoints)
run() { ck_run "$@"; }

# -- SuperOffload: untiled reference, tiled under every policy and worker count
run so_ref "$SO" --optimizer_tile 0 --sched dmda --ncpus 2
for sched in eager lws dmda dmdas; do
	for nc in 1 2; do
		run "so_${sched}_$nc" "$SO" --optimizer_tile $TILE --sched $sched --ncpus $nc
		same so_ref "so_${sched}_$nc" && same_ck so_ref "so_${sched}_$nc"
		ok $? "SuperOffload tile $TILE, $sched, $nc CPU workers: losses and checkpoint bit-identical to untiled, finite"
	done
done
differs so_ref so_dmda_2
ok $? "the tile changes the graph ($(tasks so_ref) vs $(tasks so_dmda_2) tasks)"

# -- adaptive speculation: two graphs on the same chunk handles; rollbacks counted per sub-group
run ad_ref "$SO" --optimizer_tile 0 --steps 6 --speculation adaptive
run ad_tiled "$SO" --optimizer_tile $TILE --steps 6 --speculation adaptive
rolled() { grep -o 'SuperOffload: [0-9]* of [0-9]* speculative.*' "$TMP/$1.out"; }
same ad_ref ad_tiled && [ -n "$(rolled ad_ref)" ] && [ "$(rolled ad_ref)" = "$(rolled ad_tiled)" ]
ok $? "adaptive speculation: tiled losses bit-identical, same rollback summary ($(rolled ad_tiled | cut -c1-60))"

# -- ZeRO-Offload (no speculation, bf16) and fp16 with loss scaling
run off_ref "$OFF" --optimizer_tile 0
run off_tiled "$OFF" --optimizer_tile $TILE
same off_ref off_tiled && same_ck off_ref off_tiled && differs off_ref off_tiled
ok $? "ZeRO-Offload bf16: tiled and untiled bit-identical (losses, checkpoint), graphs differ"
run f32_ref "$OFF" --optimizer_tile 0 --set bf16.enabled=false --set zero_optimization.stage=2
run f32_tiled "$OFF" --optimizer_tile $TILE --set bf16.enabled=false --set zero_optimization.stage=2
same f32_ref f32_tiled && same_ck f32_ref f32_tiled && differs f32_ref f32_tiled
ok $? "ZeRO-2 offload fp32 (h2d from the fp32 master chunks): tiled and untiled bit-identical"
run fp16_ref "$FP16" --optimizer_tile 0
run fp16_tiled "$FP16" --optimizer_tile 4097 --sched lws
same fp16_ref fp16_tiled && same_ck fp16_ref fp16_tiled
ok $? "ZeRO-Offload fp16: tiled and untiled bit-identical (losses, checkpoint)"
# the default (auto) on this machine's few workers: at least 262144 elements
# per chunk, so these sub-groups stay whole
run so_auto "$SO" --ncpus 2
[ "$(tasks so_auto)" = "$(tasks so_ref)" ] && same so_ref so_auto
ok $? "optimizer_tile auto on 2 workers keeps 200000-element sub-groups whole"

# the auto rule on a bigger graph: 8B, sub-groups of 4e8, --ncpus 8 with
# cpuadam_cores_perc 0.9 -> 7 optimizer workers -> ceil(4e8 / 7) rounded up to
# an odd multiple of 512 (57143296 is even: + 512) = 57143808 elements, 7
# chunks per full sub-group
# (--machine "": the run config names gh200, whose 63 workers graph would count)
"$BIN" graph "$SRC/configs/llama-3.1-8b-superoffload.json" --ncpus 8 --machine "" --format json \
	-o "$TMP/g_8b.json" >/dev/null 2>&1
"$PY" - "$TMP/g_8b.json" <<'PYEOF'
import json, re, sys
g = json.load(open(sys.argv[1]))
sizes = {}
for n in g["nodes"]:
    m = re.fullmatch(r"adam_cpu\.sg(\d+)\.t(\d+)", n["name"])
    if m:
        master = [b for b in n["buffers"] if b["name"].startswith("master.")]
        sizes.setdefault(int(m.group(1)), []).append(master[0]["bytes"] // 4)
assert len(sizes) >= 10, sizes.keys()
full = [v for v in sizes.values() if sum(v) == 400000000]
assert full and all(len(v) == 7 and v[:6] == [57143808] * 6 for v in full), sizes
assert 57143808 % 512 == 0 and 57143808 % 1024 != 0
PYEOF
ok $? "optimizer_tile auto: 7 workers cut 4e8-element sub-groups in 7 chunks of 57143808"

# -- resuming with another tile size (the checkpoint does not know tiles)
"$BIN" run "$SO" --model tiny-llama --max_length 32 --steps 2 $SG --optimizer_tile 0 \
	--save "$TMP/ck_half" >"$TMP/half.out" 2>&1
ok $? "2 untiled steps saved"
"$BIN" run "$SO" --model tiny-llama --max_length 32 --steps 1 $SG --optimizer_tile 7777 \
	--load "$TMP/ck_half" --metrics "$TMP/resumed.jsonl" >"$TMP/resumed.out" 2>&1
ok $? "resumed with optimizer_tile 7777"
same_from so_ref resumed 2
ok $? "the resumed tiled step 3 is the untiled run's step 3, bit for bit"

# -- the tasks: .tK chunks in the submitted list
STEPGRAPH_TASK_LOG="$TMP/tasks.log" "$BIN" run "$SO" --model tiny-llama --max_length 32 --steps 1 \
	$SG --optimizer_tile $TILE --speculation always >"$TMP/tasklog.out" 2>&1
PYTHONPATH="$SRC/tests" "$PY" - "$TMP/tasks.log" <<'PYEOF'
import re, sys
from tasklog import rows as task_rows
rows = task_rows(sys.argv[1])
names = [r[0] for r in rows]
for kind in ("d2h.grad", "cast.grad", "adam_cpu", "validate", "cast.param", "h2d.param"):
    ch = [n for n in names if re.fullmatch(r"%s\.sg\d+\.t\d+" % re.escape(kind), n)]
    # sub-groups of 200000 in chunks of 30001: 7 chunks each; the last
    # sub-group (tiny-llama's remainder, under 30001 elements) stays whole
    assert len(ch) == 4 * 7, (kind, len(ch))
    assert [n for n in names if re.fullmatch(r"%s\.sg\d+" % re.escape(kind), n)] == \
        ["%s.sg4" % kind], kind
# a chunk's Adam touches its own chunk buffers only
for r in rows:
    if r[0].startswith("adam_cpu.sg0.t3"):
        assert all(".t3" in b for b in r[5].strip().split(",")), r
PYEOF
ok $? "STEPGRAPH_TASK_LOG lists .tK tasks for every step of the host chain, on chunk buffers"

# -- cast placement: in the graph, and in what the lowering submits on a GPU machine
for pl in scheduler cpu gpu auto; do
	"$BIN" graph "$SO" --model tiny-llama --max_length 32 $SG --optimizer_tile $TILE \
		--cast_placement $pl --format json -o "$TMP/g_$pl.json" >/dev/null 2>&1
	ok $? "stepgraph graph --cast_placement $pl"
done
"$PY" - "$TMP" <<'PYEOF'
import json, sys
def casts(pl):
    g = json.load(open("%s/g_%s.json" % (sys.argv[1], pl)))
    return [(n["device"], n["pinned"]) for n in g["nodes"] if n["name"].startswith("cast.")]
s, c, g, a = casts("scheduler"), casts("cpu"), casts("gpu"), casts("auto")
assert s and len(s) == len(c) == len(g) == len(a), (len(s), len(c), len(g))
assert set(s) == {("cpu", False)}, set(s)
assert set(c) == {("cpu", True)}, set(c)
assert set(g) == {("gpu", True)}, set(g)
# no machine model: auto has no cost figures and keeps the casts on the CPU
assert set(a) == {("cpu", True)}, set(a)
PYEOF
ok $? "graph JSON: casts free (scheduler), pinned to cpu, pinned to gpu; auto without a machine: cpu"
# auto with machine figures: casts of 8B's sub-groups in 63 chunks on gh200's
# 63 optimizer cores stay on the CPU; one core casting a whole tiny sub-group
# (24 GB/s) loses to the GPU behind a 450 GB/s link; a slow-link machine keeps
# the same casts on the CPU
"$PY" - "$SRC/configs/machines/gh200.json" "$TMP/slowlink.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "slowlink"
m["links"]["h2d_gbs"] = m["links"]["d2h_gbs"] = 5
json.dump(m, open(sys.argv[2], "w"))
PYEOF
auto_graph() { # auto_graph LABEL CONFIG MACHINE ARGS...
	l=$1 c=$2 m=$3
	shift 3
	"$BIN" graph "$c" --cast_placement auto --machine "$m" "$@" --format json \
		-o "$TMP/g_auto_$l.json" >/dev/null 2>&1 || echo "graph $l failed" >&2
}
auto_graph 8b "$SRC/configs/llama-3.1-8b-superoffload.json" gh200
auto_graph tiny "$SO" gh200 --model tiny-llama --max_length 32 $SG
auto_graph tinyslow "$SO" "$TMP/slowlink.json" --model tiny-llama --max_length 32 $SG
"$PY" - "$TMP" <<'PYEOF'
import json, sys
def casts(m):  # the casts of CPU sub-groups (a GPU sub-group's cast stays on the GPU)
    g = json.load(open("%s/g_auto_%s.json" % (sys.argv[1], m)))
    cpu = {n["subgroup"] for n in g["nodes"] if n["name"].startswith("adam_cpu.")}
    return {(n["device"], n["pinned"]) for n in g["nodes"]
            if n["name"].startswith("cast.") and n["subgroup"] in cpu}
assert casts("8b") == {("cpu", True)}, casts("8b")
assert casts("tiny") == {("gpu", True)}, casts("tiny")
assert casts("tinyslow") == {("cpu", True)}, casts("tinyslow")
PYEOF
ok $? "cast_placement auto (machine figures): 8B on gh200 cpu, tiny on gh200 gpu, tiny behind a 5 GB/s link cpu"
if [ -x "${SG_BUILDDIR:-.}/stepgraph-sim" ]; then
	for pl in scheduler cpu gpu; do
		STEPGRAPH_TASK_LOG="$TMP/sim_$pl.log" "$BIN" simulate "$SO" --model tiny-llama \
			--max_length 32 $SG --machine gh200 --sched dmda --cast_placement $pl \
			>"$TMP/sim_$pl.out" 2>&1
		ok $? "simulate on gh200 with --cast_placement $pl"
	done
	where() { awk -F'\t' '$1 ~ /^cast\./ {print $4}' "$TMP/sim_$1.log" | sort -u | tr '\n' ' '; }
	[ "$(where scheduler)" = "cpu|cuda " ] && [ "$(where cpu)" = "cpu " ] && [ "$(where gpu)" = "cuda " ]
	ok $? "simulated lowering: casts may run on cpu|cuda, cpu only, cuda only"
fi
# on a machine without GPU the pinned-to-GPU casts run on CPU workers, same numbers
run so_castgpu "$SO" --optimizer_tile $TILE --cast_placement gpu --ncpus 2
same so_ref so_castgpu
ok $? "cast_placement gpu on a CPU-only machine: bit-identical losses"

# -- bad values
bad() { # bad EXPECTED-TEXT ARGS...
	want=$1
	shift
	"$BIN" graph "$SO" --model tiny-llama "$@" >"$TMP/bad.out" 2>&1
	[ $? -ne 0 ] && grep -q "$want" "$TMP/bad.out"
}
bad 'optimizer_tile.*-3 is out of range' --optimizer_tile -3
ok $? "optimizer_tile -3 is refused, naming the option and value"
bad 'optimizer.tile.*"lots"' --optimizer-tile lots
ok $? "--optimizer-tile lots is refused, naming the option and value"
bad 'cast_placement.*"sideways"' --cast_placement sideways
ok $? "cast_placement sideways is refused, naming the option and value"
SOABS="$(cd "$SRC" && pwd)/configs/deepspeed/superoffload.json"
printf '{"deepspeed_config": "%s", "optimizer_tile": 1.5}\n' "$SOABS" >"$TMP/badrun.json"
"$BIN" graph "$TMP/badrun.json" --model tiny-llama >"$TMP/bad.out" 2>&1
[ $? -ne 0 ] && grep -q "optimizer_tile.*1.5" "$TMP/bad.out"
ok $? "a run config with optimizer_tile 1.5 is refused, naming the option"
printf '{"deepspeed_config": "%s", "optimizer_tile": 40000}\n' "$SOABS" >"$TMP/goodrun.json"
"$BIN" graph "$TMP/goodrun.json" --model tiny-llama $SG --format json -o "$TMP/g_cfg.json" \
	>/dev/null 2>&1 && grep -q '"adam_cpu.sg0.t1"' "$TMP/g_cfg.json"
ok $? "a run config's optimizer_tile 40000 (a JSON number) tiles the graph"
done_testing
