/* block.cu - forward and backward of the graph units (embedding,
 * decoder layer, head) on the GPU, composed from the kernels of cuda_ops.h
 * (see block_cuda.h). The exact counterpart of codelets/cpu/block.c: the
 * same parameter offsets and saved-activation layout (block_layout.c, in
 * elements of io->dt instead of floats), the same kernels called in the same
 * order, the same residual adds, and the same gradients written or
 * accumulated.
 *
 * No kernels of its own: every step is a cuda_ops.h call queued on
 * cu->stream, so nothing here waits for the device. Scratch is carved in
 * bytes from io->scratch by the plans below; sg_cu_unit_scratch_bytes is
 * the largest plan, so sizing and carving cannot disagree.
 */
#include "codelets/cuda/cuda_prologue.h"

#include "codelets/cuda/block_cuda.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every scratch region starts on this boundary (cudaMalloc's alignment), so
 * kernels may use vector loads on them whatever the dtype. */
#define SG_CU_SCRATCH_ALIGN 256

/* ---- small helpers -------------------------------------------------------------- */

/* Sizes of one call. */
typedef struct dims {
    size_t B, T, N, H, Hq, Hkv, D, Q, KV, F, V;
    size_t es;      /* bytes of one element of dt */
    sg_dtype dt;
    float eps;
} dims;

static dims dims_of(const sg_model *m, size_t B, size_t T, sg_dtype dt)
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

static int dtype_ok(sg_dtype dt)
{
    return dt == SG_F32 || dt == SG_BF16 || dt == SG_F16;
}

/* Element `off` of a tensor of element size es; NULL for SG_NO_OFFSET. */
static const void *cat_(const void *base, size_t off, size_t es)
{
    return off == SG_NO_OFFSET ? NULL : (const void *)((const char *)base + off * es);
}

static void *mat_(void *base, size_t off, size_t es)
{
    return off == SG_NO_OFFSET ? NULL : (void *)((char *)base + off * es);
}

static size_t max2(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* ---- scratch plans ---------------------------------------------------------------- */
/* A plan is a list of byte offsets into the scratch, each region aligned to
 * SG_CU_SCRATCH_ALIGN; `end` is the bytes it needs. The same functions size
 * the scratch (sg_cu_unit_scratch_bytes, every optional region on) and carve
 * it (the regions a call actually uses). An absent region is SG_NO_OFFSET. */

/* Offset of a region of `bytes` at *at (rounded up), and moves *at past it. */
static size_t put(size_t *at, size_t bytes)
{
    size_t off = (*at + SG_CU_SCRATCH_ALIGN - 1) / SG_CU_SCRATCH_ALIGN * SG_CU_SCRATCH_ALIGN;
    *at = off + bytes;
    return off;
}

static void *region(void *scratch, size_t off)
{
    return off == SG_NO_OFFSET ? NULL : (void *)((char *)scratch + off);
}

/* Layer forward: the saved activations (saved == NULL: checkpointing), then
 * act = silu(gate) * up (N, F) (not for the recompute, y == NULL). */
typedef struct layer_fwd_plan {
    size_t saved, act, end;
} layer_fwd_plan;

static layer_fwd_plan plan_layer_fwd(const dims *d, size_t saved_elems, int saved_here,
                                     int with_y)
{
    layer_fwd_plan p;
    size_t at = 0;
    p.saved = saved_here ? put(&at, saved_elems * d->es) : SG_NO_OFFSET;
    p.act = with_y ? put(&at, d->N * d->F * d->es) : SG_NO_OFFSET;
    p.end = at;
    return p;
}

/* Layer backward, MLP half: act/dgate, dact, dup (N, F); dn2, tmp (N, H);
 * the fp32 work of post_attention_layernorm's dw. */
typedef struct mlp_bwd_plan {
    size_t act, dact, dup, dn2, tmp, work, end;
} mlp_bwd_plan;

static mlp_bwd_plan plan_mlp_bwd(const dims *d)
{
    mlp_bwd_plan p;
    size_t at = 0, NF = d->N * d->F * d->es, NH = d->N * d->H * d->es;
    p.act = put(&at, NF);
    p.dact = put(&at, NF);
    p.dup = put(&at, NF);
    p.dn2 = put(&at, NH);
    p.tmp = put(&at, NH);
    p.work = put(&at, sg_cu_rmsnorm_backward_work_floats(d->N, d->H) * sizeof(float));
    p.end = at;
    return p;
}

/* fp32 work the attention half's kernels need; one area serves them all as
 * they run one after the other on the stream. */
static size_t attn_bwd_work_floats(const sg_model *m, const dims *d)
{
    size_t w = sg_cu_attention_backward_work_floats(d->B, d->T, d->Hq, d->Hkv, d->D);
    w = max2(w, sg_cu_rmsnorm_backward_work_floats(d->N, d->H)); /* input_layernorm */
    if (m->o_bias)
        w = max2(w, sg_cu_linear_backward_work_floats(d->N, d->H));
    if (m->qkv_bias) {
        w = max2(w, sg_cu_linear_backward_work_floats(d->N, d->Q));
        w = max2(w, sg_cu_linear_backward_work_floats(d->N, d->KV));
    }
    if (m->qk_norm) {
        w = max2(w, sg_cu_rmsnorm_backward_work_floats(d->N * d->Hq, d->D));
        w = max2(w, sg_cu_rmsnorm_backward_work_floats(d->N * d->Hkv, d->D));
    }
    return w;
}

/* Layer backward, attention half (reuses the MLP half's space): datt/dqpre,
 * dq (N, Q); dk, dv, dkpre (QK-norm only) (N, KV); dn1, tmp (N, H); work. */
typedef struct attn_bwd_plan {
    size_t datt, dq, dk, dv, dkpre, dn1, tmp, work, end;
} attn_bwd_plan;

static attn_bwd_plan plan_attn_bwd(const sg_model *m, const dims *d)
{
    attn_bwd_plan p;
    size_t at = 0, es = d->es;
    p.datt = put(&at, d->N * d->Q * es);
    p.dq = put(&at, d->N * d->Q * es);
    p.dk = put(&at, d->N * d->KV * es);
    p.dv = put(&at, d->N * d->KV * es);
    p.dkpre = m->qk_norm ? put(&at, d->N * d->KV * es) : SG_NO_OFFSET;
    p.dn1 = put(&at, d->N * d->H * es);
    p.tmp = put(&at, d->N * d->H * es);
    p.work = put(&at, attn_bwd_work_floats(m, d) * sizeof(float));
    p.end = at;
    return p;
}

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

static moe_plan plan_moe(const sg_model *m, const dims *d, size_t at, int bwd)
{
    moe_plan p;
    memset(&p, 0xff, sizeof p); // SG_NO_OFFSET everywhere
    const size_t E = (size_t)m->num_experts, K = (size_t)m->experts_per_token;
    const size_t F = (size_t)m->moe_intermediate_size, N = d->N, NK = N * K, es = d->es;
    p.probs = put(&at, N * E * sizeof(float));
    p.sel = put(&at, NK * sizeof(float));
    p.topw = put(&at, NK * sizeof(float));
    p.slots = put(&at, NK * sizeof(int32_t));
    p.counts = put(&at, E * sizeof(int32_t));
    p.gate = put(&at, NK * F * es);
    p.up = put(&at, NK * F * es);
    p.ptrs = put(&at, NK * sizeof(void *));
    p.ex = put(&at, sg_cu_moe_expert_work_bytes(N, d->H, F, d->dt));
    if (!bwd) {
        p.logits = put(&at, N * E * sizeof(float));
        p.outs = put(&at, NK * d->H * es);
    } else {
        p.dtopw = put(&at, NK * sizeof(float));
        p.dtopw_rows = put(&at, NK * sizeof(float));
        p.dlogits = put(&at, N * E * es);
        p.dxs = put(&at, NK * d->H * es);
        p.dn2 = put(&at, N * d->H * es);
        p.tmp = put(&at, N * d->H * es);
        p.rwork = put(&at, sg_cu_moe_router_backward_work_floats(N, E) * sizeof(float));
        p.nwork = put(&at, sg_cu_rmsnorm_backward_work_floats(N, d->H) * sizeof(float));
    }
    p.end = at;
    return p;
}

/* Head forward: the saved activations (saved == NULL), a device float for
 * the loss when the caller wants none (the kernel always writes one), one
 * chunk's logits (C, V) (C = sg_head_chunk_tokens), the cross-entropy's
 * fp32 work (the row losses of all N tokens). */
typedef struct head_fwd_plan {
    size_t saved, loss, logits, work, end;
} head_fwd_plan;

static head_fwd_plan plan_head_fwd(const dims *d, size_t C, size_t saved_elems, int saved_here,
                                   int loss_here)
{
    head_fwd_plan p;
    size_t at = 0;
    p.saved = saved_here ? put(&at, saved_elems * d->es) : SG_NO_OFFSET;
    p.loss = loss_here ? put(&at, sizeof(float)) : SG_NO_OFFSET;
    p.logits = put(&at, C * d->V * d->es);
    p.work = put(&at, sg_cu_cross_entropy_work_floats(d->N) * sizeof(float));
    p.end = at;
    return p;
}

/* Head backward: one chunk's logits, recomputed and turned into dlogits in
 * place (C, V), dn (N, H), the loss weight (1 float, kept while the chunks
 * run), work for the norm's dw. */
typedef struct head_bwd_plan {
    size_t logits, dn, weight, work, end;
} head_bwd_plan;

static head_bwd_plan plan_head_bwd(const dims *d, size_t C)
{
    head_bwd_plan p;
    size_t at = 0;
    p.logits = put(&at, C * d->V * d->es);
    p.dn = put(&at, d->N * d->H * d->es);
    p.weight = put(&at, sizeof(float));
    p.work = put(&at, sg_cu_rmsnorm_backward_work_floats(d->N, d->H) * sizeof(float));
    p.end = at;
    return p;
}

/* 0 embedding, 1 layer, 2 head, -1 no such unit. */
static int kind_of(const sg_model *m, int unit)
{
    if (!m || unit < 0 || unit > m->num_layers + 1)
        return -1;
    return unit == 0 ? 0 : unit <= m->num_layers ? 1 : 2;
}

size_t sg_cu_unit_scratch_bytes(const sg_model *m, int unit, size_t B, size_t T, sg_dtype dt)
{
    int kind = kind_of(m, unit);
    if (kind <= 0 || !dtype_ok(dt))
        return 0;
    const size_t N = B * T;
    dims d = dims_of(m, B, T, dt);
    if (kind == 1) {
        if (sg_unit_check_model(m, NULL)) /* refused: the CPU estimate, in dt */
            return sg_unit_scratch_floats(m, unit, B, T) * d.es;
        sg_layer_saved_layout l;
        sg_layer_saved_layout_get(m, N, &l);
        layer_fwd_plan pf = plan_layer_fwd(&d, l.total, 1, 1);
        size_t f = pf.end;
        size_t b = max2(plan_mlp_bwd(&d).end, plan_attn_bwd(m, &d).end);
        if (m->num_experts > 0) {
            f = max2(f, plan_moe(m, &d, pf.end, 0).end);
            b = max2(b, plan_moe(m, &d, 0, 1).end);
        }
        return max2(f, b);
    }
    sg_head_saved_layout h;
    sg_head_saved_layout_get(m, N, &h);
    const size_t C = sg_head_chunk_tokens(m, N);
    return max2(plan_head_fwd(&d, C, h.total, 1, 1).end, plan_head_bwd(&d, C).end);
}

/* ---- embedding (unit 0) ---------------------------------------------------------- */

static int embed_forward(const sg_cu *cu, const dims *d, const sg_cu_unit_io *io)
{
    if (!io->y) /* recompute: the embedding saves nothing */
        return 0;
    if (!io->tokens || !io->params)
        return SG_EINVAL;
    return sg_cu_embedding_forward(cu, io->y, io->tokens, io->params, d->dt, d->N, d->V, d->H);
}

static int embed_backward(const sg_cu *cu, const dims *d, const sg_cu_unit_io *io,
                          const void *dy, void *dparams)
{
    if (!io->tokens || !dy || !dparams)
        return SG_EINVAL;
    return sg_cu_embedding_backward(cu, dparams, io->tokens, dy, d->dt, d->N, d->V,
                                    d->H); // (V, H) +=
}

/* ---- decoder layer (units 1..L) --------------------------------------------------- */

/* Pointers to the saved activations (see sg_layer_saved_layout), in dt. */
typedef struct layer_act {
    void *n1, *h, *n2, *q, *k, *v, *att, *gate, *up, *qpre, *kpre;
    void *rstd1, *rstd2, *lse, *rstdq, *rstdk;
    void *probs, *sel, *topw; /* MoE router state (dt), else NULL */
} layer_act;

typedef struct layer_ctx {
    const sg_cu *cu;
    dims d;
    size_t window;             /* keys a query sees; 0: all earlier ones */
    sg_layer_param_offsets o;  /* elements into params and dparams */
    const void *p;             /* the unit's parameters (dt) */
    layer_act a;
    const float *cos_tab, *sin_tab;
    const sg_model *m;
    int unit;
} layer_ctx;

static void layer_act_at(layer_act *a, void *base, const sg_layer_saved_layout *l, int qk,
                         int moe, size_t es)
{
    a->n1 = mat_(base, l->n1, es);
    a->h = mat_(base, l->h, es);
    a->n2 = mat_(base, l->n2, es);
    a->q = mat_(base, l->q, es);
    a->k = mat_(base, l->k, es);
    a->v = mat_(base, l->v, es);
    a->att = mat_(base, l->att, es);
    a->gate = mat_(base, l->gate, es);
    a->up = mat_(base, l->up, es);
    a->rstd1 = mat_(base, l->rstd1, es);
    a->rstd2 = mat_(base, l->rstd2, es);
    a->lse = mat_(base, l->lse, es);
    a->qpre = qk ? mat_(base, l->qpre, es) : NULL;
    a->kpre = qk ? mat_(base, l->kpre, es) : NULL;
    a->rstdq = qk ? mat_(base, l->rstdq, es) : NULL;
    a->rstdk = qk ? mat_(base, l->rstdk, es) : NULL;
    a->probs = moe ? mat_(base, l->probs, es) : NULL;
    a->sel = moe ? mat_(base, l->sel, es) : NULL;
    a->topw = moe ? mat_(base, l->topw, es) : NULL;
}

/* Fills everything but the activation pointers. */
static int layer_ctx_init(layer_ctx *c, const sg_cu *cu, const sg_model *m, int unit,
                          size_t B, size_t T, const sg_cu_unit_io *io)
{
    if (!io->params || !io->x || !io->cos_tab || !io->sin_tab)
        return SG_EINVAL;
    SG_CU_TRY_OR_RETURN(sg_layer_param_offsets_get(m, unit - 1, &c->o));
    c->cu = cu;
    c->d = dims_of(m, B, T, io->dt);
    c->window = m->layer_attn[unit - 1] == SG_ATTN_SLIDING ? (size_t)m->sliding_window : 0;
    c->p = io->params;
    c->cos_tab = io->cos_tab;
    c->sin_tab = io->sin_tab;
    c->m = m;
    c->unit = unit;
    return 0;
}

static const void *lp(const layer_ctx *c, size_t off) /* a parameter tensor or NULL */
{
    return cat_(c->p, off, c->d.es);
}

/* out (N, heads*D) = rope(qk_norm(n1 @ W^T + b)); without QK-norm `pre` and
 * `rstd` are unused and the projection goes straight to out. */
static int project_rope(const layer_ctx *c, void *out, void *pre, void *rstd, size_t w,
                        size_t b, size_t norm_w, size_t heads)
{
    const dims *d = &c->d;
    const int qk = norm_w != SG_NO_OFFSET;
    void *lin = qk ? pre : out; // (N, heads*D)
    SG_CU_TRY_OR_RETURN(sg_cu_linear_forward(c->cu, lin, c->a.n1, lp(c, w), lp(c, b), d->dt, d->N,
                                             d->H, heads * d->D));
    if (qk) // RMSNorm over each head's D values
        SG_CU_TRY_OR_RETURN(sg_cu_rmsnorm_forward(c->cu, out, rstd, pre, lp(c, norm_w), d->dt,
                                                  d->N * heads, d->D, d->eps));
    return sg_cu_rope_forward(c->cu, out, out, c->cos_tab, c->sin_tab, d->dt, d->B, d->T,
                              heads, d->D);
}

/* h = x + o_proj(attention(n1)), n1 = input_layernorm(x). */
static int attn_forward(const layer_ctx *c, const void *x)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    SG_CU_TRY_OR_RETURN(
        sg_cu_rmsnorm_forward(c->cu, a->n1, a->rstd1, x, lp(c, o->ln1), d->dt, d->N, d->H, d->eps));
    SG_CU_TRY_OR_RETURN(project_rope(c, a->q, a->qpre, a->rstdq, o->wq, o->bq, o->q_norm, d->Hq));
    SG_CU_TRY_OR_RETURN(project_rope(c, a->k, a->kpre, a->rstdk, o->wk, o->bk, o->k_norm, d->Hkv));
    SG_CU_TRY_OR_RETURN(sg_cu_linear_forward(c->cu, a->v, a->n1, lp(c, o->wv), lp(c, o->bv), d->dt,
                                             d->N, d->H, d->KV));
    SG_CU_TRY_OR_RETURN(sg_cu_attention_forward(c->cu, a->att, a->lse, a->q, a->k, a->v, d->dt,
                                                d->B, d->T, d->Hq, d->Hkv, d->D, c->window));
    if (o->sinks != SG_NO_OFFSET) // gpt_oss: att and lse with the sinks' column
        SG_CU_TRY_OR_RETURN(sg_cu_attention_sinks_forward(c->cu, a->att, a->lse, lp(c, o->sinks),
                                                          d->dt, d->B, d->T, d->Hq, d->D));
    SG_CU_TRY_OR_RETURN(sg_cu_linear_forward(c->cu, a->h, a->att, lp(c, o->wo), lp(c, o->bo), d->dt,
                                             d->N, d->Q, d->H));
    return sg_cu_add_into(c->cu, a->h, x, d->dt, d->N * d->H); // residual
}

/* y = h + down_proj(silu(gate_proj(n2)) * up_proj(n2)), n2 =
 * post_attention_layernorm(h). y NULL (recompute): stops after what is
 * saved; else act (N, F) is scratch. */
static int mlp_forward(const layer_ctx *c, void *y, void *act)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    SG_CU_TRY_OR_RETURN(sg_cu_rmsnorm_forward(c->cu, a->n2, a->rstd2, a->h, lp(c, o->ln2), d->dt,
                                              d->N, d->H, d->eps));
    SG_CU_TRY_OR_RETURN(
        sg_cu_linear_forward(c->cu, a->gate, a->n2, lp(c, o->wg), NULL, d->dt, d->N, d->H, d->F));
    SG_CU_TRY_OR_RETURN(
        sg_cu_linear_forward(c->cu, a->up, a->n2, lp(c, o->wu), NULL, d->dt, d->N, d->H, d->F));
    if (!y)
        return 0;
    SG_CU_TRY_OR_RETURN(sg_cu_swiglu_forward(c->cu, act, a->gate, a->up, d->dt, d->N, d->F));
    SG_CU_TRY_OR_RETURN(
        sg_cu_linear_forward(c->cu, y, act, lp(c, o->wd), NULL, d->dt, d->N, d->F, d->H));
    return sg_cu_add_into(c->cu, y, a->h, d->dt, d->N * d->H); // residual
}

/* ---- mixture-of-experts MLP (qwen3_moe, gpt_oss; moe.cu) ----------------------------- */

/* Expert e's slot lists of all experts, their counts copied to the host
 * (waits for the stream), and each expert's first row (rows expert by
 * expert, as codelets/starpu/moe.c lays out a group). */
static int moe_slots(const layer_ctx *c, const float *sel, int32_t *slots, int32_t *counts,
                     size_t *first)
{
    const size_t E = (size_t)c->m->num_experts, K = (size_t)c->m->experts_per_token;
    SG_CU_TRY_OR_RETURN(sg_cu_moe_expert_slots(c->cu, slots, counts, sel, c->d.N, K, 0, E));
    int32_t *h = (int32_t *)malloc(E * sizeof *h);
    if (!h)
        return SG_ENOMEM;
    int rc = sg_cu_sync(c->cu) ? SG_EIO : sg_cu_to_host(h, counts, E * sizeof *h);
    first[0] = 0;
    for (size_t e = 0; rc == 0 && e < E; e++)
        first[e + 1] = first[e] + (size_t)h[e];
    free(h);
    if (rc == 0 && first[E] != c->d.N * K)
        rc = SG_EIO; /* every slot picks one expert: a count is wrong */
    return rc;
}

/* Expert e's forward on its n slots at rows [r, r + n) of gate, up, out (out
 * NULL: gate and up only). */
static int expert_forward(const layer_ctx *c, size_t e, const int32_t *slots, size_t r,
                          size_t n, void *gate, void *up, void *out, void *ex)
{
    const sg_model *m = c->m;
    const sg_layer_param_offsets *o = &c->o;
    const dims *d = &c->d;
    const size_t F = (size_t)m->moe_intermediate_size, K = (size_t)m->experts_per_token;
    void *g = mat_(gate, r * F, d->es), *u = mat_(up, r * F, d->es);
    void *os = out ? mat_(out, r * d->H, d->es) : NULL;
    if (m->arch == SG_ARCH_GPT_OSS) {
        size_t off[4];
        sg_oss_expert_offsets(m, o, e, off);
        return sg_cu_moe_oss_expert_forward(c->cu, g, u, os, c->a.n2, slots + r, NULL, n,
                                            lp(c, off[0]), lp(c, off[1]), lp(c, off[2]),
                                            lp(c, off[3]), d->dt, d->H, F, K, ex);
    }
    const size_t s = e * o->ex_stride;
    return sg_cu_moe_expert_forward(c->cu, g, u, os, c->a.n2, slots + r, NULL, n,
                                    lp(c, o->ex_wg + s), lp(c, o->ex_wu + s),
                                    lp(c, o->ex_wd + s), d->dt, d->H, F, K, ex);
}

/* y = h + sum_j topw_j expert_{sel_j}(n2), n2 = post_attention_layernorm(h)
 * (block.c's moe_forward): the router's state saved (in dt), its picks added
 * to stats (written fresh by layer 1) when y or split; split (experts as
 * tasks) or y NULL (recompute): the router only. */
static int moe_forward(const layer_ctx *c, void *y, float *stats, int split, void *scratch,
                       size_t at)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    const sg_model *m = c->m;
    const size_t E = (size_t)m->num_experts, K = (size_t)m->experts_per_token, N = d->N;
    const size_t NK = N * K;
    moe_plan p = plan_moe(m, d, at, 0);
    float *probs = (float *)region(scratch, p.probs), *sel = (float *)region(scratch, p.sel);
    float *topw = (float *)region(scratch, p.topw);
    SG_CU_TRY_OR_RETURN(
        sg_cu_rmsnorm_forward(c->cu, a->n2, a->rstd2, a->h, lp(c, o->ln2), d->dt, N, d->H, d->eps));
    float *logits = (float *)region(scratch, p.logits);
    if (m->arch == SG_ARCH_GPT_OSS)
        SG_CU_TRY_OR_RETURN(sg_cu_moe_oss_router_forward(c->cu, probs, sel, topw, logits, a->n2,
                                                         lp(c, o->router), lp(c, o->router_b),
                                                         d->dt, N, d->H, E, K));
    else
        SG_CU_TRY_OR_RETURN(sg_cu_moe_router_forward(c->cu, probs, sel, topw, logits, a->n2,
                                                     lp(c, o->router), d->dt, N, d->H, E, K,
                                                     m->norm_topk_prob));
    SG_CU_TRY_OR_RETURN(sg_cu_cast(c->cu, a->probs, d->dt, probs, SG_F32, N * E));
    SG_CU_TRY_OR_RETURN(sg_cu_cast(c->cu, a->sel, d->dt, sel, SG_F32, NK));
    SG_CU_TRY_OR_RETURN(sg_cu_cast(c->cu, a->topw, d->dt, topw, SG_F32, NK));
    if ((y || split) && stats) {
        if (c->unit == 1)
            SG_CU_TRY_OR_RETURN(
                sg_cu_zero_async(c->cu, stats, sg_moe_stats_floats(m) * sizeof(float)));
        SG_CU_TRY_OR_RETURN(sg_cu_moe_stats_add(c->cu, stats, probs, sel, N, E, K));
    }
    if (split || !y)
        return 0;
    int32_t *slots = (int32_t *)region(scratch, p.slots);
    size_t *first = (size_t *)malloc((E + 1) * sizeof *first);
    if (!first)
        return SG_ENOMEM;
    int rc = moe_slots(c, sel, slots, (int32_t *)region(scratch, p.counts), first);
    void *gate = region(scratch, p.gate), *up = region(scratch, p.up);
    void *outs = region(scratch, p.outs), *ex = region(scratch, p.ex);
    for (size_t e = 0; e < E && rc == 0; e++)
        rc = expert_forward(c, e, slots, first[e], first[e + 1] - first[e], gate, up, outs, ex);
    free(first);
    SG_CU_TRY_OR_RETURN(rc);
    const void **ptrs = (const void **)region(scratch, p.ptrs);
    SG_CU_TRY_OR_RETURN(sg_cu_moe_slot_rows(c->cu, ptrs, slots, NK, outs, d->H * d->es));
    return sg_cu_moe_combine_forward(c->cu, y, a->h, (const void *const *)ptrs, topw, d->dt, N,
                                     d->H, K);
}

/* MoE half of the backward (block.c's moe_backward): dx = dh = dy +
 * d(post_attention_layernorm)(d n2), d n2 = the experts' slots summed in
 * slot order (or io->moe_dn2 when split) + the router's share, with the
 * load-balancing term dloss (*dloss_scale) coef E picks_e / (L N)^2. */
static int moe_backward(const layer_ctx *c, const sg_cu_unit_io *io, const void *dy, void *dx,
                        void *g, float dloss, const float *dloss_scale, void *scratch)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    const sg_model *m = c->m;
    const size_t E = (size_t)m->num_experts, K = (size_t)m->experts_per_token, N = d->N;
    const size_t F = (size_t)m->moe_intermediate_size, H = d->H, NK = N * K, es = d->es;
    moe_plan p = plan_moe(m, d, 0, 1);
    float *probs = (float *)region(scratch, p.probs), *sel = (float *)region(scratch, p.sel);
    float *topw = (float *)region(scratch, p.topw), *dtopw = (float *)region(scratch, p.dtopw);
    void *dn2 = region(scratch, p.dn2), *tmp = region(scratch, p.tmp);
    SG_CU_TRY_OR_RETURN(sg_cu_cast(c->cu, probs, SG_F32, a->probs, d->dt, N * E));
    SG_CU_TRY_OR_RETURN(sg_cu_cast(c->cu, sel, SG_F32, a->sel, d->dt, NK));
    SG_CU_TRY_OR_RETURN(sg_cu_cast(c->cu, topw, SG_F32, a->topw, d->dt, NK));
    if (io->moe_split) {
        if (!io->moe_dn2 || !io->moe_dtopw)
            return SG_EINVAL;
        SG_CU_TRY_OR_RETURN(sg_cu_copy_async(c->cu, dn2, io->moe_dn2, N * H * es));
        SG_CU_TRY_OR_RETURN(sg_cu_copy_async(c->cu, dtopw, io->moe_dtopw, NK * sizeof(float)));
    } else {
        int32_t *slots = (int32_t *)region(scratch, p.slots);
        size_t *first = (size_t *)malloc((E + 1) * sizeof *first);
        if (!first)
            return SG_ENOMEM;
        int rc = moe_slots(c, sel, slots, (int32_t *)region(scratch, p.counts), first);
        void *gate = region(scratch, p.gate), *up = region(scratch, p.up);
        void *dxs = region(scratch, p.dxs), *ex = region(scratch, p.ex);
        float *dtr = (float *)region(scratch, p.dtopw_rows);
        for (size_t e = 0; e < E && rc == 0; e++) {
            const size_t r = first[e], n = first[e + 1] - first[e];
            /* gate and up are not saved: recomputed */
            rc = expert_forward(c, e, slots, r, n, gate, up, NULL, ex);
            if (rc)
                break;
            const void *ge = cat_(gate, r * F, es), *ue = cat_(up, r * F, es);
            void *dxr = mat_(dxs, r * H, es);
            if (m->arch == SG_ARCH_GPT_OSS) {
                size_t off[4];
                sg_oss_expert_offsets(m, o, e, off);
                rc = sg_cu_moe_oss_expert_backward(
                    c->cu, dxr, dtr + r, mat_(g, off[0], es), mat_(g, off[1], es),
                    mat_(g, off[2], es), mat_(g, off[3], es), dy, a->n2, ge, ue, topw,
                    slots + r, NULL, n, lp(c, off[0]), lp(c, off[2]), lp(c, off[3]), d->dt, H,
                    F, K, ex);
                continue;
            }
            const size_t s = e * o->ex_stride;
            rc = sg_cu_moe_expert_backward(c->cu, dxr, dtr + r, mat_(g, o->ex_wg + s, es),
                                           mat_(g, o->ex_wu + s, es), mat_(g, o->ex_wd + s, es),
                                           dy, a->n2, ge, ue, topw, slots + r, NULL, n,
                                           lp(c, o->ex_wg + s), lp(c, o->ex_wu + s),
                                           lp(c, o->ex_wd + s), d->dt, H, F, K, ex);
        }
        free(first);
        SG_CU_TRY_OR_RETURN(rc);
        const void **ptrs = (const void **)region(scratch, p.ptrs);
        SG_CU_TRY_OR_RETURN(sg_cu_moe_slot_rows(c->cu, ptrs, slots, NK, dxs, H * es));
        SG_CU_TRY_OR_RETURN(
            sg_cu_moe_slots_sum(c->cu, dn2, (const void *const *)ptrs, d->dt, N, H, K));
        SG_CU_TRY_OR_RETURN(sg_cu_moe_scatter_slots(c->cu, dtopw, dtr, slots, NK));
    }
    const float *stats = io->moe_stats;
    const double LN = (double)m->num_layers * (double)N;
    const double aux = stats ? (double)dloss * m->router_aux_loss_coef * (double)E / (LN * LN)
                             : 0.0;
    void *dlogits = region(scratch, p.dlogits);
    float *rwork = (float *)region(scratch, p.rwork);
    if (m->arch == SG_ARCH_GPT_OSS)
        SG_CU_TRY_OR_RETURN(sg_cu_moe_oss_router_backward(
            c->cu, tmp, mat_(g, o->router, es), mat_(g, o->router_b, es), dlogits, dtopw, probs,
            sel, topw, stats, aux, dloss_scale, a->n2, lp(c, o->router), d->dt, N, H, E, K, rwork));
    else
        SG_CU_TRY_OR_RETURN(sg_cu_moe_router_backward(
            c->cu, tmp, mat_(g, o->router, es), dlogits, dtopw, probs, sel, topw, stats, aux,
            dloss_scale, a->n2, lp(c, o->router), d->dt, N, H, E, K, m->norm_topk_prob, rwork));
    SG_CU_TRY_OR_RETURN(sg_cu_add_into(c->cu, dn2, tmp, d->dt, N * H));
    SG_CU_TRY_OR_RETURN(sg_cu_rmsnorm_backward(c->cu, dx, mat_(g, o->ln2, es), dn2, a->h,
                                               lp(c, o->ln2), a->rstd2, d->dt, N, H,
                                               (float *)region(scratch, p.nwork)));
    return sg_cu_add_into(c->cu, dx, dy, d->dt, N * H); // residual
}

static int layer_forward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                         const sg_cu_unit_io *io)
{
    if (!io->y && !io->saved)
        return SG_EINVAL;
    layer_ctx c;
    SG_CU_TRY_OR_RETURN(layer_ctx_init(&c, cu, m, unit, B, T, io));
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, c.d.N, &l);
    layer_fwd_plan p = plan_layer_fwd(&c.d, l.total, io->saved == NULL, io->y != NULL);
    if (p.end > sg_cu_unit_scratch_bytes(m, unit, B, T, io->dt))
        return SG_EINVAL; /* the plans disagree with the size: a bug, never an overrun */
    if (p.end > 0 && !io->scratch) /* the recompute into saved needs none */
        return SG_EINVAL;
    void *saved = io->saved ? io->saved : region(io->scratch, p.saved); // checkpointing
    layer_act_at(&c.a, saved, &l, m->qk_norm, m->num_experts > 0, c.d.es);
    SG_CU_TRY_OR_RETURN(attn_forward(&c, io->x));
    if (m->num_experts > 0) {
        if (io->moe_split && !io->saved)
            return SG_EINVAL;
        if (!io->scratch)
            return SG_EINVAL; /* the router's logits and state live there */
        return moe_forward(&c, io->y, io->moe_stats, io->moe_split, io->scratch, p.end);
    }
    return mlp_forward(&c, io->y, region(io->scratch, p.act));
}

/* MLP half: dx = dh = dy + d(post_attention_layernorm)(d(mlp)(dy)). */
static int mlp_backward(const layer_ctx *c, const void *dy, void *dx, void *g, void *scratch)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    const size_t es = d->es;
    mlp_bwd_plan p = plan_mlp_bwd(d);
    void *act = region(scratch, p.act), *dact = region(scratch, p.dact); // (N, F)
    void *dup = region(scratch, p.dup);                                  // (N, F)
    void *dn2 = region(scratch, p.dn2), *tmp = region(scratch, p.tmp);   // (N, H)
    float *work = (float *)region(scratch, p.work);
    SG_CU_TRY_OR_RETURN(
        sg_cu_swiglu_forward(c->cu, act, a->gate, a->up, d->dt, d->N, d->F)); // recomputed
    SG_CU_TRY_OR_RETURN(sg_cu_linear_backward(c->cu, dact, mat_(g, o->wd, es), NULL, dy, act,
                                              lp(c, o->wd), d->dt, d->N, d->F, d->H, NULL));
    void *dgate = act; // act is dead: dgate takes its place
    SG_CU_TRY_OR_RETURN(
        sg_cu_swiglu_backward(c->cu, dgate, dup, dact, a->gate, a->up, d->dt, d->N, d->F));
    SG_CU_TRY_OR_RETURN(sg_cu_linear_backward(c->cu, dn2, mat_(g, o->wg, es), NULL, dgate, a->n2,
                                              lp(c, o->wg), d->dt, d->N, d->H, d->F, NULL));
    SG_CU_TRY_OR_RETURN(sg_cu_linear_backward(c->cu, tmp, mat_(g, o->wu, es), NULL, dup, a->n2,
                                              lp(c, o->wu), d->dt, d->N, d->H, d->F, NULL));
    SG_CU_TRY_OR_RETURN(sg_cu_add_into(c->cu, dn2, tmp, d->dt, d->N * d->H));
    SG_CU_TRY_OR_RETURN(sg_cu_rmsnorm_backward(c->cu, dx, mat_(g, o->ln2, es), dn2, a->h,
                                               lp(c, o->ln2), a->rstd2, d->dt, d->N, d->H, work));
    return sg_cu_add_into(c->cu, dx, dy, d->dt, d->N * d->H); // residual
}

/* d(rope(qk_norm(.))) in place on dqk (N, heads*D); returns the gradient of
 * the projection's output: dqk itself, or dpre with QK-norm. */
static const void *unrope(const layer_ctx *c, void *dqk, void *dpre, const void *pre,
                          const void *rstd, void *g, size_t norm_w, size_t heads, float *work,
                          int *rc)
{
    const dims *d = &c->d;
    *rc = sg_cu_rope_backward(c->cu, dqk, dqk, c->cos_tab, c->sin_tab, d->dt, d->B, d->T,
                              heads, d->D);
    if (*rc < 0 || norm_w == SG_NO_OFFSET)
        return dqk;
    *rc = sg_cu_rmsnorm_backward(c->cu, dpre, mat_(g, norm_w, d->es), dqk, pre,
                                 lp(c, norm_w), rstd, d->dt, d->N * heads, d->D, work);
    return dpre;
}

/* dn1 (N, H) = gradient of n1 through q, k, v projections (summed in that
 * order). `work` serves the bias sums (NULL without biases). */
static int qkv_backward(const layer_ctx *c, void *dn1, void *tmp, const void *dq,
                        const void *dk, const void *dv, void *g, float *work)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    const size_t es = d->es;
    float *bw = o->bq != SG_NO_OFFSET ? work : NULL;
    SG_CU_TRY_OR_RETURN(sg_cu_linear_backward(c->cu, dn1, mat_(g, o->wq, es), mat_(g, o->bq, es),
                                              dq, a->n1, lp(c, o->wq), d->dt, d->N, d->H, d->Q,
                                              bw));
    bw = o->bk != SG_NO_OFFSET ? work : NULL;
    SG_CU_TRY_OR_RETURN(sg_cu_linear_backward(c->cu, tmp, mat_(g, o->wk, es), mat_(g, o->bk, es),
                                              dk, a->n1, lp(c, o->wk), d->dt, d->N, d->H, d->KV,
                                              bw));
    SG_CU_TRY_OR_RETURN(sg_cu_add_into(c->cu, dn1, tmp, d->dt, d->N * d->H));
    bw = o->bv != SG_NO_OFFSET ? work : NULL;
    SG_CU_TRY_OR_RETURN(sg_cu_linear_backward(c->cu, tmp, mat_(g, o->wv, es), mat_(g, o->bv, es),
                                              dv, a->n1, lp(c, o->wv), d->dt, d->N, d->H, d->KV,
                                              bw));
    return sg_cu_add_into(c->cu, dn1, tmp, d->dt, d->N * d->H);
}

/* Attention half: dx holds dh on entry and dx = dh + d(input_layernorm)(...)
 * on return. */
static int attn_backward(const layer_ctx *c, const sg_model *m, const void *x, void *dx,
                         void *g, void *scratch)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    const size_t es = d->es;
    attn_bwd_plan p = plan_attn_bwd(m, d);
    void *datt = region(scratch, p.datt), *dq = region(scratch, p.dq); // (N, Q)
    void *dk = region(scratch, p.dk), *dv = region(scratch, p.dv);     // (N, KV)
    void *dkpre = a->kpre ? region(scratch, p.dkpre) : dk;             // (N, KV)
    void *dn1 = region(scratch, p.dn1), *tmp = region(scratch, p.tmp); // (N, H)
    float *work = (float *)region(scratch, p.work);
    float *ow = o->bo != SG_NO_OFFSET ? work : NULL;
    SG_CU_TRY_OR_RETURN(sg_cu_linear_backward(c->cu, datt, mat_(g, o->wo, es), mat_(g, o->bo, es),
                                              dx, a->att, lp(c, o->wo), d->dt, d->N, d->Q, d->H,
                                              ow));
    if (o->sinks != SG_NO_OFFSET)
        SG_CU_TRY_OR_RETURN(sg_cu_attention_sinks_backward(c->cu, mat_(g, o->sinks, es), datt,
                                                           a->att, a->lse, lp(c, o->sinks), d->dt,
                                                           d->B, d->T, d->Hq, d->D));
    SG_CU_TRY_OR_RETURN(sg_cu_attention_backward(c->cu, dq, dk, dv, datt, a->q, a->k, a->v, a->att,
                                                 a->lse, d->dt, d->B, d->T, d->Hq, d->Hkv, d->D,
                                                 c->window, work));
    int rc = 0;
    void *dqpre = datt; // datt is dead: dq before QK-norm takes its place
    const void *dqin = unrope(c, dq, dqpre, a->qpre, a->rstdq, g, o->q_norm, d->Hq, work, &rc);
    SG_CU_TRY_OR_RETURN(rc);
    const void *dkin = unrope(c, dk, dkpre, a->kpre, a->rstdk, g, o->k_norm, d->Hkv, work,
                              &rc);
    SG_CU_TRY_OR_RETURN(rc);
    SG_CU_TRY_OR_RETURN(qkv_backward(c, dn1, tmp, dqin, dkin, dv, g, work));
    SG_CU_TRY_OR_RETURN(sg_cu_rmsnorm_backward(c->cu, tmp, mat_(g, o->ln1, es), dn1, x,
                                               lp(c, o->ln1), a->rstd1, d->dt, d->N, d->H, work));
    return sg_cu_add_into(c->cu, dx, tmp, d->dt, d->N * d->H); // residual
}

static int layer_backward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                          const sg_cu_unit_io *io, const void *dy, float dloss,
                          const float *dloss_scale, void *dx, void *dparams)
{
    if (!io->saved || !io->scratch || !dy || !dx || !dparams || dx == dy)
        return SG_EINVAL;
    layer_ctx c;
    SG_CU_TRY_OR_RETURN(layer_ctx_init(&c, cu, m, unit, B, T, io));
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, c.d.N, &l);
    layer_act_at(&c.a, io->saved, &l, m->qk_norm, m->num_experts > 0, c.d.es);
    size_t cap = sg_cu_unit_scratch_bytes(m, unit, B, T, io->dt);
    if (plan_mlp_bwd(&c.d).end > cap || plan_attn_bwd(m, &c.d).end > cap ||
        (m->num_experts > 0 && plan_moe(m, &c.d, 0, 1).end > cap))
        return SG_EINVAL; /* the plans disagree with the size: a bug, never an overrun */
    if (m->num_experts > 0)
        SG_CU_TRY_OR_RETURN(moe_backward(&c, io, dy, dx, dparams, dloss, dloss_scale, io->scratch));
    else
        SG_CU_TRY_OR_RETURN(mlp_backward(&c, dy, dx, dparams, io->scratch));
    // the attention half reuses the MLP half's scratch: stream order keeps them apart
    return attn_backward(&c, m, io->x, dx, dparams, io->scratch);
}

/* ---- head (unit L+1) -------------------------------------------------------------- */

typedef struct head_ctx {
    dims d;
    sg_head_param_offsets o;
    const void *norm_w, *W;    /* (H), (V, H): lm_head or the tied embedding */
    void *n, *rstd, *lse;
    size_t C;                  /* tokens per chunk of logits (sg_head_chunk_tokens) */
} head_ctx;

static int head_ctx_init(head_ctx *c, const sg_model *m, size_t B, size_t T,
                         const sg_cu_unit_io *io, void *saved)
{
    if (!io->params || !io->x || !io->targets || !saved || !io->scratch)
        return SG_EINVAL;
    if (m->tie_word_embeddings && !io->embed)
        return SG_EINVAL;
    SG_CU_TRY_OR_RETURN(sg_head_param_offsets_get(m, &c->o));
    c->d = dims_of(m, B, T, io->dt);
    const size_t es = c->d.es;
    c->norm_w = cat_(io->params, c->o.norm, es);
    c->W = m->tie_word_embeddings ? io->embed : cat_(io->params, c->o.lm_head, es);
    sg_head_saved_layout l;
    sg_head_saved_layout_get(m, c->d.N, &l);
    c->n = mat_(saved, l.n, es);
    c->rstd = mat_(saved, l.rstd, es);
    c->lse = mat_(saved, l.lse, es);
    c->C = sg_head_chunk_tokens(m, c->d.N);
    return 0;
}

/* Rows of the chunk starting at row r. */
static size_t chunk_rows(const head_ctx *c, size_t r)
{
    return c->d.N - r < c->C ? c->d.N - r : c->C;
}

/* loss = mean cross-entropy(norm(x) @ W^T, targets), chunk by chunk: one
 * chunk's logits at a time in scratch; the row losses of every chunk go to
 * `work` and one kernel takes their mean at the end, as unchunked. */
static int head_forward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                        const sg_cu_unit_io *io)
{
    if (!io->saved && !io->loss)
        return SG_EINVAL;
    if (!io->scratch)
        return SG_EINVAL;
    dims d0 = dims_of(m, B, T, io->dt);
    sg_head_saved_layout l;
    sg_head_saved_layout_get(m, B * T, &l);
    head_fwd_plan p = plan_head_fwd(&d0, sg_head_chunk_tokens(m, d0.N), l.total,
                                    io->saved == NULL, io->loss == NULL);
    if (p.end > sg_cu_unit_scratch_bytes(m, unit, B, T, io->dt))
        return SG_EINVAL;
    void *saved = io->saved ? io->saved : region(io->scratch, p.saved); // checkpointing
    head_ctx c;
    SG_CU_TRY_OR_RETURN(head_ctx_init(&c, m, B, T, io, saved));
    const dims *d = &c.d;
    float *loss = io->loss ? io->loss : (float *)region(io->scratch, p.loss);
    void *logits = region(io->scratch, p.logits); // (C, V)
    float *row_loss = (float *)region(io->scratch, p.work); // (N)
    SG_CU_TRY_OR_RETURN(
        sg_cu_rmsnorm_forward(cu, c.n, c.rstd, io->x, c.norm_w, d->dt, d->N, d->H, d->eps));
    for (size_t r = 0; r < d->N; r += c.C) {
        const size_t nc = chunk_rows(&c, r);
        SG_CU_TRY_OR_RETURN(sg_cu_linear_forward(cu, logits, cat_(c.n, r * d->H, d->es), c.W, NULL,
                                                 d->dt, nc, d->H, d->V)); // (nc, V)
        SG_CU_TRY_OR_RETURN(sg_cu_cross_entropy_rows(cu, row_loss + r, mat_(c.lse, r, d->es),
                                                     logits, io->targets + r, d->dt, nc, d->V));
    }
    SG_CU_TRY_OR_RETURN(sg_cu_cross_entropy_mean(cu, loss, row_loss, io->targets, d->N, d->V));
    if (io->moe_stats && m->num_experts > 0) // the router's load-balancing loss
        SG_CU_TRY_OR_RETURN(sg_cu_moe_aux_loss_add(cu, loss, io->moe_stats, (size_t)m->num_experts,
                                                   (size_t)m->num_layers, d->N,
                                                   m->router_aux_loss_coef));
    return SG_OK;
}

/* Per chunk: logits recomputed from the saved n, dlogits in their place,
 * dW += dlogits^T n, dn rows = dlogits W; then the norm's backward. */
static int head_backward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                         const sg_cu_unit_io *io, float dloss, const float *dloss_scale,
                         void *dx, void *dparams, void *dembed)
{
    if (!dx || !dparams || (m->tie_word_embeddings && !dembed))
        return SG_EINVAL;
    head_ctx c;
    SG_CU_TRY_OR_RETURN(head_ctx_init(&c, m, B, T, io, io->saved));
    const dims *d = &c.d;
    head_bwd_plan p = plan_head_bwd(d, c.C);
    if (p.end > sg_cu_unit_scratch_bytes(m, unit, B, T, io->dt))
        return SG_EINVAL;
    void *logits = region(io->scratch, p.logits); // (C, V), then dlogits in place
    void *dn = region(io->scratch, p.dn);         // (N, H)
    float *g = (float *)region(io->scratch, p.weight);
    float *work = (float *)region(io->scratch, p.work);
    // the divisor (the targets >= 0 of all chunks) is counted on the device, as the forward's
    SG_CU_TRY_OR_RETURN(
        sg_cu_cross_entropy_weight(cu, g, io->targets, d->N, d->V, dloss, dloss_scale));
    void *dW = m->tie_word_embeddings ? dembed : mat_(dparams, c.o.lm_head, d->es); // (V, H) +=
    for (size_t r = 0; r < d->N; r += c.C) {
        const size_t nc = chunk_rows(&c, r);
        const void *n = cat_(c.n, r * d->H, d->es); // (nc, H)
        SG_CU_TRY_OR_RETURN(
            sg_cu_linear_forward(cu, logits, n, c.W, NULL, d->dt, nc, d->H, d->V)); // (nc, V)
        SG_CU_TRY_OR_RETURN(sg_cu_cross_entropy_backward_rows(
            cu, logits, logits, cat_(c.lse, r, d->es), io->targets + r, d->dt, nc, d->V, g));
        SG_CU_TRY_OR_RETURN(sg_cu_linear_backward(cu, mat_(dn, r * d->H, d->es), dW, NULL, logits,
                                                  n, c.W, d->dt, nc, d->H, d->V, NULL));
    }
    return sg_cu_rmsnorm_backward(cu, dx, mat_(dparams, c.o.norm, d->es), dn, io->x, c.norm_w,
                                  c.rstd, d->dt, d->N, d->H, work);
}

/* ---- dispatch -------------------------------------------------------------------- */

/* 0 embedding, 1 layer, 2 head; or a negative error code. */
static int unit_kind(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                     const sg_cu_unit_io *io)
{
    if (!cu || !m || !io || B == 0 || T == 0 || !dtype_ok(io->dt))
        return SG_EINVAL;
    int kind = kind_of(m, unit);
    if (kind < 0)
        return SG_EINVAL;
    if (kind == 1) {
        int rc = sg_unit_check_model(m, NULL);
        if (rc < 0)
            return rc;
    }
    return kind;
}

int sg_cu_unit_forward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                       const sg_cu_unit_io *io)
{
    int kind = unit_kind(cu, m, unit, B, T, io);
    if (kind < 0)
        return kind;
    if (kind == 0) {
        dims d = dims_of(m, B, T, io->dt);
        return embed_forward(cu, &d, io);
    }
    return kind == 1 ? layer_forward(cu, m, unit, B, T, io)
                     : head_forward(cu, m, unit, B, T, io);
}

int sg_cu_unit_backward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                        const sg_cu_unit_io *io, const void *dy, float dloss,
                        const float *dloss_scale, void *dx, void *dparams, void *dembed)
{
    int kind = unit_kind(cu, m, unit, B, T, io);
    if (kind < 0)
        return kind;
    if (kind == 0) {
        dims d = dims_of(m, B, T, io->dt);
        return embed_backward(cu, &d, io, dy, dparams);
    }
    if (kind == 1)
        return layer_backward(cu, m, unit, B, T, io, dy, dloss, dloss_scale, dx, dparams);
    return head_backward(cu, m, unit, B, T, io, dloss, dloss_scale, dx, dparams, dembed);
}
