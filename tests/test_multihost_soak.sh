#!/bin/sh
# test_multihost_soak.sh - a short, bounded soak of faults across two hosts
# (issue 43 item 4; docs/ranks.md, "When a rank stops answering"; the long
# soak by hand is tests/soak_multihost.sh). Two hosts as network namespaces
# (scripts/netns_hosts.sh), one rank each, ZeRO 3, tiny-llama: a run of
# STEPS steps without interruption is the reference; then the same run,
# saving every step, is cut FAULTS times at drawn moments (0 to 0.2 s after
# rank 0 logged step 2 to 5 of the run, by awk's srand(SEED x 1000 + round):
# SG_SOAK_SEED=S replays the same rounds) by a drawn fault on host 2 - every process in it killed,
# its link cut, or its rank killed - and resumed each time from the
# checkpoint `latest` names, across both hosts again, until a run ends at
# STEPS. Checks: every reachable rank ended after each fault (within 120 s),
# each resume started at the step after the checkpoint, the soak ended at
# step STEPS, and its final checkpoint (the model and both ranks' optimizer
# partitions) is byte for byte the uninterrupted run's. About 1-2 minutes.
# Skips without root / network namespaces, mpirun or MPI support. Prints TAP.
set -u
SG_TEST_NAME=multihost_soak
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/ranks_env.sh"
. "$SRC/tests/multihost_env.sh"
. "$SRC/tests/multihost_faults.sh"

STEPS=48
FAULTS=3
SEED=${SG_SOAK_SEED:-1}
ds z3 1 1 '{"stage": 3}'
# step_of DIR: the step of DIR's current checkpoint, 0 without one
step_of() {
	if [ -f "$1/latest" ]; then sed 's/^step-0*//; s/^$/0/' "$1/latest"; else echo 0; fi
}
# first_step NAME: the first step NAME's rank 0 logged
first_step() { sed -n 's/^Step \([0-9]*\) |.*/\1/p' "$TMP/$1.out" | head -n 1; }

echo "1..$((FAULTS * 2 + 3))"
hosts ref 1 z3 --steps $STEPS --save "$TMP/ref.ck" --log_interval 1
[ "$(cat "$TMP/ref.rc")" = 0 ] && [ "$(step_of "$TMP/ref.ck")" = $STEPS ]
ok $? "uninterrupted: $STEPS steps across 2 hosts, checkpoint at step $STEPS"
[ "$(cat "$TMP/ref.rc")" = 0 ] || sed 's/^/# /' "$TMP/ref.err" | tail -5

CK=$TMP/soak.ck
r=1
while [ $r -le $FAULTS ]; do
	set -- $(awk -v s="$SEED" -v r="$r" 'BEGIN { srand(s * 1000 + r)
		printf "%d %d %.2f\n", int(rand() * 3), 2 + int(rand() * 4), rand() * 0.2 }')
	case $1 in 0) fault=slay ;; 1) fault=linkdown ;; *) fault=killrank ;; esac
	at=$2 lag=$3 before=$(step_of "$CK") name=round$r
	if [ "$before" -ge $STEPS ]; then # (a fault came too late: nothing left to cut)
		for k in 1 2; do n=$((n + 1)); echo "ok $n # SKIP round $r: the soak already ended"; done
		r=$((r + 1))
		continue
	fi
	load=""
	[ "$before" -gt 0 ] && load="--load $CK"
	BG=1 hosts "$name" 1 z3 $load --steps $((STEPS - before)) --save "$CK" --save_interval 1 \
		--comm_timeout 3 --log_interval 1
	i=0 # rank 0 logged `at` steps of this run (or the run ended)
	while [ "$(cat "$TMP/$name.jsonl" 2>/dev/null | wc -l)" -lt "$at" ] &&
		kill -0 $MPID 2>/dev/null && [ $i -lt 1200 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	sleep $lag # into the next step, or the save of this one
	if ! kill -0 $MPID 2>/dev/null; then # ended by itself: only at the end is that right
		wait $MPID
		rc=$?
		if [ $rc = 0 ] && [ "$(step_of "$CK")" = $STEPS ]; then
			for k in 1 2; do n=$((n + 1)); echo "ok $n # SKIP round $r: the run ended before the fault"; done
		else
			ok 1 "round $r: the run from step $before ended by itself (exit $rc) before the fault"
			ok 1 "round $r: (no fault)"
			tail -n 8 "$TMP/$name.err" "$TMP/$name.out" | sed 's/^/# /'
		fi
		r=$((r + 1))
		continue
	fi
	$fault
	i=0
	while { [ "$(ranks_in 1)" -gt 0 ] || { [ $fault != linkdown ] && [ "$(ranks_in 2)" -gt 0 ]; }; } &&
		[ $i -lt 1200 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	[ $i -lt 1200 ]
	ok $? "round $r: $fault on host 2 $lag s after step $at of the run from step $before: every reachable rank ended ($((i / 10)) s)"
	settle "$name"
	echo "# round $r: checkpoint now at step $(step_of "$CK")"
	first=$(first_step "$name")
	[ "$first" = $((before + 1)) ]
	ok $? "round $r: the run resumed at step $first, after the checkpoint's step $before"
	r=$((r + 1))
done
# the last run, undisturbed, to the end
before=$(step_of "$CK")
load=""
[ "$before" -gt 0 ] && load="--load $CK"
hosts last 1 z3 $load --steps $((STEPS - before)) --save "$CK" --log_interval 1
[ "$(cat "$TMP/last.rc")" = 0 ] && [ "$(step_of "$CK")" = $STEPS ]
ok $? "the last run resumed at step $(first_step last) and ended at step $STEPS"
[ "$(cat "$TMP/last.rc")" = 0 ] || sed 's/^/# /' "$TMP/last.err" | tail -5
a="$TMP/ref.ck/$(cat "$TMP/ref.ck/latest" 2>/dev/null)" b="$CK/$(cat "$CK/latest" 2>/dev/null)"
ls "$b" 2>/dev/null | sed 's/^/# final: /'
[ -f "$a/model.safetensors" ] && [ -s "$b/optim.rank1-of-2.safetensors" ] && diff -r "$a" "$b" >/dev/null
ok $? "after $FAULTS faults: the final model and both partitions are byte for byte the uninterrupted run's"
