/* overlap.c - GPU busy share and hidden CPU Adam time (overlap.h). */
#include "runtime/trace/overlap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct span {
    double a, b;
} span;

static int by_start(const void *x, const void *y)
{
    double d = ((const span *)x)->a - ((const span *)y)->a;
    return d < 0 ? -1 : d > 0;
}

/* A worker's busy time (us), to its class's sum and count. */
static void add_worker(sg_overlap *out, int gpu, double busy_us)
{
    out->worker_busy_s[gpu ? 1 : 0] += busy_us * 1e-6;
    out->workers[gpu ? 1 : 0]++;
}

/* Sorts and merges overlapping spans in place; returns the new count. */
static int merge(span *s, int n)
{
    qsort(s, (size_t)n, sizeof *s, by_start);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k && s[i].a <= s[k - 1].b)
            s[k - 1].b = fmax(s[k - 1].b, s[i].b);
        else
            s[k++] = s[i];
    }
    return k;
}

static double total(const span *s, int n)
{
    double t = 0;
    for (int i = 0; i < n; i++)
        t += s[i].b - s[i].a;
    return t;
}

static double overlap(const span *s, int n, double a, double b)
{
    double t = 0;
    for (int i = 0; i < n && s[i].a < b; i++)
        t += fmax(0, fmin(b, s[i].b) - fmax(a, s[i].a));
    return t;
}

int sg_overlap_compute(const sg_graph *g, const sg_task_record *records, const int *is_gpu,
                       int nworkers, sg_overlap *out)
{
    memset(out, 0, sizeof *out);
    span *all = malloc((size_t)(g->nnodes > 0 ? g->nnodes : 1) * sizeof *all);
    span *one = malloc((size_t)(g->nnodes > 0 ? g->nnodes : 1) * sizeof *one);
    if (!all || !one) {
        free(all);
        free(one);
        return SG_ENOMEM;
    }
    double t0 = INFINITY, t1 = -INFINITY;
    int nall = 0, ngpu = 0;
    double busy = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const sg_task_record *r = &records[i];
        if (r->worker < 0)
            continue;
        t0 = fmin(t0, r->start_us);
        t1 = fmax(t1, r->end_us);
        out->busy_s[g->nodes[i].device] += (r->end_us - r->start_us) * 1e-6;
        if (r->worker < nworkers && is_gpu[r->worker])
            all[nall++] = (span){r->start_us, r->end_us};
    }
    for (int w = 0; w < nworkers; w++) {
        int n = 0;
        for (int i = 0; i < g->nnodes; i++)
            if (records[i].worker == w)
                one[n++] = (span){records[i].start_us, records[i].end_us};
        double b = total(one, merge(one, n));
        add_worker(out, is_gpu[w], b);
        if (!is_gpu[w])
            continue;
        busy += b;
        ngpu++;
    }
    out->span_s = t1 > t0 ? (t1 - t0) * 1e-6 : 0;
    if (ngpu && t1 > t0)
        out->gpu_busy = busy / (ngpu * (t1 - t0));
    nall = merge(all, nall);
    double hidden = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const sg_task_record *r = &records[i];
        if (r->worker < 0 || g->nodes[i].kind != SG_OP_ADAM_CPU)
            continue;
        out->adam_cpu_s += (r->end_us - r->start_us) * 1e-6;
        hidden += overlap(all, nall, r->start_us, r->end_us) * 1e-6;
    }
    if (out->adam_cpu_s > 0)
        out->adam_hidden = hidden / out->adam_cpu_s;
    free(all);
    free(one);
    return SG_OK;
}

/* A record clipped to [a, b): 0 if nothing of it is left. */
static int clip(const sg_task_record *r, double a, double b, span *out)
{
    if (r->worker < 0)
        return 0;
    out->a = fmax(a, r->start_us);
    out->b = fmin(b, r->end_us);
    return out->b > out->a;
}

int sg_overlap_window(const sg_graph *const *graphs, const sg_task_record *const *records,
                      int nsteps, const int *is_gpu, int nworkers, double a_us, double b_us,
                      sg_overlap *out)
{
    memset(out, 0, sizeof *out);
    size_t n = 1;
    for (int s = 0; s < nsteps; s++)
        n += (size_t)graphs[s]->nnodes;
    span *all = malloc(n * sizeof *all), *one = malloc(n * sizeof *one);
    if (!all || !one) {
        free(all);
        free(one);
        return SG_ENOMEM;
    }
    if (!(b_us > a_us))
        goto done;
    out->span_s = (b_us - a_us) * 1e-6;
    int nall = 0, ngpu = 0;
    double busy = 0;
    span c;
    for (int s = 0; s < nsteps; s++)
        for (int i = 0; i < graphs[s]->nnodes; i++) {
            const sg_task_record *r = &records[s][i];
            if (!clip(r, a_us, b_us, &c))
                continue;
            out->busy_s[graphs[s]->nodes[i].device] += (c.b - c.a) * 1e-6;
            if (r->worker < nworkers && is_gpu[r->worker])
                all[nall++] = c;
        }
    for (int w = 0; w < nworkers; w++) {
        int k = 0;
        for (int s = 0; s < nsteps; s++)
            for (int i = 0; i < graphs[s]->nnodes; i++)
                if (records[s][i].worker == w && clip(&records[s][i], a_us, b_us, &c))
                    one[k++] = c;
        double b = total(one, merge(one, k));
        add_worker(out, is_gpu[w], b);
        if (!is_gpu[w])
            continue;
        busy += b;
        ngpu++;
    }
    if (ngpu)
        out->gpu_busy = busy / (ngpu * (b_us - a_us));
    nall = merge(all, nall);
    double hidden = 0;
    for (int s = 0; s < nsteps; s++)
        for (int i = 0; i < graphs[s]->nnodes; i++) {
            if (graphs[s]->nodes[i].kind != SG_OP_ADAM_CPU || !clip(&records[s][i], a_us, b_us, &c))
                continue;
            out->adam_cpu_s += (c.b - c.a) * 1e-6;
            hidden += overlap(all, nall, c.a, c.b) * 1e-6;
        }
    if (out->adam_cpu_s > 0)
        out->adam_hidden = hidden / out->adam_cpu_s;
done:
    free(all);
    free(one);
    return SG_OK;
}
