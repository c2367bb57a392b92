/* gpu_kernels.h - a GPU task's time from how its kernels behave.
 *
 * For machines whose file gives gpu.kernels (sg_gpu_kernels): a unit's
 * forward, recompute or backward is the sum of
 *   - its matrix products, each (M, N, K) at the measured best GEMM rate
 *     derated by tile and wave quantization (128 x 256 output tiles over the
 *     GPU's SMs, NVIDIA's "Matrix Multiplication Background" guide), or at
 *     its bytes over the achieved HBM bandwidth when that is longer;
 *   - its attention at the published FlashAttention throughput for the
 *     model's head dimension and the sequence length, by direction (or, with
 *     SG_ATTENTION_EAGER, as Hugging Face's eager ops: eager_attention.h);
 *   - its element-wise kernels (norms, RoPE, SwiGLU, residual adds, the
 *     loss) at the achieved HBM bandwidth, their bytes counted as PyTorch's
 *     eager Llama modules move them (sg_unit_elementwise_bytes).
 * Other GPU kinds (casts, norms, GPU Adam) stream their bytes at the achieved
 * HBM bandwidth. Every task adds gpu.kernels.launch_us.
 */
#ifndef SG_GPU_KERNELS_H
#define SG_GPU_KERNELS_H

#include <stdint.h>

#include "graph/op_kinds.h"
#include "models/model.h"
#include "runtime/config/machine.h"

#include "runtime/sim/gemm_model.h"

/* How a layer's attention runs: one fused FlashAttention-class kernel (the
 * published throughput below), or Hugging Face's eager attention, its
 * score tensor materialised (eager_attention.h). */
typedef enum sg_attention_impl { SG_ATTENTION_FUSED, SG_ATTENTION_EAGER } sg_attention_impl;

/* The attention throughput (TFLOP/s) for head dimension d at sequence
 * length s, backward or forward: among the points of the nearest head
 * dimension, linear in log2(s) between the two around s, the end point's
 * value outside them. */
double sg_attention_tflops(const sg_gpu_kernels *k, double d, double s, int backward);

/* The shapes of one unit's matrix products for `tokens` rows: the time of
 * all of them (forward: the unit's products; backward: each product's input
 * and weight gradients) over their FLOPs, as an effective FLOP/s; 0 for a
 * unit without products (the embedding). */
double sg_unit_gemm_flops_per_s(const sg_gpu_kernels *k, const sg_model *m, int unit,
                                int64_t tokens, int backward);

/* Bytes one unit's element-wise kernels move for `tokens` rows, forward
 * (backward: twice that, each op reading its saved inputs and the output
 * gradient and writing the input gradient). */
double sg_unit_elementwise_bytes(const sg_model *m, int unit, int64_t tokens, int backward);

/* Seconds of a forward / recompute / backward node of `unit` on the GPU:
 * matmul_flops at the unit's GEMM rate, element-wise bytes at hbm_gbs, and,
 * where attention_flops > 0 (a layer), its attention: fused, those FLOPs
 * (stepgraph's count: the backward's is twice the forward's) at the
 * attention rate; eager, the eager ops of tokens / seq_len sequences
 * (sg_eager_attention_seconds), whatever attention_flops says. Excludes
 * launch_us. */
double sg_unit_gpu_seconds(const sg_gpu_kernels *k, const sg_model *m, int unit, int64_t tokens,
                           int64_t seq_len, sg_op_kind kind, double matmul_flops,
                           double attention_flops, sg_attention_impl attn);

#endif /* SG_GPU_KERNELS_H */
