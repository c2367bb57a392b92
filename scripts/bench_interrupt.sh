#!/bin/sh
# bench_interrupt.sh - how long `stepgraph run` takes to stop on SIGTERM
# (docs/interrupts.md): RUNS runs (default 5) of the default job (tiny-llama,
# --max_length 64, lookahead 2) saving every 10 steps, each sent SIGTERM
# PAUSE seconds (default 0.5) after its first checkpoint; prints per run the
# milliseconds from just before `kill` to the end of `wait`, the exit status,
# the line the run printed and its last step's time. Not a test: nothing is
# asserted. Run from the build directory:
#
#   scripts/bench_interrupt.sh [BIN]        # BIN: default ./stepgraph
set -u
BIN=${1:-./stepgraph}
SRC=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-5}
PAUSE=${PAUSE:-0.5}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sg_bench_interrupt.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME="$TMP/starpu" STARPU_NCUDA=${STARPU_NCUDA:-0}
mkdir -p "$STARPU_HOME"
i=1
while [ "$i" -le "$RUNS" ]; do
	D="$TMP/ck$i"
	"$BIN" run "$SRC/configs/default.json" --max_length 64 --log_interval 1 --steps 100000 \
		--save "$D" --save_interval 10 >"$TMP/run$i.out" 2>&1 &
	pid=$!
	while ! [ -f "$D/latest" ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
	sleep "$PAUSE"
	t0=$(date +%s%N)
	kill -TERM $pid
	wait $pid
	rc=$?
	t1=$(date +%s%N)
	echo "run $i: $(((t1 - t0) / 1000000)) ms from SIGTERM to exit, exit $rc;" \
		"$(grep '^interrupted' "$TMP/run$i.out" || echo 'no interrupted line');" \
		"last step $(grep '^Step' "$TMP/run$i.out" | tail -1 | sed 's/.*Time: \([0-9.]*\) ms.*/\1/') ms"
	i=$((i + 1))
done
