#!/usr/bin/env bash
# bench_ranks.sh - tokens/s from 1 to 2 data-parallel ranks: `mpirun -np R
# stepgraph run` against PyTorch DistributedDataParallel and FSDP (gloo) on the
# same model, batches and optimizer (issue 14's benchmark).
#
#   scripts/bench_ranks.sh                       # ranks 1 and 2, 30 steps, ~6 min on 2 cores
#   RANKS=1,2 STEPS=40 WARMUP=5 ROUNDS=2 scripts/bench_ranks.sh
#
# Workload: the default job (configs/default.json: sequence 256, fp32 AdamW,
# WarmupLR, clipping 1.0) on MODEL (default tiny-llama; bench-3m is issue 12's
# benchmark model) with a global batch of GLOBAL (default 4) sequences per
# step: R ranks of MICRO (default 1) sequences per micro-step and
# GLOBAL / (R x MICRO) accumulation steps each. Every rank runs on a core of its own, one thread:
#   stepgraph  `mpirun --bind-to core -np R ./stepgraph run ... --ncpus 1`, ZeRO
#              stage 0 (all-reduce, what DDP does) and stage 3 (parameters,
#              gradients and optimizer state partitioned, what FSDP does)
#   peers      bench/torch_train_bench.py, R processes (torch.distributed's env://), --threads 1
#              --bind-rank: PyTorch 2.x from PyPI (the venv of
#              scripts/bench_venv.sh, never a dependency of stepgraph) with
#              DDP (no_sync on the micro-steps before the last) and FSDP2
#              (fully_shard per layer and root, gradient sync on the last
#              micro-step), and Debian's torch 1.13 with DDP (it has no FSDP2)
# Checks: every row's step-1 loss must equal stepgraph's 1-rank loss (same
# initial weights and the same global batches), else LOSS MISMATCH and exit 1.
# Prints a table (tokens/s of the best round, mean step ms) and, per rank
# count, stepgraph's best row / the faster of DDP and FSDP.
#
# Environment: RANKS (default 1,2), MODEL (tiny-llama), MICRO (1), GLOBAL (4), STEPS (30), WARMUP (5), ROUNDS
# (1), SYSTEM_PYTHON (/usr/bin/python3), and bench_venv.sh's BENCH_VENV,
# BENCH_OFFLINE, BENCH_NO_VENV. Needs a built tree (./stepgraph) with MPI
# support and Open MPI's mpirun.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
case "${1:-}" in
-h | --help)
	sg_usage
	exit 0
	;;
esac
cd "$REPO_ROOT"

RANKS=${RANKS:-1,2}
GLOBAL=${GLOBAL:-4}
MICRO=${MICRO:-1}
MODEL=${MODEL:-tiny-llama}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
ROUNDS=${ROUNDS:-1}
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
CONFIG=configs/default.json


[ -f "models/$MODEL.json" ] || die "MODEL: no models/$MODEL.json"
for v in GLOBAL MICRO STEPS WARMUP ROUNDS; do
	case "${!v}" in '' | *[!0-9]*) die "$v must be a non-negative integer (got '${!v}')" ;; esac
done
[ "$WARMUP" -lt "$STEPS" ] || die "WARMUP ($WARMUP) must be below STEPS ($STEPS)"
IFS=, read -r -a rank_list <<<"$RANKS"
for r in "${rank_list[@]}"; do
	case "$r" in '' | *[!0-9]*) die "RANKS: '$r' is not a rank count" ;; esac
	[ "$r" -ge 1 ] && [ "$MICRO" -ge 1 ] && [ $((GLOBAL % (r * MICRO))) -eq 0 ] ||
		die "RANKS: $r ranks x MICRO=$MICRO does not divide GLOBAL=$GLOBAL"
	[ "$r" -le "$(nproc)" ] || die "RANKS: $r ranks need $r cores (this machine has $(nproc)): a peer run oversubscribed is not a peer"
done
[ -x ./stepgraph ] || die "./stepgraph is not built (make stepgraph)"
command -v mpirun >/dev/null || die "no mpirun (apt-get install openmpi-bin, or scripts/setup.sh)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# shellcheck source=scripts/bench_venv.sh
. "$REPO_ROOT/scripts/bench_venv.sh"
bench_venv_setup || true
# the OpenBLAS peers (Debian's torch) get the kernels stepgraph chose
bench_blas_kernels ./stepgraph
PYPI_TORCH=n/a
[ -n "$BENCH_PY" ] && PYPI_TORCH=$("$BENCH_PY" -c 'import torch; print(torch.__version__.split("+")[0])')
DEB_TORCH=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || echo n/a)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2" | tail -n1; }
sg_tok() { sed -n 's/.*Throughput: \([0-9.]*\) tokens\/s.*/\1/p' "$1" | tail -n1; }
sg_mean() { sed -n 's/.*Step time: mean \([0-9.]*\) ms.*/\1/p' "$1" | tail -n1; }
sg_loss1() { sed -n 's/^Step 1 | Loss: \([0-9.]*\) .*/\1/p' "$1" | head -n1; }

# run_sg R STAGE ROUND -> $tmp/sg-R-STAGE.rROUND.out
run_sg() {
	local r=$1 st=$2 k=$3 out="$tmp/sg-$1-$2.r$3.out"
	say "round $k: stepgraph, $r rank(s), ZeRO-$st"
	mpirun --bind-to core --map-by core -np "$r" ./stepgraph run "$CONFIG" \
		--model "$MODEL" --dp_size "$r" --ncpus 1 --steps "$STEPS" --bench_steps "$STEPS" \
		--warmup_steps "$WARMUP" --log_interval 1 \
		--set "zero_optimization.stage=$st" \
		--set "train_micro_batch_size_per_gpu=$MICRO" \
		--set "gradient_accumulation_steps=$((GLOBAL / (r * MICRO)))" >"$out" 2>&1 ||
		{ say "stepgraph $r rank(s) ZeRO-$st failed:"; tail -n 5 "$out" >&2; }
}

# run_peer R KIND(pypi-ddp|pypi-fsdp|deb-ddp) ROUND -> $tmp/KIND-R.rROUND.out
run_peer() {
	local r=$1 kind=$2 k=$3 py out="$tmp/$2-$1.r$3.out"
	case "$kind" in
	pypi-*) py=$BENCH_PY ;;
	deb-*) py=$PY ;;
	esac
	[ -n "$py" ] && [ "$py" != n/a ] || return 0
	[ "$kind" != deb-ddp ] || [ "$DEB_TORCH" != n/a ] || return 0
	say "round $k: $kind, $r rank(s)"
	# the ranks started here with torch.distributed's env:// variables (Debian's
	# torchrun fails on Python 3.11); rank 0 prints the figures
	local port=$((29500 + RANDOM % 1000)) i pids=() rc=0
	for i in $(seq 0 $((r - 1))); do
		env -u OMP_NUM_THREADS RANK="$i" LOCAL_RANK="$i" WORLD_SIZE="$r" MASTER_ADDR=127.0.0.1 \
			MASTER_PORT="$port" "$py" bench/torch_train_bench.py --dist "${kind#*-}" --bind-rank \
			--threads 1 --steps "$STEPS" --warmup "$WARMUP" --seq 256 --micro-batch "$MICRO" \
			--accum "$((GLOBAL / (r * MICRO)))" --model "models/$MODEL.json" --seed 42 >"$out.$i" 2>"$out.err.$i" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || rc=1; done
	mv "$out.0" "$out"
	[ "$rc" = 0 ] || { say "$kind $r rank(s) failed (its row shows n/a):"; tail -n 5 "$out.err.0" >&2; rm -f "$out"; }
}

for k in $(seq 1 "$ROUNDS"); do
	for r in "${rank_list[@]}"; do
		run_sg "$r" 0 "$k"
		run_sg "$r" 3 "$k"
		run_peer "$r" pypi-ddp "$k"
		run_peer "$r" pypi-fsdp "$k"
		run_peer "$r" deb-ddp "$k"
	done
done

# best ROW-PREFIX -> "tokens/s mean_ms loss1" of the round with the most tokens/s
best() {
	local p=$1 f best_t="" line=""
	for f in "$tmp/$p".r*.out; do
		[ -s "$f" ] || continue
		local t m l
		case "$p" in
		sg-*) t=$(sg_tok "$f"); m=$(sg_mean "$f"); l=$(sg_loss1 "$f") ;;
		*) t=$(field tokens_per_s "$f"); m=$(field mean_step_ms "$f"); l=$(field first_loss "$f") ;;
		esac
		[ -n "$t" ] || continue
		if [ -z "$best_t" ] || awk -v a="$t" -v b="$best_t" 'BEGIN { exit !(a > b) }'; then
			best_t=$t
			line="$t $m $l"
		fi
	done
	echo "$line"
}

printf '\nbench_ranks: %s, %s, global batch %d x 256 tokens (micro-batch %d per rank), %d steps (%d warm-up), best of %d round(s); CPU: %s\n' \
	"$CONFIG" "$MODEL" "$GLOBAL" "$MICRO" "$STEPS" "$WARMUP" "$ROUNDS" \
	"$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n1)"
printf '%-6s %-36s %12s %12s %10s\n' ranks row tokens/s "mean ms" "step-1 loss"
ref_loss="" status=0 summary=()
for r in "${rank_list[@]}"; do
	sg_best="" peer_best="" peer_name=""
	for row in "sg-$r-0:stepgraph ZeRO-0" "sg-$r-3:stepgraph ZeRO-3" \
		"pypi-ddp-$r:torch $PYPI_TORCH (PyPI) DDP" \
		"pypi-fsdp-$r:torch $PYPI_TORCH (PyPI) FSDP2" \
		"deb-ddp-$r:torch $DEB_TORCH (Debian) DDP"; do
		key=${row%%:*} name=${row#*:}
		read -r t m l <<<"$(best "$key")" || true
		if [ -z "${t:-}" ]; then
			printf '%-6s %-36s %12s %12s %10s\n' "$r" "$name" n/a n/a n/a
			continue
		fi
		printf '%-6s %-36s %12.1f %12.2f %10s\n' "$r" "$name" "$t" "$m" "$l"
		[ -n "$ref_loss" ] || ref_loss=$l
		if [ "$l" != "$ref_loss" ]; then
			say "LOSS MISMATCH: $name with $r rank(s) starts at $l, stepgraph 1 rank at $ref_loss"
			status=1
		fi
		case "$key" in
		sg-*) awk -v a="$t" -v b="${sg_best:-0}" 'BEGIN { exit !(a > b) }' && sg_best=$t ;;
		*-ddp-* | *-fsdp-*)
			if awk -v a="$t" -v b="${peer_best:-0}" 'BEGIN { exit !(a > b) }'; then
				peer_best=$t
				peer_name=$name
			fi
			;;
		esac
	done
	if [ -n "$sg_best" ] && [ -n "$peer_best" ]; then
		summary+=("$(printf '%d rank(s): stepgraph best %.1f tokens/s / %s %.1f = %.2fx' "$r" \
			"$sg_best" "$peer_name" "$peer_best" "$(awk -v a="$sg_best" -v b="$peer_best" 'BEGIN { print a / b }')")")
	fi
done
echo
for s in "${summary[@]}"; do echo "$s"; done
echo "reproduce: RANKS=$RANKS MODEL=$MODEL MICRO=$MICRO GLOBAL=$GLOBAL STEPS=$STEPS WARMUP=$WARMUP ROUNDS=$ROUNDS scripts/bench_ranks.sh"
exit "$status"
