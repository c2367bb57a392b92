/* stall.h - telling a step that cannot progress from one that waits for a
 * long task.
 *
 * StarPU retries an allocation it cannot make until memory frees. Main
 * memory is where data lives, so nothing there can be evicted: when a
 * step's data need more than StarPU may use (90% of RAM, or
 * STARPU_LIMIT_CPU_MEM), its workers retry for ever with no task running,
 * and a plain wait for the step never returns. The watch says the step
 * cannot progress when, for `seconds` (STEPGRAPH_STALL_SECONDS, default 30;
 * 0 never), no codelet has run, begun or ended (codelets/starpu/activity.h)
 * while main memory has less room left under StarPU's limit than the
 * step's largest step-local buffer plus one of StarPU's 32 MiB allocation
 * chunks (a GPU is not looked at: StarPU makes room there by evicting to
 * main memory, and keeps it full of cached buffers).
 * A check that comes late (the process was stopped, the machine slept)
 * starts the window again.
 */
#ifndef SG_STALL_H
#define SG_STALL_H

#include <stdint.h>

#include "common/error.h"
#include "graph/ir.h"

#define SG_STALL_POLL_S 1.0 /* how often the waiting thread looks */

typedef struct sg_stall_watch {
    double seconds;       /* the window; 0: never give up */
    int64_t room_bytes;   /* less room than this on a limited node: stuck */
    double last_check_us; /* StarPU clock at the last check, 0 before one */
    double restart_us;    /* the window starts no earlier than this */
    sg_error *err;        /* where the check says why it gave up */
} sg_stall_watch;

/* The window STEPGRAPH_STALL_SECONDS sets (30 s when unset); a bad value
 * is an error naming it. The trainer calls it before any output. */
int sg_stall_seconds(double *seconds, sg_error *err);

/* The window from STEPGRAPH_STALL_SECONDS (a bad value is an error naming
 * it) and the room a step of g needs. */
int sg_stall_watch_init(sg_stall_watch *w, const sg_graph *g, sg_error *err);

/* Arms the watch for one wait (its error goes to err). */
void sg_stall_watch_start(sg_stall_watch *w, sg_error *err);

/* The watch's rule at StarPU clock now_us, given what activity.h read
 * (codelets running, the time of the last change): 1 when no codelet runs
 * and none has begun or ended for the window since the wait began or a
 * late check restarted it (one more than 3 polls after the last), else 0.
 * Keeps the time of this check. */
int sg_stall_quiet_past_window(sg_stall_watch *w, double now_us, int running, double last_us);

/* The check for sg_lower_flight_wait_polling (arg: the watch): 0 while the
 * step may still progress, SG_ENOMEM (with the watch's error set) when it
 * cannot. */
int sg_stall_check(void *arg);

#endif /* SG_STALL_H */
