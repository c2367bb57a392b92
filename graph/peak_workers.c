/* peak_workers.c - the peak memory of a step run by several workers out of
 * program order (peak_workers.h). */
#include "graph/peak_workers.h"

#include "graph/liveness.h"

#include <stdlib.h>
#include <string.h>

/* One worker: its queue of ready nodes (in push order) and what it runs. */
typedef struct worker {
    int *q;       /* nodes pushed, in push order; -1 once taken */
    int nq, head; /* entries, first entry that may still be live */
    int running;  /* node, or -1 */
    double until; /* when it ends */
} worker;

typedef struct sim {
    const sg_graph *g;
    int nw;
    worker *w;
    int64_t *prio;
    int *indeg;
    /* per node: the values it starts, and the values it accesses (value ids) */
    int *born_off, *born_val, *acc_off, *acc_val;
    int64_t *val_bytes;
    int *val_left; /* accessing nodes not yet done; -1: never freed in the step */
    int64_t live, best;
} sim;

/* Seconds a node takes on one CPU worker: its FLOPs at one core's fp32
 * rate or its bytes at one core's share of memory bandwidth, whichever is
 * larger, plus a task's overhead. Only the ratios between nodes matter. */
static double node_seconds(const sg_node *n)
{
    const double flops = 20e9, bw = 10e9, overhead = 5e-6;
    double bytes = (double)(n->bytes_read + n->bytes_written);
    if (n->device == SG_DEV_LINK)
        bytes = (double)n->link_bytes * 2.0;
    double tc = n->flops / flops, tm = bytes / bw;
    return overhead + (tc > tm ? tc : tm);
}

static void push(worker *w, int node)
{
    w->q[w->nq++] = node;
}

/* The queue entry of w with the highest priority: the first pushed of
 * them (own) or the last pushed (a thief), as StarPU's prio deques give. */
static int pick(const sim *s, worker *w, int thief)
{
    int best = -1;
    for (int i = w->head; i < w->nq; i++) {
        int n = w->q[i];
        if (n < 0)
            continue;
        if (best < 0 || s->prio[n] > s->prio[w->q[best]] ||
            (thief && s->prio[n] == s->prio[w->q[best]]))
            best = i;
    }
    if (best < 0)
        return -1;
    int n = w->q[best];
    w->q[best] = -1;
    while (w->head < w->nq && w->q[w->head] < 0)
        w->head++;
    return n;
}

static void start(sim *s, worker *w, int n, double now)
{
    w->running = n;
    w->until = now + node_seconds(&s->g->nodes[n]);
    for (int k = s->born_off[n]; k < s->born_off[n + 1]; k++)
        s->live += s->val_bytes[s->born_val[k]];
    if (s->live > s->best)
        s->best = s->live;
}

/* Idle workers take work: their own queue first, else the first other
 * worker's (lws steals from its neighbours in order). */
static void dispatch(sim *s, double now)
{
    for (int i = 0; i < s->nw; i++) {
        worker *w = &s->w[i];
        if (w->running >= 0)
            continue;
        int n = pick(s, w, 0);
        for (int j = 1; n < 0 && j < s->nw; j++)
            n = pick(s, &s->w[(i + j) % s->nw], 1);
        if (n >= 0)
            start(s, w, n, now);
    }
}

/* Node n ended on worker wi: the values whose accessors are all done are
 * freed (liveness invalidates a value after its last access, ordered after
 * every access), its successors that became ready go to wi's queue. */
static void finish(sim *s, int wi, const sg_adjacency *succ)
{
    worker *w = &s->w[wi];
    int n = w->running;
    w->running = -1;
    for (int k = s->acc_off[n]; k < s->acc_off[n + 1]; k++) {
        int v = s->acc_val[k];
        if (s->val_left[v] > 0 && --s->val_left[v] == 0)
            s->live -= s->val_bytes[v];
    }
    for (int k = succ->offset[n]; k < succ->offset[n + 1]; k++)
        if (--s->indeg[succ->target[k]] == 0)
            push(w, succ->target[k]);
}

/* Values: every (buffer, birth) of the liveness, with the distinct nodes
 * that access it. */
static int build_values(sim *s, const sg_liveness *lv)
{
    const sg_graph *g = s->g;
    int nn = g->nnodes, nb = g->nbuffers;
    size_t nacc = 0;
    for (int n = 0; n < nn; n++)
        nacc += (size_t)g->nodes[n].naccess;
    int *cur = malloc((size_t)(nb ? nb : 1) * sizeof *cur);
    s->born_off = calloc((size_t)nn + 1, sizeof(int));
    s->acc_off = calloc((size_t)nn + 1, sizeof(int));
    s->born_val = malloc((nacc + 1) * sizeof(int));
    s->acc_val = malloc((nacc + 1) * sizeof(int));
    s->val_bytes = malloc((nacc + 1) * sizeof(int64_t));
    s->val_left = malloc((nacc + 1) * sizeof(int));
    if (!cur || !s->born_off || !s->acc_off || !s->born_val || !s->acc_val || !s->val_bytes ||
        !s->val_left) {
        free(cur);
        return SG_ENOMEM;
    }
    for (int b = 0; b < nb; b++)
        cur[b] = -1;
    int nv = 0, nborn = 0, nacc_val = 0;
    for (int n = 0; n < nn; n++) {
        for (int k = lv->born_offset[n]; k < lv->born_offset[n + 1]; k++) {
            int b = lv->born[k];
            const sg_buffer *buf = &g->buffers[b];
            cur[b] = nv;
            s->val_bytes[nv] = buf->bytes;
            s->val_left[nv] = sg_buffer_outlives_step(buf) ? -1 : 0;
            s->born_val[nborn++] = nv++;
        }
        s->born_off[n + 1] = nborn;
        const sg_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->naccess; i++) {
            int b = nd->access[i].buffer, v = cur[b], seen = 0;
            if (v < 0)
                continue; /* persistent */
            for (int j = s->acc_off[n]; j < nacc_val; j++)
                seen |= s->acc_val[j] == v;
            if (seen)
                continue;
            s->acc_val[nacc_val++] = v;
            if (s->val_left[v] >= 0)
                s->val_left[v]++;
        }
        s->acc_off[n + 1] = nacc_val;
        for (int k = lv->dies_offset[n]; k < lv->dies_offset[n + 1]; k++)
            cur[lv->dies[k]] = -1;
    }
    free(cur);
    return SG_OK;
}

static void sim_free(sim *s)
{
    if (s->w)
        for (int i = 0; i < s->nw; i++)
            free(s->w[i].q);
    free(s->w);
    free(s->prio);
    free(s->indeg);
    free(s->born_off);
    free(s->born_val);
    free(s->acc_off);
    free(s->acc_val);
    free(s->val_bytes);
    free(s->val_left);
}

int sg_graph_peak_memory_workers(const sg_graph *g, int workers, int64_t *peak, int64_t *persistent)
{
    if (workers < 1)
        return SG_EINVAL;
    int nn = g->nnodes;
    sim s;
    memset(&s, 0, sizeof s);
    s.g = g;
    s.nw = workers;
    *peak = *persistent = 0;
    for (int b = 0; b < g->nbuffers; b++)
        if (g->buffers[b].persistent)
            *persistent += g->buffers[b].bytes;
    sg_liveness lv;
    sg_adjacency succ;
    if (sg_graph_liveness(g, &lv))
        return SG_ENOMEM;
    if (sg_graph_successors(g, &succ)) {
        sg_liveness_free(&lv);
        return SG_ENOMEM;
    }
    int rc = build_values(&s, &lv);
    s.w = calloc((size_t)workers, sizeof *s.w);
    s.prio = malloc((size_t)(nn ? nn : 1) * sizeof *s.prio);
    s.indeg = calloc((size_t)(nn ? nn : 1), sizeof *s.indeg);
    if (rc == SG_OK && (!s.w || !s.prio || !s.indeg))
        rc = SG_ENOMEM;
    for (int i = 0; rc == SG_OK && i < workers; i++) {
        s.w[i].running = -1;
        if (!(s.w[i].q = malloc((size_t)(nn ? nn : 1) * sizeof(int))))
            rc = SG_ENOMEM;
    }
    if (rc == SG_OK) {
        for (int n = 0; n < nn; n++) {
            s.prio[n] = g->nodes[n].priority;
            for (int k = succ.offset[n]; k < succ.offset[n + 1]; k++)
                s.indeg[succ.target[k]]++;
        }
        /* the nodes ready at submission: pushed by the submitting thread,
         * round robin over the workers */
        int rr = 0;
        for (int n = 0; n < nn; n++)
            if (s.indeg[n] == 0)
                push(&s.w[rr++ % workers], n);
        double now = 0.0;
        int done = 0;
        dispatch(&s, now);
        while (done < nn) {
            int wi = -1;
            for (int i = 0; i < workers; i++)
                if (s.w[i].running >= 0 && (wi < 0 || s.w[i].until < s.w[wi].until))
                    wi = i;
            if (wi < 0) {
                rc = SG_EINVAL; /* a cycle: cannot happen in a program-order graph */
                break;
            }
            now = s.w[wi].until;
            finish(&s, wi, &succ);
            done++;
            dispatch(&s, now);
        }
        *peak = *persistent + s.best;
    }
    sim_free(&s);
    sg_adjacency_free(&succ);
    sg_liveness_free(&lv);
    return rc;
}
