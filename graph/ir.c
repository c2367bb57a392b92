/* ir.c - step-graph IR: buffers, nodes in program order, derived edges. */
#include "graph/ir.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(void **array, int *cap, int need, size_t elem_size)
{
    if (need <= *cap)
        return SG_OK;
    int ncap = *cap ? *cap : 64;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*array, (size_t)ncap * elem_size);
    if (!p)
        return SG_ENOMEM;
    *array = p;
    *cap = ncap;
    return SG_OK;
}

void sg_graph_init(sg_graph *g)
{
    memset(g, 0, sizeof *g);
}

void sg_graph_free(sg_graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        free(g->nodes[i].access);
    free(g->nodes);
    free(g->buffers);
    free(g->edges);
    sg_graph_init(g);
}

int sg_graph_add_buffer(sg_graph *g, const char *name, int64_t elems, sg_dtype dtype,
                        sg_mem_space space, int persistent)
{
    if (elems < 0)
        return SG_EINVAL;
    int rc = grow((void **)&g->buffers, &g->cap_buffers, g->nbuffers + 1, sizeof *g->buffers);
    if (rc)
        return rc;
    sg_buffer *b = &g->buffers[g->nbuffers];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s", name);
    b->elems = elems;
    b->dtype = dtype;
    b->bytes = elems * (int64_t)sg_dtype_size(dtype);
    b->space = space;
    b->persistent = persistent;
    b->role = SG_BUF_OTHER;
    b->unit = b->micro_step = b->subgroup = b->tile = -1;
    return g->nbuffers++;
}

int sg_graph_add_node(sg_graph *g, sg_op_kind kind, sg_device_class device, int layer, double flops,
                      const sg_access *access, int naccess, const char *name_fmt, ...)
{
    if (g->finalized || naccess < 0)
        return SG_EINVAL;
    for (int i = 0; i < naccess; i++)
        if (access[i].buffer < 0 || access[i].buffer >= g->nbuffers)
            return SG_EINVAL;
    int rc = grow((void **)&g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof *g->nodes);
    if (rc)
        return rc;
    sg_node *n = &g->nodes[g->nnodes];
    memset(n, 0, sizeof *n);
    n->access = malloc((size_t)(naccess ? naccess : 1) * sizeof *access);
    if (!n->access)
        return SG_ENOMEM;
    memcpy(n->access, access, (size_t)naccess * sizeof *access);
    n->naccess = naccess;
    n->id = g->nnodes;
    n->kind = kind;
    n->device = device;
    n->layer = layer;
    n->micro_step = -1;
    n->subgroup = -1;
    n->tile = -1;
    n->flops = flops;
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(n->name, sizeof n->name, name_fmt, ap);
    va_end(ap);
    return g->nnodes++;
}

static int edge_cmp(const void *a, const void *b)
{
    const sg_edge *x = a, *y = b;
    if (x->from != y->from)
        return x->from < y->from ? -1 : 1;
    return (x->to > y->to) - (x->to < y->to);
}

static int push_edge(sg_graph *g, int from, int to)
{
    if (from < 0 || from == to)
        return SG_OK;
    int rc = grow((void **)&g->edges, &g->cap_edges, g->nedges + 1, sizeof *g->edges);
    if (rc)
        return rc;
    g->edges[g->nedges++] = (sg_edge){from, to};
    return SG_OK;
}

/* Per-buffer state while replaying the program: who wrote it last and who
 * has read it since. */
typedef struct buffer_state {
    int last_writer;
    int *readers;
    int nreaders, cap_readers;
} buffer_state;

static int replay_access(sg_graph *g, buffer_state *st, int node, const sg_access *a, sg_error *err)
{
    const sg_buffer *b = &g->buffers[a->buffer];
    int rc;
    if ((a->mode & SG_R) && st->last_writer < 0 && !b->persistent)
        return sg_error_set(err, SG_EINVAL,
                            "node %d (%s) reads buffer %s before any node writes it", node,
                            g->nodes[node].name, b->name);
    if ((rc = push_edge(g, st->last_writer, node)))
        return rc;
    if (a->mode & SG_W) {
        for (int r = 0; r < st->nreaders; r++)
            if ((rc = push_edge(g, st->readers[r], node)))
                return rc;
        st->nreaders = 0;
        st->last_writer = node;
    } else {
        if ((rc = grow((void **)&st->readers, &st->cap_readers, st->nreaders + 1, sizeof(int))))
            return rc;
        st->readers[st->nreaders++] = node;
    }
    return SG_OK;
}

int sg_graph_finalize(sg_graph *g, sg_error *err)
{
    buffer_state *st = calloc((size_t)(g->nbuffers ? g->nbuffers : 1), sizeof *st);
    if (!st)
        return sg_error_set(err, SG_ENOMEM, "out of memory deriving edges");
    for (int b = 0; b < g->nbuffers; b++)
        st[b].last_writer = -1;
    g->nedges = 0;
    int rc = SG_OK;
    for (int n = 0; n < g->nnodes && rc == SG_OK; n++) {
        sg_node *node = &g->nodes[n];
        node->bytes_read = node->bytes_written = 0;
        for (int i = 0; i < node->naccess && rc == SG_OK; i++) {
            const sg_access *a = &node->access[i];
            int64_t bytes = a->bytes > 0 ? a->bytes : g->buffers[a->buffer].bytes;
            if (a->mode & SG_R)
                node->bytes_read += bytes;
            if (a->mode & SG_W)
                node->bytes_written += bytes;
            rc = replay_access(g, &st[a->buffer], n, a, err);
        }
    }
    for (int b = 0; b < g->nbuffers; b++)
        free(st[b].readers);
    free(st);
    if (rc) {
        if (rc == SG_ENOMEM)
            sg_error_set(err, rc, "out of memory deriving edges");
        return rc;
    }
    if (g->nedges > 1) {
        qsort(g->edges, (size_t)g->nedges, sizeof *g->edges, edge_cmp);
        int w = 1;
        for (int r = 1; r < g->nedges; r++)
            if (edge_cmp(&g->edges[r], &g->edges[w - 1]) != 0)
                g->edges[w++] = g->edges[r];
        g->nedges = w;
    }
    g->finalized = 1;
    return SG_OK;
}

int sg_graph_check(const sg_graph *g, sg_error *err)
{
    if (!g->finalized)
        return sg_error_set(err, SG_EINVAL, "graph is not finalized");
    for (int e = 0; e < g->nedges; e++) {
        const sg_edge *ed = &g->edges[e];
        if (ed->from < 0 || ed->to >= g->nnodes || ed->from >= ed->to)
            return sg_error_set(err, SG_EINVAL,
                                "edge %d -> %d does not go forward in program order", ed->from,
                                ed->to);
    }
    /* Every read of a non-persistent buffer must follow a write. */
    char *written = calloc((size_t)(g->nbuffers ? g->nbuffers : 1), 1);
    if (!written)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    int rc = SG_OK;
    for (int n = 0; n < g->nnodes && rc == SG_OK; n++) {
        const sg_node *node = &g->nodes[n];
        for (int i = 0; i < node->naccess; i++) {
            const sg_access *a = &node->access[i];
            if ((a->mode & SG_R) && !written[a->buffer] && !g->buffers[a->buffer].persistent) {
                rc = sg_error_set(err, SG_EINVAL, "node %s reads %s before it is written",
                                  node->name, g->buffers[a->buffer].name);
                break;
            }
        }
        for (int i = 0; i < node->naccess; i++)
            if (node->access[i].mode & SG_W)
                written[node->access[i].buffer] = 1;
    }
    free(written);
    return rc;
}

int sg_graph_successors(const sg_graph *g, sg_adjacency *adj)
{
    adj->offset = calloc((size_t)g->nnodes + 1, sizeof(int));
    adj->target = malloc((size_t)(g->nedges ? g->nedges : 1) * sizeof(int));
    if (!adj->offset || !adj->target) {
        sg_adjacency_free(adj);
        return SG_ENOMEM;
    }
    for (int e = 0; e < g->nedges; e++)
        adj->offset[g->edges[e].from + 1]++;
    for (int n = 0; n < g->nnodes; n++)
        adj->offset[n + 1] += adj->offset[n];
    int *fill = calloc((size_t)g->nnodes + 1, sizeof(int));
    if (!fill) {
        sg_adjacency_free(adj);
        return SG_ENOMEM;
    }
    for (int e = 0; e < g->nedges; e++) {
        int src = g->edges[e].from;
        adj->target[adj->offset[src] + fill[src]++] = g->edges[e].to;
    }
    free(fill);
    return SG_OK;
}

void sg_adjacency_free(sg_adjacency *adj)
{
    free(adj->offset);
    free(adj->target);
    adj->offset = adj->target = NULL;
}

const char *sg_device_class_name(sg_device_class d)
{
    static const char *const names[SG_DEV_COUNT] = {"gpu", "cpu", "link"};
    return (unsigned)d < SG_DEV_COUNT ? names[d] : "?";
}

const char *sg_link_dir_name(sg_link_dir l)
{
    static const char *const names[SG_LINK_COUNT] = {"none", "h2d", "d2h", "net"};
    return (unsigned)l < SG_LINK_COUNT ? names[l] : "?";
}

const char *sg_mem_space_name(sg_mem_space m)
{
    static const char *const names[SG_MEM_COUNT] = {"gpu", "host"};
    return (unsigned)m < SG_MEM_COUNT ? names[m] : "?";
}

int sg_node_is_param_fetch(const sg_node *nd)
{
    return nd->kind == SG_OP_H2D && nd->layer >= 0;
}

int sg_node_runs_on_gpu(const sg_node *nd)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(nd->kind);
    if (nd->pinned)
        return nd->device != SG_DEV_CPU;
    switch (info ? info->placement : SG_PLACE_NODE) {
    case SG_PLACE_CPU: return 0;
    case SG_PLACE_CUDA: return 1;
    default: /* SG_PLACE_NODE, and SG_PLACE_EITHER at its node's device */
        return nd->device != SG_DEV_CPU;
    }
}

int sg_node_may_run_on_gpu(const sg_node *nd)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(nd->kind);
    if (!nd->pinned && info && info->placement == SG_PLACE_EITHER)
        return 1;
    return sg_node_runs_on_gpu(nd);
}

void sg_graph_gpu_touched(const sg_graph *g, unsigned char *touched)
{
    memset(touched, 0, (size_t)(g->nbuffers > 0 ? g->nbuffers : 0));
    for (int n = 0; n < g->nnodes; n++) {
        const sg_node *nd = &g->nodes[n];
        if (!sg_node_may_run_on_gpu(nd))
            continue;
        for (int a = 0; a < nd->naccess; a++)
            if (nd->access[a].buffer >= 0 && nd->access[a].buffer < g->nbuffers)
                touched[nd->access[a].buffer] = 1;
    }
}

static int max_layer(const sg_graph *g)
{
    int m = -1;
    for (int n = 0; n < g->nnodes; n++)
        if (g->nodes[n].layer > m)
            m = g->nodes[n].layer;
    return m;
}

void sg_unit_label(const sg_graph *g, int unit, char *buf, size_t size)
{
    if (unit < 0)
        snprintf(buf, size, "none");
    else if (unit == 0)
        snprintf(buf, size, "embed");
    else if (unit == max_layer(g))
        snprintf(buf, size, "head");
    else
        snprintf(buf, size, "layer%d", unit - 1);
}

void sg_graph_host_pinned(const sg_graph *g, unsigned char *pin)
{
    sg_graph_gpu_touched(g, pin);
    /* 2: a node that may run on the CPU reads or writes it too */
    for (int n = 0; n < g->nnodes; n++) {
        const sg_node *nd = &g->nodes[n];
        if (sg_node_runs_on_gpu(nd))
            continue;
        for (int a = 0; a < nd->naccess; a++) {
            int b = nd->access[a].buffer;
            if (b >= 0 && b < g->nbuffers && pin[b])
                pin[b] = 2;
        }
    }
    for (int b = 0; b < g->nbuffers; b++)
        pin[b] = pin[b] && (g->buffers[b].space != SG_MEM_GPU || pin[b] == 2);
}
