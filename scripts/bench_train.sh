#!/usr/bin/env bash
# bench_train.sh - `stepgraph run` against the same training step in PyTorch on
# the same cores. Two modes:
#
# MODE=bench-3m (the benchmark of issue 12): models/bench-3m.json (3.3M
# parameters, hidden 256, 4 layers, untied head), sequence 256, global batch 8
# split as 8 x 1 and as 2 x 4 (configs/bench-3m.json with
# configs/deepspeed/bench-3m-8x1.json and bench-3m-2x4.json), fp32 AdamW,
# against the best PyTorch a user would run:
#
#   MODE=bench-3m scripts/bench_train.sh                 # both splits, ~15 min on 2 cores
#   MODE=bench-3m SPLITS=2x4 STEPS=30 ROUNDS=2 scripts/bench_train.sh
#   MODE=bench-3m DTYPE=bf16 scripts/bench_train.sh      # bf16 mixed precision
#
#   DTYPE   fp32 (default) or bf16: stepgraph with "bf16": {"enabled": true}
#           in the split's DeepSpeed config (bf16 parameters and activations,
#           fp32 master weights and Adam; on a CPU with AMX-BF16 its products
#           take bf16 operands on the tile unit, codelets/cpu/gemm.h), every
#           peer with --bf16 (torch.autocast("cpu", torch.bfloat16): PyTorch's
#           bf16 products, oneDNN's AMX kernels where the CPU has them). The
#           GEMM-bound line (sgemm) is printed for fp32 only.
#
#   peers   {PyTorch 2.x from PyPI, Debian's torch 1.13} x PEER_THREADS (default
#           1,2, capped at nproc) x {eager, torch.compile (PyPI only)}, each with
#           its BLAS (OpenBLAS / MKL) on as many threads and, for more than one
#           thread, also on 1 (torch's own pool keeping T); PyTorch 2.x uses
#           scaled dot-product attention (is_causal), torch 1.13 the
#           matmul-softmax attention (it has no SDPA). The PyPI torch lives in
#           ~/.cache/stepgraph/venv-bench, created or reused by
#           scripts/bench_venv.sh (never a dependency of stepgraph itself;
#           BENCH_OFFLINE=1 installs nothing, without PyPI its rows are absent).
#           Peers run one process at a time, never more threads than cores.
#   stepgraph  each policy of SCHEDS (default lws,dmdas), fresh and calibrated
#           (see below), on THREADS CPU workers (default nproc).
#   checks  every row's step-1 loss must match stepgraph's (same initial
#           weights and batches, bench/torch_train_bench.py), else the script
#           fails after the tables (LOSS MISMATCH).
#   prints  per split a table (tokens/s, mean / median / rounds ms, others),
#           the best peer by name and stepgraph's best policy / the best peer;
#           then a summary and the command that reproduces the run.
#   defaults STEPS=20 WARMUP=5 ROUNDS=1 (torch.compile's build falls in the
#           warm-up steps); CONFIG=configs/bench-3m.json (its model,
#           max_length and seed; the split sets the DeepSpeed config).
#
# MODE=default (the default): the default job (configs/default.json: tiny-llama,
# sequence 256, 4 micro-steps of 1 sequence, fp32, AdamW, clipping 1.0) against
# Debian's torch, with StarPU's own cost per task to put the step time in
# context:
#
#   scripts/bench_train.sh                          # lws and dmdas, nproc workers, 40 steps
#   SCHEDS=eager,lws,dmda,dmdas scripts/bench_train.sh
#   STEPS=60 WARMUP=10 THREADS=2 ROUNDS=3 scripts/bench_train.sh
#
# For each StarPU policy in SCHEDS (default lws,dmdas), stepgraph runs STEPS steps
# (default 40), the first WARMUP (default 5) left out of the figures, on
# THREADS CPU workers (default nproc, no GPU) twice with one fresh STARPU_HOME:
# "fresh" (the performance models calibrate during the run) and "calibrated"
# (a second run on the models the first one wrote). bench/torch_train_bench.py
# trains the same model from the same initial weights on the same batches
# (the losses match stepgraph's) with torch.set_num_threads(THREADS), twice:
# with the system OpenBLAS on THREADS threads (what set_num_threads alone gives
# with Debian's torch) and on 1 thread (as stepgraph runs its BLAS: one thread
# per task). bench/bench_task_overhead measures StarPU's wall time per task
# (empty, dependency chain, independent writes) for each policy; the overhead
# share is tasks per step x the largest of the three / the calibrated mean step.
#
# All of it is done ROUNDS times (default 2), the rounds interleaved, and each
# row shows its best round (highest tokens/s) with the range of the rounds'
# mean step times: on a shared machine one round can be much slower. The
# "others" column is the share of the CPUs that other processes (or the
# hypervisor, as steal) took during that run; contention on the host that the
# guest does not see as steal shows only as a wide range.
#
# Environment: MODE, STEPS, WARMUP, THREADS, SCHEDS, ROUNDS, CONFIG,
# SYSTEM_PYTHON; MODE=default: NTASKS; MODE=bench-3m: SPLITS (default 8x1,2x4),
# PEER_THREADS (default 1,2), DTYPE (default fp32) and scripts/bench_venv.sh's BENCH_VENV,
# BENCH_OFFLINE, BENCH_NO_VENV, TORCH_INDEX_URL.
# Builds only through `make bench/bench_task_overhead stepgraph` (the tree must
# be configured). $SYSTEM_PYTHON (default /usr/bin/python3, Debian's
# python3-torch) runs the Debian torch side; without torch its rows show n/a.
# STARPU_SCHED is ignored here (SCHEDS picks the policy); STARPU_SILENT
# defaults to 0 so that StarPU's calibration messages can be counted.
# MODE=default: about 70 s with the defaults on 2 cores, 30 s more per extra policy.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sg_env_only_args "$@"
MODE=${MODE:-default}
case "$MODE" in
default)
	STEPS=${STEPS:-40}
	ROUNDS=${ROUNDS:-2}
	CONFIG=${CONFIG:-$REPO_ROOT/configs/default.json}
	;;
bench-3m)
	STEPS=${STEPS:-20}
	ROUNDS=${ROUNDS:-1}
	CONFIG=${CONFIG:-$REPO_ROOT/configs/bench-3m.json}
	SPLITS=${SPLITS:-8x1,2x4}
	PEER_THREADS=${PEER_THREADS:-1,2}
	DTYPE=${DTYPE:-fp32}
	case "$DTYPE" in
	fp32 | bf16) ;;
	*)
		printf 'bench_train: DTYPE must be fp32 or bf16 (got %s)\n' "$DTYPE" >&2
		exit 2
		;;
	esac
	;;
*)
	printf 'bench_train: MODE must be default or bench-3m (got %s)\n' "$MODE" >&2
	exit 2
	;;
esac
WARMUP=${WARMUP:-5}
THREADS=${THREADS:-$(nproc 2>/dev/null || echo 2)}
SCHEDS=${SCHEDS:-lws,dmdas}
NTASKS=${NTASKS:-20000}
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
[ -f "$CONFIG" ] || { printf 'bench_train: CONFIG %s: no such file\n' "$CONFIG" >&2; exit 2; }
CONFIG=$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")


for v in STEPS WARMUP THREADS ROUNDS NTASKS; do
	case "${!v}" in '' | *[!0-9]*) die "$v must be a non-negative integer (got '${!v}')" ;; esac
done
[ "$WARMUP" -lt "$STEPS" ] || die "WARMUP ($WARMUP) must be below STEPS ($STEPS)"
if [ "$THREADS" -lt 1 ] || [ "$ROUNDS" -lt 1 ] || [ "$NTASKS" -lt 1 ]; then
	die "THREADS, ROUNDS and NTASKS must be >= 1"
fi
IFS=, read -r -a sched_list <<<"$SCHEDS"
[ "${#sched_list[@]}" -ge 1 ] || die "SCHEDS is empty"

NCPU=$(nproc 2>/dev/null || echo 1)
cpu_name=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //')
if [ "$MODE" = bench-3m ]; then
	IFS=, read -r -a _pt <<<"$PEER_THREADS"
	[ "${#_pt[@]}" -ge 1 ] || die "PEER_THREADS is empty"
	_keep=""
	for t in "${_pt[@]}"; do
		case "$t" in '' | *[!0-9]* | 0) die "PEER_THREADS must list thread counts >= 1 (got '$PEER_THREADS')" ;; esac
		if [ "$t" -gt "$NCPU" ]; then
			say "PEER_THREADS: $t > $NCPU CPUs left out (a peer never oversubscribes the cores)"
		else
			_keep="$_keep${_keep:+,}$t"
		fi
	done
	[ -n "$_keep" ] || die "PEER_THREADS: no thread count <= $NCPU"
	PEER_THREADS=$_keep
	case "$SPLITS" in '' | *[!0-9x,]*) die "SPLITS must be a comma list such as 8x1,2x4 (got '$SPLITS')" ;; esac
	REPRODUCE=$(printf 'reproduce: MODE=bench-3m DTYPE=%s SPLITS=%s STEPS=%s WARMUP=%s THREADS=%s PEER_THREADS=%s SCHEDS=%s ROUNDS=%s scripts/bench_train.sh   (on %s, %s CPUs: %s)' \
		"$DTYPE" "$SPLITS" "$STEPS" "$WARMUP" "$THREADS" "$PEER_THREADS" "$SCHEDS" "$ROUNDS" "$(uname -m)" "$NCPU" "${cpu_name:-?}")
else
	REPRODUCE=$(printf 'reproduce: STEPS=%s WARMUP=%s THREADS=%s SCHEDS=%s ROUNDS=%s NTASKS=%s scripts/bench_train.sh   (on %s, %s CPUs: %s)' \
		"$STEPS" "$WARMUP" "$THREADS" "$SCHEDS" "$ROUNDS" "$NTASKS" "$(uname -m)" "$NCPU" "${cpu_name:-?}")
fi
printf '%s\n\n' "$REPRODUCE"

cd "$REPO_ROOT"
[ -f Makefile ] || die "no Makefile in $REPO_ROOT: configure first (scripts/quickstart.sh)"
if [ -f .deps-build/env.sh ]; then
	# shellcheck disable=SC1091
	. .deps-build/env.sh
fi
say "make bench/bench_task_overhead bench/bench_sgemm stepgraph"
make -s bench/bench_task_overhead bench/bench_sgemm stepgraph >&2
# shellcheck source=scripts/bench_venv.sh
. "$REPO_ROOT/scripts/bench_venv.sh"
# the OpenBLAS peers (Debian's torch) get the kernels stepgraph chose
bench_blas_kernels ./stepgraph

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${STARPU_SCHED:-}" ]; then
	say "ignoring STARPU_SCHED=$STARPU_SCHED (SCHEDS picks the policy)"
fi
export STARPU_SILENT=${STARPU_SILENT:-0}

# ---- helpers -------------------------------------------------------------------

# field KEY FILE: the value of KEY=VALUE on the machine-readable line of FILE
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2" | tail -n1; }
# summary_field WHAT FILE: mean step ms (mean) or tokens/s (tok) from stepgraph's summary
summary_field() {
	case "$1" in
	mean) sed -n 's/.*Step time: mean \([0-9.]*\) ms.*/\1/p' "$2" ;;
	tok) sed -n 's/.*Throughput: \([0-9.]*\) tokens\/s.*/\1/p' "$2" ;;
	esac
}

# jsonl_stats FILE: "median_ms first_loss last_loss" over the steps after WARMUP
jsonl_stats() {
	awk -v w="$WARMUP" '
		match($0, /"step":[0-9]+/) { s = substr($0, RSTART + 7, RLENGTH - 7) + 0 }
		match($0, /"loss":[-0-9.eE+]+/) { l = substr($0, RSTART + 7, RLENGTH - 7) }
		match($0, /"time_ms":[-0-9.eE+]+/) { t = substr($0, RSTART + 10, RLENGTH - 10) + 0 }
		{ if (NR == 1) first = l; last = l; if (s > w) ts[n++] = t }
		END {
			for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (ts[j] < ts[i]) { x = ts[i]; ts[i] = ts[j]; ts[j] = x }
			printf "%.2f %.4f %.4f\n", n ? ts[int(n / 2)] : 0, first, last
		}' "$1"
}

# Other load on the machine: `mark KEY.0` before and `mark KEY.1` after a run,
# then `others KEY` is the share of all CPUs that neither the run nor this
# script used meanwhile (/proc/stat's busy time less our children's CPU time,
# plus hypervisor steal).
TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
mark() {
	times >"$tmp/times.$1"
	awk -v t="$TCK" '/^cpu / { printf "%.3f %.3f\n", ($2 + $3 + $4 + $7 + $8) / t, $9 / t }' \
		/proc/stat >"$tmp/stat.$1"
	date +%s.%N >"$tmp/wall.$1"
}
children_s() {
	awk 'NR == 2 { split($1, a, /[ms]/); split($2, b, /[ms]/); print a[1] * 60 + a[2] + b[1] * 60 + b[2] }' "$1"
}
others() {
	local b0 s0 b1 s1
	read -r b0 s0 <"$tmp/stat.$1.0"
	read -r b1 s1 <"$tmp/stat.$1.1"
	awk -v b="$b1" -v bb="$b0" -v st="$s1" -v st0="$s0" -v c="$(children_s "$tmp/times.$1.1")" \
		-v c0="$(children_s "$tmp/times.$1.0")" -v w="$(cat "$tmp/wall.$1.1")" \
		-v w0="$(cat "$tmp/wall.$1.0")" -v n="$NCPU" 'BEGIN {
			o = (b - bb) - (c - c0) + (st - st0); if (o < 0) o = 0
			printf "%.0f", 100 * o / ((w - w0) * n) }'
}

# best KEY KIND: the round of KEY with the highest tokens/s; KIND torch or sg
best() {
	local r b="" bt=-1 t
	for ((r = 1; r <= ROUNDS; r++)); do
		if [ "$2" = torch ]; then t=$(field tokens_per_s "$tmp/$1.r$r.out"); else t=$(summary_field tok "$tmp/$1.r$r.out"); fi
		[ -n "$t" ] || continue # a failed run
		if awk -v a="$t" -v b="$bt" 'BEGIN { exit !(a > b) }'; then
			b=$r
			bt=$t
		fi
	done
	echo "$b"
}
# spread KEY KIND: "min..max" of the rounds' mean step ms
spread() {
	local r
	for ((r = 1; r <= ROUNDS; r++)); do
		if [ "$2" = torch ]; then field mean_step_ms "$tmp/$1.r$r.out"; else summary_field mean "$tmp/$1.r$r.out"; fi
	done | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f..%.0f", lo, hi }'
}
# worst_others KEY: the highest "others" share over the rounds of KEY
worst_others() {
	local r
	for ((r = 1; r <= ROUNDS; r++)); do cat "$tmp/$1.r$r.others"; echo; done |
		sort -n | tail -n1
}

# ---- MODE=bench-3m: the issue-12 target, stepgraph against the best PyTorch -------------

# cfg_get FILE KEY: a top-level value of a JSON file (empty when absent)
cfg_get() {
	"$JSON_PY" -c 'import json, sys
v = json.load(open(sys.argv[1])).get(sys.argv[2])
print("" if v is None else v)' "$1" "$2"
}

# peer_label VARIANT (src:threads:mode)
peer_label() {
	local src t m b blas
	IFS=: read -r src t m b <<<"$1"
	blas=""
	[ "$b" = blas1 ] && blas=", BLAS 1"
	if [ "$src" = deb ]; then
		printf 'torch %s (Debian), %s thread(s)%s, %s' "$DEB_TORCH" "$t" "$blas" "$m"
	else
		printf 'torch %s (PyPI), %s thread(s)%s, %s' "$PYPI_TORCH" "$t" "$blas" "$m"
	fi
}

run_peer() { # SPLIT VARIANT ROUND
	local sp=$1 v=$2 r=$3 src t m b py key
	IFS=: read -r src t m b <<<"$v"
	key="$sp-peer-$src-$t-$m${b:+-$b}"
	# BLAS threads: by default torch_train_bench.py sizes every pool to --threads;
	# blas1 keeps torch's intra-op pool at T and the BLAS (OpenBLAS / MKL) on one thread
	local blasenv=(-u OPENBLAS_NUM_THREADS -u MKL_NUM_THREADS)
	[ "$b" = blas1 ] && blasenv=(OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1)
	if [ "$src" = deb ]; then py=$PY; else py=$BENCH_PY; fi
	local extra=()
	[ "$m" = compile ] && extra=(--compile)
	[ "$DTYPE" = bf16 ] && extra+=(--bf16)
	say "round $r, split $sp: $(peer_label "$v"), $STEPS steps"
	mark "$key.r$r.0"
	# torch_train_bench.py sizes the BLAS/OpenMP pools to --threads before importing torch
	env -u OMP_NUM_THREADS "${blasenv[@]}" "$py" bench/torch_train_bench.py \
		--model "$MODEL_FILE" --seq "$SEQ" --micro-batch "${MB[$sp]}" --accum "${GA[$sp]}" \
		--threads "$t" --steps "$STEPS" --warmup "$WARMUP" --seed "$SEED" "${extra[@]}" \
		>"$tmp/$key.r$r.out" 2>"$tmp/$key.r$r.err" || {
		say "$(peer_label "$v") failed (its row shows n/a):"
		tail -n 5 "$tmp/$key.r$r.err" >&2
	}
	mark "$key.r$r.1"
	others "$key.r$r" >"$tmp/$key.r$r.others"
}

bench3m_main() {
	local sp s v r
	IFS=, read -r -a split_list <<<"$SPLITS"
	declare -gA MB GA
	for sp in "${split_list[@]}"; do
		local ds="$REPO_ROOT/configs/deepspeed/bench-3m-$sp.json"
		[ -f "$ds" ] || die "split $sp: no $ds (SPLITS takes 8x1 and 2x4)"
		MB[$sp]=$(cfg_get "$ds" train_micro_batch_size_per_gpu)
		GA[$sp]=$(cfg_get "$ds" gradient_accumulation_steps)
		# the run config with this split's DeepSpeed config (bf16 enabled for DTYPE=bf16)
		"$JSON_PY" -c 'import json, sys
c = json.load(open(sys.argv[1])); d = json.load(open(sys.argv[2]))
if sys.argv[4] == "bf16":
    d["bf16"] = {"enabled": True}
c["deepspeed_config"] = d
json.dump(c, open(sys.argv[3], "w"), indent=1)' "$CONFIG" "$ds" "$tmp/run-$sp.json" "$DTYPE"
	done
	SEQ=$(cfg_get "$CONFIG" max_length)
	SEED=$(cfg_get "$CONFIG" seed)
	SEED=${SEED:-42}
	local model
	model=$(cfg_get "$CONFIG" model)
	MODEL_FILE="$REPO_ROOT/models/$model.json"
	[ -f "$MODEL_FILE" ] || MODEL_FILE=$model
	[ -f "$MODEL_FILE" ] || die "model '$model' of $CONFIG: no models/$model.json"

	# the peers: {Debian torch, PyPI torch} x PEER_THREADS x {eager, compile (PyPI only)}
	local peers=() pt
	IFS=, read -r -a pt <<<"$PEER_THREADS"
	DEB_TORCH=n/a PYPI_TORCH=n/a
	if "$PY" -c 'import torch, numpy' 2>/dev/null; then
		DEB_TORCH=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
		for t in "${pt[@]}"; do
			peers+=("deb:$t:eager")
			if [ "$t" -gt 1 ]; then peers+=("deb:$t:eager:blas1"); fi
		done
	else
		say "no torch (or numpy) in $PY: no Debian torch rows"
	fi
	if [ -n "$BENCH_PY" ]; then
		PYPI_TORCH=$("$BENCH_PY" -c 'import torch; print(torch.__version__.split("+")[0])')
		for t in "${pt[@]}"; do
			peers+=("pypi:$t:eager" "pypi:$t:compile")
			if [ "$t" -gt 1 ]; then peers+=("pypi:$t:eager:blas1" "pypi:$t:compile:blas1"); fi
		done
	else
		say "no PyPI torch 2.x (see bench_venv above): no PyPI torch rows"
	fi

	for ((r = 1; r <= ROUNDS; r++)); do
		for sp in "${split_list[@]}"; do
			for v in "${peers[@]}"; do run_peer "$sp" "$v" "$r"; done
			for s in "${sched_list[@]}"; do
				CONFIG="$tmp/run-$sp.json" run_sg "$s" fresh "$r" "$sp-"
				CONFIG="$tmp/run-$sp.json" run_sg "$s" calibrated "$r" "$sp-"
			done
		done
	done

	# ---- tables, one per split
	local worst=0 bad_loss=0 summary=()
	for sp in "${split_list[@]}"; do
		local g=$((MB[$sp] * GA[$sp]))
		local prec="fp32 AdamW"
		[ "$DTYPE" = bf16 ] && prec="bf16 mixed precision (fp32 AdamW)"
		printf '\nsplit %s: %s, %s micro-batch(es) of %s x %s tokens (global batch %s), %s, %s steps, the first %s left out\n' \
			"$sp" "$(basename "$MODEL_FILE" .json)" "${GA[$sp]}" "${MB[$sp]}" "$SEQ" "$g" "$prec" "$STEPS" "$WARMUP"
		printf '  each row: the best of %s round(s) (highest tokens/s); "rounds ms": the range of the rounds'"'"' mean step times\n' "$ROUNDS"
		printf '  %-52s %10s %9s %10s %11s %7s %9s %s\n' "configuration" "tokens/s" "mean ms" "median ms" \
			"rounds ms" "others" "loss 1" "note"
		local best_peer="" best_peer_tok=0 best_sg="" best_sg_tok=0 sg_l1="" key b o tok wo note
		# stepgraph's step-1 loss (round 1 of the first policy) is the reference of the loss check
		sg_l1=$(jsonl_stats "$tmp/$sp-sg-${sched_list[0]}-fresh.r1.jsonl" | awk '{ print $2 }')
		for v in "${peers[@]}"; do
			IFS=: read -r src t m bl <<<"$v"
			key="$sp-peer-$src-$t-$m${bl:+-$bl}"
			b=$(best "$key" torch)
			if [ -z "$b" ]; then
				printf '  %-52s %10s\n' "$(peer_label "$v")" "n/a (failed)"
				continue
			fi
			o="$tmp/$key.r$b.out"
			tok=$(field tokens_per_s "$o")
			wo=$(worst_others "$key")
			[ "$wo" -gt "$worst" ] && worst=$wo
			note=""
			[ "$m" = compile ] && [ "$(field compile "$o")" != yes ] && note="torch.compile failed: eager"
			local l1
			l1=$(field first_loss "$o")
			if ! awk -v a="$l1" -v b="$sg_l1" 'BEGIN { d = a - b; if (d < 0) d = -d
				exit !(a == a + 0 && b == b + 0 && d <= 2e-3 && a > 0 && a < 1e30) }'; then
				note="$note LOSS MISMATCH with stepgraph's $sg_l1"
				bad_loss=1
			fi
			printf '  %-52s %10.1f %9.2f %10.2f %11s %6s%% %9s %s\n' "$(peer_label "$v")" "$tok" \
				"$(field mean_step_ms "$o")" "$(field median_step_ms "$o")" "$(spread "$key" torch)" \
				"$wo" "$l1" "$note"
			if awk -v a="$tok" -v b="$best_peer_tok" 'BEGIN { exit !(a > b) }'; then
				best_peer_tok=$tok
				best_peer=$(peer_label "$v")
			fi
		done
		for s in "${sched_list[@]}"; do
			for run in fresh calibrated; do
				key="$sp-sg-$s-$run"
				b=$(best "$key" sg)
				o="$tmp/$key.r$b.out"
				tok=$(summary_field tok "$o")
				read -r med l0 _ < <(jsonl_stats "$tmp/$key.r$b.jsonl")
				wo=$(worst_others "$key")
				[ "$wo" -gt "$worst" ] && worst=$wo
				note=""
				if ! awk -v a="$l0" -v b="$sg_l1" 'BEGIN { d = a - b; if (d < 0) d = -d
					exit !(a == a + 0 && d <= 2e-3 && a > 0 && a < 1e30) }'; then
					note="LOSS MISMATCH with $sg_l1"
					bad_loss=1
				fi
				printf '  %-52s %10.1f %9.2f %10.2f %11s %6s%% %9s %s\n' \
					"stepgraph, sched $s, $run, $THREADS worker(s)" "$tok" \
					"$(summary_field mean "$o")" "$med" "$(spread "$key" sg)" "$wo" "$l0" "$note"
				if awk -v a="$tok" -v b="$best_sg_tok" 'BEGIN { exit !(a > b) }'; then
					best_sg_tok=$tok
					best_sg="sched $s, $run"
				fi
			done
		done
		if [ -n "$best_peer" ]; then
			local x
			x=$(awk -v a="$best_sg_tok" -v b="$best_peer_tok" 'BEGIN { printf "%.2f", a / b }')
			printf '  best peer: %s, %.1f tokens/s; stepgraph (%s) %.1f tokens/s: %sx the best peer\n' \
				"$best_peer" "$best_peer_tok" "$best_sg" "$best_sg_tok" "$x"
			[ "$DTYPE" = fp32 ] && gemm_context "$sp" "$best_sg_tok" "$best_peer_tok"
			summary+=("$(printf '  %-5s stepgraph %9.1f tokens/s (%s)  best peer %9.1f tokens/s (%s)  stepgraph / best peer %sx' \
				"$sp" "$best_sg_tok" "$best_sg" "$best_peer_tok" "$best_peer" "$x")")
		else
			printf '  no peer measured: stepgraph (%s) %.1f tokens/s, ratio n/a\n' "$best_sg" "$best_sg_tok"
			summary+=("$(printf '  %-5s stepgraph %9.1f tokens/s (%s)  best peer n/a' "$sp" "$best_sg_tok" "$best_sg")")
		fi
	done
	printf '\nsummary (each split: stepgraph'"'"'s best policy against the fastest peer measured in this run)\n'
	printf '%s\n' "${summary[@]}"
	printf '  (others: the largest share of the %s CPUs that other processes or the hypervisor took during a round of that row)\n' "$NCPU"
	if [ "$worst" -ge 10 ]; then
		printf '  WARNING: up to %s%% of the machine went to other work during a run: those figures are skewed\n' "$worst"
	fi
	printf '\n%s\n' "$REPRODUCE"
	if [ "$bad_loss" = 1 ]; then
		die "a step-1 loss differs from stepgraph's: the runs do not train the same thing (rows marked LOSS MISMATCH)"
	fi
}


# gemm_context SPLIT STEPGRAPH_TOK PEER_TOK: the FLOP rates against the
# machine's GEMM bound (THREADS cores x one core's sgemm on the step's MLP
# product, bench/bench_sgemm): how far any implementation could go
gemm_context() {
	local sum flops tokens gf
	sum=$(./stepgraph graph "$tmp/run-$1.json" --summary 2>/dev/null)
	flops=$(awk '/^FLOPs:/ { u = $3; print $2 * (u == "TFLOP" ? 1e12 : u == "GFLOP" ? 1e9 : u == "MFLOP" ? 1e6 : 1) }' <<<"$sum")
	tokens=$(sed -n 's/.*micro-batch \([0-9]*\) x \([0-9]*\) accumulation, seq \([0-9]*\).*/\1 \2 \3/p' <<<"$sum" |
		awk '{ print $1 * $2 * $3 }')
	local kern
	gf=$(OPENBLAS_NUM_THREADS=1 ./bench/bench_sgemm $((8 * 256)) 688 256 2 2>"$tmp/sgemm.err" | awk '{ print $5 }')
	kern=$(sed -n 's/.*kernels \([A-Za-z0-9]*\).*/\1/p' "$tmp/sgemm.err")
	[ -n "$flops" ] && [ -n "$tokens" ] && [ -n "$gf" ] || return 0
	awk -v f="$flops" -v t="$tokens" -v g="$gf" -v k="${kern:-?}" -v n="$THREADS" -v a="$2" -v b="$3" 'BEGIN {
		bound = g * n; sg = a * f / t / 1e9; pe = b * f / t / 1e9
		printf "  GEMM bound: %.2f GFLOP per step of %d tokens; one core'"'"'s sgemm (OpenBLAS kernels %s) %.1f GFLOP/s, %.1f on %d cores; stepgraph %.1f GFLOP/s (%.0f%% of it), best peer %.1f (%.0f%%); 1.5x the best peer would be %.1f (%.0f%%)\n", f / 1e9, t, k, g, bound, n, sg, 100 * sg / bound, pe, 100 * pe / bound, 1.5 * pe, 150 * pe / bound
	}'
}

# ---- the runs, ROUNDS times ------------------------------------------------------

torch_ok=0
T_VARIANTS="blasN"
[ "$THREADS" -gt 1 ] && T_VARIANTS="blasN blas1 passive"
if "$PY" -c 'import torch, numpy' 2>/dev/null; then
	torch_ok=1
else
	say "no torch (or numpy) in $PY: the torch columns show n/a"
fi

run_torch() { # VARIANT ROUND
	local v=$1 r=$2 ob=$THREADS key="torch-$1" wait=ACTIVE
	[ "$v" = blas1 ] && ob=1
	[ "$v" = passive ] && ob=1 && wait=PASSIVE
	say "round $r: torch, $STEPS steps, set_num_threads($THREADS), OpenBLAS $ob thread(s)"
	mark "$key.r$r.0"
	env -u OMP_NUM_THREADS OPENBLAS_NUM_THREADS="$ob" OMP_WAIT_POLICY="$wait" "$PY" bench/torch_train_bench.py \
		--threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" \
		>"$tmp/$key.r$r.out" 2>"$tmp/$key.r$r.err" ||
		{ cat "$tmp/$key.r$r.err" >&2; die "bench/torch_train_bench.py failed"; }
	mark "$key.r$r.1"
	others "$key.r$r" >"$tmp/$key.r$r.others"
}

run_sg() { # SCHED RUN ROUND [KEY-PREFIX] (RUN fresh starts a new STARPU_HOME)
	local s=$1 run=$2 r=$3 pre=${4:-}
	local key="${pre}sg-$1-$2" home="$tmp/starpu-home-$pre$s-r$r"
	[ "$run" = fresh ] && rm -rf "$home" && mkdir -p "$home"
	say "round $r: stepgraph run, sched $s, $run, $STEPS steps on $THREADS CPU worker(s)"
	mark "$key.r$r.0"
	if ! env -u STARPU_SCHED STARPU_HOME="$home" ./stepgraph run "$CONFIG" \
		--steps "$STEPS" --warmup_steps "$WARMUP" --ncpus "$THREADS" --ncuda 0 \
		--sched "$s" --metrics "$tmp/$key.r$r.jsonl" \
		>"$tmp/$key.r$r.out" 2>"$tmp/$key.r$r.err"; then
		cat "$tmp/$key.r$r.out" "$tmp/$key.r$r.err" >&2
		die "stepgraph run failed (sched $s)"
	fi
	mark "$key.r$r.1"
	others "$key.r$r" >"$tmp/$key.r$r.others"
}

if [ "$MODE" = bench-3m ]; then
	JSON_PY=$PY
	"$JSON_PY" -c 'import json' 2>/dev/null || JSON_PY=python3
	bench_venv_setup
	bench3m_main
	exit 0
fi

for ((r = 1; r <= ROUNDS; r++)); do
	if [ "$torch_ok" = 1 ]; then
		for v in $T_VARIANTS; do run_torch "$v" "$r"; done
	fi
	for s in "${sched_list[@]}"; do
		run_sg "$s" fresh "$r"
		run_sg "$s" calibrated "$r"
	done
done

for s in "${sched_list[@]}"; do
	say "bench_task_overhead: sched $s, $THREADS CPU worker(s), $NTASKS tasks"
	mkdir -p "$tmp/starpu-home-ovh-$s"
	env -u STARPU_SCHED STARPU_HOME="$tmp/starpu-home-ovh-$s" STARPU_SILENT=1 \
		bench/bench_task_overhead --sched "$s" --ncpus "$THREADS" --ntasks "$NTASKS" \
		>"$tmp/ovh-$s.out" 2>"$tmp/ovh-$s.err" ||
		{ cat "$tmp/ovh-$s.out" "$tmp/ovh-$s.err" >&2; die "bench/bench_task_overhead failed"; }
done

# ---- tables --------------------------------------------------------------------------

first="$tmp/sg-${sched_list[0]}-fresh.r1.out"
sed -n '1p' "$first"
printf '  %s %s steps, the first %s left out of the figures; %s CPU worker(s) / threads;\n' \
	"$(sed -n 's/.*\(graph [0-9]* tasks, [0-9]* dependencies per step\).*/\1;/p' "$first")" \
	"$STEPS" "$WARMUP" "$THREADS"
printf '  each row: the best of %s round(s) (highest tokens/s); "rounds ms": the range of the rounds'"'"' mean step times\n\n' \
	"$ROUNDS"

declare -A TTOK
worst=0
note_others() { [ "$1" -gt "$worst" ] && worst=$1; return 0; }

if [ "$torch_ok" = 1 ]; then
	b=$(best torch-blasN torch)
	printf 'PyTorch %s, same model, weights, batches, AdamW(foreach=True) and clipping; %s attention\n' \
		"$(field torch "$tmp/torch-blasN.r$b.out")" "$(field attention "$tmp/torch-blasN.r$b.out")"
	printf '  %-44s %10s %9s %10s %11s %7s\n' "configuration" "tokens/s" "mean ms" "median ms" \
		"rounds ms" "others"
	for v in $T_VARIANTS; do
		ob=$THREADS label=""
		[ "$v" = blas1 ] && ob=1
		[ "$v" = passive ] && ob=1 && label=", OMP_WAIT_POLICY=PASSIVE"
		b=$(best "torch-$v" torch)
		o="$tmp/torch-$v.r$b.out"
		TTOK[$v]=$(field tokens_per_s "$o")
		wo=$(worst_others "torch-$v")
		note_others "$wo"
		printf '  %-44s %10.1f %9.2f %10.2f %11s %6s%%\n' "set_num_threads($THREADS), OpenBLAS $ob$label" \
			"${TTOK[$v]}" "$(field mean_step_ms "$o")" "$(field median_step_ms "$o")" \
			"$(spread "torch-$v" torch)" "$wo"
	done
	printf '  loss step 1 -> %s: %s -> %s\n\n' "$STEPS" "$(field first_loss "$o")" "$(field last_loss "$o")"
fi

best_torch() { local m="" v; for v in "${!TTOK[@]}"; do
	m=$(awk -v a="${TTOK[$v]}" -v b="$m" 'BEGIN { print (b == "" || a > b) ? a : b }'); done; echo "$m"; }
ratio() { if [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; else echo n/a; fi; }
printf 'stepgraph run (x torch: stepgraph tokens/s / torch tokens/s with set_num_threads alone, x best: against the fastest torch row;\n'
printf '               overhead: tasks per step x the largest us/task of the policy / the calibrated mean step)\n'
printf '  %-6s %-10s %10s %9s %10s %11s %8s %8s %6s %8s %9s %7s  %s\n' sched run tokens/s "mean ms" \
	"median ms" "rounds ms" "x torch" "x best" tasks "us/task" overhead others "loss 1 -> last"
for s in "${sched_list[@]}"; do
	ovh="$tmp/ovh-$s.out"
	us=$(awk -v a="$(field empty_us "$ovh")" -v b="$(field chain_us "$ovh")" -v c="$(field indep_us "$ovh")" \
		'BEGIN { m = a; if (b > m) m = b; if (c > m) m = c; printf "%.2f", m }')
	bc=$(best "sg-$s-calibrated" sg)
	cal_mean=$(summary_field mean "$tmp/sg-$s-calibrated.r$bc.out")
	for run in fresh calibrated; do
		key="sg-$s-$run"
		b=$(best "$key" sg)
		out="$tmp/$key.r$b.out"
		tok=$(summary_field tok "$out")
		tasks=$(sed -n 's/.*graph \([0-9]*\) tasks.*/\1/p' "$out")
		read -r med l0 l1 < <(jsonl_stats "$tmp/$key.r$b.jsonl")
		share=$(awk -v n="$tasks" -v u="$us" -v m="$cal_mean" 'BEGIN { printf "%.3f%%", 100 * n * u / 1000 / m }')
		wo=$(worst_others "$key")
		note_others "$wo"
		printf '  %-6s %-10s %10.1f %9.2f %10.2f %11s %8s %8s %6s %8s %9s %6s%%  %s -> %s\n' "$s" "$run" \
			"$tok" "$(summary_field mean "$out")" "$med" "$(spread "$key" sg)" \
			"$(ratio "$tok" "${TTOK[blasN]:-}")" "$(ratio "$tok" "$(best_torch)")" "$tasks" "$us" \
			"$share" "$wo" "$l0" "$l1"
	done
done
printf '  (others: the largest share of the %s CPUs that other processes or the hypervisor took during a round of that row)\n' "$NCPU"
if [ "$worst" -ge 10 ]; then
	printf '  WARNING: up to %s%% of the machine went to other work during a run: those figures are skewed\n' "$worst"
fi

printf '\nStarPU cost per task (bench/bench_task_overhead, %s CPU workers: %s tasks a round, median of 3 rounds;\n' \
	"$THREADS" "$NTASKS"
printf '  submitted like runtime/exec/exec.c: history model, profiling, callback, name, priority)\n'
printf '  %-6s %10s %10s %10s\n' sched "empty us" "chain us" "indep us"
for s in "${sched_list[@]}"; do
	ovh="$tmp/ovh-$s.out"
	printf '  %-6s %10s %10s %10s\n' "$s" "$(field empty_us "$ovh")" "$(field chain_us "$ovh")" \
		"$(field indep_us "$ovh")"
done

# StarPU's messages (STARPU_SILENT=0), round 1: counted by kind, anything else shown.
known='not calibrated enough|Too big deviation|check_bus_config_file'
printf '\nStarPU messages on stderr in round 1 (STARPU_SILENT=%s)\n' "$STARPU_SILENT"
for s in "${sched_list[@]}"; do
	for run in fresh calibrated; do
		err="$tmp/sg-$s-$run.r1.err"
		forced=$(grep -c 'not calibrated enough' "$err" || true)
		flushed=$(grep -c 'Too big deviation' "$err" || true)
		other=$(grep -Ev "$known" "$err" | grep -c . || true)
		printf '  %-6s %-10s %3s x "not calibrated enough, forcing calibration", %3s x "too big deviation, flushing", %3s other\n' \
			"$s" "$run" "$forced" "$flushed" "$other"
		{ grep -o -e 'model [a-z_0-9]* is not calibrated enough' \
			-e 'Too big deviation for model [a-z_0-9]*' "$err" || true; } | sort | uniq -c |
			sed 's/^ */      /'
		{ grep -Ev "$known" "$err" || true; } | sort | uniq -c | sort -rn | head -n 5 |
			sed 's/^ */      /'
	done
done
