/* timeline.h - what the tasks of the last step did, from StarPU's profiling
 * records (exec.h): per-phase busy time (wall_clock_breakdown) and a Chrome
 * trace (one lane per worker and per link direction, each task named after
 * its graph node, with its layer, kind, micro-step, sub-group and worker in
 * its args and a flow arrow per dependency). */
#ifndef SG_TIMELINE_H
#define SG_TIMELINE_H

#include "runtime/exec/exec.h"
#include "runtime/train/step_log.h"

/* Sums of task durations per phase: forward; backward (recompute
 * included); optimizer (norm, overflow check, loss scale, Adam, validation,
 * casts); transfer (collectives and host/device copies). */
void sg_timeline_phases(const sg_exec *x, sg_phase_times *out);

/* Writes the last step as a Chrome trace (atomically). */
int sg_timeline_write_trace(const sg_exec *x, const char *path, sg_error *err);

#endif /* SG_TIMELINE_H */
