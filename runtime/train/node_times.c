/* node_times.c - per-node CPU task times of a run (node_times.h). */
#include "runtime/train/node_times.h"

#include <stdlib.h>

#include "common/atomic_file.h"

int sg_node_times_init(sg_node_times *nt, int nnodes)
{
    nt->nnodes = nnodes;
    nt->sum_us = calloc((size_t)(nnodes > 0 ? nnodes : 1), sizeof *nt->sum_us);
    nt->samples = calloc((size_t)(nnodes > 0 ? nnodes : 1), sizeof *nt->samples);
    if (!nt->sum_us || !nt->samples) {
        sg_node_times_free(nt);
        return SG_ENOMEM;
    }
    return SG_OK;
}

void sg_node_times_free(sg_node_times *nt)
{
    free(nt->sum_us);
    free(nt->samples);
    nt->sum_us = NULL;
    nt->samples = NULL;
    nt->nnodes = 0;
}

void sg_node_times_add(sg_node_times *nt, const sg_graph *g, const sg_task_record *records,
                       int (*is_cpu)(int worker))
{
    if (!nt->sum_us || g->nnodes != nt->nnodes)
        return;
    for (int i = 0; i < g->nnodes; i++) {
        const sg_task_record *r = &records[i];
        if (r->worker < 0 || !is_cpu(r->worker) || !(r->end_us >= r->start_us))
            continue;
        nt->sum_us[i] += r->end_us - r->start_us;
        nt->samples[i]++;
    }
}

int sg_node_times_write(const sg_node_times *nt, const sg_graph *g, const char *path,
                        sg_error *err)
{
    sg_atomic_file af;
    int rc = sg_atomic_open(&af, path, err);
    if (rc)
        return rc;
    fprintf(af.fp, "name,kind,flops,attention_flops,bytes,mean_us,samples\n");
    for (int i = 0; i < g->nnodes && i < nt->nnodes; i++) {
        const sg_node *nd = &g->nodes[i];
        if (nt->samples[i] == 0)
            continue;
        fprintf(af.fp, "%s,%s,%.17g,%.17g,%lld,%.9g,%lld\n", nd->name, sg_op_kind_name(nd->kind),
                nd->flops, nd->attention_flops, (long long)(nd->bytes_read + nd->bytes_written),
                nt->sum_us[i] / (double)nt->samples[i], (long long)nt->samples[i]);
    }
    if (ferror(af.fp))
        return sg_atomic_fail(&af, SG_EIO, err);
    return sg_atomic_commit(&af, err);
}
