/* graph_view.c - a step graph with what its pictures show (graph_view.h). */
#include "runtime/cli/graph_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/critical_path.h"
#include "graph/disk_tier.h"
#include "runtime/config/machine.h"
#include "runtime/config/step_spec.h"

/* Heat per node from the trace's durations (the longest is 1). */
static void heat_of(const sg_graph *g, const sg_trace_times *t, double *heat)
{
    double longest = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (t->end_us[i] >= 0 && t->end_us[i] - t->start_us[i] > longest)
            longest = t->end_us[i] - t->start_us[i];
    for (int i = 0; i < g->nnodes; i++)
        heat[i] = t->end_us[i] < 0 ? -1
                  : longest > 0    ? (t->end_us[i] - t->start_us[i]) / longest
                                   : 0;
}

/* Where each node runs: planned (graph/phase_layout.h), or the kind of worker
 * its trace lane names for a task that ran on one (links keep their lane). */
static void places_of(const sg_graph *g, const sg_trace_times *t, unsigned char *where)
{
    for (int i = 0; i < g->nnodes; i++) {
        where[i] = (unsigned char)sg_where_planned(&g->nodes[i]);
        if (!t || g->nodes[i].device == SG_DEV_LINK || t->end_us[i] < 0 || t->lane[i] < 0 ||
            t->lane[i] >= t->nlanes)
            continue;
        int w = sg_where_of_lane(t->lane_names[t->lane[i]]);
        if (w == SG_WHERE_CPU || w == SG_WHERE_GPU)
            where[i] = (unsigned char)w;
    }
}

/* The machine of cfg->run.machine, if any, and its cost model (else the
 * ideal GH200's). */
static int cost_model(const sg_config *cfg, sg_graph_view *v, sg_error *err)
{
    sg_cost_model_gh200(&v->cm);
    if (!cfg->run.machine[0])
        return SG_OK;
    char path[4096];
    sg_step_spec spec;
    v->mach = calloc(1, sizeof *v->mach);
    int rc = v->mach ? sg_machine_resolve(cfg->run.machine, path, sizeof path, err)
                     : sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc)
        rc = sg_machine_load(path, v->mach, err);
    if (!rc) {
        /* the cost model keeps pointers into the machine: it lives with the view */
        sg_step_spec_for_machine(cfg, v->mach, &spec);
        sg_machine_cost_model(v->mach, spec.compute_dtype, &v->cm);
        snprintf(v->machine, sizeof v->machine, "%s", v->mach->name);
    }
    return rc;
}

/* ZeRO-Infinity's disk tier in the summary (graph/disk_tier.h): the host
 * figures without the state on disk, the disk's bytes; a machine without a
 * disk cannot hold it. */
static int disk_tier(const sg_config *cfg, sg_graph_view *v, sg_error *err)
{
    sg_step_spec spec;
    sg_disk_tier t;
    sg_step_spec_for_machine(cfg, v->mach, &spec);
    int rc = v->mach ? sg_spec_check_disk(&spec, v->mach, err) : SG_OK;
    if (!rc && sg_disk_tier_compute(&v->g, &spec, &t))
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc)
        sg_disk_tier_apply(&v->s, &t);
    return rc;
}

/* The executed critical path from the trace, and the traced step's length. */
static void executed_path(sg_graph_view *v)
{
    const sg_trace_times *t = &v->times;
    heat_of(&v->g, t, v->heat);
    sg_critical_path_timed(&v->g, t->start_us, t->end_us, t->lane, v->critical, &v->ncritical,
                           &v->wait_s);
    v->wait_s *= 1e-6;
    double t0 = -1, t1 = -1;
    for (int i = 0; i < v->g.nnodes; i++)
        if (t->end_us[i] >= 0) {
            t0 = t0 < 0 || t->start_us[i] < t0 ? t->start_us[i] : t0;
            t1 = t->end_us[i] > t1 ? t->end_us[i] : t1;
        }
    v->step_s = (t1 - t0) * 1e-6;
    if (v->ncritical)
        v->critical_s =
            (t->end_us[v->critical[v->ncritical - 1]] - t->start_us[v->critical[0]]) * 1e-6;
    v->critical_kind = "executed";
}

int sg_graph_view_build(const sg_config *cfg, int unfold, const char *times_path, sg_graph_view *v,
                        sg_error *err)
{
    memset(v, 0, sizeof *v);
    sg_graph_init(&v->g);
    v->model = calloc(1, sizeof *v->model);
    int rc = v->model ? SG_OK : sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc)
        rc = cost_model(cfg, v, err);
    /* with a machine, the graph `simulate` runs there (optimizer tiles and
     * cast placement resolved for it) */
    if (!rc)
        rc = sg_compile_for_machine(cfg, v->mach, v->model, &v->g, err);
    if (!rc && sg_summary_compute(&v->g, &v->cm, &v->s))
        rc = sg_error_set(err, SG_ENOMEM, "out of memory summarising the graph");
    if (!rc)
        rc = disk_tier(cfg, v, err);
    if (!rc && !unfold && sg_fold_compute(&v->g, &v->fold))
        rc = sg_error_set(err, SG_ENOMEM, "out of memory folding the graph");
    if (!rc && times_path) {
        rc = sg_trace_times_read(times_path, &v->g, &v->times, err);
        v->have_times = !rc;
    }
    size_t nn = (size_t)(v->g.nnodes > 0 ? v->g.nnodes : 1);
    if (!rc &&
        (!(v->critical = malloc(nn * sizeof *v->critical)) || !(v->critical_mask = calloc(nn, 1)) ||
         !(v->where = malloc(nn)) || (v->have_times && !(v->heat = malloc(nn * sizeof *v->heat)))))
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    if (!rc)
        places_of(&v->g, v->have_times ? &v->times : NULL, v->where);
    if (!rc && v->have_times)
        executed_path(v);
    else if (!rc && sg_critical_path_ideal(&v->g, &v->cm, v->critical, &v->ncritical))
        rc = sg_error_set(err, SG_ENOMEM, "out of memory");
    else if (!rc) {
        v->critical_s = v->s.critical_path_s;
        v->critical_kind = "ideal-machine";
    }
    for (int i = 0; !rc && i < v->ncritical; i++)
        v->critical_mask[v->critical[i]] = 1;
    if (!rc) {
        v->bound_s = sg_step_lower_bound(&v->s, &v->cm, &v->bound_by, NULL);
        v->style = (sg_dot_style){unfold ? NULL : &v->fold, v->heat, v->critical_mask, v->where};
    }
    if (rc)
        sg_graph_view_free(v);
    return rc;
}

void sg_graph_view_free(sg_graph_view *v)
{
    sg_graph_free(&v->g);
    sg_fold_free(&v->fold);
    sg_trace_times_free(&v->times);
    free(v->heat);
    free(v->critical);
    free(v->critical_mask);
    free(v->where);
    free(v->model);
    free(v->mach);
    memset(v, 0, sizeof *v);
}
