/* gemm.h - the CPU's matrix products: C = alpha op(A) op(B) + beta C,
 * row-major, fp32 arrays, BLAS's conventions (op(X) = X or X^T; beta 0
 * never reads C).
 *
 * Two engines:
 * - sgemm: OpenBLAS in fp32. Every product of an fp32 or fp16 run, and
 *   every product when AMX is absent or switched off.
 * - amx: op(A) and op(B) rounded once to bf16 (round to nearest even, NaN
 *   kept quiet: sg_f32_to_bf16), their products summed in fp32 by the
 *   tile unit of Intel's Advanced Matrix Extensions (TDPBF16PS: Sapphire
 *   Rapids and later), alpha and beta applied in fp32. This is the product
 *   of bf16 operands that PyTorch's bf16 matmul and cuBLAS's bf16 GEMM
 *   compute (fp32 accumulation), not an fp32 product: it is used only where
 *   the caller asked for bf16 (sg_gemm_set_bf16) and the machine has it.
 *   Each element of C is a fixed-order sum over k in 32-wide blocks, the
 *   same whatever M and N are, so splitting the rows of A (batch tiles)
 *   leaves every row's bits unchanged. The tile unit counts subnormal
 *   operands and products as zero (below 2^-126 in magnitude; cuBLAS keeps
 *   them). Should its packing buffers not be allocated, the call falls
 *   back to sgemm.
 *
 * The choice is per thread (the StarPU codelets of a unit and of MoE
 * experts set it for the task they run, from the run's compute dtype);
 * linear.c and gpt_oss.c call sg_gemm for every product. SG_CPU_GEMM selects the
 * engine for bf16 products: "auto" or unset (amx when the CPU has
 * AMX-BF16 and the kernel grants the tile state, else sgemm), "sgemm"
 * (never amx), "amx" (amx, an error when it is unavailable). */
#ifndef SG_CODELETS_CPU_GEMM_H
#define SG_CODELETS_CPU_GEMM_H

#include <stddef.h>

#include "common/error.h"

/* C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C. trans_a: A is stored
 * (K, M) with row stride lda, else (M, K); likewise trans_b and B. Sizes
 * must fit an int (callers check). */
void sg_gemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha, const float *A,
             size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc);

/* Products of the calling thread in bf16 (on) or fp32 (off, the default);
 * returns the previous setting. On takes effect only where the amx engine
 * is usable (sg_gemm_amx_usable); elsewhere products stay fp32. */
int sg_gemm_set_bf16(int on);

/* 1 when bf16 products run on AMX: the CPU has AMX-BF16, the kernel
 * granted the tile state (arch_prctl ARCH_REQ_XCOMP_PERM) and SG_CPU_GEMM
 * allows it; probed once per process. */
int sg_gemm_amx_usable(void);

/* SG_CPU_GEMM checked: 0, or SG_EINVAL (an unknown value) / SG_ENOTSUP
 * ("amx" on a machine without it) with err naming the problem. */
int sg_gemm_check_env(sg_error *err);

/* One line for `stepgraph version`: which engine bf16 products use and why. */
void sg_gemm_describe(char *buf, size_t len);

#endif
