/* cuda_ops.h - the GPU kernels of codelets/cuda/, callable from C.
 *
 * The same operations as codelets/cpu/ops.h (same semantics, same argument
 * order: outputs, saved activations, inputs, sizes), on device memory and
 * queued on a stream. What differs:
 * - Storage is in a dtype `dt` (SG_F32, SG_BF16 or SG_F16 from graph/ir.h):
 *   every tensor argument of one call is stored in dt unless its comment
 *   says float/int32_t. The math is fp32 (loads convert to float, stores
 *   round to nearest even), GEMMs accumulate in fp32 (cuBLAS,
 *   CUBLAS_COMPUTE_32F).
 * - Calls are asynchronous: they queue work on cu->stream and return; the
 *   results are there once the stream has run. A launch failure returns
 *   SG_EIO; bad sizes or dtypes SG_EINVAL (nothing queued).
 * - Accumulating outputs (dW, dw, db, dtable) add into what is there, in dt.
 *
 * Every .cu file builds two ways (codelets/cuda/cuda_compat.h): with nvcc
 * into libsgcuda.a, and with the host C++ compiler and -DSG_CUDA_EMU into
 * libsgcudaemu.a, where kernels run on the CPU under the emulator of
 * codelets/cuda/emu/ (device memory is host memory). The emulated build is
 * what CI tests against the CPU kernels; the real one is tested on a GPU.
 */
#ifndef SG_CODELETS_CUDA_OPS_H
#define SG_CODELETS_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the C headers below have no guards of their own */
#endif

#include "codelets/cpu/adam.h"
#include "common/error.h"
#include "graph/ir.h"

/* Where work goes: a stream and a cuBLAS handle bound to it. StarPU's CUDA
 * codelets fill it from starpu_cuda_get_local_stream() and
 * starpu_cublas_get_local_handle(); tests and benchmarks use sg_cu_open. */
typedef struct sg_cu {
    void *stream; /* cudaStream_t */
    void *blas;   /* cublasHandle_t, already bound to stream */
} sg_cu;

/* ---- device, memory, streams (tests, benchmarks, the runtime) ----------- */

/* Usable CUDA devices (0 without a driver or device); 1 when emulated. */
int sg_cu_device_count(void);
/* 1 in the emulated build (libsgcudaemu.a), 0 in the real one. */
int sg_cu_is_emulated(void);
/* A new stream and cuBLAS handle on the current device; SG_EIO on failure. */
int sg_cu_open(sg_cu *cu);
void sg_cu_close(sg_cu *cu);
/* Waits for everything queued on cu->stream; SG_EIO if a kernel failed. */
int sg_cu_sync(const sg_cu *cu);
/* Device memory (NULL on failure) and synchronous copies (SG_EIO on failure). */
void *sg_cu_malloc(size_t bytes);
void sg_cu_free(void *p);
int sg_cu_to_device(void *dst, const void *src, size_t bytes);
int sg_cu_to_host(void *dst, const void *src, size_t bytes);
/* Stream-ordered scratch: memory usable by work queued on cu->stream after
 * this call, given back with sg_cu_free_async (also stream-ordered). */
void *sg_cu_malloc_async(const sg_cu *cu, size_t bytes);
void sg_cu_free_async(const sg_cu *cu, void *p);
/* Queued device-to-device copy and zero fill. */
int sg_cu_copy_async(const sg_cu *cu, void *dst, const void *src, size_t bytes);
int sg_cu_zero_async(const sg_cu *cu, void *p, size_t bytes);
/* The last CUDA error as text (for messages). */
const char *sg_cu_last_error(void);

/* ---- element-wise ------------------------------------------------------- */

/* out (n) = in (n) converted from in_dt to out_dt (any of f32, bf16, f16;
 * round to nearest even, NaN stays NaN). */
int sg_cu_cast(const sg_cu *cu, void *out, sg_dtype out_dt, const void *in, sg_dtype in_dt,
               size_t n);
/* acc (n) += x (n). */
int sg_cu_add_into(const sg_cu *cu, void *acc, const void *x, sg_dtype dt, size_t n);
/* Batch tiles (sg_grad_partials_sum of ops.h): out (n, stored in dt) = the sum of the
 * fp32 partials parts[0..nparts) (device pointers in a host array), added in
 * that order in fp32, then added to out when accumulate; one rounding to dt
 * per element. 1 <= nparts <= SG_CU_GRAD_SUM_MAX. */
#define SG_CU_GRAD_SUM_MAX 64
int sg_cu_grad_sum(const sg_cu *cu, void *out, sg_dtype dt, const float *const *parts, int nparts,
                   size_t n, int accumulate);

/* out (N, C) = table[tokens]; tokens (N) int32_t in [0, V) (checked on the
 * host by the caller: ids out of range are skipped by the kernel). */
int sg_cu_embedding_forward(const sg_cu *cu, void *out, const int32_t *tokens, const void *table,
                            sg_dtype dt, size_t N, size_t V, size_t C);
/* dtable (V, C) += scatter of dout (N, C) by tokens: ACCUMULATES (atomics:
 * the order of additions, hence the last bits, may vary run to run). */
int sg_cu_embedding_backward(const sg_cu *cu, void *dtable, const int32_t *tokens, const void *dout,
                             sg_dtype dt, size_t N, size_t V, size_t C);

/* RMSNorm over the last dimension, as sg_rmsnorm_forward: out (N, C), rstd
 * (N) (may be NULL), x (N, C), w (C). */
int sg_cu_rmsnorm_forward(const sg_cu *cu, void *out, void *rstd, const void *x, const void *w,
                          sg_dtype dt, size_t N, size_t C, float eps);
/* dx (N, C): WRITES; dw (C): ACCUMULATES (may be NULL). `work` is device
 * scratch of sg_cu_rmsnorm_backward_work_floats(N, C) floats (for the dw
 * partial sums), or NULL when dw is NULL. */
int sg_cu_rmsnorm_backward(const sg_cu *cu, void *dx, void *dw, const void *dout, const void *x,
                           const void *w, const void *rstd, sg_dtype dt, size_t N, size_t C,
                           float *work);
size_t sg_cu_rmsnorm_backward_work_floats(size_t N, size_t C);

/* Rotary embedding, Hugging Face rotate_half convention, as sg_rope_*:
 * x, out (B, T, H, D); cos_tab, sin_tab (T, D/2) float (device). out may
 * equal x; dx may equal dout. */
int sg_cu_rope_forward(const sg_cu *cu, void *out, const void *x, const float *cos_tab,
                       const float *sin_tab, sg_dtype dt, size_t B, size_t T, size_t H, size_t D);
int sg_cu_rope_backward(const sg_cu *cu, void *dx, const void *dout, const float *cos_tab,
                        const float *sin_tab, sg_dtype dt, size_t B, size_t T, size_t H, size_t D);

/* h (N, F) = silu(gate) * up; backward WRITES dgate, dup (N, F). */
int sg_cu_swiglu_forward(const sg_cu *cu, void *h, const void *gate, const void *up, sg_dtype dt,
                         size_t N, size_t F);
int sg_cu_swiglu_backward(const sg_cu *cu, void *dgate, void *dup, const void *dh, const void *gate,
                          const void *up, sg_dtype dt, size_t N, size_t F);

/* ---- linear (cuBLAS) ------------------------------------------------------ */

/* y (N, out) = x (N, in) @ W^T + b; W (out, in), b (out) or NULL. */
int sg_cu_linear_forward(const sg_cu *cu, void *y, const void *x, const void *W, const void *b,
                         sg_dtype dt, size_t N, size_t in, size_t out);
/* dx (N, in) = dy @ W: WRITES. dW (out, in) += dy^T @ x, db (out) += column
 * sums of dy: ACCUMULATE. Any of dx, dW, db may be NULL. `work` is device
 * scratch of sg_cu_linear_backward_work_floats(N, out) floats when db is
 * given, else NULL. */
int sg_cu_linear_backward(const sg_cu *cu, void *dx, void *dW, void *db, const void *dy,
                          const void *x, const void *W, sg_dtype dt, size_t N, size_t in,
                          size_t out, float *work);
size_t sg_cu_linear_backward_work_floats(size_t N, size_t out);

/* ---- attention ------------------------------------------------------------ */

/* Causal grouped-query attention with an optional sliding window, as
 * sg_attention_forward: out (B, T, Hq, D), lse (B, Hq, T) (stored in dt,
 * like the CPU path's saved activations), q (B, T, Hq, D), k, v (B, T, Hkv,
 * D). D at most 256. Runs the implementation that the environment's
 * STEPGRAPH_ATTENTION_IMPL names (sg_cu_attention_impl_env; docs/gpu.md,
 * "Attention implementations"); SG_EINVAL when that value is not valid. */
int sg_cu_attention_forward(const sg_cu *cu, void *out, void *lse, const void *q, const void *k,
                            const void *v, sg_dtype dt, size_t B, size_t T, size_t Hq, size_t Hkv,
                            size_t D, size_t window);
/* dq (B, T, Hq, D), dk, dv (B, T, Hkv, D): all WRITE. `work` is device
 * scratch of sg_cu_attention_backward_work_floats(...) floats. */
int sg_cu_attention_backward(const sg_cu *cu, void *dq, void *dk, void *dv, const void *dout,
                             const void *q, const void *k, const void *v, const void *out,
                             const void *lse, sg_dtype dt, size_t B, size_t T, size_t Hq,
                             size_t Hkv, size_t D, size_t window, float *work);
size_t sg_cu_attention_backward_work_floats(size_t B, size_t T, size_t Hq, size_t Hkv, size_t D);

/* The implementations behind those two (attention_select.cu picks one). */
typedef enum sg_cu_att_impl {
    SG_CU_ATT_AUTO = 0, /* the documented default for the sizes (sg_cu_attention_impl_auto) */
    SG_CU_ATT_FP32,     /* attention.cu: FlashAttention-2 tiles on fp32 FMAs, no (T, T) matrix */
    SG_CU_ATT_CUBLAS,   /* attention_blas.cu: cuBLAS batched products over query tiles */
    SG_CU_ATT_CUDNN,    /* cuDNN's fused SDPA: named, not built yet (refused) */
} sg_cu_att_impl;

/* "fp32", "cublas", "cudnn", "auto". */
const char *sg_cu_attention_impl_name(sg_cu_att_impl impl);
/* Parses a value of STEPGRAPH_ATTENTION_IMPL (`what` names it in the
 * message): fp32, cublas or auto (NULL or empty is auto); cudnn and
 * anything else are SG_EINVAL with a message naming the value. */
int sg_cu_attention_impl_parse(const char *s, const char *what, sg_cu_att_impl *impl,
                               sg_error *err);
/* The environment's choice: STEPGRAPH_ATTENTION_IMPL parsed, and
 * STEPGRAPH_ATTENTION_SCRATCH_MB (a positive integer, default 512) into
 * *scratch_bytes, the most the cuBLAS route's score tiles may take. */
int sg_cu_attention_impl_env(sg_cu_att_impl *impl, size_t *scratch_bytes, sg_error *err);
/* What auto runs for these sizes: never SG_CU_ATT_AUTO. */
sg_cu_att_impl sg_cu_attention_impl_auto(sg_dtype dt, size_t T, size_t D);

/* The fp32 route (attention.cu), as sg_cu_attention_forward / _backward. */
int sg_cu_attention_fp32_forward(const sg_cu *cu, void *out, void *lse, const void *q,
                                 const void *k, const void *v, sg_dtype dt, size_t B, size_t T,
                                 size_t Hq, size_t Hkv, size_t D, size_t window);
int sg_cu_attention_fp32_backward(const sg_cu *cu, void *dq, void *dk, void *dv, const void *dout,
                                  const void *q, const void *k, const void *v, const void *out,
                                  const void *lse, sg_dtype dt, size_t B, size_t T, size_t Hq,
                                  size_t Hkv, size_t D, size_t window, float *work);

/* The cuBLAS route (attention_blas.cu), the same semantics: q, k, v (and
 * dout) are repacked head-major, then for each tile of `tile_rows` query
 * positions the scores S = Q K^T (fp32), a softmax kernel (P in dt), and
 * P V; the backward likewise (dP = dout V^T, P and dS = P (dP - Dvec) in one
 * kernel, dV += P^T dout, dK += dS^T Q, dQ = dS K). The GEMMs take dt
 * inputs and accumulate in fp32 (tensor cores for bf16 / f16). tile_rows 0
 * takes the most rows whose score tiles fit in scratch_bytes (at least
 * 16). Scratch is stream-ordered device memory taken and given back inside
 * the call (SG_ENOMEM when it cannot be had); the backward does not use
 * `work`. */
int sg_cu_attention_blas_forward(const sg_cu *cu, size_t tile_rows, size_t scratch_bytes, void *out,
                                 void *lse, const void *q, const void *k, const void *v,
                                 sg_dtype dt, size_t B, size_t T, size_t Hq, size_t Hkv, size_t D,
                                 size_t window);
int sg_cu_attention_blas_backward(const sg_cu *cu, size_t tile_rows, size_t scratch_bytes, void *dq,
                                  void *dk, void *dv, const void *dout, const void *q,
                                  const void *k, const void *v, const void *out, const void *lse,
                                  sg_dtype dt, size_t B, size_t T, size_t Hq, size_t Hkv, size_t D,
                                  size_t window);
/* The query rows of one tile that the call would use (0 on bad sizes). */
size_t sg_cu_attention_blas_tile_rows(size_t tile_rows, size_t scratch_bytes, int backward,
                                      sg_dtype dt, size_t B, size_t T, size_t Hq, size_t Hkv,
                                      size_t window);

/* Attention sinks (GPT-OSS), as sg_attention_sinks_forward / _backward of
 * codelets/cpu/ops.h, after sg_cu_attention_forward: out (B, T, Hq, D) and
 * lse (B, Hq, T) in place (lse' = log(exp(lse) + exp(sink_h)), out *=
 * exp(lse - lse')); sinks (Hq) in dt. sg_cu_attention_backward given that
 * out and lse' gives dq, dk, dv with the sinks; dsinks (Hq, dt) ACCUMULATES
 * -sum over (b, t) of exp(sink_h - lse') (dout . out), summed in double in a
 * fixed order (one block per head). */
int sg_cu_attention_sinks_forward(const sg_cu *cu, void *out, void *lse, const void *sinks,
                                  sg_dtype dt, size_t B, size_t T, size_t Hq, size_t D);
int sg_cu_attention_sinks_backward(const sg_cu *cu, void *dsinks, const void *dout, const void *out,
                                   const void *lse, const void *sinks, sg_dtype dt, size_t B,
                                   size_t T, size_t Hq, size_t D);

/* ---- mixture of experts (moe.cu; codelets/cpu/moe.c and gpt_oss.c state ---
 * the formulas; these are the same operations on the device) --------------
 * Router state is float whatever dt: logits, probs (N, E), sel (N, K: expert
 * indices as floats), topw, dtopw (N, K), stats (2 E: picks, then
 * probability sums); dlogits (N, E), x, weights, activations are in dt. Slot lists
 * and counts are device int32. An expert's n comes from the host (cuBLAS
 * sizes): copy the counts of sg_cu_moe_expert_slots back first. */

/* Qwen3-MoE router (sg_moe_router_forward): logits = x Wr^T, probs =
 * softmax, sel/topw = top-k (ties to the lowest index), renormalised when
 * norm_topk_prob. All WRITE. */
int sg_cu_moe_router_forward(const sg_cu *cu, float *probs, float *sel, float *topw, float *logits,
                             const void *x, const void *Wr, sg_dtype dt, size_t N, size_t H,
                             size_t E, size_t K, int norm_topk_prob);
/* GPT-OSS router (sg_moe_oss_router_forward): logits = x Wr^T + br, top-k of
 * the logits, topw = softmax over the k selected; probs = full softmax. */
int sg_cu_moe_oss_router_forward(const sg_cu *cu, float *probs, float *sel, float *topw,
                                 float *logits, const void *x, const void *Wr, const void *br,
                                 sg_dtype dt, size_t N, size_t H, size_t E, size_t K);
/* Their backward (sg_moe_router_backward, sg_moe_oss_router_backward): dx (N,
 * H) and dlogits WRITE; dWr (E, H), dbr (E) ACCUMULATE (may be NULL). stats
 * may be NULL (no load-balancing term); aux_scale = dloss coef E / (L N)^2
 * (the derivative of the aux loss by a probability, per pick), times
 * *aux_scale_mul (a device float: the fp16 loss scale) when that is not
 * NULL. `work`: device scratch of sg_cu_moe_router_backward_work_floats(N, E)
 * floats. */
int sg_cu_moe_router_backward(const sg_cu *cu, void *dx, void *dWr, void *dlogits,
                              const float *dtopw, const float *probs, const float *sel,
                              const float *topw, const float *stats, double aux_scale,
                              const float *aux_scale_mul, const void *x, const void *Wr,
                              sg_dtype dt, size_t N, size_t H, size_t E, size_t K,
                              int norm_topk_prob, float *work);
int sg_cu_moe_oss_router_backward(const sg_cu *cu, void *dx, void *dWr, void *dbr, void *dlogits,
                                  const float *dtopw, const float *probs, const float *sel,
                                  const float *topw, const float *stats, double aux_scale,
                                  const float *aux_scale_mul, const void *x, const void *Wr,
                                  sg_dtype dt, size_t N, size_t H, size_t E, size_t K, float *work);
size_t sg_cu_moe_router_backward_work_floats(size_t N, size_t E);
/* stats (2 E) += [picks of each expert, sum of its probs] (token order, in
 * double); *loss (device float) = E sum_e (stats_e / (L N)) (stats_{E+e} /
 * (L N)): the load-balancing loss (sg_moe_aux_loss) without its coefficient. */
int sg_cu_moe_stats_add(const sg_cu *cu, float *stats, const float *probs, const float *sel,
                        size_t N, size_t E, size_t K);
int sg_cu_moe_aux_loss(const sg_cu *cu, float *loss, const float *stats, size_t E, size_t L,
                       size_t N);
/* *loss (device float) += coef times that loss, in double (the head). */
int sg_cu_moe_aux_loss_add(const sg_cu *cu, float *loss, const float *stats, size_t E, size_t L,
                           size_t N, double coef);
/* The slots s (= n K + j, sel[s] == e) of experts [e0, e1), expert by expert,
 * each in token order (sg_moe_expert_slots per expert, concatenated): slots
 * (at most N K), counts (e1 - e0) WRITE. */
int sg_cu_moe_expert_slots(const sg_cu *cu, int32_t *slots, int32_t *counts, const float *sel,
                           size_t N, size_t K, size_t e0, size_t e1);
/* One expert on its n slots (sg_moe_expert_forward): gather x rows slots[r] /
 * K, gate = xe Wg^T, up = xe Wu^T (Wg, Wu (F, H)), out = (silu(gate) up) Wd^T
 * (Wd (H, F)); gate_s, up_s (F) and out_s (H) rows rows[r] (rows NULL: r).
 * out_s NULL: gate and up only (recompute). `work`: device scratch of
 * sg_cu_moe_expert_work_bytes(n, H, F, dt) bytes (either family, either
 * direction). */
int sg_cu_moe_expert_forward(const sg_cu *cu, void *gate_s, void *up_s, void *out_s, const void *x,
                             const int32_t *slots, const int32_t *rows, size_t n, const void *Wg,
                             const void *Wu, const void *Wd, sg_dtype dt, size_t H, size_t F,
                             size_t K, void *work);
/* Its backward (sg_moe_expert_backward): dx_s (H) and dtopw rows WRITE; dWg,
 * dWu, dWd ACCUMULATE (may be NULL). dy (N, H) is the layer output's
 * gradient; topw (N K) float. */
int sg_cu_moe_expert_backward(const sg_cu *cu, void *dx_s, float *dtopw, void *dWg, void *dWu,
                              void *dWd, const void *dy, const void *x, const void *gate_s,
                              const void *up_s, const float *topw, const int32_t *slots,
                              const int32_t *rows, size_t n, const void *Wg, const void *Wu,
                              const void *Wd, sg_dtype dt, size_t H, size_t F, size_t K,
                              void *work);
size_t sg_cu_moe_expert_work_bytes(size_t n, size_t H, size_t F, sg_dtype dt);
/* GPT-OSS's clamped GLU (sg_oss_glu_forward / _backward): h = (clamp(up) +
 * 1) g sigmoid(1.702 g), g = min(gate, 7); no gradient where a clamp cut. */
int sg_cu_oss_glu_forward(const sg_cu *cu, void *h, const void *gate, const void *up, sg_dtype dt,
                          size_t N, size_t F);
int sg_cu_oss_glu_backward(const sg_cu *cu, void *dgate, void *dup, const void *dh,
                           const void *gate, const void *up, sg_dtype dt, size_t N, size_t F);
/* One GPT-OSS expert (sg_moe_oss_expert_forward / _backward): gu = xe Wgu +
 * bgu with Wgu (H, 2F) (in, out), gate/up its even/odd columns; out =
 * glu(gate, up) Wd + bd with Wd (F, H). gate_s, up_s get gate and up before
 * the clamps. Backward: dx_s, dtopw rows WRITE; dWgu, dbgu, dWd, dbd
 * ACCUMULATE (may be NULL). `work` as for sg_cu_moe_expert_forward. */
int sg_cu_moe_oss_expert_forward(const sg_cu *cu, void *gate_s, void *up_s, void *out_s,
                                 const void *x, const int32_t *slots, const int32_t *rows, size_t n,
                                 const void *Wgu, const void *bgu, const void *Wd, const void *bd,
                                 sg_dtype dt, size_t H, size_t F, size_t K, void *work);
int sg_cu_moe_oss_expert_backward(const sg_cu *cu, void *dx_s, float *dtopw, void *dWgu, void *dbgu,
                                  void *dWd, void *dbd, const void *dy, const void *x,
                                  const void *gate_s, const void *up_s, const float *topw,
                                  const int32_t *slots, const int32_t *rows, size_t n,
                                  const void *Wgu, const void *Wd, const void *bd, sg_dtype dt,
                                  size_t H, size_t F, size_t K, void *work);
/* ptrs[slots[r]] = base + r row_bytes for r < n (device array of N K
 * pointers): which row of which group buffer holds each slot. */
int sg_cu_moe_slot_rows(const sg_cu *cu, const void **ptrs, const int32_t *slots, size_t n,
                        const void *base, size_t row_bytes);
/* y (N, H) = h + sum_j topw[t K + j] outs[t K + j] (slot order;
 * sg_moe_combine_forward); dx (N, H) = sum_j dx_s[t K + j] (slot order;
 * sg_moe_slots_sum). outs, dx_s: device arrays of N K row pointers (dt). */
int sg_cu_moe_combine_forward(const sg_cu *cu, void *y, const void *h, const void *const *outs,
                              const float *topw, sg_dtype dt, size_t N, size_t H, size_t K);
int sg_cu_moe_slots_sum(const sg_cu *cu, void *dx, const void *const *dx_s, sg_dtype dt, size_t N,
                        size_t H, size_t K);
/* dst[slots[r]] = src[r], n floats (a group's dtopw rows back in slot order). */
int sg_cu_moe_scatter_slots(const sg_cu *cu, float *dst, const float *src, const int32_t *slots,
                            size_t n);

/* ---- cross-entropy ------------------------------------------------------- */

/* As sg_cross_entropy_forward: *loss (device float) = mean over the targets
 * >= 0 (0 when there are none), lse (N) in dt (may be NULL), logits (N, V),
 * targets (N) int32_t (device; >= V is the caller's to refuse beforehand:
 * such rows count as ignored here). `work` is device scratch of
 * sg_cu_cross_entropy_work_floats(N) floats. */
int sg_cu_cross_entropy_forward(const sg_cu *cu, float *loss, void *lse, const void *logits,
                                const int32_t *targets, sg_dtype dt, size_t N, size_t V,
                                float *work);
/* dlogits (N, V) = (softmax - onehot) * dloss * (*dloss_scale) / count,
 * count = the targets >= 0, counted on the device; dloss_scale is a device
 * float (the fp16 loss scale) or NULL for 1. Rows of ignored targets, and
 * all rows when count is 0, are zero. dlogits may equal logits. `work` as
 * for the forward. */
int sg_cu_cross_entropy_backward(const sg_cu *cu, void *dlogits, const void *logits,
                                 const void *lse, const int32_t *targets, sg_dtype dt, size_t N,
                                 size_t V, float dloss, const float *dloss_scale, float *work);
size_t sg_cu_cross_entropy_work_floats(size_t N);

/* The two calls above in pieces, for logits seen a chunk of rows at a time
 * (the head, block.cu): _rows writes row_loss (N) (lse - logit[target], 0
 * for ignored rows) and lse (N) in dt for rows [0, N) of a chunk; _mean
 * writes *loss = sum of row_loss (N) / count of the targets (N) >= 0 (the
 * whole micro-batch's). _weight writes *g = dloss * (*dloss_scale or 1) /
 * count (device float); _backward_rows writes the chunk's dlogits (N, V)
 * from its logits, lse and targets with that weight (dlogits may equal
 * logits). forward = rows + mean, backward = weight + backward_rows: the
 * pieces give the same bits as one call. */
int sg_cu_cross_entropy_rows(const sg_cu *cu, float *row_loss, void *lse, const void *logits,
                             const int32_t *targets, sg_dtype dt, size_t N, size_t V);
int sg_cu_cross_entropy_mean(const sg_cu *cu, float *loss, const float *row_loss,
                             const int32_t *targets, size_t N, size_t V);
int sg_cu_cross_entropy_weight(const sg_cu *cu, float *g, const int32_t *targets, size_t N,
                               size_t V, float dloss, const float *dloss_scale);
int sg_cu_cross_entropy_backward_rows(const sg_cu *cu, void *dlogits, const void *logits,
                                      const void *lse, const int32_t *targets, sg_dtype dt,
                                      size_t N, size_t V, const float *g);

/* ---- optimizer-side ---------------------------------------------------------- */

/* One partial of the gradient norm: sumsq (device double) += sum of x^2 in
 * double, nonfinite (device int32) |= 1 if any x is NaN or +-Inf. Zero both
 * first (sg_cu_zero_async) and chain calls to cover several buffers (the
 * order of the atomic additions may change the last bits). */
int sg_cu_grad_norm_accumulate(const sg_cu *cu, double *sumsq, int32_t *nonfinite, const void *x,
                               sg_dtype dt, size_t n);
/* res (device float[2]) = [sqrt(sumsq) / scale, or +inf if nonfinite;
 * 1 / scale], scale = *loss_scale (device float) or 1 when NULL: the
 * SG_BUF_GRAD_NORM layout. */
int sg_cu_grad_norm_finish(const sg_cu *cu, float *res, const double *sumsq,
                           const int32_t *nonfinite, const float *loss_scale);
/* Adds n piece partials (device, 16 bytes each: a double sum of squares,
 * then an int32 flag; the SG_BUF_NORM_PART layout) to sumsq and nonfinite,
 * one after the other in order (one thread: the same sums as the CPU). */
int sg_cu_grad_norm_add_parts(const sg_cu *cu, double *sumsq, int32_t *nonfinite, const void *parts,
                              size_t n);

/* The optimizer step t over n elements (Adam / AdamW, Lion or Adagrad, as
 * prm->algo says), as sg_adam_step (codelets/cpu/adam.h: the same formulas
 * and order, Lion's and Adagrad's bit for bit with the CPU kernel; the scalar coefficients are computed in
 * double on the host and rounded to float once): p, m, v float (device) in
 * place, g (n) in dt. The gradient multiplier is computed on the device
 * from norm (device float[2], the SG_BUF_GRAD_NORM layout: 1 / loss scale,
 * and DeepSpeed's clipping by (norm + 1e-6) / clip when that exceeds 1 and
 * clip > 0), or 1 when norm is NULL; when overflow (device int32, may be
 * NULL) is non-zero nothing changes (fp16 overflow: the step is skipped). */
int sg_cu_adam_step(const sg_cu *cu, const sg_adam_params *prm, int64_t t, float *p, const void *g,
                    sg_dtype dt, float *m, float *v, size_t n, const float *norm,
                    const int32_t *overflow, double clip);

#ifdef __cplusplus
}
#endif

#endif /* SG_CODELETS_CUDA_OPS_H */
