/* exec_state.c - moving the training state (weights, Adam moments, loss
 * scale) between sg_weights / sg_train_state and the graph's persistent
 * buffers (exec.h). A unit's parameters are its tensors concatenated in
 * sg_model_unit_tensors order; pieces, full copies, masters and moments are
 * slices of that layout (graph/ir.h: unit_offset, subgroup_offset). */
#include <starpu.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/starpu/args.h"
#include "codelets/starpu/comm.h"
#include "runtime/exec/exec.h"

/* Per-unit flat fp32 arrays of a per-tensor set (weights or a moment). */
typedef struct unit_flat {
    int nunits;
    float **unit;       /* unit[u]: that unit's parameters */
    int64_t *size;
} unit_flat;

static void flat_free(unit_flat *f)
{
    for (int u = 0; f->unit && u < f->nunits; u++)
        free(f->unit[u]);
    free(f->unit);
    free(f->size);
    memset(f, 0, sizeof *f);
}

static int flat_alloc(unit_flat *f, const sg_model *m)
{
    f->nunits = sg_model_num_units(m);
    f->unit = calloc((size_t)f->nunits, sizeof(float *));
    f->size = calloc((size_t)f->nunits, sizeof(int64_t));
    if (!f->unit || !f->size)
        return SG_ENOMEM;
    for (int u = 0; u < f->nunits; u++) {
        f->size[u] = sg_model_unit_params(m, u);
        if (!(f->unit[u] = calloc((size_t)(f->size[u] ? f->size[u] : 1), sizeof(float))))
            return SG_ENOMEM;
    }
    return SG_OK;
}

/* Copies tensors (ntensors, in unit order, tensor i of unit units[i]) into
 * (to_flat) or out of the flat layout. */
static void flat_copy(unit_flat *f, int ntensors, const sg_tensor_info *info, const int *units,
                      float **tensors, int to_flat)
{
    int64_t off = 0;
    int cur = -1;
    for (int i = 0; i < ntensors; i++) {
        if (units[i] != cur) {
            cur = units[i];
            off = 0;
        }
        float *slot = f->unit[cur] + off;
        size_t bytes = (size_t)info[i].numel * sizeof(float);
        if (to_flat)
            memcpy(slot, tensors[i], bytes);
        else
            memcpy(tensors[i], slot, bytes);
        off += info[i].numel;
    }
}

/* Several ranks: where this rank's shard of unit u starts in the unit (0
 * for a unit every rank holds whole). Elements past the unit's end are the
 * last rank's padding: zero on load, dropped on store. */
static int64_t rank_base(const sg_exec *x, int u)
{
    const sg_comm *comm = x->shared.comm;
    return sg_unit_shard_offset(x->shared.model, x->shared.spec, u, comm ? comm->rank : 0);
}

/* Elements [off, off + n) of unit u to (to_flat) or from buf, padding past
 * the unit's end. */
static void unit_range(const unit_flat *f, int u, int64_t off, int64_t n, float *buf,
                       int to_flat)
{
    int64_t have = f->size[u] - off;
    if (have > n)
        have = n;
    if (have < 0)
        have = 0;
    if (to_flat)
        memcpy(f->unit[u] + off, buf, (size_t)have * sizeof(float));
    else {
        memcpy(buf, f->unit[u] + off, (size_t)have * sizeof(float));
        memset(buf + have, 0, (size_t)(n - have) * sizeof(float));
    }
}

/* Elements [off, off + n) of unit u as stored in a persistent buffer. */
static int put(void *dst, sg_dtype dt, const unit_flat *f, int u, int64_t off, int64_t n)
{
    if (off + n <= f->size[u]) {
        sg_f32_store(dst, dt, f->unit[u] + off, (size_t)n);
        return SG_OK;
    }
    float *tmp = malloc((size_t)(n + 1) * sizeof(float));
    if (!tmp)
        return SG_ENOMEM;
    unit_range(f, u, off, n, tmp, 0);
    sg_f32_store(dst, dt, tmp, (size_t)n);
    free(tmp);
    return SG_OK;
}

/* The reverse of put. */
static int take(const void *src, sg_dtype dt, const unit_flat *f, int u, int64_t off, int64_t n)
{
    float *tmp = malloc((size_t)(n + 1) * sizeof(float));
    if (!tmp)
        return SG_ENOMEM;
    sg_f32_load(tmp, src, dt, (size_t)n);
    unit_range(f, u, off, n, tmp, 1);
    free(tmp);
    return SG_OK;
}

/* Pieces of sub-group sg, to place masters and moments. */
static void each_piece_of(const sg_graph *g, int sg, void (*fn)(const sg_buffer *, void *),
                          void *ctx)
{
    for (int b = 0; b < g->nbuffers; b++)
        if (g->buffers[b].role == SG_BUF_PARAM_PIECE && g->buffers[b].subgroup == sg)
            fn(&g->buffers[b], ctx);
}

typedef struct sg_fill {
    const sg_exec *x;
    float *dst;
    int64_t offset, elems;   /* the sub-group range dst holds (a chunk when tiled) */
    const unit_flat *src;
    int to_state;            /* 1: dst -> src (store); 0: src -> dst (load) */
} sg_fill;

/* The part of a piece inside the buffer's range; the checkpoint stays per
 * tensor whatever the optimizer's chunks. */
static void fill_piece(const sg_buffer *piece, void *ctx)
{
    sg_fill *f = ctx;
    int64_t lo = piece->subgroup_offset > f->offset ? piece->subgroup_offset : f->offset;
    int64_t phi = piece->subgroup_offset + piece->elems, fhi = f->offset + f->elems;
    int64_t hi = phi < fhi ? phi : fhi;
    if (hi <= lo)
        return;
    float *d = f->dst + (lo - f->offset);
    int64_t off = rank_base(f->x, piece->unit) + piece->unit_offset + (lo - piece->subgroup_offset);
    unit_range(f->src, piece->unit, off, hi - lo, d, f->to_state);
}

typedef struct state_sets {
    unit_flat w, m, v;
} state_sets;

static void sets_free(state_sets *s)
{
    flat_free(&s->w);
    flat_free(&s->m);
    flat_free(&s->v);
}

static int sets_alloc(state_sets *s, const sg_model *m)
{
    memset(s, 0, sizeof *s);
    if (flat_alloc(&s->w, m) || flat_alloc(&s->m, m) || flat_alloc(&s->v, m)) {
        sets_free(s);
        return SG_ENOMEM;
    }
    return SG_OK;
}

/* Moves between the sets and the persistent buffers (load: sets -> buffers). */
static int transfer(sg_exec *x, state_sets *s, int load, const sg_loss_scaler_state *scaler)
{
    const sg_graph *g = x->graph;
    /* masters hold the exact fp32 parameters: read them last on store so
     * they win over the rounded pieces */
    for (int pass = 0; pass < 2; pass++) {
        for (int b = 0; b < g->nbuffers; b++) {
            const sg_buffer *buf = &g->buffers[b];
            int is_master = buf->role == SG_BUF_MASTER;
            if (!buf->persistent || is_master != (pass == 1))
                continue;
            if (buf->role != SG_BUF_PARAM_PIECE && buf->role != SG_BUF_PARAM_FULL &&
                buf->role != SG_BUF_MASTER && buf->role != SG_BUF_MOMENTS &&
                buf->role != SG_BUF_LOSS_SCALE && buf->role != SG_BUF_LOSS_SCALER_STATE)
                continue;
            if (!load && (buf->role == SG_BUF_LOSS_SCALE || buf->role == SG_BUF_LOSS_SCALER_STATE))
                continue; /* the trainer reads the scaler (sg_exec_loss_scaler) */
            if (!load && buf->role == SG_BUF_PARAM_FULL)
                continue; /* a copy of the pieces */
            void *p = sg_exec_acquire(x, b, load);
            if (!p)
                return SG_EINVAL;
            sg_optimizer_state os = x->shared.spec->optimizer_state;
            int64_t n2 = buf->elems / sg_optimizer_state_arrays(os);
            sg_fill f = {.x = x, .dst = p, .offset = buf->subgroup_offset,
                         .elems = buf->role == SG_BUF_MOMENTS ? n2 : buf->elems,
                         .to_state = !load};
            switch (buf->role) {
            case SG_BUF_PARAM_PIECE: {
                int64_t off = rank_base(x, buf->unit) + buf->unit_offset;
                int rc = load ? put(p, buf->dtype, &s->w, buf->unit, off, buf->elems)
                              : take(p, buf->dtype, &s->w, buf->unit, off, buf->elems);
                if (rc) {
                    sg_exec_release(x, b);
                    return rc;
                }
                break;
            }
            case SG_BUF_PARAM_FULL:
                if (put(p, buf->dtype, &s->w, buf->unit, 0, buf->elems)) {
                    sg_exec_release(x, b);
                    return SG_ENOMEM;
                }
                break;
            case SG_BUF_MASTER:
                f.src = &s->w;
                each_piece_of(g, buf->subgroup, fill_piece, &f);
                break;
            case SG_BUF_MOMENTS: /* m then v; Lion's m or Adagrad's v alone */
                if (os != SG_STATE_SQUARES) {
                    f.src = &s->m;
                    each_piece_of(g, buf->subgroup, fill_piece, &f);
                    f.dst = (float *)p + n2;
                }
                if (os != SG_STATE_MOMENTUM) {
                    f.src = &s->v;
                    each_piece_of(g, buf->subgroup, fill_piece, &f);
                }
                break;
            case SG_BUF_LOSS_SCALER_STATE:
                if (scaler && buf->bytes == (int64_t)sizeof *scaler)
                    memcpy(p, scaler, sizeof *scaler);
                break;
            default: /* loss scale */
                *(float *)p = scaler ? (float)scaler->scale : 1.0f;
                break;
            }
            sg_exec_release(x, b);
        }
    }
    return SG_OK;
}

int sg_exec_load_state(sg_exec *x, const sg_weights *w, const sg_train_state *st,
                       const sg_loss_scaler_state *scaler, sg_error *err)
{
    state_sets s;
    if (sets_alloc(&s, x->shared.model))
        return sg_error_set(err, SG_ENOMEM, "out of memory loading the weights");
    flat_copy(&s.w, w->ntensors, w->info, w->unit, w->data, 1);
    if (st) {
        flat_copy(&s.m, st->ntensors, st->info, w->unit, st->exp_avg, 1);
        flat_copy(&s.v, st->ntensors, st->info, w->unit, st->exp_avg_sq, 1);
    }
    int rc = transfer(x, &s, 1, scaler);
    sets_free(&s);
    return rc ? sg_error_set(err, rc, "cannot load the weights into StarPU's buffers") : SG_OK;
}

int sg_exec_store_state(sg_exec *x, sg_weights *w, sg_train_state *st, sg_error *err)
{
    state_sets s;
    if (sets_alloc(&s, x->shared.model))
        return sg_error_set(err, SG_ENOMEM, "out of memory reading the weights back");
    transfer(x, &s, 0, NULL);
    flat_copy(&s.w, w->ntensors, w->info, w->unit, w->data, 0);
    if (st) {
        flat_copy(&s.m, st->ntensors, st->info, w->unit, st->exp_avg, 0);
        flat_copy(&s.v, st->ntensors, st->info, w->unit, st->exp_avg_sq, 0);
    }
    sets_free(&s);
    return SG_OK;
}
