#!/usr/bin/env bash
# check_hf_export.sh - a checkpoint stepgraph saves is a model transformers
# loads: from_pretrained reads a step directory (config.json + weights, one
# file and sharded) and its loss on a known batch equals stepgraph's loss of
# the same weights on the same batch.
#
#   scripts/check_hf_export.sh            # tiny-llama and tiny-qwen3
#   MODELS=tiny-llama scripts/check_hf_export.sh
#
# transformers, torch and safetensors come from PyPI into the virtual
# environment of the benchmarks, ~/.cache/stepgraph/venv-bench (created on
# the first run; STEPGRAPH_HF_VENV picks another; never a dependency of
# stepgraph itself). Needs the built ./stepgraph. Prints one
# line per model and layout, and exits 1 when a loss differs by more than
# 1e-5 relative or transformers cannot load the directory, 2 when the
# environment cannot be set up (no network: nothing is claimed).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
VENV=${STEPGRAPH_HF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/stepgraph/venv-bench}
MODELS=${MODELS:-tiny-llama,tiny-qwen3}
BIN=$REPO_ROOT/stepgraph
case "${1:-}" in -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ -x "$BIN" ] || { say "build stepgraph first (./stepgraph missing)"; exit 2; }

if ! [ -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import transformers, torch, safetensors' 2>/dev/null; then
	say "setting up $VENV (torch, transformers, safetensors from PyPI)"
	[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" ||
		{ say "python3 -m venv failed (apt-get install python3-venv)"; exit 2; }
	"$VENV/bin/python" -c 'import torch' 2>/dev/null || "$VENV/bin/pip" install -q torch ||
		{ say "cannot install torch from PyPI"; exit 2; }
	"$VENV/bin/pip" install -q transformers safetensors numpy || { say "cannot install transformers"; exit 2; }
fi
PY=$VENV/bin/python
"$PY" -c 'import transformers, torch; print("transformers", transformers.__version__, "torch", torch.__version__)'

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sg_hfx.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME=$TMP/starpu STARPU_NCUDA=0
B=2 T=16
# B windows of T tokens: the batch of every step is those windows
"$PY" - "$TMP/data.bin" $B $T <<'PYEOF'
import sys, numpy as np
path, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
toks = np.random.default_rng(7).integers(0, 256, B * T + 1).astype("<u2")
hdr = np.zeros(256, dtype="<i4"); hdr[0], hdr[1], hdr[2] = 20240520, 1, B * T + 1
open(path, "wb").write(hdr.tobytes() + toks.tobytes())
PYEOF
cat >"$TMP/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": $B, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}, "zero_optimization": {"stage": 0}}
JSON
fail=0
IFS=, read -r -a models <<<"$MODELS"
for m in "${models[@]}"; do
	for shard in 0 200000; do
		ck=$TMP/ck-$m-$shard
		"$BIN" run "$TMP/ds.json" --model "$m" --data "$TMP/data.bin" --max_length $T --steps 2 \
			--save "$ck" --save_shard_size $shard >/dev/null 2>"$TMP/err" ||
			{ say "$m: stepgraph run failed: $(tail -1 "$TMP/err")"; fail=1; continue; }
		step=$ck/$(cat "$ck/latest")
		"$BIN" run "$TMP/ds.json" --model "$m" --data "$TMP/data.bin" --max_length $T --steps 1 \
			--load "$step/config.json" --metrics "$TMP/m.jsonl" >/dev/null 2>"$TMP/err" ||
			{ say "$m: stepgraph run --load failed: $(tail -1 "$TMP/err")"; fail=1; continue; }
		"$PY" - "$step" "$TMP/data.bin" "$TMP/m.jsonl" $B $T "$m" "$shard" <<'PYEOF' || fail=1
import json, sys, numpy as np, torch
from transformers import AutoModelForCausalLM
d, data, metrics, B, T, name, shard = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float64, attn_implementation="eager")
toks = np.frombuffer(open(data, "rb").read()[1024:], dtype="<u2").astype(np.int64)
x = torch.from_numpy(np.stack([toks[i * T:i * T + T] for i in range(B)]))
y = torch.from_numpy(np.stack([toks[i * T + 1:i * T + T + 1] for i in range(B)]))
with torch.no_grad():
    logits = model(input_ids=x).logits
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
sg = json.loads(open(metrics).readline())["loss"]
rel = abs(sg - loss) / abs(loss)
layout = "one file" if shard == "0" else "shards of %s bytes" % shard
ok = rel <= 1e-5 and np.isfinite(loss)
print("%-11s %-22s transformers %.8f  stepgraph %.8f  rel %.1e  %s" % (name, layout, loss, sg, rel, "ok" if ok else "DIFFERS"))
sys.exit(0 if ok else 1)
PYEOF
	done
done
exit $fail
