#!/bin/sh
# test_train_vs_torch.sh - whole-model training against PyTorch: 5 AdamW
# steps (gradient clipping on) of a Llama model with odd sizes (hidden 72,
# 3 heads of 24, 1 KV head, intermediate 100, vocab 97, 2 layers, untied
# head) from the same initial weights (written by python, loaded with
# `--load FILE.safetensors`) on the same batch; the reference is
# tests/torch_train_ref.py: the forward written from the Llama formulas in
# float64, and torch's own cross-entropy, backward, clip_grad_norm_ and
# torch.optim.AdamW. Every loss within 1e-5 relative, and finite; untiled,
# in batch tiles of one sequence (run option batch_tile), and with the loss
# head in chunks of 3 tokens (run option head_chunk_tokens); and Adam without
# bias correction.
# Prints TAP.
set -u
SG_TEST_NAME=vs_torch
. "${SG_SRCDIR:-.}/tests/test_env.sh"
if ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
	skip_all "needs $BIN and python3 with torch and numpy"
fi
. "$SRC/tests/torch_ref_lib.sh"

"$PY" "$SRC/tests/torch_train_ref.py" prepare "$TMP"
ok $? "python writes the model (odd sizes), its initial weights and the data"
ref_config "$TMP"
ref_run "$TMP" sg --ncpus 1
ok $? "stepgraph trains $REF_STEPS steps from the python weights"
ref_torch "$TMP"
ok $? "torch trains the same $REF_STEPS steps"
# compare_torch NAME LABEL: every loss within 1e-5 relative of PyTorch's
compare_torch() {
	ref_compare "$TMP" "$1"
	ok $? "$2: every loss within 1e-5 relative of PyTorch's (AdamW, clipping, untied head, GQA 3:1)"
}
compare_torch sg "untiled"
# batch tiles: the micro-batch of 2 in two tiles of one sequence, on 2 CPU workers
ref_run "$TMP" sg_tiled --ncpus 2 --batch_tile 1
ok $? "stepgraph trains $REF_STEPS steps in batch tiles of one sequence"
compare_torch sg_tiled "batch tiles of 1 sequence"
# the loss head in chunks of 3 tokens (32 per micro-batch: 10 chunks of 3, one of 2)
ref_run "$TMP" sg_chunked --ncpus 1 --head_chunk_tokens 3
ok $? "stepgraph trains $REF_STEPS steps with head_chunk_tokens 3"
compare_torch sg_chunked "head in chunks of 3 tokens"
# Adam without bias correction (optimizer.params.bias_correction false):
# p -= lr m / (sqrt(v) + eps), plus the decoupled decay lr wd p. torch's AdamW
# always corrects; it takes the same step given, for update t, lr_t = lr
# (1 - b1^t) / sqrt(1 - b2^t), eps_t = eps / sqrt(1 - b2^t) and wd_t = wd lr
# / lr_t (its step: lr_t / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps_t))
"$PY" - "$TMP/ds.json" "$TMP/nobc.json" "$TMP/nobc.txt" $REF_STEPS <<'PYEOF'
import json, math, sys
cfg = json.load(open(sys.argv[1]))
cfg["optimizer"]["params"]["bias_correction"] = False
json.dump(cfg, open(sys.argv[2], "w"))
p = cfg["optimizer"]["params"]
lr, (b1, b2), eps, wd = p["lr"], p["betas"], p["eps"], p["weight_decay"]
with open(sys.argv[3], "w") as f:
    for t in range(1, int(sys.argv[4]) + 1):
        c1, c2 = 1 - b1 ** t, math.sqrt(1 - b2 ** t)
        lr_t = lr * c1 / c2
        f.write("%r %r %r %r %r\n" % (lr_t, b1, b2, eps / c2, wd * lr / lr_t))
PYEOF
"$BIN" run "$TMP/nobc.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
	--load "$TMP/init.safetensors" --steps $REF_STEPS --ncpus 1 --metrics "$TMP/nobc.jsonl" \
	>"$TMP/nobc.out" 2>&1 &&
	"$PY" "$SRC/tests/torch_train_ref.py" train "$TMP" $REF_STEPS $REF_HYPER "$TMP/nobc.txt" \
		>"$TMP/torch_nobc.txt" 2>"$TMP/torch_nobc.err" &&
	"$PY" "$SRC/tests/compare_losses.py" "$TMP/nobc.jsonl" "$TMP/torch_nobc.txt" --steps $REF_STEPS \
		--rel 1e-5 --learns 0.05 --per-step
ok $? "bias_correction false: every loss within 1e-5 relative of PyTorch's (AdamW given the equivalent lr, eps and decay)"
# control: the corrected run (the default) must not match that reference
! "$PY" "$SRC/tests/compare_losses.py" "$TMP/sg.jsonl" "$TMP/torch_nobc.txt" --steps $REF_STEPS \
	--rel 1e-5 --per-step >/dev/null 2>&1
ok $? "control: the run with bias correction does not match the uncorrected reference"
done_testing
