#!/bin/sh
# test_dist_ranks.sh - runtime/dist's collectives across 3 ranks: tests/test_dist
# under mpirun (oversubscribed, as root allowed); rank 0 prints the TAP.
# Skips without mpirun or without MPI support in this build.
set -u
BUILD=${SG_BUILDDIR:-.}
. "${SG_SRCDIR:-.}/tests/tap_lib.sh"
MPIRUN_BIN=$(command -v mpirun || true)
if [ -z "$MPIRUN_BIN" ]; then
	skip_all "no mpirun (apt-get install openmpi-bin libopenmpi-dev)"
fi
if ! [ -x "$BUILD/tests/test_dist" ] || "$BUILD/stepgraph" run --help | grep -q "This build has no MPI support"; then
	skip_all "no MPI support in this build"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
exec timeout 120 "$MPIRUN_BIN" --oversubscribe --bind-to none -np 3 "$BUILD/tests/test_dist"
