/* activity.h - whether any codelet is running, and when one last began or
 * ended.
 *
 * Every codelet's CPU and CUDA entry point (SG_CODELET, SG_CODELET2 in
 * codelets.h) is bracketed by sg_activity_begin / sg_activity_end. The run
 * reads the two figures to tell a step that waits for a long task from one
 * that cannot progress (runtime/exec/stall.h): StarPU retries an allocation
 * it cannot make for as long as it takes, with no task running.
 */
#ifndef SG_CODELET_ACTIVITY_H
#define SG_CODELET_ACTIVITY_H

void sg_activity_begin(void);
void sg_activity_end(void);
/* Also a task's end as StarPU reports it (its callback): a CUDA entry point
 * returns before its stream has run. */
void sg_activity_note(void);

/* Codelets running now, and StarPU's clock (starpu_timing_now, in us) at
 * the last begin, end or note; 0 before the first. */
void sg_activity_read(int *running, double *last_us);

#endif /* SG_CODELET_ACTIVITY_H */
