#!/bin/sh
# test_hf_dir.sh - Hugging Face model directories: config.json files in
# transformers' exact format (tests/data/hf/, copied from the published
# models) give the published parameter totals (the reference is
# ../shared/reference/models.md's table, independent of stepgraph's model
# files) and the same description as the shipped model files; weights sharded
# by an independent writer (tests/hf_shard.py, save_pretrained's layout)
# train bit for bit as the one file they were cut from; broken directories
# and configs get errors that name the problem. Prints TAP.
set -u
SG_TEST_NAME=hf
. "${SG_SRCDIR:-.}/tests/test_env.sh"
HF=$SRC/tests/data/hf

. "$SRC/tests/train_lib.sh"
plan 24

# 1-4: published totals, and the same description as the shipped file
for pair in llama-3.1-8b:8,030,261,248 qwen3-14b:14,768,307,200 \
	qwen3-30b-a3b:30,532,122,624 gpt-oss-20b:20,914,757,184; do
	m=${pair%%:*} total=${pair#*:}
	"$BIN" model info "$HF/$m" >"$TMP/info_hf" 2>"$TMP/info_err"
	"$BIN" model info "$m" >"$TMP/info_shipped" 2>&1
	grep -q "^params *$total total" "$TMP/info_hf" && cmp -s "$TMP/info_hf" "$TMP/info_shipped"
	ok $? "$m: transformers' config.json gives the published $total parameters and the shipped description"
done
# 5: an unknown transformers key is dropped with a warning naming it
grep -q "quantization_config" "$TMP/info_err"
ok $? "gpt-oss-20b: quantization_config is named in a warning"
# 6-7: Seed-OSS's dropout is refused by name; without it, the published total
"$BIN" model info "$HF/seed-oss-36b" >"$TMP/seed.out" 2>"$TMP/seed.err"
[ $? -ne 0 ] && grep -q "attention_dropout: 0.1 is not supported" "$TMP/seed.err"
ok $? "seed-oss-36b: attention_dropout 0.1 is refused with its name and value"
mkdir -p "$TMP/seed"
sed -e 's/"attention_dropout": 0.1/"attention_dropout": 0.0/' \
	-e 's/"residual_dropout": 0.1/"residual_dropout": 0.0/' "$HF/seed-oss-36b/config.json" >"$TMP/seed/config.json"
"$BIN" model info "$TMP/seed/config.json" 2>&1 | grep -q "^params *36,151,104,512 total"
ok $? "seed-oss-36b without dropout: the published 36,151,104,512 parameters (attention_out_bias read)"

# The tiny model as transformers would write it
hfconfig() { # DIR [EXTRA-JSON-MEMBERS]
	mkdir -p "$1"
	cat >"$1/config.json" <<JSON
{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "head_dim": 32,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 384,
  "max_position_embeddings": 1024,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 4,
  "num_key_value_heads": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "float32",
  "transformers_version": "4.46.0",
  ${2:-}
  "use_cache": true,
  "vocab_size": 256
}
JSON
}
ds base '{}'
# weights to start from: one trained step of the shipped tiny-llama
train seed base --steps 1 --save "$TMP/ck"
W="$TMP/ck/$(cat "$TMP/ck/latest" 2>/dev/null)/model.safetensors"
[ -f "$W" ]
ok $? "a weights file to shard (one step of tiny-llama, saved)"

hfconfig "$TMP/sharded"
"$PY" "$SRC/tests/hf_shard.py" "$W" "$TMP/sharded" 3
hfconfig "$TMP/single"
cp "$W" "$TMP/single/model.safetensors"
train ref base --steps 3 --load "$W"
train sharded base --steps 3 --model "$TMP/sharded" --load "$TMP/sharded"
train single base --steps 3 --model "$TMP/single/config.json" --load "$TMP/single/config.json"
[ "$(cat "$TMP/ref.rc")" -eq 0 ] && [ "$(cat "$TMP/sharded.rc")" -eq 0 ] &&
	losscmp "$TMP/ref.jsonl" "$TMP/sharded.jsonl" 0 0
ok $? "3 shards + index (model and load given as the directory) train bit for bit as the one file"
[ "$(cat "$TMP/single.rc")" -eq 0 ] && losscmp "$TMP/ref.jsonl" "$TMP/single.jsonl" 0 0
ok $? "a directory with one model.safetensors (given as its config.json) too"
grep -q "resum" "$TMP/sharded.out"
[ $? -ne 0 ] && grep -q "^Step 1 |" "$TMP/sharded.out"
ok $? "an HF directory starts a run at step 1 (weights, not a checkpoint to resume)"

# unknown keys: a warning, not an error
hfconfig "$TMP/extra" '"my_custom_key": 3,'
cp "$W" "$TMP/extra/model.safetensors"
train extra base --steps 1 --model "$TMP/extra" --load "$TMP/extra"
[ "$(cat "$TMP/extra.rc")" -eq 0 ] && grep -q "warning: .*my_custom_key" "$TMP/extra.err"
ok $? "an unknown config.json key is a warning naming it, and the run trains"

# errors: run exits non-zero and stderr names the problem
fails() { # LABEL PATTERN ARGS...
	label=$1 pat=$2
	shift 2
	train "$label" base --steps 1 "$@"
	[ "$(cat "$TMP/$label.rc")" -ne 0 ] && grep -q -- "$pat" "$TMP/$label.err"
	r=$?
	[ $r -eq 0 ] || sed 's/^/# /' "$TMP/$label.err" | tail -2
	return $r
}
for mode in missing-shard wrong-shard twice bad-name; do
	hfconfig "$TMP/$mode"
	"$PY" "$SRC/tests/hf_shard.py" "$W" "$TMP/$mode" 2 "$mode"
done
fails ms "model-00002-of-00002.safetensors" --model "$TMP/missing-shard" --load "$TMP/missing-shard"
ok $? "a shard the index names but the directory lacks: named"
fails ws "does not hold it" --model "$TMP/wrong-shard" --load "$TMP/wrong-shard"
ok $? "the index puts a tensor in a shard without it: named"
fails tw "is in two shards" --model "$TMP/twice" --load "$TMP/twice"
ok $? "a tensor in two shards: refused"
fails bn "is not a file name in the directory" --model "$TMP/bad-name" --load "$TMP/bad-name"
ok $? "a shard path leaving the directory: refused"
hfconfig "$TMP/gelu"
sed -i 's/"silu"/"gelu"/' "$TMP/gelu/config.json"
fails gelu 'hidden_act: "gelu" is not supported' --model "$TMP/gelu"
ok $? "hidden_act gelu: refused by name"
hfconfig "$TMP/gemma2"
sed -i 's/"model_type": "llama"/"model_type": "gemma2"/' "$TMP/gemma2/config.json"
fails gemma2 'model_type: "gemma2" is not supported' --model "$TMP/gemma2"
ok $? "an unsupported model_type: refused with the supported ones"
mkdir -p "$TMP/empty"
fails empty "no config.json" --model "$TMP/empty"
ok $? "a directory without config.json: refused"
# a directory with its own tokenizer and raw text data: never bytes silently
hfconfig "$TMP/tok"
cp "$W" "$TMP/tok/model.safetensors"
cp "$SRC/tests/data/tokenizers/wordlevel.json" "$TMP/tok/tokenizer.json"
fails tok "scripts/tokenize.sh --tokenizer $TMP/tok/tokenizer.json --out SHARDS $SRC/README.md" \
	--model "$TMP/tok" --load "$TMP/tok" --data "$SRC/README.md" &&
	grep -q "model $TMP/tok has its own tokenizer" "$TMP/tok.err" && ! grep -q "^Step" "$TMP/tok.out"
ok $? "a model directory with tokenizer.json and raw text data: refused with the tokenize command"

# Saving: every checkpoint step directory is a Hugging Face model directory
STEPDIR="$TMP/ck/$(cat "$TMP/ck/latest")"
"$PY" - "$STEPDIR/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 128,
        "intermediate_size": 384, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 256,
        "max_position_embeddings": 1024, "tie_word_embeddings": True, "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
        "hidden_act": "silu", "torch_dtype": "float32"}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
assert not bad, bad
PYEOF
ok $? "a checkpoint's step directory holds config.json in transformers' format (checked by an independent reader)"
# sharded saves: the same bytes as one file, resumable, loadable as weights
train one base --steps 2 --save "$TMP/one"
train shards base --steps 2 --save "$TMP/shards" --save_shard_size 400000
S1="$TMP/one/$(cat "$TMP/one/latest" 2>/dev/null)"
SS="$TMP/shards/$(cat "$TMP/shards/latest" 2>/dev/null)"
nsh=$("$PY" "$SRC/tests/hf_shard.py" --compare "$SS" "$S1/model.safetensors" 400000 2>"$TMP/cmp.err")
[ $? -eq 0 ] && [ "${nsh:-0}" -gt 2 ] && ! [ -e "$SS/model.safetensors" ]
ok $? "save_shard_size 400000: $nsh shards + index holding the one-file save's tensors byte for byte"
[ -s "$TMP/cmp.err" ] && sed 's/^/# /' "$TMP/cmp.err" | tail -2
train full4 base --steps 4
train resumed base --steps 2 --load "$TMP/shards"
[ "$(cat "$TMP/resumed.rc")" -eq 0 ] && grep -q "^Step 3 |" "$TMP/resumed.out" &&
	losscmp "$TMP/full4.jsonl" "$TMP/resumed.jsonl" 0 2
ok $? "a sharded checkpoint resumes: steps 3-4 as the uninterrupted run, bit for bit"
train fromstep base --steps 2 --load "$SS/config.json"
train fromfile base --steps 2 --load "$S1/model.safetensors"
[ "$(cat "$TMP/fromstep.rc")" -eq 0 ] && grep -q "^Step 1 |" "$TMP/fromstep.out" &&
	losscmp "$TMP/fromfile.jsonl" "$TMP/fromstep.jsonl" 0 0
ok $? "load STEPDIR/config.json starts a new run from a sharded step's weights (as from the one file)"
