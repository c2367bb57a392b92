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
# head in chunks of 3 tokens (run option head_chunk_tokens).
# Prints TAP.
set -u
SRC=${SG_SRCDIR:-.}
BIN=${SG_BUILDDIR:-.}/stepgraph
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
if ! [ -x "$BIN" ] || ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
	echo "1..0 # SKIP needs $BIN and python3 with torch and numpy"
	exit 0
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sg_vs_torch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME="$TMP/starpu"
mkdir -p "$STARPU_HOME"
unset STARPU_SCHED STARPU_NCPU STARPU_NCPUS
export STARPU_NCUDA=0
n=0
ok() { # ok STATUS DESCRIPTION
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}
STEPS=5 LR=2e-3 B1=0.9 B2=0.95 EPS=1e-8 WD=0.1 CLIP=0.5

"$PY" "$SRC/tests/torch_train_ref.py" prepare "$TMP"
ok $? "python writes the model (odd sizes), its initial weights and the data"
cat >"$TMP/ds.json" <<EOF
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": $LR, "betas": [$B1, $B2], "eps": $EPS,
                                          "weight_decay": $WD}},
 "gradient_clipping": $CLIP, "zero_optimization": {"stage": 0}}
EOF
"$BIN" run "$TMP/ds.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
	--load "$TMP/init.safetensors" --steps $STEPS --ncpus 1 --metrics "$TMP/sg.jsonl" \
	>"$TMP/sg.out" 2>&1
rc=$?
ok $rc "stepgraph trains $STEPS steps from the python weights"
[ $rc -eq 0 ] || sed 's/^/# /' "$TMP/sg.out" | tail -5
"$PY" "$SRC/tests/torch_train_ref.py" train "$TMP" $STEPS $LR $B1 $B2 $EPS $WD $CLIP \
	>"$TMP/torch.txt" 2>"$TMP/torch.err"
ok $? "torch trains the same $STEPS steps"
# compare_torch METRICS LABEL: every loss within 1e-5 relative of PyTorch's
compare_torch() {
	"$PY" - "$1" "$TMP/torch.txt" <<'PYEOF'
import json, math, sys
sg = [json.loads(l)["loss"] for l in open(sys.argv[1])]
ref = [float(l) for l in open(sys.argv[2])]
assert len(sg) == len(ref) == 5, (sg, ref)
assert all(isinstance(x, float) and math.isfinite(x) for x in sg + ref), (sg, ref)
assert ref[-1] < ref[0] - 0.05, ("the reference does not learn: a vacuous check", ref)
for i, (a, b) in enumerate(zip(sg, ref)):
    print("# step %d: stepgraph %.9f torch %.9f rel %.1e" % (i + 1, a, b, abs(a - b) / abs(b)))
bad = [(i + 1, a, b) for i, (a, b) in enumerate(zip(sg, ref)) if abs(a - b) > 1e-5 * abs(b)]
assert not bad, bad
PYEOF
	ok $? "$2: every loss within 1e-5 relative of PyTorch's (AdamW, clipping, untied head, GQA 3:1)"
}
compare_torch "$TMP/sg.jsonl" "untiled"
# batch tiles: the micro-batch of 2 in two tiles of one sequence, on 2 CPU workers
"$BIN" run "$TMP/ds.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
	--load "$TMP/init.safetensors" --steps $STEPS --ncpus 2 --batch_tile 1 \
	--metrics "$TMP/sg_tiled.jsonl" >"$TMP/sg_tiled.out" 2>&1
rc=$?
ok $rc "stepgraph trains $STEPS steps in batch tiles of one sequence"
[ $rc -eq 0 ] || sed 's/^/# /' "$TMP/sg_tiled.out" | tail -5
compare_torch "$TMP/sg_tiled.jsonl" "batch tiles of 1 sequence"
# the loss head in chunks of 3 tokens (32 per micro-batch: 10 chunks of 3, one of 2)
"$BIN" run "$TMP/ds.json" --model "$TMP/model.json" --data "$TMP/data.bin" --max_length 16 \
	--load "$TMP/init.safetensors" --steps $STEPS --ncpus 1 --head_chunk_tokens 3 \
	--metrics "$TMP/sg_chunked.jsonl" >"$TMP/sg_chunked.out" 2>&1
rc=$?
ok $rc "stepgraph trains $STEPS steps with head_chunk_tokens 3"
[ $rc -eq 0 ] || sed 's/^/# /' "$TMP/sg_chunked.out" | tail -5
compare_torch "$TMP/sg_chunked.jsonl" "head in chunks of 3 tokens"
echo "1..$n"
