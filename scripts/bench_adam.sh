#!/usr/bin/env bash
# bench_adam.sh - CPU Adam: stepgraph's sg_adam_step against the CPU AdamW a user
# would otherwise run, on the same thread counts, and against this machine's
# memory bandwidth bound (28 bytes per fp32 parameter), in one run.
#
#   scripts/bench_adam.sh                    # N = 64M parameters, 1 and 2 threads
#   OPTIM=lion scripts/bench_adam.sh         # Lion (or OPTIM=adagrad) instead of Adam
#   N=16e6 THREADS=1,2,4 REPS=5 scripts/bench_adam.sh
#   BENCH_OFFLINE=1 scripts/bench_adam.sh    # no PyPI: only what is installed
#   MODE=chain scripts/bench_adam.sh         # the whole bf16 CPU chain, casts
#                                            # unfused and fused, against DeepSpeed's
#                                            # (scripts/bench_adam_chain.sh)
#
# Peers (a column each; "best peer" and "ours/best" compare with the fastest):
#   torch 1.13 foreach   Debian's python3-torch ($SYSTEM_PYTHON, default
#                        /usr/bin/python3): torch.optim.AdamW(foreach=True)
#   torch 2.x foreach    PyTorch 2.x from PyPI in the benchmark environment
#   torch 2.x fused      (scripts/bench_venv.sh, ~/.cache/stepgraph/venv-bench):
#                        AdamW(foreach=True) and AdamW(fused=True)
#   DeepSpeedCPUAdam     deepspeed.ops.adam.DeepSpeedCPUAdam(adamw_mode=True) from
#                        the same environment; its cpu_adam extension is
#                        JIT-built with ninja on first use (minutes, cached in
#                        ~/.cache/torch_extensions); a failed build shows why and n/a
# All use lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 on one fp32
# parameter of N elements with a gradient.
# OPTIM=lion: sg_adam_step's Lion (lr 1e-4, betas (0.9, 0.99), decay 0.01)
#   against DeepSpeed's DeepSpeedCPULion (PyTorch has no Lion); the bound is
#   20 bytes per parameter (read p, g, m; write p, m).
# OPTIM=adagrad: its Adagrad (lr 1e-2, eps 1e-10, L2 0.01) against
#   torch.optim.Adagrad(foreach=True) (Debian's and PyPI's torch),
#   Adagrad(fused=True) where that torch has it, and DeepSpeedCPUAdagrad;
#   20 bytes per parameter. Each peer runs in its own process
# per thread count, one at a time, with OMP_NUM_THREADS, MKL_NUM_THREADS and
# OPENBLAS_NUM_THREADS set to T before import and torch.set_num_threads(T)
# (DeepSpeed's cpu_adam parallelises with OpenMP, `#pragma omp parallel for`
# in its own libgomp, so OMP_NUM_THREADS is what sizes it), and reports the
# best of REPS steps after one warm-up step (which allocates the moments).
#
# Environment: MODE (step, the default, or chain), OPTIM (adam, lion, adagrad), N (parameters), THREADS (comma list), REPS, SYSTEM_PYTHON, CC,
# SG_ADAM_ISA=scalar|avx2|avx512|neon (the variant of the main column), and those of
# scripts/bench_venv.sh (BENCH_VENV, BENCH_OFFLINE=1, BENCH_NO_VENV=1, ...).
# When PyPI cannot be reached and the environment does not exist yet, the PyPI
# columns show n/a.
#
# Builds bench/bench_adam.c with ${CC:-gcc} into a temporary directory, times
# the peers, then sg_adam, and prints the table. About 1 min on 2 cores with
# the defaults once the environment exists; needs ~2.5 GB of memory.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sg_env_only_args "$@"
case "${MODE:-step}" in
step) ;;
chain) exec "$REPO_ROOT/scripts/bench_adam_chain.sh" ;;
*)
	printf 'bench_adam: MODE must be step or chain (got %s)\n' "$MODE" >&2
	exit 2
	;;
esac
N=${N:-67108864}
THREADS=${THREADS:-1,2}
REPS=${REPS:-5}
OPTIM=${OPTIM:-adam}
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
CC=${CC:-gcc}

# shellcheck source=scripts/bench_lib.sh
. "$REPO_ROOT/scripts/bench_lib.sh"
bench_check_args
case "$OPTIM" in adam | lion | adagrad) ;; *)
	say "OPTIM must be adam, lion or adagrad (got '$OPTIM')"
	exit 2
	;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

say "building bench/bench_adam.c"
# lion_adagrad.c with the flags Makefile.am gives it (its loops are vectorised
# by the compiler: without them they stay scalar, the same bits, slower)
"$CC" -std=gnu11 -O2 -Wall -Wextra -I"$REPO_ROOT" -ftree-vectorize -fvect-cost-model=dynamic \
	-fno-math-errno -fno-trapping-math -c "$REPO_ROOT"/codelets/cpu/lion_adagrad.c \
	-o "$tmp/lion_adagrad.o"
"$CC" -std=gnu11 -O2 -Wall -Wextra -I"$REPO_ROOT" \
	"$REPO_ROOT"/codelets/cpu/adam.c "$REPO_ROOT"/codelets/cpu/adam_variants.c \
	"$REPO_ROOT"/codelets/cpu/adam_lowp.c "$REPO_ROOT"/codelets/cpu/cast.c "$tmp/lion_adagrad.o" \
	"$REPO_ROOT"/common/error.c "$REPO_ROOT"/common/dtype.c \
	"$REPO_ROOT"/bench/bench_adam.c -lm -lpthread -o "$tmp/bench_adam"

# One peer at one thread count, in its own process: prints the best seconds per step.
cat >"$tmp/peer_adam.py" <<'PYEOF'
import inspect, sys, time
kind, n, t, reps = sys.argv[1], int(float(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
optim = sys.argv[5]
import torch
torch.set_num_threads(t)
if torch.get_num_threads() != t:
    sys.exit("torch.set_num_threads(%d) gave %d" % (t, torch.get_num_threads()))
torch.manual_seed(0)
p = torch.nn.Parameter(torch.rand(n) - 0.5)
p.grad = torch.rand(n) - 0.5
hp = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
if optim == "lion":
    if kind != "deepspeed":
        sys.exit("PyTorch has no Lion")
    from deepspeed.ops.lion import DeepSpeedCPULion
    opt = DeepSpeedCPULion([p], lr=1e-4, betas=(0.9, 0.99), weight_decay=0.01)
elif optim == "adagrad":
    hp = dict(lr=1e-2, eps=1e-10, weight_decay=0.01)
    if kind == "deepspeed":
        from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
        opt = DeepSpeedCPUAdagrad([p], **hp)
    else:
        params = inspect.signature(torch.optim.Adagrad.__init__).parameters
        if kind == "fused" and "fused" not in params:
            sys.exit("torch %s has no Adagrad(fused=...)" % torch.__version__)
        kw = {"fused": True} if kind == "fused" else {"foreach": True}
        opt = torch.optim.Adagrad([p], **hp, **kw)
elif kind == "deepspeed":
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    opt = DeepSpeedCPUAdam([p], adamw_mode=True, **hp)
else:
    params = inspect.signature(torch.optim.AdamW.__init__).parameters
    if kind == "fused":
        if "fused" not in params:
            sys.exit("torch %s has no AdamW(fused=...)" % torch.__version__)
        kw = {"fused": True}
    else:
        kw = {"foreach": True}
        if "fused" in params:
            kw["fused"] = False
    opt = torch.optim.AdamW([p], **hp, **kw)
opt.step()
best = float("inf")
for _ in range(reps):
    t0 = time.perf_counter()
    opt.step()
    best = min(best, time.perf_counter() - t0)
if not bool(torch.isfinite(p).all()):
    sys.exit("non-finite parameters after the steps")
print("peer_seconds=%.6f" % best)  # DeepSpeed logs to stdout too
PYEOF

# time_peer LABEL PYTHON KIND: "T:SECONDS,..." over THREADS (0 where it failed)
time_peer() { bench_time_peer "$1" "$2" "$tmp/peer_adam.py" "$3" "$OPTIM"; }

# the optimizer's class names, for the column headers
case $OPTIM in
adam) tname=AdamW dsname=DeepSpeedCPUAdam ;;
lion) tname="" dsname=DeepSpeedCPULion ;;
adagrad) tname=Adagrad dsname=DeepSpeedCPUAdagrad ;;
esac
peer_args=()
if [ -z "$tname" ]; then
	say "PyTorch has no $OPTIM: no torch columns"
elif "$PY" -c 'import torch' 2>/dev/null; then
	sys_torch=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
	peer_args+=(--peer "torch $sys_torch foreach=$(time_peer "Debian torch $sys_torch $tname(foreach)" "$PY" foreach)")
else
	say "no torch in $PY: its column shows n/a"
	peer_args+=(--peer "Debian torch foreach=")
fi

# shellcheck source=scripts/bench_venv.sh
. "$REPO_ROOT/scripts/bench_venv.sh"
bench_venv_setup
if [ -z "$tname" ]; then
	:
elif [ -n "$BENCH_PY" ]; then
	vt=$("$BENCH_PY" -c 'import torch; print(torch.__version__.split("+")[0])')
	peer_args+=(--peer "torch $vt foreach=$(time_peer "PyPI torch $vt $tname(foreach)" "$BENCH_PY" foreach)")
	peer_args+=(--peer "torch $vt fused=$(time_peer "PyPI torch $vt $tname(fused)" "$BENCH_PY" fused)")
else
	peer_args+=(--peer "PyPI torch foreach=" --peer "PyPI torch fused=")
fi
if [ "$BENCH_HAVE_DS" = 1 ]; then
	say "$dsname: the first use JIT-builds its extension (minutes; then cached)"
	peer_args+=(--peer "$dsname=$(time_peer "$dsname" "$BENCH_PY" deepspeed)")
else
	say "no DeepSpeed in the benchmark environment: its column shows n/a"
	peer_args+=(--peer "$dsname=")
fi

say "timing sg_adam and the memory kernels"
"$tmp/bench_adam" --optim "$OPTIM" --n "$N" --threads "$THREADS" --reps "$REPS" "${peer_args[@]}"
printf '\nreproduce: OPTIM=%s N=%s THREADS=%s REPS=%s scripts/bench_adam.sh   (on %s, %s CPUs: %s)\n' \
	"$OPTIM" "$N" "$THREADS" "$REPS" "$(uname -m)" "$(nproc)" \
	"$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //')"
