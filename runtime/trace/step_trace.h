/* step_trace.h - one step's task records as a Chrome trace: one lane per
 * worker and per link direction, each task named after its graph node with
 * its layer, kind, micro-step, sub-group and worker in its args, a flow
 * arrow per dependency, and a last lane, "critical path", repeating the tasks
 * of the executed critical path (graph/critical_path.h). Pure C: real runs (timeline.h) and simulations
 * (stepgraph-sim) both write through it, so the two files look alike. */
#ifndef SG_STEP_TRACE_H
#define SG_STEP_TRACE_H

#include "graph/task_record.h"
#include "common/error.h"
#include "graph/ir.h"

typedef struct sg_step_view {
    const sg_graph *graph;
    const sg_task_record *records; /* per node; worker -1 = did not run */
    int nworkers;
    const char *const *worker_names; /* nworkers names ("CPU 0", "CUDA 0") */
    double t0_us;                    /* step start on the records' clock */
    /* optional, per node: when the data a copy node moves crossed its link
     * (simulations draw these on the link lanes instead of the task) */
    const sg_task_record *link_spans;
    /* optional (run option numa, docs/training.md, "NUMA nodes"): the NUMA node of
     * each worker (-1: none) and of each buffer placed on one (-1: not
     * placed); each task's args then give "numa" (its worker's) and
     * "data_numa" (that of the first placed buffer it touches, or -1) */
    const int *worker_numa;
    const int *buffer_numa;
    /* optional, 2 per node: when its disk read and its write-back ran (a
     * simulation's ZeRO-Infinity disk, runtime/sim/sim_disk.h; worker -1:
     * none), drawn on the "disk read" and "disk write" lanes */
    const sg_task_record *disk_spans;
} sg_step_view;

/* Writes the step (atomically). */
int sg_step_trace_write(const sg_step_view *v, const char *path, sg_error *err);

#endif /* SG_STEP_TRACE_H */
