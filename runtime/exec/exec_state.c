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
#include "common/first_touch.h"
#include "common/par_for.h"
#include "runtime/exec/exec.h"

/* A per-tensor set (the weights or one moment) seen unit by unit: a unit's
 * parameters are its tensors concatenated, and the state's buffers are read
 * and written straight from and into the caller's tensors, with no staging
 * copy of the model (which would double the host memory a load or a save
 * needs). data NULL, or one tensor's NULL: not given (load: the buffer keeps
 * what it holds there) or not wanted (store). */
typedef struct unit_view {
    float *const *data; /* data[i]: tensor i, info[i].numel floats */
    const sg_tensor_info *info;
    const int *first, *count; /* per unit: its tensors [first, first + count) */
    const int64_t *size;      /* per unit: its parameters */
} unit_view;

/* The per-unit index the views share (tensors come unit by unit). */
typedef struct unit_index {
    int nunits;
    int *first, *count;
    int64_t *size;
} unit_index;

static void index_free(unit_index *ix)
{
    free(ix->first);
    free(ix->count);
    free(ix->size);
    memset(ix, 0, sizeof *ix);
}

static int index_build(unit_index *ix, const sg_model *m, const sg_weights *w)
{
    ix->nunits = sg_model_num_units(m);
    size_t n = (size_t)(ix->nunits > 0 ? ix->nunits : 1);
    ix->first = calloc(n, sizeof(int));
    ix->count = calloc(n, sizeof(int));
    ix->size = calloc(n, sizeof(int64_t));
    if (!ix->first || !ix->count || !ix->size)
        return SG_ENOMEM;
    for (int i = w->ntensors - 1; i >= 0; i--) {
        int u = w->unit[i];
        if (u < 0 || u >= ix->nunits)
            return SG_EINVAL;
        ix->first[u] = i;
        ix->count[u]++;
        ix->size[u] += w->info[i].numel;
    }
    for (int u = 0; u < ix->nunits; u++) {
        if (ix->size[u] != sg_model_unit_params(m, u))
            return SG_EINVAL;
        for (int k = 0; k < ix->count[u]; k++)
            if (w->unit[ix->first[u] + k] != u)
                return SG_EINVAL; /* a unit's tensors not side by side */
    }
    return SG_OK;
}

typedef struct conversion {
    float *f32;
    char *raw;
    sg_dtype dt;
    int to_f32;
} conversion;

static void convert_part(void *ctx, int64_t lo, int64_t hi)
{
    const conversion *c = ctx;
    char *raw = c->raw + (size_t)lo * sg_dtype_size(c->dt);
    if (c->to_f32)
        sg_f32_load(c->f32 + lo, raw, c->dt, (size_t)(hi - lo));
    else
        sg_f32_store(raw, c->dt, c->f32 + lo, (size_t)(hi - lo));
}

/* n elements between fp32 (f32) and dtype dt (raw), on the start-up's
 * threads (STEPGRAPH_INIT_THREADS, checked when the state was allocated):
 * a whole model's load or save is a pass over all of its state, and no task
 * runs meanwhile (sg_exec_load_state_from pauses StarPU's workers). */
static void convert(float *f32, void *raw, sg_dtype dt, size_t n, int to_f32)
{
    int threads = 1;
    sg_error ignored = {0};
    if (n >= 2 * (size_t)SG_PAR_FOR_MIN && sg_first_touch_threads(&threads, &ignored))
        threads = 1;
    conversion c = {.f32 = f32, .raw = raw, .dt = dt, .to_f32 = to_f32};
    sg_par_for((int64_t)n, threads, convert_part, &c);
}

/* Elements [off, off + n) of unit u to (to_view) or from buf, which holds n
 * values of dtype dt. Several ranks: elements past the unit's end are the
 * last rank's padding, zero on load and dropped on store. */
static void unit_range(const unit_view *v, int u, int64_t off, int64_t n, void *buf, sg_dtype dt,
                       int to_view)
{
    size_t es = sg_dtype_size(dt);
    int64_t t0 = 0, end = off + n;
    for (int i = v->first[u]; i < v->first[u] + v->count[u]; i++) {
        int64_t numel = v->info[i].numel, lo = off > t0 ? off : t0;
        int64_t hi = end < t0 + numel ? end : t0 + numel;
        if (hi > lo) {
            char *b = (char *)buf + (size_t)(lo - off) * es;
            size_t len = (size_t)(hi - lo);
            float *t = v->data ? v->data[i] : NULL;
            if (t)
                convert(t + (lo - t0), b, dt, len, to_view);
        }
        t0 += numel;
    }
    int64_t pad = off > v->size[u] ? off : v->size[u];
    if (!to_view && end > pad) /* zero bits are 0 in fp32, bf16 and fp16 */
        memset((char *)buf + (size_t)(pad - off) * es, 0, (size_t)(end - pad) * es);
}

/* Several ranks: where this rank's shard of unit u starts in the unit (0
 * for a unit every rank holds whole). */
static int64_t rank_base(const sg_exec *x, int u)
{
    const sg_comm *comm = x->shared.comm;
    return sg_unit_shard_offset(x->shared.model, x->shared.spec, u, comm ? comm->rank : 0);
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
    int64_t offset, elems; /* the sub-group range dst holds (a chunk when tiled) */
    const unit_view *src;
    int to_state; /* 1: dst -> src (store); 0: src -> dst (load) */
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
    unit_range(f->src, piece->unit, off, hi - lo, d, SG_F32, f->to_state);
}

typedef struct state_sets {
    unit_index ix;
    unit_view w, m, v;
} state_sets;

/* Views of w's tensors, with no set's data yet (a reader points one set's
 * view at the tensor or range it moves). */
static int sets_init(state_sets *s, const sg_model *m, const sg_weights *w)
{
    memset(s, 0, sizeof *s);
    int rc = index_build(&s->ix, m, w);
    if (rc) {
        index_free(&s->ix);
        return rc;
    }
    unit_view base = {
        .info = w->info, .first = s->ix.first, .count = s->ix.count, .size = s->ix.size};
    s->w = s->m = s->v = base;
    return SG_OK;
}

enum { NO_UNIT = -2 };

/* Whether buffer b of g holds any of unit u (NO_UNIT: the loss scaler's
 * buffers, which belong to no unit);
 * sg_units[2 s], [2 s + 1]: the lowest and highest unit of sub-group s's
 * pieces. */
static int holds_unit(const sg_buffer *buf, int u, const int *sg_units, int nsg)
{
    if (u == NO_UNIT)
        return buf->role == SG_BUF_LOSS_SCALE || buf->role == SG_BUF_LOSS_SCALER_STATE;
    if (buf->role == SG_BUF_PARAM_PIECE || buf->role == SG_BUF_PARAM_FULL)
        return buf->unit == u;
    if (buf->role == SG_BUF_MASTER || buf->role == SG_BUF_MOMENTS)
        return buf->subgroup >= 0 && buf->subgroup < nsg && sg_units[2 * buf->subgroup] <= u &&
               u <= sg_units[2 * buf->subgroup + 1];
    return 0;
}

/* Moves between the sets and the persistent buffers (load: sets -> buffers)
 * that hold unit `unit` (sg_units and nsg as holds_unit). */
static int transfer(sg_exec *x, state_sets *s, int load, const sg_loss_scaler_state *scaler,
                    int unit, const int *sg_units, int nsg)
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
            if (!holds_unit(buf, unit, sg_units, nsg))
                continue;
            /* a set not asked for */
            if (!s->w.data && (buf->role == SG_BUF_PARAM_PIECE || buf->role == SG_BUF_MASTER ||
                               buf->role == SG_BUF_PARAM_FULL))
                continue;
            if (buf->role == SG_BUF_MOMENTS && !s->m.data && !s->v.data)
                continue;
            /* a load of some tensors keeps the rest of the buffer */
            void *p = sg_exec_acquire(x, b, load ? 2 : 0);
            if (!p)
                return SG_EINVAL;
            sg_optimizer_state os = x->shared.spec->optimizer_state;
            int64_t n2 = buf->elems / sg_optimizer_state_arrays(os);
            sg_fill f = {.x = x,
                         .dst = p,
                         .offset = buf->subgroup_offset,
                         .elems = buf->role == SG_BUF_MOMENTS ? n2 : buf->elems,
                         .to_state = !load};
            switch (buf->role) {
            case SG_BUF_PARAM_PIECE:
                unit_range(&s->w, buf->unit, rank_base(x, buf->unit) + buf->unit_offset, buf->elems,
                           p, buf->dtype, !load);
                break;
            case SG_BUF_PARAM_FULL:
                unit_range(&s->w, buf->unit, 0, buf->elems, p, buf->dtype, 0);
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
            default: /* loss scale */ *(float *)p = scaler ? (float)scaler->scale : 1.0f; break;
            }
            sg_exec_release(x, b);
        }
    }
    return SG_OK;
}

static int sets_error(int rc, const char *what, sg_error *err)
{
    return sg_error_set(err, rc,
                        rc == SG_ENOMEM ? "out of memory %s"
                                        : "%s: the tensors do not match the model's "
                                          "units",
                        what);
}

/* ---- reading the state back one tensor at a time ---------------------------- */

struct sg_state_reader {
    sg_exec *x;
    const sg_weights *shape;
    state_sets s;
    int64_t *offset;  /* (ntensors) where each tensor starts in its unit */
    int *range_first; /* (nunits) zeros; and the tensors per unit of a range's */
    int *range_count; /* view: none but in its unit (move_range) */
    int *sg_units;    /* per sub-group: its pieces' lowest and highest unit */
    int nsg;
};

static int sub_group_units(const sg_graph *g, int **out, int *nsg)
{
    int n = 0;
    for (int b = 0; b < g->nbuffers; b++)
        if (g->buffers[b].subgroup + 1 > n)
            n = g->buffers[b].subgroup + 1;
    int *u = malloc((size_t)(2 * n + 1) * sizeof *u);
    if (!u)
        return SG_ENOMEM;
    for (int k = 0; k < n; k++) {
        u[2 * k] = INT32_MAX;
        u[2 * k + 1] = -1;
    }
    for (int b = 0; b < g->nbuffers; b++) {
        const sg_buffer *p = &g->buffers[b];
        if (p->role != SG_BUF_PARAM_PIECE || p->subgroup < 0)
            continue;
        if (p->unit < u[2 * p->subgroup])
            u[2 * p->subgroup] = p->unit;
        if (p->unit > u[2 * p->subgroup + 1])
            u[2 * p->subgroup + 1] = p->unit;
    }
    *out = u;
    *nsg = n;
    return SG_OK;
}

void sg_state_reader_close(sg_state_reader *r)
{
    if (!r)
        return;
    index_free(&r->s.ix);
    free(r->offset);
    free(r->range_first);
    free(r->range_count);
    free(r->sg_units);
    free(r);
}

int sg_state_reader_open(sg_exec *x, const sg_weights *shape, sg_state_reader **out, sg_error *err)
{
    sg_state_reader *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r)
        return sg_error_set(err, SG_ENOMEM, "out of memory reading the state back");
    r->x = x;
    r->shape = shape;
    int rc = sets_init(&r->s, x->shared.model, shape);
    if (!rc)
        rc = sub_group_units(x->graph, &r->sg_units, &r->nsg);
    if (!rc && !(r->offset = calloc((size_t)(shape->ntensors > 0 ? shape->ntensors : 1),
                                    sizeof *r->offset)))
        rc = SG_ENOMEM;
    if (!rc)
        sg_weights_unit_offsets(shape, r->offset);
    size_t nunits = (size_t)(r->s.ix.nunits > 0 ? r->s.ix.nunits : 1);
    if (!rc && (!(r->range_first = calloc(nunits, sizeof(int))) ||
                !(r->range_count = calloc(nunits, sizeof(int)))))
        rc = SG_ENOMEM;
    if (rc) {
        sg_state_reader_close(r);
        return sets_error(rc, "reading the state back", err);
    }
    *out = r;
    return SG_OK;
}

/* Elements [lo, lo + n) of unit u of one set between buf and the buffers
 * that hold them (load: buf -> buffers, the rest of each buffer kept). The
 * unit is seen as three tensors: the elements before the range (not moved),
 * the range (buf) and those after it (not moved); the other units have
 * none. A tensor is the range [offset[i], offset[i] + numel) of its unit. */
static int move_range(sg_state_reader *r, int set, int u, int64_t lo, int64_t n, float *buf,
                      int load)
{
    sg_tensor_info info[3] = {{.numel = lo}, {.numel = n}, {.numel = r->s.ix.size[u] - lo - n}};
    float *data[3] = {NULL, buf, NULL};
    unit_view range = {.data = data,
                       .info = info,
                       .first = r->range_first,
                       .count = r->range_count,
                       .size = r->s.ix.size};
    state_sets s = r->s;
    *(set == SG_SET_WEIGHTS ? &s.w : set == SG_SET_EXP_AVG ? &s.m : &s.v) = range;
    r->range_count[u] = 3;
    int rc = transfer(r->x, &s, load, NULL, u, r->sg_units, r->nsg);
    r->range_count[u] = 0;
    return rc;
}

/* Whether this rank's buffers hold any of elements [t0, t0 + n) of unit u:
 * a persistent full copy of the unit, or a persistent piece overlapping
 * them (the masters and moments are the pieces' too). One rank holds every
 * element; one of several, its shards and the units every rank holds whole. */
static int holds_range(const sg_exec *x, int u, int64_t t0, int64_t n)
{
    const sg_graph *g = x->graph;
    for (int b = 0; b < g->nbuffers; b++) {
        const sg_buffer *buf = &g->buffers[b];
        if (!buf->persistent || buf->unit != u)
            continue;
        if (buf->role == SG_BUF_PARAM_FULL)
            return 1;
        int64_t lo = rank_base(x, u) + buf->unit_offset;
        if (buf->role == SG_BUF_PARAM_PIECE && lo < t0 + n && t0 < lo + buf->elems)
            return 1;
    }
    return 0;
}

int sg_exec_load_state_from(sg_exec *x, const sg_weights *shape, const sg_tensor_source *src,
                            const sg_loss_scaler_state *scaler, sg_error *err)
{
    sg_state_reader *r;
    int rc = sg_state_reader_open(x, shape, &r, err);
    if (rc)
        return rc;
    int64_t most = 1;
    for (int i = 0; i < shape->ntensors; i++)
        most = shape->info[i].numel > most ? shape->info[i].numel : most;
    float *tmp = malloc((size_t)most * sizeof *tmp);
    if (!tmp) {
        sg_state_reader_close(r);
        return sg_error_set(err, SG_ENOMEM, "out of memory loading the weights (%lld floats)",
                            (long long)most);
    }
    /* no task runs yet: StarPU's idle workers would poll for work on the
     * cores the initialisation and the conversions use (a disk node's
     * transfers need them: NVMe offload keeps them running) */
    if (!x->have_disk)
        starpu_pause();
    rc = transfer(x, &r->s, 1, scaler, NO_UNIT, r->sg_units, r->nsg);
    for (int i = 0; i < shape->ntensors && !rc; i++) {
        int u = shape->unit[i];
        int64_t lo = r->offset[i], n = shape->info[i].numel;
        /* several ranks: a tensor outside this rank's shards is not read
         * here (the rank that holds it reads and checks it) */
        if (!holds_range(x, u, lo, n))
            continue;
        for (int set = SG_SET_WEIGHTS; set <= SG_SET_EXP_AVG_SQ && !rc; set++) {
            int got = src->fill(src->ctx, set, i, tmp);
            if (got == SG_TENSOR_ABSENT)
                continue; /* the buffers' zeros stay */
            if (got) {
                rc = got;
                break;
            }
            if (move_range(r, set, u, lo, n, tmp, 1))
                rc = sg_error_set(err, SG_EINVAL, "cannot load %s into StarPU's buffers",
                                  shape->info[i].name);
        }
    }
    if (!x->have_disk)
        starpu_resume();
    free(tmp);
    sg_state_reader_close(r);
    return rc;
}

int sg_state_reader_fill(void *reader, int set, int i, float *out)
{
    sg_state_reader *r = reader;
    if (i < 0 || i >= r->shape->ntensors)
        return SG_EINVAL;
    return sg_state_reader_fill_unit(r, set, r->shape->unit[i], r->offset[i],
                                     r->shape->info[i].numel, out);
}

int sg_state_reader_fill_unit(sg_state_reader *r, int set, int u, int64_t lo, int64_t n, float *out)
{
    const unit_index *ix = &r->s.ix;
    if (u < 0 || u >= ix->nunits || lo < 0 || n < 0 || lo > ix->size[u] - n ||
        set < SG_SET_WEIGHTS || set > SG_SET_EXP_AVG_SQ)
        return SG_EINVAL;
    /* zeros where no buffer holds the values (a set the optimizer lacks:
     * Lion's second moment, Adagrad's first) */
    memset(out, 0, (size_t)n * sizeof *out);
    return move_range(r, set, u, lo, n, out, 0);
}
