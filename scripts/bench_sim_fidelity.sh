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
# 3. `stepgraph simulate CONFIG --machine <calibrated> --sched P`: the prediction
#    from the history (in-sample: the same task sizes ran in the calibration),
#    and with `--cost fitted` (the per-kind fit of that history).
# 4. Out-of-sample: for each variant in OOS (';'-separated extra options on
#    CONFIG, default: another sequence length, a larger micro-batch, another
#    model, ZeRO-3 with the optimizer offloaded), the same measurement and
#    `simulate --cost fitted` on the machine calibrated on CONFIG alone. The
#    runs use a copy of the calibration's models, so what they record never
#    reaches the calibrated machine.
# error = (predicted - measured) / measured.
#
# Environment: CONFIG, SCHEDS, STEPS, CAL_STEPS, ROUNDS, OOS (above), BIN (the
# stepgraph binary, default the repository root's ./stepgraph), TMPDIR (where
# the scratch directory goes). Takes no arguments; --help prints this.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
[ $# -eq 0 ] || { echo "bench_sim_fidelity.sh: no arguments (settings are environment variables: see --help)" >&2; exit 2; }
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${BIN:-./stepgraph}
CONFIG=${CONFIG:-configs/default.json}
SCHEDS=${SCHEDS:-eager,lws,dmda,dmdas}
STEPS=${STEPS:-40}
CAL_STEPS=${CAL_STEPS:-60}
ROUNDS=${ROUNDS:-3}
OOS=${OOS:---max_length 512;--set train_micro_batch_size_per_gpu=2;--model tiny-qwen3;--set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=cpu}
work=$(mktemp -d "${TMPDIR:-/tmp}/sg-fidelity.XXXXXX")
trap 'rm -rf "$work"' EXIT
name=fidelity-host
echo "calibrating ($CAL_STEPS steps of $CONFIG)..." >&2
"$BIN" calibrate "$CONFIG" --name "$name" --out "$work" --steps "$CAL_STEPS" >"$work/cal.log" 2>&1 ||
	{ cat "$work/cal.log" >&2; exit 1; }
machine="$work/$name.json"
cp -r "$work/$name.sampling" "$work/runs.sampling"
declare -A runs
IFS=, read -r -a scheds <<<"$SCHEDS"
IFS=';' read -r -a variants <<<"$OOS"
# measure KEY ARGS...: ROUNDS interleaved runs per policy into runs[KEY/policy]
measure() {
	local key=$1 r s ms
	shift
	for r in $(seq "$ROUNDS"); do
		for s in "${scheds[@]}"; do
			echo "round $r: run $s ${*:-(calibrated config)}..." >&2
			ms=$(STARPU_PERF_MODEL_DIR="$work/runs.sampling" STARPU_HOSTNAME="$name" \
				STARPU_HOME="$work/runs.sampling" "$BIN" run "$CONFIG" "$@" --steps "$STEPS" \
				--warmup_steps 10 --sched "$s" 2>&1 | awk '/Step time: mean/ {print $4}')
			runs[$key/$s]="${runs[$key/$s]:-} $ms"
		done
	done
}
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
err() { awk -v p="$1" -v m="$2" 'BEGIN { if (p > 0 && m > 0) printf "%+.1f%%", 100 * (p - m) / m; else print "n/a" }'; }
sim() { "$BIN" simulate "$CONFIG" --machine "$machine" "$@" 2>/dev/null | awk '/Step time/ {print $3}'; }

measure in
printf '## In-sample (calibrated and measured on %s)\n\n' "$CONFIG"
printf '| policy | measured step (ms, median of %s) | rounds | history (ms) | error | fitted (ms) | error |\n' "$ROUNDS"
printf '|---|---:|---|---:|---:|---:|---:|\n'
for s in "${scheds[@]}"; do
	h=$(sim --sched "$s")
	f=$(sim --sched "$s" --cost fitted)
	med=$(median "${runs[in/$s]}")
	printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$s" "$med" "$(echo ${runs[in/$s]} | tr ' ' ',')" \
		"$h" "$(err "$h" "$med")" "$f" "$(err "$f" "$med")"
done
printf '\n## Out-of-sample (calibrated on %s only; simulate --cost fitted)\n\n' "$CONFIG"
printf '| variant | policy | measured step (ms, median of %s) | rounds | fitted (ms) | error |\n' "$ROUNDS"
printf '|---|---|---:|---|---:|---:|\n'
for i in "${!variants[@]}"; do
	# shellcheck disable=SC2086
	measure "v$i" ${variants[$i]}
	for s in "${scheds[@]}"; do
		# shellcheck disable=SC2086
		f=$(sim ${variants[$i]} --sched "$s" --cost fitted)
		med=$(median "${runs[v$i/$s]}")
		printf '| `%s` | %s | %s | %s | %s | %s |\n' "${variants[$i]}" "$s" "$med" \
			"$(echo ${runs[v$i/$s]} | tr ' ' ',')" "$f" "$(err "$f" "$med")"
	done
done
echo
echo "reproduce: SCHEDS=$SCHEDS STEPS=$STEPS CAL_STEPS=$CAL_STEPS ROUNDS=$ROUNDS CONFIG=$CONFIG OOS='$OOS' scripts/bench_sim_fidelity.sh"
