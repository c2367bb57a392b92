/* timeline.c - phase times and Chrome traces of a step (timeline.h). */
#include "runtime/train/timeline.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/exec/numa_place.h"
#include "runtime/trace/step_trace.h"

/* The phase column of graph/op_kinds.h. */
static double *phase_of(const sg_node *nd, sg_phase_times *p)
{
    const sg_op_kind_info *info = sg_op_kind_info_of(nd->kind);
    switch (info ? info->phase : SG_PHASE_OPTIMIZER) {
    case SG_PHASE_FORWARD: return &p->forward_s;
    case SG_PHASE_BACKWARD: return &p->backward_s;
    case SG_PHASE_TRANSFER: return &p->transfer_s;
    default: return &p->optimizer_s;
    }
}

void sg_timeline_phases(const sg_exec *x, sg_phase_times *out)
{
    memset(out, 0, sizeof *out);
    const sg_graph *g = sg_exec_last_graph(x);
    for (int i = 0; i < g->nnodes; i++) {
        const sg_task_record *r = &sg_exec_last_records(x)[i];
        if (r->worker >= 0)
            *phase_of(&g->nodes[i], out) += (r->end_us - r->start_us) * 1e-6;
    }
}

/* With the state placed per NUMA node (numa_place.h): each worker's node and
 * each placed buffer's, for the trace's "numa" and "data_numa". */
static int numa_view(const sg_exec *x, sg_step_view *v, int **wn, int **bn, sg_error *err)
{
    *wn = *bn = NULL;
    const sg_lowering *low = sg_exec_last_lowering(x);
    if (!low->numa.buffer_node)
        return SG_OK; /* nothing placed: run option numa off */
    int nb = v->graph->nbuffers;
    *wn = malloc((size_t)(v->nworkers > 0 ? v->nworkers : 1) * sizeof **wn);
    *bn = malloc((size_t)(nb > 0 ? nb : 1) * sizeof **bn);
    if (!*wn || !*bn)
        return sg_error_set(err, SG_ENOMEM, "out of memory");
    for (int w = 0; w < v->nworkers; w++)
        (*wn)[w] = sg_numa_worker_os_index(w);
    for (int b = 0; b < nb; b++)
        (*bn)[b] = sg_numa_os_index(low->numa.buffer_node[b]);
    v->worker_numa = *wn;
    v->buffer_numa = *bn;
    return SG_OK;
}

int sg_timeline_write_trace(const sg_exec *x, const char *path, sg_error *err)
{
    int nworkers = sg_exec_worker_count();
    char(*names)[64] = calloc((size_t)(nworkers > 0 ? nworkers : 1), sizeof *names);
    const char **ptrs = calloc((size_t)(nworkers > 0 ? nworkers : 1), sizeof *ptrs);
    int *wn = NULL, *bn = NULL;
    int rc = (!names || !ptrs) ? sg_error_set(err, SG_ENOMEM, "out of memory") : SG_OK;
    for (int w = 0; w < nworkers && !rc; w++)
        ptrs[w] = sg_exec_worker_name(w, names[w], sizeof names[w]);
    sg_step_view v = {.graph = sg_exec_last_graph(x),
                      .records = sg_exec_last_records(x),
                      .nworkers = nworkers,
                      .worker_names = ptrs,
                      .t0_us = x->step_start_us};
    if (!rc)
        rc = numa_view(x, &v, &wn, &bn, err);
    if (!rc)
        rc = sg_step_trace_write(&v, path, err);
    free(names);
    free(ptrs);
    free(wn);
    free(bn);
    return rc;
}
