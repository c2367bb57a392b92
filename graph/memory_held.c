/* memory_held.c - what StarPU's allocator holds per space (memory_held.h). */
#include "graph/memory_held.h"

#include "graph/liveness.h"

#include <stdlib.h>
#include <string.h>

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
    w->stays[w->nstays++] =
        (stay){side, from, to, buf->bytes, (int)sg_dtype_size(buf->dtype), -1, 0};
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

/* Gives each large stay its class index (small ones keep -1); class_bytes[k]
 * is class k's size. */
static int classify(held_work *w, int64_t **class_bytes, int *nclasses)
{
    stay *sorted = malloc((size_t)(w->nstays ? w->nstays : 1) * sizeof *sorted);
    *class_bytes = malloc((size_t)(w->nstays ? w->nstays : 1) * sizeof **class_bytes);
    if (!sorted || !*class_bytes) {
        free(sorted);
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
            (*class_bytes)[++k] = sorted[i].bytes;
        w->stays[sorted[i].src].klass = k;
    }
    *nclasses = k + 1;
    free(sorted);
    return SG_OK;
}

/* A stay's start or end at a node; at one node starts come first (a stay
 * includes both of its nodes). */
typedef struct event {
    int node, end, stay;
} event;

static int by_time(const void *a, const void *b)
{
    const event *x = a, *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    if (x->end != y->end)
        return x->end - y->end;
    return x->stay - y->stay;
}

/* a small buffer's bytes as the suballocator carves them */
static int64_t in_blocks(int64_t bytes)
{
    return (bytes + SG_STARPU_SUBALLOC_BLOCK - 1) / SG_STARPU_SUBALLOC_BLOCK *
           SG_STARPU_SUBALLOC_BLOCK;
}

/* StarPU's count on one side: the most buffers of each large size alive at
 * once, and the small ones' peak in whole chunks. */
static int side_held(const held_work *w, int side, const int64_t *class_bytes, int nclasses,
                     int64_t *out)
{
    event *ev = malloc((size_t)(2 * w->nstays + 1) * sizeof *ev);
    int *count = calloc((size_t)nclasses + 1, sizeof(int)),
        *most = calloc((size_t)nclasses + 1, sizeof(int));
    if (!ev || !count || !most) {
        free(ev);
        free(count);
        free(most);
        return SG_ENOMEM;
    }
    int nev = 0;
    for (int i = 0; i < w->nstays; i++)
        if (w->stays[i].side == side) {
            ev[nev++] = (event){w->stays[i].from, 0, i};
            ev[nev++] = (event){w->stays[i].to, 1, i};
        }
    qsort(ev, (size_t)nev, sizeof *ev, by_time);
    int64_t small = 0, small_peak = 0;
    for (int e = 0; e < nev; e++) {
        const stay *s = &w->stays[ev[e].stay];
        int sign = ev[e].end ? -1 : 1;
        if (s->klass < 0) {
            small += sign * in_blocks(s->bytes);
            small_peak = small > small_peak ? small : small_peak;
        } else if ((count[s->klass] += sign) > most[s->klass]) {
            most[s->klass] = count[s->klass];
        }
    }
    int64_t held =
        (small_peak + SG_STARPU_CHUNK_BYTES - 1) / SG_STARPU_CHUNK_BYTES * SG_STARPU_CHUNK_BYTES;
    for (int k = 0; k < nclasses; k++)
        held += class_bytes[k] * most[k];
    *out = held;
    free(ev);
    free(count);
    free(most);
    return SG_OK;
}

int sg_graph_memory_held(const sg_graph *g, int64_t held[SG_MEM_COUNT])
{
    held_work w;
    memset(&w, 0, sizeof w);
    w.g = g;
    for (int s = 0; s < SG_MEM_COUNT; s++)
        held[s] = 0;
    int nclasses = 0;
    int64_t *class_bytes = NULL;
    int rc = access_lists(&w);
    if (!rc)
        rc = collect_stays(&w);
    if (!rc)
        rc = classify(&w, &class_bytes, &nclasses);
    for (int s = 0; !rc && s < SG_MEM_COUNT; s++)
        rc = side_held(&w, s, class_bytes, nclasses, &held[s]);
    /* our own allocations: every persistent buffer's home, in main RAM */
    for (int b = 0; !rc && b < g->nbuffers; b++)
        if (g->buffers[b].persistent)
            held[SG_MEM_HOST] += g->buffers[b].bytes;
    free(w.acc_off);
    free(w.acc_node);
    free(w.stays);
    free(class_bytes);
    return rc;
}
