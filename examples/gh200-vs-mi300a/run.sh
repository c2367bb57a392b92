#!/usr/bin/env bash
# stepgraph tune: GH200 against MI300A for a SuperOffload step (README.md).
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
if ci; then sched=dmda,dmdas ratios=0.5,0.9; else sched=lws,dmda,dmdas ratios=0.25,0.5,0.75,0.9; fi
"$STEPGRAPH" tune "$REPO_ROOT/configs/llama-3.1-8b-superoffload.json" --model llama-3.2-3b \
	--machines gh200,mi300a --sched $sched --vary offload_optimizer.ratio=$ratios \
	--priorities on --out "$OUT/tune"
echo "wrote $OUT/tune.md, $OUT/tune.csv, $OUT/tune.svg"
