#!/bin/sh
# test_speculation.sh - SuperOffload's speculation modes end to end.
#
# Training the tiny model from scratch with SuperOffload and gradient
# clipping 1.0 (configs/deepspeed/superoffload.json as shipped), clipping
# fires on every step, so every speculative CPU Adam step is rolled back
# and redone. The default mode ("adaptive", runtime/train/speculation.h)
# therefore starts waiting for the gradient norm and rolls nothing back
# (issue 39: at most 25% of the sub-group steps); `always` (DeepSpeed's own
# behaviour) rolls back every one. `never` must give exactly the losses of
# the non-speculative ZeRO-Offload step (the same config with super_offload
# off, an independent path through the compiler); the speculative modes
# must stay within rounding of it (a rollback is exact only to rounding);
# all losses finite. With a clipping threshold the norm stays under
# (gradient_clipping 7), adaptive resumes speculating once 6 of the last 8
# steps were under it; with steps in flight (run option lookahead, default 2)
# step j runs the mode known after step j - lookahead: one step later than
# with lookahead 1, the same for every run whatever the timing.
# Prints TAP.
set -u
SG_TEST_NAME=spec SG_TEST_CUDA=1
. "${SG_SRCDIR:-.}/tests/test_env.sh"
SO="$SRC/configs/deepspeed/superoffload.json"
RUN="--model tiny-llama --max_length 32 --steps 10 --log_interval 1"

for mode in always never; do
	"$BIN" run "$SO" $RUN --speculation $mode --metrics "$TMP/$mode.jsonl" >"$TMP/$mode.out" 2>&1
	ok $? "run with --speculation $mode"
done
"$BIN" run "$SO" $RUN --metrics "$TMP/default.jsonl" >"$TMP/default.out" 2>&1
ok $? "run with the shipped config and no --speculation"
"$BIN" run "$SO" $RUN --set zero_optimization.offload_optimizer.super_offload=false \
	--metrics "$TMP/offload.jsonl" >"$TMP/offload.out" 2>&1
ok $? "the same config without SuperOffload"
CLIP="--set gradient_clipping=7"
for la in 1 2; do
	"$BIN" run "$SO" $RUN $CLIP --speculation adaptive --lookahead $la \
		--metrics "$TMP/adaptive$la.jsonl" >"$TMP/adaptive$la.out" 2>&1
	ok $? "run with --speculation adaptive --lookahead $la, clipping 7"
done
"$BIN" run "$SO" $RUN $CLIP --speculation never --metrics "$TMP/never7.jsonl" >"$TMP/never7.out" 2>&1
ok $? "run with --speculation never, clipping 7"

modes() { grep '^Step' "$TMP/$1.out" | sed 's/.*| \(speculative\|waited for the norm\).*/\1/' | tr '\n' ','; }
rep() { printf "$1,%.0s" $(seq "$2"); }
[ "$(modes always)" = "$(rep speculative 10)" ]
ok $? "always: every step line says speculative"
grep -q "10 of 10 speculative sub-group steps rolled back" "$TMP/always.out"
ok $? "always, clipping 1.0 from scratch: every speculative sub-group step rolled back"
"$BIN" config "$SO" 2>/dev/null | grep -q '^speculation:  *adaptive$'
ok $? "the default speculation mode is adaptive"
[ "$(modes default)" = "$(rep 'waited for the norm' 10)" ]
ok $? "default, clipping 1.0 from scratch: it starts waiting and keeps waiting while clipping fires"
grep -q "0 of 0 speculative sub-group steps rolled back.*10 of 10 steps waited" "$TMP/default.out"
ok $? "default: no rollback at all (the issue asks at most 25%)"
[ "$(modes adaptive1)" = "$(rep 'waited for the norm' 6)$(rep speculative 4)" ]
ok $? "adaptive, clipping 7, lookahead 1: six steps under the threshold, then it speculates"
[ "$(modes adaptive2)" = "$(rep 'waited for the norm' 7)$(rep speculative 3)" ]
ok $? "adaptive, clipping 7, lookahead 2: the step after was submitted before the sixth's outcome"
# the share of rolled-back speculative sub-group steps, from the summary
share() {
	sed -n 's/.*SuperOffload: \([0-9]*\) of \([0-9]*\) speculative.*/\1 \2/p' "$TMP/$1.out" |
		awk '{ exit !($2 > 0 && $1 <= 0.25 * $2) }'
}
share adaptive1 && share adaptive2
ok $? "adaptive, clipping 7: at most 25% of the speculative sub-group steps rolled back"
[ "$(modes never)" = "$(rep 'waited for the norm' 10)" ]
ok $? "never: every step waits for the norm"

# compare A B RTOL: equal step counts, every loss finite, |a-b| <= RTOL |b|
compare() {
	"$PY" "$SRC/tests/sglog.py" same "$TMP/$2.jsonl" "$TMP/$1.jsonl" --rtol "$3" --steps 10
}
compare never offload 0
ok $? "never: losses bit-identical to the non-speculative ZeRO-Offload step, and finite"
compare default never 0
ok $? "default: losses bit-identical to never while it waits, and finite"
compare adaptive1 never7 1e-4
ok $? "adaptive, clipping 7, lookahead 1: losses within 1e-4 of never"
compare adaptive2 never7 1e-4
ok $? "adaptive, clipping 7, lookahead 2: losses within 1e-4 of never"
compare always offload 1e-4
ok $? "always: losses within 1e-4 of the non-speculative step (rollbacks are exact to rounding)"

"$BIN" run "$SO" $RUN --speculation sometimes >"$TMP/bad.out" 2>&1
[ $? -ne 0 ] && grep -q 'speculation "sometimes"' "$TMP/bad.out"
ok $? "an unknown speculation mode is refused, naming it"
done_testing
