#!/usr/bin/env bash
# bench_adam_chain.sh - the whole CPU optimizer chain of a bf16 CPU sub-group
# per parameter (issue 39): stepgraph with unfused casts (cast.grad bf16 ->
# fp32, adam_cpu, cast.param fp32 -> bf16: 40 bytes per parameter) and with
# cast_placement "fused" (one pass, 28 bytes), against this machine's copy
# bandwidth (the copy probe of `stepgraph calibrate`) and against DeepSpeed's
# chain on the same machine, in one run.
#
#   scripts/bench_adam_chain.sh              # N = 64M parameters, 1 and 2 threads
#   N=16e6 THREADS=1,2,4 REPS=5 scripts/bench_adam_chain.sh
#   MODE=chain scripts/bench_adam.sh         # the same
#   BENCH_OFFLINE=1 scripts/bench_adam_chain.sh   # no PyPI: only what is installed
#
# DeepSpeed's columns (deepspeed.ops.adam.DeepSpeedCPUAdam, adamw_mode, from
# the benchmark environment of scripts/bench_venv.sh; its cpu_adam extension
# is JIT-built on first use), each in its own process per thread count, with
# OMP_NUM_THREADS and torch.set_num_threads set to T:
#   DS chain      g32.copy_(g_bf16); step(); p_bf16.copy_(p32): the CPU Adam
#                 with the gradient cast to fp32 and the parameters cast back
#                 to bf16 on the host, as stepgraph's unfused chain (40 B)
#   DS offload    step(); p_bf16.copy_(p32): what DeepSpeed 0.19's ZeRO-Offload
#                 host runs per partition. The gradient arrives already fp32:
#                 stage_1_and_2.py casts it on the GPU (src_tensor.to(fp32))
#                 before a non_blocking D2H copy_ into the fp32 partition's grad
#                 (copy_grads_in_partition); SuperOffload's superoffload_stage3.py
#                 (partition_grads) likewise; after the step the fp32 partition
#                 is copied into a bf16 host buffer (bit16_partition_buffer.copy_,
#                 a CPU cast: torch casts on the CPU for a blocking copy_, and
#                 that buffer is host memory) and then to the GPU. 34 B on the
#                 host, plus the fp32 gradient written by the D2H (4 B against
#                 stepgraph's 2)
#   DS step       step() alone (28 B)
# All use lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01; the
# figures are the best of REPS rounds after a warm-up round.
#
# Environment: N, THREADS (comma list), REPS, CC, SG_ADAM_ISA (stepgraph's
# variant), and those of scripts/bench_venv.sh (BENCH_OFFLINE=1, BENCH_NO_VENV=1...).
# Needs ~3 GB of memory at N = 64M (and the copy probe's buffers: up to a
# quarter of the RAM); about 2 minutes on 2 cores once the environment exists.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sg_env_only_args "$@"
N=${N:-67108864}
THREADS=${THREADS:-1,2}
REPS=${REPS:-5}
CC=${CC:-gcc}
# shellcheck source=scripts/bench_lib.sh
. "$REPO_ROOT/scripts/bench_lib.sh"
bench_check_args

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

say "building bench/bench_adam_chain.c"
vect=(-ftree-vectorize -fvect-cost-model=dynamic)
"$CC" -std=gnu11 -O2 -Wall -Wextra -I"$REPO_ROOT" "${vect[@]}" -fno-math-errno -fno-trapping-math \
	-c "$REPO_ROOT"/codelets/cpu/lion_adagrad.c -o "$tmp/lion_adagrad.o"
"$CC" -std=gnu11 -O2 -Wall -Wextra -I"$REPO_ROOT" "${vect[@]}" \
	"$REPO_ROOT"/codelets/cpu/adam.c "$REPO_ROOT"/codelets/cpu/adam_variants.c \
	"$REPO_ROOT"/codelets/cpu/adam_lowp.c "$tmp/lion_adagrad.o" \
	"$REPO_ROOT"/codelets/cpu/cast.c "$REPO_ROOT"/common/error.c "$REPO_ROOT"/common/dtype.c \
	"$REPO_ROOT"/common/host_ram.c "$REPO_ROOT"/runtime/sim/host_probe.c \
	"$REPO_ROOT"/bench/bench_adam_chain.c -lm -lpthread -o "$tmp/bench_adam_chain"

cat >"$tmp/peer_chain.py" <<'PYEOF'
import sys, time
kind, n, t, reps = sys.argv[1], int(float(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
import torch
torch.set_num_threads(t)
if torch.get_num_threads() != t:
    sys.exit("torch.set_num_threads(%d) gave %d" % (t, torch.get_num_threads()))
from deepspeed.ops.adam import DeepSpeedCPUAdam
torch.manual_seed(0)
p32 = torch.nn.Parameter(torch.rand(n) - 0.5)       # the fp32 partition
g16 = ((torch.rand(n) - 0.5) * 0.01).to(torch.bfloat16)  # the bf16 gradients
g32 = torch.zeros(n)                                 # the fp32 partition's grad
p32.grad = g32
p16 = torch.zeros(n, dtype=torch.bfloat16)           # the bf16 host parameter buffer
opt = DeepSpeedCPUAdam([p32], adamw_mode=True, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                       weight_decay=0.01)
def once():
    if kind == "chain":
        g32.copy_(g16)
    opt.step()
    if kind != "step":
        p16.copy_(p32.data)
once()
best = float("inf")
for _ in range(reps):
    t0 = time.perf_counter()
    once()
    best = min(best, time.perf_counter() - t0)
if not bool(torch.isfinite(p32).all()):
    sys.exit("non-finite parameters after the steps")
print("peer_seconds=%.6f" % best)
PYEOF

# time_peer LABEL KIND: "T:SECONDS,..." over THREADS (0 where it failed)
time_peer() { bench_time_peer "$1" "$BENCH_PY" "$tmp/peer_chain.py" "$2"; }

# shellcheck source=scripts/bench_venv.sh
. "$REPO_ROOT/scripts/bench_venv.sh"
bench_venv_setup
peer_args=()
if [ "$BENCH_HAVE_DS" = 1 ]; then
	say "DeepSpeedCPUAdam: the first use JIT-builds its extension (minutes; then cached)"
	peer_args+=(--peer "DS chain (40 B)=$(time_peer "DeepSpeed chain" chain)")
	peer_args+=(--peer "DS offload (34 B)=$(time_peer "DeepSpeed ZeRO-Offload host" offload)")
	peer_args+=(--peer "DS step (28 B)=$(time_peer "DeepSpeedCPUAdam step" step)")
else
	say "no DeepSpeed in the benchmark environment: its columns show n/a"
	peer_args+=(--peer "DS chain (40 B)=" --peer "DS offload (34 B)=" --peer "DS step (28 B)=")
fi

say "timing stepgraph's chains and the copy probe"
"$tmp/bench_adam_chain" --n "$N" --threads "$THREADS" --reps "$REPS" "${peer_args[@]}"
printf '\nreproduce: N=%s THREADS=%s REPS=%s scripts/bench_adam_chain.sh   (on %s, %s CPUs: %s)\n' \
	"$N" "$THREADS" "$REPS" "$(uname -m)" "$(nproc)" \
	"$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //')"
