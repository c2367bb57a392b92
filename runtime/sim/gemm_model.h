/* gemm_model.h - a bf16 GEMM's time on a GPU from its shape: whole tiles in
 * waves over the SMs at the machine's measured GEMM rate, or its operands'
 * bytes at the achieved HBM bandwidth, whichever is longer (the figures:
 * the machine file's gpu.kernels). Used by the per-unit cost
 * (gpu_kernels.h) and by eager attention's products (eager_attention.h). */
#ifndef SG_GEMM_MODEL_H
#define SG_GEMM_MODEL_H

#include "runtime/config/machine.h"

#define SG_GEMM_TILE_M 128
#define SG_GEMM_TILE_N 256

/* Seconds of one (M, N, K) product (2MNK FLOPs, bf16 operands and result):
 * max(work padded to whole tiles and waves / gemm_tflops,
 *     2 (MK + KN + MN) bytes / hbm_gbs). */
double sg_gemm_seconds(const sg_gpu_kernels *k, double m, double n, double kk);

/* The same for a batch of independent (M, N, K) products in one kernel
 * (torch.matmul on (..., M, K) x (..., K, N)): their tiles share the waves,
 * each product moves its own operands and result. batch 1 is
 * sg_gemm_seconds. */
double sg_gemm_batched_seconds(const sg_gpu_kernels *k, double batch, double m, double n,
                               double kk);

#endif /* SG_GEMM_MODEL_H */
