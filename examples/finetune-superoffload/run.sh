#!/usr/bin/env bash
# The SuperOffload fine-tune of DeepSpeedExamples at a CPU size: a Hugging Face
# model directory, alpaca-style instructions, the example's DeepSpeed config
# unchanged, the validation loss falling, the result reloaded in transformers
# and its greedy answer to one prompt (README.md).
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
VENV=${STEPGRAPH_TOKENIZE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph/venv-bench}
HF_VENV=${STEPGRAPH_HF_VENV:-$VENV}
if ! [ -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import tokenizers' 2>/dev/null; then
	echo "finetune-superoffload: skipped: the tokenizers package is not in $VENV (scripts/tokenize.sh sets it up)"
	exit 77
fi
VPY=$VENV/bin/python
T=96
if ci; then steps=24 every=8; else steps=450 every=45; fi
rm -rf "$OUT/base-model" "$OUT/init" "$OUT/sft" "$OUT/ft"

say "1. alpaca-style instructions (synthetic: 50 capitals x 4 phrasings) and a tokenizer"
"$PY" "$EXAMPLE_DIR/make_capitals.py" "$OUT/capitals.json"
# a byte-level BPE of 512 ids trained on the records' text, <|endoftext|> its end token
"$VPY" - "$OUT/tokenizer.json" "$OUT/capitals.json" "$REPO_ROOT/scripts" <<'PYEOF'
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
sys.path.insert(0, sys.argv[3])
from prepare_instruct import ALPACA_NO_INPUT
texts = [ALPACA_NO_INPUT.format(instruction=r["instruction"]) + r["output"]
         for r in json.load(open(sys.argv[2]))]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(texts, trainer)
tok.save(sys.argv[1])
print("tokenizer: %d ids" % tok.get_vocab_size())
PYEOF
# the records as shards with loss masks (only the responses are trained), 1 in 10 held out
"$REPO_ROOT/scripts/tokenize.sh" --instruct --tokenizer "$OUT/tokenizer.json" --template alpaca \
	--max-length $T --val-fraction 0.1 --out "$OUT/sft" "$OUT/capitals.json"

say "2. a Hugging Face model directory: config.json, tokenizer.json and seeded random weights"
mkdir -p "$OUT/base-model"
hf_llama_config "$OUT/base-model/config.json"
# the initial weights: one step at learning rate 0 saves the seeded initialisation
cat >"$OUT/init.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0}}, "zero_optimization": {"stage": 0}}
JSON
"$STEPGRAPH" run "$OUT/init.json" --model "$OUT/base-model" --data "$OUT/sft/train_000000.bin" \
	--max_length $T --steps 1 --save "$OUT/init" >/dev/null
step=$OUT/init/$(cat "$OUT/init/latest")
cp "$step/model.safetensors" "$OUT/tokenizer.json" "$OUT/base-model/"
ls "$OUT/base-model"

say "3. fine-tune with DeepSpeedExamples' SuperOffload config, unchanged; validation every $every steps"
# finetune_llama-8b_1gpu.sh's settings that are not in its config: activation
# checkpointing, log every step, the sequence length (here $T), seed 42; its
# finetune_zero3.py passes DeepSpeedCPUAdam() with its defaults (lr 1e-3,
# betas 0.9 0.999), which stepgraph takes for a config without "optimizer"
"$STEPGRAPH" run "$EXAMPLE_DIR/ds_config.json" --model "$OUT/base-model" --load "$OUT/base-model" \
	--data "$OUT/sft/train_*.bin" --eval_data "$OUT/sft/val_*.bin" --eval_interval $every \
	--max_length $T --steps $steps --activation_checkpointing --log_interval $every --seed 42 \
	--save "$OUT/ft" --metrics "$OUT/finetune.jsonl"
export_dir=$OUT/ft/$(cat "$OUT/ft/latest")
cp "$OUT/tokenizer.json" "$export_dir/"
# the validation loss must fall
"$PY" - "$OUT/finetune.jsonl" <<'PYEOF'
import json, sys
ev = [r for r in map(json.loads, open(sys.argv[1])) if "eval_loss" in r]
print("validation loss: " + " -> ".join("%.3f (step %d)" % (r["eval_loss"], r["step"]) for r in ev))
sys.exit(0 if len(ev) >= 2 and ev[-1]["eval_loss"] < ev[0]["eval_loss"] else 1)
PYEOF

say "4. the export ($export_dir) reloaded in transformers, and its answer to one prompt"
if ! [ -x "$HF_VENV/bin/python" ] || ! "$HF_VENV/bin/python" -c 'import transformers, torch, tokenizers' 2>/dev/null; then
	echo "transformers reload: skipped: transformers and torch are not in $HF_VENV"
	echo "(scripts/check_hf_export.sh installs them; STEPGRAPH_HF_VENV picks another environment)"
	exit 0
fi
"$HF_VENV/bin/python" - "$export_dir" "$OUT/capitals.json" "$REPO_ROOT/scripts" \
	"$OUT/sft/val_000000.bin" $T "$OUT/finetune.jsonl" <<'PYEOF'
import json, struct, sys, torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM
d, records, scripts, val, T, metrics = sys.argv[1:7]
T = int(T)
sys.path.insert(0, scripts)
from prepare_instruct import ALPACA_NO_INPUT
model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
tok = Tokenizer.from_file(d + "/tokenizer.json")
eos = tok.token_to_id("<|endoftext|>")
# the held-out records' loss in transformers (labels -100 where the mask is 0)
raw, mask = open(val, "rb").read(), open(val + ".mask", "rb").read()[1024:]
n = struct.unpack("<3i", raw[:12])[2]
ids = struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n])
total, count = 0.0, 0
with torch.no_grad():
    for w in range((n - 1) // T):
        x = torch.tensor([ids[w * T:w * T + T]])
        y = torch.tensor([[ids[w * T + t + 1] if mask[w * T + t + 1] else -100 for t in range(T)]])
        logits = model(input_ids=x).logits[0]  # (T, V); y is already shifted by one
        total += torch.nn.functional.cross_entropy(logits, y[0], ignore_index=-100,
                                                   reduction="sum").item()
        count += int((y != -100).sum())
sg = [r for r in map(json.loads, open(metrics)) if "eval_loss" in r][-1]["eval_loss"]
print("validation loss of the export: transformers (fp32) %.4f, stepgraph's last evaluation "
      "(bf16) %.4f" % (total / count, sg))
# a held-out record's question (the 10th record: Italy, asked another way than in training)
rec = json.load(open(records))[9]
prompt = ALPACA_NO_INPUT.format(instruction=rec["instruction"])
seq = tok.encode(prompt, add_special_tokens=False).ids
out = []
with torch.no_grad():
    for _ in range(24):  # greedy decoding
        nxt = int(model(input_ids=torch.tensor([seq + out])).logits[0, -1].argmax())
        if nxt == eos:
            break
        out.append(nxt)
print("prompt: %r" % rec["instruction"])
print("greedy answer: %r (the record's: %r)" % (tok.decode(out), rec["output"]))
sys.exit(0 if abs(total / count - sg) <= 0.02 * sg else 1)  # bf16 against fp32
PYEOF
