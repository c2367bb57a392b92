#!/bin/sh
# test_eval.sh - the validation loss during a run (runtime/train/eval.h: run
# options eval_data, eval_interval, eval_batches).
#
# Shards written here with struct (tests/instruct_ref.py): tiny-llama trains
# on one, a held-out shard with a loss mask is evaluated.
# (a) the training losses and gradient norms of a run with evaluations are
#     bit for bit those of the same run without (metrics compared exactly);
# (b) the eval loss equals, within 1e-5 relative, the mean cross-entropy over
#     the trained targets of the same held-out windows that a plain-torch
#     Llama (tests/torch_model_ref.py, float64) computes from the weights the
#     run saved after the evaluated step (tests/eval_ref.py), with ZeRO 0 and
#     with ZeRO 3 (every unit gathered), its perplexity is its exp, and the
#     token count is the mask's;
# (c) the mask is honoured (without it the reference differs), and at lr 0
#     every evaluation gives the same loss (the same batches each time); a
#     resumed run evaluates as the uninterrupted one;
# (d) bad eval options are refused before any step, naming eval_data (a
#     missing file, a token outside the vocabulary, another tokenizer, too
#     few windows for a micro-batch) or the option;
# (e) 2 ranks of micro batch 1 give the eval loss of 1 rank of micro batch 2
#     (the same windows) within 1e-5 (skipped without mpirun or MPI).
# Prints TAP.
set -u
SG_TEST_NAME=eval
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/train_lib.sh"
REF="$SRC/tests/instruct_ref.py"
EREF="$SRC/tests/eval_ref.py"
MODEL="$SRC/models/tiny-llama.json"
T=16
# shard NAME NTOKENS MULT [MASK-PERIOD]: NTOKENS ids (i * MULT + 7) mod 256 and a
# mask whose tokens at positions i mod PERIOD < PERIOD / 2 are not targets
shard() {
	ids=$("$PY" -c "import sys; print(','.join(str((i * $3 + 7) % 256) for i in range($2)))")
	mask=$("$PY" -c "p = ${4:-1}; print(','.join('0' if p > 1 and i % p < p // 2 else '1' for i in range($2)))")
	"$PY" "$REF" write "$TMP/$1.bin" $T "$ids" "$mask"
}
mkdir -p "$TMP/tr" "$TMP/ev"
shard tr/train $((40 * T + 1)) 37
shard ev/val $((6 * T + 1)) 53 5
ARGS="--max_length $T --log_interval 1 --data $TMP/tr/train.bin"
EV="--eval_data $TMP/ev/val.bin --eval_batches 2"
echo "1..18"

ds z0 '{}'
train plain z0 $ARGS --steps 3
train evals z0 $ARGS --steps 3 $EV --eval_interval 2 --save "$TMP/ck0"
[ "$(cat "$TMP/plain.rc")" = 0 ] && [ "$(cat "$TMP/evals.rc")" = 0 ]
ok $? "runs with and without evaluations"
"$PY" - "$TMP/plain.jsonl" "$TMP/evals.jsonl" <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [r for r in map(json.loads, open(sys.argv[2])) if "loss" in r]
key = lambda rs: [(r["step"], r["loss"], r["grad_norm"]) for r in rs]
import math
# a diverged run writes null: equal nulls are not equal losses
assert all(isinstance(x, float) and math.isfinite(x) for r in a for x in (r["loss"], r["grad_norm"])), key(a)
assert len(a) == 3 and key(a) == key(b), (key(a), key(b))
PYEOF
ok $? "(a) the training losses and gradient norms are bit for bit those of a run without evaluations"
[ "$(grep -c '^Eval at step' "$TMP/evals.out")" = 2 ] && grep -q "^Eval at step 2 | eval_loss: " "$TMP/evals.out" &&
	grep -q "^Eval at step 3 | eval_loss: .* | eval_ppl: .* | tokens: " "$TMP/evals.out" &&
	grep -q "eval: $TMP/ev/val.bin (6 windows), 2 micro-batches (4 sequences) every 2 steps and after the last" "$TMP/evals.out"
ok $? "evaluations after step 2 (eval_interval) and step 3 (the last), each a log line; the header says what is evaluated"
# the last evaluation's line of the metrics against the reference
check_ref() { # METRICS WEIGHTS NWINDOWS
	got=$("$PY" -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if "eval_loss" in l][-1]; print(r["eval_loss"], r["eval_ppl"], r["eval_tokens"])' "$1")
	ref=$("$PY" "$EREF" "$MODEL" "$2" "$TMP/ev/val.bin" $T "$3" 2>&1)
	echo "# stepgraph: $got; torch: $ref"
	"$PY" -c 'import math,sys; g=sys.argv[1].split(); r=sys.argv[2].split(); l,p,n=map(float,g); rl,rp,rn=map(float,r); sys.exit(not (math.isfinite(l) and abs(l-rl) <= 1e-5*abs(rl) and abs(p-math.exp(l)) <= 1e-9*p and n == rn))' "$got" "$ref"
}
check_ref "$TMP/evals.jsonl" "$TMP/ck0/step-00000003/model.safetensors" 4
ok $? "(b) ZeRO 0: eval_loss = torch's mean over the trained targets of the 4 held-out windows (1e-5), eval_ppl its exp, eval_tokens the mask's"
nomask=$("$PY" "$EREF" "$MODEL" "$TMP/ck0/step-00000003/model.safetensors" "$TMP/ev/val.bin" $T 4 nomask | cut -d' ' -f1)
"$PY" -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if "eval_loss" in l][-1]; l=r["eval_loss"]; n=float(sys.argv[2]); sys.exit(not (abs(l-n) > 1e-3*abs(n) and r["eval_tokens"] < 4*16))' \
	"$TMP/evals.jsonl" "$nomask"
ok $? "(c) the loss mask is read: fewer targets than tokens, and the loss without the mask is another"

# a run resumed from step 2's checkpoint evaluates after step 3 as the whole run did
train resumed z0 $ARGS --steps 2 --save "$TMP/ck2"
train resumed2 z0 $ARGS --steps 1 $EV --load "$TMP/ck2/step-00000002"
"$PY" -c 'import json,sys; a,b=[[json.loads(l) for l in open(p) if "eval_loss" in l][-1] for p in sys.argv[1:]]; assert a["step"] == b["step"] == 3 and a["eval_loss"] == b["eval_loss"], (a, b)' \
	"$TMP/evals.jsonl" "$TMP/resumed2.jsonl"
ok $? "a run resumed from step 2's checkpoint evaluates after step 3 (global step numbers) the loss of the uninterrupted run, bit for bit"

# ZeRO 3 with every unit gathered before its forward
ds z3 '{"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0}}'
train z3 z3 $ARGS --steps 2 $EV --save "$TMP/ck3"
[ "$(cat "$TMP/z3.rc")" = 0 ] && grep -q "^Eval at step 2 " "$TMP/z3.out" && ! grep -q "^Eval at step 1 " "$TMP/z3.out" &&
	check_ref "$TMP/z3.jsonl" "$TMP/ck3/step-00000002/model.safetensors" 4
ok $? "(b) ZeRO 3, parameters gathered: eval_loss at the last step (eval_interval 0) = torch's within 1e-5"

# a MoE model under activation checkpointing (its backward runs the experts
# again): the forward is cut from the step without checkpointing
ds moe '{}'
train moe0 moe $ARGS --steps 2 --model tiny-moe --activation_checkpointing
train moe1 moe $ARGS --steps 2 --model tiny-moe --activation_checkpointing $EV --eval_interval 1
"$PY" -c 'import json,sys; a,b=[[json.loads(l) for l in open(p)] for p in sys.argv[1:]]; e=[r["eval_loss"] for r in b if "eval_loss" in r]; b=[r for r in b if "loss" in r]; k=lambda rs: [(r["loss"], r["grad_norm"]) for r in rs]; assert k(a) == k(b) and len(e) == 2 and all(x > 0 for x in e), (k(a), k(b), e)' \
	"$TMP/moe0.jsonl" "$TMP/moe1.jsonl"
ok $? "MoE (tiny-moe) with activation checkpointing: evaluated after each step, its training losses bit for bit those of a run without"

# lr 0: the weights never move, so every evaluation must give the same loss
ds lr0 '{"optimizer": {"params": {"lr": 0}}}'
train lr0 lr0 $ARGS --steps 3 --eval_data "$TMP/ev/val.bin" --eval_interval 1
"$PY" -c 'import json,sys; e=[json.loads(l) for l in open(sys.argv[1]) if "eval_loss" in l]; assert len(e) == 3 and e[0]["eval_tokens"] == e[1]["eval_tokens"] > 0 and isinstance(e[0]["eval_loss"], float) and e[0]["eval_loss"] > 0 and e[0]["eval_loss"] == e[1]["eval_loss"] == e[2]["eval_loss"], e' "$TMP/lr0.jsonl" &&
	grep -q "3 micro-batches (6 sequences)" "$TMP/lr0.out"
ok $? "(c) at lr 0 the three evaluations give one loss: the same held-out batches each time (eval_batches 0: all 3 micro-batches)"

# (d) refusals, before any step, naming what is wrong
refused() { # NAME TEXT ARGS...: the run fails with TEXT and trains no step
	name=$1 text=$2
	shift 2
	"$BIN" run "$TMP/z0.json" $ARGS --steps 1 "$@" >"$TMP/$name.out" 2>&1
	[ $? -ne 0 ] && grep -qF -- "$text" "$TMP/$name.out" && ! grep -q "^Step" "$TMP/$name.out"
}
refused missing "eval_data: " --eval_data "$TMP/ev/none.bin"
ok $? "(d) a missing eval_data file: refused, naming eval_data"
"$PY" "$REF" write "$TMP/ev/big.bin" $T "$("$PY" -c "print(','.join(str(300 + i) for i in range(40)))")" \
	"$("$PY" -c "print(','.join('1' for i in range(40)))")"
refused vocab "eval_data: " --eval_data "$TMP/ev/big.bin" && grep -q "big.bin" "$TMP/vocab.out"
ok $? "(d) eval_data with tokens outside the model's vocabulary: refused, naming eval_data and the file"
shard ev/short $((T + 1)) 53
refused short "eval_data $TMP/ev/short.bin: 1 window of 16 + 1 tokens, fewer than one micro-batch (2 sequences x 1 rank)" \
	--eval_data "$TMP/ev/short.bin"
ok $? "(d) eval_data too short for one micro-batch: refused, naming eval_data"
refused batches "eval_batches 4: eval_data $TMP/ev/val.bin holds 3 micro-batches" --eval_data "$TMP/ev/val.bin" --eval_batches 4
ok $? "(d) more eval_batches than eval_data holds: refused, naming eval_batches"
refused nodata "eval_interval 5: needs eval_data" --eval_interval 5
ok $? "(d) eval_interval without eval_data: refused"
# shards that say which tokenizer made them (scripts/tokenize.sh's tokenizer-info.json)
info() { printf '{"tokenizer": "%s", "sha256": "%s", "vocab_size": %s}\n' "$2" "$3" "$4" >"$TMP/$1/tokenizer-info.json"; }
info tr a.json "$(printf 'a%.0s' $(seq 64))" 256
info ev b.json "$(printf 'b%.0s' $(seq 64))" 256
refused tok "eval_data $TMP/ev/val.bin: the shards were made by tokenizer b.json" --eval_data "$TMP/ev/val.bin" &&
	grep -q "the training data by a.json" "$TMP/tok.out"
ok $? "(d) eval_data made by another tokenizer than the training data: refused, naming eval_data and both"
info ev a.json "$(printf 'a%.0s' $(seq 64))" 50257
refused tokv "eval_data $TMP/ev/val.bin: the shards were made by tokenizer a.json with a vocabulary of 50257" \
	--eval_data "$TMP/ev/val.bin"
ok $? "(d) eval_data of another vocabulary than the model's: refused, naming eval_data"
rm -f "$TMP/tr/tokenizer-info.json" "$TMP/ev/tokenizer-info.json"
"$BIN" run --help | grep -q -- "--eval_data PATH" && "$BIN" run --help | grep -q -- "--eval_interval N" &&
	"$BIN" run --help | grep -q -- "--eval_batches N"
ok $? "run --help lists --eval_data, --eval_interval and --eval_batches"

# (e) 2 ranks of micro batch 1 against 1 rank of micro batch 2: the same windows
ds r1 '{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}'
ds r2 '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}'
# 3 micro-batches, 2 side by side on each rank's 2 CPU workers: runs of 2 then 1
EV3="--eval_data $TMP/ev/val.bin --eval_batches 3"
(
	. "$SRC/tests/ranks_env.sh"
	"$BIN" run "$TMP/r1.json" $ARGS --steps 2 --ncpus 2 $EV3 --metrics "$TMP/r1.jsonl" >"$TMP/r1.out" 2>&1 &&
		timeout 300 "$MPIRUN_BIN" --oversubscribe --bind-to none -np 2 sh "$TMP/rank.sh" "$BIN" run \
			"$TMP/r2.json" $ARGS --steps 2 --ncpus 2 --dp_size 2 $EV3 --metrics "$TMP/r2.jsonl" \
			>"$TMP/r2.out" 2>&1
	echo "rc $?"
) >"$TMP/ranks.log" 2>&1
if grep -q "^1..0 # SKIP" "$TMP/ranks.log"; then
	ok 0 "# SKIP $(sed -n 's/^1..0 # SKIP //p' "$TMP/ranks.log")"
else
	grep -q "^rc 0" "$TMP/ranks.log" && [ "$(grep -c '^Eval at step' "$TMP/r2.out")" = 1 ] &&
		grep -q "2 micro-batches at a time" "$TMP/r2.out" &&
		"$PY" -c 'import json,sys; a,b=[[json.loads(l) for l in open(p) if "eval_loss" in l][-1] for p in sys.argv[1:]]; print("# 1 rank %r, 2 ranks %r" % (a["eval_loss"], b["eval_loss"])); sys.exit(not (a["eval_tokens"] == b["eval_tokens"] and abs(a["eval_loss"]-b["eval_loss"]) <= 1e-5*abs(a["eval_loss"])))' \
			"$TMP/r1.jsonl" "$TMP/r2.jsonl"
	ok $? "(e) ZeRO 3, 2 ranks of micro batch 1 (2 micro-batches side by side): the eval loss of 1 rank of micro batch 2 within 1e-5, printed once"
fi
