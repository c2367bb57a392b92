/* sim_disk.c - the disk of ZeRO-Infinity's state in a simulated step (sim_disk.h). */
#include "runtime/sim/sim_disk.h"

#include <stdlib.h>
#include <string.h>

#include "graph/disk_tier.h"

int sg_sim_disk_init(sg_sim_disk *d, const sg_graph *g, const sg_step_spec *spec,
                     const sg_machine *m, int record_run, sg_error *err)
{
    memset(d, 0, sizeof *d);
    d->record_run = record_run;
    size_t n = (size_t)(g->nnodes > 0 ? g->nnodes : 1);
    d->n = g->nnodes;
    d->read = calloc(n, sizeof *d->read);
    d->write = calloc(n, sizeof *d->write);
    d->prefetch = calloc(n, sizeof *d->prefetch);
    d->runs = calloc(n, sizeof *d->runs);
    d->issued = calloc(n, sizeof *d->issued);
    d->ready_at = calloc(n, sizeof *d->ready_at);
    d->spans = malloc(2 * n * sizeof *d->spans);
    if (!d->read || !d->write || !d->prefetch || !d->runs || !d->issued || !d->ready_at ||
        !d->spans || sg_disk_tier_node_bytes(g, spec, d->read, d->write, d->prefetch)) {
        sg_sim_disk_free(d);
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < 2 * n; i++)
        d->spans[i] = (sg_task_record){-1, 0, 0};
    for (int i = 0; i < g->nnodes; i++)
        d->active |= d->read[i] > 0 || d->write[i] > 0;
    d->window =
        spec->nvme_buffer_count > 0 ? spec->nvme_buffer_count : SG_DISK_BUFFER_COUNT_DEFAULT;
    d->read_bw = m->disk_read_gbs * 1e9;
    d->write_bw = m->disk_write_gbs * 1e9;
    if (d->active && (d->read_bw <= 0 || d->write_bw <= 0)) {
        sg_sim_disk_free(d);
        return sg_error_set(err, SG_EINVAL,
                            "machine %s gives no disk bandwidth (disk.read_gbs, "
                            "disk.write_gbs) for the step's state on disk (\"nvme\")",
                            m->name);
    }
    return SG_OK;
}

void sg_sim_disk_free(sg_sim_disk *d)
{
    free(d->read);
    free(d->write);
    free(d->prefetch);
    free(d->runs);
    free(d->issued);
    free(d->ready_at);
    free(d->spans);
    memset(d, 0, sizeof *d);
}

/* Queues `bytes` at `bw` from `now` behind the requests before; the span
 * it takes goes to *span when the request is of the run drawn. Returns
 * when it is done. */
static double queue(sg_sim_disk *d, double now, int64_t bytes, double bw, int run,
                    sg_task_record *span)
{
    double start = now > d->free_at ? now : d->free_at;
    d->free_at = start + (double)bytes / bw;
    if (run == d->record_run)
        *span = (sg_task_record){0, start * 1e6, d->free_at * 1e6};
    return d->free_at;
}

/* Node j's read for run `run` (its next begin). */
static void issue_read(sg_sim_disk *d, int j, int run, double now)
{
    d->ready_at[j] = queue(d, now, d->read[j], d->read_bw, run, &d->spans[2 * j]);
    d->issued[j] = run;
}

/* The reads of the tiles after `node` in program order, for the same
 * run (step), until `window` tiles (node's included) are in RAM or on
 * their way; a tile whose task already began this step is not ahead. */
static void read_ahead(sg_sim_disk *d, int node, int run, double now)
{
    int64_t ahead = 1;
    for (int j = node + 1; j < d->n && ahead < d->window; j++) {
        if (!d->prefetch[j] || d->runs[j] >= run)
            continue;
        if (d->issued[j] != run)
            issue_read(d, j, run, now);
        ahead++;
    }
}

double sg_sim_disk_begin(sg_sim_disk *d, int node, double now)
{
    if (!d->active || node < 0 || node >= d->n)
        return now;
    int run = ++d->runs[node];
    if (d->read[node] <= 0)
        return now;
    if (d->issued[node] != run)
        issue_read(d, node, run, now);
    if (d->prefetch[node])
        read_ahead(d, node, run, now);
    return d->ready_at[node] > now ? d->ready_at[node] : now;
}

double sg_sim_disk_end(sg_sim_disk *d, int node, double now)
{
    if (!d->active || node < 0 || node >= d->n || d->write[node] <= 0)
        return now;
    return queue(d, now, d->write[node], d->write_bw, d->runs[node], &d->spans[2 * node + 1]);
}

void sg_sim_disk_totals(const sg_sim_disk *d, int64_t *read, int64_t *write, double *busy_s)
{
    *read = *write = 0;
    *busy_s = 0;
    for (int i = 0; d->active && i < d->n; i++) {
        const sg_task_record *r = &d->spans[2 * i], *w = &d->spans[2 * i + 1];
        if (r->worker >= 0) {
            *read += d->read[i];
            *busy_s += (r->end_us - r->start_us) * 1e-6;
        }
        if (w->worker >= 0) {
            *write += d->write[i];
            *busy_s += (w->end_us - w->start_us) * 1e-6;
        }
    }
}
