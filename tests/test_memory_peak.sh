#!/bin/sh
# test_memory_peak.sh - the plan's peak memory against StarPU's count, and
# liveness changing no result. `stepgraph run` prints
#   peak memory, host (one memory: ...): measured X MiB, planned Y MiB (+z%)
# on a CPU-only run: measured is the most memory StarPU counted as used at
# any task's end (starpu_memory_get_used over the CPU memory nodes: the
# state we allocate with STARPU_MALLOC_COUNT and every step-local buffer
# StarPU allocates at its first write and frees when liveness invalidates
# it); planned is sg_graph_peak_memory_one_space (state plus the program-
# order peak of the step-local values, GPU and host spaces in one memory).
# The check is that they agree within 10% on a few small configs (ZeRO-0,
# ZeRO-3 with optimizer offload and accumulation, checkpointing on and off),
# run with one CPU worker, no steps in flight, lws; one check runs
# checkpointing with 2 workers under a FIFO policy. With more workers StarPU
# runs independent work ahead of program order (the forward of a later
# micro-step, one batch tile ahead of another) and holds more than the
# program-order plan: there the plan plays the step on the workers as lws
# runs it (graph/peak_workers.h). The default job (configs/default.json:
# accumulation 4 of micro batch 1, lws, 2 workers) measures 60% over the
# program-order plan; the check is that it is within 10% of the plan for 2
# workers, and (so that the check can fail) that the plan for 2 workers is
# more than 1.1 / 0.9 times the program-order figure the run prints beside
# it: then no measured peak within 10% of the one is within 10% of the
# other. That control compares the two plans, both computed from the graph:
# how far a run really gets ahead depends on how the two workers' timings
# fall on a loaded machine, and it asserts nothing about that. ZeRO-3 with
# 2 workers too.
# The micro-step window (graph/compile.h micro_window: as many micro-steps in
# flight as workers) keeps the measured peak steady from run to run: without
# it (STEPGRAPH_MICRO_WINDOW=0) the default job measured 26 to 37 MiB (plan
# 34.7), with it 24 to 26 MiB (plan 24.4).
# Then a run with STEPGRAPH_LIVENESS=0 (every
# step-local buffer kept to the end of the step) gives bit-identical losses
# and holds more. Last, a model far beyond this machine's RAM is refused before
# anything is allocated (runtime/train/host_fit.c). Prints TAP.
set -u
SG_TEST_NAME=memory_peak
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"

# mem NAME: "measured planned" in MiB from a run's output
mem() { sed -n '/peak memory, host (one memory/s/.*: measured \([0-9.]*\) MiB, planned \([0-9.]*\) MiB.*/\1 \2/p' "$TMP/$1.out"; }
# within NAME: measured within 10% of planned, both positive
within() {
	set -- $(mem "$1")
	[ $# -eq 2 ] && "$PY" -c 'import sys; m, p = map(float, sys.argv[1:]); sys.exit(not (m > 0 and p > 0 and abs(m - p) <= 0.10 * p))' "$1" "$2"
}

plan 18
ds z0 '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 0}}'
ds z3 '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 3, "sub_group_size": 200000, "offload_optimizer": {"device": "cpu"}}}'
for c in z0 z3; do
	for ck in "" --activation_checkpointing; do
		name="$c${ck:+_ckpt}"
		train "$name" "$c" --max_length 128 --steps 2 --lookahead 1 --sched lws --ncpus 1 $ck
		[ "$(cat "$TMP/$name.rc")" -eq 0 ] && within "$name"
		ok $? "$name: measured peak within 10% of the plan ($(mem "$name"))"
	done
done
# a FIFO policy with 2 workers runs every ready task as soon as a worker is
# free: recomputes wait for the backward above them, or all of them would
# run at the start of the backward and hold every layer's internals
# (measured +18% over the plan before they waited)
train z3_fifo z3 --max_length 128 --steps 2 --lookahead 1 --sched eager --ncpus 2 --batch_tile 0 --activation_checkpointing
[ "$(cat "$TMP/z3_fifo.rc")" -eq 0 ] && within z3_fifo
ok $? "checkpointing under eager with 2 workers: recomputes do not run ahead ($(mem z3_fifo))"
# several workers: the default job (2 workers, lws, no batch tiles) and ZeRO-3
# with accumulation and batch tiles on 2 workers
"$BIN" run "$SRC/configs/default.json" --steps 3 --lookahead 1 >"$TMP/default2.out" 2>"$TMP/default2.err"
rc=$?
[ $rc -eq 0 ] && within default2
ok $? "default job, 2 workers: measured peak within 10% of the plan for 2 workers ($(mem default2))"
# the control compares the two plans (deterministic), not the measured peak
# with the program-order plan: whether a run gets that far ahead is timing
po=$(sed -n 's/.*planned for 2 CPU workers.*in program order \([0-9.]*\) MiB.*/\1/p' "$TMP/default2.out")
set -- $(mem default2) $po
[ $# -eq 3 ] && "$PY" -c 'import sys; w, p = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not (p > 0 and 0.9 * w > 1.1 * p))' "$2" "$3"
ok $? "default job: the plan for 2 workers (${2:-?} MiB) is over 1.1 / 0.9 times the program-order plan (${3:-?} MiB): a peak within 10% of one is not within 10% of the other, so the check above can fail"
# the micro-step window (2 workers: micro-step k + 2 waits for k's backward)
# holds less than no window, where every micro-step's forward may run ahead,
# and changes no result
STEPGRAPH_MICRO_WINDOW=0 "$BIN" run "$SRC/configs/default.json" --steps 3 --lookahead 1 \
	--metrics "$TMP/default2_nowin.jsonl" >"$TMP/default2_nowin.out" 2>&1
"$BIN" run "$SRC/configs/default.json" --steps 3 --lookahead 1 --metrics "$TMP/default2_win.jsonl" \
	>"$TMP/default2_win.out" 2>&1
# Whether a run without the window actually runs ahead depends on how the two
# workers' timings fall (measured 26 to 37 MiB): what is asserted is the
# plan for 2 workers (lws played on the graph, deterministic) with and
# without the window, and the windowed run within 10% of its plan.
set -- $(mem default2_win) $(mem default2_nowin)
[ $# -eq 4 ] && "$PY" -c 'import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))' "$2" "$4" &&
	within default2_win && same default2_win default2_nowin
ok $? "default job: the micro-step window plans less for 2 workers (${2:-?} MiB) than none (${4:-?} MiB), its run measures within 10% of that (${1:-?} MiB; without it ${3:-?}), the same losses bit for bit"
train z3_w2 z3 --max_length 128 --steps 2 --lookahead 1 --sched lws --ncpus 2
[ "$(cat "$TMP/z3_w2.rc")" -eq 0 ] && within z3_w2
ok $? "z3 with 2 workers and batch tiles: measured peak within 10% of the plan ($(mem z3_w2))"
# liveness off: the same losses bit for bit, more memory held
train z3_live z3 --max_length 128 --steps 3 --lookahead 1 --ncpus 2
STEPGRAPH_LIVENESS=0 train z3_nolive z3 --max_length 128 --steps 3 --lookahead 1 --ncpus 2
same z3_live z3_nolive
ok $? "STEPGRAPH_LIVENESS=0: the same losses bit for bit"
set -- $(mem z3_live) $(mem z3_nolive)
[ $# -eq 4 ] && "$PY" -c 'import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))' "$1" "$3"
ok $? "liveness holds less memory than keeping every buffer to the step's end ($(mem z3_live | cut -d' ' -f1) < $(mem z3_nolive | cut -d' ' -f1) MiB)"
# the line is there on every CPU run, lookahead included
train z0_la z0 --max_length 32 --steps 2 --lookahead 2
grep -q "peak memory, host (one memory: the GPU-space buffers live in RAM): measured .* MiB, planned .* MiB" "$TMP/z0_la.out" &&
	grep -q "lookahead 2: steps overlap, the plan is of one step" "$TMP/z0_la.out"
ok $? "the memory line and the lookahead note are printed"

# With CUDA workers StarPU's allocator holds more than the live bytes
# (graph/memory_held.h). Its plan against StarPU's counts measured on an
# H100 (2026-11-26, docs/memory.md): tiny-moe and tiny-gpt-oss in fp32 with
# train_lib.sh's base config (micro batch 2, sequence 32), as
# tests/test_train_gpu.sh runs them there: GPU 46.0 and 32.0 MiB, main RAM
# 53.1 and 36.4 MiB. A graph compiled for CPU workers gets no such line.
ds gpubase '{}'
for m in "tiny-moe 46.0 53.1" "tiny-gpt-oss 32.0 36.4"; do
	# shellcheck disable=SC2086 # the three words
	set -- $m
	"$BIN" graph "$TMP/gpubase.json" --model "$1" --max_length 32 --ncuda 1 --summary \
		>"$TMP/held_$1.out" 2>&1
	grep -q "^held by StarPU's allocator with CUDA workers: gpu $2 MiB, host $3 MiB " "$TMP/held_$1.out"
	ok $? "$1: the allocator plan gives the H100's counts (gpu $2, host $3 MiB)"
done
"$BIN" graph "$TMP/gpubase.json" --model tiny-moe --max_length 32 --ncuda 0 --summary >"$TMP/held_cpu.out" 2>&1 &&
	grep -q "^peak memory, gpu" "$TMP/held_cpu.out" && ! grep -q "held by StarPU" "$TMP/held_cpu.out"
ok $? "a graph compiled for CPU workers: no allocator line"

# A run that cannot fit this machine's RAM is refused before anything is
# allocated, with the figures (not killed by the kernel's OOM killer): a
# Llama of 1.6 T parameters (hidden 16384, 512 layers). The need is the
# step's plan: the trainer holds no copy of the model, a load and one rank's
# save going a tensor at a time (runtime/train/state_source.h,
# sg_state_reader), so --load and --save give the same figures as a plain
# run and the message names no host copies. The machine's RAM is
# /proc/meminfo's MemTotal; the plan is compared with the live bytes of the
# model's fp32 state, 16 bytes a parameter (weights, gradients, Adam's two
# moments), counted here from the dimensions: the plan holds at least those.
"$PY" - "$SRC/models/llama-3.2-1b.json" "$TMP/huge.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m.update(name="huge", hidden_size=16384, intermediate_size=53248, num_hidden_layers=512,
         num_attention_heads=128, num_key_value_heads=8, head_dim=128, tie_word_embeddings=False)
json.dump(m, open(sys.argv[2], "w"))
PYEOF
cat >"$TMP/huge_check.py" <<'PYEOF'
import re, sys
out, rc = open(sys.argv[1]).read(), int(sys.argv[2])
h, i, L, V, kv = 16384, 53248, 512, 128256, 8 * 128
params = 2 * V * h + L * (h * (h + 2 * kv) + h * h + 3 * h * i + 2 * h) + h
ram = int(re.search(r"MemTotal:\s+(\d+) kB", open("/proc/meminfo").read()).group(1)) / 2**20
m = re.search(r"needs at least ([\d.]+) GiB of main memory and the machine has ([\d.]+) GiB: "
              r"the step's plan holds ([\d.]+) GiB there with \d+ CPU and 0 CUDA workers "
              r"\([^)]*\); use a smaller model", out)
assert rc == 1 and m and "Step 1" not in out and "host copies" not in out, (rc, out)
need, have, plan = map(float, m.groups())
assert abs(have - ram) <= 0.1 and need > have and abs(need - plan) <= 0.05, (need, have, ram)
assert plan >= 16 * params / 2**30, (plan, 16 * params / 2**30)
print(need)
PYEOF
"$BIN" run "$SRC/configs/default.json" --model "$TMP/huge.json" --steps 1 >"$TMP/huge.out" 2>&1
"$PY" "$TMP/huge_check.py" "$TMP/huge.out" $? >"$TMP/huge.need"
ok $? "a model far beyond this machine's RAM is refused before allocating, naming the figures"
"$BIN" run "$SRC/configs/default.json" --model "$TMP/huge.json" --steps 1 --load "$TMP/no_ck" \
	>"$TMP/huge_load.out" 2>&1
"$PY" "$TMP/huge_check.py" "$TMP/huge_load.out" $? >"$TMP/huge_load.need" &&
	cmp -s "$TMP/huge.need" "$TMP/huge_load.need"
ok $? "with --load the same need: the load goes a tensor at a time"
"$BIN" run "$SRC/configs/default.json" --model "$TMP/huge.json" --steps 1 --save "$TMP/huge_ck" \
	>"$TMP/huge_save.out" 2>&1
"$PY" "$TMP/huge_check.py" "$TMP/huge_save.out" $? >"$TMP/huge_save.need" &&
	cmp -s "$TMP/huge.need" "$TMP/huge_save.need" && ! [ -e "$TMP/huge_ck" ]
ok $? "with --save on one rank the same need (the save writes a tensor at a time), and nothing is created"
