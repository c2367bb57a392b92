/* timeline.c - phase times and Chrome traces of a step (timeline.h). */
#include "runtime/timeline.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/trace.h"

static double *phase_of(const sg_node *nd, sg_phase_times *p)
{
    if (nd->device == SG_DEV_LINK)
        return &p->transfer_s;
    switch (nd->kind) {
    case SG_OP_FORWARD:
        return &p->forward_s;
    case SG_OP_BACKWARD:
    case SG_OP_RECOMPUTE:
        return &p->backward_s;
    default:
        return &p->optimizer_s;
    }
}

void sg_timeline_phases(const sg_exec *x, sg_phase_times *out)
{
    memset(out, 0, sizeof *out);
    const sg_graph *g = x->graph;
    for (int i = 0; i < g->nnodes; i++) {
        const sg_task_record *r = &x->records[i];
        if (r->worker >= 0)
            *phase_of(&g->nodes[i], out) += (r->end_us - r->start_us) * 1e-6;
    }
}

/* Lanes: workers 0..W-1, then one per link direction. */
static int lane_of(const sg_exec *x, int node, int nworkers)
{
    const sg_node *nd = &x->graph->nodes[node];
    if (nd->device == SG_DEV_LINK)
        return nworkers + (int)nd->link;
    return x->records[node].worker;
}

static int write_lanes(sg_trace *t, int nworkers)
{
    int rc = SG_OK;
    char name[64], label[80];
    for (int w = 0; w < nworkers && !rc; w++) {
        sg_exec_worker_name(w, name, sizeof name);
        rc = sg_trace_lane(t, w, name, w);
    }
    for (int l = SG_LINK_H2D; l < SG_LINK_COUNT && !rc; l++) {
        snprintf(label, sizeof label, "link %s", sg_link_dir_name((sg_link_dir)l));
        rc = sg_trace_lane(t, nworkers + l, label, nworkers + l);
    }
    return rc;
}

static int write_event(sg_trace *t, const sg_exec *x, int i, int lane)
{
    const sg_node *nd = &x->graph->nodes[i];
    const sg_task_record *r = &x->records[i];
    char args[512], wname[64];
    sg_exec_worker_name(r->worker, wname, sizeof wname);
    snprintf(args, sizeof args,
             "{\"node\":%d,\"kind\":\"%s\",\"layer\":%d,\"micro_step\":%d,\"subgroup\":%d,"
             "\"device_class\":\"%s\",\"worker\":\"%s\",\"flops\":%.0f,\"bytes_read\":%lld,"
             "\"bytes_written\":%lld}",
             i, sg_op_kind_name(nd->kind), nd->layer, nd->micro_step, nd->subgroup,
             sg_device_class_name(nd->device), wname, nd->flops, (long long)nd->bytes_read,
             (long long)nd->bytes_written);
    return sg_trace_event(t, lane, nd->name, sg_op_kind_name(nd->kind),
                          r->start_us - x->step_start_us, r->end_us - r->start_us, args);
}

int sg_timeline_write_trace(const sg_exec *x, const char *path, sg_error *err)
{
    const sg_graph *g = x->graph;
    int nworkers = sg_exec_worker_count();
    sg_trace t;
    int rc = sg_trace_open(&t, path, err);
    if (rc)
        return rc;
    rc = write_lanes(&t, nworkers);
    for (int i = 0; i < g->nnodes && !rc; i++)
        if (x->records[i].worker >= 0)
            rc = write_event(&t, x, i, lane_of(x, i, nworkers));
    /* one arrow per dependency, from inside the producer to inside the consumer */
    for (int e = 0; e < g->nedges && !rc; e++) {
        const sg_task_record *a = &x->records[g->edges[e].from], *b = &x->records[g->edges[e].to];
        if (a->worker < 0 || b->worker < 0)
            continue;
        double from = fmax(a->start_us, a->end_us - 0.001) - x->step_start_us;
        double to = fmin(b->end_us, b->start_us + 0.001) - x->step_start_us;
        rc = sg_trace_flow(&t, e, lane_of(x, g->edges[e].from, nworkers), from,
                           lane_of(x, g->edges[e].to, nworkers), to);
    }
    if (rc) {
        sg_trace_abort(&t);
        return sg_error_set(err, rc, "%s: cannot write the trace", path);
    }
    return sg_trace_close(&t, err);
}
