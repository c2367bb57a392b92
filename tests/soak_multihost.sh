#!/bin/sh
# soak_multihost.sh [ROUNDS [SEED]] - random faults across two hosts (issue
# 43 item 4; docs/ranks.md, "When a rank stops answering"). Not part of
# `make check` (about 20 s a round): run it as root from the build folder,
#   SG_SRCDIR=SRC sh SRC/tests/soak_multihost.sh 8 1
# Each round draws (awk's srand(SEED x 1000 + round): a seed replays the
# same rounds) a fault on host 2 (its link down, frozen with SIGSTOP, every
# process in it killed, or one rank killed), the step after which it comes
# (3 to 10) and 1 or 2 ranks per host, then runs ZeRO 3 across the 2
# namespace hosts (comm_timeout 3, a checkpoint every 2 steps) and checks:
# - every rank on host 1 (and on host 2 unless it is frozen) ended within
#   120 s;
# - the end was explained: rank 0's watchdog error naming a rank on host 2,
#   or mpirun's report of a lost daemon, a killed process or a peer gone;
#   when host 2 was killed whole, mpirun may end at once with the status 9
#   and no message (its daemon there died with it): a status other than 0
#   is then the explanation;
# - `latest` names a complete checkpoint (the model, every rank's
#   partition), and one process resumes it at the step after it.
# Prints TAP; skips where the hosts cannot be made.
set -u
SG_TEST_NAME=soak_mh
. "${SG_SRCDIR:-.}/tests/test_env.sh"
. "$SRC/tests/ranks_env.sh"
. "$SRC/tests/multihost_env.sh"
. "$SRC/tests/multihost_faults.sh"

ROUNDS=${1:-8}
SEED=${2:-1}
ds z3 1 1 '{"stage": 3}'
plan $((ROUNDS * 3))
r=1
while [ "$r" -le "$ROUNDS" ]; do
	set -- $(awk -v s="$SEED" -v r="$r" 'BEGIN { srand(s * 1000 + r)
		print int(rand() * 4), 3 + int(rand() * 8), 1 + int(rand() * 2) }')
	case $1 in
	0) fault=linkdown both=1 ;;
	1) fault=freeze both=0 ;;
	2) fault=slay both=1 ;;
	*) fault=killrank both=1 ;;
	esac
	at=$2 rph=$3 name=round$r
	ds "z3one$r" "$((2 * rph))" 1 '{"stage": 3}'
	RPH=$rph CUT_AT=$at BOTH=$both cut "$name" $fault
	ok $? "round $r: $fault after step $at, 2 hosts x $rph ranks: every reachable rank ended"
	settle "$name"
	cat "$TMP/$name.err" "$TMP/$name.out" >"$TMP/$name.all"
	grep -E "^stepgraph: rank|noticed that|lost communication|unexpectedly disconnected" \
		"$TMP/$name.all" | head -n 3 | sed 's/^/# /'
	grep -Eq "^stepgraph: rank [0-9]+ on .*: no collective completed .*stopped answering: rank [0-9]+ on .*\($NH_ADDR2\)|mpirun noticed that process rank [0-9]+ .* exited on signal 9|ORTE has lost communication with a remote daemon|peer process has unexpectedly disconnected" \
		"$TMP/$name.all" || { [ "$fault" = slay ] && [ -n "$MPRC" ] && [ "$MPRC" -ne 0 ] &&
		echo "# $name: mpirun ended with status $MPRC and no message (its daemon on host 2 killed)"; }
	ok $? "round $r: the end was explained (the watchdog naming host 2, or mpirun)"
	LATEST=$(cat "$TMP/$name.ck/latest" 2>/dev/null)
	CK=$TMP/$name.ck/$LATEST
	parts=0
	k=0
	while [ $k -lt $((2 * rph)) ]; do
		[ -s "$CK/optim.rank$k-of-$((2 * rph)).safetensors" ] && parts=$((parts + 1))
		k=$((k + 1))
	done
	"$BIN" run "$TMP/z3one$r.json" --max_length 32 --ncpus 1 --steps 1 --load "$TMP/$name.ck" \
		>"$TMP/$name.res.out" 2>"$TMP/$name.res.err"
	rc=$?
	first=$(sed -n 's/^Step \([0-9]*\) |.*/\1/p' "$TMP/$name.res.out" | head -n1)
	[ -n "$LATEST" ] && [ -f "$CK/model.safetensors" ] && [ $parts -eq $((2 * rph)) ] &&
		[ $rc -eq 0 ] && [ "$first" = "$(expr "${LATEST#step-}" + 1)" ]
	ok $? "round $r: latest ($LATEST) complete ($parts partitions), one process resumes it at step $first"
	r=$((r + 1))
done
