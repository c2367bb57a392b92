/* block.c - forward and backward of the graph units (embedding, decoder
 * layer, head) composed from the kernels of ops.h (see block.h).
 *
 * Layouts (parameter offsets, saved activations, scratch sizes) live in
 * models/unit_layout.c; this file only computes. Scratch is carved in the order
 * models/unit_layout.c sizes it, and every region is checked against
 * sg_unit_scratch_floats. Everything runs on the calling thread in a fixed
 * order, so results are bit-reproducible when OpenBLAS is pinned to one
 * thread (see ops.h).
 */
#include "codelets/cpu/block.h"

#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/ops.h"

/* ---- rotary tables --------------------------------------------------------- */

int sg_rope_cache_init(sg_rope_cache *rc, const sg_model *m, size_t T)
{
    if (!rc || !m || T == 0 || m->head_dim <= 0 || m->head_dim % 2)
        return SG_EINVAL;
    memset(rc, 0, sizeof *rc);
    const size_t D = (size_t)m->head_dim, half = D / 2;
    float *c = malloc(T * half * sizeof *c); // (T, D/2)
    float *s = malloc(T * half * sizeof *s); // (T, D/2)
    int rc_ =
        !(c && s) ? SG_ENOMEM
        : m->rope_scaling == 1
            ? sg_rope_table_llama3(T, D, m->rope_theta, m->rope_factor, m->rope_low_freq_factor,
                                   m->rope_high_freq_factor, m->rope_original_max_pos, c, s)
        : m->rope_scaling == 2
            ? sg_rope_table_yarn(T, D, m->rope_theta, m->rope_factor, m->rope_beta_fast,
                                 m->rope_beta_slow, m->rope_original_max_pos, m->rope_truncate,
                                 m->rope_attention_factor, c, s)
            : sg_rope_table(T, D, m->rope_theta, c, s);
    if (rc_ < 0) {
        free(c);
        free(s);
        return rc_;
    }
    *rc = (sg_rope_cache){.T = T, .half = half, .cos_tab = c, .sin_tab = s};
    return 0;
}

void sg_rope_cache_free(sg_rope_cache *rc)
{
    if (!rc)
        return;
    free(rc->cos_tab);
    free(rc->sin_tab);
    memset(rc, 0, sizeof *rc);
}

/* ---- small helpers ------------------------------------------------------------ */

/* A bump allocator over the caller's scratch. */
typedef struct arena {
    float *base;
    size_t cap, used;
} arena;

static arena arena_of(const sg_model *m, int unit, size_t B, size_t T, float *scratch)
{
    return (arena){.base = scratch, .cap = scratch ? sg_unit_scratch_floats(m, unit, B, T) : 0};
}

/* n floats of scratch, or NULL when they would pass the end. */
static float *carve(arena *a, size_t n)
{
    if (n > a->cap - a->used)
        return NULL;
    float *p = a->base + a->used;
    a->used += n;
    return p;
}

static const float *cptr(const float *base, size_t off)
{
    return off == SG_NO_OFFSET ? NULL : base + off;
}

static float *mptr(float *base, size_t off)
{
    return off == SG_NO_OFFSET ? NULL : base + off;
}

/* Sizes of one call. */
typedef struct dims {
    size_t B, T, N, H, Hq, Hkv, D, Q, KV, F, V;
    float eps;
} dims;

static dims dims_of(const sg_model *m, size_t B, size_t T)
{
    dims d = {.B = B, .T = T, .N = B * T};
    d.H = (size_t)m->hidden_size;
    d.Hq = (size_t)m->num_heads;
    d.Hkv = (size_t)m->num_kv_heads;
    d.D = (size_t)m->head_dim;
    d.Q = d.Hq * d.D;
    d.KV = d.Hkv * d.D;
    d.F = (size_t)m->intermediate_size;
    d.V = (size_t)m->vocab_size;
    d.eps = (float)m->rms_norm_eps;
    return d;
}

/* Ids in [0, V) (negative ones too when `allow_negative`: ignored targets). */
static int check_ids(const int32_t *ids, size_t N, size_t V, int allow_negative)
{
    for (size_t n = 0; n < N; n++)
        if ((ids[n] < 0 && !allow_negative) || (ids[n] >= 0 && (size_t)ids[n] >= V))
            return SG_EINVAL;
    return 0;
}

/* ---- embedding (unit 0) ---------------------------------------------------------- */

static int embed_forward(const dims *d, const sg_unit_io *io)
{
    if (!io->y) /* recompute: the embedding saves nothing */
        return 0;
    if (!io->tokens || !io->params)
        return SG_EINVAL;
    return sg_embedding_forward(io->y, io->tokens, io->params, d->N, d->V, d->H);
}

static int embed_backward(const dims *d, const sg_unit_io *io, const float *dy, float *dparams)
{
    if (!io->tokens || !dy || !dparams)
        return SG_EINVAL;
    return sg_embedding_backward(dparams, io->tokens, dy, d->N, d->V, d->H); // (V, H) +=
}

/* ---- decoder layer (units 1..L) --------------------------------------------------- */

/* Pointers to the saved activations (see sg_layer_saved_layout). */
typedef struct layer_act {
    float *n1, *h, *n2, *q, *k, *v, *att, *gate, *up, *qpre, *kpre;
    float *rstd1, *rstd2, *lse, *rstdq, *rstdk;
    float *probs, *sel, *topw; /* MoE only, else NULL */
} layer_act;

typedef struct layer_ctx {
    const sg_model *m;
    int unit;
    dims d;
    size_t window;            /* keys a query sees; 0: all earlier ones */
    sg_layer_param_offsets o; /* into params and dparams */
    const float *p;           /* the unit's parameters */
    layer_act a;
    const float *cos_tab, *sin_tab;
} layer_ctx;

static void layer_act_at(layer_act *a, float *base, const sg_layer_saved_layout *l, int qk, int moe)
{
    a->probs = moe ? base + l->probs : NULL;
    a->sel = moe ? base + l->sel : NULL;
    a->topw = moe ? base + l->topw : NULL;
    a->n1 = base + l->n1;
    a->h = base + l->h;
    a->n2 = base + l->n2;
    a->q = base + l->q;
    a->k = base + l->k;
    a->v = base + l->v;
    a->att = base + l->att;
    a->gate = base + l->gate;
    a->up = base + l->up;
    a->rstd1 = base + l->rstd1;
    a->rstd2 = base + l->rstd2;
    a->lse = base + l->lse;
    a->qpre = qk ? base + l->qpre : NULL;
    a->kpre = qk ? base + l->kpre : NULL;
    a->rstdq = qk ? base + l->rstdq : NULL;
    a->rstdk = qk ? base + l->rstdk : NULL;
}

/* Fills everything but the activation pointers. */
static int layer_ctx_init(layer_ctx *c, const sg_model *m, int unit, size_t B, size_t T,
                          const sg_unit_io *io)
{
    const sg_rope_cache *r = io->rope;
    if (!io->params || !io->x || !r || !r->cos_tab || !r->sin_tab || r->T < T ||
        r->half * 2 != (size_t)m->head_dim)
        return SG_EINVAL;
    SG_TRY(sg_layer_param_offsets_get(m, unit - 1, &c->o));
    c->m = m;
    c->unit = unit;
    c->d = dims_of(m, B, T);
    c->window = m->layer_attn[unit - 1] == SG_ATTN_SLIDING ? (size_t)m->sliding_window : 0;
    c->p = io->params;
    c->cos_tab = r->cos_tab;
    c->sin_tab = r->sin_tab;
    return 0;
}

/* out (N, heads*D) = rope(qk_norm(n1 @ W^T + b)); without QK-norm `pre` and
 * `rstd` are unused and the projection goes straight to out. */
static int project_rope(const layer_ctx *c, float *out, float *pre, float *rstd, size_t w, size_t b,
                        size_t norm_w, size_t heads)
{
    const dims *d = &c->d;
    const int qk = norm_w != SG_NO_OFFSET;
    float *lin = qk ? pre : out; // (N, heads*D)
    SG_TRY(sg_linear_forward(lin, c->a.n1, cptr(c->p, w), cptr(c->p, b), d->N, d->H, heads * d->D));
    if (qk) // RMSNorm over each head's D values
        SG_TRY(sg_rmsnorm_forward(out, rstd, pre, cptr(c->p, norm_w), d->N * heads, d->D, d->eps));
    return sg_rope_forward(out, out, c->cos_tab, c->sin_tab, d->B, d->T, heads, d->D);
}

/* h = x + o_proj(attention(n1)), n1 = input_layernorm(x). */
static int attn_forward(const layer_ctx *c, const float *x)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    SG_TRY(sg_rmsnorm_forward(a->n1, a->rstd1, x, cptr(c->p, o->ln1), d->N, d->H, d->eps));
    SG_TRY(project_rope(c, a->q, a->qpre, a->rstdq, o->wq, o->bq, o->q_norm, d->Hq));
    SG_TRY(project_rope(c, a->k, a->kpre, a->rstdk, o->wk, o->bk, o->k_norm, d->Hkv));
    SG_TRY(sg_linear_forward(a->v, a->n1, cptr(c->p, o->wv), cptr(c->p, o->bv), d->N, d->H, d->KV));
    SG_TRY(sg_attention_forward(a->att, a->lse, a->q, a->k, a->v, d->B, d->T, d->Hq, d->Hkv, d->D,
                                c->window));
    if (o->sinks != SG_NO_OFFSET) // gpt_oss: att and lse with the sinks' column
        SG_TRY(
            sg_attention_sinks_forward(a->att, a->lse, c->p + o->sinks, d->B, d->T, d->Hq, d->D));
    SG_TRY(sg_linear_forward(a->h, a->att, cptr(c->p, o->wo), cptr(c->p, o->bo), d->N, d->Q, d->H));
    sg_add_into(a->h, x, d->N * d->H); // residual
    return 0;
}

/* y = h + down_proj(silu(gate_proj(n2)) * up_proj(n2)), n2 =
 * post_attention_layernorm(h). y NULL (recompute): stops after what is saved. */
static int mlp_forward(const layer_ctx *c, float *y, arena *s)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    SG_TRY(sg_rmsnorm_forward(a->n2, a->rstd2, a->h, cptr(c->p, o->ln2), d->N, d->H, d->eps));
    SG_TRY(sg_linear_forward(a->gate, a->n2, cptr(c->p, o->wg), NULL, d->N, d->H, d->F));
    SG_TRY(sg_linear_forward(a->up, a->n2, cptr(c->p, o->wu), NULL, d->N, d->H, d->F));
    if (!y)
        return 0;
    float *act = carve(s, d->N * d->F); // (N, F)
    if (!act)
        return SG_EINVAL;
    SG_TRY(sg_swiglu_forward(act, a->gate, a->up, d->N, d->F));
    SG_TRY(sg_linear_forward(y, act, cptr(c->p, o->wd), NULL, d->N, d->F, d->H));
    sg_add_into(y, a->h, d->N * d->H); // residual
    return 0;
}

/* ---- mixture-of-experts MLP (qwen3_moe; codelets/cpu/moe.c) ------------------------ */

/* Expert e's weights in the unit's parameters or gradient. */
static const float *expert_w(const layer_ctx *c, const float *base, size_t off, size_t e)
{
    return base + off + e * c->o.ex_stride;
}

/* One expert's forward on its slots: qwen3_moe's or gpt_oss's. */
static int expert_forward(const layer_ctx *c, size_t e, float *gate, float *up, float *out_s,
                          const int32_t *slots, size_t n, float *ex)
{
    const sg_layer_param_offsets *o = &c->o;
    const size_t H = c->d.H, F = (size_t)c->m->moe_intermediate_size;
    const size_t K = (size_t)c->m->experts_per_token;
    if (c->m->arch == SG_ARCH_GPT_OSS) {
        size_t off[4];
        sg_oss_expert_offsets(c->m, o, e, off);
        return sg_moe_oss_expert_forward(gate, up, out_s, c->a.n2, slots, slots, n, c->p + off[0],
                                         c->p + off[1], c->p + off[2], c->p + off[3], H, F, K, ex);
    }
    return sg_moe_expert_forward(gate, up, out_s, c->a.n2, slots, slots, n,
                                 expert_w(c, c->p, o->ex_wg, e), expert_w(c, c->p, o->ex_wu, e),
                                 out_s ? expert_w(c, c->p, o->ex_wd, e) : NULL, H, F, K, ex);
}

/* Row pointers of every slot in a slot-indexed (N k, C) array. */
static const float **slot_rows(const float *base, size_t NK, size_t C)
{
    const float **p = malloc((NK ? NK : 1) * sizeof *p);
    for (size_t i = 0; p && i < NK; i++)
        p[i] = base + i * C;
    return p;
}

/* y = h + sum_j topw_j expert_{sel_j}(n2), n2 = post_attention_layernorm(h);
 * the router's picks and probabilities added to the micro-step's `stats`
 * (written fresh by the first layer). y NULL (recompute): the saved
 * activations only (the router's), stats untouched. Experts run one after
 * the other on their exact slot lists; their gate and up are not saved (the
 * backward recomputes them). split (experts as tasks): the router and the
 * statistics only; the expert and combine tasks do the rest. */
static int moe_forward(const layer_ctx *c, float *y, float *stats, int split, arena *s)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    const size_t E = (size_t)c->m->num_experts, K = (size_t)c->m->experts_per_token;
    const size_t F = (size_t)c->m->moe_intermediate_size, N = d->N, H = d->H;
    SG_TRY(sg_rmsnorm_forward(a->n2, a->rstd2, a->h, cptr(c->p, o->ln2), N, H, d->eps));
    float *logits = carve(s, N * E), *ex = carve(s, 2 * N * H + 3 * N * F);
    float *out_s = carve(s, N * K * H), *gate = carve(s, N * K * F), *up = carve(s, N * K * F);
    if (!logits || !ex || !out_s || !gate || !up)
        return SG_EINVAL;
    if (c->m->arch == SG_ARCH_GPT_OSS)
        SG_TRY(sg_moe_oss_router_forward(a->probs, a->sel, a->topw, logits, a->n2, c->p + o->router,
                                         c->p + o->router_b, N, H, E, K));
    else
        SG_TRY(sg_moe_router_forward(a->probs, a->sel, a->topw, logits, a->n2, c->p + o->router, N,
                                     H, E, K, c->m->norm_topk_prob));
    if ((y || split) && stats) {
        if (c->unit == 1)
            memset(stats, 0, sg_moe_stats_floats(c->m) * sizeof *stats);
        SG_TRY(sg_moe_stats_add(stats, a->probs, a->sel, N, E, K));
    }
    if (split || !y) /* the expert tasks, or a recompute: nothing more is saved */
        return 0;
    int32_t *slots = malloc(N * K * sizeof *slots);
    if (!slots)
        return SG_ENOMEM;
    int rc = 0;
    for (size_t e = 0; e < E && rc == 0; e++) {
        size_t n = sg_moe_expert_slots(slots, a->sel, N, K, e);
        rc = expert_forward(c, e, gate, up, out_s, slots, n, ex);
    }
    free(slots);
    SG_TRY(rc);
    const float **outs = slot_rows(out_s, N * K, H);
    if (!outs)
        return SG_ENOMEM;
    rc = sg_moe_combine_forward(y, a->h, outs, a->topw, N, H, K);
    free(outs);
    return rc;
}

/* MoE half of the backward: dx = dh = dy + d(post_attention_layernorm)(d n2),
 * d n2 = the experts' slots summed in slot order + the router's share. The
 * load-balancing loss adds dloss * coef * E * picks_e / (L N)^2 to d probs
 * (picks of every layer: stats is the micro-step's, complete after the
 * forward). io->moe_split: the experts' backward tasks have computed d n2's
 * expert share and d topw (io->moe_dn2, io->moe_dtopw) and the experts'
 * weight gradients. */
static int moe_backward(const layer_ctx *c, const sg_unit_io *io, const float *dy, float *dx,
                        float *g, float dloss, arena *s)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    const sg_model *m = c->m;
    const float *stats = io->moe_stats;
    const size_t E = (size_t)m->num_experts, K = (size_t)m->experts_per_token;
    const size_t F = (size_t)m->moe_intermediate_size, N = d->N, H = d->H;
    float *dtopw = carve(s, N * K), *dlogits = carve(s, N * E), *dx_s = carve(s, N * K * H);
    float *ex = carve(s, 5 * N * H + 5 * N * F), *dn2 = carve(s, N * H);
    float *gate = carve(s, N * K * F), *up = carve(s, N * K * F);
    if (!dtopw || !dlogits || !dx_s || !ex || !dn2 || !gate || !up)
        return SG_EINVAL;
    if (io->moe_split) {
        if (!io->moe_dn2 || !io->moe_dtopw)
            return SG_EINVAL;
        memcpy(dn2, io->moe_dn2, N * H * sizeof *dn2);
        memcpy(dtopw, io->moe_dtopw, N * K * sizeof *dtopw);
    } else {
        int32_t *slots = malloc(N * K * sizeof *slots);
        if (!slots)
            return SG_ENOMEM;
        int rc = 0;
        for (size_t e = 0; e < E && rc == 0; e++) {
            size_t n = sg_moe_expert_slots(slots, a->sel, N, K, e);
            /* gate and up are not saved: recomputed */
            rc = expert_forward(c, e, gate, up, NULL, slots, n, ex);
            if (rc)
                break;
            if (m->arch == SG_ARCH_GPT_OSS) {
                size_t off[4];
                sg_oss_expert_offsets(m, o, e, off);
                rc = sg_moe_oss_expert_backward(dx_s, dtopw, mptr(g, off[0]), mptr(g, off[1]),
                                                mptr(g, off[2]), mptr(g, off[3]), dy, a->n2, gate,
                                                up, a->topw, slots, slots, n, c->p + off[0],
                                                c->p + off[2], c->p + off[3], H, F, K, ex);
                continue;
            }
            rc = sg_moe_expert_backward(
                dx_s, dtopw, mptr(g, o->ex_wg + e * o->ex_stride),
                mptr(g, o->ex_wu + e * o->ex_stride), mptr(g, o->ex_wd + e * o->ex_stride), dy,
                a->n2, gate, up, a->topw, slots, slots, n, expert_w(c, c->p, o->ex_wg, e),
                expert_w(c, c->p, o->ex_wu, e), expert_w(c, c->p, o->ex_wd, e), H, F, K, ex);
        }
        free(slots);
        SG_TRY(rc);
        const float **rows = slot_rows(dx_s, N * K, H);
        if (!rows)
            return SG_ENOMEM;
        rc = sg_moe_slots_sum(dn2, rows, N, H, K);
        free(rows);
        SG_TRY(rc);
    }
    const double LN = (double)m->num_layers * (double)N;
    const double aux_scale = (double)dloss * m->router_aux_loss_coef * (double)E / (LN * LN);
    float *tmp = ex; // the experts' scratch is dead
    if (m->arch == SG_ARCH_GPT_OSS)
        SG_TRY(sg_moe_oss_router_backward(
            tmp, mptr(g, o->router), mptr(g, o->router_b), dlogits, dtopw, a->probs, a->sel,
            a->topw, stats, stats ? aux_scale : 0.0, a->n2, c->p + o->router, N, H, E, K));
    else
        SG_TRY(sg_moe_router_backward(tmp, mptr(g, o->router), dlogits, dtopw, a->probs, a->sel,
                                      a->topw, stats, stats ? aux_scale : 0.0, a->n2,
                                      c->p + o->router, N, H, E, K, m->norm_topk_prob));
    sg_add_into(dn2, tmp, N * H);
    SG_TRY(sg_rmsnorm_backward(dx, mptr(g, o->ln2), dn2, a->h, cptr(c->p, o->ln2), a->rstd2, N, H));
    sg_add_into(dx, dy, N * H); // residual
    return 0;
}

static int layer_forward(const sg_model *m, int unit, size_t B, size_t T, const sg_unit_io *io)
{
    if ((!io->y && !io->saved) || (io->moe_split && !io->saved))
        return SG_EINVAL;
    layer_ctx c;
    SG_TRY(layer_ctx_init(&c, m, unit, B, T, io));
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, c.d.N, &l);
    arena s = arena_of(m, unit, B, T, io->scratch);
    float *saved = io->saved ? io->saved : carve(&s, l.total); // checkpointing: in scratch
    if (!saved)
        return SG_EINVAL;
    layer_act_at(&c.a, saved, &l, m->qk_norm, m->num_experts > 0);
    SG_TRY(attn_forward(&c, io->x));
    return m->num_experts > 0 ? moe_forward(&c, io->y, io->moe_stats, io->moe_split, &s)
                              : mlp_forward(&c, io->y, &s);
}

/* MLP half: dx = dh = dy + d(post_attention_layernorm)(d(mlp)(dy)). */
static int mlp_backward(const layer_ctx *c, const float *dy, float *dx, float *g, arena *s)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    const size_t NF = d->N * d->F, NH = d->N * d->H;
    float *act = carve(s, NF), *dact = carve(s, NF), *dup = carve(s, NF); // (N, F)
    float *dn2 = carve(s, NH), *tmp = carve(s, NH);                       // (N, H)
    if (!act || !dact || !dup || !dn2 || !tmp)
        return SG_EINVAL;
    SG_TRY(sg_swiglu_forward(act, a->gate, a->up, d->N, d->F)); // recomputed, not saved
    SG_TRY(sg_linear_backward(dact, mptr(g, o->wd), NULL, dy, act, cptr(c->p, o->wd), d->N, d->F,
                              d->H));
    float *dgate = act; // act is dead: dgate takes its place
    SG_TRY(sg_swiglu_backward(dgate, dup, dact, a->gate, a->up, d->N, d->F));
    SG_TRY(sg_linear_backward(dn2, mptr(g, o->wg), NULL, dgate, a->n2, cptr(c->p, o->wg), d->N,
                              d->H, d->F));
    SG_TRY(sg_linear_backward(tmp, mptr(g, o->wu), NULL, dup, a->n2, cptr(c->p, o->wu), d->N, d->H,
                              d->F));
    sg_add_into(dn2, tmp, NH);
    SG_TRY(sg_rmsnorm_backward(dx, mptr(g, o->ln2), dn2, a->h, cptr(c->p, o->ln2), a->rstd2, d->N,
                               d->H));
    sg_add_into(dx, dy, NH); // residual
    return 0;
}

/* d(rope(qk_norm(.))) in place on dqk (N, heads*D); returns the gradient of
 * the projection's output: dqk itself, or dpre with QK-norm. */
static const float *unrope(const layer_ctx *c, float *dqk, float *dpre, const float *pre,
                           const float *rstd, float *g, size_t norm_w, size_t heads, int *rc)
{
    const dims *d = &c->d;
    *rc = sg_rope_backward(dqk, dqk, c->cos_tab, c->sin_tab, d->B, d->T, heads, d->D);
    if (*rc < 0 || norm_w == SG_NO_OFFSET)
        return dqk;
    *rc = sg_rmsnorm_backward(dpre, mptr(g, norm_w), dqk, pre, cptr(c->p, norm_w), rstd,
                              d->N * heads, d->D);
    return dpre;
}

/* dn1 (N, H) = gradient of n1 through q, k, v projections (summed in that order). */
static int qkv_backward(const layer_ctx *c, float *dn1, float *tmp, const float *dq,
                        const float *dk, const float *dv, float *g)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    SG_TRY(sg_linear_backward(dn1, mptr(g, o->wq), mptr(g, o->bq), dq, a->n1, cptr(c->p, o->wq),
                              d->N, d->H, d->Q));
    SG_TRY(sg_linear_backward(tmp, mptr(g, o->wk), mptr(g, o->bk), dk, a->n1, cptr(c->p, o->wk),
                              d->N, d->H, d->KV));
    sg_add_into(dn1, tmp, d->N * d->H);
    SG_TRY(sg_linear_backward(tmp, mptr(g, o->wv), mptr(g, o->bv), dv, a->n1, cptr(c->p, o->wv),
                              d->N, d->H, d->KV));
    sg_add_into(dn1, tmp, d->N * d->H);
    return 0;
}

/* Attention half: dx holds dh on entry and dx = dh + d(input_layernorm)(...)
 * on return. */
static int attn_backward(const layer_ctx *c, const float *x, float *dx, float *g, arena *s)
{
    const dims *d = &c->d;
    const layer_act *a = &c->a;
    const sg_layer_param_offsets *o = &c->o;
    const size_t NQ = d->N * d->Q, NKV = d->N * d->KV, NH = d->N * d->H;
    float *datt = carve(s, NQ), *dq = carve(s, NQ); // (N, Q)
    float *dk = carve(s, NKV), *dv = carve(s, NKV); // (N, KV)
    float *dkpre = a->kpre ? carve(s, NKV) : dk;    // (N, KV)
    float *dn1 = carve(s, NH), *tmp = carve(s, NH); // (N, H)
    if (!datt || !dq || !dk || !dv || !dkpre || !dn1 || !tmp)
        return SG_EINVAL;
    SG_TRY(sg_linear_backward(datt, mptr(g, o->wo), mptr(g, o->bo), dx, a->att, cptr(c->p, o->wo),
                              d->N, d->Q, d->H));
    if (o->sinks != SG_NO_OFFSET)
        SG_TRY(sg_attention_sinks_backward(mptr(g, o->sinks), datt, a->att, a->lse, c->p + o->sinks,
                                           d->B, d->T, d->Hq, d->D));
    SG_TRY(sg_attention_backward(dq, dk, dv, datt, a->q, a->k, a->v, a->att, a->lse, d->B, d->T,
                                 d->Hq, d->Hkv, d->D, c->window));
    int rc = 0;
    float *dqpre = datt; // datt is dead: dq before QK-norm takes its place
    const float *dqin = unrope(c, dq, dqpre, a->qpre, a->rstdq, g, o->q_norm, d->Hq, &rc);
    SG_TRY(rc);
    const float *dkin = unrope(c, dk, dkpre, a->kpre, a->rstdk, g, o->k_norm, d->Hkv, &rc);
    SG_TRY(rc);
    SG_TRY(qkv_backward(c, dn1, tmp, dqin, dkin, dv, g));
    SG_TRY(sg_rmsnorm_backward(tmp, mptr(g, o->ln1), dn1, x, cptr(c->p, o->ln1), a->rstd1, d->N,
                               d->H));
    sg_add_into(dx, tmp, NH); // residual
    return 0;
}

static int layer_backward(const sg_model *m, int unit, size_t B, size_t T, const sg_unit_io *io,
                          const float *dy, float dloss, float *dx, float *dparams)
{
    if (!io->saved || !dy || !dx || !dparams || dx == dy)
        return SG_EINVAL;
    layer_ctx c;
    SG_TRY(layer_ctx_init(&c, m, unit, B, T, io));
    sg_layer_saved_layout l;
    sg_layer_saved_layout_get(m, c.d.N, &l);
    layer_act_at(&c.a, io->saved, &l, m->qk_norm, m->num_experts > 0);
    arena s = arena_of(m, unit, B, T, io->scratch);
    if (m->num_experts > 0)
        SG_TRY(moe_backward(&c, io, dy, dx, dparams, dloss, &s));
    else
        SG_TRY(mlp_backward(&c, dy, dx, dparams, &s));
    s.used = 0; // the attention half reuses the MLP half's scratch
    return attn_backward(&c, io->x, dx, dparams, &s);
}

/* ---- head (unit L+1) -------------------------------------------------------------- */

typedef struct head_ctx {
    dims d;
    sg_head_param_offsets o;
    const float *norm_w, *W; /* (H), (V, H): lm_head or the tied embedding */
    float *n, *rstd, *lse;
    size_t C; /* tokens per chunk of logits (sg_head_chunk_tokens) */
} head_ctx;

static int head_ctx_init(head_ctx *c, const sg_model *m, size_t B, size_t T, const sg_unit_io *io,
                         float *saved)
{
    if (!io->params || !io->x || !io->targets || !saved)
        return SG_EINVAL;
    if (m->tie_word_embeddings && !io->embed)
        return SG_EINVAL;
    SG_TRY(sg_head_param_offsets_get(m, &c->o));
    c->d = dims_of(m, B, T);
    SG_TRY(check_ids(io->targets, c->d.N, c->d.V, 1));
    c->norm_w = io->params + c->o.norm;
    c->W = m->tie_word_embeddings ? io->embed : io->params + c->o.lm_head;
    sg_head_saved_layout l;
    sg_head_saved_layout_get(m, c->d.N, &l);
    c->n = saved + l.n;
    c->rstd = saved + l.rstd;
    c->lse = saved + l.lse;
    c->C = sg_head_chunk_tokens(m, c->d.N);
    return 0;
}

/* Rows of the chunk starting at row r. */
static size_t chunk_rows(const head_ctx *c, size_t r)
{
    return c->d.N - r < c->C ? c->d.N - r : c->C;
}

/* loss = mean cross-entropy(norm(x) @ W^T, targets), chunk by chunk: the
 * logits of C tokens at a time live in scratch; only their lse is kept. */
static int head_forward(const sg_model *m, int unit, size_t B, size_t T, const sg_unit_io *io)
{
    if (!io->saved && !io->loss)
        return SG_EINVAL;
    arena s = arena_of(m, unit, B, T, io->scratch);
    sg_head_saved_layout l;
    sg_head_saved_layout_get(m, B * T, &l);
    float *saved = io->saved ? io->saved : carve(&s, l.total); // checkpointing: in scratch
    head_ctx c;
    SG_TRY(head_ctx_init(&c, m, B, T, io, saved));
    const dims *d = &c.d;
    float *logits = carve(&s, c.C * d->V); // (C, V)
    if (!logits)
        return SG_EINVAL;
    SG_TRY(sg_rmsnorm_forward(c.n, c.rstd, io->x, c.norm_w, d->N, d->H, d->eps));
    double total = 0.0; // summed in row order across chunks, as one unchunked call
    int64_t count = 0;
    for (size_t r = 0; r < d->N; r += c.C) {
        const size_t nc = chunk_rows(&c, r);
        SG_TRY(sg_linear_forward(logits, c.n + r * d->H, c.W, NULL, nc, d->H, d->V)); // (nc, V)
        SG_TRY(sg_cross_entropy_rows(&total, &count, c.lse + r, logits, io->targets + r, nc, d->V));
    }
    if (io->loss) {
        double loss = count ? total / (double)count : 0.0;
        if (io->moe_stats && m->num_experts > 0) // the router's load-balancing loss
            loss += m->router_aux_loss_coef * sg_moe_aux_loss(io->moe_stats, (size_t)m->num_experts,
                                                              (size_t)m->num_layers, d->N);
        *io->loss = (float)loss;
    }
    return 0;
}

static int64_t count_targets(const int32_t *targets, size_t N)
{
    int64_t n = 0;
    for (size_t i = 0; i < N; i++)
        n += targets[i] >= 0;
    return n;
}

/* Per chunk: logits recomputed from the saved n, dlogits in their place,
 * dW += dlogits^T n, dn rows = dlogits W. Then the norm's backward. */
static int head_backward(const sg_model *m, int unit, size_t B, size_t T, const sg_unit_io *io,
                         float dloss, float *dx, float *dparams, float *dembed)
{
    if (!dx || !dparams || (m->tie_word_embeddings && !dembed))
        return SG_EINVAL;
    head_ctx c;
    SG_TRY(head_ctx_init(&c, m, B, T, io, io->saved));
    const dims *d = &c.d;
    arena s = arena_of(m, unit, B, T, io->scratch);
    float *logits = carve(&s, c.C * d->V); // (C, V): logits, then dlogits in place
    float *dn = carve(&s, d->N * d->H);    // (N, H)
    if (!logits || !dn)
        return SG_EINVAL;
    const int64_t count = count_targets(io->targets, d->N); // the mean's divisor, all chunks
    float *dW = m->tie_word_embeddings ? dembed : dparams + c.o.lm_head; // (V, H) +=
    for (size_t r = 0; r < d->N; r += c.C) {
        const size_t nc = chunk_rows(&c, r);
        const float *n = c.n + r * d->H;                                 // (nc, H)
        SG_TRY(sg_linear_forward(logits, n, c.W, NULL, nc, d->H, d->V)); // (nc, V)
        SG_TRY(sg_cross_entropy_backward(logits, logits, c.lse + r, io->targets + r, nc, d->V,
                                         dloss, count));
        SG_TRY(sg_linear_backward(dn + r * d->H, dW, NULL, logits, n, c.W, nc, d->H, d->V));
    }
    return sg_rmsnorm_backward(dx, dparams + c.o.norm, dn, io->x, c.norm_w, c.rstd, d->N, d->H);
}

/* ---- dispatch -------------------------------------------------------------------- */

/* 0 embedding, 1 layer, 2 head; or a negative error code. */
static int unit_kind(const sg_model *m, int unit, size_t B, size_t T, const sg_unit_io *io)
{
    if (!m || !io || B == 0 || T == 0 || unit < 0 || unit > m->num_layers + 1)
        return SG_EINVAL;
    if (unit == 0)
        return 0;
    if (unit > m->num_layers)
        return 2;
    int rc = sg_unit_check_model(m, NULL);
    return rc < 0 ? rc : 1;
}

int sg_unit_forward(const sg_model *m, int unit, size_t B, size_t T, const sg_unit_io *io)
{
    int kind = unit_kind(m, unit, B, T, io);
    if (kind < 0)
        return kind;
    if (kind == 0) {
        dims d = dims_of(m, B, T);
        return embed_forward(&d, io);
    }
    return kind == 1 ? layer_forward(m, unit, B, T, io) : head_forward(m, unit, B, T, io);
}

int sg_unit_backward(const sg_model *m, int unit, size_t B, size_t T, const sg_unit_io *io,
                     const float *dy, float dloss, float *dx, float *dparams, float *dembed)
{
    int kind = unit_kind(m, unit, B, T, io);
    if (kind < 0)
        return kind;
    if (kind == 0) {
        dims d = dims_of(m, B, T);
        return embed_backward(&d, io, dy, dparams);
    }
    if (kind == 1)
        return layer_backward(m, unit, B, T, io, dy, dloss, dx, dparams);
    return head_backward(m, unit, B, T, io, dloss, dx, dparams, dembed);
}
