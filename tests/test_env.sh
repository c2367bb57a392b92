# test_env.sh - the set-up the shell tests share, sourced right after `set -u`
# (it also defines ok STATUS DESCRIPTION, the TAP line of check $n, and
# sg_needs_sim, which skips a test without stepgraph-sim):
#   SG_TEST_NAME=NAME; . "${SG_SRCDIR:-.}/tests/test_env.sh"
# SRC (source tree), BUILD and BIN (the built stepgraph), PY (Debian's python3);
# the test skips (TAP "1..0 # SKIP") without stepgraph or python3; TMP, a
# temporary directory removed at exit; a private STARPU_HOME in it (this
# test's performance models only), CPU workers only, and StarPU's and
# stepgraph's own selection variables unset so the caller's shell cannot
# change what is tested.
SRC=${SG_SRCDIR:-.}
BUILD=${SG_BUILDDIR:-.}
BIN=$BUILD/stepgraph
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
if ! [ -x "$PY" ] || ! [ -x "$BIN" ]; then
	echo "1..0 # SKIP needs $BIN and python3"
	exit 0
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sg_${SG_TEST_NAME:-test}.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export STARPU_HOME="$TMP/starpu"
mkdir -p "$STARPU_HOME"
unset STARPU_SCHED STARPU_NCPU STARPU_NCPUS STEPGRAPH_TASK_LOG SG_CPU_GEMM
export STARPU_NCUDA=0
# ok STATUS DESCRIPTION: the TAP line of check $n
n=0
ok() {
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}
# sg_needs_sim: skip the whole test (TAP) without the simulation program
sg_needs_sim() {
	if ! [ -x "$BUILD/stepgraph-sim" ]; then
		echo "1..0 # SKIP stepgraph-sim not built (no SimGrid flavour of StarPU)"
		exit 0
	fi
}
