#!/bin/sh
# test_cuda_block_cublas.sh - tests/test_cuda_block_emu (every unit of five
# small models through codelets/cuda/block*.cu against the CPU units of
# codelets/cpu/block.c, MoE, sinks and windows included) with attention on
# its cuBLAS route (STEPGRAPH_ATTENTION_IMPL=cublas, docs/gpu.md, "Attention
# implementations") at the same tolerances: the route as the units call
# it, saved lse and all. Its TAP is the program's.
set -u
SG_TEST_NAME=cuda_block_cublas
. "${SG_SRCDIR:-.}/tests/test_env.sh"
PROG=$BUILD/tests/test_cuda_block_emu
if ! [ -x "$PROG" ]; then
	skip_all "no $PROG"
fi
STEPGRAPH_ATTENTION_IMPL=cublas STEPGRAPH_ATTENTION_SCRATCH_MB=1 "$PROG"
