/* liveness.h - when each step-local buffer's value is born and dies.
 *
 * One rule, shared by the plan (sg_graph_peak_memory in analysis.c) and the
 * execution (runtime/exec/lower.c invalidates a buffer right after the node
 * its value dies after), so the planned peak and what StarPU holds agree by
 * construction:
 *
 * - a persistent buffer (weights, optimizer state, tokens) is always live;
 * - a buffer the host reads after the step (sg_buffer_outlives_step: the
 *   losses, the norm, the overflow flag) lives from its first access to the
 *   end of the step and beyond;
 * - any other buffer holds one value from a node that writes it without
 *   reading it (merged mode W: the value before is not needed) to the last
 *   node that accesses it before the next such write; it dies right after
 *   that node. A node that reads or read-writes it continues the value.
 *
 * Pure C: no StarPU here.
 */
#ifndef SG_LIVENESS_H
#define SG_LIVENESS_H

#include "graph/ir.h"

typedef struct sg_liveness {
    int nnodes;
    /* CSR per node n: the buffers whose value starts at n (born) and those
     * whose value dies right after n (dies); entries in the order found */
    int *born_offset, *born; /* nnodes + 1, then the entries */
    int *dies_offset, *dies;
} sg_liveness;

/* 1 when b must still hold its value after the step (persistent state, or
 * what the host reads once the step is over: losses, norm, overflow flag). */
int sg_buffer_outlives_step(const sg_buffer *b);

/* Computes lv for a finalized graph. Returns 0 or SG_ENOMEM. */
int sg_graph_liveness(const sg_graph *g, sg_liveness *lv);
void sg_liveness_free(sg_liveness *lv);

#endif /* SG_LIVENESS_H */
