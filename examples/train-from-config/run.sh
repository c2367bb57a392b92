#!/usr/bin/env bash
# The default job, then ZeRO-3 SuperOffload on the CPU; metrics plotted (README.md).
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
if ci; then steps=8 so_steps=4 len=64; else steps=200 so_steps=60 len=128; fi

say "the default job: configs/default.json"
"$STEPGRAPH" run "$REPO_ROOT/configs/default.json" --steps $steps --warmup_steps 2 \
	--metrics "$OUT/default.jsonl"

say "ZeRO-3 + SuperOffload: configs/deepspeed/superoffload.json on tiny-llama"
"$STEPGRAPH" run "$REPO_ROOT/configs/deepspeed/superoffload.json" --model tiny-llama \
	--max_length $len --steps $so_steps --log_interval 5 --metrics "$OUT/superoffload.jsonl" \
	--set zero_optimization.sub_group_size=150000 --set optimizer.params.lr=1e-3 --speculation adaptive

"$PY" "$REPO_ROOT/scripts/plot_metrics.py" "$OUT/default.jsonl" "$OUT/superoffload.jsonl" \
	-o "$OUT/metrics.svg" --title "tiny-llama: default job and ZeRO-3 SuperOffload (CPU workers)"
echo "wrote $OUT/metrics.svg"
