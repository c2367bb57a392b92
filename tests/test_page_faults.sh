#!/bin/sh
# test_page_faults.sh - step-local memory stays mapped from one step to the
# next. StarPU frees a step-local buffer on a CPU node as soon as its value
# dies.
# - Small buffers (runtime/exec/malloc_tune.h): bench-3m (micro batch 8 of
#   256 tokens) on one CPU worker needs more than one 64 MiB glibc heap a
#   step, and glibc unmapped the emptied second heap at every step's end, so
#   each step faulted in and zeroed 57 MB again (about 14,000 page faults).
#   stepgraph sets malloc after the first step so that the heap stays mapped.
# - Buffers of 32 MiB or more (runtime/exec/buffer_cache.h): glibc maps each
#   on its own and unmaps it at the free. A Llama with a vocabulary of
#   131,072 and a hidden size of 512 (tests/data/models/big-head-llama.json)
#   has gradients of 256 MiB (65,536 pages of 4 KiB) for its head and its
#   embedding; a step of one micro-batch of 64 tokens on one worker faulted
#   262,000 times (the gradients, their all-reduced copies). stepgraph keeps
#   those buffers for the next step.
# Counted: the minor page faults of a whole run (getrusage of the child), so
# that a step's own faults are the difference between a run of 3 steps and
# one of 2 (which varies by some tens). Checks:
#   1-3 bench-3m: the third step faults fewer than 1,000 times; with
#     STEPGRAPH_MALLOPT=0 (malloc left alone) a run of 3 steps faults over
#     7,000 times more (measured 14,000 more), so the first check can fail
#     (skipped where transparent huge pages are always on: a fault there
#     maps 2 MiB); the losses are bit-identical with and without.
#   4-6 the big-vocabulary Llama: the third step faults fewer than 4,096
#     times (a sixteenth of one gradient's pages; measured 3); with
#     STEPGRAPH_BUFFER_CACHE=0 it faults more than 131,072 times (two
#     gradients' pages), so check 4 can fail; the losses and gradient norms
#     of 3 steps are bit-identical with and without (steps 2 and 3 reuse
#     buffers that still hold step 1's values).
#   7 a save of that Llama faults fewer than three times its largest
#     tensor's pages: one buffer serves every tensor the save fills.
#   8-10 the same Llama in bf16, ZeRO 2, 2 micro-steps of accumulation, on
#     one worker: the tasks' fp32 copies of bf16 buffers come from StarPU's
#     allocator too (sg_task_mem), so the third step again faults fewer than
#     4,096 times, against more than 131,072 without the cache, and the
#     losses and gradient norms are bit-identical with and without.
#   11 the same on 2 workers: bit-identical with and without the cache.
# Prints TAP.
set -u
SG_TEST_NAME=page_faults
. "${SG_SRCDIR:-.}/tests/test_env.sh"
# the environment's own malloc settings would make stepgraph leave malloc alone
unset GLIBC_TUNABLES MALLOC_TOP_PAD_ MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_ \
	MALLOC_MMAP_MAX_ MALLOC_ARENA_MAX MALLOC_ARENA_TEST STEPGRAPH_MALLOPT STEPGRAPH_BUFFER_CACHE

# faults NAME STEPS [VAR=VALUE ...] [-- RUN ARGS...]: a run (by default
# bench-3m on one worker); prints the run's minor page faults ("fail" if it
# failed), metrics in $TMP/NAME.jsonl
faults() {
	"$PY" - "$BIN" "$SRC/configs/bench-3m.json" "$TMP/$1.jsonl" "$TMP/$1.out" "$2" "$@" <<'PYEOF'
import os, resource, subprocess, sys
binary, config, metrics, out, steps = sys.argv[1:6]
rest = sys.argv[8:]
env = dict(os.environ)
args = [config, "--ncpus", "1"]
while rest and rest[0] != "--":
    k, v = rest.pop(0).split("=", 1)
    env[k] = v
if rest:
    args = rest[1:]
with open(out, "w") as f:
    rc = subprocess.call([binary, "run"] + args + ["--steps", steps, "--warmup_steps", "1",
                          "--metrics", metrics], stdout=f, stderr=f, env=env)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt if rc == 0 else "fail")
PYEOF
}
# the losses and gradient norms of two runs' metrics, bit for bit
same() {
	"$PY" "$SRC/tests/sglog.py" same "$TMP/$1.jsonl" "$TMP/$2.jsonl" --steps 3 --keys loss,grad_norm
}

plan 11
t2=$(faults t2 2)
t3=$(faults t3 3)
p3=$(faults p3 3 STEPGRAPH_MALLOPT=0)
"$PY" -c 'import sys; a, b = map(int, sys.argv[1:]); sys.exit(not (abs(b - a) < 1000))' "$t2" "$t3" 2>/dev/null
ok $? "the third step faults fewer than 1,000 times (run of 2 steps: $t2 faults, of 3: $t3)"
if grep -q '\[always\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null; then
	skip "transparent huge pages always on: a fault maps 2 MiB"
else
	"$PY" -c 'import sys; a, b = map(int, sys.argv[1:]); sys.exit(not (b - a > 7000))' "$t3" "$p3" 2>/dev/null
	ok $? "STEPGRAPH_MALLOPT=0: the later steps fault again, over 7,000 times more ($p3 faults against $t3): the check above can fail"
fi
same t3 p3
ok $? "the same losses and gradient norms bit for bit with and without the malloc settings"

cat >"$TMP/z0.json" <<'JEOF'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}}
JEOF
cat >"$TMP/z1.json" <<'JEOF'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2}}
JEOF
# third_under / third_over BEFORE AFTER N: the third step's faults (a run of
# 3 steps less one of 2) under / over N
third_under() {
	"$PY" -c 'import sys; a, b, n = map(int, sys.argv[1:]); sys.exit(not (b - a < n))' "$@" 2>/dev/null
}
third_over() {
	"$PY" -c 'import sys; a, b, n = map(int, sys.argv[1:]); sys.exit(not (b - a > n))' "$@" 2>/dev/null
}
big="--model $SRC/tests/data/models/big-head-llama.json --max_length 64"
# cached NAME CONFIG WHAT: on one worker, the third step's faults with the
# cache under 4,096, without it over 131,072, and the same losses either way
cached() {
	with2=$(faults "$1.c2" 2 -- "$2" $big --ncpus 1)
	with3=$(faults "$1.c3" 3 -- "$2" $big --ncpus 1)
	third_under "$with2" "$with3" 4096
	ok $? "$3: the third step faults fewer than 4,096 times (runs of 2 and 3 steps: $with2 and $with3 faults)"
	none2=$(faults "$1.n2" 2 STEPGRAPH_BUFFER_CACHE=0 -- "$2" $big --ncpus 1)
	none3=$(faults "$1.n3" 3 STEPGRAPH_BUFFER_CACHE=0 -- "$2" $big --ncpus 1)
	third_over "$none2" "$none3" 131072
	ok $? "$3, STEPGRAPH_BUFFER_CACHE=0: the third step faults over 131,072 times ($none2 and $none3 faults): the check above can fail"
	same "$1.c3" "$1.n3"
	ok $? "$3: the same losses and gradient norms bit for bit with and without the cache"
}
cached fp32 "$TMP/z0.json" "big vocabulary"
# a save fills every tensor it writes into one buffer of the largest
# tensor's size (runtime/io/safetensors.c): its own faults, a run of 2 steps
# with --save less the same run without, stay under three times that
# tensor's 65,536 pages (measured 131,000; 394,000 when each tensor's values
# got a fresh buffer)
saved2=$(faults fp32.s2 2 -- "$TMP/z0.json" $big --ncpus 1 --save "$TMP/ck_pf")
third_under "$with2" "$saved2" 196608
ok $? "a checkpoint save faults fewer than 196,608 times ($with2 faults without it, $saved2 with)"
cached bf16 "$TMP/z1.json" "bf16, accumulation 2"
a3=$(faults a3 3 -- "$TMP/z1.json" $big --ncpus 2)
m3=$(faults m3 3 STEPGRAPH_BUFFER_CACHE=0 -- "$TMP/z1.json" $big --ncpus 2)
[ "$a3" != fail ] && [ "$m3" != fail ] && same a3 m3
ok $? "bf16, accumulation 2, 2 workers: the same losses and gradient norms with and without the cache"
