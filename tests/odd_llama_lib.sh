# odd_llama_lib.sh - what the end-to-end tests against PyTorch on the
# odd-sized Llama of tests/torch_train_ref.py share, sourced after set -u:
#   SG_TEST_NAME=NAME; . "${SG_SRCDIR:-.}/tests/odd_llama_lib.sh"
# tests/test_env.sh's set-up (and its skip), a skip without torch and numpy,
# TAP's ok, STEPS (5) and CLIP (0.5), the model, initial weights and data
# written into TMP (the first check), and:
#   run CONFIG NAME [OPTS...]   stepgraph trains STEPS steps of TMP/CONFIG.json
#                               from the initial weights: TMP/NAME.jsonl
#   torch NAME SPEC LR BETA1 BETA2 EPS WD
#                               the reference (SG_REF_OPTIMIZER=SPEC):
#                               TMP/torch_NAME.txt
#   same NAME REF               every loss of NAME within 1e-5 relative of
#                               torch_REF's, both finite, the reference learning
#   differs NAME REF            not so (controls)
. "${SG_SRCDIR:-.}/tests/test_env.sh"
unset SG_REF_OPTIMIZER
if ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
	skip_all "needs python3 with torch and numpy"
fi
STEPS=5
CLIP=0.5

"$PY" "$SRC/tests/torch_train_ref.py" prepare "$TMP"
ok $? "python writes the model (odd sizes), its initial weights and the data"

run() {
	_c=$1 _name=$2
	shift 2
	"$BIN" run "$TMP/$_c.json" --model "$TMP/model.json" --data "$TMP/data.bin" \
		--max_length 16 --load "$TMP/init.safetensors" --steps $STEPS \
		--metrics "$TMP/$_name.jsonl" "$@" >"$TMP/$_name.out" 2>&1
	_rc=$?
	[ $_rc -eq 0 ] || sed 's/^/# /' "$TMP/$_name.out" | tail -5
	return $_rc
}
torch() {
	_name=$1 _spec=$2
	shift 2
	SG_REF_OPTIMIZER=$_spec "$PY" "$SRC/tests/torch_train_ref.py" train "$TMP" $STEPS "$@" $CLIP \
		>"$TMP/torch_$_name.txt" 2>"$TMP/torch_$_name.err"
}
same() {
	"$PY" "$SRC/tests/compare_losses.py" "$TMP/$1.jsonl" "$TMP/torch_$2.txt" --steps $STEPS \
		--rel 1e-5 --learns 0.05 --per-step
}
differs() {
	! "$PY" "$SRC/tests/compare_losses.py" "$TMP/$1.jsonl" "$TMP/torch_$2.txt" --steps $STEPS \
		--rel 1e-5 --learns 0.05 >/dev/null 2>&1
}
