# tap_lib.sh - TAP output, a temporary directory and clean-up for the shell
# tests; sourced after `set -u` (tests/test_env.sh sources it and adds
# stepgraph's own set-up: most tests source that one instead):
#   . "${SG_SRCDIR:-.}/tests/tap_lib.sh"
#
#   ok STATUS DESCRIPTION  check $n: "ok N - DESCRIPTION", or "not ok" when
#                          STATUS is not 0 (counted in $failed)
#   skip REASON [COUNT]    COUNT checks (1) that cannot run here: "ok N # SKIP REASON"
#   skip_all REASON        the whole test cannot run: "1..0 # SKIP REASON", exit 0
#                          (automake's tap-driver counts exit status 77 as an error)
#   plan COUNT             the plan first, for a test that knows its count
#   done_testing           the plan last ("1..$n"); its status is 1 if a check failed
#   at_exit COMMAND        run COMMAND (a shell string) when the test ends; the
#                          commands run newest first, each whatever the others
#                          did, so a test adds its own clean-up (background
#                          processes, mounts) without replacing the EXIT trap
#   tap_tmpdir NAME        TMP, a new directory ${TMPDIR:-/tmp}/sg_NAME.XXXXXX,
#                          removed at exit
#   tap_starpu_home        a private STARPU_HOME in TMP: the test's own
#                          performance models, none read from or left in ~/.starpu
#
# An interrupt, SIGTERM (timeout, make's ^C) or SIGHUP ends the test with
# 128 + the signal's number after the clean-up, which sh's EXIT trap alone
# would skip.
# Sourced twice (a helper library that needs it too), it keeps its state.
if [ -z "${tap_lib_loaded:-}" ]; then
	tap_lib_loaded=1
	n=0
	failed=0
	tap_at_exit=
	trap 'tap_cleanup' EXIT
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM
fi

ok() {
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		failed=$((failed + 1))
	fi
}

skip() {
	_tap_i=0
	while [ "$_tap_i" -lt "${2:-1}" ]; do
		n=$((n + 1))
		echo "ok $n # SKIP $1"
		_tap_i=$((_tap_i + 1))
	done
}

skip_all() {
	echo "1..0 # SKIP $1"
	exit 0
}

plan() { echo "1..$1"; }

done_testing() {
	echo "1..$n"
	[ "$failed" -eq 0 ]
}

at_exit() {
	tap_at_exit="$1
$tap_at_exit"
}

# the EXIT trap: every registered command, newest first; the test's own
# exit status stands (sh keeps it when the trap does not call exit)
tap_cleanup() {
	eval "$tap_at_exit"
}

tap_tmpdir() {
	TMP=$(mktemp -d "${TMPDIR:-/tmp}/sg_$1.XXXXXX") || {
		echo "Bail out! mktemp -d in ${TMPDIR:-/tmp} failed"
		exit 1
	}
	at_exit 'rm -rf "$TMP"'
}

tap_starpu_home() {
	export STARPU_HOME="$TMP/starpu"
	mkdir -p "$STARPU_HOME"
}
