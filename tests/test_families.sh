#!/bin/sh
# test_families.sh - the families people fine-tune: transformers' qwen2
# (q/k/v biases), mistral (every layer sliding), phi3 (fused qkv_proj and
# gate_up_proj) and mixtral (block_sparse_moe: softmax over the experts,
# top k, renormalised; load-balancing loss):
# - the real config.json files of Phi-4, Qwen2.5-7B, Mistral-7B-v0.3 and
#   Mixtral-8x7B (tests/data/hf/) give the published parameter totals (the
#   counts Hugging Face shows for their safetensors; Mixtral's 12.9B active)
#   and the same description as the shipped model files;
# - the keys of these families that stepgraph does not compute are refused
#   by name (phi3's longrope, partial_rotary_factor, Mixtral's router jitter,
#   Qwen2's sliding window and mrope);
# - per family, an odd-sized model (tests/torch_train_ref.py: its weights
#   written under the family's own tensor names by python) trains 5 AdamW
#   steps in fp32 with every loss within 1e-5 relative of a PyTorch model
#   written from transformers' formulas (tests/torch_model_ref.py), also
#   under ZeRO-3 with the optimizer offloaded in sub-groups that cut the
#   fused tensors; the saved
#   step is a Hugging Face directory with the family's tensor names and
#   model_type, and a run started from it (model and weights read back from
#   that directory) computes PyTorch's 6th loss; where a python with
#   transformers is at hand (SG_TRANSFORMERS_PYTHON), every loss is also
#   within 1e-5 of transformers' own class (Qwen2ForCausalLM, ...) trained
#   the same way (tests/transformers_ref.py), and transformers'
#   from_pretrained reads the saved directory (every tensor of its class,
#   no other) and computes PyTorch's 6th loss; without transformers those
#   checks are skipped.
# Prints TAP.
set -u
SG_TEST_NAME=families
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"
export STEPGRAPH_MODELS_DIR="${STEPGRAPH_MODELS_DIR:-$SRC/models}"
HF=$SRC/tests/data/hf
# a python with transformers (and torch) for the optional check against
# transformers' own classes; Debian's python has none
TPY=${SG_TRANSFORMERS_PYTHON:-$PY}

# ---- published totals -----------------------------------------------------------
# Hugging Face's safetensors parameter counts of microsoft/phi-4,
# Qwen/Qwen2.5-7B, mistralai/Mistral-7B-v0.3, mistralai/Mixtral-8x7B-v0.1
for pair in phi-4:14,659,507,200 qwen2.5-7b:7,615,616,512 mistral-7b-v0.3:7,248,023,552 \
	mixtral-8x7b:46,702,792,704; do
	m=${pair%%:*} total=${pair#*:}
	"$BIN" model info "$HF/$m" >"$TMP/info_hf" 2>"$TMP/info_err"
	"$BIN" model info "$m" >"$TMP/info_shipped" 2>&1
	grep -q "^params *$total total" "$TMP/info_hf" && cmp -s "$TMP/info_hf" "$TMP/info_shipped" &&
		! [ -s "$TMP/info_err" ]
	ok $? "$m: transformers' config.json gives the published $total parameters, no key ignored"
done
"$BIN" model info "$HF/mixtral-8x7b" 2>&1 | grep -q "^active *12,879,925,248 per token" &&
	"$BIN" model info "$HF/mixtral-8x7b" 2>&1 | grep -q "top 2 (weights renormalised)"
ok $? "mixtral-8x7b: 12.9 B active (2 of 8 experts), its router renormalises"

# ---- what these configs may say ----------------------------------------------------
hfvariant() { # NAME BASE-DIR JSON-CHANGES: $TMP/NAME/config.json
	mkdir -p "$TMP/$1"
	"$PY" - "$HF/$2/config.json" "$TMP/$1/config.json" "$3" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(json.loads(sys.argv[3]))
json.dump(c, open(sys.argv[2], "w"), indent=1)
PYEOF
}
refused() { # NAME BASE-DIR JSON-CHANGES MESSAGE DESCRIPTION
	hfvariant "$1" "$2" "$3"
	"$BIN" model info "$TMP/$1" >"$TMP/$1.out" 2>&1
	[ $? -ne 0 ] && grep -q "$4" "$TMP/$1.out"
	ok $? "$5"
}
refused longrope phi-4 '{"rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}' \
	'rope_scaling: "longrope" is not supported for phi3' "phi3: longrope scaling is refused by name"
refused partial phi-4 '{"partial_rotary_factor": 0.75}' "partial_rotary_factor: 0.75 is not supported" \
	"phi3: a partial rotary factor (Phi-4-mini's 0.75) is refused"
refused phidrop phi-4 '{"resid_pdrop": 0.1}' "resid_pdrop: 0.1 is not supported" \
	"phi3: resid_pdrop 0.1 is refused (stepgraph trains without dropout)"
refused jitter mixtral-8x7b '{"router_jitter_noise": 0.01}' "router_jitter_noise: 0.01 is not supported" \
	"mixtral: router jitter noise is refused"
refused qslide qwen2.5-7b '{"use_sliding_window": true}' "use_sliding_window: true is not supported" \
	"qwen2: use_sliding_window true is refused"
refused mrope qwen2.5-7b '{"use_mrope": true}' "use_mrope: true is not supported" \
	"qwen2: multimodal rope (use_mrope) is refused"
hfvariant mwin mistral-7b-v0.3 '{"sliding_window": 4096}'
"$BIN" model info "$TMP/mwin" 2>&1 | grep -q "^pattern *32 sliding (window 4096) + 0 full layers"
ok $? "mistral: a sliding_window applies to every layer (Mistral-7B-v0.1's 4096)"
hfvariant maux mixtral-8x7b '{"output_router_logits": true}'
"$BIN" model info "$TMP/maux" 2>&1 | grep -q "load-balancing loss x 0.02"
ok $? "mixtral: output_router_logits true trains with the load-balancing loss times router_aux_loss_coef (0.02)"
ds base '{}'
bad_model "$SRC/models/mixtral-8x7b.json" mnorm '{"norm_topk_prob": false}' \
	"norm_topk_prob: false is not supported for mixtral" \
	"mixtral: a router without renormalisation is refused in a model file"
bad_model "$SRC/models/qwen2.5-7b.json" qnobias '{"attention_bias": false}' \
	"attention_bias: false is not supported for qwen2" "qwen2: a model file without q/k/v biases is refused"

# ---- against PyTorch, and the Hugging Face directory they save ------------------------
if "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
	. "$SRC/tests/torch_ref_lib.sh"
	for k in qwen2:Qwen2ForCausalLM mistral:MistralForCausalLM phi3:Phi3ForCausalLM \
		mixtral:MixtralForCausalLM; do
		f=${k%%:*} cls=${k#*:}
		R="$TMP/ref_$f"
		mkdir -p "$R"
		"$PY" "$SRC/tests/torch_train_ref.py" prepare "$R" "$f" && ref_config "$R" &&
			ref_run "$R" sg --ncpus 2 --save "$R/ck" && ref_torch "$R" && ref_compare "$R" sg
		ok $? "$f: $REF_STEPS fp32 AdamW steps (clipping, decay) within 1e-5 relative of PyTorch's losses"
		# ZeRO-3, the optimizer on the CPU, sub-groups of 3,000 elements: the
		# fused tensors (phi3's qkv_proj is 8,640) and experts cut across them
		"$PY" - "$R/ds.json" "$R/z3.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["zero_optimization"] = {"stage": 3, "sub_group_size": 3000, "offload_optimizer": {"device": "cpu"}}
json.dump(d, open(sys.argv[2], "w"))
PYEOF
		"$BIN" run "$R/z3.json" --model "$R/model.json" --data "$R/data.bin" --max_length 16 \
			--load "$R/init.safetensors" --steps $REF_STEPS --metrics "$R/z3.jsonl" --ncpus 2 \
			>"$R/z3.out" 2>&1 &&
			"$PY" "$SRC/tests/compare_losses.py" "$R/z3.jsonl" "$R/torch.txt" --steps $REF_STEPS \
				--rel 1e-5 --learns 0.05
		ok $? "$f: under ZeRO-3 with the optimizer offloaded (sub-groups of 3,000) too"
		S="$R/ck/step-0000000$REF_STEPS"
		"$PY" - "$R/init.safetensors" "$S" "$f" "$cls" "$SRC/tests" <<'PYEOF'
import json, sys
sys.path.insert(0, sys.argv[5])
from torch_train_ref import read_safetensors
want = set(read_safetensors(sys.argv[1]))
got = set(read_safetensors(sys.argv[2] + "/model.safetensors"))
assert got == want, (sorted(got ^ want))[:6]
c = json.load(open(sys.argv[2] + "/config.json"))
assert c["model_type"] == sys.argv[3] and c["architectures"] == [sys.argv[4]], c
own = [t for t in sorted(got) if any(w in t for w in ("qkv", "gate_up", "bias", "block_sparse"))]
print("# %d tensors, e.g. %s" % (len(got), (own or sorted(got))[0]))
PYEOF
		ok $? "$f: the saved step is a Hugging Face directory: model_type $f, $cls, the family's tensor names"
		"$PY" "$SRC/tests/torch_train_ref.py" train "$R" $((REF_STEPS + 1)) $REF_HYPER >"$R/torch6.txt" &&
			"$BIN" run "$R/ds.json" --model "$S/config.json" --load "$S/config.json" --data "$R/data.bin" \
				--max_length 16 --steps 1 --ncpus 1 --metrics "$R/back.jsonl" >"$R/back.out" 2>&1 &&
			"$PY" - "$R/back.jsonl" "$R/torch6.txt" <<'PYEOF'
import json, sys
got = json.loads(open(sys.argv[1]).readline())["loss"]
want = float(open(sys.argv[2]).read().split()[-1])
print("# loss from the saved directory %.9f, PyTorch's 6th %.9f" % (got, want))
assert abs(got - want) <= 1e-5 * abs(want)
PYEOF
		ok $? "$f: model and weights read back from that directory give PyTorch's loss after $REF_STEPS steps"
		# transformers' own class, where a python has it (tests/transformers_ref.py)
		if "$TPY" -c 'import transformers' >/dev/null 2>&1; then
			# shellcheck disable=SC2086 # the hyper-parameters are separate words
			"$TPY" "$SRC/tests/transformers_ref.py" "$R" $REF_STEPS $REF_HYPER >"$R/hf.txt" 2>"$R/hf.err" &&
				"$PY" "$SRC/tests/compare_losses.py" "$R/sg.jsonl" "$R/hf.txt" --steps $REF_STEPS \
					--rel 1e-5 --learns 0.05 --per-step
			ok $? "$f: every loss within 1e-5 relative of transformers' $cls (float64, eager attention)"
			"$TPY" "$SRC/tests/transformers_ref.py" load "$S" "$R" >"$R/hf_load.txt" 2>"$R/hf_load.err" &&
				"$PY" - "$R/hf_load.txt" "$R/torch6.txt" <<'PYEOF'
import sys
got = float(open(sys.argv[1]).read().split()[-1])
want = float(open(sys.argv[2]).read().split()[-1])
print("# transformers' loss of the saved directory %.9f, PyTorch's 6th %.9f" % (got, want))
assert abs(got - want) <= 1e-5 * abs(want)
PYEOF
			ok $? "$f: transformers' from_pretrained reads the saved directory (every tensor, no other) and computes PyTorch's loss after $REF_STEPS steps"
		else
			for d in "against transformers' $cls" "transformers reads the saved directory"; do
				skip "$f $d: no transformers (set SG_TRANSFORMERS_PYTHON)"
			done
		fi
	done
else
	for f in qwen2 mistral phi3 mixtral; do
		for d in "trains as PyTorch" "ZeRO-3 offload as PyTorch" "saves a Hugging Face directory" \
			"reads it back" "trains as transformers" "transformers reads the saved directory"; do
			skip "$f $d: needs python3 with torch and numpy"
		done
	done
fi
done_testing
