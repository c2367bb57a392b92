#!/usr/bin/env bash
# gpu_verify.sh - on a lent GPU machine, every check docs/gpu.md lists as "not verified yet",
# in one command that fits the device tool's 10 minutes: stages in order of value, each under
# its own timeout and a total budget, a failing stage never stopping the later ones; one log
# per stage, a summary table (stage, pass/fail/skip, seconds, key numbers).
#
#   scripts/gpu_verify.sh                       # all stages, results in $OUT (device tool)
#   scripts/gpu_verify.sh --only bench,simulate # a second call for what the first left out
#   scripts/gpu_verify.sh --list                # the stages and their time caps
#   scripts/gpu_verify.sh --help
#
# Uses the binaries of .gpu-carry/ (scripts/gpu_prepare.sh, run on the CPU machine), else a
# build in the repository root. Without a GPU every GPU stage is reported as skip.
set -uo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF="$REPO_ROOT/scripts/gpu_verify.sh"

# name:cap-seconds, in the order they run (the most valuable first)
STAGES="env:30 cuda_ops:30 cuda_attention:30 attention_bench:60 cuda_block:45 train_gpu:100 cuda_vs_torch:45 mpi_np1:30 calibrate:180 memory:60 simulate:45 bench:240"

usage() {
	cat <<'EOF'
usage: scripts/gpu_verify.sh [options]

Runs, from the repository root, these stages (cap = its timeout in seconds):
  env            nvidia-smi, nvcc, torch, mpirun; `stepgraph version` (CUDA devices seen);
                 a library the programs cannot find is a failure
  cuda_ops       tests/test_cuda_ops on the GPU (every element-wise, norm, loss, Adam
                 kernel against the CPU kernels), TAP
  cuda_attention tests/test_cuda_attention (forward and backward against the CPU)
  attention_bench scripts/bench_attention.sh: the fp32 and cuBLAS attention routes timed
                 at FlashAttention-2's shapes (bf16, causal, T 4096, head dim 128 and 64),
                 TFLOPS against its 294; which one `auto` should run
  cuda_block     tests/test_cuda_block (every unit of five models, MoE included)
  train_gpu      tests/test_train_gpu.sh (fp32/bf16/SuperOffload training on a CUDA
                 worker against the CPU run; the two tiny mixture-of-experts models)
  cuda_vs_torch  scripts/check_cuda_vs_torch.sh (every CUDA op against PyTorch on the GPU)
  mpi_np1        mpirun -np 1 of the MPI build (.gpu-carry/mpi/stepgraph) on a CUDA worker:
                 MPI start-up, NCCL's unique id over MPI, ncclCommInitRank; fp32 ZeRO-3
                 losses within 1e-4 of the build without MPI; with the machine's Open MPI,
                 else the carried one (.gpu-carry's ompi/)
  calibrate      stepgraph calibrate of the SuperOffload GPU config (Llama-3.2-1B, bf16,
                 ZeRO-3, ratio 0.9, checkpointing) at a reduced sequence, nvidia-smi's
                 memory sampled beside it
  memory         the calibrate run's "peak memory, gpu" line (StarPU's count vs the plan
                 as StarPU's allocator holds it, graph/memory_held.h; 3 steps of its own
                 when calibrate failed;
                 issue 15: within 10%) and nvidia-smi's peak
  simulate       stepgraph simulate on the calibrated machine against the measured step
                 (issue 16: within 10%); --cost fitted when the history is too thin
  bench          scripts/bench_gpu.sh at a reduced size (stepgraph vs PyTorch offload and
                 all-GPU), with whatever time is left

Options:
  --out DIR       results (default $OUT, else /tmp/gpu-verify-out): summary.md, logs.txt and
                  results.tar.gz (reports, the calibrated machine, nvidia-smi samples)
  --budget S      total seconds for all stages (default 540: a 600 s device command)
  --only LIST     run only these stages (comma-separated; env always runs)
  --skip LIST     leave these out
  --carry DIR     the prepared folder (default .gpu-carry; without one, the build in the
                  repository root: ./stepgraph, tests/...)
  --list          print the stages and caps, run nothing
  -h, --help      this help

Sizes (environment): GV_SEQ (2048: calibrate, simulate, bench), GV_BATCH (micro batch,
default: the config's 4), GV_CAL_STEPS (10), GV_BENCH_STEPS (6), GV_BENCH_WARMUP (2);
GV_BENCH_MODES (bench_gpu.sh's peers, default offload,gpu; add deepspeed,superoffload for
DeepSpeed from the carry's wheels/: minutes more, its CPU Adam is JIT-built first);
GV_BENCH_ARGS (words for bench's stepgraph runs, e.g. "--speculation adaptive");
GV_BENCH_CALIBRATE (steps of bench's unreported stepgraph run first, default 2; 0 saves
that run's start-up, about a minute for the 1B config, and leaves StarPU's models to the
timed run's warm-up steps);
GV_CAP_<stage>=S overrides a stage's cap. GV_ASSUME_GPU=1 runs the
GPU stages without a device (they fail): for testing this script's failure paths.
Exit status: 0 when no stage failed (skips allowed), 1 when one failed, 2 usage error.
EOF
}

# ---- the stages ---------------------------------------------------------------------------

# Each stage runs as `gpu_verify.sh --stage NAME` under `timeout`, in the repository root,
# with GV_WORK (files), GV_LOG (its log is its stdout) and the carry's environment. It
# writes its key numbers to $GV_WORK/NAME.key and exits 0 pass, 1 fail, 77 skip
# (the reason is the key).

key() { printf '%s' "$*" >"$GV_WORK/$GV_STAGE.key"; }
skip() { key "$*"; exit 77; }
state() { sed -n "s/^$1=//p" "$GV_WORK/state" 2>/dev/null | tail -n1; }
# one STARPU_HOME for the stages whose runs may share StarPU's bus measurement and models
shared_starpu_home() {
	export STARPU_HOME=$GV_WORK/starpu
	mkdir -p "$STARPU_HOME"
}
need_gpu() {
	[ "${GV_ASSUME_GPU:-0}" = 1 ] && return 0
	[ "$(state gpu)" = 1 ] || skip "no CUDA device"
}

# tap_stage PROGRAM ARGS...: run a TAP program; pass when it planned N > 0, ran N and all ok
tap_stage() {
	local out rc planned okn notok
	out=$GV_WORK/$GV_STAGE.tap
	"$@" >"$out" 2>&1
	rc=$?
	cat "$out"
	if grep -q '^1\.\.0 *# *SKIP' "$out"; then
		skip "the program skipped: $(sed -n 's/^1\.\.0 *# *SKIP *//p' "$out" | head -n1)"
	fi
	planned=$(sed -n 's/^1\.\.\([0-9][0-9]*\).*/\1/p' "$out" | head -n1)
	okn=$(grep -c '^ok ' "$out")
	notok=$(grep -c '^not ok ' "$out")
	key "$okn ok, $notok not ok of ${planned:-?} planned${rc:+; exit $rc}$(grep -m3 '^not ok ' "$out" | sed 's/^/; /' | tr '\n' ' ')"
	[ "$rc" = 0 ] && [ "$notok" = 0 ] && [ -n "$planned" ] && [ "$okn" = "$planned" ] && [ "$planned" -gt 0 ]
}

stage_env() {
	local v ndev gpu=0 smi=""
	echo "== host"; uname -a; nproc; free -g 2>/dev/null | head -2
	echo "== nvidia-smi"
	if command -v nvidia-smi >/dev/null 2>&1; then
		nvidia-smi -L 2>&1
		smi=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n1)
		echo "$smi"
	else
		echo "no nvidia-smi"
	fi
	echo "== nvcc"; command -v nvcc && nvcc --version | tail -n2
	echo "== python"; command -v python3 && python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -n1
	echo "== MPI"; command -v mpirun && (mpirun --version 2>&1 | head -n1); ldconfig -p 2>/dev/null | grep 'libmpi\.so' || echo "no libmpi in ldconfig's cache"
	echo "== carry"; echo "${GV_CARRY_NOTE:-carry: $SG_CARRY}"; echo "SG_BUILDDIR=$SG_BUILDDIR"; [ -f "${SG_CARRY:-/nonexistent}/MANIFEST.txt" ] && sed -n '1,9p' "$SG_CARRY/MANIFEST.txt"
	echo "CUDA libraries in: ${SG_CUDA_LIBDIRS:-?}; not found: ${SG_CUDA_MISSING:-none}"
	echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
	local missing=""
	if [ -x "$SG_BUILDDIR/stepgraph" ]; then
		for b in "$SG_BUILDDIR/stepgraph" "$SG_BUILDDIR"/tests/test_cuda_ops "$SG_BUILDDIR"/tools/cuda_ops_dump; do
			[ -x "$b" ] || continue
			echo "== ldd $b"
			ldd "$b" 2>&1 | grep -E 'not found|GLIBC|starpu|cublas|cudart|nccl' || true
			ldd "$b" 2>&1 | grep 'not found' >/dev/null && missing="$missing $(basename "$b")"
		done
		echo "== stepgraph version"
		v=$("$SG_BUILDDIR/stepgraph" version 2>&1)
		echo "$v"
	else
		v=""
		echo "no $SG_BUILDDIR/stepgraph: run scripts/gpu_prepare.sh on the CPU machine (or build here)"
	fi
	ndev=$(printf '%s\n' "$v" | sed -n 's/.*CUDA devices: \([0-9]*\).*/\1/p' | head -n1)
	[ -n "$smi" ] && gpu=1
	[ "${ndev:-0}" -gt 0 ] && gpu=1
	{ echo "gpu=$gpu"; echo "ndev=${ndev:-0}"; echo "smi=$smi"; } >"$GV_WORK/state"
	local summary
	summary="stepgraph: $(printf '%s\n' "$v" | grep -m1 'CUDA' | sed 's/^ *//' || echo 'no stepgraph')"
	[ -n "$smi" ] && summary="$smi; $summary"
	[ -n "$missing" ] && summary="$summary; libraries not found for:$missing"
	[ -n "${GV_CARRY_NOTE:-}" ] && summary="$summary; ${GV_CARRY_NOTE}"
	case "${GV_CARRY_NOTE:-}" in "could not unpack"*) key "$summary"; return 1 ;; esac
	[ -n "${SG_CUDA_MISSING:-}" ] && summary="$summary; CUDA libraries not found: $SG_CUDA_MISSING"
	key "$summary"
	[ -n "$missing" ] && return 1
	[ -x "$SG_BUILDDIR/stepgraph" ] || return 1
	# a GPU that stepgraph does not see is a failure; no GPU at all is not
	if [ -n "$smi" ] && [ "${ndev:-0}" = 0 ]; then
		key "$summary; nvidia-smi lists a GPU that stepgraph does not see"
		return 1
	fi
	return 0
}

stage_cuda_ops() { need_gpu; [ -x "$SG_BUILDDIR/tests/test_cuda_ops" ] || skip "no $SG_BUILDDIR/tests/test_cuda_ops (a build without CUDA?)"; tap_stage "$SG_BUILDDIR/tests/test_cuda_ops"; }
stage_cuda_attention() { need_gpu; [ -x "$SG_BUILDDIR/tests/test_cuda_attention" ] || skip "no $SG_BUILDDIR/tests/test_cuda_attention"; tap_stage "$SG_BUILDDIR/tests/test_cuda_attention"; }
stage_attention_bench() {
	need_gpu
	[ -x "$SG_BUILDDIR/bench/bench_attention" ] || skip "no $SG_BUILDDIR/bench/bench_attention (a build without CUDA?)"
	local rc md=$GV_WORK/results/attention-bench.md
	scripts/bench_attention.sh --bin "$SG_BUILDDIR/bench/bench_attention" --out "$md"
	rc=$?
	key "$(tail -n1 "$md" 2>/dev/null || echo 'no result line'); exit $rc"
	[ "$rc" = 0 ]
}
stage_cuda_block() { need_gpu; [ -x "$SG_BUILDDIR/tests/test_cuda_block" ] || skip "no $SG_BUILDDIR/tests/test_cuda_block"; tap_stage "$SG_BUILDDIR/tests/test_cuda_block"; }
stage_train_gpu() {
	need_gpu
	SG_SRCDIR=. SYSTEM_PYTHON=$(command -v python3) tap_stage sh tests/test_train_gpu.sh
}

stage_cuda_vs_torch() {
	need_gpu
	[ -x "$SG_BUILDDIR/tools/cuda_ops_dump" ] || skip "no $SG_BUILDDIR/tools/cuda_ops_dump"
	local rc
	scripts/check_cuda_vs_torch.sh --bin "$SG_BUILDDIR/tools/cuda_ops_dump" --python python3 \
		--out "$GV_WORK/results/cuda-vs-torch.md" --dir "$GV_WORK/cvt"
	rc=$?
	local line
	line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$GV_WORK/results/cuda-vs-torch.md" 2>/dev/null | tail -n1)
	key "${line:-no result line}; exit $rc$(grep -m3 'FAIL' "$GV_WORK/results/cuda-vs-torch.md" 2>/dev/null | cut -c1-120 | sed 's/^/; /' | tr '\n' ' ')"
	rm -rf "$GV_WORK/cvt"
	[ "$rc" = 0 ]
}

# maxrel A.jsonl B.jsonl: the largest |a-b|/|a| over the steps, or "nan" on a bad file
maxrel() {
	python3 - "$1" "$2" <<'PYEOF'
import json, math, sys
def read(p):
    return [json.loads(l)["loss"] for l in open(p)]
try:
    a, b = read(sys.argv[1]), read(sys.argv[2])
    assert len(a) == len(b) and a, "different step counts"
    assert all(isinstance(x, (int, float)) and math.isfinite(x) for x in a + b), "a loss is not finite"
    print("%.2e" % max(abs(x - y) / abs(x) for x, y in zip(a, b)))
except Exception as e:
    print("nan (%s)" % e)
PYEOF
}

stage_mpi_np1() {
	need_gpu
	[ -n "${SG_CARRY:-}" ] && [ -x "$SG_CARRY/mpi/stepgraph" ] || skip "no MPI build in the carry (scripts/gpu_prepare.sh found no Open MPI?)"
	# this machine's Open MPI when it has one the MPI build links with, else the carried one
	local how=""
	if command -v mpirun >/dev/null 2>&1 && mpirun --version 2>&1 | grep 'Open MPI' >/dev/null &&
		! ldd "$SG_CARRY/mpi/stepgraph" | grep 'not found' >/dev/null; then
		how="this machine's $(mpirun --version 2>&1 | head -n1)"
	elif [ -x "$SG_CARRY/ompi/bin/mpirun" ]; then
		export OPAL_PREFIX="$SG_CARRY/ompi" PMIX_INSTALL_PREFIX="$SG_CARRY/ompi/pmix"
		export PATH="$SG_CARRY/ompi/bin:$PATH" LD_LIBRARY_PATH="$SG_CARRY/ompi/lib/runtime:$LD_LIBRARY_PATH"
		how="the carried $(mpirun --version 2>&1 | head -n1) (ompi/, OPAL_PREFIX)"
	else
		skip "no Open MPI mpirun here and none carried (gpu_prepare.sh --no-ompi?); the NCCL set-up over MPI waits"
	fi
	echo "MPI: $how"
	if ldd "$SG_CARRY/mpi/stepgraph" | grep 'not found'; then
		key "with $how: the MPI build's libraries are not all found"
		return 1
	fi
	# shellcheck disable=SC2034 # BIN, PY and TMP are train_lib.sh's
	local BIN PY TMP r1 r2 rel
	PY=$(command -v python3)
	TMP=$GV_WORK/mpi
	mkdir -p "$TMP"
	shared_starpu_home
	. tests/train_lib.sh
	# fp32 ZeRO-3 (all-gathers and reduce-scatters through NCCL): the two runs differ only by
	# the order of the kernels' fp32 atomics (attention's dQ, the embedding's gradient)
	ds z3 '{"zero_optimization": {"stage": 3, "sub_group_size": 100000}}'
	BIN=$SG_BUILDDIR/stepgraph
	train plain z3 --steps 5 --ncuda 1
	r1=$(cat "$TMP/plain.rc")
	echo "== without MPI: exit $r1"; tail -n 3 "$TMP/plain.out"; tail -n 3 "$TMP/plain.err"
	BIN="mpirun --allow-run-as-root --bind-to none -np 1 $SG_CARRY/mpi/stepgraph"
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	# shellcheck disable=SC2086
	$BIN run "$TMP/z3.json" --max_length 32 --steps 5 --ncuda 1 --metrics "$TMP/mpi.jsonl" >"$TMP/mpi.out" 2>"$TMP/mpi.err"
	r2=$?
	echo "== mpirun -np 1: exit $r2"; cat "$TMP/mpi.out"; tail -n 20 "$TMP/mpi.err"
	rel=failed
	[ "$r1" = 0 ] && [ "$r2" = 0 ] && rel=$(maxrel "$TMP/plain.jsonl" "$TMP/mpi.jsonl")
	key "$how; mpirun -np 1 exit $r2; losses vs the build without MPI: max rel $rel (<=1e-4)"
	[ "$r2" = 0 ] && python3 -c 'import sys; sys.exit(not float(sys.argv[1].split()[0]) <= 1e-4)' "$rel" 2>/dev/null
}

GV_CONFIG=configs/llama-3.2-1b-superoffload-gpu.json
run_opts() { # the run options calibrate, simulate and bench share
	printf '%s\n' --max_length "${GV_SEQ:-2048}"
	[ -n "${GV_BATCH:-}" ] && printf '%s\n' --set "train_micro_batch_size_per_gpu=$GV_BATCH"
}

stage_calibrate() {
	need_gpu
	local opts smi_pid rc base
	mapfile -t opts < <(run_opts)
	mkdir -p "$GV_WORK/results/machines"
	export STARPU_HOME=$GV_WORK/starpu-cal
	mkdir -p "$STARPU_HOME"
	base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n1)
	echo "nvidia-smi memory.used before: ${base:-?} MiB"
	# StarPU takes 90% of the RAM its hwloc sees at start-up as its main-memory limit
	echo "RAM before: $(grep -h MemTotal /proc/meminfo /sys/devices/system/node/node*/meminfo 2>/dev/null | tr -s ' ' | paste -sd';')"
	nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 200 \
		>"$GV_WORK/results/nvidia-smi-memory.csv" 2>/dev/null &
	smi_pid=$!
	STARPU_SILENT=0 "$SG_BUILDDIR/stepgraph" calibrate "$GV_CONFIG" --name gv-gpu --out "$GV_WORK/results/machines" \
		--steps "${GV_CAL_STEPS:-10}" --base h100-pcie --ncuda 1 "${opts[@]}"
	rc=$?
	echo "RAM after: $(grep -h MemTotal /proc/meminfo 2>/dev/null | tr -s ' ')"
	kill "$smi_pid" 2>/dev/null
	wait "$smi_pid" 2>/dev/null
	local peak ms
	peak=$(awk -F', *' '$2 ~ /^[0-9]+$/ && $2 > m { m = $2 } END { print m + 0 }' "$GV_WORK/results/nvidia-smi-memory.csv")
	{ echo "smi_base=${base:-0}"; echo "smi_peak=$peak"; } >>"$GV_WORK/state"
	ms=$(sed -n 's/.*(measured step \([0-9.]*\) ms).*/\1/p' "$GV_LOG" | tail -n1)
	echo "measured_ms=$ms" >>"$GV_WORK/state"
	key "exit $rc; seq ${GV_SEQ:-2048}, ${GV_CAL_STEPS:-10} steps; measured step ${ms:-?} ms; nvidia-smi peak ${peak} MiB (${base:-?} before)"
	[ "$rc" = 0 ] && [ -n "$ms" ]
}

stage_memory() {
	need_gpu
	local log=$GV_WORK/logs/calibrate.log line m p h pct hpct base peak opts
	line=$(grep -m1 'peak memory, gpu:' "$log" 2>/dev/null)
	if [ -z "$line" ]; then # calibrate failed: a short run of its own
		echo "no 'peak memory, gpu' line in the calibrate log: 3 steps of the GPU config"
		mapfile -t opts < <(run_opts)
		log=$GV_WORK/memory-run.log
		"$SG_BUILDDIR/stepgraph" run "$GV_CONFIG" --ncuda 1 --steps 3 --warmup_steps 0 "${opts[@]}" >"$log" 2>&1
		line=$(grep -m1 'peak memory, gpu:' "$log")
		[ -n "$line" ] || { tail -n 5 "$log"; key "the run printed no 'peak memory, gpu' line"; return 1; }
	fi
	echo "$line"
	grep -m1 'peak memory, host:' "$log"
	m=$(printf '%s' "$line" | sed -n 's/.*measured \([0-9.]*\) MiB.*/\1/p')
	p=$(printf '%s' "$line" | sed -n 's/.*planned \([0-9.]*\) MiB.*/\1/p')
	h=$(printf '%s' "$line" | sed -n "s/.*as StarPU's allocator holds it \([0-9.]*\) MiB.*/\1/p")
	base=$(state smi_base)
	peak=$(state smi_peak)
	over() { python3 -c 'import sys; m, p = map(float, sys.argv[1:]); print("%+.1f%%" % (100 * (m - p) / p))' "$1" "$2" 2>/dev/null; }
	pct=$(over "$m" "$p")
	hpct=$(over "$m" "$h")
	key "StarPU's GPU peak $m MiB vs live-bytes plan $p MiB ($pct) and vs its allocator's model ${h:-?} MiB (${hpct:-?}, target within 10%); nvidia-smi peak ${peak:-?} MiB, ${base:-?} before (process total: CUDA context, cuBLAS, the cudaMallocAsync pool)"
	python3 -c 'import sys; m, p = map(float, sys.argv[1:]); sys.exit(not (p > 0 and abs(m - p) <= 0.10 * p))' "$m" "$h"
}

stage_simulate() {
	need_gpu
	local machine=$GV_WORK/results/machines/gv-gpu.json opts rc ms sim cost=history
	[ -f "$machine" ] || skip "no calibrated machine (calibrate failed or did not run)"
	[ -n "${STEPGRAPH_SIM:-}" ] || [ -x "$SG_BUILDDIR/stepgraph-sim" ] || skip "no stepgraph-sim (gpu_prepare.sh --no-sim?): simulate here with results.tar.gz's machines/"
	mapfile -t opts < <(run_opts)
	ms=$(state measured_ms)
	"$SG_BUILDDIR/stepgraph" simulate "$GV_CONFIG" --machine "$machine" "${opts[@]}" >"$GV_WORK/sim.out" 2>&1
	rc=$?
	cat "$GV_WORK/sim.out"
	if [ "$rc" != 0 ]; then
		cost=fitted
		echo "== history failed (exit $rc); --cost fitted"
		"$SG_BUILDDIR/stepgraph" simulate "$GV_CONFIG" --machine "$machine" --cost fitted "${opts[@]}" >"$GV_WORK/sim.out" 2>&1
		rc=$?
		cat "$GV_WORK/sim.out"
	fi
	sim=$(sed -n 's/^ *Step time *\([0-9.]*\) ms.*/\1/p' "$GV_WORK/sim.out" | head -n1)
	local err
	err=$(python3 -c 'import sys; s, m = map(float, sys.argv[1:]); print("%+.1f%%" % (100 * (s - m) / m))' "$sim" "$ms" 2>/dev/null)
	key "exit $rc; cost $cost; simulated ${sim:-?} ms vs measured ${ms:-?} ms (${err:-?}, target within 10%)"
	[ "$rc" = 0 ] && python3 -c 'import sys; s, m = map(float, sys.argv[1:]); sys.exit(not abs(s - m) <= 0.10 * m)' "$sim" "$ms" 2>/dev/null
}

stage_bench() {
	need_gpu
	local rc md=$GV_WORK/results/bench-gpu.md args
	args=(--seq "${GV_SEQ:-2048}" --steps "${GV_BENCH_STEPS:-6}" --warmup "${GV_BENCH_WARMUP:-2}" --calibrate "${GV_BENCH_CALIBRATE:-2}" --python python3 --out "$md")
	[ -n "${GV_BATCH:-}" ] && args+=(--batch "$GV_BATCH")
	args+=(--modes "${GV_BENCH_MODES:-offload,gpu}")
	case ",${GV_BENCH_MODES:-}," in
	*,deepspeed,* | *,superoffload,*)
		# DeepSpeed from the carried wheels (gpu_prepare.sh), into a directory of its own
		gpu_carry_wheels "$GV_WORK/site" || true
		;;
	esac
	shared_starpu_home
	# GV_BENCH_ARGS: words for both stepgraph runs (e.g. "--speculation adaptive" or
	# "--set offload_optimizer.ratio=0.5")
	local extra=()
	read -r -a extra <<<"${GV_BENCH_ARGS:-}"
	[ "${#extra[@]}" -eq 0 ] || args+=(-- "${extra[@]}")
	BIN=$SG_BUILDDIR/stepgraph scripts/bench_gpu.sh "${args[@]}"
	rc=$?
	local row ratio mfu
	row=$(grep -m1 '^| stepgraph' "$md" 2>/dev/null | tr -s ' ')
	ratio=$(grep -m1 'tokens/s ratio' "$md" 2>/dev/null | sed 's/^[-* ]*//')
	mfu=$(grep -m1 'target stepgraph MFU' "$md" 2>/dev/null | sed 's/^[-* ]*//')
	key "exit $rc; ${row:-no stepgraph row}; ${ratio:-no ratio}; ${mfu:-}"
	[ "$rc" = 0 ]
}

# ---- one stage (internal: the driver below runs each so, under timeout) --------------------
if [ "${1:-}" = --stage ]; then
	GV_STAGE=$2
	cd "$REPO_ROOT" || exit 1
	type "stage_$GV_STAGE" >/dev/null 2>&1 || { echo "no stage $GV_STAGE" >&2; exit 2; }
	"stage_$GV_STAGE"
	exit $?
fi

# ---- the driver --------------------------------------------------------------------------
OUTDIR=${OUT:-} BUDGET=540 ONLY="" SKIP="" CARRY=.gpu-carry LIST=0
need() {
	if [ "$#" -lt 2 ] || [ -z "$2" ]; then
		usage >&2
		echo "gpu_verify: option $1 needs a value" >&2
		exit 2
	fi
}
while [ "$#" -gt 0 ]; do
	case "$1" in
	--out) need "$@"; OUTDIR=$2; shift 2 ;;
	--budget) need "$@"; BUDGET=$2; shift 2 ;;
	--only) need "$@"; ONLY=$2; shift 2 ;;
	--skip) need "$@"; SKIP=$2; shift 2 ;;
	--carry) need "$@"; CARRY=$2; shift 2 ;;
	--list) LIST=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; echo "gpu_verify: unknown option: $1" >&2; exit 2 ;;
	esac
done
case "$BUDGET" in '' | *[!0-9]*) echo "gpu_verify: --budget $BUDGET: seconds" >&2; exit 2 ;; esac
for s in ${ONLY//,/ } ${SKIP//,/ }; do
	case " $STAGES " in *" $s:"*) ;; *) echo "gpu_verify: no stage '$s' (--list)" >&2; exit 2 ;; esac
done
if [ "$LIST" = 1 ]; then
	for s in $STAGES; do printf '%-15s %4s s\n' "${s%%:*}" "${s#*:}"; done
	exit 0
fi

# paths given relative to the caller's directory, before moving to the repository root
OUTDIR=${OUTDIR:-${TMPDIR:-/tmp}/gpu-verify-out}
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
if [ -n "${SG_BUILDDIR:-}" ] && [ -d "$SG_BUILDDIR" ]; then SG_BUILDDIR=$(cd "$SG_BUILDDIR" && pwd); fi
case "$CARRY" in /* | .gpu-carry) ;; *) [ -e "$CARRY" ] && CARRY=$(cd "$CARRY" && pwd) ;; esac
cd "$REPO_ROOT" || exit 1
GV_WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-verify.XXXXXX")
mkdir -p "$GV_WORK/logs" "$GV_WORK/results"
export GV_WORK
trap 'rm -rf "$GV_WORK"' EXIT

# the carry's environment (its archive unpacked into /tmp), else the build in the repository
# root (scripts/gpu_carry_env.sh)
# shellcheck disable=SC1091
. "$REPO_ROOT/scripts/gpu_carry_env.sh"
gpu_carry_env "$CARRY" "$REPO_ROOT"
export GV_CARRY_NOTE=$CARRY_NOTE
export STARPU_SILENT=1 PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
unset STARPU_NCPU STARPU_NCPUS STARPU_NCUDA STARPU_SCHED

SUMMARY=$OUTDIR/summary.md
LOGS=$OUTDIR/logs.txt
START=$(date +%s)
DEADLINE=$((START + BUDGET))
ROWS=()
NPASS=0 NFAIL=0 NSKIP=0
: >"$LOGS"

gpu_line() { sed -n 's/^smi=//p' "$GV_WORK/state" 2>/dev/null | tail -n1; }
write_summary() {
	local now
	now=$(date +%s)
	{
		echo "# gpu_verify summary"
		echo
		echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host $(hostname 2>/dev/null || echo ?)"
		echo "- GPU: $(g=$(gpu_line); echo "${g:-none seen}")"
		echo "- source: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
		echo "- binaries: ${SG_CARRY:+$SG_CARRY ($(sed -n 's/^source: //p' "$SG_CARRY/MANIFEST.txt" 2>/dev/null)) }$SG_BUILDDIR"
		echo
		echo "| stage | result | seconds | key numbers |"
		echo "|---|---|---:|---|"
		local r
		for r in "${ROWS[@]+"${ROWS[@]}"}"; do echo "$r"; done
		echo
		echo "result: $NPASS pass, $NFAIL fail, $NSKIP skip; $((now - START)) s of a $BUDGET s budget"
	} >"$SUMMARY.tmp" && mv "$SUMMARY.tmp" "$SUMMARY"
}
selected() {
	local s=$1
	[ "$s" = env ] && return 0
	if [ -n "$ONLY" ]; then
		case ",$ONLY," in *",$s,"*) ;; *) return 1 ;; esac
	fi
	case ",$SKIP," in *",$s,"*) return 1 ;; esac
	return 0
}

for entry in $STAGES; do
	name=${entry%%:*}
	cap=${entry#*:}
	v="GV_CAP_$name"
	[ -n "${!v:-}" ] && cap=${!v}
	selected "$name" || continue
	now=$(date +%s)
	left=$((DEADLINE - now))
	[ "$name" = bench ] && cap=$((cap > left ? left : cap))
	t=$((cap < left ? cap : left))
	log=$GV_WORK/logs/$name.log
	if [ "$left" -lt 10 ]; then
		res=skip keytxt="no time left in the $BUDGET s budget (rerun with --only $name)" secs=0
		echo "(not run: no time left)" >"$log"
	else
		printf 'gpu_verify: %-15s (cap %s s) ...\n' "$name" "$t" >&2
		s0=$(date +%s)
		GV_LOG=$log timeout -k 10 "$t" "$SELF" --stage "$name" >"$log" 2>&1
		rc=$?
		secs=$(($(date +%s) - s0))
		keytxt=$(cat "$GV_WORK/$name.key" 2>/dev/null)
		case "$rc" in
		0) res=pass ;;
		77) res=skip ;;
		124 | 137) res=fail keytxt="timed out after $t s${keytxt:+; $keytxt}" ;;
		*) res=fail ;;
		esac
		if [ "$res" = fail ]; then # the log's last words, which often say why
			last=$(grep -v '^[[:space:]-]*$' "$log" | tail -n1 | cut -c1-160)
			[ -n "$last" ] && keytxt="${keytxt:+$keytxt; }log ends: $last"
		fi
	fi
	case "$res" in pass) NPASS=$((NPASS + 1)) ;; fail) NFAIL=$((NFAIL + 1)) ;; skip) NSKIP=$((NSKIP + 1)) ;; esac
	keytxt=$(printf '%s' "$keytxt" | tr '\n|' ' /' | cut -c1-400)
	ROWS+=("| $name | $res | $secs | $keytxt |")
	printf 'gpu_verify: %-15s %-4s %4s s  %s\n' "$name" "$res" "$secs" "$keytxt" >&2
	{
		echo "=================== $name: $res, $secs s"
		cat "$log"
		echo
	} >>"$LOGS"
	write_summary
done

# results.tar.gz: the reports, the calibrated machine, nvidia-smi's samples
if [ -n "$(ls -A "$GV_WORK/results")" ]; then
	tar -C "$GV_WORK" -czf "$OUTDIR/results.tar.gz" results 2>/dev/null ||
		echo "gpu_verify: could not write results.tar.gz" >&2
fi
write_summary
cat "$SUMMARY"
[ "$NFAIL" = 0 ]
