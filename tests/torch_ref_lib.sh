# torch_ref_lib.sh - sourced by the tests that train one of
# tests/torch_train_ref.py's models (odd sizes) with stepgraph and with
# PyTorch from the same initial weights on the same batch: test_train_vs_torch,
# test_moe, test_gpt_oss. Needs SRC, BIN and PY set.
#
#   ref_config DIR              DIR/ds.json: AdamW and clipping with REF_HYPER
#   ref_run DIR NAME [OPTS...]  stepgraph trains REF_STEPS steps from
#                               DIR/init.safetensors on DIR/data.bin, metrics
#                               in DIR/NAME.jsonl; its status (on failure its
#                               output's tail as TAP comments)
#   ref_torch DIR               PyTorch trains the same steps: DIR/torch.txt
#   ref_compare DIR NAME        every loss of NAME within 1e-5 relative of
#                               PyTorch's, finite, and the reference learns
REF_STEPS=5
# lr, beta1, beta2, eps, weight decay, clipping: in torch_train_ref.py's order
REF_HYPER="2e-3 0.9 0.95 1e-8 0.1 0.5"

ref_config() {
	set -- "$1" $REF_HYPER
	cat >"$1/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": $2, "betas": [$3, $4], "eps": $5,
                                          "weight_decay": $6}},
 "gradient_clipping": $7, "zero_optimization": {"stage": 0}}
JSON
}

ref_run() {
	_d=$1 _name=$2
	shift 2
	"$BIN" run "$_d/ds.json" --model "$_d/model.json" --data "$_d/data.bin" --max_length 16 \
		--load "$_d/init.safetensors" --steps $REF_STEPS --metrics "$_d/$_name.jsonl" "$@" \
		>"$_d/$_name.out" 2>&1
	_rc=$?
	[ $_rc -eq 0 ] || sed 's/^/# /' "$_d/$_name.out" | tail -5
	return $_rc
}

ref_torch() {
	# shellcheck disable=SC2086 # the hyper-parameters are separate words
	"$PY" "$SRC/tests/torch_train_ref.py" train "$1" $REF_STEPS $REF_HYPER \
		>"$1/torch.txt" 2>"$1/torch.err"
}

ref_compare() {
	"$PY" "$SRC/tests/compare_losses.py" "$1/$2.jsonl" "$1/torch.txt" --steps $REF_STEPS \
		--rel 1e-5 --learns 0.05 --per-step
}
