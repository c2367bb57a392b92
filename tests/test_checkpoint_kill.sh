#!/bin/sh
# test_checkpoint_kill.sh - checkpoints survive a kill at any moment and a
# full disk.
#
# A run saving every step is killed with SIGKILL at 20 pseudo-random moments
# after its first checkpoint; each time `--load` must succeed and the next
# step must give exactly the loss an uninterrupted run gives at that step
# (the reference run's own metrics, compared as numbers, and finite). Then a
# save that hits the file-size limit (RLIMIT_FSIZE, as a full disk) must fail
# naming the problem and leave the previous checkpoint current and loadable.
# Prints TAP.
set -u
SG_TEST_NAME=kill SG_TEST_CUDA=1
. "${SG_SRCDIR:-.}/tests/test_env.sh"
CFG="$SRC/configs/default.json"
RUN="--max_length 64 --log_interval 1000"
STEPS=24

"$BIN" run "$CFG" $RUN --steps $((STEPS + 1)) --metrics "$TMP/ref.jsonl" >"$TMP/ref.out" 2>&1
ok $? "reference run, $((STEPS + 1)) steps without interruption"

# same_loss METRICS: the step and loss of the one line of METRICS equal the
# reference's at that step, and are finite (tests/resumed_step.py)
same_loss() {
	"$PY" "$SRC/tests/resumed_step.py" "$TMP/ref.jsonl" "$1"
}

kills=0 resumed=0
i=1
while [ $i -le 20 ]; do
	D="$TMP/k$i"
	"$BIN" run "$CFG" $RUN --steps $STEPS --save "$D" --save_interval 1 >/dev/null 2>&1 &
	pid=$!
	# wait for the first complete checkpoint (at most 30 s), then a little more
	t=0
	while ! [ -f "$D/latest" ] && [ $t -lt 300 ] && kill -0 $pid 2>/dev/null; do
		sleep 0.1
		t=$((t + 1))
	done
	sleep "$(awk -v s=$i 'BEGIN { srand(s); printf "%.3f", rand() * 0.8 }')"
	kill -9 $pid 2>/dev/null && kills=$((kills + 1))
	wait $pid 2>/dev/null
	if "$BIN" run "$CFG" $RUN --load "$D" --steps 1 --metrics "$TMP/r$i.jsonl" \
		>"$TMP/r$i.out" 2>&1 && step=$(same_loss "$TMP/r$i.jsonl" 2>"$TMP/r$i.err"); then
		resumed=$((resumed + 1))
		echo "# kill $i: resumed at step $step, loss as uninterrupted"
	else
		echo "# kill $i: resume failed:"
		sed 's/^/#   /' "$TMP/r$i.out" "$TMP/r$i.err" 2>/dev/null | tail -5
	fi
	leftovers=$(find "$D" -maxdepth 1 -name 'step-*' | wc -l)
	[ "$leftovers" -le 3 ] || echo "# kill $i: $leftovers step directories kept"
	i=$((i + 1))
done
[ $resumed -eq 20 ]
ok $? "20 runs saving every step, killed at random moments ($kills killed mid-run): all resume exactly"

# A full disk: the second save fails, the first stays current.
D="$TMP/full"
"$BIN" run "$CFG" $RUN --steps 3 --save "$D" >/dev/null 2>&1
ok $? "a checkpoint at step 3"
(
	trap '' XFSZ
	exec prlimit --fsize=5000000 "$BIN" run "$CFG" $RUN --load "$D" --steps 2 --save "$D"
) >"$TMP/full.out" 2>&1
status=$?
[ $status -ne 0 ] && grep -q "state.safetensors" "$TMP/full.out"
ok $? "a save that runs out of room fails, naming the file (exit $status)"
[ "$(cat "$D/latest")" = "step-00000003" ] && ! ls -a "$D" | grep -q '^\.tmp-'
ok $? "the previous checkpoint stays current and the partial one is removed"
"$BIN" run "$CFG" $RUN --load "$D" --steps 1 --metrics "$TMP/full.jsonl" >/dev/null 2>&1 &&
	[ "$(same_loss "$TMP/full.jsonl")" = 4 ]
ok $? "and resumes exactly (step 4 as uninterrupted)"

# keep_last: a run saving every step keeps the newest two (the default)
D="$TMP/keep"
"$BIN" run "$CFG" $RUN --steps 5 --save "$D" --save_interval 1 >/dev/null 2>&1
[ "$(find "$D" -maxdepth 1 -name 'step-*' | sort | tr '\n' ' ')" = "$D/step-00000004 $D/step-00000005 " ]
ok $? "saving every step keeps the newest two checkpoints by default"
"$BIN" run "$CFG" $RUN --steps 3 --save "$D.all" --save_interval 1 --save_keep 0 >/dev/null 2>&1
[ "$(find "$D.all" -maxdepth 1 -name 'step-*' | wc -l)" -eq 3 ]
ok $? "--save_keep 0 keeps every checkpoint"

# a pointer to nothing is refused, naming it
echo "step-00000999" >"$D/latest"
"$BIN" run "$CFG" $RUN --load "$D" --steps 1 >"$TMP/bad.out" 2>&1
[ $? -ne 0 ] && grep -q "step-00000999" "$TMP/bad.out"
ok $? "a latest file naming a missing checkpoint is refused, naming it"
done_testing
