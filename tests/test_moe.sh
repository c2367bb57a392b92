#!/bin/sh
# test_moe.sh - Qwen3-MoE models train (`stepgraph run`):
# - 5 AdamW steps (clipping on) of a Qwen3-MoE model with odd sizes (top 2 of
#   6 experts, renormalised, load-balancing loss weight 0.05) from the same
#   weights on the same batch as tests/torch_train_ref.py, whose forward
#   (tests/torch_model_ref.py) is written from transformers'
#   Qwen3MoeSparseMoeBlock and load_balancing_loss_func: every loss within
#   1e-5 relative of PyTorch's;
# - tiny-moe (top 2 of 8) learns: its loss falls over 30 steps;
# - results are bit-identical (every loss, and the checkpoint) under the
#   eager, lws, dmda and dmdas schedulers with 1 and 2 CPU workers, with
#   gradient accumulation and activation checkpointing;
# - experts are tasks: 8 expert groups and a combine per layer forward, 8
#   expert backward tasks per layer backward (the task list);
# - activation checkpointing recomputes a MoE layer and its expert groups
#   in backward (the task list) and gives the same losses bit for bit as
#   without, in fp32 and bf16; expert activations are stored in the compute
#   dtype (the graph's buffers); GPT-OSS-20B with SuperOffload's settings
#   fits one GH200 in the plan (and does not without checkpointing);
# - ZeRO-3 with CPU offload in bf16 trains (expert parameters in sub-groups);
# - bad MoE configurations are refused with a message naming the problem.
# Prints TAP.
set -u
SG_TEST_NAME=moe
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"
export STEPGRAPH_MODELS_DIR="${STEPGRAPH_MODELS_DIR:-$SRC/models}"

# ---- against PyTorch -----------------------------------------------------------
if "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
	. "$SRC/tests/torch_ref_lib.sh"
	mkdir -p "$TMP/ref"
	"$PY" "$SRC/tests/torch_train_ref.py" prepare "$TMP/ref" moe
	ok $? "python writes a Qwen3-MoE model (odd sizes), its initial weights and the data"
	ref_config "$TMP/ref"
	ref_run "$TMP/ref" sg --ncpus 1
	ok $? "stepgraph trains $REF_STEPS steps of the MoE model from the python weights"
	ref_torch "$TMP/ref"
	ok $? "torch trains the same $REF_STEPS steps"
	ref_compare "$TMP/ref" sg
	ok $? "every loss within 1e-5 relative of PyTorch's (MoE top 2 of 6, aux loss, AdamW, clipping)"
else
	for d in "python writes the MoE model" "stepgraph trains it" "torch trains it" "losses equal torch's"; do
		skip "$d: needs python3 with torch and numpy"
	done
fi

# ---- tiny-moe learns --------------------------------------------------------------
ds base '{}'
train learn base --model tiny-moe --steps 30 --ncpus 2
ok "$(cat "$TMP/learn.rc")" "tiny-moe trains 30 steps"
"$PY" "$SRC/tests/sglog.py" learns "$TMP/learn.jsonl" --steps 30 --window 5 --drop 0.3 --show
ok $? "tiny-moe learns (the mean loss of the last 5 steps is 0.3 below the first 5's)"
grep -q "TFLOPS: n/a | Tokens/s: [0-9.]* | Active TFLOPS: [0-9.]* | Model TFLOPS: [0-9.]*$" "$TMP/learn.out"
ok $? "the step line prints TFLOPS n/a for MoE, the labelled active-parameter TFLOPS and model TFLOPS"

# ---- experts as tasks ---------------------------------------------------------------
STEPGRAPH_TASK_LOG="$TMP/tasks.txt" "$BIN" run "$TMP/base.json" --model tiny-moe --steps 1 \
	--max_length 16 --ncpus 2 >"$TMP/tasks.out" 2>&1
ok $? "tiny-moe runs with its task list logged"
# 4 layers x 8 groups of one expert each, one combine per layer
"$PY" "$SRC/tests/tasklog.py" kinds "$TMP/tasks.txt" sg_moe_expert=32 sg_moe_expert_bwd=32 sg_moe_combine=4 &&
	PYTHONPATH="$SRC/tests" "$PY" - "$TMP/tasks.txt" <<'PYEOF'
import sys
from tasklog import accesses, rows
# a group's forward writes its own buffer and reads the layer's saved activations;
# the combine (not the layer's forward) writes the layer's output
acc = accesses(rows(sys.argv[1]))
assert acc["moe_expert.layer1.g3.mb0"].get("moe_act.2.g3.mb0") == "W", acc["moe_expert.layer1.g3.mb0"]
assert acc["moe_combine.layer1.mb0"].get("act.2.mb0") == "W"
assert "act.2.mb0" not in acc["fwd.layer1.mb0"]
assert all(acc["bwd.layer1.mb0"].get("moe_grad.2.g%d.mb0" % g) == "R" for g in range(8))
PYEOF
ok $? "a MoE layer is a forward (attention, router), 8 expert tasks and a combine; its backward 8 expert tasks and the layer's"

# ---- checkpointing: MoE layers recomputed, experts included --------------------------
# the forward's expert activations die at the combine; the backward recomputes
# the layer (attention, router) and its 8 expert groups before their backward
STEPGRAPH_TASK_LOG="$TMP/tasks_ck.txt" "$BIN" run "$TMP/base.json" --model tiny-moe --steps 1 \
	--max_length 16 --ncpus 2 --activation_checkpointing >"$TMP/tasks_ck.out" 2>&1
ok $? "tiny-moe runs with checkpointing and its task list logged"
"$PY" "$SRC/tests/tasklog.py" kinds "$TMP/tasks_ck.txt" sg_moe_expert=64 sg_moe_expert_bwd=32 \
	sg_moe_combine=4 sg_recompute=4 &&
	PYTHONPATH="$SRC/tests" "$PY" - "$TMP/tasks_ck.txt" <<'PYEOF'
import sys
from tasklog import accesses, rows
acc = accesses(rows(sys.argv[1]))
assert acc["recompute.layer1.mb0"].get("saved.2.mb0") == "W", acc["recompute.layer1.mb0"]
assert "moe_stats.mb0" not in acc["recompute.layer1.mb0"]  # the statistics are added once
assert acc["moe_expert_re.layer1.g3.mb0"].get("moe_act.2.g3.mb0") == "W"
assert acc["moe_expert_re.layer1.g3.mb0"].get("saved.2.mb0") == "R"
PYEOF
ok $? "checkpointing: a MoE layer's backward recomputes it and its 8 expert groups (64 expert forwards, 4 recomputes)"
ds bf16 '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}'
for d in base bf16; do
	train "ck0_$d" "$d" --model tiny-moe --steps 3 --ncpus 2
	train "ck1_$d" "$d" --model tiny-moe --steps 3 --ncpus 2 --activation_checkpointing
	[ "$(cat "$TMP/ck0_$d.rc")" -eq 0 ] && [ "$(cat "$TMP/ck1_$d.rc")" -eq 0 ] &&
		differs "ck0_$d" "ck1_$d" && same "ck1_$d" "ck0_$d"
	ok $? "tiny-moe ($d): checkpointing gives the same losses bit for bit (recompute is exact)"
done
# expert activations are stored in the compute dtype: bf16, N x min(experts
# per group, k) rows of 2 I + H (tiny-moe: 8 groups of one expert, top 2)
"$BIN" graph "$TMP/bf16.json" --model tiny-moe --max_length 32 --format json -o "$TMP/bf16_graph.json" \
	>/dev/null 2>&1
"$PY" - "$TMP/bf16_graph.json" "$SRC/models/tiny-moe.json" "$TMP/bf16.json" <<'PYEOF'
import json, sys
g, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
N = 32 * json.load(open(sys.argv[3]))["train_micro_batch_size_per_gpu"]  # max_length 32
rows = N * min(1, m["num_experts_per_tok"])
want = rows * (2 * m["moe_intermediate_size"] + m["hidden_size"]) * 2
seen = [b for n in g["nodes"] for b in n["buffers"] if b["name"].startswith("moe_act.")]
assert seen, "no expert activation buffer"
bad = [b for b in seen if b["dtype"] != "bf16" or b["bytes"] != want]
assert not bad, (bad[:2], want)
print("# moe_act buffers: bf16, %d bytes each" % want)
PYEOF
ok $? "bf16: each group's expert activations are bf16, N x min(1, k) x (2 I + H) x 2 bytes"

# GPT-OSS-20B with SuperOffload's settings (bf16, ZeRO-3, ratio 0.9, checkpointing,
# seq 4096, batch 4) fits one GH200 in the plan (512.9 GiB before its MoE layers
# were recomputed); without checkpointing it does not
"$BIN" graph "$SRC/configs/llama-3.1-8b-superoffload.json" --model gpt-oss-20b \
	--set offload_optimizer.ratio=0.9 --summary --machine gh200 >"$TMP/oss.txt" 2>&1 &&
	grep -q "^gpu memory: .* needed of .*: fits" "$TMP/oss.txt" &&
	"$PY" - "$SRC/configs/llama-3.1-8b-superoffload.json" "$TMP/oss_nock.json" <<'PYEOF' &&
import json, os, sys
c = json.load(open(sys.argv[1]))
c["activation_checkpointing"] = False
c["deepspeed_config"] = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), c["deepspeed_config"])
json.dump(c, open(sys.argv[2], "w"))
PYEOF
	"$BIN" graph "$TMP/oss_nock.json" --model gpt-oss-20b --set offload_optimizer.ratio=0.9 \
		--summary --machine gh200 >"$TMP/oss_nock.txt" 2>&1 &&
	grep -q "^gpu memory: .*DOES NOT FIT" "$TMP/oss_nock.txt"
ok $? "gpt-oss-20b fits one GH200 with SuperOffload's settings ($(sed -n 's/^gpu memory: //p' "$TMP/oss.txt")), not without checkpointing"

# Qwen3-30B-A3B with the same settings: one GH200 cannot hold it, two (dp 2,
# ZeRO-3 halves the GPU-side state) can
"$BIN" graph "$SRC/configs/llama-3.1-8b-superoffload.json" --model qwen3-30b-a3b \
	--set offload_optimizer.ratio=0.9 --summary --machine gh200 >"$TMP/q30_1.txt" 2>&1 &&
	grep -q "^gpu memory: .*DOES NOT FIT" "$TMP/q30_1.txt" &&
	"$BIN" graph "$SRC/configs/llama-3.1-8b-superoffload.json" --model qwen3-30b-a3b \
		--set offload_optimizer.ratio=0.9 --summary --machine gh200x2 --dp_size 2 \
		>"$TMP/q30_2.txt" 2>&1 &&
	grep -q "^gpu memory: .* needed of .*: fits" "$TMP/q30_2.txt" &&
	grep -q "^host memory: .* needed of .*: fits" "$TMP/q30_2.txt"
ok $? "qwen3-30b-a3b: does not fit one GH200 ($(sed -n 's/^gpu memory: //p' "$TMP/q30_1.txt")), fits two with dp 2 ($(sed -n 's/^gpu memory: //p' "$TMP/q30_2.txt"))"

# ---- bit-identical across schedulers and worker counts ---------------------------
ds acc '{"gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2}}'
for s in eager lws dmda dmdas; do
	for c in 1 2; do
		train "s_${s}_$c" acc --model tiny-moe --steps 3 --sched $s --ncpus $c \
			--activation_checkpointing --save "$TMP/ck_${s}_$c"
	done
done
ok "$(cat "$TMP/s_eager_1.rc")" "tiny-moe: accumulation 2, ZeRO 2, activation checkpointing runs"
for s in eager lws dmda dmdas; do
	for c in 1 2; do
		[ "$s$c" = eager1 ] && continue
		d=step-00000003
		same "s_${s}_$c" s_eager_1 &&
			cmp -s "$TMP/ck_eager_1/$d/model.safetensors" "$TMP/ck_${s}_$c/$d/model.safetensors"
		ok $? "tiny-moe under $s with $c CPU workers: losses and weights bit-identical to eager on 1"
	done
done

# ---- ZeRO-3 with the optimizer offloaded, bf16: expert parameters in sub-groups ---------
ds z3off '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "sub_group_size": 300000, "offload_optimizer": {"device": "cpu"}}}'
train z3off z3off --model tiny-moe --steps 12 --ncpus 2
ok "$(cat "$TMP/z3off.rc")" "tiny-moe trains under ZeRO-3 with CPU offload in bf16 (expert parameters in sub-groups)"
falls z3off 12 0.2
ok $? "its loss is finite and falls"

# ---- refusals ---------------------------------------------------------------------------
M=$SRC/models/tiny-moe.json
bad_model "$M" k_over_e '{"num_experts_per_tok": 9}' "num_experts_per_tok: 9 is more than num_experts 8" \
	"top 9 of 8 experts is refused"
bad_model "$M" no_width '{"moe_intermediate_size": null}' "moe_intermediate_size: missing" \
	"a missing expert width (moe_intermediate_size) is refused"
bad_model "$M" no_experts '{"num_experts": null}' "num_experts: missing" \
	"a missing expert count (the router's size, num_experts) is refused"
bad_model "$M" no_k '{"num_experts_per_tok": null}' "num_experts_per_tok: missing" \
	"a missing top-k (num_experts_per_tok) is refused"
bad_model "$M" neg_coef '{"router_aux_loss_coef": -1}' "router_aux_loss_coef: -1 is negative" \
	"a negative router_aux_loss_coef is refused"
bad_model "$M" norm_str '{"norm_topk_prob": "yes"}' "norm_topk_prob: \"yes\" is not true or false" \
	"norm_topk_prob must be a boolean"
train tiles base --model tiny-moe --batch_tile 1
[ "$(cat "$TMP/tiles.rc")" -ne 0 ] && grep -q "batch tiles are not supported" "$TMP/tiles.err"
ok $? "batch tiles are refused for an MoE model, with the reason"
# simulate: TFLOPS n/a for MoE and the active-parameter estimate, checked
# against the formula c B s (2 P + 4 s q L) with P counted here from
# tiny-moe.json (per layer: q, k, v, o, QK-norms, two RMSNorms, the router and
# top-2 of the experts' gate/up/down; then the final norm and lm_head; the
# input embedding is not a matmul)
if ! [ -x "${SG_BUILDDIR:-.}/stepgraph-sim" ]; then
	skip "simulate: stepgraph-sim not built (no SimGrid flavour of StarPU)"
elif "$BIN" simulate "$SRC/configs/default.json" --model tiny-moe --machine gh200 --steps 1 \
	>"$TMP/sim.out" 2>&1; then
	awk 'BEGIN { H = 128; I = 128; kvw = 64; hd = 32; V = 256; L = 4; k = 2; E = 8
		layer = 2 * H * H + 2 * H * kvw + 2 * hd + 2 * H + H * E + k * 3 * H * I
		P = L * layer + H + V * H; q = H; B = 4; s = 256; c = 3 }
		/Step time/ { ms = $3 }
		/^  TFLOPS *n\/a \(MoE\)/ { na = 1 }
		/Active TFLOPS/ { got = $3 }
		END { want = c * B * s * (2 * P + 4 * s * q * L) / (ms * 1e-3) / 1e12
			printf "# active TFLOPS %s, formula %.4f (P = %d, step %s ms)\n", got, want, P, ms
			exit !(na && ms > 0 && got > 0 && (got - want) / want < 0.02 && (want - got) / want < 0.02) }' \
		"$TMP/sim.out"
	ok $? "simulate prints TFLOPS n/a for MoE and the active-parameter TFLOPS of the formula"
else
	sed 's/^/# /' "$TMP/sim.out" | tail -5
	ok 1 "simulate prints TFLOPS n/a for MoE and the active-parameter TFLOPS of the formula"
fi
done_testing
