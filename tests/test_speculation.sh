#!/bin/sh
# test_speculation.sh - SuperOffload's speculation modes end to end.
#
# Training the tiny model from scratch with SuperOffload and gradient
# clipping 1.0, clipping fires on every step, so every speculative CPU Adam
# step is rolled back and redone. `--speculation adaptive` must stop
# speculating after four such steps (the rule of runtime/train/speculation.h)
# and say so on each step line; `never` must give exactly the losses of the
# non-speculative ZeRO-Offload step (the same config with super_offload off,
# an independent path through the compiler); adaptive must stay within
# rounding of it (a rollback is exact only to rounding); all losses finite.
# With steps in flight (run option lookahead, default 2) step j runs the mode
# known after step j - lookahead: one step later than with lookahead 1, the
# same for every run whatever the timing.
# Prints TAP.
set -u
SRC=${SG_SRCDIR:-.}
BIN=${SG_BUILDDIR:-.}/stepgraph
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
if ! [ -x "$PY" ]; then
	echo "1..0 # SKIP no python3"
	exit 0
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sg_spec.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME="$TMP/starpu"
mkdir -p "$STARPU_HOME"
unset STARPU_SCHED STARPU_NCPU STARPU_NCPUS STEPGRAPH_TASK_LOG
n=0
ok() { # ok STATUS DESCRIPTION
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}
SO="$SRC/configs/deepspeed/superoffload.json"
RUN="--model tiny-llama --max_length 32 --steps 10 --log_interval 1"

for mode in always adaptive never; do
	"$BIN" run "$SO" $RUN --speculation $mode --metrics "$TMP/$mode.jsonl" >"$TMP/$mode.out" 2>&1
	ok $? "run with --speculation $mode"
done
"$BIN" run "$SO" $RUN --speculation adaptive --lookahead 1 --metrics "$TMP/adaptive1.jsonl" \
	>"$TMP/adaptive1.out" 2>&1
ok $? "run with --speculation adaptive --lookahead 1"
"$BIN" run "$SO" $RUN --set zero_optimization.offload_optimizer.super_offload=false \
	--metrics "$TMP/offload.jsonl" >"$TMP/offload.out" 2>&1
ok $? "the same config without SuperOffload"

modes() { grep '^Step' "$TMP/$1.out" | sed 's/.*| \(speculative\|waited for the norm\).*/\1/' | tr '\n' ','; }
[ "$(modes always)" = "$(printf 'speculative,%.0s' 1 2 3 4 5 6 7 8 9 10)" ]
ok $? "always: every step line says speculative"
[ "$(modes adaptive1)" = "speculative,speculative,speculative,speculative,$(printf 'waited for the norm,%.0s' 1 2 3 4 5 6)" ]
ok $? "adaptive, lookahead 1: four speculative steps that all roll back, then it waits for the norm"
grep -q "4 of 4 speculative sub-group steps rolled back.*6 of 10 steps waited" "$TMP/adaptive1.out"
ok $? "adaptive, lookahead 1: the summary counts 4 rollbacks and 6 waiting steps"
[ "$(modes adaptive)" = "speculative,speculative,speculative,speculative,speculative,$(printf 'waited for the norm,%.0s' 1 2 3 4 5)" ]
ok $? "adaptive, lookahead 2: the fifth step was submitted before the fourth's outcome was known"
grep -q "5 of 5 speculative sub-group steps rolled back.*5 of 10 steps waited" "$TMP/adaptive.out"
ok $? "adaptive, lookahead 2: the summary counts 5 rollbacks and 5 waiting steps"
[ "$(modes never)" = "$(printf 'waited for the norm,%.0s' 1 2 3 4 5 6 7 8 9 10)" ]
ok $? "never: every step waits for the norm"

# compare A B RTOL: equal step counts, every loss finite, |a-b| <= RTOL |b|
compare() {
	"$PY" - "$TMP/$1.jsonl" "$TMP/$2.jsonl" "$3" <<'PYEOF'
import json, math, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
rtol = float(sys.argv[3])
assert len(a) == len(b) == 10, (len(a), len(b))
assert all(isinstance(x, float) and math.isfinite(x) for x in a + b), (a, b)
assert all(abs(x - y) <= rtol * abs(y) for x, y in zip(a, b)), list(zip(a, b))
PYEOF
}
compare never offload 0
ok $? "never: losses bit-identical to the non-speculative ZeRO-Offload step, and finite"
compare adaptive offload 1e-4
ok $? "adaptive: losses within 1e-4 of the non-speculative step"
compare adaptive1 offload 1e-4
ok $? "adaptive, lookahead 1: losses within 1e-4 of the non-speculative step"
compare always offload 1e-4
ok $? "always: losses within 1e-4 of the non-speculative step (rollbacks are exact to rounding)"

"$BIN" run "$SO" $RUN --speculation sometimes >"$TMP/bad.out" 2>&1
[ $? -ne 0 ] && grep -q 'speculation "sometimes"' "$TMP/bad.out"
ok $? "an unknown speculation mode is refused, naming it"
echo "1..$n"
