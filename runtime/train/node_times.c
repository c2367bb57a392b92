/* node_times.c - per-node task times of a run, per device (node_times.h). */
#include "runtime/train/node_times.h"

#include <stdlib.h>

#include "common/atomic_file.h"

static const char *const DEVICE_NAME[SG_NODE_TIMES_DEVICES] = {"cpu", "gpu"};

int sg_node_times_init(sg_node_times *nt, int nnodes)
{
    nt->nnodes = nnodes;
    size_t n = (size_t)(nnodes > 0 ? nnodes : 1);
    int ok = 1;
    for (int d = 0; d < SG_NODE_TIMES_DEVICES; d++) {
        nt->sum_us[d] = calloc(n, sizeof *nt->sum_us[d]);
        nt->samples[d] = calloc(n, sizeof *nt->samples[d]);
        ok = ok && nt->sum_us[d] && nt->samples[d];
    }
    if (!ok) {
        sg_node_times_free(nt);
        return SG_ENOMEM;
    }
    return SG_OK;
}

void sg_node_times_free(sg_node_times *nt)
{
    for (int d = 0; d < SG_NODE_TIMES_DEVICES; d++) {
        free(nt->sum_us[d]);
        free(nt->samples[d]);
        nt->sum_us[d] = NULL;
        nt->samples[d] = NULL;
    }
    nt->nnodes = 0;
}

void sg_node_times_add(sg_node_times *nt, const sg_graph *g, const sg_task_record *records,
                       int (*is_cpu)(int worker))
{
    if (!nt->sum_us[0] || g->nnodes != nt->nnodes)
        return;
    for (int i = 0; i < g->nnodes; i++) {
        const sg_task_record *r = &records[i];
        if (r->worker < 0 || !(r->end_us >= r->start_us))
            continue;
        int d = is_cpu(r->worker) ? SG_NODE_TIMES_CPU : SG_NODE_TIMES_GPU;
        nt->sum_us[d][i] += r->end_us - r->start_us;
        nt->samples[d][i]++;
    }
}

int sg_node_times_write(const sg_node_times *nt, const sg_graph *g, const char *path, sg_error *err)
{
    sg_atomic_file af;
    int rc = sg_atomic_open(&af, path, err);
    if (rc)
        return rc;
    fprintf(af.fp, "name,kind,flops,attention_flops,bytes,mean_us,samples,device\n");
    for (int d = 0; d < SG_NODE_TIMES_DEVICES; d++)
        for (int i = 0; i < g->nnodes && i < nt->nnodes; i++) {
            const sg_node *nd = &g->nodes[i];
            if (nt->samples[d][i] == 0)
                continue;
            fprintf(af.fp, "%s,%s,%.17g,%.17g,%lld,%.9g,%lld,%s\n", nd->name,
                    sg_op_kind_name(nd->kind), nd->flops, nd->attention_flops,
                    (long long)(nd->bytes_read + nd->bytes_written),
                    nt->sum_us[d][i] / (double)nt->samples[d][i], (long long)nt->samples[d][i],
                    DEVICE_NAME[d]);
        }
    if (ferror(af.fp))
        return sg_atomic_fail(&af, SG_EIO, err);
    return sg_atomic_commit(&af, err);
}
