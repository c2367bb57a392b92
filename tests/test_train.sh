#!/bin/sh
# test_train.sh - `stepgraph run` end to end on StarPU's CPU workers: the
# losses must not depend on the scheduler or the worker count (bit for bit),
# ZeRO stages and offload give the same trajectory, accumulation 4 x 1
# equals micro-batch 4, SuperOffload's speculation with clipping equals the
# non-speculative step, fp16 overflow skips the step and lowers the loss
# scale, a resumed run continues exactly, and the default model learns.
# Losses are compared from the metrics files (JSONL, 17 significant digits).
# Prints TAP.
set -u
SG_TEST_NAME=train
. "${SG_SRCDIR:-.}/tests/test_env.sh"
# (CPU numerics are compared bit for bit: test_env.sh sets no CUDA worker)
if ! "$BIN" run --help >/dev/null 2>&1; then
	skip_all "stepgraph run unavailable"
fi

. "$SRC/tests/train_lib.sh"
# The bit-for-bit comparisons across worker counts are of one graph: batch
# tiles off (batch_tile auto would tile on 2 workers and not on 1; tiles
# are tested in tests/test_tiles_batch.sh)
SG_BATCH_TILE=0

# ---- the loss comparisons refuse what is not a finite number ---------------
# (metrics files made here: two runs that both diverge must not compare equal)
printf '{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.25}\n' >"$TMP/fin_a.jsonl"
cp "$TMP/fin_a.jsonl" "$TMP/fin_b.jsonl"
printf '{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.2500000000000004}\n' >"$TMP/fin_c.jsonl"
printf '{"step": 1, "loss": 2.5}\n{"step": 2, "loss": null}\n' >"$TMP/nul_a.jsonl"
printf '{"step": 1, "loss": NaN}\n{"step": 2, "loss": NaN}\n' >"$TMP/nan_a.jsonl"
printf '{"step": 1, "loss": Infinity}\n{"step": 2, "loss": 1}\n' >"$TMP/inf_a.jsonl"
for f in nul nan inf; do cp "$TMP/${f}_a.jsonl" "$TMP/${f}_b.jsonl"; done
same fin_a fin_b && close fin_a fin_b 1e-5 && same_from fin_a fin_b 0 && close fin_c fin_a 1e-12
ok $? "loss helpers: equal finite losses compare equal (and close), a 1-ulp difference is close"
! same fin_c fin_a 2>/dev/null; ok $? "loss helpers: a 1-ulp difference is not the same bit for bit"
bad=0
for f in nul nan inf; do
	same "${f}_a" "${f}_b" 2>/dev/null && bad=1
	close "${f}_a" "${f}_b" 1e-5 2>/dev/null && bad=1
	same_from "${f}_a" "${f}_b" 0 2>/dev/null && bad=1
done
[ $bad -eq 0 ]; ok $? "loss helpers: identical files with null (NaN), NaN or Infinity losses do not compare equal or close"

# ---- scheduler and worker count: bit for bit -------------------------------
ds base '{}'
train ref base --sched eager --ncpus 1
ok "$(cat "$TMP/ref.rc")" "run with eager on 1 CPU worker"
grep -q "^Step 1 | Loss: " "$TMP/ref.out"; ok $? "step log line 'Step 1 | Loss: ...'"
grep -q "Summary: " "$TMP/ref.out"; ok $? "closing summary"
for sched in eager lws dmda dmdas; do
	for ncpus in 1 2; do
		[ "$sched$ncpus" = eager1 ] && continue
		train "s_$sched$ncpus" base --sched "$sched" --ncpus "$ncpus"
		same "s_$sched$ncpus" ref; ok $? "$sched with $ncpus CPU workers: same losses bit for bit"
	done
done

# ---- ZeRO stages, offload: same trajectory --------------------------------
for st in 1 2 3; do
	ds "z$st" "{\"zero_optimization\": {\"stage\": $st}}"
	train "z$st" "z$st" --ncpus 2
	same "z$st" ref && differs "z$st" ref; ok $? "ZeRO stage $st (another graph): same losses as stage 0"
	ds "z${st}off" "{\"zero_optimization\": {\"stage\": $st, \"offload_optimizer\": {\"device\": \"cpu\"}}}"
	train "z${st}off" "z${st}off" --ncpus 2
	same "z${st}off" ref && differs "z${st}off" "z$st"
	ok $? "ZeRO stage $st with the optimizer on the CPU (another graph): same losses"
done
# ratio 0.5 over small sub-groups: half the sub-groups stepped on each side
ds ratio '{"zero_optimization": {"stage": 3, "sub_group_size": 100000, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}'
train ratio ratio --ncpus 2
"$BIN" graph "$TMP/ratio.json" --max_length 32 --format json -o "$TMP/ratio-graph.json" 2>/dev/null
"$PY" -c 'import json,sys; c=json.load(open(sys.argv[1]))["summary"]["count"]; sys.exit(not (c["adam_cpu"] > 0 and c["adam_gpu"] > 0))' "$TMP/ratio-graph.json"
ok $? "ratio 0.5: the graph has both CPU and GPU-side Adam sub-groups"
same ratio ref; ok $? "ratio 0.5 over 9 sub-groups: same losses"
train ckpt base --activation_checkpointing
same ckpt ref && differs ckpt ref; ok $? "activation checkpointing (recompute tasks): same losses bit for bit"

# ---- accumulation 4 x 1 == micro-batch 4 ----------------------------------
ds mb4 '{"train_micro_batch_size_per_gpu": 4}'
ds ga4 '{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4}'
train mb4 mb4
train ga4 ga4
close ga4 mb4 1e-5; ok $? "accumulation 4 x micro-batch 1 equals micro-batch 4 (rel 1e-5)"

# ---- SuperOffload speculation + clipping == non-speculative -----------------
clipcfg='"gradient_clipping": 0.05, "zero_optimization": {"stage": 3, "sub_group_size": 200000, "offload_optimizer": {"device": "cpu"'
ds plain "{$clipcfg}}}"
ds spec "{$clipcfg, \"super_offload\": true}}}"
train plain plain --steps 6
train spec spec --steps 6 --speculation always
ok "$(cat "$TMP/spec.rc")" "SuperOffload run"
grep -q "SuperOffload: [1-9][0-9]* of [0-9]* speculative sub-group steps rolled back" "$TMP/spec.out"
ok $? "clipping makes validation roll speculative steps back"
close spec plain 1e-5; ok $? "speculation + rollback under clipping equals the non-speculative steps (rel 1e-5)"
train spec2 spec --steps 6 --ncpus 2 --speculation always
grep -q "1 CPU reserved for the optimizer" "$TMP/spec2.out"; ok $? "cpuadam_cores_perc reserves a CPU worker for the optimizer"
same spec2 spec; ok $? "... and the losses do not change"

# ---- fp16: overflow skips the step and halves the scale --------------------
ds fp16 '{"fp16": {"enabled": true, "initial_scale_power": 20, "hysteresis": 1}}'
train fp16 fp16 --steps 12
"$PY" - "$TMP/fp16.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows[0]["skipped"] and rows[0]["loss_scale"] == 2.0**20, rows[0]
for a, b in zip(rows, rows[1:]):
    if a["skipped"]:
        assert b["loss_scale"] == a["loss_scale"] / 2, (a, b)   # hysteresis 1
    else:
        assert b["loss_scale"] == a["loss_scale"], (a, b)       # window 1000 not reached
assert not rows[-1]["skipped"], rows[-1]
PYEOF
ok $? "fp16: overflowing steps are skipped and halve the loss scale, then training proceeds"
ds fp16static '{"fp16": {"enabled": true, "loss_scale": 1e30}}'
train f16all fp16static --steps 3 --save "$TMP/ck_f16"
ds lr0 '{"optimizer": {"params": {"lr": 0}}}'
train lr0 lr0 --steps 3 --save "$TMP/ck_lr0"
"$PY" "$SRC/tests/stfile.py" same-tensors "$TMP/ck_f16/step-00000003/model.safetensors" \
	"$TMP/ck_lr0/step-00000003/model.safetensors"
ok $? "fp16 steps that all overflow leave the weights exactly as initialised"

# ---- checkpoint and exact resume -------------------------------------------
train full base --steps 6
train half base --steps 3 --save "$TMP/ck"
[ "$(cat "$TMP/ck/latest")" = step-00000003 ] && [ -f "$TMP/ck/step-00000003/model.safetensors" ] &&
	[ -f "$TMP/ck/step-00000003/state.safetensors" ]
ok $? "--save writes step-00000003/{model,state}.safetensors and a latest file naming it"
train rest base --steps 3 --load "$TMP/ck"
ok "$(cat "$TMP/rest.rc")" "--load CHECKPOINT resumes"
same_from full rest 3; ok $? "resumed steps 4-6 have the losses of the uninterrupted run, bit for bit"
grep -q "^Step 4 |" "$TMP/rest.out"; ok $? "resumed run continues the step numbering"
train other mb4 --steps 1 --load "$TMP/ck"
grep -q "another model, data, seed" "$TMP/other.err"; ok $? "resuming with another batch size is refused with a reason"
mkdir -p "$TMP/ckbad" && cp "$TMP/ck/step-00000003/model.safetensors" "$TMP/ckbad/"
"$PY" - "$TMP/ck/step-00000003/state.safetensors" "$TMP/ckbad/state.safetensors" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h["__metadata__"]["adam_step"] = "99"
hb = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PYEOF
train ckbad base --steps 1 --load "$TMP/ckbad"
[ "$(cat "$TMP/ckbad.rc")" -ne 0 ] && grep -q "adam_step" "$TMP/ckbad.err"; ok $? "a training state with a bad adam_step is an error naming it"
train fromw lr0 --steps 1 --load "$TMP/ck/step-00000003/model.safetensors"
ok "$(cat "$TMP/fromw.rc")" "--load WEIGHTS starts a new run from saved weights"
printf 'not a checkpoint' >"$TMP/bad.safetensors"
train badw base --load "$TMP/bad.safetensors"
[ "$(cat "$TMP/badw.rc")" -ne 0 ] && grep -q "bad.safetensors" "$TMP/badw.err"; ok $? "a corrupt weights file is an error naming it"

train badsave base --save /nonexistent-dir/ck
[ "$(cat "$TMP/badsave.rc")" -ne 0 ] && grep -q "cannot create /nonexistent-dir/ck" "$TMP/badsave.err" &&
	! grep -q "^Step 1 " "$TMP/badsave.out"
ok $? "an unusable --save directory is an error before training"
train badtrace base --trace /nonexistent-dir/t.json
[ "$(cat "$TMP/badtrace.rc")" -ne 0 ] && grep -q "cannot write in /nonexistent-dir" "$TMP/badtrace.err" &&
	! grep -q "^Step 1 " "$TMP/badtrace.out"
ok $? "an unwritable --trace location is an error before training"

# ---- other models and precisions -------------------------------------------
train qwen base --model tiny-qwen3
ok "$(cat "$TMP/qwen.rc")" "tiny-qwen3 (QK-norm, untied head) trains"
ds bf16 '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "sub_group_size": 300000}}'
train bf16 bf16 --steps 8
"$PY" - "$TMP/bf16.jsonl" "$TMP/s_eager2.jsonl" <<'PYEOF'
import json, sys, math
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
assert all(math.isfinite(x) for x in a) and a[-1] < a[0], a
PYEOF
ok $? "bf16 with ZeRO-3 offload trains (finite, falling loss)"
"$PY" - "$SRC/models/tiny-llama.json" "$TMP/longrope.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["rope_scaling"] = {"rope_type": "longrope", "factor": 2.0}
json.dump(m, open(sys.argv[2], "w"))
PYEOF
train longrope base --model "$TMP/longrope.json"
grep -q "rope_scaling types other than .*not supported" "$TMP/longrope.err"
ok $? "a model the kernels cannot run (rope_scaling longrope) is refused with a message"
train badsched base --sched nosuch
grep -q 'unknown StarPU policy "nosuch"' "$TMP/badsched.err"; ok $? "an unknown scheduler is refused, listing the policies"

# ---- trace -------------------------------------------------------------------
train tr z3off --steps 2 --ncpus 2 --trace "$TMP/t.json"
"$PY" - "$TMP/t.json" <<'PYEOF'
import json, re, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
# optimizer chunks (optimizer_tile auto on 2 workers) count as their sub-group's node
names = {re.sub(r"\.t\d+$", "", e["name"]) for e in ev if e.get("ph") == "X"}
lanes = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
assert {"fwd.layer0.mb0", "bwd.head.mb0", "adam_cpu.sg0", "d2h.grad.sg0"} <= names, names
assert "link d2h" in lanes and any(l.startswith("CPU") for l in lanes), lanes
assert any(e.get("ph") == "s" for e in ev)
x = [e for e in ev if e.get("ph") == "X"]
assert all(e["dur"] >= 0 and "kind" in e["args"] for e in x)
PYEOF
ok $? "--trace: Chrome trace with a lane per worker and link, tasks named after nodes, flows"

ds wcb '{"wall_clock_breakdown": true}'
train wcb wcb --steps 2 --log_interval 1
[ "$(grep -c '^  time (ms) | forward: [0-9.]* | backward: [0-9.]* | optimizer: [0-9.]* | transfer: ' "$TMP/wcb.out")" -eq 2 ]
ok $? "wall_clock_breakdown prints forward/backward/optimizer/transfer times per logged step"

# ---- NUMA binding and FxT ------------------------------------------------------
train numa base --numa_node 0
grep -q "bound to the .* cores of NUMA node 0" "$TMP/numa.out" && same numa ref; ok $? "numa_node 0 binds the CPU workers, same losses"
nn=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
train numa_bad base --numa_node "${nn:-1}"
grep -q "NUMA node" "$TMP/numa_bad.err"; ok $? "a NUMA node the machine lacks is refused with the count"
mkdir -p "$TMP/fxt"
STARPU_FXT_PREFIX="$TMP/fxt/" STARPU_FXT_TRACE=1 train fxt base --steps 1
ls "$TMP/fxt"/prof_file_* >/dev/null 2>&1; ok $? "StarPU's FxT recording works through STARPU_FXT_PREFIX / STARPU_FXT_TRACE"

# ---- the default job learns ---------------------------------------------------
"$BIN" run --steps 60 --metrics "$TMP/default.jsonl" >"$TMP/default.out" 2>&1
"$PY" - "$TMP/default.jsonl" <<'PYEOF'
import json, math, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
assert abs(a[0] - math.log(256)) < 0.3, a[0]
assert a[-1] < 0.75 * a[0], (a[0], a[-1])
PYEOF
ok $? "default job: loss starts near ln(256) and falls by a quarter in 60 steps"
done_testing
