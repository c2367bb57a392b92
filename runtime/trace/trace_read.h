/* trace_read.h - the task times of a step, read back from a Chrome trace that
 * `stepgraph run --trace` or `stepgraph simulate --trace` wrote.
 *
 * Task events ("ph": "X") carry their graph node in "args.node"; the lane
 * ("tid") names the worker or link in a "thread_name" metadata event. The
 * trace must be of the same graph: each event's name must be its node's.
 */
#ifndef SG_TRACE_READ_H
#define SG_TRACE_READ_H

#include "common/error.h"
#include "graph/ir.h"

#define SG_TRACE_LANE_NAME_MAX 48

typedef struct sg_trace_times {
    int nnodes;
    double *start_us, *end_us; /* per node; end < 0: not in the trace */
    int *lane;                 /* per node: index into lane_names, -1 */
    int nlanes;
    char (*lane_names)[SG_TRACE_LANE_NAME_MAX];
} sg_trace_times;

/* Reads path for graph g. Errors name the file and what is wrong. */
int sg_trace_times_read(const char *path, const sg_graph *g, sg_trace_times *t, sg_error *err);
void sg_trace_times_free(sg_trace_times *t);

#endif /* SG_TRACE_READ_H */
