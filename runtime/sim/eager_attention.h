/* eager_attention.h - the cost of Hugging Face's eager attention on a GPU.
 *
 * transformers' eager_attention_forward (attn_implementation="eager")
 * materialises the (B, H, T, T) score tensor and runs each step as its own
 * PyTorch op: two batched products (q k^T and P v) and element-wise passes
 * over the scores between them; autograd's backward runs four products and
 * the gradients of those passes. Causal masking saves nothing: the whole
 * T x T square is computed and masked, on sliding-window layers too. The
 * products take the GEMM model's time for their shapes
 * (sg_gemm_batched_seconds), the element-wise ops their bytes at
 * gpu.kernels.hbm_gbs. The op lists, with the bytes each op reads and
 * writes, are written out in eager_attention.c; docs/simulate.md has them.
 */
#ifndef SG_EAGER_ATTENTION_H
#define SG_EAGER_ATTENTION_H

#include "models/model.h"
#include "runtime/config/machine.h"

/* Bytes the element-wise ops of one layer's eager attention read and write
 * for `batch` sequences of `seq` tokens, forward (or recompute) or
 * backward: GPT-OSS's op list for a model with attention sinks, Llama's
 * (softmax upcast to fp32) otherwise. The products' operands are not
 * counted here (sg_eager_attention_seconds). */
double sg_eager_attention_bytes(const sg_model *m, double batch, double seq, int backward);

/* Seconds of one layer's eager attention: its products (forward 2, backward
 * 4, each a batch of B x heads products) by the GEMM model plus
 * sg_eager_attention_bytes at hbm_gbs. */
double sg_eager_attention_seconds(const sg_gpu_kernels *k, const sg_model *m, double batch,
                                  double seq, int backward);

/* Bytes of one (batch, heads, seq, seq) score tensor in bf16: what eager
 * attention materialises per layer and the memory check does not count
 * (it counts a fused kernel's activations; by the op list about three are
 * alive at once in GPT-OSS's backward, docs/simulate.md). */
double sg_eager_score_tensor_bytes(const sg_model *m, double batch, double seq);

#endif /* SG_EAGER_ATTENTION_H */
