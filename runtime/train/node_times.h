/* node_times.h - how long each node's task took on the CPU workers and on
 * the CUDA workers, over the measured steps of a run: what `stepgraph
 * calibrate` saves beside StarPU's history models so that a simulation can
 * fit per-kind costs on the nodes' FLOPs and bytes, apart for each device,
 * and predict task sizes that never ran (runtime/sim/sim_costfit.h,
 * `simulate --cost fitted`).
 *
 * The file is CSV with a header line:
 *
 *     name,kind,flops,attention_flops,bytes,mean_us,samples,device
 *
 * one line per node and device (cpu or gpu) it ran on at least once (flops
 * without the attention part are flops - attention_flops; bytes are the
 * node's bytes read and written). Files written before 2026-11-27 have no
 * device column and hold CPU times only.
 */
#ifndef SG_NODE_TIMES_H
#define SG_NODE_TIMES_H

#include "common/error.h"
#include "graph/ir.h"
#include "graph/task_record.h"

enum { SG_NODE_TIMES_CPU, SG_NODE_TIMES_GPU, SG_NODE_TIMES_DEVICES };

typedef struct sg_node_times {
    int nnodes;
    double *sum_us[SG_NODE_TIMES_DEVICES]; /* [device][node] */
    int64_t *samples[SG_NODE_TIMES_DEVICES];
} sg_node_times;

int sg_node_times_init(sg_node_times *nt, int nnodes);
void sg_node_times_free(sg_node_times *nt);

/* Adds the tasks of one step of graph g (records per node), each to its
 * device's sums: is_cpu(worker) says which workers are CPU workers (the
 * others are CUDA workers). Steps of another graph (a different node count)
 * are ignored. */
void sg_node_times_add(sg_node_times *nt, const sg_graph *g, const sg_task_record *records,
                       int (*is_cpu)(int worker));

/* Writes the file (atomically). */
int sg_node_times_write(const sg_node_times *nt, const sg_graph *g, const char *path,
                        sg_error *err);

#endif /* SG_NODE_TIMES_H */
