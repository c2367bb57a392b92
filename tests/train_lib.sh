# train_lib.sh - helpers of the training tests (sourced by test_train.sh,
# test_train_gpu.sh, test_moe.sh, test_gpt_oss.sh and test_interrupt.sh,
# which set SRC, BIN, PY and TMP first, and load tests/tap_lib.sh for ok:
# tests/test_env.sh does both): small DeepSpeed configs merged over a base,
# runs with their metrics, loss comparisons (tests/sglog.py), and refusals of
# broken model files. scripts/gpu_verify.sh uses ds and train alone.
# A DeepSpeed config: ds NAME JSON-FRAGMENT (merged over the base).
ds() {
	"$PY" - "$TMP/$1.json" "$2" <<'PYEOF'
import json, sys
base = {
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95],
                                              "weight_decay": 0.01}},
    "gradient_clipping": 1.0, "zero_optimization": {"stage": 0},
}
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            merge(a[k], v)
        else:
            a[k] = v
merge(base, json.loads(sys.argv[2]))
json.dump(base, open(sys.argv[1], "w"))
PYEOF
}
# train NAME DSNAME ARGS... : metrics in $TMP/NAME.jsonl, output in NAME.out/.err
# (SG_BATCH_TILE, when set, is the batch_tile of every run; ARGS may override it)
train() {
	name=$1 cfg=$2
	shift 2
	"$BIN" run "$TMP/$cfg.json" --max_length 32 --steps 4 ${SG_BATCH_TILE:+--batch_tile "$SG_BATCH_TILE"} \
		--metrics "$TMP/$name.jsonl" "$@" \
		>"$TMP/$name.out" 2>"$TMP/$name.err"
	echo $? >"$TMP/$name.rc"
}
tasks() { sed -n 's/.*graph \([0-9]*\) tasks.*/\1/p' "$TMP/$1.out"; }
# differs A B: the two runs compiled different graphs (so "same losses" is not vacuous)
differs() { [ -n "$(tasks "$1")" ] && [ -n "$(tasks "$2")" ] && [ "$(tasks "$1")" != "$(tasks "$2")" ]; }
losses() { "$PY" "$SRC/tests/sglog.py" losses "$TMP/$1.jsonl" 2>/dev/null; }
# losscmp A.jsonl B.jsonl RTOL SKIP: B's losses are A's from the (SKIP+1)-th
# on, as many, every one finite, equal (RTOL 0) or within RTOL relative
# (tests/sglog.py same). Fails with the first difference on stderr.
losscmp() {
	"$PY" "$SRC/tests/sglog.py" same "$1" "$2" --rtol "$3" --skip "$4"
}
# ck_run NAME CONFIG ARGS...: tiny-llama, 3 steps, with the caller's $SG
# options; metrics in $TMP/NAME.jsonl, checkpoint in $TMP/ck_NAME, one TAP line
ck_run() {
	name=$1 cfg=$2
	shift 2
	"$BIN" run "$cfg" --model tiny-llama --max_length 32 --steps 3 --log_interval 1 $SG \
		--metrics "$TMP/$name.jsonl" --save "$TMP/ck_$name" "$@" >"$TMP/$name.out" 2>&1
	ok $? "$name: stepgraph run $*"
}
# same_ck A B: the two ck_run runs' checkpoint files are byte-identical
same_ck() {
	a="$TMP/ck_$1/$(cat "$TMP/ck_$1/latest" 2>/dev/null)" b="$TMP/ck_$2/$(cat "$TMP/ck_$2/latest" 2>/dev/null)"
	[ -f "$a/state.safetensors" ] && cmp -s "$a/model.safetensors" "$b/model.safetensors" &&
		cmp -s "$a/state.safetensors" "$b/state.safetensors"
}
# same A B: the runs' losses are equal bit for bit and finite
same() { losscmp "$TMP/$2.jsonl" "$TMP/$1.jsonl" 0 0; }
# same_from A B K: B (a resumed run) has A's losses after A's first K steps
same_from() { losscmp "$TMP/$1.jsonl" "$TMP/$2.jsonl" 0 "$3"; }
# close A B RTOL: every loss of A within RTOL of B's (same number of steps, finite)
close() { losscmp "$TMP/$2.jsonl" "$TMP/$1.jsonl" "$3" 0; }
# falls NAME STEPS DROP: run NAME logged STEPS finite losses, and the mean of
# its last three is below the mean of its first three by more than DROP
falls() {
	"$PY" "$SRC/tests/sglog.py" learns "$TMP/$1.jsonl" --steps "$2" --window 3 --drop "$3"
}
# bad_model BASE NAME JSON-FRAGMENT EXPECTED DESCRIPTION: a copy of the model
# file BASE with the fragment merged (null removes a key) is refused by
# `stepgraph run` with EXPECTED in its message
bad_model() {
	"$PY" - "$1" "$TMP/$2.json" "$3" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
for k, v in json.loads(sys.argv[3]).items():
    if v is None:
        m.pop(k, None)
    else:
        m[k] = v
json.dump(m, open(sys.argv[2], "w"))
PYEOF
	train "$2" base --model "$TMP/$2.json"
	if [ "$(cat "$TMP/$2.rc")" -ne 0 ] && grep -q -- "$4" "$TMP/$2.err"; then
		ok 0 "$5"
	else
		ok 1 "$5"
		sed 's/^/# /' "$TMP/$2.err" | tail -3
	fi
}
