#!/bin/sh
# test_gpt_oss.sh - GPT-OSS models train (`stepgraph run`, experts as tasks):
# - against tests/torch_train_ref.py, whose forward (tests/torch_model_ref.py)
#   is written from the published formulas of transformers'
#   modeling_gpt_oss.py (router with bias, top-k on the logits, softmax over
#   the k; clamped SwiGLU experts with biases, gate and up interleaved; q/k/v/o
#   biases; attention sinks; a sliding layer and a full one; YaRN) on a model
#   with odd sizes (top 2 of 6 experts, load-balancing loss weight 0.05, gate_up
#   biases wide enough for both clamps to cut):
#   * every parameter gradient within 1e-5 (max error / max value per tensor):
#     one AdamW step with lr 1e9, eps 1e6, no decay and no clipping moves every
#     weight by -1000 times its gradient, which the checkpoint holds;
#   * 5 AdamW steps (clipping on): every loss within 1e-5 relative;
# - tiny-gpt-oss (top 2 of 8, window 4 at 32 tokens, YaRN) learns;
# - experts are tasks: 8 expert groups and a combine per layer forward, 8
#   expert backward tasks per layer backward;
# - results are bit-identical (every loss, and the checkpoint) under the eager,
#   lws, dmda and dmdas schedulers with 1 and 2 CPU workers, with gradient
#   accumulation, ZeRO 2 and activation checkpointing;
# - ZeRO-3 with CPU offload in bf16 trains (the fused expert tensors split
#   across optimizer sub-groups);
# - bad GPT-OSS configurations and weights files (top k over the experts, a
#   missing router or sinks tensor) are refused with a message naming them;
# - `stepgraph model info gpt-oss-20b` describes the router and the clamps.
# Prints TAP.
set -u
SG_TEST_NAME=gpt_oss
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"
export STEPGRAPH_MODELS_DIR="${STEPGRAPH_MODELS_DIR:-$SRC/models}"

# ---- against PyTorch -----------------------------------------------------------
if "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
	R="$TMP/ref"
	mkdir -p "$R"
	"$PY" "$SRC/tests/torch_train_ref.py" prepare "$R" gptoss
	ok $? "python writes a GPT-OSS model (odd sizes), its initial weights and the data"
	# one step whose update is -1000 x the gradient (Adam's first step is
	# lr m / (sqrt(v) + eps) = lr g / (|g| + eps), |g| << eps)
	cat >"$R/grad.json" <<EOF
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e9, "betas": [0.9, 0.999], "eps": 1e6,
                                          "weight_decay": 0.0}},
 "gradient_clipping": 0.0, "zero_optimization": {"stage": 0}}
EOF
	"$BIN" run "$R/grad.json" --model "$R/model.json" --data "$R/data.bin" --max_length 16 \
		--load "$R/init.safetensors" --steps 1 --ncpus 2 --save "$R/ck" >"$R/grad.out" 2>&1
	ok $? "stepgraph runs one step of the GPT-OSS model (experts as tasks, 2 workers)"
	"$PY" "$SRC/tests/torch_train_ref.py" grads "$R" 2>"$R/grads.err"
	ok $? "torch computes every parameter's gradient"
	"$PY" - "$R" "$SRC/tests" <<'PYEOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from torch_train_ref import read_safetensors
d = sys.argv[1]
w0 = read_safetensors(d + "/init.safetensors")
w1 = read_safetensors(d + "/ck/step-00000001/model.safetensors")
g = np.load(d + "/grads.npz")
assert set(w0) == set(w1) == set(g.files), "tensor lists differ"
worst, bad = 0.0, []
for k in sorted(w0):
    got = (w0[k].astype(np.float64) - w1[k].astype(np.float64)) / 1000.0
    want = g[k]
    assert np.abs(want).max() > 0, ("a zero reference gradient: a vacuous check", k)
    err = np.abs(got - want).max() / np.abs(want).max()
    worst = max(worst, err)
    if err > 1e-5:
        bad.append((k, err))
print("# %d tensors, worst relative error %.2e" % (len(w0), worst))
assert not bad, bad
PYEOF
	ok $? "every parameter gradient within 1e-5 of PyTorch's (router, biases, sinks, clamps, YaRN)"
	"$PY" - "$R" <<'PYEOF'
import sys
import numpy as np
c = np.load(sys.argv[1] + "/clamps.npz")
print("# values cut by the clamps in the reference forward: gate %d of %d, up %d of %d"
      % (c["gate"], c["total"], c["up"], c["total"]))
assert c["gate"] > 0 and c["up"] > 0 and c["gate"] < c["total"] and c["up"] < c["total"]
PYEOF
	ok $? "the check covers both clamps: some gate values above 7, some up values outside [-7, 7]"
	. "$SRC/tests/torch_ref_lib.sh"
	ref_config "$R"
	ref_run "$R" sg --ncpus 1
	ok $? "stepgraph trains $REF_STEPS steps of the GPT-OSS model from the python weights"
	ref_torch "$R"
	ok $? "torch trains the same $REF_STEPS steps"
	ref_compare "$R" sg
	ok $? "every loss within 1e-5 relative of PyTorch's (GPT-OSS top 2 of 6, aux loss, AdamW, clipping)"
	# refusals of a weights file without a tensor the layer needs
	"$PY" - "$R" "$SRC/tests" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[2])
from torch_train_ref import read_safetensors, write_safetensors
d = sys.argv[1]
w = read_safetensors(d + "/init.safetensors")
for tag, drop in (("router", "model.layers.1.mlp.router.weight"),
                  ("rbias", "model.layers.0.mlp.router.bias"),
                  ("sinks", "model.layers.0.self_attn.sinks")):
    write_safetensors("%s/no_%s.safetensors" % (d, tag), [(k, v) for k, v in w.items() if k != drop])
PYEOF
	for t in router:model.layers.1.mlp.router.weight rbias:model.layers.0.mlp.router.bias \
		sinks:model.layers.0.self_attn.sinks; do
		tag=${t%%:*} name=${t#*:}
		"$BIN" run "$R/ds.json" --model "$R/model.json" --data "$R/data.bin" --max_length 16 \
			--load "$R/no_$tag.safetensors" --steps 1 --ncpus 1 >"$R/no_$tag.out" 2>&1
		rc=$?
		[ $rc -ne 0 ] && grep -q "missing: $name" "$R/no_$tag.out"
		ok $? "a weights file without $name is refused, naming it"
	done
else
	for d in "python writes the GPT-OSS model" "stepgraph runs one step" "torch gradients" \
		"gradients equal torch's" "both clamps cut" "stepgraph trains it" "torch trains it" "losses equal torch's" \
		"missing router refused" "missing router bias refused" "missing sinks refused"; do
		skip "$d: needs python3 with torch and numpy"
	done
fi

# ---- tiny-gpt-oss learns --------------------------------------------------------------
ds base '{}'
train learn base --model tiny-gpt-oss --steps 30 --ncpus 2
ok "$(cat "$TMP/learn.rc")" "tiny-gpt-oss trains 30 steps"
"$PY" "$SRC/tests/sglog.py" learns "$TMP/learn.jsonl" --steps 30 --window 5 --drop 0.3 --show
ok $? "tiny-gpt-oss learns (the mean loss of the last 5 steps is 0.3 below the first 5's)"

# ---- experts as tasks ---------------------------------------------------------------
STEPGRAPH_TASK_LOG="$TMP/tasks.txt" "$BIN" run "$TMP/base.json" --model tiny-gpt-oss --steps 1 \
	--max_length 16 --ncpus 2 >"$TMP/tasks.out" 2>&1
ok $? "tiny-gpt-oss runs with its task list logged"
"$PY" "$SRC/tests/tasklog.py" kinds "$TMP/tasks.txt" sg_moe_expert=32 sg_moe_expert_bwd=32 sg_moe_combine=4
ok $? "a GPT-OSS layer is a forward (attention, router), 8 expert tasks and a combine; its backward 8 expert tasks and the layer's"

# ---- bit-identical across schedulers and worker counts ---------------------------
ds acc '{"gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2}}'
for s in eager lws dmda dmdas; do
	for c in 1 2; do
		train "s_${s}_$c" acc --model tiny-gpt-oss --steps 3 --sched $s --ncpus $c \
			--activation_checkpointing --save "$TMP/ck_${s}_$c"
	done
done
ok "$(cat "$TMP/s_eager_1.rc")" "tiny-gpt-oss: accumulation 2, ZeRO 2, activation checkpointing runs"
for s in eager lws dmda dmdas; do
	for c in 1 2; do
		[ "$s$c" = eager1 ] && continue
		d=step-00000003
		losscmp "$TMP/s_eager_1.jsonl" "$TMP/s_${s}_$c.jsonl" 0 0 &&
			cmp -s "$TMP/ck_eager_1/$d/model.safetensors" "$TMP/ck_${s}_$c/$d/model.safetensors"
		ok $? "tiny-gpt-oss under $s with $c CPU workers: losses and weights bit-identical to eager on 1"
	done
done

# ---- ZeRO-3 with the optimizer offloaded, bf16: the fused expert tensors in sub-groups ------
ds z3off '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "sub_group_size": 30000, "offload_optimizer": {"device": "cpu"}}}'
train z3off z3off --model tiny-gpt-oss --steps 12 --ncpus 2
ok "$(cat "$TMP/z3off.rc")" "tiny-gpt-oss trains under ZeRO-3 with CPU offload in bf16 (sub-groups of 30,000)"
falls z3off 12 0.2
ok $? "its loss is finite and falls"

# ---- refusals and description -----------------------------------------------------------
M=$SRC/models/tiny-gpt-oss.json
bad_model "$M" k_over_e '{"num_experts_per_tok": 9}' "num_experts_per_tok: 9 is more than" \
	"GPT-OSS: top 9 of 8 experts is refused"
bad_model "$M" no_experts '{"num_local_experts": null}' "num_local_experts\|num_experts" \
	"GPT-OSS: a missing expert count (num_local_experts, the router's size) is refused"
bad_model "$M" bad_trunc '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "truncate": 1}}' \
	"rope_scaling.truncate" "GPT-OSS: a yarn truncate that is not a boolean is refused"
bad_model "$M" mscale '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0}}' \
	"rope_scaling.mscale" "GPT-OSS: yarn with mscale (not applied) is refused, naming the key"
"$BIN" model info gpt-oss-20b >"$TMP/info.out" 2>&1
grep -q "softmax over the top-k logits" "$TMP/info.out" && grep -q "clamped SwiGLU" "$TMP/info.out" &&
	! grep -qi "not supported\|unsupported" "$TMP/info.out"
ok $? "stepgraph model info gpt-oss-20b describes its router and clamps, nothing unsupported"
done_testing
