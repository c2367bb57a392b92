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
/* The C headers have no extern "C" of their own: include them first, under
 * C linkage, so that libsgcore's functions link from this C++ file. */
extern "C" {
#include "common/error.h"
#include "graph/ir.h"
#include "models/model.h"
#include "codelets/cpu/adam.h"
#include "codelets/cpu/block.h"
}

#include "codelets/cuda/block_cuda.h"

#include <stdint.h>
#include <string.h>

#define TRY(call)                                                                          \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ < 0)                                                                       \
            return rc_;                                                                    \
    } while (0)

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
        if (m->num_experts > 0 || sg_unit_check_model(m, NULL)) /* refused (MoE): the CPU
                                                                    estimate, in dt */
            return sg_unit_scratch_floats(m, unit, B, T) * d.es;
        sg_layer_saved_layout l;
        sg_layer_saved_layout_get(m, N, &l);
        size_t f = plan_layer_fwd(&d, l.total, 1, 1).end;
        size_t b = max2(plan_mlp_bwd(&d).end, plan_attn_bwd(m, &d).end);
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
} layer_act;

typedef struct layer_ctx {
    const sg_cu *cu;
    dims d;
    size_t window;             /* keys a query sees; 0: all earlier ones */
    sg_layer_param_offsets o;  /* elements into params and dparams */
    const void *p;             /* the unit's parameters (dt) */
    layer_act a;
    const float *cos_tab, *sin_tab;
} layer_ctx;

static void layer_act_at(layer_act *a, void *base, const sg_layer_saved_layout *l, int qk,
                         size_t es)
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
}

/* Fills everything but the activation pointers. */
static int layer_ctx_init(layer_ctx *c, const sg_cu *cu, const sg_model *m, int unit,
                          size_t B, size_t T, const sg_cu_unit_io *io)
{
    if (!io->params || !io->x || !io->cos_tab || !io->sin_tab)
        return SG_EINVAL;
    TRY(sg_layer_param_offsets_get(m, unit - 1, &c->o));
    c->cu = cu;
    c->d = dims_of(m, B, T, io->dt);
    c->window = m->layer_attn[unit - 1] == SG_ATTN_SLIDING ? (size_t)m->sliding_window : 0;
    c->p = io->params;
    c->cos_tab = io->cos_tab;
    c->sin_tab = io->sin_tab;
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
    TRY(sg_cu_linear_forward(c->cu, lin, c->a.n1, lp(c, w), lp(c, b), d->dt, d->N, d->H,
                             heads * d->D));
    if (qk) // RMSNorm over each head's D values
        TRY(sg_cu_rmsnorm_forward(c->cu, out, rstd, pre, lp(c, norm_w), d->dt, d->N * heads,
                                  d->D, d->eps));
    return sg_cu_rope_forward(c->cu, out, out, c->cos_tab, c->sin_tab, d->dt, d->B, d->T,
                              heads, d->D);
}

/* h = x + o_proj(attention(n1)), n1 = input_layernorm(x). */
static int attn_forward(const layer_ctx *c, const void *x)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    TRY(sg_cu_rmsnorm_forward(c->cu, a->n1, a->rstd1, x, lp(c, o->ln1), d->dt, d->N, d->H,
                              d->eps));
    TRY(project_rope(c, a->q, a->qpre, a->rstdq, o->wq, o->bq, o->q_norm, d->Hq));
    TRY(project_rope(c, a->k, a->kpre, a->rstdk, o->wk, o->bk, o->k_norm, d->Hkv));
    TRY(sg_cu_linear_forward(c->cu, a->v, a->n1, lp(c, o->wv), lp(c, o->bv), d->dt, d->N,
                             d->H, d->KV));
    TRY(sg_cu_attention_forward(c->cu, a->att, a->lse, a->q, a->k, a->v, d->dt, d->B, d->T,
                                d->Hq, d->Hkv, d->D, c->window));
    TRY(sg_cu_linear_forward(c->cu, a->h, a->att, lp(c, o->wo), lp(c, o->bo), d->dt, d->N,
                             d->Q, d->H));
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
    TRY(sg_cu_rmsnorm_forward(c->cu, a->n2, a->rstd2, a->h, lp(c, o->ln2), d->dt, d->N, d->H,
                              d->eps));
    TRY(sg_cu_linear_forward(c->cu, a->gate, a->n2, lp(c, o->wg), NULL, d->dt, d->N, d->H,
                             d->F));
    TRY(sg_cu_linear_forward(c->cu, a->up, a->n2, lp(c, o->wu), NULL, d->dt, d->N, d->H,
                             d->F));
    if (!y)
        return 0;
    TRY(sg_cu_swiglu_forward(c->cu, act, a->gate, a->up, d->dt, d->N, d->F));
    TRY(sg_cu_linear_forward(c->cu, y, act, lp(c, o->wd), NULL, d->dt, d->N, d->F, d->H));
    return sg_cu_add_into(c->cu, y, a->h, d->dt, d->N * d->H); // residual
}

static int layer_forward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                         const sg_cu_unit_io *io)
{
    if (!io->y && !io->saved)
        return SG_EINVAL;
    layer_ctx c;
    TRY(layer_ctx_init(&c, cu, m, unit, B, T, io));
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, c.d.N, &l);
    layer_fwd_plan p = plan_layer_fwd(&c.d, l.total, io->saved == NULL, io->y != NULL);
    if (p.end > sg_cu_unit_scratch_bytes(m, unit, B, T, io->dt))
        return SG_EINVAL; /* the plans disagree with the size: a bug, never an overrun */
    if (p.end > 0 && !io->scratch) /* the recompute into saved needs none */
        return SG_EINVAL;
    void *saved = io->saved ? io->saved : region(io->scratch, p.saved); // checkpointing
    layer_act_at(&c.a, saved, &l, m->qk_norm, c.d.es);
    TRY(attn_forward(&c, io->x));
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
    TRY(sg_cu_swiglu_forward(c->cu, act, a->gate, a->up, d->dt, d->N, d->F)); // recomputed
    TRY(sg_cu_linear_backward(c->cu, dact, mat_(g, o->wd, es), NULL, dy, act, lp(c, o->wd),
                              d->dt, d->N, d->F, d->H, NULL));
    void *dgate = act; // act is dead: dgate takes its place
    TRY(sg_cu_swiglu_backward(c->cu, dgate, dup, dact, a->gate, a->up, d->dt, d->N, d->F));
    TRY(sg_cu_linear_backward(c->cu, dn2, mat_(g, o->wg, es), NULL, dgate, a->n2,
                              lp(c, o->wg), d->dt, d->N, d->H, d->F, NULL));
    TRY(sg_cu_linear_backward(c->cu, tmp, mat_(g, o->wu, es), NULL, dup, a->n2, lp(c, o->wu),
                              d->dt, d->N, d->H, d->F, NULL));
    TRY(sg_cu_add_into(c->cu, dn2, tmp, d->dt, d->N * d->H));
    TRY(sg_cu_rmsnorm_backward(c->cu, dx, mat_(g, o->ln2, es), dn2, a->h, lp(c, o->ln2),
                               a->rstd2, d->dt, d->N, d->H, work));
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
    TRY(sg_cu_linear_backward(c->cu, dn1, mat_(g, o->wq, es), mat_(g, o->bq, es), dq, a->n1,
                              lp(c, o->wq), d->dt, d->N, d->H, d->Q, bw));
    bw = o->bk != SG_NO_OFFSET ? work : NULL;
    TRY(sg_cu_linear_backward(c->cu, tmp, mat_(g, o->wk, es), mat_(g, o->bk, es), dk, a->n1,
                              lp(c, o->wk), d->dt, d->N, d->H, d->KV, bw));
    TRY(sg_cu_add_into(c->cu, dn1, tmp, d->dt, d->N * d->H));
    bw = o->bv != SG_NO_OFFSET ? work : NULL;
    TRY(sg_cu_linear_backward(c->cu, tmp, mat_(g, o->wv, es), mat_(g, o->bv, es), dv, a->n1,
                              lp(c, o->wv), d->dt, d->N, d->H, d->KV, bw));
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
    TRY(sg_cu_linear_backward(c->cu, datt, mat_(g, o->wo, es), mat_(g, o->bo, es), dx, a->att,
                              lp(c, o->wo), d->dt, d->N, d->Q, d->H, ow));
    TRY(sg_cu_attention_backward(c->cu, dq, dk, dv, datt, a->q, a->k, a->v, a->att, a->lse,
                                 d->dt, d->B, d->T, d->Hq, d->Hkv, d->D, c->window, work));
    int rc = 0;
    void *dqpre = datt; // datt is dead: dq before QK-norm takes its place
    const void *dqin = unrope(c, dq, dqpre, a->qpre, a->rstdq, g, o->q_norm, d->Hq, work, &rc);
    TRY(rc);
    const void *dkin = unrope(c, dk, dkpre, a->kpre, a->rstdk, g, o->k_norm, d->Hkv, work,
                              &rc);
    TRY(rc);
    TRY(qkv_backward(c, dn1, tmp, dqin, dkin, dv, g, work));
    TRY(sg_cu_rmsnorm_backward(c->cu, tmp, mat_(g, o->ln1, es), dn1, x, lp(c, o->ln1),
                               a->rstd1, d->dt, d->N, d->H, work));
    return sg_cu_add_into(c->cu, dx, tmp, d->dt, d->N * d->H); // residual
}

static int layer_backward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                          const sg_cu_unit_io *io, const void *dy, void *dx, void *dparams)
{
    if (!io->saved || !io->scratch || !dy || !dx || !dparams || dx == dy)
        return SG_EINVAL;
    layer_ctx c;
    TRY(layer_ctx_init(&c, cu, m, unit, B, T, io));
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, c.d.N, &l);
    layer_act_at(&c.a, io->saved, &l, m->qk_norm, c.d.es);
    size_t cap = sg_cu_unit_scratch_bytes(m, unit, B, T, io->dt);
    if (plan_mlp_bwd(&c.d).end > cap || plan_attn_bwd(m, &c.d).end > cap)
        return SG_EINVAL; /* the plans disagree with the size: a bug, never an overrun */
    TRY(mlp_backward(&c, dy, dx, dparams, io->scratch));
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
    TRY(sg_head_param_offsets_get(m, &c->o));
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
    TRY(head_ctx_init(&c, m, B, T, io, saved));
    const dims *d = &c.d;
    float *loss = io->loss ? io->loss : (float *)region(io->scratch, p.loss);
    void *logits = region(io->scratch, p.logits); // (C, V)
    float *row_loss = (float *)region(io->scratch, p.work); // (N)
    TRY(sg_cu_rmsnorm_forward(cu, c.n, c.rstd, io->x, c.norm_w, d->dt, d->N, d->H, d->eps));
    for (size_t r = 0; r < d->N; r += c.C) {
        const size_t nc = chunk_rows(&c, r);
        TRY(sg_cu_linear_forward(cu, logits, cat_(c.n, r * d->H, d->es), c.W, NULL, d->dt, nc,
                                 d->H, d->V)); // (nc, V)
        TRY(sg_cu_cross_entropy_rows(cu, row_loss + r, mat_(c.lse, r, d->es), logits,
                                     io->targets + r, d->dt, nc, d->V));
    }
    return sg_cu_cross_entropy_mean(cu, loss, row_loss, io->targets, d->N, d->V);
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
    TRY(head_ctx_init(&c, m, B, T, io, io->saved));
    const dims *d = &c.d;
    head_bwd_plan p = plan_head_bwd(d, c.C);
    if (p.end > sg_cu_unit_scratch_bytes(m, unit, B, T, io->dt))
        return SG_EINVAL;
    void *logits = region(io->scratch, p.logits); // (C, V), then dlogits in place
    void *dn = region(io->scratch, p.dn);         // (N, H)
    float *g = (float *)region(io->scratch, p.weight);
    float *work = (float *)region(io->scratch, p.work);
    // the divisor (the targets >= 0 of all chunks) is counted on the device, as the forward's
    TRY(sg_cu_cross_entropy_weight(cu, g, io->targets, d->N, d->V, dloss, dloss_scale));
    void *dW = m->tie_word_embeddings ? dembed : mat_(dparams, c.o.lm_head, d->es); // (V, H) +=
    for (size_t r = 0; r < d->N; r += c.C) {
        const size_t nc = chunk_rows(&c, r);
        const void *n = cat_(c.n, r * d->H, d->es); // (nc, H)
        TRY(sg_cu_linear_forward(cu, logits, n, c.W, NULL, d->dt, nc, d->H, d->V)); // (nc, V)
        TRY(sg_cu_cross_entropy_backward_rows(cu, logits, logits, cat_(c.lse, r, d->es),
                                              io->targets + r, d->dt, nc, d->V, g));
        TRY(sg_cu_linear_backward(cu, mat_(dn, r * d->H, d->es), dW, NULL, logits, n, c.W,
                                  d->dt, nc, d->H, d->V, NULL));
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
        /* MoE layers have CPU kernels only (codelets/cpu/moe.c) */
        int rc = m->num_experts > 0 ? SG_ENOTSUP : sg_unit_check_model(m, NULL);
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
        return layer_backward(cu, m, unit, B, T, io, dy, dx, dparams);
    return head_backward(cu, m, unit, B, T, io, dloss, dloss_scale, dx, dparams, dembed);
}
