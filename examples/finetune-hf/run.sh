#!/usr/bin/env bash
# A Hugging Face-format model: tokenizer, pre-train, fine-tune, export, reload (README.md).
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
VENV=${STEPGRAPH_TOKENIZE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph/venv-bench}
if ! [ -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import tokenizers' 2>/dev/null; then
	echo "finetune-hf: skipped: the tokenizers package is not in $VENV (scripts/tokenize.sh sets it up)"
	exit 77
fi
VPY=$VENV/bin/python
if ci; then pre=4 ft=4 len=64; else pre=60 ft=40 len=128; fi
rm -rf "$OUT/pre-data" "$OUT/ft-data" "$OUT/base-model" "$OUT/pre" "$OUT/ft"

say "1. a byte-level BPE tokenizer.json (512 ids) trained on docs/*.md"
"$VPY" - "$OUT/tokenizer.json" "$REPO_ROOT"/docs/*.md <<'PYEOF'
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train(sys.argv[2:], trainer)
tok.save(sys.argv[1])
print("tokenizer: %d ids" % tok.get_vocab_size())
PYEOF

say "2. a Hugging Face model directory: config.json, then weights from a short pre-training"
mkdir -p "$OUT/base-model"
hf_llama_config "$OUT/base-model/config.json"
"$REPO_ROOT/scripts/tokenize.sh" --tokenizer "$OUT/tokenizer.json" --out "$OUT/pre-data" \
	--val-fraction 0 "$REPO_ROOT"/docs/*.md
cat >"$OUT/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.01}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 0}}
JSON
"$STEPGRAPH" run "$OUT/ds.json" --model "$OUT/base-model" --data "$OUT/pre-data/train_*.bin" \
	--max_length $len --steps $pre --log_interval 10 --save "$OUT/pre"
step=$OUT/pre/$(cat "$OUT/pre/latest")
cp "$step/config.json" "$step/model.safetensors" "$OUT/tokenizer.json" "$OUT/base-model/"
ls "$OUT/base-model"

say "3. fine-tune on README.md, tokenized with the model's own tokenizer.json"
"$REPO_ROOT/scripts/tokenize.sh" --tokenizer "$OUT/base-model/tokenizer.json" --out "$OUT/ft-data" \
	--val-fraction 0.2 "$REPO_ROOT/README.md" "$REPO_ROOT"/examples/*/README.md
"$STEPGRAPH" run "$OUT/ds.json" --model "$OUT/base-model" --load "$OUT/base-model" \
	--data "$OUT/ft-data/train_*.bin" --max_length $len --steps $ft --log_interval 10 \
	--save "$OUT/ft" --save_shard_size 300000 --metrics "$OUT/finetune.jsonl"
export_dir=$OUT/ft/$(cat "$OUT/ft/latest")
ls "$export_dir"

say "4. reload the export: validation loss by stepgraph (and transformers when installed)"
cat >"$OUT/eval.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0}}, "zero_optimization": {"stage": 0}}
JSON
# every window of the validation shard in one batch: step 1's loss (computed
# before any update) is the mean over all of them, whatever the shuffle
nwin=$("$PY" -c 'import struct,sys; h=struct.unpack("<3i", open(sys.argv[1],"rb").read(12)); print((h[2]-1)//int(sys.argv[2]))' \
	"$OUT/ft-data/val_000000.bin" $len)
"$STEPGRAPH" run "$OUT/eval.json" --model "$export_dir" --load "$export_dir/config.json" \
	--data "$OUT/ft-data/val_000000.bin" --max_length $len --steps 1 --metrics "$OUT/eval.jsonl" \
	--set train_micro_batch_size_per_gpu=$nwin
if "$VPY" -c 'import transformers, torch' 2>/dev/null; then
	"$VPY" - "$export_dir" "$OUT/eval.jsonl" "$OUT/ft-data/val_000000.bin" $len $nwin <<'PYEOF'
import json, struct, sys, torch
from transformers import AutoModelForCausalLM
d, metrics, shard, T, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
m = AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager").double()
raw = open(shard, "rb").read()
count = struct.unpack("<3i", raw[:12])[2]
toks = torch.tensor(struct.unpack("<%dH" % count, raw[1024:1024 + 2 * count]), dtype=torch.long)
x = torch.stack([toks[i * T:i * T + T] for i in range(n)])
y = torch.stack([toks[i * T + 1:i * T + T + 1] for i in range(n)])
with torch.no_grad():
    logits = m(input_ids=x).logits
ref = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
sg = json.loads(open(metrics).readline())["loss"]
rel = abs(sg - ref) / abs(ref)
print("validation loss over %d windows: stepgraph %.6f, transformers %.6f (rel %.1e)" % (n, sg, ref, rel))
sys.exit(0 if rel <= 1e-5 else 1)
PYEOF
else
	echo "transformers is not installed in $VENV (scripts/check_hf_export.sh installs it):"
	echo "validation loss by stepgraph only: $("$PY" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["loss"])' "$OUT/eval.jsonl")"
fi
