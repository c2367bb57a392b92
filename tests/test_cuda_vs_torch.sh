#!/bin/sh
# test_cuda_vs_torch.sh - every CUDA kernel of codelets/cuda/cuda_ops.h,
# emulated on the CPU (tools/cuda_ops_dump_emu), against PyTorch's CPU
# implementation of the same op (tests/torch_cuda_ops_ref.py, fp32
# reference, f32 and bf16 storage, tolerances stated there): the plumbing
# scripts/check_cuda_vs_torch.sh uses on a GPU machine, and a second check
# of the kernels besides the CPU-kernel comparisons. bf16 runs twice: with
# the default attention and with its cuBLAS route (STEPGRAPH_ATTENTION_IMPL=
# cublas, 1 MiB of score tiles; docs/gpu.md). Prints TAP.
set -u
SRC=${SG_SRCDIR:-.}
. "$SRC/tests/tap_lib.sh"
BUILD=${SG_BUILDDIR:-.}
PY=${SYSTEM_PYTHON:-/usr/bin/python3}
DUMP=$BUILD/tools/cuda_ops_dump_emu
if ! [ -x "$DUMP" ] || ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
	skip_all "needs $DUMP and python3 with torch and numpy"
fi
tap_tmpdir cuda_torch
unset STEPGRAPH_ATTENTION_IMPL STEPGRAPH_ATTENTION_SCRATCH_MB
for run in f32 bf16 bf16-cublas; do
	dt=${run%-cublas}
	if [ "$run" = bf16-cublas ]; then
		export STEPGRAPH_ATTENTION_IMPL=cublas STEPGRAPH_ATTENTION_SCRATCH_MB=1
	fi
	"$DUMP" "$TMP/$run" --dtype "$dt" --seed 1 >"$TMP/$run.dump.out" 2>&1
	ok $? "emulated kernels dump their $run outputs"
	"$PY" "$SRC/tests/torch_cuda_ops_ref.py" "$TMP/$run/$dt/manifest.json" --device cpu \
		>"$TMP/$run.out" 2>&1
	rc=$?
	grep -v ' PASS ' "$TMP/$run.out" | sed 's/^/# /'
	ok $rc "$run: every op within its tolerance of PyTorch ($(tail -1 "$TMP/$run.out"))"
done
done_testing
