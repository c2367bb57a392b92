#!/bin/sh
# test_train_gpu.sh - `stepgraph run` on a CUDA worker: the GPU codelets
# (codelets/cuda/) train the default tiny model, and the loss curve tracks
# the CPU run of the same model, data and seed; bf16 on the GPU tracks the
# fp32 CPU run loosely; ZeRO-3 with SuperOffload and activation
# checkpointing runs with CPU Adam beside GPU work; the cuBLAS attention
# route tracks the fp32 one; the two tiny mixture-of-experts models train
# on the GPU. Prints TAP; without a
# CUDA device (or a build without CUDA) it prints a SKIP plan.
set -u
SG_TEST_NAME=train_gpu SG_TEST_CUDA=1
. "${SG_SRCDIR:-.}/tests/test_env.sh"
devices=$("$BIN" version 2>/dev/null | sed -n 's/.*CUDA devices: \([0-9]*\).*/\1/p')
if [ -z "$devices" ] || [ "$devices" -eq 0 ]; then
	skip_all "no CUDA device"
fi

. "$SRC/tests/train_lib.sh"

# The reference: fp32 on CPU workers only. 30 steps: long enough for a
# kernel bug to show in the curve, short for the test.
ds f32 '{}'
train cpu f32 --steps 30 --ncuda 0
ok "$(cat "$TMP/cpu.rc")" "fp32 run on CPU workers (reference)"

# fp32 on the GPU: cuBLAS and the kernels sum in other orders than the CPU
# code, so the curves drift apart by rounding only (measured 1e-4 relative
# at most over 30 steps on the emulated kernels' tests; 1% is the bound).
train gpu32 f32 --steps 30 --ncuda 1 --trace "$TMP/gpu32-trace.json"
ok "$(cat "$TMP/gpu32.rc")" "fp32 run with a CUDA worker"
grep -q "GPU: busy" "$TMP/gpu32.out"; ok $? "the summary reports GPU busy time"
"$PY" - "$TMP/gpu32-trace.json" <<'PYEOF'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
kinds = {e["args"]["kind"] for e in ev
         if e.get("ph") == "X" and str(e.get("args", {}).get("worker", "")).startswith("CUDA")}
assert {"forward", "backward"} <= kinds, kinds
PYEOF
ok $? "the trace shows forward and backward tasks on the CUDA worker"
close gpu32 cpu 1e-2; ok $? "fp32 GPU losses track the CPU run (rel 1e-2, every step)"

# bf16 on the GPU against fp32 on the CPU: bf16 storage of weights,
# activations and gradients; the curve follows within a few percent.
ds bf16 '{"bf16": {"enabled": true}}'
train gpu16 bf16 --steps 30 --ncuda 1
ok "$(cat "$TMP/gpu16.rc")" "bf16 run with a CUDA worker"
close gpu16 cpu 5e-2; ok $? "bf16 GPU losses track the fp32 CPU run (rel 5e-2, every step)"
train cpu16 bf16 --steps 30 --ncuda 0
close gpu16 cpu16 2e-2; ok $? "bf16 GPU losses track the bf16 CPU run (rel 2e-2)"

# The cuBLAS attention route (docs/gpu.md, "Attention implementations"): the
# same bf16 run with attention's products on tensor cores; it rounds P and
# dS to bf16 where the fp32 route keeps them in fp32, a rounding of the
# kind that separates the CPU's bf16 run from the GPU's (rel 2e-2).
(export STEPGRAPH_ATTENTION_IMPL=cublas; train gpu16blas bf16 --steps 30 --ncuda 1)
ok "$(cat "$TMP/gpu16blas.rc")" "bf16 run with STEPGRAPH_ATTENTION_IMPL=cublas"
close gpu16blas gpu16 2e-2; ok $? "cuBLAS attention: losses track the fp32 route's run (rel 2e-2)"
(export STEPGRAPH_ATTENTION_IMPL=fast; train badimpl bf16 --steps 1 --ncuda 1)
[ "$(cat "$TMP/badimpl.rc")" != 0 ] && grep -q "STEPGRAPH_ATTENTION_IMPL=fast" "$TMP/badimpl.err" "$TMP/badimpl.out"
ok $? "STEPGRAPH_ATTENTION_IMPL=fast stops the run with a message naming it"

# SuperOffload: ZeRO-3, CPU Adam for most sub-groups, GPU Adam for the rest,
# activation checkpointing, bf16; speculation validated against clipping.
ds so '{"bf16": {"enabled": true}, "gradient_clipping": 1.0, "zero_optimization": {"stage": 3, "sub_group_size": 100000, "offload_optimizer": {"device": "cpu", "ratio": 0.8, "super_offload": true}}}'
train so so --steps 30 --ncuda 1 --activation_checkpointing
ok "$(cat "$TMP/so.rc")" "SuperOffload bf16 run with a CUDA worker"
grep -q "CPU Adam [0-9.]* ms" "$TMP/so.out"; ok $? "CPU Adam time is reported beside the GPU's"
close so gpu16 5e-2; ok $? "SuperOffload losses track the plain bf16 GPU run (rel 5e-2)"
"$PY" -c 'import json,sys; l=[json.loads(x)["loss"] for x in open(sys.argv[1])]; sys.exit(not l[-1] < l[0] - 0.5)' "$TMP/so.jsonl"
ok $? "SuperOffload run learns (loss falls by more than 0.5)"

# ZeRO-3 parameter offload: the same step with every sub-group on the CPU,
# with and without the parameters in host memory (fetched by a task on the
# CUDA worker before each gather): the same numerics, so the same losses up
# to the GPU's summation orders (rel 1e-2); the fetches cross the link.
ds op_off '{"bf16": {"enabled": true}, "gradient_clipping": 1.0, "zero_optimization": {"stage": 3, "sub_group_size": 100000, "stage3_param_persistence_threshold": 0, "offload_optimizer": {"device": "cpu"}}}'
ds op_on '{"bf16": {"enabled": true}, "gradient_clipping": 1.0, "zero_optimization": {"stage": 3, "sub_group_size": 100000, "stage3_param_persistence_threshold": 0, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}'
train op_off op_off --steps 20 --ncuda 1
train op_on op_on --steps 20 --ncuda 1 --trace "$TMP/op-trace.json"
ok "$(cat "$TMP/op_on.rc")" "parameters offloaded: bf16 run with a CUDA worker"
close op_on op_off 1e-2; ok $? "parameters offloaded: losses track the same run without (rel 1e-2)"
"$PY" - "$TMP/op-trace.json" <<'PYEOF'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
# the tasks of the worker lanes (the critical-path lane's copies carry no worker)
fetch = [e for e in ev if e.get("ph") == "X" and e.get("name", "").startswith("h2d.param.fwd.")
         and "node" in e.get("args", {})]
off = [e for e in fetch if not str(e["args"].get("worker", "")).startswith("CUDA")]
assert fetch and not off, (len(fetch), off[:3])
PYEOF
ok $? "parameters offloaded: the fetch tasks run on the CUDA worker"

# StarPU's GPU count against the plan of what its allocator holds
# (graph/memory_held.h; exact for the tiny models on an H100): within 10%.
held_close() {
	"$PY" - "$TMP/$1.out" <<'PYEOF'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"peak memory, gpu: measured ([0-9.]+) MiB, planned [0-9.]+ MiB \([^)]*\); "
              r"as StarPU's allocator holds it ([0-9.]+) MiB", t)
assert m, "no gpu memory line"
measured, held = float(m.group(1)), float(m.group(2))
assert held > 0 and abs(measured - held) <= 0.10 * held, (measured, held)
PYEOF
}
held_close gpu32; ok $? "fp32: StarPU's GPU peak within 10% of the allocator plan"
held_close so; ok $? "SuperOffload: StarPU's GPU peak within 10% of the allocator plan"

# Mixture of experts on the CUDA worker (codelets/cuda/moe.cu, moe_group.cu):
# Qwen3-MoE-style tiny-moe and GPT-OSS-style tiny-gpt-oss (sinks, windows,
# biases, the clamped GLU). fp32 follows the CPU run step for step (measured
# on an H100: 3.3e-7 and 4.9e-7 relative over 20 steps). bf16 cannot be held
# to a curve: a rounding flips a router's top-k choice and the runs part ways
# (the CPU's own bf16 run is 1e-1 and 6e-2 away from its fp32 run over 20
# steps), so bf16 is held to the first step's loss - one forward on the
# same weights - against the CPU's bf16, and to learning.
for m in tiny-moe tiny-gpt-oss; do
	train "cpu-$m" f32 --model "$m" --steps 20 --ncuda 0
	train "gpu-$m" f32 --model "$m" --steps 20 --ncuda 1
	ok "$(cat "$TMP/gpu-$m.rc")" "$m: fp32 run with a CUDA worker"
	close "gpu-$m" "cpu-$m" 1e-3; ok $? "$m: fp32 GPU losses track the CPU run (rel 1e-3, every step)"
	train "cpu16-$m" bf16 --model "$m" --steps 1 --ncuda 0
	train "gpu16-$m" bf16 --model "$m" --steps 20 --ncuda 1
	ok "$(cat "$TMP/gpu16-$m.rc")" "$m: bf16 run with a CUDA worker"
	"$PY" - "$TMP/cpu16-$m.jsonl" "$TMP/gpu16-$m.jsonl" <<'PYEOF'
import json, math, sys
cpu = [json.loads(l)["loss"] for l in open(sys.argv[1])]
gpu = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(cpu) == 1 and len(gpu) == 20, (len(cpu), len(gpu))
assert all(isinstance(x, float) and math.isfinite(x) for x in cpu + gpu), (cpu, gpu)
assert abs(gpu[0] - cpu[0]) <= 1e-2 * abs(cpu[0]), ("step 1", gpu[0], cpu[0])
assert gpu[-1] < gpu[0] - 0.5, ("does not learn", gpu[0], gpu[-1])
PYEOF
	ok $? "$m: bf16 GPU step 1 within 1e-2 of the CPU's bf16, and the run learns"
done

# DeepSpeed's schedulers on the GPU-side Adam (codelets/cuda/adam.cu): every
# update's lr, OneCycle's cycled beta1 and AdamW without bias correction reach
# the kernel as they reach the CPU's, so the fp32 curves stay within 1e-3
# relative every step (a wrong beta1 or lr moves them by more within a few steps)
for s in cosine onecycle; do
	"$PY" - "$SRC/tests/data/lr-schedules/$s.json" "$TMP/$s.json" <<'PYEOF'
import json, sys
cfg = json.load(open(sys.argv[1]))
if "OneCycle" in json.dumps(cfg):
    cfg["optimizer"]["params"]["bias_correction"] = False
json.dump(cfg, open(sys.argv[2], "w"))
PYEOF
	train "cpu-$s" "$s" --steps 16 --ncuda 0
	train "gpu-$s" "$s" --steps 16 --ncuda 1
	ok "$(cat "$TMP/gpu-$s.rc")" "$s: fp32 run with Adam on the CUDA worker"
	close "gpu-$s" "cpu-$s" 1e-3; ok $? "$s: GPU Adam's losses track the CPU run (rel 1e-3, every step)"
done

# calibrate with a CUDA worker: node_times.csv holds the GPU tasks' times on
# their own lines (device gpu), which simulate --cost fitted fits apart from
# the CPU's
"$BIN" calibrate "$TMP/f32.json" --name gpucal --out "$TMP/cal" --steps 12 --ncuda 1 --max_length 32 \
	--base h100-pcie >"$TMP/cal.out" 2>&1
ok $? "calibrate with a CUDA worker"
S=$TMP/cal/gpucal.sampling/node_times.csv
grep -q ',forward,.*,gpu$' "$S" && grep -q ',backward,.*,gpu$' "$S"
ok $? "its node_times.csv has the forward and backward tasks' GPU times"
"$BIN" simulate "$TMP/f32.json" --max_length 32 --machine "$TMP/cal/gpucal.json" --cost fitted >"$TMP/calsim.out" 2>&1
ok $? "simulate --cost fitted on it"

done_testing
