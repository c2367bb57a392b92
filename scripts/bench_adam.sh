#!/usr/bin/env bash
# bench_adam.sh - CPU Adam: stepgraph's sg_adam_step against torch.optim.AdamW
# (foreach=True) on the same thread counts, and against this machine's memory
# bandwidth bound (28 bytes per fp32 parameter), in one run.
#
#   scripts/bench_adam.sh                    # N = 64M parameters, 1 and 2 threads
#   N=16e6 THREADS=1,2,4 REPS=5 scripts/bench_adam.sh
#
# Builds tests/bench_adam.c with ${CC:-gcc} into a temporary directory, times
# torch with $SYSTEM_PYTHON (default /usr/bin/python3, where Debian's
# python3-torch lives; its column shows n/a without torch), then prints the
# table. SG_ADAM_ISA=scalar|avx2|avx512 picks the variant for the main column.
# About 30 s on 2 cores with the defaults; needs ~2.5 GB of memory.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${N:-67108864}
THREADS=${THREADS:-1,2}
REPS=${REPS:-5}
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
CC=${CC:-gcc}

say() { printf 'bench_adam: %s\n' "$*" >&2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

say "building tests/bench_adam.c"
"$CC" -std=gnu11 -O2 -Wall -Wextra -I"$REPO_ROOT" \
	"$REPO_ROOT"/codelets/cpu/adam.c "$REPO_ROOT"/common/error.c "$REPO_ROOT"/common/dtype.c \
	"$REPO_ROOT"/tests/bench_adam.c -lm -lpthread -o "$tmp/bench_adam"

# torch: one fp32 parameter of N elements, AdamW(foreach=True), best of REPS
# steps after one warm-up step (which allocates exp_avg and exp_avg_sq).
torch_arg=""
if "$PY" -c 'import torch' 2>/dev/null; then
	say "timing torch.optim.AdamW(foreach=True) with $PY"
	torch_arg=$("$PY" - "$N" "$THREADS" "$REPS" <<'EOF'
import inspect, sys, time
import torch
n, threads, reps = int(float(sys.argv[1])), sys.argv[2], int(sys.argv[3])
kw = {"foreach": True}
if "fused" in inspect.signature(torch.optim.AdamW.__init__).parameters:
    kw["fused"] = False
out = []
for t in (int(x) for x in threads.split(",")):
    torch.set_num_threads(t)
    if torch.get_num_threads() != t:
        sys.exit("torch.set_num_threads(%d) gave %d" % (t, torch.get_num_threads()))
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.rand(n) - 0.5)
    p.grad = torch.rand(n) - 0.5
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **kw)
    opt.step()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t0)
    out.append("%d:%.6f" % (t, best))
    print("torch %s, %d thread(s): %.3f s per step" % (torch.__version__, t, best),
          file=sys.stderr)
    del opt, p
print(",".join(out))
EOF
)
	torch_arg="--torch $torch_arg"
else
	say "no torch in $PY: the torch column shows n/a"
fi

say "timing sg_adam and the memory kernels"
# shellcheck disable=SC2086
"$tmp/bench_adam" --n "$N" --threads "$THREADS" --reps "$REPS" $torch_arg
printf '\nreproduce: N=%s THREADS=%s REPS=%s scripts/bench_adam.sh   (on %s, %s CPUs: %s)\n' \
	"$N" "$THREADS" "$REPS" "$(uname -m)" "$(nproc)" \
	"$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //')"
