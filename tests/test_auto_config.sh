#!/bin/sh
# test_auto_config.sh - DeepSpeed configs written for the Hugging Face Trainer
# ("auto" values) and configs DeepSpeed accepts, as `stepgraph config` and
# `stepgraph run` read them (runtime/config/ds_auto.c, docs/config-keys.md
# "\"auto\" values"). Expected values are the Trainer's rules written out
# (TrainingArguments defaults, H^2, int(0.9 H^2), 10 H with H from the model
# file); test_auto_vs_transformers.sh checks the same rules against
# transformers' code. Prints TAP.
set -u
SG_TEST_NAME=auto_config
. "${SG_SRCDIR:-.}/tests/test_env.sh"
contains() { grep -q -F -- "$2" "$1"; }
run() { # run NAME ARGS...: stdout, stderr and status under $TMP/NAME.*
	name=$1
	shift
	"$BIN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
	echo $? >"$TMP/$name.rc"
}
rc() { cat "$TMP/$1.rc"; }
EXT="$SRC/tests/data/external"
HF3="$SRC/tests/data/bad-configs/hf-trainer-zero3.json"

# ---- the Trainer's defaults, and where each value came from --------------
run z2 config "$EXT/transformers-ds_config_zero2.json" --steps 50
ok "$(rc z2)" "transformers' ZeRO-2 test config loads ($(head -c 200 "$TMP/z2.err"))"
for line in "train_micro_batch_size_per_gpu = 8 (per_device_train_batch_size, the Trainer's default)" \
	"gradient_accumulation_steps = 1 (gradient_accumulation_steps, the Trainer's default)" \
	"train_batch_size = 8 (dp_size 1 x per_device_train_batch_size 8 x gradient_accumulation_steps 1)" \
	"gradient_clipping = 1 (max_grad_norm, the Trainer's default)" \
	"optimizer.params.lr = 5e-05 (learning_rate, the Trainer's default)" \
	"optimizer.params.betas = [0.9,0.999]" "optimizer.params.eps = 1e-08" \
	"optimizer.params.weight_decay = 0 (weight_decay, the Trainer's default)" \
	"scheduler.params.warmup_min_lr = 0 (the Trainer's constant 0" \
	"scheduler.params.warmup_max_lr = 5e-05" "fp16.enabled = false" "bf16.enabled = false" \
	"scheduler.params.warmup_num_steps = 1 (lr_warmup_steps, the Trainer's default 0, at least 1)"; do
	contains "$TMP/z2.out" "  $line"
	ok $? "defaults: $line"
done
contains "$TMP/z2.out" "auto values:      13 filled"
ok $? "defaults: 13 values filled, none twice"
contains "$TMP/z2.out" "micro 8 x accumulation 1 x dp 1"
ok $? "defaults: the batch line shows the filled sizes"

# ---- run options, the model's hidden size, the number of updates ---------
run z3 config "$HF3" --model llama-3.2-3b --dp_size 4 --per_device_train_batch_size 2 \
	--gradient_accumulation_steps 3 --learning_rate 3e-4 --adam_beta2 0.95 --weight_decay 0.1 \
	--max_grad_norm 0.5 --bf16 --steps 200 --lr_warmup_steps 0.05
ok "$(rc z3)" "an HF Trainer ZeRO-3 config with Trainer arguments loads ($(head -c 200 "$TMP/z3.err"))"
H=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['hidden_size'])" "$SRC/models/llama-3.2-3b.json")
want_reduce=$((H * H))
want_prefetch=$("$PY" -c "print(int(0.9 * $H * $H))")
for line in "train_batch_size = 24 (dp_size 4 x per_device_train_batch_size 2 x gradient_accumulation_steps 3)" \
	"optimizer.params.lr = 0.0003 (run option learning_rate)" \
	"scheduler.params.warmup_max_lr = 0.0003 (run option learning_rate)" \
	"optimizer.params.betas = [0.9,0.95] (adam_beta1, the Trainer's default; run option adam_beta2)" \
	"optimizer.params.weight_decay = 0.1 (run option weight_decay)" \
	"gradient_clipping = 0.5 (run option max_grad_norm)" "bf16.enabled = true (run option bf16)" \
	"zero_optimization.reduce_bucket_size = $want_reduce (hidden_size $H of model llama-3.2-3b, squared)" \
	"zero_optimization.stage3_prefetch_bucket_size = $want_prefetch " \
	"zero_optimization.stage3_param_persistence_threshold = $((10 * H)) " \
	"scheduler.params.total_num_steps = 200 (run option steps)" \
	"scheduler.params.warmup_num_steps = 10 (ceil(run option lr_warmup_steps 0.05 x 200 updates"; do
	contains "$TMP/z3.out" "  $line"
	ok $? "run options: $line"
done
contains "$TMP/z3.out" "precision:        bf16" && contains "$TMP/z3.out" "WarmupDecayLR: log warm-up over 10 updates from 0 to 0.0003, then linear decay to 0 at update 200"
ok $? "run options: precision and schedule use the filled values"

# a value the config gives stands in for the run option it matches
cat >"$TMP/given-lr.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 2e-4}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "auto", "warmup_num_steps": 5}}}
JSON
run given config "$TMP/given-lr.json"
contains "$TMP/given.out" "  scheduler.params.warmup_max_lr = 0.0002 (learning_rate as optimizer.params.lr gives it)"
ok $? "warmup_max_lr \"auto\" takes the lr the config gives (the Trainer would refuse any other)"
# WarmupLR's own default warmup_max_lr is the optimizer's lr: the filled one
cat >"$TMP/warmuplr-default.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}}}
JSON
run wdef config "$TMP/warmuplr-default.json" --learning_rate 2e-5
contains "$TMP/wdef.out" "WarmupLR: log warm-up over 5 updates from 0 to 2e-05, then constant"
ok $? "WarmupLR without warmup_max_lr warms up to the filled lr"

# ---- refusals --------------------------------------------------------------
run nosteps config "$HF3"
[ "$(rc nosteps)" -ne 0 ] && contains "$TMP/nosteps.err" 'scheduler.params.total_num_steps: "auto" is the number of optimizer updates' &&
	contains "$TMP/nosteps.err" "set run option steps (--steps N)"
ok $? "total_num_steps \"auto\" without --steps: an error naming the key and the option"
run mismatch config "$EXT/transformers-ds_config_zero3.json" --set train_micro_batch_size_per_gpu=1 --learning_rate 1e-4
[ "$(rc mismatch)" -ne 0 ] && contains "$TMP/mismatch.err" "optimizer.params.lr: 3e-05 differs from run option learning_rate 0.0001"
ok $? "a run option that contradicts a value of the config is refused, as the Trainer refuses it"
# the warm-up compares the updates the option gives, as the Trainer does:
# 0.5 of 1000 is the config's 500, 0.4 is not
run warm-same config "$EXT/transformers-ds_config_zero3.json" --set train_micro_batch_size_per_gpu=1 \
	--steps 1000 --lr_warmup_steps 0.5
run warm-diff config "$EXT/transformers-ds_config_zero3.json" --set train_micro_batch_size_per_gpu=1 \
	--steps 1000 --lr_warmup_steps 0.4
[ "$(rc warm-same)" -eq 0 ] && [ "$(rc warm-diff)" -ne 0 ] &&
	contains "$TMP/warm-diff.err" "scheduler.params.warmup_num_steps: 500 differs from the 400 updates of run option lr_warmup_steps 0.4"
ok $? "--lr_warmup_steps 0.5 of 1000 updates matches warmup_num_steps 500; 0.4 is refused"
run noeffect config "$EXT/llamafactory-ds_z0_config.json" --learning_rate 1e-4
[ "$(rc noeffect)" -eq 0 ] && contains "$TMP/noeffect.err" 'run option learning_rate has no effect: the DeepSpeed config has no "auto" it fills (optimizer.params.lr)'
ok $? "a run option that fills nothing is warned about"
run badflag config "$HF3" --steps 10 --adam_beta1 1.5
[ "$(rc badflag)" -ne 0 ] && contains "$TMP/badflag.err" "--adam_beta1: 1.5 is out of range"
ok $? "--adam_beta1 1.5 is refused with its range"

# ---- what DeepSpeed accepts ------------------------------------------------
run rb0 config "$EXT/transformers-ds_config_zero3.json" --set train_micro_batch_size_per_gpu=1
ok "$(rc rb0)" "reduce_bucket_size, stage3_prefetch_bucket_size and persistence threshold 0 are accepted ($(head -c 200 "$TMP/rb0.err"))"
run megatron config "$EXT/deepspeed-megatron-gpt2-ds_config_func_bs8_zero2.json"
ok "$(rc megatron)" "contiguous_memory_optimization without number_checkpoints is accepted ($(head -c 200 "$TMP/megatron.err"))"
run dropped config "$SRC/tests/data/good-configs/auto-dropped-by-deepspeed.json"
[ "$(rc dropped)" -eq 0 ] && contains "$TMP/dropped.err" 'zero_optimization.prefetch_bucket_size: "auto" that the Hugging Face Trainer does not fill: DeepSpeed drops it'
ok $? "an \"auto\" the Trainer leaves in zero_optimization takes DeepSpeed's default, with a warning"
run accel config "$EXT/accelerate-zero_stage3_offload_config.json" --steps 100 --learning_rate 2e-5
[ "$(rc accel)" -eq 0 ] && contains "$TMP/accel.out" "auto values:      12 filled" &&
	contains "$TMP/accel.err" 'zero_optimization.stage3_gather_16bit_weights_on_model_save: "auto" that the Hugging Face Trainer does not fill'
ok $? "Accelerate's ZeRO-3 offload template: 12 values filled, the save flag Accelerate fills dropped with a warning ($(grep -v warning "$TMP/accel.err" | head -c 200))"
# in a run config, "bf16": true is the Trainer's flag, "bf16": {...} a
# misplaced DeepSpeed section
cat >"$TMP/run-bf16.json" <<'JSON'
{"bf16": true, "deepspeed_config": {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": "auto"}}}
JSON
cat >"$TMP/run-bf16-section.json" <<'JSON'
{"bf16": {"enabled": true}, "deepspeed_config": {"train_micro_batch_size_per_gpu": 2}}
JSON
run rbf config "$TMP/run-bf16.json"
run rbfs config "$TMP/run-bf16-section.json"
contains "$TMP/rbf.out" "precision:        bf16" && contains "$TMP/rbfs.out" "precision:        fp32" &&
	contains "$TMP/rbfs.err" "unknown key bf16 ignored (a DeepSpeed key: it belongs in the DeepSpeed config"
ok $? "run config: \"bf16\": true fills bf16.enabled; a \"bf16\" object is a misplaced DeepSpeed section"
run notfilled config "$SRC/tests/data/bad-configs/auto-not-filled.json"
[ "$(rc notfilled)" -ne 0 ] && contains "$TMP/notfilled.err" "steps_per_print"
ok $? "an \"auto\" the Trainer leaves at the top level is refused"

# sub_group_size 0 (axolotl's ZeRO-3 files): one sub-group per tensor; the
# step is the same as with one sub-group, so the losses are the same
run axolotl config "$EXT/axolotl-zero3_bf16.json"
M=$("$PY" -c "import json,sys; c=json.load(open(sys.argv[1])); print(c['num_hidden_layers'] * 9 + 2 + (not c.get('tie_word_embeddings', False)))" "$SRC/models/tiny-llama.json")
[ "$(rc axolotl)" -eq 0 ] && contains "$TMP/axolotl.out" "sub-groups:       $M (one per parameter tensor: sub_group_size 0)"
ok $? "axolotl's ZeRO-3 config (sub_group_size 0) loads: $M sub-groups, one per tensor of tiny-llama ($(grep -v warning "$TMP/axolotl.err" | head -c 200))"
for sgs in 0 1000000000; do
	run "sg$sgs" run "$EXT/axolotl-zero3_bf16.json" --steps 3 --max_length 32 --per_device_train_batch_size 2 \
		--set "zero_optimization.sub_group_size=$sgs" \
		--set 'zero_optimization.offload_optimizer={"device":"cpu","ratio":0.5}' --metrics "$TMP/sg$sgs.jsonl"
done
"$PY" - "$TMP/sg0.jsonl" "$TMP/sg1000000000.jsonl" <<'PY'
import json, math, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
sys.exit(0 if len(a) == 3 and len(b) == 3 and all(math.isclose(x, y, rel_tol=1e-5) for x, y in zip(a, b)) else 1)
PY
ok $? "run: sub_group_size 0 (half the tensors' sub-groups on the CPU) trains as one sub-group does ($(rc sg0) $(rc sg1000000000))"

# ---- a Trainer config trains with the filled values ----------------------
run train run "$EXT/transformers-ds_config_zero2.json" --steps 4 --max_length 32 \
	--per_device_train_batch_size 2 --learning_rate 1e-3 --adam_beta2 0.95 --lr_warmup_steps 1 \
	--metrics "$TMP/m.jsonl"
"$PY" - "$TMP/m.jsonl" <<'PY'
import json, math, sys
last = [json.loads(l) for l in open(sys.argv[1])][-1]
# after WarmupLR's warm-up the lr is warmup_max_lr = learning_rate
sys.exit(0 if math.isclose(last["lr"], 1e-3, rel_tol=1e-6) and math.isclose(last["beta2"], 0.95, rel_tol=1e-6) else 1)
PY
ok $? "run: the last step's lr is --learning_rate 1e-3 and beta2 is --adam_beta2 0.95 ($(rc train))"

done_testing
