# test_env.sh - stepgraph's set-up of the shell tests, sourced right after
# `set -u`:
#   SG_TEST_NAME=NAME; . "${SG_SRCDIR:-.}/tests/test_env.sh"
# tests/tap_lib.sh (ok, skip, skip_all, done_testing, at_exit: see there);
# SRC (source tree), BUILD and BIN (the built stepgraph), PY (Debian's python3);
# the test skips (TAP "1..0 # SKIP") without stepgraph or python3; TMP, a
# temporary directory removed at exit; a private STARPU_HOME in it (this
# test's performance models only), CPU workers only (SG_TEST_CUDA=1 before
# sourcing: StarPU's default, every GPU), and StarPU's and stepgraph's own
# selection variables unset so the caller's shell cannot change what is
# tested; sg_needs_sim, which skips a test without stepgraph-sim.
SRC=${SG_SRCDIR:-.}
BUILD=${SG_BUILDDIR:-.}
BIN=$BUILD/stepgraph
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
. "$SRC/tests/tap_lib.sh"
if ! [ -x "$PY" ] || ! [ -x "$BIN" ]; then
	skip_all "needs $BIN and python3"
fi
tap_tmpdir "${SG_TEST_NAME:-test}"
tap_starpu_home
# Open MPI's session directories in TMP: one left by a killed rank cannot
# collide with a later test's job (same 16-bit job family: "File exists")
export OMPI_MCA_orte_tmpdir_base="$TMP"
unset STARPU_SCHED STARPU_NCPU STARPU_NCPUS STEPGRAPH_TASK_LOG SG_CPU_GEMM
if [ "${SG_TEST_CUDA:-0}" = 1 ]; then
	unset STARPU_NCUDA
else
	export STARPU_NCUDA=0
fi
# sg_needs_sim: skip the whole test (TAP) without the simulation program
sg_needs_sim() {
	[ -x "$BUILD/stepgraph-sim" ] ||
		skip_all "stepgraph-sim not built (no SimGrid flavour of StarPU)"
}
