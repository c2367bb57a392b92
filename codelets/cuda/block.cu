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
 * bytes from io->scratch by the plans of block_plan.cu;
 * sg_cu_unit_scratch_bytes is the largest plan, so sizing and carving cannot
 * disagree. This file holds the embedding, the head and the dispatch by
 * unit; the decoder layer is block_layer.cu's (what they share:
 * block_impl.h).
 */
#include "codelets/cuda/cuda_prologue.h"

#include "codelets/cuda/cuda_prologue.h"

#include "codelets/cuda/block_impl.h"

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
        layer_fwd_plan pf = sg_cu_plan_layer_fwd(&d, l.total, 1, 1);
        size_t f = pf.end;
        size_t b = max2(sg_cu_plan_mlp_bwd(&d).end, sg_cu_plan_attn_bwd(m, &d).end);
        if (m->num_experts > 0) {
            f = max2(f, sg_cu_plan_moe(m, &d, pf.end, 0).end);
            b = max2(b, sg_cu_plan_moe(m, &d, 0, 1).end);
        }
        return max2(f, b);
    }
    sg_head_saved_layout h;
    sg_head_saved_layout_get(m, N, &h);
    const size_t C = sg_head_chunk_tokens(m, N);
    return max2(sg_cu_plan_head_fwd(&d, C, h.total, 1, 1).end, sg_cu_plan_head_bwd(&d, C).end);
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

static int embed_backward(const sg_cu *cu, const dims *d, const sg_cu_unit_io *io, const void *dy,
                          void *dparams)
{
    if (!io->tokens || !dy || !dparams)
        return SG_EINVAL;
    return sg_cu_embedding_backward(cu, dparams, io->tokens, dy, d->dt, d->N, d->V,
                                    d->H); // (V, H) +=
}

/* ---- head (unit L+1) -------------------------------------------------------------- */

typedef struct head_ctx {
    dims d;
    sg_head_param_offsets o;
    const void *norm_w, *W; /* (H), (V, H): lm_head or the tied embedding */
    void *n, *rstd, *lse;
    size_t C; /* tokens per chunk of logits (sg_head_chunk_tokens) */
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
    head_fwd_plan p = sg_cu_plan_head_fwd(&d0, sg_head_chunk_tokens(m, d0.N), l.total,
                                          io->saved == NULL, io->loss == NULL);
    if (p.end > sg_cu_unit_scratch_bytes(m, unit, B, T, io->dt))
        return SG_EINVAL;
    void *saved = io->saved ? io->saved : region(io->scratch, p.saved); // checkpointing
    head_ctx c;
    SG_CU_TRY_OR_RETURN(head_ctx_init(&c, m, B, T, io, saved));
    const dims *d = &c.d;
    float *loss = io->loss ? io->loss : (float *)region(io->scratch, p.loss);
    void *logits = region(io->scratch, p.logits);           // (C, V)
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
                         const sg_cu_unit_io *io, float dloss, const float *dloss_scale, void *dx,
                         void *dparams, void *dembed)
{
    if (!dx || !dparams || (m->tie_word_embeddings && !dembed))
        return SG_EINVAL;
    head_ctx c;
    SG_CU_TRY_OR_RETURN(head_ctx_init(&c, m, B, T, io, io->saved));
    const dims *d = &c.d;
    head_bwd_plan p = sg_cu_plan_head_bwd(d, c.C);
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
    return kind == 1 ? sg_cu_layer_forward(cu, m, unit, B, T, io)
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
        return sg_cu_layer_backward(cu, m, unit, B, T, io, dy, dloss, dloss_scale, dx, dparams);
    return head_backward(cu, m, unit, B, T, io, dloss, dloss_scale, dx, dparams, dembed);
}
