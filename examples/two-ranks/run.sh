#!/usr/bin/env bash
# Two data-parallel ranks under mpirun (docs/ranks.md): ZeRO-3 on CPU workers
# against one rank with the same global batch, then a checkpoint the two ranks
# save and one rank resumes (README.md). Exits 77 without mpirun.
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
command -v mpirun >/dev/null ||
	{ echo "example: no mpirun (scripts/setup.sh installs Open MPI)" >&2; exit 77; }
if "$STEPGRAPH" run --help | grep -q "This build has no MPI support"; then
	echo "example: this stepgraph was built without MPI support" >&2
	exit 77
fi
if ci; then steps=6; else steps=40; fi
half=$((steps / 2))
# Open MPI as root wants both confirmations; on a machine with few cores the
# ranks may share them (no binding, idle ranks yield)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 STARPU_WORKERS_NOBIND=1
mpi=(mpirun --oversubscribe --bind-to none -np 2)
# the default job (tiny-llama, sequence 256) with ZeRO 3; a global batch of 4
# sequences per step: 1 rank x micro 2 x accumulation 2, or 2 ranks x micro 1
common=(run "$REPO_ROOT/configs/default.json" --ncpus 1 --log_interval 1
	--set zero_optimization.stage=3 --set gradient_accumulation_steps=2)
rm -rf "$OUT/ckpt"

say "one rank, micro batch 2: $steps steps"
"$STEPGRAPH" "${common[@]}" --set train_micro_batch_size_per_gpu=2 --steps $steps \
	--metrics "$OUT/one-rank.jsonl"

say "two ranks, micro batch 1 each: $half steps, then a checkpoint"
"${mpi[@]}" "$STEPGRAPH" "${common[@]}" --dp_size 2 --set train_micro_batch_size_per_gpu=1 \
	--steps $half --save "$OUT/ckpt" --metrics "$OUT/two-ranks.jsonl"
ls "$OUT/ckpt/$(cat "$OUT/ckpt/latest")"

say "one rank resumes the two ranks' checkpoint (re-sharded): $((steps - half)) more steps"
"$STEPGRAPH" "${common[@]}" --set train_micro_batch_size_per_gpu=2 --steps $((steps - half)) \
	--load "$OUT/ckpt" --metrics "$OUT/resumed.jsonl"

"$PY" - "$OUT/one-rank.jsonl" "$OUT/two-ranks.jsonl" "$OUT/resumed.jsonl" <<'PYEOF'
import json, math, sys
one, two, res = ([json.loads(l) for l in open(f)] for f in sys.argv[1:])
print("step  one rank    two ranks / resumed")
worst = 0.0
for a, b in zip(one, two + res):
    assert a["step"] == b["step"] and math.isfinite(a["loss"]) and math.isfinite(b["loss"]), (a, b)
    worst = max(worst, abs(a["loss"] - b["loss"]) / abs(a["loss"]))
    print("%4d  %.6f    %.6f" % (a["step"], a["loss"], b["loss"]))
print("largest relative difference %.2g over %d steps" % (worst, len(one)))
# fp32 sums in another order (two ranks reduce their halves) drift apart
# slowly as training goes on: 4e-8 over 6 steps, 6e-8 over 40, 1.4e-4 by step 100 measured
sys.exit(0 if len(one) == len(two) + len(res) and worst <= 1e-4 else 1)
PYEOF
