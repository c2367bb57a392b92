# multihost_faults.sh - sourced after tests/multihost_env.sh by the tests
# that cut a run across 2 namespace hosts (test_multihost_partition.sh,
# soak_multihost.sh): ranks_in, cut, settle and the faults on host 2.

# ranks_in I: stepgraph processes in host I
ranks_in() {
	c=0
	for p in $(ip netns pids "sgh${NH_ID}h$1" 2>/dev/null); do
		[ "$(cat /proc/$p/comm 2>/dev/null)" = stepgraph ] && c=$((c + 1))
	done
	echo $c
}
# cut NAME HOW: a long run across the hosts (config $TMP/z3.json, RPH ranks
# per host, default 1), cut by HOW (a command) once rank 0 logged CUT_AT
# steps (default 5); then waits (at most 120 s) until no rank runs in host 1
# (and in host 2 when BOTH=1); 0 when they ended. Leaves mpirun to settle()
cut() {
	BG=1 hosts "$1" "${RPH:-1}" z3 --steps 100000 --comm_timeout 3 --save "$TMP/$1.ck" \
		--save_interval 2 --log_interval 1
	i=0
	while [ "$(cat "$TMP/$1.jsonl" 2>/dev/null | wc -l)" -lt "${CUT_AT:-5}" ] &&
		kill -0 $MPID 2>/dev/null && [ $i -lt 1200 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	$2
	i=0
	while { [ "$(ranks_in 1)" -gt 0 ] || { [ "${BOTH:-0}" = 1 ] && [ "$(ranks_in 2)" -gt 0 ]; }; } &&
		[ $i -lt 1200 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	echo "# $1: ranks ended $((i / 10)) s after the cut (host 1: $(ranks_in 1) left, host 2: $(ranks_in 2))"
	[ $i -lt 1200 ]
}
# settle NAME: mpirun ended within 10 s more (said, not tested; its status
# in MPRC, "" when it had to be killed), else killed; every process in the hosts killed, host 2's link up, no netem
settle() {
	MPRC=""
	if wait_for $MPID 10; then
		wait $MPID
		MPRC=$?
		echo "# $1: mpirun ended (exit $MPRC)"
	else
		echo "# $1: mpirun still waits on host 2's daemon: killed"
	fi
	for h in 1 2; do
		for p in $(ip netns pids "sgh${NH_ID}h$h" 2>/dev/null); do
			kill -CONT "$p" 2>/dev/null
			kill -9 "$p" 2>/dev/null
		done
	done
	sleep 0.5
	nh_clear 2
	return 0
}
# the faults, all on host 2: frozen, killed, its link down, one rank killed
freeze() {
	for p in $(ip netns pids "sgh${NH_ID}h2"); do kill -STOP "$p"; done
}
slay() {
	for p in $(ip netns pids "sgh${NH_ID}h2"); do kill -9 "$p"; done
}
linkdown() {
	nh_link 2 down
}
killrank() {
	for p in $(ip netns pids "sgh${NH_ID}h2"); do
		[ "$(cat /proc/$p/comm 2>/dev/null)" = stepgraph ] && kill -9 "$p" && return 0
	done
}

