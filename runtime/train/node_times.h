/* node_times.h - how long each node's task took on the CPU workers, over
 * the measured steps of a run: what `stepgraph calibrate` saves beside
 * StarPU's history models so that a simulation can fit per-kind costs on
 * the nodes' FLOPs and bytes and predict task sizes that never ran
 * (runtime/sim/sim_costfit.h, `simulate --cost fitted`).
 *
 * The file is CSV with a header line:
 *
 *     name,kind,flops,attention_flops,bytes,mean_us,samples
 *
 * one line per node that ran on a CPU worker at least once (flops without
 * the attention part are flops - attention_flops; bytes are the node's bytes
 * read and written).
 */
#ifndef SG_NODE_TIMES_H
#define SG_NODE_TIMES_H

#include "common/error.h"
#include "graph/ir.h"
#include "graph/task_record.h"

typedef struct sg_node_times {
    int nnodes;
    double *sum_us;
    int64_t *samples;
} sg_node_times;

int sg_node_times_init(sg_node_times *nt, int nnodes);
void sg_node_times_free(sg_node_times *nt);

/* Adds the tasks of one step of graph g (records per node) that ran on a
 * CPU worker; is_cpu(worker) says which workers are CPU workers. Steps of
 * another graph (a different node count) are ignored. */
void sg_node_times_add(sg_node_times *nt, const sg_graph *g, const sg_task_record *records,
                       int (*is_cpu)(int worker));

/* Writes the file (atomically). */
int sg_node_times_write(const sg_node_times *nt, const sg_graph *g, const char *path,
                        sg_error *err);

#endif /* SG_NODE_TIMES_H */
