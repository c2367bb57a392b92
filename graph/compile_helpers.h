/* compile_helpers.h - the step compiler's small helpers, inline in each of
 * its files (graph/compile_internal.h includes it): access lists, buffer and
 * node creation, labels, FLOP counts of a unit, batch tiles.
 */
#ifndef SG_COMPILE_HELPERS_H
#define SG_COMPILE_HELPERS_H

#include "graph/compile_internal.h"
#include "models/unit_layout.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* An access to `bytes` of buffer buf (0: all of it). */
static inline int al_push_part(access_list *l, int buf, sg_access_mode mode, int64_t bytes)
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

static inline int al_push(access_list *l, int buf, sg_access_mode mode)
{
    return al_push_part(l, buf, mode, 0);
}

static inline int buffer(compiler *c, int64_t elems, sg_dtype dt, sg_mem_space sp, int persistent,
                         const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static inline int buffer(compiler *c, int64_t elems, sg_dtype dt, sg_mem_space sp, int persistent,
                         const char *fmt, ...)
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
static inline int tag(compiler *c, int id, sg_buf_role role, int unit, int mb, int sg)
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

static inline const char *unit_label(const compiler *c, int u, char *buf, size_t n)
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
static inline int node(compiler *c, access_list *l, sg_op_kind kind, sg_device_class dev, int layer,
                       int micro, int subgroup, double flops, sg_link_dir link, int64_t link_bytes,
                       const char *name)
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
static inline int push_param_reads(compiler *c, access_list *l, int u)
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

static inline int push_unit_params(compiler *c, access_list *l, int u)
{
    int rc = push_param_reads(c, l, u);
    /* A tied head multiplies by the embedding matrix. */
    if (!rc && u == c->head && c->m->tie_word_embeddings)
        rc = push_param_reads(c, l, 0);
    return rc;
}

/* Causal (query, key) pairs per sequence, with an optional sliding window. */
static inline double attended_pairs(int64_t s, int64_t window)
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
static inline double unit_attention_flops_rows(const compiler *c, int u, int64_t rows)
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
static inline double unit_forward_flops_rows(const compiler *c, int u, int64_t rows)
{
    const sg_model *m = c->m;
    double T = (double)(rows * c->s->seq_len);
    if (u == 0)
        return 0.0; /* a gather of embedding rows */
    if (u == c->head)
        /* logits (T, V) = x (T, H) @ W^T, then softmax cross-entropy */
        return 2.0 * T * (double)m->hidden_size * (double)m->vocab_size +
               5.0 * T * (double)m->vocab_size;
    double experts = m->num_experts > 0 /* tasks of their own (sg_compile_emit_moe_forward) */
                         ? 2.0 * T * (double)m->experts_per_token * 3.0 *
                               (double)m->moe_intermediate_size * (double)m->hidden_size
                         : 0.0;
    return 2.0 * T * (double)sg_model_unit_active_params(m, u) - experts +
           unit_attention_flops_rows(c, u, rows);
}

/* Whether unit u's parameters are fetched before use (stage 3): gathered,
 * or with parameter offload copied from the host. */
static inline int unit_fetched(const compiler *c, int u)
{
    return c->unit_gathered[u] || c->s->offload_param;
}

/* CPU sub-group i's casts are fused into its Adam (cast_placement "fused",
 * mixed precision): no fp32 copy of the gradients, no cast nodes; Adam
 * reads the 16-bit host gradients and writes the 16-bit host parameters.
 * Known before the buffers are declared (sg_compile_resolve_cast_placement). */
static inline int casts_fused(const compiler *c, int i)
{
    return c->mixed && c->cast_place && c->cast_place[i] == SG_CAST_FUSED;
}

static inline int64_t subgroup_elems(const compiler *c, int i)
{
    int64_t n = 0;
    for (int p = c->sg_first_piece[i]; p < c->sg_first_piece[i + 1]; p++)
        n += c->pieces[c->sg_piece_idx[p]].elems;
    return n;
}

static inline int64_t collective_bytes(const compiler *c, int64_t elems, double factor)
{
    double dp = (double)c->s->dp_size;
    return (int64_t)(factor * (double)elems * (double)sg_dtype_size(c->cd) * (dp - 1.0) / dp);
}

/* A collective node's place on the comm_order chain (several ranks only). */
static inline int push_comm_order(compiler *c, access_list *l)
{
    return c->comm_order >= 0 ? al_push(l, c->comm_order, SG_RW) : SG_OK;
}

/* "allgather.fwd.layer3.mb0", or without the micro-step "allgather.step.layer3". */
static inline void unit_step_name(const compiler *c, char *name, size_t size, const char *what,
                                  const char *why, int u, int micro)
{
    char lab[24];
    unit_label(c, u, lab, sizeof lab);
    if (micro >= 0)
        snprintf(name, size, "%s.%s.%s.mb%d", what, why, lab, micro);
    else
        snprintf(name, size, "%s.%s.%s", what, why, lab);
}

/* Sequences in batch tile t (the last tile takes what is left). */
static inline int64_t tile_rows(const compiler *c, int t)
{
    if (c->ntiles == 1)
        return c->s->micro_batch;
    int64_t left = c->s->micro_batch - (int64_t)t * c->tile_rows;
    return left < c->tile_rows ? left : c->tile_rows;
}

/* Tags a buffer of tile t (untiled: leaves tile at -1). */
static inline int tile_tag(compiler *c, int id, int t)
{
    if (id >= 0 && c->ntiles > 1)
        c->g->buffers[id].tile = t;
    return id;
}

/* ".t3" for a tiled graph, "" otherwise: untiled names stay as they were. */
static inline const char *tile_suffix(const compiler *c, int t, char *buf, size_t n)
{
    if (c->ntiles > 1)
        snprintf(buf, n, ".t%d", t);
    else
        buf[0] = '\0';
    return buf;
}

/* A decoder layer of a MoE model: its experts are tasks of their own. */
static inline int moe_layer(const compiler *c, int u)
{
    return c->m->num_experts > 0 && u > 0 && u < c->head;
}

#endif
