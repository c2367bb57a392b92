/* ops.h - CPU kernels (fp32) for every op of a Llama-family decoder, forward
 * and backward, matching PyTorch / Hugging Face semantics.
 *
 * These are plain compute functions: no StarPU, no threads, no global state.
 * A codelet layer wraps them; StarPU provides parallelism across tasks.
 *
 * Conventions (all kernels):
 * - Tensors are fp32, row-major, contiguous; shapes are written next to each
 *   parameter, e.g. (B, T, H, D). Token ids and targets are int32.
 * - Outputs come first in the argument list, then saved activations, then
 *   inputs, then sizes and scalars.
 * - Backward WRITES input gradients (dx, dq, dlogits, ...: the previous
 *   contents are ignored) and ACCUMULATES (+=) into weight gradients (dtable,
 *   dw, dW, db), so gradient accumulation over micro-batches needs no extra
 *   pass. Each declaration below says which is which.
 * - Functions return 0 (SG_OK) or a negative SG_E* code from common/error.h:
 *   SG_EINVAL for bad sizes or out-of-range ids (then nothing is written),
 *   SG_ENOMEM when a small scratch buffer cannot be allocated.
 * - Output buffers must not overlap inputs unless a function says so.
 * - This header may be included before or after <cblas.h>.
 *
 * BLAS: sg_linear_* and sg_attention_* call OpenBLAS's cblas_sgemm. OpenBLAS
 * splits large products across its own threads and its results then depend
 * on the thread count; for bit-reproducible results, and so that it does not
 * compete with StarPU's workers, the caller must pin OpenBLAS to one thread
 * (OPENBLAS_NUM_THREADS=1 in the environment, or openblas_set_num_threads(1)
 * before the first call). The kernels themselves never change it.
 */
#ifndef SG_CODELETS_CPU_OPS_H
#define SG_CODELETS_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h" /* sg_f32_to_bf16, inline */
#include "common/error.h"

/* In the composed kernels (block.c, moe.c): return a failing op's code. */
#define SG_TRY(call)      \
    do {                  \
        int rc_ = (call); \
        if (rc_ < 0)      \
            return rc_;   \
    } while (0)

/* ---- embedding ---------------------------------------------------------- */

/* out (N, C) = table[tokens] with table (V, C) and tokens (N).
 * SG_EINVAL (nothing written) if any id is outside [0, V). */
int sg_embedding_forward(float *out, const int32_t *tokens, const float *table, size_t N, size_t V,
                         size_t C);

/* dtable (V, C) += scatter of dout (N, C) by tokens (N): ACCUMULATES.
 * SG_EINVAL (nothing written) if any id is outside [0, V). */
int sg_embedding_backward(float *dtable, const int32_t *tokens, const float *dout, size_t N,
                          size_t V, size_t C);

/* ---- RMSNorm -------------------------------------------------------------- */

/* Over the last dimension: out (N, C) = x / sqrt(mean(x^2) + eps) * w, with
 * w (C). rstd (N) receives 1 / sqrt(mean(x^2) + eps) for the backward (may be
 * NULL). Qwen3's QK-norm is this kernel with rows of size head_dim: call it
 * with N = B*T*H and C = D on q (B, T, H, D). */
int sg_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, size_t N, size_t C,
                       float eps);

/* dx (N, C): WRITES; dw (C): ACCUMULATES (may be NULL to skip).
 * rstd (N) is the one saved by the forward. */
int sg_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                        const float *rstd, size_t N, size_t C);

/* ---- rotary position embedding ------------------------------------------ */

/* Tables for positions 0..T-1 of head size D (even): cos, sin (T, D/2), entry
 * [t][i] = cos/sin(t * inv_freq[i]) with inv_freq[i] = theta^(-2i/D).
 * Computed in double, stored as float. (Hugging Face computes the angle in
 * fp32, which loses about t * 2^-24 radians at position t.) */
int sg_rope_table(size_t T, size_t D, double theta, float *cos_tab, float *sin_tab);

/* Same with Llama-3.1's "llama3" frequency scaling (rope_scaling in the
 * Hugging Face config: factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings): wavelengths longer than
 * orig_max_pos / low_freq_factor are divided by factor, shorter than
 * orig_max_pos / high_freq_factor kept, and interpolated between. */
int sg_rope_table_llama3(size_t T, size_t D, double theta, double factor, double low_freq_factor,
                         double high_freq_factor, double orig_max_pos, float *cos_tab,
                         float *sin_tab);

/* Same with YaRN (rope_scaling type "yarn", GPT-OSS): frequencies blended
 * between theta^(-2i/D) and theta^(-2i/D) / factor by a linear ramp over the
 * dimensions between those that turn beta_fast and beta_slow times over
 * orig_max_pos (bounds floored / ceiled when truncate), and cos, sin
 * multiplied by attention_factor (rope.c states the formulas). */
int sg_rope_table_yarn(size_t T, size_t D, double theta, double factor, double beta_fast,
                       double beta_slow, double orig_max_pos, int truncate, double attention_factor,
                       float *cos_tab, float *sin_tab);

/* Hugging Face "rotate_half" convention (Llama, Qwen3): element i of a head
 * is paired with element i + D/2, for i < D/2:
 *   out[i]       = x[i] cos - x[i + D/2] sin
 *   out[i + D/2] = x[i + D/2] cos + x[i] sin
 * x, out (B, T, H, D): call once for q (H = Hq) and once for k (H = Hkv).
 * Token t uses row t of cos, sin (T, D/2). out may equal x (in place). */
int sg_rope_forward(float *out, const float *x, const float *cos_tab, const float *sin_tab,
                    size_t B, size_t T, size_t H, size_t D);

/* dx (B, T, H, D) = inverse rotation of dout: WRITES. dx may equal dout. */
int sg_rope_backward(float *dx, const float *dout, const float *cos_tab, const float *sin_tab,
                     size_t B, size_t T, size_t H, size_t D);

/* ---- causal grouped-query attention ----------------------------------- */

/* out (B, T, Hq, D) = softmax(q k^T / sqrt(D) + causal mask) v per head, with
 * q (B, T, Hq, D), k, v (B, T, Hkv, D); query head h reads kv head
 * h / (Hq / Hkv) (Hugging Face's repeat_kv). window > 0: query t attends only
 * to keys t - window + 1 .. t (the last `window` positions, itself included);
 * window = 0: every key <= t. lse (B, Hq, T) receives the log-sum-exp of each
 * query's scaled scores, for the backward.
 * Keys are processed in tiles with an online softmax: scratch is
 * O(tile * (tile + D)), never a (T, T) score matrix. Uses cblas_sgemm. */
int sg_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                         size_t B, size_t T, size_t Hq, size_t Hkv, size_t D, size_t window);

/* dq (B, T, Hq, D), dk, dv (B, T, Hkv, D): all WRITE (dk, dv sum over the
 * Hq / Hkv query heads of each group). out and lse are the forward's. */
int sg_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                          const float *k, const float *v, const float *out, const float *lse,
                          size_t B, size_t T, size_t Hq, size_t Hkv, size_t D, size_t window);

/* ---- SwiGLU ------------------------------------------------------------------ */

/* h (N, F) = silu(gate) * up, silu(g) = g / (1 + exp(-g)); gate, up (N, F),
 * F = intermediate_size. (Not named I: OpenBLAS's cblas.h pulls in
 * <complex.h>, whose macro I would break this header after it.) */
int sg_swiglu_forward(float *h, const float *gate, const float *up, size_t N, size_t F);

/* dgate, dup (N, F): both WRITE. */
int sg_swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate,
                       const float *up, size_t N, size_t F);

/* ---- linear ------------------------------------------------------------------ */

/* y (N, out) = x (N, in) @ W^T + b, with W (out, in) in Hugging Face's layout
 * and b (out) or NULL. Sizes must fit in an int (BLAS). */
int sg_linear_forward(float *y, const float *x, const float *W, const float *b, size_t N, size_t in,
                      size_t out);

/* dx (N, in) = dy @ W: WRITES. dW (out, in) += dy^T @ x: ACCUMULATES.
 * db (out) += sum over rows of dy: ACCUMULATES. Any of dx, dW, db may be NULL
 * to skip it. */
int sg_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x,
                       const float *W, size_t N, size_t in, size_t out);

/* ---- cross-entropy ------------------------------------------------------------ */

/* Mean cross-entropy of logits (N, V) against targets (N); a negative target
 * (-1 as in llm.c, or Hugging Face's -100) is ignored. *loss = sum of
 * per-token losses / *count, where *count is the number of non-ignored
 * tokens; *loss = 0 when *count = 0 (PyTorch gives NaN there). lse (N)
 * receives each row's log-sum-exp for the backward (may be NULL).
 * Max-subtracted, sums in double. SG_EINVAL (nothing written) if a target
 * is >= V. */
int sg_cross_entropy_forward(float *loss, int64_t *count, float *lse, const float *logits,
                             const int32_t *targets, size_t N, size_t V);

/* The same over a chunk of rows, for a caller that sees the logits a chunk
 * at a time (the head, block.c): *total += the chunk's per-token losses
 * (double, row order), *count += its targets >= 0, lse (N) as above. Chunks
 * fed in row order give the sums of one call over all the rows, bit for bit
 * (sg_cross_entropy_forward is this with total = count = 0, then
 * total / count). */
int sg_cross_entropy_rows(double *total, int64_t *count, float *lse, const float *logits,
                          const int32_t *targets, size_t N, size_t V);

/* dlogits (N, V) = (softmax(logits) - onehot(target)) * dloss / count: WRITES;
 * rows of ignored tokens, and everything when count = 0, are zero. count is
 * the divisor (normally the forward's count; a caller averaging over several
 * micro-batches passes their total). dlogits may equal logits (in place,
 * which saves an (N, V) buffer). */
int sg_cross_entropy_backward(float *dlogits, const float *logits, const float *lse,
                              const int32_t *targets, size_t N, size_t V, float dloss,
                              int64_t count);

/* ---- batch tiles: weight-gradient sum ------------------------------------------ */

/* acc (n) += x (n), element by element (ACCUMULATES; residual adds and sums of
 * branches too). */
void sg_add_into(float *acc, const float *x, size_t n); /* acc and x do not overlap */

/* out (n) = parts[0] + parts[1] + ... + parts[nparts - 1] (WRITES), or out +
 * that sum when accumulate (ACCUMULATES). Per element, the partials are added
 * in the order given, in fp32, and the sum is then added to out: the result
 * does not depend on which partial was computed first. nparts >= 1. */
int sg_grad_partials_sum(float *out, const float *const *parts, int nparts, size_t n,
                         int accumulate);

/* ---- mixture of experts (Qwen3-MoE; moe.c states the formulas) ------------------ */

/* Router: logits (N, E) = x (N, H) @ Wr^T (Wr (E, H)), into the caller's
 * `logits` scratch; probs (N, E) = their softmax (fp32); sel (N, k) = the k
 * most probable experts per token, in descending order, ties to the lowest
 * index (stored as floats, exact: E <= 2^24); topw (N, k) = their
 * probabilities, divided by their sum when norm_topk_prob. All WRITE. */
/* One row's softmax (max subtracted, the sum in double) and its top K
 * indices (as floats, descending, the lowest index among equals): the two
 * routers' shared steps. */
void sg_moe_softmax_row(float *p, const float *l, size_t E);
void sg_moe_topk_row(float *sel, const float *v, size_t E, size_t K);
int sg_moe_router_forward(float *probs, float *sel, float *topw, float *logits, const float *x,
                          const float *Wr, size_t N, size_t H, size_t E, size_t K,
                          int norm_topk_prob);

/* The load-balancing statistics: stats (2E) ACCUMULATES, stats[e] += picks of
 * expert e in any slot, stats[E + e] += sum over tokens of probs[., e]. */
int sg_moe_stats_add(float *stats, const float *probs, const float *sel, size_t N, size_t E,
                     size_t K);

/* transformers' load_balancing_loss_func over L layers of N tokens from the
 * summed stats: E * sum_e (picks_e / (L N)) * (probs_e / (L N)). Not scaled
 * by router_aux_loss_coef. */
double sg_moe_aux_loss(const float *stats, size_t E, size_t L, size_t N);

/* Router backward. dtopw (N, k): gradient of topw. stats (2E, all layers)
 * and aux_scale = d loss / d aux-loss-sum-term: d loss / d probs[n, e] gets
 * aux_scale * stats[e] (stats NULL or aux_scale 0: no aux loss). dlogits
 * (N, E): scratch, WRITTEN. dx (N, H): the router's share of d x, WRITES;
 * dWr (E, H) ACCUMULATES. */
int sg_moe_router_backward(float *dx, float *dWr, float *dlogits, const float *dtopw,
                           const float *probs, const float *sel, const float *topw,
                           const float *stats, double aux_scale, const float *x, const float *Wr,
                           size_t N, size_t H, size_t E, size_t K, int norm_topk_prob);

/* slots (at most N k) = the slots s = n k + j with sel[s] == e, in token
 * order (WRITES); returns their count. */
size_t sg_moe_expert_slots(int32_t *slots, const float *sel, size_t N, size_t K, size_t e);

/* One expert on its n slots: for each slot s = slots[r], row x[s / K] (x
 * (N, H)) goes through gate, up (Wg, Wu (F, H)) and down (Wd (H, F)). Writes
 * row rows[r] (rows NULL: row r) of gate_s, up_s (., F) and out_s (., H),
 * those rows only; out_s NULL (a recompute): gate and up only. scratch: n
 * (2H + 3F) floats. */
int sg_moe_expert_forward(float *gate_s, float *up_s, float *out_s, const float *x,
                          const int32_t *slots, const int32_t *rows, size_t n, const float *Wg,
                          const float *Wu, const float *Wd, size_t H, size_t F, size_t K,
                          float *scratch);

/* y (N, H) = h + sum over slots j (in order) of topw[n, j] * outs[n k + j]
 * (outs: the (H) output row of every slot): WRITES (the residual h
 * included). */
int sg_moe_combine_forward(float *y, const float *h, const float *const *outs, const float *topw,
                           size_t N, size_t H, size_t K);

/* Backward of one expert and of its share of the combine, from dy (N, H) the
 * gradient of y: for its slot s = slots[r] (token s / K, weight topw[s]),
 * with gate and up read at row rows[r] (rows NULL: row r) of gate_s, up_s:
 * dtopw[row] = dy[n] . out and dx_s[row] (., H) = d x through the expert
 * times topw[s] (both WRITE, its rows only); dWg, dWu, dWd ACCUMULATE. The
 * expert's output is recomputed. scratch: n (5H + 5F) floats. */
int sg_moe_expert_backward(float *dx_s, float *dtopw, float *dWg, float *dWu, float *dWd,
                           const float *dy, const float *x, const float *gate_s, const float *up_s,
                           const float *topw, const int32_t *slots, const int32_t *rows, size_t n,
                           const float *Wg, const float *Wu, const float *Wd, size_t H, size_t F,
                           size_t K, float *scratch);

/* dx (N, H) = sum over slots j (in order) of the row dx_s[n k + j] (the (H)
 * row of every slot): WRITES. */
int sg_moe_slots_sum(float *dx, const float *const *dx_s, size_t N, size_t H, size_t K);

/* ---- GPT-OSS: router, clamped SwiGLU experts, attention sinks (moe.c, attention.c) --- */

/* transformers' GptOssExperts constants: swiglu_limit (models/hf_config.c
 * refuses another) and the sigmoid's alpha (not a config key). */
#define SG_OSS_SWIGLU_LIMIT 7.0f
#define SG_OSS_SWIGLU_ALPHA 1.702f

/* GptOssTopKRouter: logits (N, E) = x Wr^T + br (scratch); sel (N, k) = the
 * k largest logits, descending, ties to the lowest index; topw (N, k) =
 * softmax over those k logits; probs (N, E) = softmax over all E logits (not
 * used by the layer: the load-balancing loss reads it). All WRITE. */
int sg_moe_oss_router_forward(float *probs, float *sel, float *topw, float *logits, const float *x,
                              const float *Wr, const float *br, size_t N, size_t H, size_t E,
                              size_t K);

/* Its backward: dlogits[sel_j] = topw_j (dtopw_j - sum_i topw_i dtopw_i),
 * plus the load-balancing term through probs as sg_moe_router_backward;
 * dx (N, H) WRITES, dWr (E, H) and dbr (E) ACCUMULATE. */
int sg_moe_oss_router_backward(float *dx, float *dWr, float *dbr, float *dlogits,
                               const float *dtopw, const float *probs, const float *sel,
                               const float *topw, const float *stats, double aux_scale,
                               const float *x, const float *Wr, size_t N, size_t H, size_t E,
                               size_t K);

/* h (N, F) = (clamp(up, -l, l) + 1) * g sigmoid(alpha g), g = min(gate, l),
 * l = SG_OSS_SWIGLU_LIMIT, alpha = SG_OSS_SWIGLU_ALPHA. */
int sg_oss_glu_forward(float *h, const float *gate, const float *up, size_t N, size_t F);

/* dgate, dup (N, F) WRITE; zero where the clamp cut (gate > l; up outside
 * [-l, l]: torch.clamp's gradient passes at the bounds themselves). dgate
 * may equal gate and dup may equal up (in place). */
int sg_oss_glu_backward(float *dgate, float *dup, const float *dh, const float *gate,
                        const float *up, size_t N, size_t F);

/* One GPT-OSS expert on its n slots (as sg_moe_expert_forward): gu (n, 2F)
 * = x Wgu + bgu with Wgu (H, 2F) in the fused tensor's (in, out) layout and
 * gate, up its even and odd columns (interleaved); out = glu(gate, up) Wd +
 * bd with Wd (F, H). gate_s, up_s get gate and up before the clamps. scratch:
 * n (2H + 3F) floats. */
int sg_moe_oss_expert_forward(float *gate_s, float *up_s, float *out_s, const float *x,
                              const int32_t *slots, const int32_t *rows, size_t n, const float *Wgu,
                              const float *bgu, const float *Wd, const float *bd, size_t H,
                              size_t F, size_t K, float *scratch);

/* Its backward (as sg_moe_expert_backward): dtopw, dx_s WRITE (their rows);
 * dWgu (H, 2F), dbgu (2F), dWd (F, H), dbd (H) ACCUMULATE. scratch: n (5H +
 * 5F) floats. */
int sg_moe_oss_expert_backward(float *dx_s, float *dtopw, float *dWgu, float *dbgu, float *dWd,
                               float *dbd, const float *dy, const float *x, const float *gate_s,
                               const float *up_s, const float *topw, const int32_t *slots,
                               const int32_t *rows, size_t n, const float *Wgu, const float *Wd,
                               const float *bd, size_t H, size_t F, size_t K, float *scratch);

/* Attention sinks (GptOssAttention): one learned logit per query head joins
 * every query's softmax as an extra column, dropped after it (its value is
 * nothing). From sg_attention_forward's out (B, T, Hq, D) and lse (B, Hq, T),
 * in place: lse' = log(exp(lse) + exp(sink_h)), out *= exp(lse - lse'). */
int sg_attention_sinks_forward(float *out, float *lse, const float *sinks, size_t B, size_t T,
                               size_t Hq, size_t D);

/* dsinks (Hq) ACCUMULATES -sum over (b, t) of exp(sink_h - lse') (dout . out),
 * with out and lse those of sg_attention_sinks_forward. sg_attention_backward
 * given the same out and lse' computes dq, dk and dv with the sinks (the
 * sink column has no value, so delta = dout . out is unchanged). */
int sg_attention_sinks_backward(float *dsinks, const float *dout, const float *out,
                                const float *lse, const float *sinks, size_t B, size_t T, size_t Hq,
                                size_t D);

/* ---- casts ------------------------------------------------------------------- */

/* fp32 <-> bfloat16 and IEEE binary16, bit patterns in uint16_t. From fp32:
 * round to nearest, ties to even; overflow gives infinity; fp16 subnormals
 * are rounded correctly; a NaN stays a NaN with its sign and the top bits of
 * its payload, made quiet (as x86's VCVTNEPS2BF16 / VCVTPS2PH do). To fp32:
 * exact, NaN payloads kept. */
/* sg_f32_to_bf16(float) is inline in common/dtype.h (included above). */
float sg_bf16_to_f32(uint16_t h);
uint16_t sg_f32_to_f16(float x);
float sg_f16_to_f32(uint16_t h);

void sg_cast_f32_to_bf16(uint16_t *out, const float *in, size_t n);
void sg_cast_bf16_to_f32(float *out, const uint16_t *in, size_t n);
void sg_cast_f32_to_f16(uint16_t *out, const float *in, size_t n);
void sg_cast_f16_to_f32(float *out, const uint16_t *in, size_t n);

/* ---- gradient norm ------------------------------------------------------------ */

/* One partial of the global gradient norm: *sumsq = sum of x[i]^2 over x (n)
 * in double (WRITES; the caller adds the partials and takes the square root)
 * and *nonfinite = 1 if any x[i] is NaN or +-Inf, else 0 (DeepSpeed's
 * overflow check). */
int sg_grad_norm_partial(double *sumsq, int *nonfinite, const float *x, size_t n);

#endif /* SG_CODELETS_CPU_OPS_H */
