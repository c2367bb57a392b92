/* critical_path.h - the chain of tasks that sets a step's length.
 *
 * Ideal: on the ideal machine of analysis.h (unlimited workers), the path of
 * largest bottom level from the first task to the last.
 * Executed: from a run's or a simulation's task times, the task that ended
 * last, then repeatedly what it waited for: among its predecessors in the
 * graph and the task before it on the same worker or link, the one that ended
 * last; back to a task with neither: a chain of tasks and of the waits between
 * them (a gap where nothing on the path ran: scheduling, or a data transfer
 * that is not a task).
 */
#ifndef SG_CRITICAL_PATH_H
#define SG_CRITICAL_PATH_H

#include "graph/analysis.h"
#include "graph/ir.h"

/* ids receives the path's nodes from first to last (at most g->nnodes);
 * *n their count. Returns 0 or SG_ENOMEM. */
int sg_critical_path_ideal(const sg_graph *g, const sg_cost_model *cm, int *ids, int *n);

/* The same from times: start[i], end[i] of node i (end < 0: node did not run,
 * ignored), lane[i] its worker or link (NULL: dependencies only). *wait_s
 * receives the total of the gaps along the path (a task's start minus the end
 * of what it waited for). */
int sg_critical_path_timed(const sg_graph *g, const double *start, const double *end,
                           const int *lane, int *ids, int *n, double *wait_s);

#endif /* SG_CRITICAL_PATH_H */
