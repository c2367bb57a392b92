# ranks_env.sh - sourced by the tests that launch several ranks (after
# tests/test_env.sh): skips (TAP, exit 0) without mpirun or without MPI
# support in this build, sets up Open MPI for two ranks on two cores as root
# (no binding, oversubscription allowed, idle ranks yield), and writes
# $TMP/rank.sh, a wrapper that gives each rank its own StarPU home
# (performance models are written at exit), and $TMP/bad1.sh, the same
# wrapper that gives rank 1 alone a data file that does not exist. Defines
# ds (a config); ok and the rest of TAP come from tests/tap_lib.sh.
MPIRUN_BIN=$(command -v mpirun || true)
if [ -z "$MPIRUN_BIN" ]; then
	skip_all "no mpirun (apt-get install openmpi-bin libopenmpi-dev)"
fi
if "$BIN" run --help | grep -q "This build has no MPI support"; then
	skip_all "stepgraph was built without MPI support"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 STARPU_WORKERS_NOBIND=1
export STEPGRAPH_MODELS_DIR=${STEPGRAPH_MODELS_DIR:-$SRC/models}
cat >"$TMP/rank.sh" <<'SHEOF'
export STARPU_HOME="$STARPU_HOME.${OMPI_COMM_WORLD_RANK:-0}"
mkdir -p "$STARPU_HOME"
exec "$@"
SHEOF
cat >"$TMP/bad1.sh" <<'SHEOF'
export STARPU_HOME="$STARPU_HOME.${OMPI_COMM_WORLD_RANK:-0}"
mkdir -p "$STARPU_HOME"
if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then exec "$@" --data /nonexistent/rank1.bin; fi
exec "$@"
SHEOF

# ds NAME MICRO ACCUM ZERO-JSON [EXTRA-JSON]: $TMP/NAME.json, a DeepSpeed
# config of AdamW with clipping (a test may define its own after sourcing)
ds() {
	cat >"$TMP/$1.json" <<JEOF
{"train_micro_batch_size_per_gpu": $2, "gradient_accumulation_steps": $3,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.01}},
 "gradient_clipping": 1.0, "zero_optimization": $4 ${5:+, $5}}
JEOF
}

