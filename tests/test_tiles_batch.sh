#!/bin/sh
# test_tiles_batch.sh - batch tiles (run option batch_tile): the forward,
# recompute and backward of a micro-step split along the batch, the weight
# gradients summed by grad_sum in tile order. With one tiling the losses are
# the same bits under every scheduler and worker count; tiled and untiled
# runs agree within 1e-5 relative over 10 steps (fp32; bf16 and fp16 with
# ZeRO-3 offload within their rounding), with accumulation, ZeRO stage 2,
# activation checkpointing, a tied and an untied head, and tiles of unequal
# size; a checkpoint resumes with the same or another tile size; the graph
# really is tiled (.tN tasks and grad_sum in the task log and the graph
# JSON, another task count); auto follows the CPU worker count; bad values
# are refused with a message.
# Losses are compared from the metrics files. Prints TAP.
set -u
SG_TEST_NAME=tiles
. "${SG_SRCDIR:-.}/tests/test_env.sh"
if ! "$BIN" run --help >/dev/null 2>&1; then
	skip_all "stepgraph run unavailable"
fi

. "$SRC/tests/train_lib.sh"
plan 30

ds mb4 '{"train_micro_batch_size_per_gpu": 4}'
ds mb4x2 '{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}'
ds mb4x2z2 '{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
             "zero_optimization": {"stage": 2}}'
ds mb4bf16 '{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}}'
T10="--steps 10 --ncuda 0"

# ---- one tiling: the same bits under every scheduler and worker count -------
train t1_eager2 mb4 $T10 --batch_tile 1 --sched eager --ncpus 2
train t1_lws2 mb4 $T10 --batch_tile 1 --sched lws --ncpus 2
train t1_dmda2 mb4 $T10 --batch_tile 1 --sched dmda --ncpus 2
train t1_dmdas1 mb4 $T10 --batch_tile 1 --sched dmdas --ncpus 1
train t1_dmdas2 mb4 $T10 --batch_tile 1 --sched dmdas --ncpus 2
train u_eager mb4 $T10 --batch_tile 0 --sched eager --ncpus 2
for r in t1_eager2 t1_lws2 t1_dmda2 t1_dmdas1 t1_dmdas2 u_eager; do
	[ "$(cat "$TMP/$r.rc")" = 0 ] || { echo "# $r failed:"; sed 's/^/# /' "$TMP/$r.err" | tail -5; }
done
same t1_eager2 t1_lws2
ok $? "tiles of 1 sequence: eager and lws give the same losses, bit for bit"
same t1_eager2 t1_dmda2 && same t1_eager2 t1_dmdas2
ok $? "tiles of 1 sequence: dmda and dmdas give the same losses, bit for bit"
same t1_dmdas1 t1_dmdas2
ok $? "tiles of 1 sequence: 1 and 2 CPU workers give the same losses, bit for bit"
differs t1_eager2 u_eager
ok $? "the tiled graph has another task count than the untiled one ($(tasks t1_eager2) vs $(tasks u_eager))"
close t1_eager2 u_eager 1e-5
ok $? "tiled (4 x 1 sequence) and untiled losses agree within 1e-5 relative over 10 steps (tied head)"

# ---- tiles of unequal size, an untied head -----------------------------------
train t3 mb4 $T10 --batch_tile 3 --sched lws --ncpus 2
close t3 u_eager 1e-5
ok $? "tiles of 3 + 1 sequences agree with untiled within 1e-5 relative"
train q_t2 mb4 $T10 --model tiny-qwen3 --batch_tile 2 --sched dmdas --ncpus 2
train q_t2e mb4 $T10 --model tiny-qwen3 --batch_tile 2 --sched eager --ncpus 1
train q_u mb4 $T10 --model tiny-qwen3 --batch_tile 0 --sched dmdas --ncpus 2
close q_t2 q_u 1e-5 && same q_t2 q_t2e
ok $? "tiny-qwen3 (untied head, qk-norm): tiles of 2 agree with untiled within 1e-5, same bits on 1 and 2 workers"

# ---- accumulation, ZeRO stage 2, activation checkpointing --------------------
train a_t2 mb4x2 $T10 --batch_tile 2 --sched dmdas --ncpus 2
train a_t2e mb4x2 $T10 --batch_tile 2 --sched eager --ncpus 1
train a_u mb4x2 $T10 --batch_tile 0 --sched dmdas --ncpus 2
close a_t2 a_u 1e-5
ok $? "accumulation 2 x micro-batch 4: tiles of 2 agree with untiled within 1e-5 relative"
same a_t2 a_t2e
ok $? "accumulation 2 x micro-batch 4, tiles of 2: same bits on dmdas/2 workers and eager/1 worker"
train z_t1 mb4x2z2 $T10 --batch_tile 1 --sched lws --ncpus 2
train z_u mb4x2z2 $T10 --batch_tile 0 --sched lws --ncpus 2
close z_t1 z_u 1e-5
ok $? "ZeRO stage 2 (reduce every micro-step) with accumulation: tiled agrees with untiled within 1e-5"
train c_t2 mb4x2 $T10 --batch_tile 2 --activation_checkpointing --sched dmdas --ncpus 2
train c_u mb4x2 $T10 --batch_tile 0 --activation_checkpointing --sched dmdas --ncpus 2
close c_t2 c_u 1e-5
ok $? "activation checkpointing + tiles + accumulation: agrees with untiled within 1e-5"
same c_t2 a_t2
ok $? "activation checkpointing recomputes each tile exactly: same bits as the tiled run without it"

# ---- bf16 -------------------------------------------------------------------
train b_t2 mb4bf16 $T10 --batch_tile 2 --sched dmdas --ncpus 2
train b_t2e mb4bf16 $T10 --batch_tile 2 --sched eager --ncpus 1
train b_u mb4bf16 $T10 --batch_tile 0 --sched dmdas --ncpus 2
same b_t2 b_t2e
ok $? "bf16, tiles of 2: same bits on dmdas/2 workers and eager/1 worker (finite)"
close b_t2 b_u 2e-2
ok $? "bf16: tiled and untiled losses agree within 2e-2 relative (bf16 rounding of the sums)"

# ---- fp16, ZeRO-3 with the optimizer on the CPU ----------------------------------
ds z3f16 '{"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true},
           "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}'
train f_t2 z3f16 --steps 6 --ncuda 0 --batch_tile 2 --sched dmdas --ncpus 2
train f_t2e z3f16 --steps 6 --ncuda 0 --batch_tile 2 --sched eager --ncpus 1
train f_u z3f16 --steps 6 --ncuda 0 --batch_tile 0 --sched dmdas --ncpus 2
same f_t2 f_t2e
ok $? "fp16 (loss scaling), ZeRO-3, CPU optimizer, tiles of 2: same bits on dmdas/2 and eager/1"
close f_t2 f_u 1e-2
ok $? "fp16, ZeRO-3, CPU optimizer: tiled and untiled losses within 1e-2 relative (fp16 gradients)"

# ---- resume: the tile size is not part of a checkpoint's identity ---------------
train r_full2 mb4 $T10 --batch_tile 2 --sched eager --ncpus 2
train r_a mb4 --steps 4 --ncuda 0 --batch_tile 2 --sched eager --ncpus 2 --save "$TMP/ck"
train r_same mb4 --steps 6 --ncuda 0 --batch_tile 2 --sched eager --ncpus 2 --load "$TMP/ck"
train r_other mb4 --steps 6 --ncuda 0 --batch_tile 1 --sched eager --ncpus 2 --load "$TMP/ck"
same_from r_full2 r_same 4
ok $? "saved at step 4 and resumed with the same tiles: steps 5-10 as uninterrupted, bit for bit"
[ "$(cat "$TMP/r_other.rc")" = 0 ] && losscmp "$TMP/r_full2.jsonl" "$TMP/r_other.jsonl" 1e-5 4
ok $? "resumed with another tile size (2 -> 1): accepted, steps 5-10 within 1e-5 of the tiles-of-2 run"
STARPU_NCUDA=0 "$BIN" graph "$TMP/mb4.json" --max_length 32 --batch_tile 3 --format json \
	-o "$TMP/g.json" >/dev/null 2>&1 && "$PY" - "$TMP/g.json" <<'PYEOF'
import json, sys
nodes = json.load(open(sys.argv[1]))["nodes"]
fb = [n for n in nodes if n["kind"] in ("forward", "backward")]
assert fb and all(n["tile"] in (0, 1) and n["device"] == "cpu" for n in fb), fb[:2]
assert all(n["name"].endswith(".t%d" % n["tile"]) for n in fb)
gs = [n for n in nodes if n["kind"] == "grad_sum"]
assert len(gs) == len(fb) // 4 and all(n["tile"] is None for n in gs), len(gs)
PYEOF
ok $? "graph JSON: tiled forward/backward nodes carry their tile (.tN) on the CPU; one grad_sum per unit"

# ---- the graph is tiled: task log ---------------------------------------------
STEPGRAPH_TASK_LOG="$TMP/tasks.log" "$BIN" run "$TMP/mb4x2.json" --max_length 32 --steps 1 \
	--batch_tile 3 --ncuda 0 --ncpus 2 >"$TMP/log.out" 2>"$TMP/log.err"
ok $? "a tiled run with STEPGRAPH_TASK_LOG succeeds"
# micro-batch 4 in tiles of 3: two tiles, two micro-steps
n_t1=$(grep -c '^bwd\.[a-z0-9]*\.mb[01]\.t1	sg_backward	' "$TMP/tasks.log")
n_sum=$(grep -c '^grad_sum\.[a-z0-9]*\.mb[01]	sg_grad_sum	' "$TMP/tasks.log")
[ "$n_t1" -gt 0 ] && [ "$n_t1" = "$n_sum" ] && ! grep -q '^bwd\.[a-z0-9]*\.mb0	' "$TMP/tasks.log"
ok $? "task log: every unit's backward is split in .t0/.t1 tasks, one grad_sum per unit and micro-step ($n_t1 and $n_sum)"
grep '^grad_sum\.layer0\.mb0	' "$TMP/tasks.log" | grep -q 'grad_part\.1\.t0:R,grad_part\.1\.t1:R,grad\.1:W' &&
	grep '^grad_sum\.layer0\.mb1	' "$TMP/tasks.log" | grep -q 'grad\.1:RW'
ok $? "grad_sum reads the partials in tile order, writes the gradient, then accumulates into it"

# ---- auto follows the CPU workers ---------------------------------------------
"$BIN" graph "$TMP/mb4.json" --max_length 32 --ncuda 0 --ncpus 2 --summary >"$TMP/g2.out" 2>&1 &&
	grep -q "grad_sum  *6$" "$TMP/g2.out"
ok $? "batch_tile auto with 2 CPU workers and accumulation 1 tiles the micro-step (a grad_sum per unit: 6 for tiny-llama)"
"$BIN" graph "$TMP/mb4.json" --max_length 32 --ncuda 0 --ncpus 1 --summary >"$TMP/g1.out" 2>&1 &&
	! grep -q grad_sum "$TMP/g1.out"
ok $? "batch_tile auto with 1 CPU worker stays untiled"
"$BIN" graph "$TMP/mb4x2.json" --max_length 32 --ncuda 0 --ncpus 2 --summary >"$TMP/g3.out" 2>&1 &&
	! grep -q grad_sum "$TMP/g3.out"
ok $? "batch_tile auto with 2 CPU workers and 2 micro-steps stays untiled (micro-steps cover the workers)"
"$BIN" graph "$TMP/mb4.json" --max_length 32 --ncuda 1 --ncpus 2 --summary >"$TMP/g4.out" 2>&1 &&
	! grep -q grad_sum "$TMP/g4.out"
ok $? "batch_tile auto with a CUDA worker stays untiled (GPU tasks stay coarse)"

# ---- bad values -----------------------------------------------------------------
"$BIN" graph "$TMP/mb4.json" --batch_tile 5 >"$TMP/bad1.out" 2>&1
[ $? -ne 0 ] && grep -q 'batch_tile 5.*micro batch 4' "$TMP/bad1.out"
ok $? "batch_tile larger than the micro batch is refused, naming both ($(head -c 160 "$TMP/bad1.out"))"
"$BIN" graph "$TMP/mb4.json" --batch_tile -2 >"$TMP/bad2.out" 2>&1
[ $? -ne 0 ] && grep -q 'batch_tile' "$TMP/bad2.out"
ok $? "a negative batch_tile is refused ($(head -c 120 "$TMP/bad2.out"))"
"$BIN" graph "$TMP/mb4.json" --batch_tile many >"$TMP/bad3.out" 2>&1
[ $? -ne 0 ] && grep -q 'expected auto or an integer' "$TMP/bad3.out"
ok $? "batch_tile must be auto or an integer ($(head -c 120 "$TMP/bad3.out"))"
printf '{"deepspeed_config": "mb4.json", "model": "tiny-llama", "batch_tile": "most"}' >"$TMP/badrun.json"
"$BIN" graph "$TMP/badrun.json" >"$TMP/bad4.out" 2>&1
[ $? -ne 0 ] && grep -q 'batch_tile.*auto' "$TMP/bad4.out"
ok $? "a run config's batch_tile \"most\" is refused ($(head -c 120 "$TMP/bad4.out"))"
