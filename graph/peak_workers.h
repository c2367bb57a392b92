/* peak_workers.h - the peak memory of a step that several workers run out of
 * program order.
 *
 * sg_graph_peak_memory_one_space is the peak when the nodes run one after
 * the other in program order (one worker). With W workers StarPU runs ready
 * work as soon as a worker is free: the forward of a later micro-step while
 * an earlier one is in its backward, one batch tile ahead of another, so
 * more values are live at once. This plays the step as StarPU's
 * work-stealing policies (lws, ws) run it on W identical CPU workers:
 * each worker has a queue ordered by the nodes' priorities (sg_node.priority,
 * as the runtime submits them); the nodes ready at submission are pushed
 * round robin, a node that becomes ready goes to the queue of the worker
 * whose node released it; a free worker takes its own highest-priority node
 * (the first pushed among equals), else steals the highest from another's
 * (the last pushed among equals). A node takes its FLOPs at one core's rate
 * or its bytes at one core's share of bandwidth, whichever is larger, plus
 * a task's overhead. A value (graph/liveness.h) is allocated when the node
 * that starts it starts and freed when every node that accesses it has
 * ended (the runtime's invalidation is ordered after all of them).
 * One memory holds both spaces (a CPU-only run). */
#ifndef SG_GRAPH_PEAK_WORKERS_H
#define SG_GRAPH_PEAK_WORKERS_H

#include <stdint.h>

#include "graph/ir.h"

/* *peak: persistent bytes plus the most step-local bytes live at once;
 * *persistent: the persistent bytes. workers >= 1 (1 gives program order
 * only when every node's priority follows it). SG_EINVAL, SG_ENOMEM. */
int sg_graph_peak_memory_workers(const sg_graph *g, int workers, int64_t *peak,
                                 int64_t *persistent);

#endif /* SG_GRAPH_PEAK_WORKERS_H */
