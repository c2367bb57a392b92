#!/usr/bin/env bash
# bench_ranks.sh - tokens/s from 1 to 2 data-parallel ranks, each rank on its
# own core (docs/ranks.md), against PyTorch DistributedDataParallel and FSDP
# (fully_shard) on the gloo backend: the same model, sequence, micro batch
# per rank, AdamW and clipping, one thread per rank.
#
#   scripts/bench_ranks.sh            # bench-3m, seq 256, micro batch 4, 30 steps
#
# Rows: stepgraph ZeRO 0 (DDP's partitioning) and ZeRO 3 (FSDP's) with 1 and
# 2 ranks (`mpirun --bind-to core`, one CPU worker each); PyTorch with 1
# process, DDP and FSDP with 2 (torchrun --standalone, torch.set_num_threads(1)).
# Each row's tokens/s counts every rank's tokens over the steps after the
# warm-up; the last column is the row's ratio to the faster PyTorch row with
# as many ranks. PyTorch 2.x comes from scripts/bench_venv.sh (never a
# dependency of stepgraph); without it the PyTorch rows show n/a.
#
# Rounds: every row runs ROUNDS times, the rows interleaved, and the best of
# its rounds is reported (other jobs on a shared machine only slow a run).
#
# Environment: MODEL (bench-3m), SEQ (256), MICRO (4), STEPS (30), WARMUP (5),
# ROUNDS (3), BUILD (the build directory, default the repository root).
set -euo pipefail
case "${1:-}" in
-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$REPO_ROOT}
BIN=$BUILD/stepgraph
MODEL=${MODEL:-bench-3m}
SEQ=${SEQ:-256}
MICRO=${MICRO:-4}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-3}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sg_bench_ranks.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
say() { printf 'bench_ranks: %s\n' "$*" >&2; }

command -v mpirun >/dev/null || { say "no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 2; }
[ -x "$BIN" ] || { say "no $BIN: build first"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export STEPGRAPH_MODELS_DIR=${STEPGRAPH_MODELS_DIR:-$REPO_ROOT/models} STARPU_NCUDA=0
export STARPU_HOME="$TMP/starpu"

# shellcheck source=scripts/bench_venv.sh
. "$REPO_ROOT/scripts/bench_venv.sh"
bench_venv_setup || true
TORCH_PY=${BENCH_PY:-}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
say "$cpu, $(nproc) cores; $MODEL, sequence $SEQ, micro batch $MICRO per rank, $STEPS steps ($WARMUP warm-up), best of $ROUNDS rounds"

sg_run() { # sg_run STAGE NP: tokens/s
	cat >"$TMP/ds$1.json" <<JEOF
{"train_micro_batch_size_per_gpu": $MICRO, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.01}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": $1}}
JEOF
	mpirun --bind-to core -np "$2" "$BIN" run "$TMP/ds$1.json" --model "$MODEL" --dp_size "$2" \
		--max_length "$SEQ" --steps "$STEPS" --warmup_steps "$WARMUP" --ncpus 1 >"$TMP/sg.out" 2>&1 ||
		{ say "stepgraph failed:"; cat "$TMP/sg.out" >&2; exit 1; }
	sed -n 's/.*Throughput: \([0-9.]*\) tokens\/s.*/\1/p' "$TMP/sg.out"
}
torch_run() { # torch_run none|ddp|fsdp NP: tokens/s (n/a without torch 2.x)
	[ -n "$TORCH_PY" ] || { echo n/a; return; }
	local args=(--threads 1 --steps "$STEPS" --warmup "$WARMUP" --model "$REPO_ROOT/models/$MODEL.json"
		--seq "$SEQ" --micro-batch "$MICRO" --dist "$1")
	if [ "$2" = 1 ]; then
		taskset -c 0 "$TORCH_PY" "$REPO_ROOT/tests/torch_train_bench.py" "${args[@]}" >"$TMP/t.out" 2>"$TMP/t.err"
	else
		OMP_NUM_THREADS=1 "$TORCH_PY" -m torch.distributed.run --standalone --nproc_per_node "$2" \
			"$REPO_ROOT/tests/torch_train_bench.py" "${args[@]}" >"$TMP/t.out" 2>"$TMP/t.err"
	fi || { say "torch ($1) failed:"; tail -5 "$TMP/t.err" >&2; echo n/a; return; }
	sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' "$TMP/t.out"
}

best() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || a == "n/a") print b; else if (b == "n/a" || a + 0 >= b + 0) print a; else print b }'; }
t1= ddp= fsdp= s01= s02= s31= s32=
for r in $(seq "$ROUNDS"); do
	t1=$(best "$t1" "$(torch_run none 1)")
	ddp=$(best "$ddp" "$(torch_run ddp 2)")
	fsdp=$(best "$fsdp" "$(torch_run fsdp 2)")
	s01=$(best "$s01" "$(sg_run 0 1)")
	s02=$(best "$s02" "$(sg_run 0 2)")
	s31=$(best "$s31" "$(sg_run 3 1)")
	s32=$(best "$s32" "$(sg_run 3 2)")
	say "round $r of $ROUNDS done"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "n/a" || b + 0 == 0) print "n/a"; else printf "%.2fx", a / b }'; }
best2=$(best "$ddp" "$fsdp")
printf '| run | ranks | tokens/s | vs the faster PyTorch with as many ranks |\n|---|---|---|---|\n'
printf '| PyTorch, 1 process | 1 | %s | |\n' "$t1"
printf '| PyTorch DDP (gloo) | 2 | %s | |\n' "$ddp"
printf '| PyTorch FSDP fully_shard (gloo) | 2 | %s | |\n' "$fsdp"
printf '| stepgraph ZeRO 0 | 1 | %s | %s |\n' "$s01" "$(ratio "$s01" "$t1")"
printf '| stepgraph ZeRO 0 | 2 | %s | %s |\n' "$s02" "$(ratio "$s02" "$best2")"
printf '| stepgraph ZeRO 3 | 1 | %s | %s |\n' "$s31" "$(ratio "$s31" "$t1")"
printf '| stepgraph ZeRO 3 | 2 | %s | %s |\n' "$s32" "$(ratio "$s32" "$best2")"
printf 'scaling 1 -> 2 ranks: stepgraph ZeRO 0 %s, ZeRO 3 %s; PyTorch DDP %s, FSDP %s\n' \
	"$(ratio "$s02" "$s01")" "$(ratio "$s32" "$s31")" "$(ratio "$ddp" "$t1")" "$(ratio "$fsdp" "$t1")"
