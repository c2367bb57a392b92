/* block_layer.cu - forward and backward of a decoder layer on the GPU
 * (block_cuda.h, block_impl.h): attention and MLP, or a MoE layer's router
 * and experts (moe.cu's kernels), as codelets/cpu/block.c composes them:
 * the same kernels in the same order, the same residual adds, the same
 * gradients written or accumulated. Every step is a cuda_ops.h call queued
 * on cu->stream; only a MoE layer's slot counts wait for the device.
 */

#include "codelets/cuda/cuda_prologue.h"

#include "codelets/cuda/block_impl.h"

#include <stdlib.h>

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
    size_t window;            /* keys a query sees; 0: all earlier ones */
    sg_layer_param_offsets o; /* elements into params and dparams */
    const void *p;            /* the unit's parameters (dt) */
    layer_act a;
    const float *cos_tab, *sin_tab;
    const sg_model *m;
    int unit;
} layer_ctx;

static void layer_act_at(layer_act *a, void *base, const sg_layer_saved_layout *l, int qk, int moe,
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
    a->probs = moe ? mat_(base, l->probs, es) : NULL;
    a->sel = moe ? mat_(base, l->sel, es) : NULL;
    a->topw = moe ? mat_(base, l->topw, es) : NULL;
}

/* Fills everything but the activation pointers. */
static int layer_ctx_init(layer_ctx *c, const sg_cu *cu, const sg_model *m, int unit, size_t B,
                          size_t T, const sg_cu_unit_io *io)
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
static int project_rope(const layer_ctx *c, void *out, void *pre, void *rstd, size_t w, size_t b,
                        size_t norm_w, size_t heads)
{
    const dims *d = &c->d;
    const int qk = norm_w != SG_NO_OFFSET;
    void *lin = qk ? pre : out; // (N, heads*D)
    SG_CU_TRY_OR_RETURN(sg_cu_linear_forward(c->cu, lin, c->a.n1, lp(c, w), lp(c, b), d->dt, d->N,
                                             d->H, heads * d->D));
    if (qk) // RMSNorm over each head's D values
        SG_CU_TRY_OR_RETURN(sg_cu_rmsnorm_forward(c->cu, out, rstd, pre, lp(c, norm_w), d->dt,
                                                  d->N * heads, d->D, d->eps));
    return sg_cu_rope_forward(c->cu, out, out, c->cos_tab, c->sin_tab, d->dt, d->B, d->T, heads,
                              d->D);
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
static int expert_forward(const layer_ctx *c, size_t e, const int32_t *slots, size_t r, size_t n,
                          void *gate, void *up, void *out, void *ex)
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
                                    lp(c, o->ex_wg + s), lp(c, o->ex_wu + s), lp(c, o->ex_wd + s),
                                    d->dt, d->H, F, K, ex);
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
    moe_plan p = sg_cu_plan_moe(m, d, at, 0);
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
    moe_plan p = sg_cu_plan_moe(m, d, 0, 1);
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
                    mat_(g, off[2], es), mat_(g, off[3], es), dy, a->n2, ge, ue, topw, slots + r,
                    NULL, n, lp(c, off[0]), lp(c, off[2]), lp(c, off[3]), d->dt, H, F, K, ex);
                continue;
            }
            const size_t s = e * o->ex_stride;
            rc = sg_cu_moe_expert_backward(
                c->cu, dxr, dtr + r, mat_(g, o->ex_wg + s, es), mat_(g, o->ex_wu + s, es),
                mat_(g, o->ex_wd + s, es), dy, a->n2, ge, ue, topw, slots + r, NULL, n,
                lp(c, o->ex_wg + s), lp(c, o->ex_wu + s), lp(c, o->ex_wd + s), d->dt, H, F, K, ex);
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
    const double aux =
        stats ? (double)dloss * m->router_aux_loss_coef * (double)E / (LN * LN) : 0.0;
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

int sg_cu_layer_forward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
                        const sg_cu_unit_io *io)
{
    if (!io->y && !io->saved)
        return SG_EINVAL;
    layer_ctx c;
    SG_CU_TRY_OR_RETURN(layer_ctx_init(&c, cu, m, unit, B, T, io));
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, c.d.N, &l);
    layer_fwd_plan p = sg_cu_plan_layer_fwd(&c.d, l.total, io->saved == NULL, io->y != NULL);
    if (p.end > sg_cu_unit_scratch_bytes(m, unit, B, T, io->dt))
        return SG_EINVAL;          /* the plans disagree with the size: a bug, never an overrun */
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
    mlp_bwd_plan p = sg_cu_plan_mlp_bwd(d);
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
    *rc = sg_cu_rope_backward(c->cu, dqk, dqk, c->cos_tab, c->sin_tab, d->dt, d->B, d->T, heads,
                              d->D);
    if (*rc < 0 || norm_w == SG_NO_OFFSET)
        return dqk;
    *rc = sg_cu_rmsnorm_backward(c->cu, dpre, mat_(g, norm_w, d->es), dqk, pre, lp(c, norm_w), rstd,
                                 d->dt, d->N * heads, d->D, work);
    return dpre;
}

/* dn1 (N, H) = gradient of n1 through q, k, v projections (summed in that
 * order). `work` serves the bias sums (NULL without biases). */
static int qkv_backward(const layer_ctx *c, void *dn1, void *tmp, const void *dq, const void *dk,
                        const void *dv, void *g, float *work)
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
static int attn_backward(const layer_ctx *c, const sg_model *m, const void *x, void *dx, void *g,
                         void *scratch)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    const size_t es = d->es;
    attn_bwd_plan p = sg_cu_plan_attn_bwd(m, d);
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
    const void *dkin = unrope(c, dk, dkpre, a->kpre, a->rstdk, g, o->k_norm, d->Hkv, work, &rc);
    SG_CU_TRY_OR_RETURN(rc);
    SG_CU_TRY_OR_RETURN(qkv_backward(c, dn1, tmp, dqin, dkin, dv, g, work));
    SG_CU_TRY_OR_RETURN(sg_cu_rmsnorm_backward(c->cu, tmp, mat_(g, o->ln1, es), dn1, x,
                                               lp(c, o->ln1), a->rstd1, d->dt, d->N, d->H, work));
    return sg_cu_add_into(c->cu, dx, tmp, d->dt, d->N * d->H); // residual
}

int sg_cu_layer_backward(const sg_cu *cu, const sg_model *m, int unit, size_t B, size_t T,
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
    if (sg_cu_plan_mlp_bwd(&c.d).end > cap || sg_cu_plan_attn_bwd(m, &c.d).end > cap ||
        (m->num_experts > 0 && sg_cu_plan_moe(m, &c.d, 0, 1).end > cap))
        return SG_EINVAL; /* the plans disagree with the size: a bug, never an overrun */
    if (m->num_experts > 0)
        SG_CU_TRY_OR_RETURN(moe_backward(&c, io, dy, dx, dparams, dloss, dloss_scale, io->scratch));
    else
        SG_CU_TRY_OR_RETURN(mlp_backward(&c, dy, dx, dparams, io->scratch));
    // the attention half reuses the MLP half's scratch: stream order keeps them apart
    return attn_backward(&c, m, io->x, dx, dparams, io->scratch);
}
