/* eager_attention.c - Hugging Face's eager attention on a GPU (eager_attention.h). */
#include "runtime/sim/eager_attention.h"

#include "runtime/sim/gemm_model.h"

/* Units below, for B sequences of T tokens, H query heads, Hkv key/value
 * heads of dimension d:
 *   S  = B H T^2  score elements (the sinks' extra column, 1 in T, is left out)
 *   M  = B T^2    the additive mask (B, 1, T, T), built once a model forward
 *                 and broadcast over the heads: read once a layer (the one
 *                 batch's slice, 33.5 MB at T 4096, stays in L2 across heads)
 *   Q  = B H T d  a query-sized tensor; KV = B Hkv T d
 * Bytes per element: bf16 2, fp32 4 (the model runs in bf16: DeepSpeed's
 * bf16 casts every parameter, the sinks too).
 *
 * GPT-OSS (transformers models/gpt_oss/modeling_gpt_oss.py,
 * eager_attention_forward; its softmax keeps the logits' dtype, bf16):
 *   forward                                   reads          writes
 *   repeat_kv(key), repeat_kv(value)          2 KV bf16      2 Q bf16    (H > Hkv)
 *   matmul(q, k^T)                            the product (T, T, d): writes S
 *   * scaling                                 S bf16         S bf16
 *   + causal_mask                             S + M bf16     S bf16
 *   cat([scores, sinks], -1)                  S bf16         S bf16
 *   max(-1, keepdim)                          S bf16         (B H T)
 *   logits - max                              S bf16         S bf16
 *   softmax(-1, dtype=logits.dtype)           S bf16         S bf16
 *   probs[..., :-1], dropout(p=0)             views: attention_dropout is 0
 *                                             and F.dropout returns its input
 *   matmul(P, v)                              the product (T, d, T): reads S
 *   transpose(1, 2).contiguous()              Q bf16         Q bf16
 *   = 11 S + M (+ 4 Q + 2 KV) elements of 2 bytes
 *   backward (autograd, in reverse)
 *   dO.reshape (non-contiguous: a copy)       Q              Q
 *   dk^T's reshape to the groups (a copy)     Q              Q           (H > Hkv)
 *   matmul(P, v)': dP = dO v^T, dv = P^T dO   products (T, T, d), (T, d, T)
 *   slice backward: zeros, copy into          S              2 S
 *   softmax backward                          2 S            S
 *   sub backward, the max's side: -grad, sum  2 S            S
 *   max backward: zeros, scatter              -              S
 *   the two gradients of the logits added     2 S            S
 *   cat backward, + mask backward             views, pass-through
 *   * scaling backward                        S              S
 *   matmul(q, k^T)': dq = dS k, dk^T = q^T dS products (T, d, T), (d, T, T)
 *   repeat_kv backward: sum over the groups   2 Q            2 KV        (H > Hkv)
 *   = 15 S (+ 6 Q + 2 KV) elements of 2 bytes
 *
 * Llama and the models without sinks (models/llama/modeling_llama.py,
 * eager_attention_forward: softmax(dtype=float32).to(query.dtype); for a
 * bf16 input ATen's softmax converts to fp32 first):
 *   forward: * scaling 2 + 2, + mask 2 + 2 (+ M), to fp32 2 + 4, softmax
 *   fp32 4 + 4, to bf16 4 + 2 = 28 bytes per score element;
 *   backward: to bf16' 2 + 4, softmax' 4 + 4 + 4, to fp32' 4 + 2,
 *   * scaling' 2 + 2 = 28 bytes per score element;
 *   the same products and q-sized copies as above.
 * tests/test_eager_ops.sh runs both op sequences in Debian's torch and checks
 * these lists against the ops autograd records. */
/* elements of one layer's (batch, heads, seq, seq) score tensor */
static double score_elements(const sg_model *m, double batch, double seq)
{
    return batch * (double)m->num_heads * seq * seq;
}

double sg_eager_attention_bytes(const sg_model *m, double batch, double seq, int backward)
{
    double H = (double)m->num_heads, Hkv = (double)m->num_kv_heads, d = (double)m->head_dim;
    double S = score_elements(m, batch, seq), M = batch * seq * seq;
    double Q = batch * H * seq * d, KV = batch * Hkv * seq * d;
    /* the output's (forward) or its gradient's (backward) copy; with groups,
     * repeat_kv copies k and v to all heads, its backward sums them back
     * after copying dk^T into the groups' layout */
    double small = 2.0 * Q + (H > Hkv ? (backward ? 4.0 : 2.0) * Q + 2.0 * KV : 0.0);
    if (m->attention_sinks)
        return 2.0 * ((backward ? 15.0 * S : 11.0 * S + M) + small);
    return 28.0 * S + 2.0 * ((backward ? 0.0 : M) + small);
}

double sg_eager_attention_seconds(const sg_gpu_kernels *k, const sg_model *m, double batch,
                                  double seq, int backward)
{
    double n = batch * (double)m->num_heads, T = seq, d = (double)m->head_dim;
    /* the products, each a batch of B x H (M, N, K) */
    double s = sg_gemm_batched_seconds(k, n, T, T, d)    /* scores q k^T, or dP = dO v^T */
               + sg_gemm_batched_seconds(k, n, T, d, T); /* P v, or dv = P^T dO */
    if (backward)
        s += sg_gemm_batched_seconds(k, n, T, d, T)    /* dq = dS k */
             + sg_gemm_batched_seconds(k, n, d, T, T); /* dk^T = q^T dS */
    return s + sg_eager_attention_bytes(m, batch, seq, backward) / (k->hbm_gbs * 1e9);
}

double sg_eager_score_tensor_bytes(const sg_model *m, double batch, double seq)
{
    return 2.0 * score_elements(m, batch, seq); /* bf16 */
}
