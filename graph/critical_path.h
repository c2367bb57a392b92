/* critical_path.h - the chain of tasks that sets a step's length.
 *
 * Ideal: on the ideal machine of analysis.h (unlimited workers), the path of
 * largest bottom level from the first task to the last.
 * Executed: from a run's or a simulation's task times, the task that ended
 * last, then repeatedly the predecessor that ended last (the one it waited
 * for), back to a task with no predecessor: a chain of tasks and of the
 * waits between them (a gap where a task was ready but did not start: the
 * scheduler or a busy worker, not a dependency, held it).
 */
#ifndef SG_CRITICAL_PATH_H
#define SG_CRITICAL_PATH_H

#include "graph/analysis.h"
#include "graph/ir.h"

/* ids receives the path's nodes from first to last (at most g->nnodes);
 * *n their count. Returns 0 or SG_ENOMEM. */
int sg_critical_path_ideal(const sg_graph *g, const sg_cost_model *cm, int *ids, int *n);

/* The same from times: start[i], end[i] of node i (end < 0: node did not run,
 * ignored). *wait_s receives the total of the gaps along the path (a task's
 * start minus the end of the predecessor it waited for). */
int sg_critical_path_timed(const sg_graph *g, const double *start, const double *end, int *ids,
                           int *n, double *wait_s);

#endif /* SG_CRITICAL_PATH_H */
