#!/usr/bin/env bash
# bench_sim_fidelity.sh - how well `stepgraph simulate` predicts a real step on
# this machine: calibrate, then per StarPU policy measure the real step and
# simulate it on the calibrated model, and print the error.
#
#   scripts/bench_sim_fidelity.sh
#   SCHEDS=eager,lws,dmda,dmdas STEPS=40 ROUNDS=3 CONFIG=configs/default.json scripts/bench_sim_fidelity.sh
#
# 1. `stepgraph calibrate CONFIG --steps CAL_STEPS` (default 60) writes a machine
#    model and StarPU's history models for this host into a scratch directory.
# 2. For each policy in SCHEDS (default eager,lws,dmda,dmdas), ROUNDS times
#    (default 3, interleaved): `stepgraph run CONFIG --steps STEPS --sched P`
#    (default 40 steps, the first 10 excluded) with StarPU reading the same
#    models (so dmda/dmdas schedule with calibrated estimates, as the simulation
#    does), and its mean step time; the median over rounds is the measurement.
# 3. `stepgraph simulate CONFIG --machine <calibrated> --sched P`: the prediction.
# error = (predicted - measured) / measured.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${BIN:-./stepgraph}
CONFIG=${CONFIG:-configs/default.json}
SCHEDS=${SCHEDS:-eager,lws,dmda,dmdas}
STEPS=${STEPS:-40}
CAL_STEPS=${CAL_STEPS:-60}
ROUNDS=${ROUNDS:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/sg-fidelity.XXXXXX")
trap 'rm -rf "$work"' EXIT
name=fidelity-host
echo "calibrating ($CAL_STEPS steps of $CONFIG)..." >&2
"$BIN" calibrate "$CONFIG" --name "$name" --out "$work" --steps "$CAL_STEPS" >"$work/cal.log" 2>&1 ||
	{ cat "$work/cal.log" >&2; exit 1; }
machine="$work/$name.json"
export STARPU_PERF_MODEL_DIR="$work/$name.sampling" STARPU_HOSTNAME="$name"
declare -A runs
IFS=, read -r -a scheds <<<"$SCHEDS"
for r in $(seq "$ROUNDS"); do
	for s in "${scheds[@]}"; do
		echo "round $r: run $s..." >&2
		ms=$("$BIN" run "$CONFIG" --steps "$STEPS" --warmup_steps 10 --sched "$s" 2>&1 |
			awk '/Step time: mean/ {print $4}')
		runs[$s]="${runs[$s]:-} $ms"
	done
done
unset STARPU_PERF_MODEL_DIR STARPU_HOSTNAME
printf '| policy | measured step (ms, median of %s) | rounds | simulated (ms) | error |\n' "$ROUNDS"
printf '|---|---:|---|---:|---:|\n'
for s in "${scheds[@]}"; do
	sim=$("$BIN" simulate "$CONFIG" --machine "$machine" --sched "$s" 2>/dev/null |
		awk '/Step time/ {print $3}')
	med=$(tr ' ' '\n' <<<"${runs[$s]}" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	err=$(awk -v p="$sim" -v m="$med" 'BEGIN {printf "%+.1f%%", 100 * (p - m) / m}')
	printf '| %s | %s | %s | %s | %s |\n' "$s" "$med" "$(echo ${runs[$s]} | tr ' ' ',')" "$sim" "$err"
done
echo
echo "reproduce: SCHEDS=$SCHEDS STEPS=$STEPS CAL_STEPS=$CAL_STEPS ROUNDS=$ROUNDS CONFIG=$CONFIG scripts/bench_sim_fidelity.sh"
