/* overlap.h - what one step's task records say about overlap: how busy
 * the GPU workers were and how much CPU Adam time ran under GPU work
 * (SuperOffload's point). Pure C: works on real and simulated records. */
#ifndef SG_OVERLAP_H
#define SG_OVERLAP_H

#include "graph/task_record.h"
#include "graph/ir.h"

typedef struct sg_overlap {
    double span_s;      /* first task start to last task end */
    double gpu_busy;    /* mean over GPU workers of busy time / span, 0..1; 0 without GPU */
    double adam_cpu_s;  /* summed duration of the CPU Adam tasks */
    double adam_hidden; /* share of that time while some GPU worker was busy, 0..1 */
    double busy_s[3];   /* summed task time per device class (sg_device_class) */
    /* time each worker ran tasks (overlapping tasks of a worker counted
     * once), summed over the CPU workers [0] and the GPU workers [1], and
     * their counts: over its workers, a class's busy time is a lower bound
     * of the span (docs/simulate.md, the work bound of calibrated machines) */
    double worker_busy_s[2];
    int workers[2];
} sg_overlap;

/* records: one per node (worker -1 = did not run); is_gpu[w] for each of the
 * nworkers workers. Returns 0 or SG_ENOMEM. */
int sg_overlap_compute(const sg_graph *g, const sg_task_record *records, const int *is_gpu,
                       int nworkers, sg_overlap *out);

/* The same over a window [a_us, b_us) of a run with steps in flight (the
 * interval between two step ends): the records of nsteps steps (graphs[s],
 * records[s]), every task clipped to the window; span_s is the window. In
 * steady state this is one step's share of the machine, CPU Adam hidden
 * under the GPU work of whichever step. */
int sg_overlap_window(const sg_graph *const *graphs, const sg_task_record *const *records,
                      int nsteps, const int *is_gpu, int nworkers, double a_us, double b_us,
                      sg_overlap *out);

#endif /* SG_OVERLAP_H */
