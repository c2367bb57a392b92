/* compile.c - compiles one ZeRO training step into the step-graph IR.
 *
 * The program is emitted in the order DeepSpeed runs it: per micro-step the
 * forward of every unit (with stage-3 all-gathers in front), then the
 * backward in reverse (recompute, backward, gradient reduction); the
 * optimizer chain of a CPU sub-group is emitted as soon as its gradients are
 * final, the rest after the gradient norm. Edges are not written here: they
 * follow from the buffer accesses (see ir.h).
 */
#include "graph/compile.h"

#include "models/unit_layout.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ACCESS_FIXED 16

void sg_step_spec_defaults(sg_step_spec *s)
{
    memset(s, 0, sizeof *s);
    s->zero_stage = 0;
    s->dp_size = 1;
    s->micro_batch = 1;
    s->grad_accum = 1;
    s->seq_len = 256;
    s->compute_dtype = SG_F32;
    s->offload_ratio = 1.0;
    s->sub_group_size = 1000000000LL;        /* DeepSpeed default 1e9 */
    s->param_persistence_threshold = 100000; /* DeepSpeed default 1e5 */
    s->max_reuse_distance = 1000000000LL;    /* DeepSpeed default 1e9 */
    s->cast_placement = SG_CAST_SCHEDULER;
}

static int64_t odd_multiple_of_512(int64_t t)
{
    t = (t + 511) / 512 * 512;
    return t % 1024 == 0 ? t + 512 : t;
}

int64_t sg_optimizer_tile_auto(int64_t n, int64_t workers)
{
    if (workers < 1)
        workers = 1;
    int64_t t = (n + workers - 1) / workers;
    if (t < SG_OPTIMIZER_TILE_MIN)
        t = SG_OPTIMIZER_TILE_MIN;
    t = odd_multiple_of_512(t); /* m and v streams do not alias */
    /* one chunk would be the whole sub-group, whose moments alias when n is
     * a multiple of 1024 (Adam measured at half speed): two chunks */
    if (t >= n && n % 1024 == 0 && n >= 2 * SG_OPTIMIZER_TILE_MIN)
        t = odd_multiple_of_512((n + 1) / 2);
    return t;
}

int64_t sg_optimizer_tile_for(const sg_step_spec *s, int64_t n)
{
    int64_t t = s->optimizer_tile == SG_OPTIMIZER_TILE_AUTO
                    ? sg_optimizer_tile_auto(n, s->optimizer_workers)
                    : s->optimizer_tile;
    return t > 0 && t < n ? t : 0;
}

int64_t sg_unit_shard_elems(const sg_model *m, const sg_step_spec *s, int unit)
{
    int64_t p = sg_model_unit_params(m, unit);
    if (s->zero_stage == 0 || s->dp_size <= 1)
        return p;
    /* stage 3 keeps a unit under the persistence threshold whole on every
     * rank (DeepSpeed's persistent parameters): it is never gathered */
    if (s->zero_stage == 3 && p < s->param_persistence_threshold)
        return p;
    return (p + s->dp_size - 1) / s->dp_size; /* ceil: the last rank is padded */
}

int64_t sg_unit_shard_offset(const sg_model *m, const sg_step_spec *s, int unit, int rank)
{
    int64_t shard = sg_unit_shard_elems(m, s, unit);
    return shard < sg_model_unit_params(m, unit) ? (int64_t)rank * shard : 0;
}

/* sub_group_size 0 is DeepSpeed's "every parameter tensor its own
 * sub-group" (stage3.py closes a sub-group once it holds >= sub_group_size
 * elements, which with 0 happens after each parameter). The sizes of unit
 * u's per-tensor pieces in this rank's shard of the unit go to sizes (NULL:
 * counted only): the shard is cut where the tensors' boundaries fall, scaled
 * from the unit to the shard (exact with one rank, where the shard is the
 * unit). Returns the number of non-empty pieces, or a negative error code. */
static int tensor_pieces(const sg_model *m, const sg_step_spec *s, int u, int64_t *sizes)
{
    int nt = sg_model_unit_tensors(m, u, NULL, 0);
    if (nt <= 0)
        return nt;
    sg_tensor_info *ti = malloc((size_t)nt * sizeof *ti);
    if (!ti)
        return SG_ENOMEM;
    nt = sg_model_unit_tensors(m, u, ti, nt);
    int64_t P = sg_model_unit_params(m, u), S = sg_unit_shard_elems(m, s, u);
    int64_t cum = 0, prev = 0;
    int k = 0;
    for (int t = 0; t < nt; t++) {
        cum += ti[t].numel;
        int64_t end = S == P ? cum : (int64_t)((__int128)S * cum / P);
        if (end > prev) {
            if (sizes)
                sizes[k] = end - prev;
            k++;
        }
        prev = end;
    }
    free(ti);
    return k;
}

int sg_subgroup_layout_compute(const sg_model *m, const sg_step_spec *s,
                               sg_subgroup_layout *layout, sg_error *err)
{
    if (s->sub_group_size < 0)
        return sg_error_set(err, SG_EINVAL, "sub_group_size must be >= 0 (got %lld)",
                            (long long)s->sub_group_size);
    int64_t total = 0, n = 0;
    for (int u = 0; u < sg_model_num_units(m); u++) {
        total += sg_unit_shard_elems(m, s, u);
        if (s->sub_group_size == 0) {
            int k = tensor_pieces(m, s, u, NULL);
            if (k < 0)
                return sg_error_set(err, k, "unit %d: cannot list its tensors", u);
            n += k;
        }
    }
    if (s->sub_group_size > 0)
        n = (total + s->sub_group_size - 1) / s->sub_group_size;
    if (n > 1000000)
        return sg_error_set(err, SG_EINVAL,
                            "sub_group_size %lld splits %lld parameters into %lld sub-groups "
                            "(at most 1000000 supported)",
                            (long long)s->sub_group_size, (long long)total, (long long)n);
    layout->rank_params = total;
    layout->nsubgroups = (int)n;
    if (!s->offload_optimizer)
        layout->first_cpu = (int)n;
    else
        /* DeepSpeed: sub-group i goes to the CPU iff i >= floor((1 - ratio) * N) */
        layout->first_cpu = (int)floor((1.0 - s->offload_ratio) * (double)n + 1e-9);
    if (layout->first_cpu > n)
        layout->first_cpu = (int)n;
    return SG_OK;
}

/* A piece: the part of unit u's shard that falls in sub-group sg. */
typedef struct piece {
    int unit, subgroup;
    int64_t elems;
    int64_t unit_offset;       /* first element within the unit's shard */
    int64_t subgroup_offset;   /* first element within the sub-group */
    int pbuf, gbuf;            /* parameter and gradient piece buffers */
} piece;

/* One chunk of a sub-group's optimizer chain and its host buffers (-1: none). */
typedef struct opt_chunk {
    int subgroup, tile;        /* tile: -1 for an untiled sub-group */
    int64_t offset, elems;     /* elements [offset, offset + elems) of the sub-group */
    int master, moments, ghost, ghost32, phost;
} opt_chunk;

typedef struct compiler {
    const sg_model *m;
    const sg_step_spec *s;
    sg_graph *g;
    sg_error *err;
    int units;                 /* L + 2 */
    int head;                  /* L + 1 */
    int64_t tokens;            /* micro_batch * seq_len per rank */
    sg_dtype cd;               /* compute dtype */
    int mixed;                 /* compute dtype != f32: fp32 master + casts */
    sg_subgroup_layout lay;
    piece *pieces;
    int npieces;
    int *unit_first_piece;     /* units + 1: pieces of unit u are [first[u], first[u+1]) */
    int *unit_gathered;        /* stage 3: 1 if gathered (not persistent) */
    int *unit_kept;            /* stage 3: gathered params kept until backward */
    int *unit_full;            /* stage 1/2: full parameter buffer */
    int *unit_gbuf;            /* gathered buffer (stage 3) */
    int *unit_shard;           /* parameter offload: the device copy of a gathered unit's
                                  pieces, or -1 */
    int *unit_grad;            /* full gradient buffer per unit */
    int *sg_lowest_unit;       /* lowest unit a sub-group touches */
    int *sg_first_piece;       /* nsubgroups + 1 CSR over `sg_piece_idx` */
    int *sg_piece_idx;
    int grad_norm, overflow, loss_scale, loss_scaler_state;
    int comm_order;            /* dp_size > 1: every collective node's RW token, else -1 */
    int *loss_bufs, nloss;     /* every micro-step's (and tile's) loss buffer */
    int *sg_master, *sg_moments; /* per sub-group (an untiled one's; -1 when tiled) */
    int *sg_pdev;              /* parameters offloaded: a mixed-precision GPU sub-group's cast
                                  update on the device, else -1 */
    /* the optimizer chain of every sub-group in chunks (optimizer tiles):
     * chunks of sub-group i are [sg_first_chunk[i], sg_first_chunk[i + 1]);
     * an untiled sub-group has one chunk (tile -1) over all its elements,
     * whose buffers are the sub-group's (sg_master[i]...) */
    int *sg_first_chunk;
    opt_chunk *chunks;
    int nchunks;
    sg_cast_placement *cast_place; /* per sub-group: CPU, GPU or SCHEDULER (auto resolved) */
    /* batch tiles (spec->batch_tile): ntiles per micro-step of tile_rows
     * sequences each (the last may be shorter); ntiles = 1 when untiled */
    int ntiles;
    int64_t tile_rows;
    int *grad_part;            /* units * ntiles: fp32 weight-gradient partial of (unit, tile) */
    int *unit_norm_part;       /* per unit: its pieces' partials of the gradient norm, or -1 */
    int *window;               /* grad_accum * ntiles: micro-step k's window token (tile t),
                                  written by its embedding backward, read by k + W's forward;
                                  -1 where none (declare_window) */
} compiler;

/* ---- small helpers --------------------------------------------------------- */

typedef struct access_list {
    sg_access *a;
    int n, cap;
} access_list;

/* An access to `bytes` of buffer buf (0: all of it). */
static int al_push_part(access_list *l, int buf, sg_access_mode mode, int64_t bytes)
{
    if (l->n == l->cap) {
        int ncap = l->cap ? l->cap * 2 : MAX_ACCESS_FIXED;
        sg_access *p = realloc(l->a, (size_t)ncap * sizeof *p);
        if (!p)
            return SG_ENOMEM;
        l->a = p;
        l->cap = ncap;
    }
    l->a[l->n++] = (sg_access){buf, mode, bytes};
    return SG_OK;
}

static int al_push(access_list *l, int buf, sg_access_mode mode)
{
    return al_push_part(l, buf, mode, 0);
}

static int buffer(compiler *c, int64_t elems, sg_dtype dt, sg_mem_space sp,
                  int persistent, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int buffer(compiler *c, int64_t elems, sg_dtype dt, sg_mem_space sp,
                  int persistent, const char *fmt, ...)
{
    char name[SG_IR_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int id = sg_graph_add_buffer(c->g, name, elems, dt, sp, persistent);
    if (id < 0)
        sg_error_set(c->err, id, "cannot add buffer %s", name);
    return id;
}

/* Tags buffer id (if valid) with what it holds; returns id. */
static int tag(compiler *c, int id, sg_buf_role role, int unit, int mb, int sg)
{
    if (id >= 0) {
        sg_buffer *b = &c->g->buffers[id];
        b->role = role;
        b->unit = unit;
        b->micro_step = mb;
        b->subgroup = sg;
    }
    return id;
}

static const char *unit_label(const compiler *c, int u, char *buf, size_t n)
{
    if (u == 0)
        snprintf(buf, n, "embed");
    else if (u == c->head)
        snprintf(buf, n, "head");
    else
        snprintf(buf, n, "layer%d", u - 1);
    return buf;
}

/* Appends a node; fills micro-step, sub-group and link fields. */
static int node(compiler *c, access_list *l, sg_op_kind kind, sg_device_class dev,
                int layer, int micro, int subgroup, double flops, sg_link_dir link,
                int64_t link_bytes, const char *name)
{
    int id = sg_graph_add_node(c->g, kind, dev, layer, flops, l->a, l->n, "%s", name);
    l->n = 0;
    if (id < 0)
        return sg_error_set(c->err, id, "cannot add node %s", name);
    sg_node *nd = &c->g->nodes[id];
    nd->micro_step = micro;
    nd->subgroup = subgroup;
    nd->link = link;
    nd->link_bytes = link_bytes;
    return id;
}

/* Reads of the parameters a unit's forward/backward uses. */
static int push_param_reads(compiler *c, access_list *l, int u)
{
    int rc;
    if (c->unit_gbuf[u] >= 0)
        return al_push(l, c->unit_gbuf[u], SG_R);
    if (c->unit_full[u] >= 0)
        return al_push(l, c->unit_full[u], SG_R);
    for (int p = c->unit_first_piece[u]; p < c->unit_first_piece[u + 1]; p++)
        if ((rc = al_push(l, c->pieces[p].pbuf, SG_R)))
            return rc;
    return SG_OK;
}

static int push_unit_params(compiler *c, access_list *l, int u)
{
    int rc = push_param_reads(c, l, u);
    /* A tied head multiplies by the embedding matrix. */
    if (!rc && u == c->head && c->m->tie_word_embeddings)
        rc = push_param_reads(c, l, 0);
    return rc;
}

/* Causal (query, key) pairs per sequence, with an optional sliding window. */
static double attended_pairs(int64_t s, int64_t window)
{
    double S = (double)s;
    if (window <= 0 || window >= s)
        return S * (S + 1.0) / 2.0;
    double w = (double)window;
    return w * (w + 1.0) / 2.0 + (S - w) * w;
}

/* Forward FLOPs of one unit's attention (scores and their weighted sum of
 * values) for `rows` sequences: the part quadratic in the sequence length;
 * 0 for the embedding and the head. */
static double unit_attention_flops_rows(const compiler *c, int u, int64_t rows)
{
    const sg_model *m = c->m;
    if (u == 0 || u == c->head)
        return 0.0;
    int layer = u - 1;
    int64_t window = m->layer_attn[layer] == SG_ATTN_SLIDING ? m->sliding_window : 0;
    return 4.0 * (double)rows * (double)m->num_heads * (double)m->head_dim *
           attended_pairs(c->s->seq_len, window);
}

/* Forward FLOPs of one unit for `rows` sequences of a micro-step. */
static double unit_forward_flops_rows(const compiler *c, int u, int64_t rows)
{
    const sg_model *m = c->m;
    double T = (double)(rows * c->s->seq_len);
    if (u == 0)
        return 0.0; /* a gather of embedding rows */
    if (u == c->head)
        /* logits (T, V) = x (T, H) @ W^T, then softmax cross-entropy */
        return 2.0 * T * (double)m->hidden_size * (double)m->vocab_size +
               5.0 * T * (double)m->vocab_size;
    double experts = m->num_experts > 0 /* tasks of their own (emit_moe_forward) */
                         ? 2.0 * T * (double)m->experts_per_token * 3.0 *
                               (double)m->moe_intermediate_size * (double)m->hidden_size
                         : 0.0;
    return 2.0 * T * (double)sg_model_unit_active_params(m, u) - experts +
           unit_attention_flops_rows(c, u, rows);
}

/* ---- set-up: pieces, buffers ---------------------------------------------- */

static int build_tensor_pieces(compiler *c);
static int finish_pieces(compiler *c);

static int build_pieces(compiler *c)
{
    const sg_step_spec *s = c->s;
    int N = c->lay.nsubgroups;
    c->npieces = 0;
    c->pieces = calloc((size_t)(c->units + N + 1), sizeof *c->pieces);
    c->unit_first_piece = calloc((size_t)c->units + 1, sizeof(int));
    c->sg_lowest_unit = malloc((size_t)(N + 1) * sizeof(int));
    c->sg_first_piece = calloc((size_t)N + 2, sizeof(int));
    c->sg_piece_idx = malloc((size_t)(c->units + N + 1) * sizeof(int));
    if (!c->pieces || !c->unit_first_piece || !c->sg_lowest_unit ||
        !c->sg_first_piece || !c->sg_piece_idx)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory building sub-groups");
    for (int i = 0; i < N; i++)
        c->sg_lowest_unit[i] = -1;
    int64_t offset = 0; /* position in the rank's flat partition */
    if (s->sub_group_size == 0)
        return build_tensor_pieces(c);
    for (int u = 0; u < c->units; u++) {
        c->unit_first_piece[u] = c->npieces;
        int64_t left = sg_unit_shard_elems(c->m, s, u);
        while (left > 0) {
            int sg = (int)(offset / s->sub_group_size);
            int64_t room = (int64_t)(sg + 1) * s->sub_group_size - offset;
            int64_t take = left < room ? left : room;
            piece *p = &c->pieces[c->npieces++];
            p->unit = u;
            p->subgroup = sg;
            p->elems = take;
            p->unit_offset = sg_unit_shard_elems(c->m, s, u) - left;
            p->subgroup_offset = offset - (int64_t)sg * s->sub_group_size;
            if (c->sg_lowest_unit[sg] < 0)
                c->sg_lowest_unit[sg] = u;
            offset += take;
            left -= take;
        }
    }
    return finish_pieces(c);
}

/* sub_group_size 0: one sub-group per tensor piece (tensor_pieces), in unit
 * and tensor order. */
static int build_tensor_pieces(compiler *c)
{
    for (int u = 0; u < c->units; u++) {
        c->unit_first_piece[u] = c->npieces;
        int k = tensor_pieces(c->m, c->s, u, NULL);
        int64_t *sizes = k > 0 ? malloc((size_t)k * sizeof *sizes) : NULL;
        if (k < 0 || (k > 0 && !sizes)) {
            free(sizes);
            return sg_error_set(c->err, SG_ENOMEM, "out of memory building sub-groups");
        }
        tensor_pieces(c->m, c->s, u, sizes);
        int64_t at = 0;
        for (int i = 0; i < k; i++) {
            int sg = c->npieces; /* one piece per sub-group */
            piece *p = &c->pieces[c->npieces++];
            p->unit = u;
            p->subgroup = sg;
            p->elems = sizes[i];
            p->unit_offset = at;
            p->subgroup_offset = 0;
            c->sg_lowest_unit[sg] = u;
            at += sizes[i];
        }
        free(sizes);
    }
    return finish_pieces(c);
}

/* The pieces' index by sub-group, once every piece is placed. */
static int finish_pieces(compiler *c)
{
    int N = c->lay.nsubgroups;
    c->unit_first_piece[c->units] = c->npieces;
    /* CSR of pieces per sub-group (pieces are sorted by sub-group already) */
    for (int p = 0; p < c->npieces; p++)
        c->sg_first_piece[c->pieces[p].subgroup + 1]++;
    for (int i = 0; i < N; i++)
        c->sg_first_piece[i + 1] += c->sg_first_piece[i];
    for (int p = 0; p < c->npieces; p++)
        c->sg_piece_idx[p] = p;
    return SG_OK;
}

/* Whether unit u's parameters are fetched before use (stage 3): gathered,
 * or with parameter offload copied from the host. */
static int unit_fetched(const compiler *c, int u)
{
    return c->unit_gathered[u] || c->s->offload_param;
}

/* CPU sub-group i's casts are fused into its Adam (cast_placement "fused",
 * mixed precision): no fp32 copy of the gradients, no cast nodes; Adam
 * reads the 16-bit host gradients and writes the 16-bit host parameters.
 * Known before the buffers are declared (resolve_cast_placement). */
static int casts_fused(const compiler *c, int i)
{
    return c->mixed && c->cast_place && c->cast_place[i] == SG_CAST_FUSED;
}

static int declare_buffers(compiler *c)
{
    const sg_model *m = c->m;
    const sg_step_spec *s = c->s;
    int N = c->lay.nsubgroups;
    size_t nu = (size_t)c->units;
    c->unit_gathered = calloc(nu, sizeof(int));
    c->unit_kept = calloc(nu, sizeof(int));
    c->unit_full = malloc(nu * sizeof(int));
    c->unit_gbuf = malloc(nu * sizeof(int));
    c->unit_shard = malloc(nu * sizeof(int));
    c->unit_grad = malloc(nu * sizeof(int));
    c->sg_master = malloc((size_t)(N + 1) * sizeof(int));
    c->sg_moments = malloc((size_t)(N + 1) * sizeof(int));
    c->sg_pdev = malloc((size_t)(N + 1) * sizeof(int));
    if (!c->sg_master || !c->sg_moments || !c->sg_pdev)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    if (!c->unit_gathered || !c->unit_kept || !c->unit_full || !c->unit_gbuf ||
        !c->unit_shard || !c->unit_grad)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");

    /* parameter and gradient pieces of this rank's partition; with parameter
     * offload the parameters live on the host */
    sg_mem_space param_space = s->offload_param ? SG_MEM_HOST : SG_MEM_GPU;
    for (int p = 0; p < c->npieces; p++) {
        piece *pc = &c->pieces[p];
        pc->pbuf = buffer(c, pc->elems, c->cd, param_space, 1, "param.%d.sg%d",
                          pc->unit, pc->subgroup);
        pc->gbuf = buffer(c, pc->elems, c->cd, SG_MEM_GPU, 0, "grad_shard.%d.sg%d",
                          pc->unit, pc->subgroup);
        if (pc->pbuf < 0 || pc->gbuf < 0)
            return SG_ENOMEM;
        tag(c, pc->pbuf, SG_BUF_PARAM_PIECE, pc->unit, -1, pc->subgroup);
        tag(c, pc->gbuf, SG_BUF_GRAD_PIECE, pc->unit, -1, pc->subgroup);
        int bufs[2] = {pc->pbuf, pc->gbuf};
        for (int k = 0; k < 2; k++) {
            c->g->buffers[bufs[k]].unit_offset = pc->unit_offset;
            c->g->buffers[bufs[k]].subgroup_offset = pc->subgroup_offset;
        }
    }

    /* stage 3 gathering decisions: reuse distance = parameters gathered
     * between the unit's forward and its backward */
    int64_t reuse = 0;
    for (int u = c->units - 1; u >= 0; u--) {
        int64_t pu = sg_model_unit_params(m, u);
        c->unit_full[u] = c->unit_gbuf[u] = c->unit_shard[u] = -1;
        c->unit_gathered[u] = s->zero_stage == 3 && pu >= s->param_persistence_threshold;
        if (c->unit_gathered[u]) {
            c->unit_kept[u] = reuse <= s->max_reuse_distance ||
                              (u == 0 && m->tie_word_embeddings);
            reuse += pu;
        } else if (s->offload_param) {
            /* a unit every rank holds whole, its pieces on the host: copied
             * to the device before use, kept until its backward (it is small) */
            c->unit_kept[u] = 1;
        }
        /* a unit fetched before use (unit_fetched) has its device buffer; a
         * gathered one with offloaded pieces also a device copy of its shard */
        if (c->unit_gathered[u] || s->offload_param)
            c->unit_gbuf[u] = tag(c, buffer(c, pu, c->cd, SG_MEM_GPU, 0, "gathered.%d", u),
                                  SG_BUF_GATHERED, u, -1, -1);
        if (c->unit_gathered[u] && s->offload_param &&
            (c->unit_shard[u] = tag(c, buffer(c, sg_unit_shard_elems(m, s, u), c->cd,
                                              SG_MEM_GPU, 0, "param_shard.%d", u),
                                    SG_BUF_PARAM_SHARD, u, -1, -1)) >= 0)
            c->g->buffers[c->unit_shard[u]].unit_offset =
                c->pieces[c->unit_first_piece[u]].unit_offset;
        if (s->zero_stage == 1 || s->zero_stage == 2)
            c->unit_full[u] = tag(c, buffer(c, pu, c->cd, SG_MEM_GPU, 1, "param_full.%d", u),
                                  SG_BUF_PARAM_FULL, u, -1, -1);
        c->unit_grad[u] = tag(c, buffer(c, pu, c->cd, SG_MEM_GPU, 0, "grad.%d", u),
                              SG_BUF_GRAD, u, -1, -1);
        if (c->unit_grad[u] < 0 || (unit_fetched(c, u) && c->unit_gbuf[u] < 0) ||
            (c->unit_gathered[u] && s->offload_param && c->unit_shard[u] < 0))
            return SG_ENOMEM;
    }

    c->grad_norm = tag(c, buffer(c, 2, SG_F32, SG_MEM_GPU, 0, "grad_norm"),
                       SG_BUF_GRAD_NORM, -1, -1, -1);
    /* each unit's pieces' partials of the norm, taken right after the unit's
     * last reduction so that its gradient pieces need not wait for the norm */
    c->unit_norm_part = malloc(nu * sizeof(int));
    if (!c->unit_norm_part)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    for (int u = 0; u < c->units; u++) {
        int np = c->unit_first_piece[u + 1] - c->unit_first_piece[u];
        c->unit_norm_part[u] = -1;
        if (np > 0 && (c->unit_norm_part[u] = tag(c, buffer(c, (int64_t)np * SG_NORM_PART_F32,
                                                            SG_F32, SG_MEM_GPU, 0,
                                                            "norm_part.%d", u),
                                                  SG_BUF_NORM_PART, u, -1, -1)) < 0)
            return SG_ENOMEM;
    }
    /* several ranks: every collective node reads and writes this token, so
     * StarPU runs the collectives one at a time, in program order, on every
     * rank alike (docs/ranks.md: why that cannot deadlock) */
    c->comm_order = -1;
    if (s->dp_size > 1 &&
        (c->comm_order = tag(c, buffer(c, 1, SG_I32, SG_MEM_HOST, 1, "comm_order"),
                             SG_BUF_COMM_ORDER, -1, -1, -1)) < 0)
        return SG_ENOMEM;
    c->overflow = c->loss_scale = c->loss_scaler_state = -1;
    if (c->cd == SG_F16) {
        c->overflow = tag(c, buffer(c, 1, SG_I32, SG_MEM_GPU, 0, "overflow"),
                          SG_BUF_OVERFLOW, -1, -1, -1);
        c->loss_scale = tag(c, buffer(c, 1, SG_F32, SG_MEM_GPU, 1, "loss_scale"),
                            SG_BUF_LOSS_SCALE, -1, -1, -1);
        /* the scaler's state (raw bytes of sg_loss_scaler_state), on the
         * host where the update runs */
        c->loss_scaler_state = tag(c, buffer(c, SG_LOSS_SCALER_STATE_I32, SG_I32, SG_MEM_HOST, 1,
                                             "loss_scaler_state"),
                                   SG_BUF_LOSS_SCALER_STATE, -1, -1, -1);
        if (c->overflow < 0 || c->loss_scale < 0 || c->loss_scaler_state < 0)
            return SG_ENOMEM;
    }

    /* optimizer state per sub-group; a tiled CPU sub-group's host state is
     * one buffer per chunk (sg_optimizer_tile_for) */
    c->sg_first_chunk = calloc((size_t)N + 1, sizeof(int));
    if (!c->sg_first_chunk)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    for (int i = 0; i < N; i++) {
        int64_t n = 0;
        for (int p = c->sg_first_piece[i]; p < c->sg_first_piece[i + 1]; p++)
            n += c->pieces[c->sg_piece_idx[p]].elems;
        int cpu = i >= c->lay.first_cpu;
        sg_mem_space sp = cpu ? SG_MEM_HOST : SG_MEM_GPU;
        c->sg_master[i] = -1;
        int64_t tile = cpu ? sg_optimizer_tile_for(s, n) : 0;
        int64_t nch64 = tile > 0 ? (n + tile - 1) / tile : 1;
        if (nch64 > 1 && (int64_t)c->nchunks + nch64 > 1000000)
            return sg_error_set(c->err, SG_EINVAL, "optimizer_tile %lld makes more than "
                                "1000000 optimizer chunks (at most 1000000 supported)",
                                (long long)tile);
        int nch = (int)nch64;
        opt_chunk *nc = realloc(c->chunks, (size_t)(c->nchunks + nch) * sizeof *nc);
        if (!nc)
            return sg_error_set(c->err, SG_ENOMEM, "out of memory");
        c->chunks = nc;
        c->sg_first_chunk[i] = c->nchunks;
        for (int k = 0; k < nch; k++) {
            opt_chunk *ch = &c->chunks[c->nchunks++];
            int tiled = nch > 1;
            char sfx[24] = "";
            if (tiled)
                snprintf(sfx, sizeof sfx, ".t%d", k);
            ch->subgroup = i;
            ch->tile = tiled ? k : -1;
            ch->offset = tiled ? (int64_t)k * tile : 0;
            ch->elems = tiled ? (k == nch - 1 ? n - ch->offset : tile) : n;
            int64_t e = ch->elems;
            ch->master = ch->ghost = ch->ghost32 = ch->phost = -1;
            /* with the parameters on the host, a GPU sub-group keeps its fp32
             * parameters beside its state, in fp32 training too */
            if (c->mixed || cpu || s->offload_param)
                ch->master = tag(c, buffer(c, e, SG_F32, sp, 1, "master.sg%d%s", i, sfx),
                                 SG_BUF_MASTER, -1, -1, i);
            ch->moments = tag(c, buffer(c, sg_optimizer_state_arrays(c->s->optimizer_state) * e,
                                        SG_F32, sp, 1, "adam_moments.sg%d%s", i, sfx),
                              SG_BUF_MOMENTS, -1, -1, i);
            if (cpu) {
                ch->ghost = tag(c, buffer(c, e, c->cd, SG_MEM_HOST, 0, "grad_host.sg%d%s", i, sfx),
                                SG_BUF_GRAD_HOST, -1, -1, i);
                if (c->mixed && !casts_fused(c, i))
                    ch->ghost32 = tag(c, buffer(c, e, SG_F32, SG_MEM_HOST, 0,
                                                "grad_host_f32.sg%d%s", i, sfx),
                                      SG_BUF_GRAD_HOST_F32, -1, -1, i);
                /* offloaded parameters take the cast directly */
                if (c->mixed && !s->offload_param)
                    ch->phost = tag(c, buffer(c, e, c->cd, SG_MEM_HOST, 0, "param_host.sg%d%s",
                                              i, sfx),
                                    SG_BUF_PARAM_HOST, -1, -1, i);
            }
            if (ch->moments < 0 || ((c->mixed || cpu || s->offload_param) && ch->master < 0) ||
                (cpu && ch->ghost < 0) ||
                (cpu && c->mixed && !casts_fused(c, i) && ch->ghost32 < 0) ||
                (cpu && c->mixed && !s->offload_param && ch->phost < 0))
                return SG_ENOMEM;
            /* a GPU sub-group's update, cast to the compute dtype on the GPU
             * before it goes back to the host's pieces */
            if (!cpu && c->mixed && s->offload_param &&
                (ch->phost = tag(c, buffer(c, e, c->cd, SG_MEM_GPU, 0, "param_dev.sg%d", i),
                                 SG_BUF_PARAM_HOST, -1, -1, i)) < 0)
                return SG_ENOMEM;
            int ids[] = {ch->master, ch->moments, ch->ghost, ch->ghost32, ch->phost};
            for (size_t b = 0; b < sizeof ids / sizeof ids[0]; b++) {
                if (ids[b] < 0)
                    continue;
                c->g->buffers[ids[b]].subgroup_offset = ch->offset;
                c->g->buffers[ids[b]].tile = ch->tile;
            }
        }
        /* an untiled sub-group's buffers are its chunk's */
        if (nch == 1) {
            const opt_chunk *ch = &c->chunks[c->nchunks - 1];
            c->sg_master[i] = ch->master;
            c->sg_moments[i] = ch->moments;
            c->sg_pdev[i] = cpu ? -1 : ch->phost;
        } else {
            c->sg_moments[i] = c->sg_pdev[i] = -1;
        }
    }
    c->sg_first_chunk[N] = c->nchunks;
    return SG_OK;
}

static int64_t subgroup_elems(const compiler *c, int i)
{
    int64_t n = 0;
    for (int p = c->sg_first_piece[i]; p < c->sg_first_piece[i + 1]; p++)
        n += c->pieces[c->sg_piece_idx[p]].elems;
    return n;
}

static int64_t collective_bytes(const compiler *c, int64_t elems, double factor)
{
    double dp = (double)c->s->dp_size;
    return (int64_t)(factor * (double)elems * (double)sg_dtype_size(c->cd) * (dp - 1.0) / dp);
}

/* Cast placement per CPU sub-group (sg_step_spec.cast_placement). "auto"
 * compares, for an n-element sub-group, the two placements' time as the
 * graph lays them out: on the CPU the casts cost 12 bytes of memory traffic
 * per element (bf16 read + fp32 write, fp32 read + bf16 write) on the
 * optimizer's workers and add nothing to the link; on the GPU they cost the
 * same traffic at GPU bandwidth, but the host buffers around them cross the
 * link: the host gradients to the GPU and their fp32 copy back (2 + 4 bytes),
 * the fp32 master to the GPU and the cast parameters back (4 + 2 bytes). The
 * GPU wins only where 12 n / gpu_bw + 12 n / link_bw < 12 n / (cpu_bw * W);
 * without cost figures (spec.cast_costs zero) the casts stay on the CPU.
 * With parameter offload the parameter cast writes host memory and always
 * runs on the CPU: the choice is the gradient cast's, by the same inequality
 * (6 bytes per element on each side instead of 12: the bytes cancel). */
static int resolve_cast_placement(compiler *c)
{
    int N = c->lay.nsubgroups;
    c->cast_place = malloc((size_t)(N > 0 ? N : 1) * sizeof *c->cast_place);
    if (!c->cast_place)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    const sg_cast_costs *k = &c->s->cast_costs;
    for (int i = 0; i < N; i++) {
        sg_cast_placement pl = c->s->cast_placement;
        if (pl == SG_CAST_AUTO) {
            double workers = c->s->optimizer_workers > 0 ? (double)c->s->optimizer_workers : 1.0;
            /* its chunks, as declare_buffers will cut it (which runs after:
             * fused casts change the buffers it declares) */
            int64_t n = subgroup_elems(c, i);
            int64_t tile = i >= c->lay.first_cpu ? sg_optimizer_tile_for(c->s, n) : 0;
            int64_t nch = tile > 0 ? (n + tile - 1) / tile : 1;
            if ((double)nch < workers)
                workers = (double)nch; /* an untiled sub-group's cast is one task */
            double bytes = 12.0 * (double)n;
            pl = SG_CAST_CPU;
            if (k->cpu_worker_bw > 0 && k->gpu_bw > 0 && k->link_bw > 0 &&
                bytes / k->gpu_bw + bytes / k->link_bw < bytes / (k->cpu_worker_bw * workers))
                pl = SG_CAST_GPU;
        }
        c->cast_place[i] = pl;
    }
    return SG_OK;
}

/* ---- emitters ---------------------------------------------------------------- */

/* A collective node's place on the comm_order chain (several ranks only). */
static int push_comm_order(compiler *c, access_list *l)
{
    return c->comm_order >= 0 ? al_push(l, c->comm_order, SG_RW) : SG_OK;
}

/* "allgather.fwd.layer3.mb0", or without the micro-step "allgather.step.layer3". */
static void unit_step_name(const compiler *c, char *name, size_t size, const char *what,
                           const char *why, int u, int micro)
{
    char lab[24];
    unit_label(c, u, lab, sizeof lab);
    if (micro >= 0)
        snprintf(name, size, "%s.%s.%s.mb%d", what, why, lab, micro);
    else
        snprintf(name, size, "%s.%s.%s", what, why, lab);
}

static int emit_allgather(compiler *c, access_list *l, int u, int micro, const char *why)
{
    char name[SG_IR_NAME_MAX];
    int rc;
    if (c->unit_shard[u] >= 0) {
        if ((rc = al_push(l, c->unit_shard[u], SG_R)))
            return rc;
    } else {
        for (int p = c->unit_first_piece[u]; p < c->unit_first_piece[u + 1]; p++)
            if ((rc = al_push(l, c->pieces[p].pbuf, SG_R)))
                return rc;
    }
    int target = c->unit_gbuf[u] >= 0 ? c->unit_gbuf[u] : c->unit_full[u];
    if ((rc = al_push(l, target, SG_W)) || (rc = push_comm_order(c, l)))
        return rc;
    int64_t pu = sg_model_unit_params(c->m, u);
    unit_step_name(c, name, sizeof name, "allgather", why, u, micro);
    return node(c, l, SG_OP_ALLGATHER, SG_DEV_LINK, u, micro, -1, 0.0, SG_LINK_NET,
                collective_bytes(c, pu, 1.0), name);
}

/* Unit u's parameters made ready on the device before its forward or
 * backward (stage 3). With parameter offload its pieces first cross the
 * link: into its shard buffer when it is gathered, else straight into its
 * device buffer (a unit every rank holds whole). */
static int emit_fetch(compiler *c, access_list *l, int u, int micro, const char *why)
{
    char name[SG_IR_NAME_MAX];
    int rc;
    if (c->s->offload_param) {
        int64_t bytes = 0;
        for (int p = c->unit_first_piece[u]; p < c->unit_first_piece[u + 1]; p++) {
            if ((rc = al_push(l, c->pieces[p].pbuf, SG_R)))
                return rc;
            bytes += c->g->buffers[c->pieces[p].pbuf].bytes;
        }
        int dst = c->unit_shard[u] >= 0 ? c->unit_shard[u] : c->unit_gbuf[u];
        if ((rc = al_push(l, dst, SG_W)))
            return rc;
        unit_step_name(c, name, sizeof name, "h2d.param", why, u, micro);
        if ((rc = node(c, l, SG_OP_H2D, SG_DEV_LINK, u, micro, -1, 0.0, SG_LINK_H2D, bytes,
                       name)) < 0)
            return rc;
    }
    return c->unit_gathered[u] ? emit_allgather(c, l, u, micro, why) : SG_OK;
}


/* Buffers of one micro-step. Per unit and batch tile: index u * ntiles + t
 * (t = 0 when untiled). */
typedef struct micro_bufs {
    int *act;      /* act[u]: output of unit u (u = 0..L), act[head] = loss */
    int *inner;    /* saved activations per unit, or -1 */
    int *dact;     /* gradient w.r.t. act[u] */
    int tokens;
    int moe_stats; /* MoE: the router statistics of the micro-step, else -1 */
    int *moe_act, *moe_grad; /* MoE: [u * groups + g] each group's buffers, or NULL */
} micro_bufs;

#define TI(c, u, t) ((u) * (c)->ntiles + (t))

/* Sequences in batch tile t (the last tile takes what is left). */
static int64_t tile_rows(const compiler *c, int t)
{
    if (c->ntiles == 1)
        return c->s->micro_batch;
    int64_t left = c->s->micro_batch - (int64_t)t * c->tile_rows;
    return left < c->tile_rows ? left : c->tile_rows;
}

/* Tags a buffer of tile t (untiled: leaves tile at -1). */
static int tile_tag(compiler *c, int id, int t)
{
    if (id >= 0 && c->ntiles > 1)
        c->g->buffers[id].tile = t;
    return id;
}

/* ".t3" for a tiled graph, "" otherwise: untiled names stay as they were. */
static const char *tile_suffix(const compiler *c, int t, char *buf, size_t n)
{
    if (c->ntiles > 1)
        snprintf(buf, n, ".t%d", t);
    else
        buf[0] = '\0';
    return buf;
}

static int declare_moe_stats(compiler *c, int mb, micro_bufs *b);

static int declare_micro(compiler *c, int mb, micro_bufs *b)
{
    const sg_model *m = c->m;
    char sfx[16];
    b->tokens = tag(c, buffer(c, 2 * c->tokens, SG_I32, SG_MEM_HOST, 1, "tokens.mb%d", mb),
                    SG_BUF_TOKENS, -1, mb, -1);
    for (int u = 0; u < c->units; u++)
        for (int t = 0; t < c->ntiles; t++) {
            int is_head = u == c->head;
            int64_t rows = tile_rows(c, t), T = rows * c->s->seq_len;
            int i = TI(c, u, t);
            tile_suffix(c, t, sfx, sizeof sfx);
            /* a tile's loss buffer holds its share of the micro-step's mean loss */
            b->act[i] = is_head
                ? tag(c, buffer(c, 1, SG_F32, SG_MEM_GPU, 0, "loss.mb%d%s", mb, sfx), SG_BUF_LOSS,
                      u, mb, -1)
                : tag(c, buffer(c, T * m->hidden_size, c->cd, SG_MEM_GPU, 0, "act.%d.mb%d%s", u,
                                mb, sfx),
                      SG_BUF_ACT, u, mb, -1);
            b->dact[i] = is_head ? -1
                                 : tag(c, buffer(c, T * m->hidden_size, c->cd, SG_MEM_GPU, 0,
                                                 "dact.%d.mb%d%s", u, mb, sfx),
                                       SG_BUF_DACT, u, mb, -1);
            /* what the backward reads: logits and the final norm's output for the
             * head, the block's internals for a layer (models/unit_layout.h) */
            size_t saved = sg_unit_saved_floats(m, u, (size_t)rows, (size_t)c->s->seq_len);
            b->inner[i] = saved == 0 ? -1
                                     : tag(c, buffer(c, (int64_t)saved, c->cd, SG_MEM_GPU, 0,
                                                     "saved.%d.mb%d%s", u, mb, sfx),
                                           SG_BUF_SAVED, u, mb, -1);
            if (b->act[i] < 0 || (!is_head && b->dact[i] < 0) ||
                (saved > 0 && b->inner[i] < 0))
                return SG_ENOMEM;
            if (is_head) {
                int *nl = realloc(c->loss_bufs, (size_t)(c->nloss + 1) * sizeof *nl);
                if (!nl)
                    return SG_ENOMEM;
                c->loss_bufs = nl;
                c->loss_bufs[c->nloss++] = b->act[i];
            }
            tile_tag(c, b->act[i], t);
            tile_tag(c, b->dact[i], t);
            tile_tag(c, b->inner[i], t);
        }
    return declare_moe_stats(c, mb, b);
}

/* Tiled graphs: the fp32 weight-gradient partial of every (unit, tile),
 * shared by the micro-steps (each micro-step's sum reads them before the
 * next micro-step's backward overwrites them). */
static int declare_grad_parts(compiler *c)
{
    if (c->ntiles == 1)
        return SG_OK;
    c->grad_part = malloc((size_t)c->units * (size_t)c->ntiles * sizeof(int));
    if (!c->grad_part)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    for (int u = 0; u < c->units; u++)
        for (int t = 0; t < c->ntiles; t++) {
            int id = tag(c, buffer(c, sg_model_unit_params(c->m, u), SG_F32, SG_MEM_GPU, 0,
                                   "grad_part.%d.t%d", u, t),
                         SG_BUF_GRAD_PART, u, -1, -1);
            if (id < 0)
                return SG_ENOMEM;
            c->grad_part[TI(c, u, t)] = tile_tag(c, id, t);
        }
    return SG_OK;
}

/* The micro-step window (sg_step_spec.micro_window = W): micro-step k + W's
 * embedding forward reads a token that micro-step k's embedding backward
 * writes, so micro-step k + W starts once micro-step k's backward is done
 * and at most W micro-steps hold activations, however many workers run
 * ready work ahead of program order (with W = the CPU workers, as many
 * micro-steps as workers run side by side). The tokens are one element,
 * never read by a codelet; program order is unchanged. */
static int declare_window(compiler *c)
{
    const int64_t A = c->s->grad_accum, W = c->s->micro_window;
    c->window = malloc((size_t)A * (size_t)c->ntiles * sizeof(int));
    if (!c->window)
        return sg_error_set(c->err, SG_ENOMEM, "out of memory");
    char sfx[16];
    for (int64_t k = 0; k < A; k++)
        for (int t = 0; t < c->ntiles; t++) {
            int *id = &c->window[k * c->ntiles + t];
            *id = -1;
            if (W < 1 || k + W >= A)
                continue;
            *id = tag(c, buffer(c, 1, SG_F32, SG_MEM_GPU, 0, "window.mb%lld%s", (long long)k,
                                tile_suffix(c, t, sfx, sizeof sfx)),
                      SG_BUF_WINDOW, 0, (int)k, -1);
            if (*id < 0)
                return SG_ENOMEM;
            tile_tag(c, *id, t);
        }
    return SG_OK;
}

/* Appends a node of batch tile t (untiled: as node() does; tiled: on the
 * CPU, since tiles exist to spread a micro-step over CPU workers). */
static int tile_node(compiler *c, access_list *l, sg_op_kind kind, int u, int mb, int t,
                     double flops, const char *name)
{
    sg_device_class dev = c->ntiles > 1 ? SG_DEV_CPU : SG_DEV_GPU;
    int id = node(c, l, kind, dev, u, mb, -1, flops, SG_LINK_NONE, 0, name);
    if (id >= 0 && c->ntiles > 1)
        c->g->nodes[id].tile = t;
    if (id >= 0) /* the backward computes the attention's products twice over */
        c->g->nodes[id].attention_flops = (kind == SG_OP_BACKWARD ? 2.0 : 1.0) *
                                          unit_attention_flops_rows(c, u, tile_rows(c, t));
    return id;
}

/* ---- mixture of experts ---------------------------------------------------- */

/* MoE models: one small fp32 buffer per micro-step where the layers' forwards
 * add their router statistics (layer 1 writes it, the others add to it, in
 * layer order as the forward already is), which the head's forward reads to
 * add the load-balancing loss (transformers' load_balancing_loss_func pools
 * the routers of every layer) and every layer's backward reads for that
 * loss's gradient. */
static int declare_moe_stats(compiler *c, int mb, micro_bufs *b)
{
    b->moe_stats = -1;
    size_t n = sg_moe_stats_floats(c->m);
    if (n == 0)
        return SG_OK;
    b->moe_stats = tag(c, buffer(c, (int64_t)n, SG_F32, SG_MEM_GPU, 0, "moe_stats.mb%d", mb),
                       SG_BUF_MOE_STATS, -1, mb, -1);
    if (b->moe_stats < 0)
        return SG_ENOMEM;
    /* experts as tasks: each group of experts of a layer has an activation
     * buffer (forward to combine and backward; with checkpointing, forward to
     * combine and recompute to backward: emit_moe_recompute) of the compute
     * dtype and an fp32 gradient buffer (its backward to the layer's), sized
     * for every token (models/unit_layout.h) */
    const int G = sg_moe_groups(c->m);
    const size_t N = (size_t)c->tokens;
    if (!b->moe_act)
        b->moe_act = calloc((size_t)c->units * (size_t)G, sizeof(int));
    if (!b->moe_grad)
        b->moe_grad = calloc((size_t)c->units * (size_t)G, sizeof(int));
    if (!b->moe_act || !b->moe_grad)
        return SG_ENOMEM;
    for (int u = 1; u < c->head; u++)
        for (int g = 0; g < G; g++) {
            int a = tag(c, buffer(c, (int64_t)sg_moe_group_act_floats(c->m, N), c->cd,
                                  SG_MEM_GPU, 0, "moe_act.%d.g%d.mb%d", u, g, mb),
                        SG_BUF_MOE_ACT, u, mb, g);
            int d = tag(c, buffer(c, (int64_t)sg_moe_group_grad_floats(c->m, N), SG_F32,
                                  SG_MEM_GPU, 0, "moe_grad.%d.g%d.mb%d", u, g, mb),
                        SG_BUF_MOE_GRAD, u, mb, g);
            if (a < 0 || d < 0)
                return SG_ENOMEM;
            b->moe_act[u * G + g] = a;
            b->moe_grad[u * G + g] = d;
        }
    return SG_OK;
}

/* A decoder layer of a MoE model: its experts are tasks of their own. */
static int moe_layer(const compiler *c, int u)
{
    return c->m->num_experts > 0 && u > 0 && u < c->head;
}

/* FLOPs of one group of experts' forward: its share of the expert MLPs. */
static double moe_group_flops(const compiler *c)
{
    const sg_model *m = c->m;
    return 2.0 * (double)c->tokens * (double)m->experts_per_token * 3.0 *
           (double)m->moe_intermediate_size * (double)m->hidden_size / sg_moe_groups(m);
}

/* One task per group of experts of layer u, each writing its activation
 * buffer: after the layer's forward, or (recompute) after its recompute in
 * the backward of a checkpointed step. */
static int emit_moe_experts(compiler *c, access_list *l, micro_bufs *b, int u, int mb,
                            int recompute)
{
    char lab[24], name[SG_IR_NAME_MAX];
    const int G = sg_moe_groups(c->m);
    int rc;
    unit_label(c, u, lab, sizeof lab);
    for (int g = 0; g < G; g++) {
        if ((rc = push_unit_params(c, l, u)) || (rc = al_push(l, b->inner[TI(c, u, 0)], SG_R)) ||
            (rc = al_push(l, b->moe_act[u * G + g], SG_W)))
            return rc;
        snprintf(name, sizeof name, "%s.%s.g%d.mb%d",
                 recompute ? "moe_expert_re" : "moe_expert", lab, g, mb);
        if ((rc = node(c, l, SG_OP_MOE_EXPERT, SG_DEV_GPU, u, mb, -1, moe_group_flops(c),
                       SG_LINK_NONE, 0, name)) < 0)
            return rc;
    }
    return SG_OK;
}

/* After a MoE layer's forward (attention, router): one task per group of
 * experts, then the combine that writes the layer's output. */
static int emit_moe_forward(compiler *c, access_list *l, micro_bufs *b, int u, int mb)
{
    char lab[24], name[SG_IR_NAME_MAX];
    const int G = sg_moe_groups(c->m);
    int rc;
    unit_label(c, u, lab, sizeof lab);
    if ((rc = emit_moe_experts(c, l, b, u, mb, 0)))
        return rc;
    if ((rc = al_push(l, b->inner[TI(c, u, 0)], SG_R)))
        return rc;
    for (int g = 0; g < G; g++)
        if ((rc = al_push(l, b->moe_act[u * G + g], SG_R)))
            return rc;
    if ((rc = al_push(l, b->act[TI(c, u, 0)], SG_W)))
        return rc;
    snprintf(name, sizeof name, "moe_combine.%s.mb%d", lab, mb);
    rc = node(c, l, SG_OP_MOE_COMBINE, SG_DEV_GPU, u, mb, -1,
              2.0 * (double)c->tokens * (double)c->m->experts_per_token *
                  (double)c->m->hidden_size,
              SG_LINK_NONE, 0, name);
    return rc < 0 ? rc : SG_OK;
}

/* Before a MoE layer's backward: each group of experts' backward (from the
 * layer's output gradient) into its gradient buffer. */
static int emit_moe_backward(compiler *c, access_list *l, micro_bufs *b, int u, int mb)
{
    char lab[24], name[SG_IR_NAME_MAX];
    const int G = sg_moe_groups(c->m);
    int rc;
    unit_label(c, u, lab, sizeof lab);
    for (int g = 0; g < G; g++) {
        if ((rc = push_unit_params(c, l, u)) || (rc = al_push(l, b->inner[TI(c, u, 0)], SG_R)) ||
            (rc = al_push(l, b->moe_act[u * G + g], SG_R)) ||
            (rc = al_push(l, b->dact[TI(c, u, 0)], SG_R)) ||
            (rc = al_push(l, b->moe_grad[u * G + g], SG_W)))
            return rc;
        snprintf(name, sizeof name, "moe_expert_bwd.%s.g%d.mb%d", lab, g, mb);
        if ((rc = node(c, l, SG_OP_MOE_EXPERT_BWD, SG_DEV_GPU, u, mb, -1,
                       2.0 * moe_group_flops(c), SG_LINK_NONE, 0, name)) < 0)
            return rc;
    }
    return SG_OK;
}

/* A checkpointed MoE layer, when its backward is reached: the layer's
 * recompute (attention and router: its saved activations, statistics
 * untouched) and its expert groups' forwards again. The forward's values of
 * the saved activations and of the groups' buffers die at the combine (the
 * recompute writes new ones), so a layer's expert activations live for one
 * layer's forward or backward, not from the forward to the backward; the
 * layer keeps only its input, as a dense checkpointed layer. Like the dense
 * recompute it reads the gradient of the layer's output (unused) so that it
 * waits for the backward above it. */
static int emit_moe_recompute(compiler *c, access_list *l, micro_bufs *b, int u, int mb)
{
    char lab[24], name[SG_IR_NAME_MAX];
    int rc;
    if ((rc = push_unit_params(c, l, u)) || (rc = al_push(l, b->act[TI(c, u - 1, 0)], SG_R)) ||
        (rc = al_push(l, b->dact[TI(c, u, 0)], SG_R)) ||
        (rc = al_push(l, b->inner[TI(c, u, 0)], SG_W)))
        return rc;
    snprintf(name, sizeof name, "recompute.%s.mb%d", unit_label(c, u, lab, sizeof lab), mb);
    double flops = unit_forward_flops_rows(c, u, tile_rows(c, 0));
    if ((rc = tile_node(c, l, SG_OP_RECOMPUTE, u, mb, 0, flops, name)) < 0)
        return rc;
    return emit_moe_experts(c, l, b, u, mb, 1);
}

/* The layer's backward reads every group's gradients. */
static int push_moe_grads(compiler *c, access_list *l, const micro_bufs *b, int u)
{
    if (!moe_layer(c, u))
        return SG_OK;
    const int G = sg_moe_groups(c->m);
    int rc = SG_OK;
    for (int g = 0; g < G && !rc; g++)
        rc = al_push(l, b->moe_grad[u * G + g], SG_R);
    return rc;
}

/* The statistics access of unit u's forward (not a recompute's) or backward. */
static int push_moe_stats(compiler *c, access_list *l, const micro_bufs *b, int u, int fwd)
{
    if (b->moe_stats < 0 || u == 0)
        return SG_OK;
    if (u == c->head)
        return fwd ? al_push(l, b->moe_stats, SG_R) : SG_OK;
    return al_push(l, b->moe_stats, !fwd ? SG_R : u == 1 ? SG_W : SG_RW);
}

static int emit_forward(compiler *c, access_list *l, micro_bufs *b, int mb)
{
    char lab[24], sfx[16], name[SG_IR_NAME_MAX];
    int rc;
    int ckpt = c->s->activation_checkpointing;
    for (int u = 0; u < c->units; u++) {
        if (unit_fetched(c, u) && (rc = emit_fetch(c, l, u, mb, "fwd")) < 0)
            return rc;
        for (int t = 0; t < c->ntiles; t++) {
            int i = TI(c, u, t);
            if ((rc = push_unit_params(c, l, u)))
                return rc;
            if ((rc = al_push(l, u == 0 ? b->tokens : b->act[TI(c, u - 1, t)], SG_R)))
                return rc;
            if (u == c->head && (rc = al_push(l, b->tokens, SG_R))) /* targets */
                return rc;
            if (u == 0 && mb >= c->s->micro_window && c->s->micro_window > 0 &&
                (rc = al_push(l, c->window[(mb - c->s->micro_window) * c->ntiles + t], SG_R)))
                return rc;
            /* a MoE layer's output is its combine task's */
            if (!moe_layer(c, u) && (rc = al_push(l, b->act[i], SG_W)))
                return rc;
            /* a checkpointed layer keeps only its input; the head is never checkpointed;
             * a MoE layer's forward saves what its expert tasks and combine read, a value
             * that dies at the combine when checkpointed (emit_moe_recompute writes the
             * next one) */
            if (b->inner[i] >= 0 && (!ckpt || u == c->head || moe_layer(c, u)) &&
                (rc = al_push(l, b->inner[i], SG_W)))
                return rc;
            if ((rc = push_moe_stats(c, l, b, u, 1)))
                return rc;
            snprintf(name, sizeof name, "fwd.%s.mb%d%s", unit_label(c, u, lab, sizeof lab), mb,
                     tile_suffix(c, t, sfx, sizeof sfx));
            if ((rc = tile_node(c, l, SG_OP_FORWARD, u, mb, t,
                                unit_forward_flops_rows(c, u, tile_rows(c, t)), name)) < 0)
                return rc;
            if (moe_layer(c, u) && (rc = emit_moe_forward(c, l, b, u, mb)))
                return rc;
        }
    }
    return SG_OK;
}

/* Gradient reduction of unit u after its backward in micro-step mb. */
static int emit_reduction(compiler *c, access_list *l, int u, int mb, int last)
{
    char lab[24], name[SG_IR_NAME_MAX];
    int rc;
    int stage = c->s->zero_stage;
    if (stage < 2 && !last)
        return SG_OK; /* stage 0/1 accumulate locally, all-reduce at the boundary */
    if ((rc = al_push(l, c->unit_grad[u], SG_R)))
        return rc;
    /* stage >= 2 accumulates into the shard: the first micro-step writes it */
    sg_access_mode mode = (stage >= 2 && mb > 0) ? SG_RW : SG_W;
    for (int p = c->unit_first_piece[u]; p < c->unit_first_piece[u + 1]; p++)
        if ((rc = al_push(l, c->pieces[p].gbuf, mode)))
            return rc;
    if ((rc = push_comm_order(c, l)))
        return rc;
    int64_t pu = sg_model_unit_params(c->m, u);
    unit_label(c, u, lab, sizeof lab);
    if (stage >= 2) {
        snprintf(name, sizeof name, "reduce_scatter.%s.mb%d", lab, mb);
        return node(c, l, SG_OP_REDUCE_SCATTER, SG_DEV_LINK, u, mb, -1, (double)pu,
                    SG_LINK_NET, collective_bytes(c, pu, 1.0), name);
    }
    snprintf(name, sizeof name, "allreduce.%s", lab);
    return node(c, l, SG_OP_ALLREDUCE, SG_DEV_LINK, u, mb, -1, (double)pu, SG_LINK_NET,
                collective_bytes(c, pu, 2.0), name);
}

static int push_subgroup_pieces(compiler *c, access_list *l, int i, int grads,
                                sg_access_mode mode)
{
    int rc;
    for (int p = c->sg_first_piece[i]; p < c->sg_first_piece[i + 1]; p++) {
        const piece *pc = &c->pieces[c->sg_piece_idx[p]];
        if ((rc = al_push(l, grads ? pc->gbuf : pc->pbuf, mode)))
            return rc;
    }
    return SG_OK;
}

/* Reads of the global gradient state an optimizer step depends on. */
static int push_step_checks(compiler *c, access_list *l, int always_norm)
{
    int rc = SG_OK;
    /* the norm buffer also carries 1/loss scale, which fp16 steps unscale by */
    if (always_norm || c->s->gradient_clipping > 0 || c->loss_scale >= 0)
        rc = al_push(l, c->grad_norm, SG_R);
    if (!rc && c->overflow >= 0)
        rc = al_push(l, c->overflow, SG_R);
    return rc;
}

/* The gradients a chunk's Adam reads: the fp32 copy the cast made, or the
 * host copy itself (fp32 training, fused casts). */
static int chunk_grad_buffer(const opt_chunk *ch)
{
    return ch->ghost32 >= 0 ? ch->ghost32 : ch->ghost;
}

/* "d2h.grad.sg3" for an untiled sub-group, "d2h.grad.sg3.t5" for chunk 5. */
static void chunk_name(char *name, size_t size, const char *what, const opt_chunk *ch)
{
    if (ch->tile < 0)
        snprintf(name, size, "%s.sg%d", what, ch->subgroup);
    else
        snprintf(name, size, "%s.sg%d.t%d", what, ch->subgroup, ch->tile);
}

/* The sub-group's gradient (grads) or parameter pieces that overlap chunk
 * ch. A parameter piece the chunk covers whole is written (mode); one the
 * chunk cuts is read-written, so the other chunks' parts of it survive. */
static int push_chunk_pieces(compiler *c, access_list *l, const opt_chunk *ch, int grads,
                             sg_access_mode mode)
{
    int rc;
    int64_t lo = ch->offset, hi = ch->offset + ch->elems;
    for (int p = c->sg_first_piece[ch->subgroup]; p < c->sg_first_piece[ch->subgroup + 1]; p++) {
        const piece *pc = &c->pieces[c->sg_piece_idx[p]];
        int64_t plo = pc->subgroup_offset, phi = plo + pc->elems;
        if (phi <= lo || plo >= hi)
            continue;
        sg_access_mode m = mode;
        int cut = plo < lo || phi > hi;
        if (mode == SG_W && cut)
            m = SG_RW;
        /* a cut piece: the node touches the overlap only */
        int64_t overlap = (phi < hi ? phi : hi) - (plo > lo ? plo : lo);
        int buf = grads ? pc->gbuf : pc->pbuf;
        int64_t esize = (int64_t)sg_dtype_size(c->g->buffers[buf].dtype);
        if ((rc = al_push_part(l, buf, m, cut ? overlap * esize : 0)))
            return rc;
    }
    return SG_OK;
}

/* Where the casts of CPU sub-group i run (cast_placement): the device, and
 * whether StarPU must keep them there (else the scheduler picks). */
static sg_device_class cast_device(const compiler *c, int i, int *pinned)
{
    sg_cast_placement pl = c->cast_place ? c->cast_place[i] : SG_CAST_SCHEDULER;
    *pinned = pl == SG_CAST_CPU || pl == SG_CAST_GPU;
    return pl == SG_CAST_GPU ? SG_DEV_GPU : SG_DEV_CPU;
}

static int cast_node_on(compiler *c, access_list *l, int i, const opt_chunk *ch,
                        const char *what, sg_device_class dev, int pinned)
{
    char name[SG_IR_NAME_MAX];
    chunk_name(name, sizeof name, what, ch);
    int rc = node(c, l, SG_OP_CAST, dev, -1, -1, i, (double)ch->elems, SG_LINK_NONE, 0, name);
    if (rc >= 0) {
        c->g->nodes[rc].tile = ch->tile;
        c->g->nodes[rc].pinned = pinned;
    }
    return rc;
}

static int cast_node(compiler *c, access_list *l, int i, const opt_chunk *ch, const char *what)
{
    int pinned;
    sg_device_class dev = cast_device(c, i, &pinned);
    return cast_node_on(c, l, i, ch, what, dev, pinned);
}

/* Appends a node of chunk ch (its tile set). */
static int chunk_node(compiler *c, access_list *l, const opt_chunk *ch, sg_op_kind kind,
                      sg_device_class dev, double flops, sg_link_dir link, int64_t link_bytes,
                      const char *what)
{
    char name[SG_IR_NAME_MAX];
    chunk_name(name, sizeof name, what, ch);
    int rc = node(c, l, kind, dev, -1, -1, ch->subgroup, flops, link, link_bytes, name);
    if (rc >= 0)
        c->g->nodes[rc].tile = ch->tile;
    return rc;
}

#define FOR_CHUNKS(c, i, ch)                                                              \
    for (const opt_chunk *ch = &(c)->chunks[(c)->sg_first_chunk[i]];                      \
         ch < &(c)->chunks[(c)->sg_first_chunk[(i) + 1]]; ch++)

/* D2H copy of a CPU sub-group's gradients, and their cast to fp32, per chunk. */
static int emit_cpu_grad_copy(compiler *c, access_list *l, int i)
{
    int rc;
    FOR_CHUNKS(c, i, ch) {
        if ((rc = push_chunk_pieces(c, l, ch, 1, SG_R)) || (rc = al_push(l, ch->ghost, SG_W)))
            return rc;
        if ((rc = chunk_node(c, l, ch, SG_OP_D2H, SG_DEV_LINK, 0.0, SG_LINK_D2H,
                             ch->elems * (int64_t)sg_dtype_size(c->cd), "d2h.grad")) < 0)
            return rc;
        if (!c->mixed || casts_fused(c, i))
            continue;
        if ((rc = al_push(l, ch->ghost, SG_R)) || (rc = al_push(l, ch->ghost32, SG_W)))
            return rc;
        if ((rc = cast_node(c, l, i, ch, "cast.grad")) < 0)
            return rc;
    }
    return SG_OK;
}

/* Adam FLOPs per element: moments, bias correction, sqrt, division, update. */
#define ADAM_FLOPS_PER_ELEM 12.0

static int emit_cpu_adam(compiler *c, access_list *l, int i)
{
    int rc;
    int spec = c->s->super_offload;
    FOR_CHUNKS(c, i, ch) {
        if ((rc = al_push(l, chunk_grad_buffer(ch), SG_R)))
            return rc;
        /* a speculative step does not wait for the norm: validation fixes it up;
         * with fp16 it unscales by the scale of this step, read before the
         * loss-scale update writes the next one */
        if (!spec && (rc = push_step_checks(c, l, 0)))
            return rc;
        if (spec && c->loss_scale >= 0 && (rc = al_push(l, c->loss_scale, SG_R)))
            return rc;
        if ((rc = al_push(l, ch->master, SG_RW)) || (rc = al_push(l, ch->moments, SG_RW)))
            return rc;
        /* fused casts: the 16-bit parameters come out of the same pass */
        if (casts_fused(c, i) && ch->phost >= 0 && (rc = al_push(l, ch->phost, SG_W)))
            return rc;
        if ((rc = chunk_node(c, l, ch, SG_OP_ADAM_CPU, SG_DEV_CPU,
                             ADAM_FLOPS_PER_ELEM * (double)ch->elems, SG_LINK_NONE, 0,
                             "adam_cpu")) < 0)
            return rc;
    }
    return SG_OK;
}

static int emit_cpu_finish(compiler *c, access_list *l, int i)
{
    int rc;
    FOR_CHUNKS(c, i, ch) {
        if (c->s->super_offload) {
            /* a rollback inverts the step algebraically from the same gradient,
             * as DeepSpeed's CPU Adam does: no copy of the state is kept; every
             * chunk decides from the same global norm, element by element */
            if ((rc = push_step_checks(c, l, 1)) ||
                (rc = al_push(l, chunk_grad_buffer(ch), SG_R)) ||
                (rc = al_push(l, ch->master, SG_RW)) || (rc = al_push(l, ch->moments, SG_RW)))
                return rc;
            /* fused casts: a rollback or redo rewrites the 16-bit parameters
             * (read-write: a kept step leaves Adam's) */
            if (casts_fused(c, i) && ch->phost >= 0 && (rc = al_push(l, ch->phost, SG_RW)))
                return rc;
            if ((rc = chunk_node(c, l, ch, SG_OP_VALIDATE, SG_DEV_CPU, 2.0 * (double)ch->elems,
                                 SG_LINK_NONE, 0, "validate")) < 0)
                return rc;
        }
        if (c->s->offload_param) {
            /* the parameters live on the host: the master goes straight into
             * the pieces, on a CPU worker (a copy in fp32) */
            if ((rc = al_push(l, ch->master, SG_R)) || (rc = push_chunk_pieces(c, l, ch, 0, SG_W)))
                return rc;
            if ((rc = cast_node_on(c, l, i, ch, c->mixed ? "cast.param" : "copy.param",
                                   SG_DEV_CPU, 1)) < 0)
                return rc;
            continue;
        }
        int src = ch->master;
        if (c->mixed && !casts_fused(c, i)) {
            if ((rc = al_push(l, ch->master, SG_R)) || (rc = al_push(l, ch->phost, SG_W)))
                return rc;
            if ((rc = cast_node(c, l, i, ch, "cast.param")) < 0)
                return rc;
        }
        if (c->mixed)
            src = ch->phost;
        if ((rc = al_push(l, src, SG_R)) || (rc = push_chunk_pieces(c, l, ch, 0, SG_W)))
            return rc;
        if ((rc = chunk_node(c, l, ch, SG_OP_H2D, SG_DEV_LINK, 0.0, SG_LINK_H2D,
                             ch->elems * (int64_t)sg_dtype_size(c->cd), "h2d.param")) < 0)
            return rc;
    }
    return SG_OK;
}

/* Parameters offloaded: a GPU sub-group's update (its cast update, or in
 * fp32 its master) copied device-to-host into its pieces. */
static int emit_param_d2h(compiler *c, access_list *l, int i)
{
    char name[SG_IR_NAME_MAX];
    int64_t n = subgroup_elems(c, i);
    int src = c->sg_pdev[i] >= 0 ? c->sg_pdev[i] : c->sg_master[i];
    int rc;
    if ((rc = al_push(l, src, SG_R)) || (rc = push_subgroup_pieces(c, l, i, 0, SG_W)))
        return rc;
    snprintf(name, sizeof name, "d2h.param.sg%d", i);
    rc = node(c, l, SG_OP_D2H, SG_DEV_LINK, -1, -1, i, 0.0, SG_LINK_D2H,
              n * (int64_t)sg_dtype_size(c->cd), name);
    return rc < 0 ? rc : SG_OK;
}

static int emit_gpu_adam(compiler *c, access_list *l, int i)
{
    char name[SG_IR_NAME_MAX];
    int64_t n = subgroup_elems(c, i);
    int rc;
    if ((rc = push_subgroup_pieces(c, l, i, 1, SG_R)) || (rc = push_step_checks(c, l, 0)) ||
        (rc = al_push(l, c->sg_moments[i], SG_RW)))
        return rc;
    /* fp32 training updates the parameters in place; mixed precision updates
     * the fp32 master and casts it back; with the parameters on the host, the
     * master (fp32 included) is updated and copied back to them */
    int in_master = c->sg_master[i] >= 0;
    rc = in_master ? al_push(l, c->sg_master[i], SG_RW) : push_subgroup_pieces(c, l, i, 0, SG_RW);
    if (rc)
        return rc;
    snprintf(name, sizeof name, "adam_gpu.sg%d", i);
    if ((rc = node(c, l, SG_OP_ADAM_GPU, SG_DEV_GPU, -1, -1, i, ADAM_FLOPS_PER_ELEM * (double)n,
                   SG_LINK_NONE, 0, name)) < 0)
        return rc;
    if (c->mixed) {
        /* into the pieces, or with the parameters offloaded into the device
         * buffer the copy back reads */
        int dst = c->sg_pdev[i];
        if ((rc = al_push(l, c->sg_master[i], SG_R)) ||
            (rc = dst >= 0 ? al_push(l, dst, SG_W) : push_subgroup_pieces(c, l, i, 0, SG_W)))
            return rc;
        snprintf(name, sizeof name, "cast.param.sg%d", i);
        if ((rc = node(c, l, SG_OP_CAST, SG_DEV_GPU, -1, -1, i, (double)n, SG_LINK_NONE, 0,
                       name)) < 0)
            return rc;
    }
    return c->s->offload_param ? emit_param_d2h(c, l, i) : SG_OK;
}

/* The partial of the gradient norm over unit u's pieces, once their
 * gradients are final (after the last micro-step's reduction): the norm then
 * reads 16 bytes per piece instead of every piece at the end of the step, so
 * a piece can die after its copy to the host. The pieces are read in piece
 * order and the norm adds the partials in that order: the same sums as one
 * pass over the pieces. */
static int emit_norm_part(compiler *c, access_list *l, int u)
{
    char lab[24], name[SG_IR_NAME_MAX];
    int rc;
    if (c->unit_norm_part[u] < 0)
        return SG_OK;
    int64_t n = 0;
    for (int p = c->unit_first_piece[u]; p < c->unit_first_piece[u + 1]; p++) {
        if ((rc = al_push(l, c->pieces[p].gbuf, SG_R)))
            return rc;
        n += c->pieces[p].elems;
    }
    if ((rc = al_push(l, c->unit_norm_part[u], SG_W)))
        return rc;
    snprintf(name, sizeof name, "norm_part.%s", unit_label(c, u, lab, sizeof lab));
    rc = node(c, l, SG_OP_GRAD_NORM, SG_DEV_GPU, u, -1, -1, 2.0 * (double)n, SG_LINK_NONE, 0,
              name);
    return rc < 0 ? rc : SG_OK;
}

/* CPU sub-groups whose gradients became final when unit u was reduced. */
static int emit_ready_subgroups(compiler *c, access_list *l, int u)
{
    int rc;
    for (int i = c->lay.first_cpu; i < c->lay.nsubgroups; i++) {
        if (c->sg_lowest_unit[i] != u)
            continue;
        if ((rc = emit_cpu_grad_copy(c, l, i)))
            return rc;
        if (c->s->super_offload && (rc = emit_cpu_adam(c, l, i)))
            return rc;
    }
    return SG_OK;
}

/* The weight-gradient accesses of unit u's backward (tile t). Untiled: its
 * gradient buffer. Stage >= 2 reduces every micro-step, so the full
 * gradient starts fresh; stage 0/1 accumulate into it. A tied head also
 * writes the embedding's gradient, which the embedding's backward then adds
 * to. Tiled: the (unit, tile) fp32 partials, written fresh (the embedding's
 * tied partial is added to) and summed by grad_sum. */
static int push_grad_writes(compiler *c, access_list *l, int u, int mb, int t)
{
    int rc;
    int tied = c->m->tie_word_embeddings;
    if (c->ntiles > 1) {
        rc = al_push(l, c->grad_part[TI(c, u, t)], (u == 0 && tied) ? SG_RW : SG_W);
        if (!rc && u == c->head && tied)
            rc = al_push(l, c->grad_part[TI(c, 0, t)], SG_W);
        return rc;
    }
    int accumulate = c->s->zero_stage < 2 && mb > 0;
    if ((rc = al_push(l, c->unit_grad[u], (accumulate || (u == 0 && tied)) ? SG_RW : SG_W)))
        return rc;
    if (u == c->head && tied && (rc = al_push(l, c->unit_grad[0], accumulate ? SG_RW : SG_W)))
        return rc;
    return SG_OK;
}

/* Tiled graphs: unit u's gradient of micro-step mb is the sum of its tile
 * partials, added in tile order (a fixed order: the same bits whatever the
 * scheduler and the worker count), accumulated into the gradient as the
 * untiled backward does. */
static int emit_grad_sum(compiler *c, access_list *l, int u, int mb)
{
    char lab[24], name[SG_IR_NAME_MAX];
    int rc;
    for (int t = 0; t < c->ntiles; t++)
        if ((rc = al_push(l, c->grad_part[TI(c, u, t)], SG_R)))
            return rc;
    int accumulate = c->s->zero_stage < 2 && mb > 0;
    if ((rc = al_push(l, c->unit_grad[u], accumulate ? SG_RW : SG_W)))
        return rc;
    snprintf(name, sizeof name, "grad_sum.%s.mb%d", unit_label(c, u, lab, sizeof lab), mb);
    rc = node(c, l, SG_OP_GRAD_SUM, SG_DEV_CPU, u, mb, -1,
              (double)c->ntiles * (double)sg_model_unit_params(c->m, u), SG_LINK_NONE, 0, name);
    return rc < 0 ? rc : SG_OK;
}

static int emit_backward(compiler *c, access_list *l, micro_bufs *b, int mb)
{
    char lab[24], sfx[16], name[SG_IR_NAME_MAX];
    int rc;
    int last = mb == c->s->grad_accum - 1;
    int ckpt = c->s->activation_checkpointing;
    for (int u = c->units - 1; u >= 0; u--) {
        unit_label(c, u, lab, sizeof lab);
        if (unit_fetched(c, u) && !c->unit_kept[u] && (rc = emit_fetch(c, l, u, mb, "bwd")) < 0)
            return rc;
        for (int t = 0; t < c->ntiles; t++) {
            int i = TI(c, u, t);
            int64_t rows = tile_rows(c, t);
            tile_suffix(c, t, sfx, sizeof sfx);
            if (ckpt && moe_layer(c, u) && (rc = emit_moe_recompute(c, l, b, u, mb)))
                return rc;
            if (moe_layer(c, u) && (rc = emit_moe_backward(c, l, b, u, mb)))
                return rc;
            if (ckpt && u > 0 && u < c->head && !moe_layer(c, u)) {
                /* the recompute also reads the gradient of the layer's output
                 * (the codelet does not use it): it waits for the backward
                 * above, as PyTorch's checkpointing recomputes a layer when
                 * its backward is reached, so the scheduler cannot recompute
                 * every layer ahead and hold all their internals at once */
                if ((rc = push_unit_params(c, l, u)) ||
                    (rc = al_push(l, b->act[TI(c, u - 1, t)], SG_R)) ||
                    (rc = al_push(l, b->dact[i], SG_R)) ||
                    (rc = al_push(l, b->inner[i], SG_W)))
                    return rc;
                snprintf(name, sizeof name, "recompute.%s.mb%d%s", lab, mb, sfx);
                if ((rc = tile_node(c, l, SG_OP_RECOMPUTE, u, mb, t,
                                    unit_forward_flops_rows(c, u, rows), name)) < 0)
                    return rc;
            }
            if ((rc = push_unit_params(c, l, u)))
                return rc;
            if ((rc = al_push(l, u == 0 ? b->tokens : b->act[TI(c, u - 1, t)], SG_R)))
                return rc;
            if (b->inner[i] >= 0 && (rc = al_push(l, b->inner[i], SG_R)))
                return rc;
            if (u == c->head) {
                if ((rc = al_push(l, b->tokens, SG_R)) || (rc = al_push(l, b->act[i], SG_R)))
                    return rc;
                if (c->loss_scale >= 0 && (rc = al_push(l, c->loss_scale, SG_R)))
                    return rc;
            } else if ((rc = al_push(l, b->dact[i], SG_R))) {
                return rc;
            }
            if (u > 0 && (rc = al_push(l, b->dact[TI(c, u - 1, t)], SG_W)))
                return rc;
            if ((rc = push_moe_stats(c, l, b, u, 0)) || (rc = push_moe_grads(c, l, b, u)))
                return rc;
            if ((rc = push_grad_writes(c, l, u, mb, t)))
                return rc;
            if (u == 0 && c->window[mb * c->ntiles + t] >= 0 &&
                (rc = al_push(l, c->window[mb * c->ntiles + t], SG_W)))
                return rc;
            /* the head's backward also recomputes its logits, a chunk at a time
             * (models/unit_layout.h): one more forward's worth */
            double flops = u == 0       ? (double)(rows * c->s->seq_len) * (double)c->m->hidden_size
                           : u == c->head ? 3.0 * unit_forward_flops_rows(c, u, rows)
                                          : 2.0 * unit_forward_flops_rows(c, u, rows);
            snprintf(name, sizeof name, "bwd.%s.mb%d%s", lab, mb, sfx);
            if ((rc = tile_node(c, l, SG_OP_BACKWARD, u, mb, t, flops, name)) < 0)
                return rc;
        }
        if (c->ntiles > 1 && (rc = emit_grad_sum(c, l, u, mb)))
            return rc;
        if ((rc = emit_reduction(c, l, u, mb, last)) < 0)
            return rc;
        if (last && ((rc = emit_norm_part(c, l, u)) || (rc = emit_ready_subgroups(c, l, u))))
            return rc;
    }
    return SG_OK;
}

static int emit_optimizer(compiler *c, access_list *l)
{
    int rc;
    /* global gradient norm over this rank's shard (ranks combine partial
     * norms): the units' partials in unit order, which is piece order */
    for (int u = 0; u < c->units; u++)
        if (c->unit_norm_part[u] >= 0 && (rc = al_push(l, c->unit_norm_part[u], SG_R)))
            return rc;
    /* fp16: the norm is of the unscaled gradients, so it reads the scale
     * they were computed with (before this step's update of it) */
    if (c->loss_scale >= 0 && (rc = al_push(l, c->loss_scale, SG_R)))
        return rc;
    /* several ranks: the norm adds every rank's partials (a collective), and
     * turns every micro-step's loss into its mean over the ranks in the same
     * call, so that the trainer's main thread needs no collective of its own
     * (docs/ranks.md: a main thread waiting for a peer could deadlock with a
     * worker waiting in the next step's collective) */
    if ((rc = al_push(l, c->grad_norm, SG_W)) || (rc = push_comm_order(c, l)))
        return rc;
    for (int k = 0; c->comm_order >= 0 && k < c->nloss; k++)
        if ((rc = al_push(l, c->loss_bufs[k], SG_RW)))
            return rc;
    if ((rc = node(c, l, SG_OP_GRAD_NORM, SG_DEV_GPU, -1, -1, -1,
                   (double)c->npieces, SG_LINK_NONE, 0, "grad_norm")) < 0)
        return rc;
    if (c->overflow >= 0) {
        if ((rc = al_push(l, c->grad_norm, SG_R)) || (rc = al_push(l, c->overflow, SG_W)))
            return rc;
        if ((rc = node(c, l, SG_OP_OVERFLOW_CHECK, SG_DEV_GPU, -1, -1, -1, 1.0, SG_LINK_NONE, 0,
                       "overflow_check")) < 0)
            return rc;
        if ((rc = al_push(l, c->overflow, SG_R)) || (rc = al_push(l, c->loss_scale, SG_RW)) ||
            (rc = al_push(l, c->loss_scaler_state, SG_RW)))
            return rc;
        if ((rc = node(c, l, SG_OP_LOSS_SCALE, SG_DEV_GPU, -1, -1, -1, 1.0, SG_LINK_NONE, 0,
                       "loss_scale_update")) < 0)
            return rc;
    }
    for (int i = 0; i < c->lay.nsubgroups; i++) {
        if (i < c->lay.first_cpu)
            rc = emit_gpu_adam(c, l, i);
        else if (c->s->super_offload) /* speculative Adam already emitted */
            rc = emit_cpu_finish(c, l, i);
        else if ((rc = emit_cpu_adam(c, l, i)) == SG_OK)
            rc = emit_cpu_finish(c, l, i);
        if (rc)
            return rc;
    }
    if (c->s->zero_stage == 1 || c->s->zero_stage == 2) {
        /* every rank updated its partition: gather the new parameters */
        for (int u = 0; u < c->units; u++)
            if ((rc = emit_allgather(c, l, u, -1, "step")) < 0)
                return rc;
    }
    return SG_OK;
}

static int check_spec(const sg_model *m, const sg_step_spec *s, sg_error *err)
{
    if (s->zero_stage < 0 || s->zero_stage > 3)
        return sg_error_set(err, SG_EINVAL, "zero stage %d is out of range (0-3)", s->zero_stage);
    if (s->dp_size < 1 || s->micro_batch < 1 || s->grad_accum < 1 || s->seq_len < 1)
        return sg_error_set(err, SG_EINVAL,
                            "step needs dp_size, micro batch, accumulation steps and sequence "
                            "length >= 1 (got %lld, %lld, %lld, %lld)",
                            (long long)s->dp_size, (long long)s->micro_batch,
                            (long long)s->grad_accum, (long long)s->seq_len);
    if (s->grad_accum > 4096)
        return sg_error_set(err, SG_EINVAL, "gradient_accumulation_steps %lld: at most 4096 "
                            "micro-steps are compiled into one graph", (long long)s->grad_accum);
    if (s->offload_ratio < 0 || s->offload_ratio > 1)
        return sg_error_set(err, SG_EINVAL, "offload ratio %g is out of range [0, 1]",
                            s->offload_ratio);
    if (s->super_offload && (!s->offload_optimizer || s->zero_stage != 3))
        return sg_error_set(err, SG_EINVAL, "super_offload needs ZeRO stage 3 with the optimizer "
                            "offloaded to the CPU");
    if (s->offload_optimizer && s->zero_stage == 0)
        return sg_error_set(err, SG_EINVAL, "optimizer offload needs ZeRO stage 1, 2 or 3");
    if (s->offload_param && s->zero_stage != 3)
        return sg_error_set(err, SG_EINVAL, "parameter offload needs ZeRO stage 3");
    if (s->compute_dtype != SG_F32 && s->compute_dtype != SG_BF16 && s->compute_dtype != SG_F16)
        return sg_error_set(err, SG_EINVAL, "compute dtype must be f32, bf16 or f16");
    if (sg_model_num_units(m) < 3)
        return sg_error_set(err, SG_EINVAL, "model %s has no layers", m->name);
    if (s->batch_tile < 0 || s->batch_tile > s->micro_batch)
        return sg_error_set(err, SG_EINVAL,
                            "batch_tile %lld: expected 0 (untiled) to the micro batch %lld "
                            "(train_micro_batch_size_per_gpu) sequences per tile",
                            (long long)s->batch_tile, (long long)s->micro_batch);
    if (s->batch_tile > 0 && s->batch_tile < s->micro_batch && m->num_experts > 0 &&
        !s->batch_tile_auto)
        return sg_error_set(err, SG_ENOTSUP, "batch_tile %lld: model %s is a mixture of "
                            "experts, whose load-balancing loss pools the whole micro batch; "
                            "batch tiles are not supported for it (use batch_tile 0)",
                            (long long)s->batch_tile, m->name);
    if (s->batch_tile > 0 && (s->micro_batch + s->batch_tile - 1) / s->batch_tile > 4096)
        return sg_error_set(err, SG_EINVAL, "batch_tile %lld splits the micro batch of %lld "
                            "sequences into more than 4096 tiles",
                            (long long)s->batch_tile, (long long)s->micro_batch);
    return SG_OK;
}

static void compiler_free(compiler *c)
{
    free(c->pieces);
    free(c->window);
    free(c->unit_first_piece);
    free(c->unit_gathered);
    free(c->unit_kept);
    free(c->unit_full);
    free(c->unit_gbuf);
    free(c->unit_shard);
    free(c->unit_grad);
    free(c->sg_lowest_unit);
    free(c->sg_first_piece);
    free(c->sg_piece_idx);
    free(c->sg_master);
    free(c->sg_moments);
    free(c->sg_pdev);
    free(c->sg_first_chunk);
    free(c->chunks);
    free(c->cast_place);
    free(c->grad_part);
    free(c->unit_norm_part);
    free(c->loss_bufs);
}

int sg_compile_step(const sg_model *m, const sg_step_spec *s, sg_graph *g, sg_error *err)
{
    int rc = check_spec(m, s, err);
    if (rc)
        return rc;
    compiler c = {.m = m, .s = s, .g = g, .err = err, .comm_order = -1};
    c.units = sg_model_num_units(m);
    c.head = c.units - 1;
    c.tokens = s->micro_batch * s->seq_len;
    c.cd = s->compute_dtype;
    c.mixed = c.cd != SG_F32;
    c.ntiles = 1;
    /* MoE: untiled (the load-balancing loss pools the micro batch; an explicit
     * batch_tile is refused by check_spec) */
    if (s->batch_tile > 0 && s->batch_tile < s->micro_batch && m->num_experts == 0) {
        c.tile_rows = s->batch_tile;
        c.ntiles = (int)((s->micro_batch + s->batch_tile - 1) / s->batch_tile);
    }
    size_t nslots = (size_t)c.units * (size_t)c.ntiles;
    access_list l = {0};
    micro_bufs b = {0};
    b.act = malloc(nslots * sizeof(int));
    b.inner = malloc(nslots * sizeof(int));
    b.dact = malloc(nslots * sizeof(int));
    if (!b.act || !b.inner || !b.dact) {
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = sg_subgroup_layout_compute(m, s, &c.lay, err)) || (rc = build_pieces(&c)) ||
        (rc = resolve_cast_placement(&c)) || (rc = declare_buffers(&c)) ||
        (rc = declare_grad_parts(&c)) || (rc = declare_window(&c)))
        goto out;
    for (int mb = 0; mb < s->grad_accum; mb++) {
        if ((rc = declare_micro(&c, mb, &b)) || (rc = emit_forward(&c, &l, &b, mb)) ||
            (rc = emit_backward(&c, &l, &b, mb)))
            goto out;
    }
    if ((rc = emit_optimizer(&c, &l)))
        goto out;
    rc = sg_graph_finalize(g, err);
out:
    if (rc == SG_ENOMEM && err && !err->msg[0])
        sg_error_set(err, rc, "out of memory compiling the step graph");
    free(l.a);
    free(b.act);
    free(b.inner);
    free(b.dact);
    free(b.moe_act);
    free(b.moe_grad);
    compiler_free(&c);
    return rc;
}
