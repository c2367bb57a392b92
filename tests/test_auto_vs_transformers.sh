#!/bin/sh
# test_auto_vs_transformers.sh - the "auto" values `stepgraph config` fills
# (runtime/config/ds_auto.c) against transformers' own code: each scenario
# runs transformers' HfTrainerDeepSpeedConfig.trainer_config_process and
# trainer_config_finalize (tests/hf_auto_ref.py) on the same DeepSpeed config
# with the same TrainingArguments, model hidden size, world size and number of
# updates, and compares every "auto" key. transformers comes from PyPI, in a
# venv of its own ($SG_TRANSFORMERS_VENV, default
# ~/.cache/stepgraph/venv-transformers, made on the first run); without PyPI
# the test skips. Prints TAP.
set -u
SG_TEST_NAME=auto_vs_transformers
. "${SG_SRCDIR:-.}/tests/test_env.sh"
VENV=${SG_TRANSFORMERS_VENV:-$HOME/.cache/stepgraph/venv-transformers}
have() { "$VENV/bin/python" -c "import transformers.integrations.deepspeed, transformers.training_args" 2>/dev/null; }
if ! have; then
	{ "$PY" -m venv "$VENV" && timeout 600 "$VENV/bin/pip" install -q transformers; } >"$TMP/pip.log" 2>&1
	if ! have; then
		skip_all "transformers from PyPI not installable into $VENV ($(tail -n 1 "$TMP/pip.log"))"
	fi
fi
hidden() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['hidden_size'])" "$SRC/models/$1.json"; }
EXT="$SRC/tests/data/external"
VERSION=$("$VENV/bin/python" -c "import transformers; print(transformers.__version__)")

# scenario NAME CONFIG MODEL DP UPDATES "STEPGRAPH FLAGS" TRAINER_ARG=VALUE...
# UPDATES is what the Trainer calls num_training_steps: --steps, or
# --bench_steps when the flags give that instead.
scenario() {
	name=$1 cfg=$2 model=$3 dp=$4 updates=$5 flags=$6
	shift 6
	# shellcheck disable=SC2086 # flags are words
	"$BIN" config "$cfg" --model "$model" --dp_size "$dp" $flags >"$TMP/$name.out" 2>"$TMP/$name.err"
	rc=$?
	why=""
	[ $rc -eq 0 ] || why=" ($(grep -v warning "$TMP/$name.err" | head -c 200 | tr '\n' ' '))"
	ok $rc "$name: stepgraph config loads $(basename "$cfg")$why"
	cat "$TMP/$name.out" "$TMP/$name.err" >"$TMP/$name.all"
	"$VENV/bin/python" "$SRC/tests/hf_auto_ref.py" "$cfg" "$(hidden "$model")" "$dp" "$updates" \
		"$TMP/$name.all" "$@" >"$TMP/$name.cmp" 2>"$TMP/$name.pyerr"
	prc=$?
	keys=$(grep -c '^ok ' "$TMP/$name.cmp")
	[ $prc -eq 0 ] && [ "$keys" -gt 0 ] && ! grep -q '^not ok' "$TMP/$name.cmp"
	st=$?
	why=""
	[ $st -eq 0 ] || why=" ($(grep '^not ok' "$TMP/$name.cmp" | head -3 | tr '\n' ';') $(tail -n 1 "$TMP/$name.pyerr"))"
	ok $st "$name: $keys \"auto\" keys as transformers $VERSION fills them$why"
}

# the Trainer's defaults everywhere (lr 5e-5, betas, eps, clipping 1, warm-up 0 -> 1)
scenario zero2-defaults "$EXT/transformers-ds_config_zero2.json" tiny-llama 1 50 "--steps 50"
# batch over 2 ranks, bf16, the three hidden-size buckets of a 2048-wide model
scenario z3-llamafactory "$EXT/llamafactory-ds_z3_config.json" llama-3.2-1b 2 100 \
	"--steps 100 --per_device_train_batch_size 4 --gradient_accumulation_steps 2 --bf16" \
	per_device_train_batch_size=4 gradient_accumulation_steps=2 bf16=true
# every optimizer argument, fp16, clipping, a warm-up ratio (ceil(0.05 x 200))
scenario z3-trainer-args "$SRC/tests/data/bad-configs/hf-trainer-zero3.json" tiny-llama 1 200 \
	"--steps 200 --learning_rate 3e-4 --lr_warmup_steps 0.05 --adam_beta1 0.85 --adam_beta2 0.95 --adam_epsilon 1e-6 --weight_decay 0.1 --max_grad_norm 0.5 --fp16" \
	learning_rate=3e-4 warmup_steps=0.05 adam_beta1=0.85 adam_beta2=0.95 adam_epsilon=1e-6 \
	weight_decay=0.1 max_grad_norm=0.5 fp16=true
# warm-up in updates (>= 1), the number of updates from --bench_steps, a
# 3072-wide model (0.9 H^2 is not an integer there), 4 ranks
scenario z3-bench-steps "$SRC/tests/data/bad-configs/hf-trainer-zero3.json" llama-3.2-3b 4 30 \
	"--bench_steps 30 --lr_warmup_steps 7 --per_device_train_batch_size 2" \
	warmup_steps=7 per_device_train_batch_size=2
# stage 0, clipping off
scenario z0-llamafactory "$EXT/llamafactory-ds_z0_config.json" tiny-llama 1 10 \
	"--steps 10 --fp16 --max_grad_norm 0" fp16=true max_grad_norm=0
# stage 2 with stage-3 keys "auto": the Trainer leaves them, DeepSpeed drops them
scenario stage3-keys-at-stage2 "$SRC/tests/data/good-configs/auto-stage3-key-at-stage2.json" \
	llama-3.2-1b 1 10 "--steps 10"

# Accelerate's ZeRO-3 test config: torch_adam, and an "auto" the Trainer
# leaves (stage3_gather_16bit_weights_on_model_save) that DeepSpeed drops
scenario z3-accelerate "$EXT/accelerate-ds_config_zero3.json" qwen3-14b 8 1000 \
	"--steps 1000 --learning_rate 1e-5 --weight_decay 0.01 --lr_warmup_steps 0.03 --bf16" \
	learning_rate=1e-5 weight_decay=0.01 warmup_steps=0.03 bf16=true

# negative control: a value the Trainer would not give is caught
sed 's/^  train_micro_batch_size_per_gpu = 4 /  train_micro_batch_size_per_gpu = 5 /' \
	"$TMP/z3-llamafactory.out" >"$TMP/control.out"
"$VENV/bin/python" "$SRC/tests/hf_auto_ref.py" "$EXT/llamafactory-ds_z3_config.json" 2048 2 100 \
	"$TMP/control.out" per_device_train_batch_size=4 gradient_accumulation_steps=2 bf16=true \
	>"$TMP/control.cmp" 2>&1
grep -q '^not ok train_micro_batch_size_per_gpu hf=4 stepgraph=5' "$TMP/control.cmp"
ok $? "negative control: a micro batch of 5 where the Trainer fills 4 is reported"

done_testing
