/* step_trace.c - Chrome trace of one step's records (step_trace.h). */
#include "runtime/trace/step_trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/critical_path.h"

#include "runtime/trace/trace.h"

/* The record drawn for node i, and its lane: workers 0..W-1, then one lane
 * per link direction. */
static const sg_task_record *drawn(const sg_step_view *v, int i, int *lane)
{
    const sg_node *nd = &v->graph->nodes[i];
    if (nd->device == SG_DEV_LINK) {
        *lane = v->nworkers + (int)nd->link;
        if (v->link_spans && v->link_spans[i].worker >= 0)
            return &v->link_spans[i];
    } else {
        *lane = v->records[i].worker;
    }
    return &v->records[i];
}

static int write_lanes(sg_trace *t, const sg_step_view *v)
{
    int rc = SG_OK;
    char label[80];
    for (int w = 0; w < v->nworkers && !rc; w++)
        rc = sg_trace_lane(t, w, v->worker_names[w], w);
    for (int l = SG_LINK_H2D; l < SG_LINK_COUNT && !rc; l++) {
        snprintf(label, sizeof label, "link %s", sg_link_dir_name((sg_link_dir)l));
        rc = sg_trace_lane(t, v->nworkers + l, label, v->nworkers + l);
    }
    return rc;
}

/* A simulation's disk reads and write-backs (sg_step_view.disk_spans) on
 * two lanes after the critical path's; their args name the node as
 * "disk_of" (not "node": trace readers take tasks from the worker lanes). */
static int write_disk_lanes(sg_trace *t, const sg_step_view *v)
{
    int base = v->nworkers + SG_LINK_COUNT + 1, rc = SG_OK;
    static const char *const what[2] = {"read", "write"};
    for (int k = 0; k < 2 && !rc; k++) {
        char label[32];
        snprintf(label, sizeof label, "disk %s", what[k]);
        rc = sg_trace_lane(t, base + k, label, base + k);
    }
    for (int i = 0; i < v->graph->nnodes && !rc; i++)
        for (int k = 0; k < 2 && !rc; k++) {
            const sg_task_record *r = &v->disk_spans[2 * i + k];
            if (r->worker < 0)
                continue;
            char name[SG_IR_NAME_MAX + 16], args[96];
            snprintf(name, sizeof name, "disk.%s.%s", what[k], v->graph->nodes[i].name);
            snprintf(args, sizeof args, "{\"disk_of\":%d,\"direction\":\"%s\"}", i, what[k]);
            rc = sg_trace_event(t, base + k, name, "disk", r->start_us - v->t0_us,
                                r->end_us - r->start_us, args);
        }
    return rc;
}

/* The executed critical path (graph/critical_path.h) drawn again in a lane of
 * its own, so that the chain that set the step's length reads left to right;
 * those copies carry "on_path" instead of "node" (trace readers take the
 * tasks from the worker lanes). */
static int write_critical_lane(sg_trace *t, const sg_step_view *v)
{
    const sg_graph *g = v->graph;
    int n = g->nnodes, rc = SG_OK;
    double *start = malloc((size_t)(n > 0 ? n : 1) * sizeof *start);
    double *end = malloc((size_t)(n > 0 ? n : 1) * sizeof *end);
    int *lane = malloc((size_t)(n > 0 ? n : 1) * sizeof *lane);
    int *path = malloc((size_t)(n > 0 ? n : 1) * sizeof *path);
    if (!start || !end || !lane || !path)
        rc = SG_ENOMEM;
    for (int i = 0; !rc && i < n; i++) {
        const sg_task_record *r = drawn(v, i, &lane[i]);
        int ran = v->records[i].worker >= 0;
        start[i] = ran ? r->start_us : -1;
        end[i] = ran ? r->end_us : -1;
    }
    int np = 0;
    double wait = 0;
    if (!rc)
        sg_critical_path_timed(g, start, end, lane, path, &np, &wait);
    int cl = v->nworkers + SG_LINK_COUNT;
    if (!rc && np)
        rc = sg_trace_lane(t, cl, "critical path", cl);
    for (int k = 0; !rc && k < np; k++) {
        char args[128];
        snprintf(args, sizeof args, "{\"on_path\":%d,\"position\":%d,\"kind\":\"%s\"}", path[k], k,
                 sg_op_kind_name(g->nodes[path[k]].kind));
        rc = sg_trace_event(t, cl, g->nodes[path[k]].name, "critical path",
                            start[path[k]] - v->t0_us, end[path[k]] - start[path[k]], args);
    }
    free(start);
    free(end);
    free(lane);
    free(path);
    return rc;
}

/* The NUMA node of the first placed buffer node nd touches, or -1. */
static int data_numa(const sg_step_view *v, const sg_node *nd)
{
    for (int a = 0; a < nd->naccess; a++)
        if (v->buffer_numa[nd->access[a].buffer] >= 0)
            return v->buffer_numa[nd->access[a].buffer];
    return -1;
}

static int write_event(sg_trace *t, const sg_step_view *v, int i)
{
    const sg_node *nd = &v->graph->nodes[i];
    int lane, w = v->records[i].worker;
    const sg_task_record *r = drawn(v, i, &lane);
    char args[512];
    int at = snprintf(
        args, sizeof args,
        "{\"node\":%d,\"kind\":\"%s\",\"layer\":%d,\"micro_step\":%d,\"subgroup\":%d,"
        "\"device_class\":\"%s\",\"worker\":\"%s\",\"flops\":%.0f,\"bytes_read\":%lld,"
        "\"bytes_written\":%lld",
        i, sg_op_kind_name(nd->kind), nd->layer, nd->micro_step, nd->subgroup,
        sg_device_class_name(nd->device), w >= 0 && w < v->nworkers ? v->worker_names[w] : "?",
        nd->flops, (long long)nd->bytes_read, (long long)nd->bytes_written);
    if (v->worker_numa && v->buffer_numa && at > 0 && (size_t)at < sizeof args)
        at += snprintf(args + at, sizeof args - (size_t)at, ",\"numa\":%d,\"data_numa\":%d",
                       w >= 0 && w < v->nworkers ? v->worker_numa[w] : -1, data_numa(v, nd));
    if (at > 0 && (size_t)at < sizeof args - 1)
        snprintf(args + at, sizeof args - (size_t)at, "}");
    return sg_trace_event(t, lane, nd->name, sg_op_kind_name(nd->kind), r->start_us - v->t0_us,
                          r->end_us - r->start_us, args);
}

int sg_step_trace_write(const sg_step_view *v, const char *path, sg_error *err)
{
    const sg_graph *g = v->graph;
    sg_trace t;
    int rc = sg_trace_open(&t, path, err);
    if (rc)
        return rc;
    rc = write_lanes(&t, v);
    for (int i = 0; i < g->nnodes && !rc; i++)
        if (v->records[i].worker >= 0)
            rc = write_event(&t, v, i);
    if (!rc)
        rc = write_critical_lane(&t, v);
    if (!rc && v->disk_spans)
        rc = write_disk_lanes(&t, v);
    /* one arrow per dependency, from inside the producer to inside the consumer */
    for (int e = 0; e < g->nedges && !rc; e++) {
        int la, lb;
        if (v->records[g->edges[e].from].worker < 0 || v->records[g->edges[e].to].worker < 0)
            continue;
        const sg_task_record *a = drawn(v, g->edges[e].from, &la);
        const sg_task_record *b = drawn(v, g->edges[e].to, &lb);
        double from = fmax(a->start_us, a->end_us - 0.001) - v->t0_us;
        double to = fmin(b->end_us, b->start_us + 0.001) - v->t0_us;
        rc = sg_trace_flow(&t, e, la, from, lb, to);
    }
    if (rc) {
        int e = errno;
        int stream = t.file.fp && ferror(t.file.fp);
        sg_trace_abort(&t);
        return sg_error_set(err, rc, "%s: cannot write the trace%s%s", path, stream ? ": " : "",
                            stream ? strerror(e) : "");
    }
    return sg_trace_close(&t, err);
}
