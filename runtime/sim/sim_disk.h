/* sim_disk.h - the disk of ZeRO-Infinity's state ("nvme") in a simulated
 * step.
 *
 * The disk is one device with a queue: each read or write takes its bytes
 * over the machine's disk.read_gbs or disk.write_gbs once the requests
 * queued before it are done (reads and writes share the drive). Per node
 * the bytes come from graph/disk_tier.h (sg_disk_tier_node_bytes): a task
 * waits, before it runs, for its reads, and after it, for its write-back
 * (its tile's RAM is free only once the tile is back on disk, and a step
 * ends with its state on disk). An optimizer tile's read is issued ahead:
 * when a tile's task starts, the reads of the next tiles in program order
 * are queued until buffer_count tiles are in RAM or on their way (the one
 * being updated included), as the runtime prefetches them. So every byte
 * of the step crosses the disk inside the step, and the step is never
 * shorter than its disk bytes over the bandwidths.
 *
 * Pure arithmetic on simulated seconds: sim_exec.c calls it from the
 * codelets it runs in simulated time and sleeps for what it returns. One
 * simulated thread runs at a time (SimGrid), so no lock.
 */
#ifndef SG_SIM_DISK_H
#define SG_SIM_DISK_H

#include <stdint.h>

#include "graph/compile.h"
#include "graph/ir.h"
#include "graph/task_record.h"
#include "runtime/config/machine.h"

typedef struct sg_sim_disk {
    int active;               /* some node reads or writes the disk */
    int n;                    /* the graph's nodes */
    double read_bw, write_bw; /* B/s */
    double free_at;           /* s: when the queue empties */
    int64_t window;           /* tiles in RAM or on their way at once (buffer_count) */
    int record_run;           /* the run (1-based step) whose spans are kept */
    int64_t *read, *write;    /* per node: bytes (sg_disk_tier_node_bytes) */
    int *prefetch;            /* per node: its read may be issued ahead */
    int *runs;                /* per node: times its task has begun */
    int *issued;              /* per node: the run its read was issued for (0: none) */
    double *ready_at;         /* per node: when that read is done */
    sg_task_record *spans;    /* 2 per node, its read and write of the step
                                  record_run: worker 0 when present, -1 when not
                                  (times in microseconds) */
} sg_sim_disk;

/* Sets d up for g compiled from spec on machine m (inactive when nothing
 * is on disk), keeping the spans of the record_run-th step (1-based: the
 * one reported). SG_EINVAL naming the machine when the step has disk bytes
 * and m gives no disk bandwidth; SG_ENOMEM. */
int sg_sim_disk_init(sg_sim_disk *d, const sg_graph *g, const sg_step_spec *spec,
                     const sg_machine *m, int record_run, sg_error *err);
void sg_sim_disk_free(sg_sim_disk *d);

/* Node `node`'s task begins at `now` (s): queues its read unless issued
 * ahead, then the reads ahead of it; returns when its data are in RAM
 * (>= now). */
double sg_sim_disk_begin(sg_sim_disk *d, int node, double now);

/* Its task's work ends at `now`: queues its write-back; returns when that
 * is done (>= now). */
double sg_sim_disk_end(sg_sim_disk *d, int node, double now);

/* The disk bytes of the spans kept (step record_run's) and the seconds the
 * disk was busy for them. */
void sg_sim_disk_totals(const sg_sim_disk *d, int64_t *read, int64_t *write, double *busy_s);

#endif /* SG_SIM_DISK_H */
