/* block_impl.h - what the GPU unit files share (block.cu: embedding, head,
 * dispatch; block_layer.cu: the decoder layer; block_plan.cu: the scratch
 * plans): a call's sizes, the plans' layouts and the small helpers that
 * address tensors and regions. C++ (the .cu files' language); include
 * cuda_prologue.h first. Not a public header: block_cuda.h is the
 * interface.
 */
#ifndef SG_CODELETS_CUDA_BLOCK_IMPL_H
#define SG_CODELETS_CUDA_BLOCK_IMPL_H

#include "codelets/cuda/block_cuda.h"

#include <stdint.h>
#include <string.h>

/* Every scratch region starts on this boundary (cudaMalloc's alignment), so
 * kernels may use vector loads on them whatever the dtype. */
#define SG_CU_SCRATCH_ALIGN 256

/* ---- small helpers -------------------------------------------------------------- */

/* Sizes of one call. */
typedef struct dims {
    size_t B, T, N, H, Hq, Hkv, D, Q, KV, F, V;
    size_t es; /* bytes of one element of dt */
    sg_dtype dt;
    float eps;
} dims;

static inline dims dims_of(const sg_model *m, size_t B, size_t T, sg_dtype dt)
{
    dims d;
    memset(&d, 0, sizeof d);
    d.B = B;
    d.T = T;
    d.N = B * T;
    d.H = (size_t)m->hidden_size;
    d.Hq = (size_t)m->num_heads;
    d.Hkv = (size_t)m->num_kv_heads;
    d.D = (size_t)m->head_dim;
    d.Q = d.Hq * d.D;
    d.KV = d.Hkv * d.D;
    d.F = (size_t)m->intermediate_size;
    d.V = (size_t)m->vocab_size;
    d.es = sg_dtype_size(dt);
    d.dt = dt;
    d.eps = (float)m->rms_norm_eps;
    return d;
}

static inline int dtype_ok(sg_dtype dt)
{
    return dt == SG_F32 || dt == SG_BF16 || dt == SG_F16;
}

/* Element `off` of a tensor of element size es; NULL for SG_NO_OFFSET. */
static inline const void *cat_(const void *base, size_t off, size_t es)
{
    return off == SG_NO_OFFSET ? NULL : (const void *)((const char *)base + off * es);
}

static inline void *mat_(void *base, size_t off, size_t es)
{
    return off == SG_NO_OFFSET ? NULL : (void *)((char *)base + off * es);
}

static inline size_t max2(size_t a, size_t b)
{
    return a > b ? a : b;
}

static inline void *region(void *scratch, size_t off)
{
    return off == SG_NO_OFFSET ? NULL : (void *)((char *)scratch + off);
}

/* ---- scratch plans (block_plan.cu) ------------------------------------------------ */

/* A plan is a list of byte offsets into the scratch, each region aligned to
 * SG_CU_SCRATCH_ALIGN; `end` is the bytes it needs. The same functions size
 * the scratch (sg_cu_unit_scratch_bytes, every optional region on) and carve
 * it (the regions a call actually uses). An absent region is SG_NO_OFFSET. */

/* Layer forward: the saved activations (saved == NULL: checkpointing), then
 * act = silu(gate) * up (N, F) (not for the recompute, y == NULL). */
typedef struct layer_fwd_plan {
    size_t saved, act, end;
} layer_fwd_plan;

/* Layer backward, MLP half: act/dgate, dact, dup (N, F); dn2, tmp (N, H);
 * the fp32 work of post_attention_layernorm's dw. */
typedef struct mlp_bwd_plan {
    size_t act, dact, dup, dn2, tmp, work, end;
} mlp_bwd_plan;

/* Layer backward, attention half (reuses the MLP half's space): datt/dqpre,
 * dq (N, Q); dk, dv, dkpre (QK-norm only) (N, KV); dn1, tmp (N, H); work. */
typedef struct attn_bwd_plan {
    size_t datt, dq, dk, dv, dkpre, dn1, tmp, work, end;
} attn_bwd_plan;

/* MoE layer (moe.cu), forward after the saved activations: the router's
 * logits (N, E) in dt and its fp32 state (probs (N, E), sel, topw (N k)),
 * the slot lists and counts, every slot's gate, up (F) and output (H) rows
 * (experts one after the other, each on its own consecutive rows), the slot
 * row pointers, one expert's work. Backward: the fp32 router state read back
 * from saved, dtopw and the experts' dtopw rows, dlogits, slots, counts,
 * gate, up, the experts' dx rows, row pointers, dn2, tmp (N, H), one
 * expert's work, the router's work and the norm's. */
typedef struct moe_plan {
    size_t logits, probs, sel, topw, slots, counts, gate, up, outs, ptrs, ex;
    size_t dtopw, dtopw_rows, dlogits, dxs, dn2, tmp, rwork, nwork, end;
} moe_plan;

/* Head forward: the saved activations (saved == NULL), a device float for
 * the loss when the caller wants none (the kernel always writes one), one
 * chunk's logits (C, V) (C = sg_head_chunk_tokens), the cross-entropy's
 * fp32 work (the row losses of all N tokens). */
typedef struct head_fwd_plan {
    size_t saved, loss, logits, work, end;
} head_fwd_plan;

/* Head backward: one chunk's logits, recomputed and turned into dlogits in
 * place (C, V), dn (N, H), the loss weight (1 float, kept while the chunks
 * run), work for the norm's dw. */
typedef struct head_bwd_plan {
    size_t logits, dn, weight, work, end;
} head_bwd_plan;

layer_fwd_plan sg_cu_plan_layer_fwd(const dims *d, size_t saved_elems, int saved_here, int with_y);

mlp_bwd_plan sg_cu_plan_mlp_bwd(const dims *d);

attn_bwd_plan sg_cu_plan_attn_bwd(const sg_model *m, const dims *d);

moe_plan sg_cu_plan_moe(const sg_model *m, const dims *d, size_t at, int bwd);

head_fwd_plan sg_cu_plan_head_fwd(const dims *d, size_t C, size_t saved_elems, int saved_here,
                                  int loss_here);

head_bwd_plan sg_cu_plan_head_bwd(const dims *d, size_t C);

/* ---- the decoder layer (block_layer.cu) ------------------------------------------ */

int sg_cu_layer_forward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                        const sg_cu_unit_io *io);

int sg_cu_layer_backward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                         const sg_cu_unit_io *io, const void *dy, float dloss,
                         const float *dloss_scale, void *dx, void *dparams);

#endif /* SG_CODELETS_CUDA_BLOCK_IMPL_H */
