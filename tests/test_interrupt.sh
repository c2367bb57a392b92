#!/bin/sh
# test_interrupt.sh - SIGINT and SIGTERM stop a run without losing work
# (docs/interrupts.md).
#
# One rank: runs saving every 10 steps get SIGINT or SIGTERM at 8
# pseudo-random moments after their first checkpoint (as
# tests/test_checkpoint_kill.sh kills); each must exit with 128 + the
# signal's number, print "interrupted at step N (SIG); checkpoint
# DIR/step-0000000N", leave `latest` naming step N with no staging leftover,
# and `--load` of it must give at step N + 1 exactly the loss of an
# uninterrupted run (tests/resumed_step.py against the reference run's
# metrics, run afterwards to the last step reached + 1). --save without an
# interval saves at the interrupt; without --save the line says so. A
# signal at a random moment from the start leaves the save directory
# absent or holding a current checkpoint, never empty. A second signal
# (SIGINT and SIGTERM sent while the process is stopped, so that it takes
# both at once when continued) ends the run at once, without the line,
# `latest` still valid and resuming exactly.
# Two ranks (mpirun, skipped without it): the signal reaches rank 0 only,
# rank 1 only, or both at different moments (lookahead 1, 2 and 3); every
# rank stops after the same step and saves it (the resumed step equals the
# uninterrupted 2-rank run's), mpirun ends (no rank hangs) with 128 + the
# signal's number; a second signal on one rank ends every rank, `latest`
# still valid. Prints TAP.
set -u
SG_TEST_NAME=interrupt
. "${SG_SRCDIR:-.}/tests/test_env.sh"

. "$SRC/tests/train_lib.sh"
CFG="$SRC/configs/default.json"
RUN="--max_length 64 --log_interval 1"
LONG=100000 # steps no run reaches before its signal

# $DFL CMD...: CMD with SIGINT at its default action (a shell starts a
# background job with SIGINT ignored, and stepgraph keeps an ignored signal
# ignored, as nohup expects); CMD keeps the process, so $! is CMD's pid
cat >"$TMP/dfl.py" <<'PYEOF'
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])
PYEOF
DFL="$PY $TMP/dfl.py"
# wait_for FILE PID: until FILE exists (at most 60 s) or PID ended
wait_for() {
	t=0
	while ! [ -s "$1" ] && [ $t -lt 600 ] && kill -0 "$2" 2>/dev/null; do
		sleep 0.1
		t=$((t + 1))
	done
}
# pause SEED: a pseudo-random pause in [0, 0.5) s
pause() {
	sleep "$(awk -v s="$1" 'BEGIN { srand(s); printf "%.3f", rand() * 0.5 }')"
}
signum() { # signum INT|TERM
	if [ "$1" = INT ]; then echo 2; else echo 15; fi
}
# stopped OUT: N of OUT's "interrupted at step N" line (empty without one)
stopped() {
	sed -n 's/^interrupted at step \([0-9]*\) .*/\1/p' "$1"
}
# latest_step DIR: the step `latest` names (empty without one)
latest_step() {
	sed -n 's/^step-0*\([0-9][0-9]*\)$/\1/p' "$1/latest" 2>/dev/null
}
# clean DIR: no staging leftover and no empty directory in DIR
clean() {
	! ls -a "$1" | grep -q '^\.tmp-' && [ -z "$(find "$1" -type d -empty)" ]
}
# interrupted NAME DIR SIG RC: NAME.out says it stopped at N by SIG with DIR's
# checkpoint, RC is 128 + SIG's number, latest names N, nothing left over
interrupted() {
	N=$(stopped "$TMP/$1.out")
	[ -n "$N" ] && [ "$4" -eq $((128 + $(signum "$3"))) ] &&
		grep -q "^interrupted at step $N (SIG$3); checkpoint $2/step-$(printf %08d "$N")$" \
			"$TMP/$1.out" &&
		[ "$(latest_step "$2")" = "$N" ] && clean "$2"
}
# resumes REF NAME CMD...: CMD (a run that loads NAME's checkpoint) runs one
# more step, whose loss is REF's at that step (tests/resumed_step.py); a
# failure counts in bad
resumes() {
	ref=$1 b=$2 step=
	shift 2
	if "$@" --steps 1 --metrics "$TMP/r$b.jsonl" >"$TMP/r$b.out" 2>&1 &&
		step=$("$PY" "$SRC/tests/resumed_step.py" "$ref" "$TMP/r$b.jsonl" 2>&1); then
		echo "# $b: resumed at step $step, loss as uninterrupted"
	else
		bad=$((bad + 1))
		echo "# $b: resume failed: $step"
		tail -3 "$TMP/r$b.out" | sed 's/^/#   /'
	fi
}
MAXSTEP=0
note_step() { # note_step N: the reference runs must reach N + 1
	[ "${1:-0}" -gt $MAXSTEP ] && MAXSTEP=$1
	return 0
}

# 1-8. one rank, a signal at a random moment after the first checkpoint
good=0
i=1
while [ $i -le 8 ]; do
	if [ $((i % 2)) -eq 1 ]; then sig=INT; else sig=TERM; fi
	D="$TMP/s$i"
	$DFL "$BIN" run "$CFG" $RUN --steps $LONG --save "$D" --save_interval 10 \
		>"$TMP/s$i.out" 2>&1 &
	pid=$!
	wait_for "$D/latest" $pid
	pause $i
	kill -$sig $pid
	wait $pid
	rc=$?
	if interrupted "s$i" "$D" $sig $rc; then
		good=$((good + 1))
		note_step "$N"
		echo "# run $i: SIG$sig, stopped at step $N, exit $rc"
	else
		echo "# run $i: SIG$sig, exit $rc, latest $(latest_step "$D"):"
		tail -3 "$TMP/s$i.out" | sed 's/^/#   /'
	fi
	i=$((i + 1))
done
[ $good -eq 8 ]
ok $? "8 runs, SIGINT or SIGTERM at random moments: each stops, saves that step, says so, exits 128 + signal"

# --save without an interval: the checkpoint is written at the interrupt
D="$TMP/once"
$DFL "$BIN" run "$CFG" $RUN --steps $LONG --save "$D" >"$TMP/once.out" 2>&1 &
pid=$!
wait_for "$TMP/once.out" $pid
while ! grep -q "^Step" "$TMP/once.out" && kill -0 $pid 2>/dev/null; do sleep 0.1; done
kill -TERM $pid
wait $pid
interrupted once "$D" TERM $?
ok $? "--save without --save_interval: SIGTERM mid-run saves the step reached"
note_step "$(latest_step "$D")"

# without --save: the line says nothing was saved
$DFL "$BIN" run "$CFG" $RUN --steps $LONG >"$TMP/nosave.out" 2>&1 &
pid=$!
while ! grep -q "^Step" "$TMP/nosave.out" 2>/dev/null && kill -0 $pid 2>/dev/null; do
	sleep 0.1
done
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] && grep -q "^interrupted at step [0-9]* (SIGINT); no checkpoint (no --save)$" \
	"$TMP/nosave.out"
ok $? "without --save: SIGINT exits 130 saying no checkpoint was written"

# a signal at any moment from the start: never an empty save directory
bad=0
i=1
while [ $i -le 6 ]; do
	D="$TMP/e$i"
	$DFL "$BIN" run "$CFG" $RUN --steps $LONG --save "$D" >"$TMP/e$i.out" 2>&1 &
	pid=$!
	sleep "$(awk -v s=$((i + 50)) 'BEGIN { srand(s); printf "%.3f", rand() * 1.5 }')"
	kill -TERM $pid
	wait $pid
	rc=$?
	if [ -e "$D" ]; then
		[ $rc -eq 143 ] && [ -d "$D/step-$(printf %08d "$(latest_step "$D")")" ] && clean "$D"
	else
		[ $rc -eq 143 ]
	fi || {
		bad=$((bad + 1))
		echo "# early $i: exit $rc, $(ls -a "$D" 2>&1 | tr '\n' ' ')"
	}
	echo "# early $i: $(grep '^interrupted' "$TMP/e$i.out" || echo "ended before its handler was set")"
	note_step "$(latest_step "$D")"
	i=$((i + 1))
done
[ $bad -eq 0 ]
ok $? "SIGTERM at random moments from the start: the save directory is absent or current, never empty"

# a second signal: the process ends at once, the previous checkpoint current
good=0
i=1
while [ $i -le 4 ]; do
	D="$TMP/t$i"
	$DFL "$BIN" run "$CFG" $RUN --steps $LONG --save "$D" --save_interval 10 \
		>"$TMP/t$i.out" 2>&1 &
	pid=$!
	wait_for "$D/latest" $pid
	pause $((i + 20))
	# stopped, the process takes both at once when continued
	kill -STOP $pid
	kill -INT $pid
	kill -TERM $pid
	kill -CONT $pid
	wait $pid
	rc=$?
	if { [ $rc -eq 130 ] || [ $rc -eq 143 ]; } && [ -z "$(stopped "$TMP/t$i.out")" ] &&
		[ -n "$(latest_step "$D")" ] && [ -z "$(find "$D" -type d -empty)" ]; then
		good=$((good + 1))
	else
		echo "# second signal $i: exit $rc; $(grep '^interrupted' "$TMP/t$i.out")"
	fi
	note_step "$(latest_step "$D")"
	i=$((i + 1))
done
[ $good -eq 4 ]
ok $? "SIGINT and SIGTERM at once: the run ends at once (no save, no line), latest still names a checkpoint"

# the reference, past every step reached, and every checkpoint resumed
"$BIN" run "$CFG" $RUN --log_interval 1000 --steps $((MAXSTEP + 1)) \
	--metrics "$TMP/ref.jsonl" >"$TMP/ref.out" 2>&1
ok $? "reference run, $((MAXSTEP + 1)) steps without interruption"
bad=0
for D in "$TMP"/s? "$TMP/once" "$TMP"/e? "$TMP"/t?; do
	[ -e "$D" ] && resumes "$TMP/ref.jsonl" "$(basename "$D")" "$BIN" run "$CFG" $RUN --load "$D"
done
[ $bad -eq 0 ]
ok $? "every checkpoint an interrupt left resumes with the uninterrupted run's loss"

# ---- two ranks -------------------------------------------------------------
if ! command -v mpirun >/dev/null 2>&1 ||
	"$BIN" run --help | grep -q "This build has no MPI support"; then
	skip "two ranks: no mpirun or no MPI support in this build"
	done_testing
	exit
fi
. "$SRC/tests/ranks_env.sh"
MAXSTEP=0
cat >"$TMP/ds2.json" <<'JEOF'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.01}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 2}}
JEOF
RUN2="--dp_size 2 --max_length 32 --ncpus 1 --log_interval 1"
# ranks_of PID: the rank processes under mpirun (under timeout PID), rank 0
# first (from their OMPI_COMM_WORLD_RANK)
ranks_of() {
	for m in $(ps -o pid= --ppid "$1"); do
		for p in $(ps -o pid= --ppid "$m"); do
			r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
				sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
			echo "$r $p"
		done
	done | sort -n | awk '{ print $2 }'
}
# two NAME LOOKAHEAD WHO SIG [SIG2]: 2 ranks saving every 10 steps; after
# the first checkpoint and a random pause, SIG to rank WHO (0, 1, or "both":
# rank 0, then rank 1 a random moment later); SIG2 (WHO 1 only): SIG and SIG2
# to rank 1 at once
two() {
	D="$TMP/$1"
	timeout 120 "$MPIRUN_BIN" --oversubscribe --bind-to none -np 2 sh "$TMP/rank.sh" \
		"$BIN" run "$TMP/ds2.json" $RUN2 --lookahead "$2" --steps $LONG --save "$D" \
		--save_interval 10 >"$TMP/$1.out" 2>"$TMP/$1.err" &
	mpid=$!
	wait_for "$D/latest" $mpid
	pause "$2$3"
	set -- "$1" "$2" "$3" "$4" "${5:-}" $(ranks_of $mpid) none none
	case $3 in
	0) kill -"$4" "$6" ;;
	1) [ -n "$5" ] || kill -"$4" "$7" ;;
	both)
		kill -"$4" "$6"
		pause 7
		kill -"$4" "$7"
		;;
	esac
	if [ -n "$5" ]; then # both at once: sent while the rank is stopped
		kill -STOP "$7"
		kill -"$4" "$7"
		kill -"$5" "$7"
		kill -CONT "$7"
	fi
	wait $mpid
	rc=$?
	echo "# $1: lookahead $2, SIG$4 to rank $3${5:+ then SIG$5}: exit $rc," \
		"$(grep '^interrupted' "$TMP/$1.out" || echo "no line"), latest $(latest_step "$D")"
	[ $rc -ne 124 ]
}
two r0 1 0 INT && interrupted r0 "$TMP/r0" INT $rc
ok $? "2 ranks, SIGINT to rank 0 only (lookahead 1): both stop after the same step and save it, exit 130"
note_step "$(latest_step "$TMP/r0")"
two r1 2 1 TERM && interrupted r1 "$TMP/r1" TERM $rc
ok $? "2 ranks, SIGTERM to rank 1 only (lookahead 2): rank 0 stops with it, saves, exit 143"
note_step "$(latest_step "$TMP/r1")"
two rb 3 both TERM && interrupted rb "$TMP/rb" TERM $rc
ok $? "2 ranks, SIGTERM to each at different moments (lookahead 3): one stop, one checkpoint, exit 143"
note_step "$(latest_step "$TMP/rb")"
two r2 2 1 INT TERM && [ -z "$(stopped "$TMP/r2.out")" ] && [ -n "$(latest_step "$TMP/r2")" ] &&
	[ -z "$(find "$TMP/r2" -type d -empty)" ]
ok $? "2 ranks, a second signal on rank 1: every rank ends at once (exit $rc), latest still current"
note_step "$(latest_step "$TMP/r2")"

timeout 120 "$MPIRUN_BIN" --oversubscribe --bind-to none -np 2 sh "$TMP/rank.sh" "$BIN" run \
	"$TMP/ds2.json" $RUN2 --log_interval 1000 --steps $((MAXSTEP + 1)) \
	--metrics "$TMP/ref2.jsonl" >"$TMP/ref2.out" 2>&1
ok $? "2-rank reference run, $((MAXSTEP + 1)) steps without interruption"
bad=0
for b in r0 r1 rb r2; do
	resumes "$TMP/ref2.jsonl" $b timeout 120 "$MPIRUN_BIN" --oversubscribe --bind-to none -np 2 \
		sh "$TMP/rank.sh" "$BIN" run "$TMP/ds2.json" $RUN2 --load "$TMP/$b"
done
[ $bad -eq 0 ]
ok $? "every 2-rank checkpoint an interrupt left resumes with the uninterrupted 2-rank run's loss"
done_testing
