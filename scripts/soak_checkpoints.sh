#!/bin/sh
# soak_checkpoints.sh - a long checkpoint soak, run by hand (not in CI).
#
# Trains the default job (tiny-llama, configs/default.json) for STEPS steps
# twice: once without interruption, once saving every SAVE_EVERY steps and
# killed with SIGKILL at KILLS pseudo-random moments, each time resumed with
# `--load DIR` from whatever checkpoint is current. The final checkpoints'
# model.safetensors (and state.safetensors) must be byte-identical.
#
# Usage: scripts/soak_checkpoints.sh [STEPS [SAVE_EVERY [KILLS]]]
#        (defaults 2000, 50, 8; environment: STEPGRAPH=path of the binary,
#        MAX_LENGTH=16, SEED=1 for the kill moments, STEPGRAPH_MODELS_DIR,
#        TMPDIR)
# Prints one line per kill and a summary; exits 0 when the weights match.
set -u
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
for a in "$@"; do
	case $a in *[!0-9]* | "") echo "soak: $a: expected a number (usage: see --help)" >&2; exit 2 ;; esac
done
STEPS=${1:-2000}
SAVE_EVERY=${2:-50}
KILLS=${3:-8}
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${STEPGRAPH:-$HERE/stepgraph}
CFG="$HERE/configs/default.json"
RUN="--max_length ${MAX_LENGTH:-16} --log_interval 1000000"
SEED=${SEED:-1}
[ -x "$BIN" ] || { echo "soak: $BIN not built (make)" >&2; exit 2; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sg_soak.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME="$TMP/starpu"
mkdir -p "$STARPU_HOME"
export STEPGRAPH_MODELS_DIR=${STEPGRAPH_MODELS_DIR:-$HERE/models}
unset STARPU_SCHED STARPU_NCPU STARPU_NCPUS

step_of() { # step_of DIR: the step of DIR's current checkpoint, 0 without one
	if [ -f "$1/latest" ]; then sed 's/^step-0*//; s/^$/0/' "$1/latest"; else echo 0; fi
}
t0=$(date +%s)
"$BIN" run "$CFG" $RUN --steps "$STEPS" --save "$TMP/ref" >"$TMP/ref.out" 2>&1 ||
	{ echo "soak: the uninterrupted run failed:"; tail -5 "$TMP/ref.out"; exit 1; }
t1=$(date +%s)
ref_s=$((t1 - t0))
echo "uninterrupted: $STEPS steps in ${ref_s}s"

# kill moments: uniform over the uninterrupted run's duration
D="$TMP/soak"
kills=0 runs=0 i=1
while :; do
	done_steps=$(step_of "$D")
	[ "$done_steps" -ge "$STEPS" ] && break
	load=""
	[ "$done_steps" -gt 0 ] && load="--load $D"
	"$BIN" run "$CFG" $RUN $load --steps $((STEPS - done_steps)) --save "$D" \
		--save_interval "$SAVE_EVERY" >"$TMP/run$runs.out" 2>&1 &
	pid=$!
	runs=$((runs + 1))
	if [ $kills -lt "$KILLS" ]; then
		delay=$(awk -v s="$SEED$i" -v t="$ref_s" -v k="$KILLS" \
			'BEGIN { srand(s); printf "%.2f", 2 + rand() * t / k }')
		sleep "$delay"
		if kill -9 $pid 2>/dev/null; then
			kills=$((kills + 1))
			wait $pid 2>/dev/null
			echo "kill $kills: after ${delay}s, checkpoint at step $(step_of "$D")"
		else
			wait $pid || { echo "soak: run $runs failed:"; tail -5 "$TMP/run$((runs - 1)).out"; exit 1; }
		fi
		i=$((i + 1))
	else
		wait $pid || { echo "soak: run $runs failed:"; tail -5 "$TMP/run$((runs - 1)).out"; exit 1; }
	fi
done
t2=$(date +%s)
last=$(cat "$D/latest")
[ "$last" = "$(cat "$TMP/ref/latest")" ] || { echo "soak: ended at $last, reference at $(cat "$TMP/ref/latest")"; exit 1; }
result=0
for f in model.safetensors state.safetensors; do
	if cmp -s "$TMP/ref/$last/$f" "$D/$last/$f"; then
		echo "$last/$f: byte-identical to the uninterrupted run's"
	else
		echo "$last/$f: DIFFERS from the uninterrupted run's"
		result=1
	fi
done
echo "soak: $STEPS steps, saving every $SAVE_EVERY, $kills kills (SIGKILL) over $runs runs," \
	"$((t2 - t1))s (uninterrupted ${ref_s}s): $([ $result -eq 0 ] && echo PASS || echo FAIL)"
exit $result
