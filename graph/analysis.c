/* analysis.c - counts, link bytes, peak memory and critical path of a graph. */
#include "graph/analysis.h"

#include "graph/liveness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sg_cost_model_gh200(sg_cost_model *cm)
{
    memset(cm, 0, sizeof *cm);
    cm->name = "ideal GH200";
    cm->gpu_flops = 989e12;
    cm->gpu_mem_bw = 4.0e12;
    cm->cpu_flops = 72 * 3.1e9 * 32;
    cm->cpu_mem_bw = 500e9;
    cm->link_bw[SG_LINK_H2D] = 450e9;
    cm->link_bw[SG_LINK_D2H] = 450e9;
    cm->link_bw[SG_LINK_NET] = 450e9;
    cm->link_latency = 5e-6;
    for (int k = 0; k < SG_OP_KIND_COUNT; k++)
        cm->efficiency[k] = 1.0;
    cm->gpu_mem_bytes = 96e9;
    cm->host_mem_bytes = 480e9;
}

static double roofline_seconds(const sg_cost_model *cm, const sg_node *n)
{
    double bytes = (double)(n->bytes_read + n->bytes_written);
    switch (n->device) {
    case SG_DEV_LINK: {
        double bw = cm->link_bw[n->link] > 0 ? cm->link_bw[n->link] : 1e12;
        return cm->link_latency + (double)n->link_bytes / bw;
    }
    case SG_DEV_CPU: {
        double tc = n->flops / cm->cpu_flops, tm = bytes / cm->cpu_mem_bw;
        return tc > tm ? tc : tm;
    }
    default: {
        double tc = n->flops / cm->gpu_flops, tm = bytes / cm->gpu_mem_bw;
        return tc > tm ? tc : tm;
    }
    }
}

double sg_node_ideal_seconds(const sg_cost_model *cm, const sg_node *n)
{
    /* kinds whose accesses are only dependencies (SuperOffload's validation
     * reads the norm; the sub-group it lists is rewritten only on a rare
     * rollback) cost what the simulator charges them: next to nothing */
    const sg_op_kind_info *info = sg_op_kind_info_of(n->kind);
    if (n->kind == SG_OP_VALIDATE && cm->validate_passes > 0) {
        double eff = cm->efficiency[SG_OP_ADAM_CPU];
        return cm->validate_passes * roofline_seconds(cm, n) / (eff > 0 ? eff : 1.0);
    }
    if (info && info->cost_rule == SG_COST_OVERHEAD)
        return 0.0;
    if (cm->gpu_seconds && n->device == SG_DEV_GPU && !cm->no_gpu)
        return cm->gpu_seconds(cm->gpu_ctx, n);
    double eff = cm->efficiency[n->kind];
    return roofline_seconds(cm, n) / (eff > 0 ? eff : 1.0);
}

int sg_graph_bottom_levels(const sg_graph *g, const sg_cost_model *cm, double *out)
{
    sg_adjacency succ;
    if (sg_graph_successors(g, &succ))
        return SG_ENOMEM;
    /* edges go forward in program order, so reverse order is a reverse
     * topological order */
    for (int n = g->nnodes - 1; n >= 0; n--) {
        double best = 0.0;
        for (int k = succ.offset[n]; k < succ.offset[n + 1]; k++)
            if (out[succ.target[k]] > best)
                best = out[succ.target[k]];
        out[n] = best + sg_node_ideal_seconds(cm, &g->nodes[n]);
    }
    sg_adjacency_free(&succ);
    return SG_OK;
}

/* Peak of the live bytes per space (merge: one space holding both) with
 * the liveness of liveness.h: a value counts from the node it is born at to
 * the node it dies after, both included. */
static int peak_sweep(const sg_graph *g, int merge, int64_t peak[SG_MEM_COUNT],
                      int64_t persistent[SG_MEM_COUNT])
{
    sg_liveness lv;
    if (sg_graph_liveness(g, &lv))
        return SG_ENOMEM;
    for (int s = 0; s < SG_MEM_COUNT; s++)
        peak[s] = persistent[s] = 0;
    for (int b = 0; b < g->nbuffers; b++)
        if (g->buffers[b].persistent)
            persistent[merge ? 0 : g->buffers[b].space] += g->buffers[b].bytes;
    int64_t live[SG_MEM_COUNT] = {0}, best[SG_MEM_COUNT] = {0};
    for (int n = 0; n < g->nnodes; n++) {
        for (int k = lv.born_offset[n]; k < lv.born_offset[n + 1]; k++) {
            const sg_buffer *buf = &g->buffers[lv.born[k]];
            int s = merge ? 0 : buf->space;
            live[s] += buf->bytes;
            if (live[s] > best[s])
                best[s] = live[s];
        }
        for (int k = lv.dies_offset[n]; k < lv.dies_offset[n + 1]; k++) {
            const sg_buffer *buf = &g->buffers[lv.dies[k]];
            live[merge ? 0 : buf->space] -= buf->bytes;
        }
    }
    for (int s = 0; s < SG_MEM_COUNT; s++)
        peak[s] = persistent[s] + best[s];
    sg_liveness_free(&lv);
    return SG_OK;
}

int sg_graph_peak_memory(const sg_graph *g, int64_t peak[SG_MEM_COUNT],
                         int64_t persistent[SG_MEM_COUNT])
{
    return peak_sweep(g, 0, peak, persistent);
}

int sg_graph_peak_memory_one_space(const sg_graph *g, int64_t *peak, int64_t *persistent)
{
    int64_t p[SG_MEM_COUNT], q[SG_MEM_COUNT];
    int rc = peak_sweep(g, 1, p, q);
    *peak = p[0];
    *persistent = q[0];
    return rc;
}

int sg_summary_compute(const sg_graph *g, const sg_cost_model *cm, sg_summary *s)
{
    memset(s, 0, sizeof *s);
    s->nnodes = g->nnodes;
    s->nedges = g->nedges;
    s->nbuffers = g->nbuffers;
    s->cost_model_name = cm->name;
    s->capacity_bytes[SG_MEM_GPU] = cm->gpu_mem_bytes;
    s->capacity_bytes[SG_MEM_HOST] = cm->host_mem_bytes;
    s->unified_memory = cm->unified_memory;
    s->disk_capacity_bytes = cm->disk_bytes;
    for (int n = 0; n < g->nnodes; n++) {
        const sg_node *node = &g->nodes[n];
        s->count[node->kind]++;
        s->flops_total += node->flops;
        s->flops_by_device[node->device] += node->flops;
        s->link_bytes[node->link] += node->link_bytes;
        double sec = sg_node_ideal_seconds(cm, node);
        s->work_s[node->device] += sec;
        const sg_op_kind_info *info = sg_op_kind_info_of(node->kind);
        if (node->pinned || !info || info->placement != SG_PLACE_EITHER)
            s->fixed_work_s[node->device] += sec;
    }
    if (sg_graph_peak_memory(g, s->peak_bytes, s->persistent_bytes))
        return SG_ENOMEM;
    double *bl = malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof(double));
    sg_adjacency succ;
    if (!bl || sg_graph_successors(g, &succ)) {
        free(bl);
        return SG_ENOMEM;
    }
    if (sg_graph_bottom_levels(g, cm, bl)) {
        free(bl);
        sg_adjacency_free(&succ);
        return SG_ENOMEM;
    }
    /* the critical path starts at the source with the largest bottom level;
     * follow the successor that carries it */
    int cur = -1;
    for (int n = 0; n < g->nnodes; n++)
        if (cur < 0 || bl[n] > bl[cur])
            cur = n;
    s->critical_path_s = cur >= 0 ? bl[cur] : 0.0;
    while (cur >= 0) {
        s->critical_path_nodes++;
        int next = -1;
        for (int k = succ.offset[cur]; k < succ.offset[cur + 1]; k++)
            if (next < 0 || bl[succ.target[k]] > bl[next])
                next = succ.target[k];
        cur = next;
    }
    sg_adjacency_free(&succ);
    free(bl);
    return SG_OK;
}

/* feeds_host[i]: node i is a copy or collective on a path of copies and
 * collectives that ends in a node the CPU runs (a sub-group's gradient
 * reduce-scatter and device-to-host copy, feeding its CPU Adam). */
static int mark_host_feeders(const sg_graph *g, char *feeds_host)
{
    sg_adjacency adj;
    if (sg_graph_successors(g, &adj))
        return SG_ENOMEM;
    for (int i = g->nnodes - 1; i >= 0; i--) { /* program order is topological */
        feeds_host[i] = 0;
        if (sg_op_kind_info_of(g->nodes[i].kind)->phase != SG_PHASE_TRANSFER)
            continue;
        for (int e = adj.offset[i]; e < adj.offset[i + 1] && !feeds_host[i]; e++) {
            int s = adj.target[e];
            feeds_host[i] = g->nodes[s].device == SG_DEV_CPU || feeds_host[s];
        }
    }
    sg_adjacency_free(&adj);
    return SG_OK;
}

int sg_graph_set_priorities(sg_graph *g, const sg_cost_model *cm)
{
    size_t n = (size_t)(g->nnodes > 0 ? g->nnodes : 1);
    double *bl = malloc(n * sizeof *bl);
    char *feeds_host = malloc(n);
    if (!bl || !feeds_host || sg_graph_bottom_levels(g, cm, bl) ||
        mark_host_feeders(g, feeds_host)) {
        free(bl);
        free(feeds_host);
        return SG_ENOMEM;
    }
    /* Bottom levels, except that the copies and collectives feeding host
     * work come first (in bottom-level order among themselves): each takes
     * little of the worker that runs it and unlocks work on other cores. By
     * bottom level alone, a sub-group's gradient copy waits behind the rest
     * of the backward (a longer path) and the CPU optimizer starts only when
     * the GPU is done: with dmdas on gh200 that cost 27% of the step. */
    double top = 0;
    for (int i = 0; i < g->nnodes; i++)
        top = bl[i] > top ? bl[i] : top;
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i].priority = (int64_t)((bl[i] + (feeds_host[i] ? top : 0)) * 1e6);
    free(bl);
    free(feeds_host);
    return SG_OK;
}

double sg_step_lower_bound(const sg_summary *s, const sg_cost_model *cm, const char **bound_by,
                           const char **short_name)
{
    struct {
        const char *what, *brief;
        double sec;
    } part[] = {
        /* tasks the scheduler may place on either side count on neither */
        {"GPU compute (every GPU task back to back at its modelled time)", "GPU compute",
         s->fixed_work_s[SG_DEV_GPU]},
        {"CPU work (every CPU task back to back at the socket's roofline)", "CPU work",
         s->fixed_work_s[SG_DEV_CPU]},
        {"the host-to-device link", "h2d link",
         cm->link_bw[SG_LINK_H2D] > 0
             ? (double)s->link_bytes[SG_LINK_H2D] / cm->link_bw[SG_LINK_H2D]
             : 0},
        {"the device-to-host link", "d2h link",
         cm->link_bw[SG_LINK_D2H] > 0
             ? (double)s->link_bytes[SG_LINK_D2H] / cm->link_bw[SG_LINK_D2H]
             : 0},
        {"the critical path (dependencies)", "critical path", s->critical_path_s},
        /* ZeRO-Infinity's disk: reads and writes share the device */
        {"the disk (the state on disk read and written at its bandwidths)", "disk",
         (cm->disk_read_bw > 0 ? (double)s->disk_read_bytes / cm->disk_read_bw : 0) +
             (cm->disk_write_bw > 0 ? (double)s->disk_write_bytes / cm->disk_write_bw : 0)},
    };
    if (cm->no_gpu && cm->gpu_flops > 0) {
        /* A CPU-only machine: the GPU-side tasks run one per core (their times
         * are one core's), the CPU tasks at the socket's roofline; together
         * they cannot take less than their core-seconds over all the cores. */
        double cores = cm->cpu_flops / cm->gpu_flops;
        part[0].what = "CPU compute (no GPU: every task's core-seconds over all the cores)";
        part[0].brief = "CPU compute";
        part[0].sec =
            s->fixed_work_s[SG_DEV_GPU] / (cores > 1 ? cores : 1) + s->fixed_work_s[SG_DEV_CPU];
        part[1].sec = 0; // counted in part[0]
    }
    int best = 0;
    for (int i = 1; i < (int)(sizeof part / sizeof *part); i++)
        if (part[i].sec > part[best].sec)
            best = i;
    if (bound_by)
        *bound_by = part[best].what;
    if (short_name)
        *short_name = part[best].brief;
    return part[best].sec;
}
