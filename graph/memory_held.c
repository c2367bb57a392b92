/* memory_held.c - what StarPU's allocator holds per space (memory_held.h). */
#include "graph/memory_held.h"

#include "graph/liveness.h"
#include "graph/op_kinds.h"

#include <stdlib.h>
#include <string.h>

int sg_node_runs_on_gpu(const sg_node *nd)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(nd->kind);
    if (nd->pinned)
        return nd->device != SG_DEV_CPU;
    switch (info ? info->placement : SG_PLACE_NODE) {
    case SG_PLACE_CPU:
        return 0;
    case SG_PLACE_CUDA:
        return 1;
    default: /* SG_PLACE_NODE, and SG_PLACE_EITHER at its node's device */
        return nd->device != SG_DEV_CPU;
    }
}

/* One stay of a value on one side: from node `from` to node `to`, both
 * included. */
typedef struct stay {
    int side, from, to;
    int64_t bytes;
    int esize; /* element size: StarPU reuses a cached buffer for the same bytes and esize */
    int klass; /* size class among the large buffers, -1 for a small one */
    int src;   /* scratch of classify */
} stay;

typedef struct held_work {
    const sg_graph *g;
    int *acc_off, *acc_node; /* CSR: the nodes that access buffer b, in program order */
    stay *stays;
    int nstays, cap;
} held_work;

static int add_stay(held_work *w, int side, int from, int to, int b)
{
    if (w->nstays == w->cap) {
        int cap = w->cap ? 2 * w->cap : 256;
        stay *s = realloc(w->stays, (size_t)cap * sizeof *s);
        if (!s)
            return SG_ENOMEM;
        w->stays = s;
        w->cap = cap;
    }
    const sg_buffer *buf = &w->g->buffers[b];
    w->stays[w->nstays++] = (stay){side, from, to, buf->bytes, (int)sg_dtype_size(buf->dtype), -1,
                                   0};
    return SG_OK;
}

/* The nodes that access each buffer, each node once, in program order. */
static int access_lists(held_work *w)
{
    const sg_graph *g = w->g;
    size_t total = 0;
    for (int n = 0; n < g->nnodes; n++)
        total += (size_t)g->nodes[n].naccess;
    w->acc_off = calloc((size_t)g->nbuffers + 1, sizeof *w->acc_off);
    w->acc_node = malloc((total + 1) * sizeof *w->acc_node);
    int *fill = calloc((size_t)g->nbuffers + 1, sizeof *fill);
    if (!w->acc_off || !w->acc_node || !fill) {
        free(fill);
        return SG_ENOMEM;
    }
    for (int n = 0; n < g->nnodes; n++)
        for (int i = 0; i < g->nodes[n].naccess; i++)
            w->acc_off[g->nodes[n].access[i].buffer + 1]++;
    for (int b = 0; b < g->nbuffers; b++)
        w->acc_off[b + 1] += w->acc_off[b];
    for (int n = 0; n < g->nnodes; n++)
        for (int i = 0; i < g->nodes[n].naccess; i++) {
            int b = g->nodes[n].access[i].buffer;
            int at = w->acc_off[b] + fill[b];
            if (fill[b] == 0 || w->acc_node[at - 1] != n) {
                w->acc_node[at] = n;
                fill[b]++;
            }
        }
    /* close the gaps left by nodes listing a buffer twice */
    int out = 0;
    for (int b = 0; b < g->nbuffers; b++) {
        int start = w->acc_off[b];
        w->acc_off[b] = out;
        for (int k = 0; k < fill[b]; k++)
            w->acc_node[out++] = w->acc_node[start + k];
    }
    w->acc_off[g->nbuffers] = out;
    free(fill);
    return SG_OK;
}

/* The stays of buffer b's value from node `from` to node `to`: on each side,
 * from the first node there that accesses it to the value's end; a value the
 * program reads after the step (after_step: losses, norm, overflow flag) is
 * also fetched to main RAM. */
static int value_stays(held_work *w, int b, int from, int to, int after_step)
{
    int first[2] = {-1, -1};
    for (int k = w->acc_off[b]; k < w->acc_off[b + 1]; k++) {
        int n = w->acc_node[k];
        if (n < from || n > to)
            continue;
        int side = sg_node_runs_on_gpu(&w->g->nodes[n]) ? SG_MEM_GPU : SG_MEM_HOST;
        if (first[side] < 0)
            first[side] = n;
    }
    if (after_step && first[SG_MEM_HOST] < 0)
        first[SG_MEM_HOST] = to;
    for (int side = 0; side < 2; side++)
        if (first[side] >= 0 && add_stay(w, side, first[side], to, b))
            return SG_ENOMEM;
    return SG_OK;
}

/* Every stay: persistent buffers wherever a node accesses them, for the
 * whole step (the home copy in main RAM is ours, counted apart); step-local
 * values by the liveness of liveness.h. */
static int collect_stays(held_work *w)
{
    const sg_graph *g = w->g;
    int last = g->nnodes - 1;
    for (int b = 0; b < g->nbuffers; b++)
        if (g->buffers[b].persistent && w->acc_off[b] < w->acc_off[b + 1]) {
            int on_gpu = 0;
            for (int k = w->acc_off[b]; k < w->acc_off[b + 1]; k++)
                on_gpu |= sg_node_runs_on_gpu(&g->nodes[w->acc_node[k]]);
            if (on_gpu && add_stay(w, SG_MEM_GPU, 0, last, b))
                return SG_ENOMEM;
        }
    sg_liveness lv;
    if (sg_graph_liveness(g, &lv))
        return SG_ENOMEM;
    int *open = malloc((size_t)(g->nbuffers ? g->nbuffers : 1) * sizeof *open);
    int rc = open ? SG_OK : SG_ENOMEM;
    for (int b = 0; !rc && b < g->nbuffers; b++)
        open[b] = -1;
    for (int n = 0; !rc && n < g->nnodes; n++) {
        for (int k = lv.born_offset[n]; k < lv.born_offset[n + 1]; k++)
            open[lv.born[k]] = n;
        for (int k = lv.dies_offset[n]; !rc && k < lv.dies_offset[n + 1]; k++) {
            int b = lv.dies[k];
            rc = value_stays(w, b, open[b], n, 0);
            open[b] = -1;
        }
    }
    for (int b = 0; !rc && b < g->nbuffers; b++)
        if (open[b] >= 0) /* outlives the step (losses, norm, overflow flag) */
            rc = value_stays(w, b, open[b], last, 1);
    free(open);
    sg_liveness_free(&lv);
    return rc;
}

/* Size classes of the large stays: equal bytes and element size share one. */
static int by_size(const void *a, const void *b)
{
    const stay *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? -1 : 1;
    return (x->esize > y->esize) - (x->esize < y->esize);
}

/* Gives each large stay its class index (small ones keep -1). */
static int classify(held_work *w, int *nclasses)
{
    stay *sorted = malloc((size_t)(w->nstays ? w->nstays : 1) * sizeof *sorted);
    int *idx = malloc((size_t)(w->nstays ? w->nstays : 1) * sizeof *idx);
    if (!sorted || !idx) {
        free(sorted);
        free(idx);
        return SG_ENOMEM;
    }
    int n = 0;
    for (int i = 0; i < w->nstays; i++)
        if (w->stays[i].bytes > SG_STARPU_SUBALLOC_MAX) {
            sorted[n] = w->stays[i];
            sorted[n].src = i;
            n++;
        }
    qsort(sorted, (size_t)n, sizeof *sorted, by_size);
    int k = -1;
    for (int i = 0; i < n; i++) {
        if (i == 0 || by_size(&sorted[i - 1], &sorted[i]) != 0)
            k++;
        idx[i] = k;
    }
    for (int i = 0; i < n; i++)
        w->stays[sorted[i].src].klass = idx[i];
    *nclasses = k + 1;
    free(sorted);
    free(idx);
    return SG_OK;
}

/* StarPU's count on one side: the most buffers of each large size alive at
 * once, and the small ones' peak in whole chunks. */
static int side_held(const held_work *w, int side, int nclasses, int64_t *out)
{
    const sg_graph *g = w->g;
    int nn = g->nnodes;
    int *start_off = calloc((size_t)nn + 2, sizeof(int)), *end_off = calloc((size_t)nn + 2, sizeof(int));
    int *starts = malloc((size_t)(w->nstays + 1) * sizeof(int));
    int *ends = malloc((size_t)(w->nstays + 1) * sizeof(int));
    int *count = calloc((size_t)nclasses + 1, sizeof(int)), *most = calloc((size_t)nclasses + 1, sizeof(int));
    int rc = start_off && end_off && starts && ends && count && most ? SG_OK : SG_ENOMEM;
    if (!rc) {
        for (int i = 0; i < w->nstays; i++)
            if (w->stays[i].side == side) {
                start_off[w->stays[i].from + 1]++;
                end_off[w->stays[i].to + 1]++;
            }
        for (int n = 0; n <= nn; n++) {
            start_off[n + 1] += start_off[n];
            end_off[n + 1] += end_off[n];
        }
        int *sf = calloc((size_t)nn + 1, sizeof(int)), *ef = calloc((size_t)nn + 1, sizeof(int));
        if (!sf || !ef)
            rc = SG_ENOMEM;
        for (int i = 0; !rc && i < w->nstays; i++)
            if (w->stays[i].side == side) {
                starts[start_off[w->stays[i].from] + sf[w->stays[i].from]++] = i;
                ends[end_off[w->stays[i].to] + ef[w->stays[i].to]++] = i;
            }
        free(sf);
        free(ef);
    }
    int64_t small = 0, small_peak = 0;
    for (int n = 0; !rc && n < nn; n++) {
        for (int k = start_off[n]; k < start_off[n + 1]; k++) {
            const stay *s = &w->stays[starts[k]];
            if (s->klass < 0) {
                small += (s->bytes + SG_STARPU_SUBALLOC_BLOCK - 1) / SG_STARPU_SUBALLOC_BLOCK *
                         SG_STARPU_SUBALLOC_BLOCK;
                small_peak = small > small_peak ? small : small_peak;
            } else if (++count[s->klass] > most[s->klass]) {
                most[s->klass] = count[s->klass];
            }
        }
        for (int k = end_off[n]; k < end_off[n + 1]; k++) {
            const stay *s = &w->stays[ends[k]];
            if (s->klass < 0)
                small -= (s->bytes + SG_STARPU_SUBALLOC_BLOCK - 1) / SG_STARPU_SUBALLOC_BLOCK *
                         SG_STARPU_SUBALLOC_BLOCK;
            else
                count[s->klass]--;
        }
    }
    int64_t held = (small_peak + SG_STARPU_CHUNK_BYTES - 1) / SG_STARPU_CHUNK_BYTES *
                   SG_STARPU_CHUNK_BYTES;
    /* each class's bytes: any of its stays tells them */
    for (int i = 0; !rc && i < w->nstays; i++)
        if (w->stays[i].side == side && w->stays[i].klass >= 0 && most[w->stays[i].klass] > 0) {
            held += w->stays[i].bytes * most[w->stays[i].klass];
            most[w->stays[i].klass] = 0; /* counted */
        }
    *out = held;
    free(start_off);
    free(end_off);
    free(starts);
    free(ends);
    free(count);
    free(most);
    return rc;
}

int sg_graph_memory_held(const sg_graph *g, int64_t held[SG_MEM_COUNT])
{
    held_work w;
    memset(&w, 0, sizeof w);
    w.g = g;
    for (int s = 0; s < SG_MEM_COUNT; s++)
        held[s] = 0;
    int nclasses = 0;
    int rc = access_lists(&w);
    if (!rc)
        rc = collect_stays(&w);
    if (!rc)
        rc = classify(&w, &nclasses);
    for (int s = 0; !rc && s < SG_MEM_COUNT; s++)
        rc = side_held(&w, s, nclasses, &held[s]);
    /* our own allocations: every persistent buffer's home, in main RAM */
    for (int b = 0; !rc && b < g->nbuffers; b++)
        if (g->buffers[b].persistent)
            held[SG_MEM_HOST] += g->buffers[b].bytes;
    free(w.acc_off);
    free(w.acc_node);
    free(w.stays);
    return rc;
}
