# multihost_env.sh - sourced by the multi-host tests after tests/test_env.sh
# and tests/ranks_env.sh: builds 2 hosts as network namespaces with
# scripts/netns_hosts.sh (skips, TAP, where they cannot be made), removes
# them at exit whatever happens (at_exit: before TMP goes), and defines
#   hosts NAME RPH DS ARGS...  stepgraph run across the 2 hosts, RPH ranks
#                              each (NAME.out, .err, .rc, .jsonl in TMP; at
#                              most 300 s), in the background when BG=1 (its
#                              mpirun: $MPID); a launch that failed before
#                              any rank started (Open MPI's start-up across
#                              the namespaces) is made once more, saying so
#   wait_for PID SECONDS       whether PID ended within SECONDS (else killed)
#   host_of R                  the address rank R ran on (from TMP/addr.R)
# Each rank writes its host's address to TMP/addr.RANK (rank.sh below).
NH_LIB=1
. "$SRC/scripts/netns_hosts.sh"
at_exit nh_down
if ! nh_up 2; then
	why=${NH_WHY:-could not make network namespaces}
	nh_down
	skip_all "$why"
fi
cat >"$TMP/mhrank.sh" <<SHEOF
r=\${OMPI_COMM_WORLD_RANK:-0}
export STARPU_HOME="$TMP/starpu.\$r"
mkdir -p "\$STARPU_HOME"
ip -4 -o addr show eth0 | awk '{ sub("/.*", "", \$4); print \$4 }' >"$TMP/addr.\$r"
exec "\$@"
SHEOF
MPID=""
# wait_for PID SECONDS: 0 once PID ended within SECONDS, 1 (PID killed) otherwise
wait_for() {
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt $(($2 * 10)) ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -0 "$1" 2>/dev/null || return 0
	kill -9 "$1" 2>/dev/null
	return 1
}
# launch_failed NAME: NAME's mpirun failed before any rank started (no
# TMP/addr.R written), in Open MPI's own start-up across the namespaces, not
# in stepgraph. Any failure is said on standard error with the last lines
# mpirun printed.
launch_failed() {
	[ "$(cat "$TMP/$1.rc")" = 0 ] && return 1
	echo "# $1: mpirun exit $(cat "$TMP/$1.rc"); the end of its standard error:" >&2
	tail -n 6 "$TMP/$1.err" | sed 's/^/#   /' >&2
	! ls "$TMP"/addr.* >/dev/null 2>&1
}
hosts() { # hosts NAME RPH DS ARGS...
	rm -f "$TMP"/addr.*
	launch "$@" || return 0
	launch_failed "$1" || return 0
	echo "# $1: no rank had started: launched again" >&2
	rm -f "$TMP"/addr.*
	launch "$@"
}
launch() { # launch NAME RPH DS ARGS...: 1 when in the background (BG=1)
	name=$1 rph=$2 cfg=$3
	shift 3
	nh_mpirun "$rph" -x STARPU_NCUDA -x STARPU_WORKERS_NOBIND -x STEPGRAPH_MODELS_DIR \
		sh "$TMP/mhrank.sh" "$BIN" run "$TMP/$cfg.json" --dp_size $((2 * rph)) \
		--max_length 32 --ncpus 1 --metrics "$TMP/$name.jsonl" "$@" \
		>"$TMP/$name.out" 2>"$TMP/$name.err" &
	MPID=$!
	[ "${BG:-0}" = 1 ] && return 1
	if wait_for $MPID 300; then
		wait $MPID
		echo $? >"$TMP/$name.rc"
	else
		echo "# $name: mpirun still running after 300 s, killed" >&2
		wait $MPID
		echo 124 >"$TMP/$name.rc"
	fi
}
host_of() {
	cat "$TMP/addr.$1" 2>/dev/null
}
