/* stall.c - a step that cannot progress for want of memory (stall.h). */
#include "runtime/exec/stall.h"

#include <stdio.h>
#include <stdlib.h>

#include "codelets/starpu/activity.h"
#include "graph/memory_held.h"
#include "runtime/exec/starpu_include.h"

#define DEFAULT_SECONDS 30.0

int sg_stall_seconds(double *seconds, sg_error *err)
{
    *seconds = DEFAULT_SECONDS;
    const char *v = getenv("STEPGRAPH_STALL_SECONDS");
    if (!v || !*v)
        return SG_OK;
    char *end;
    double s = strtod(v, &end);
    if (*end || !(s >= 0 && s <= 1e6))
        return sg_error_set(err, SG_EINVAL,
                            "STEPGRAPH_STALL_SECONDS=%s: expected seconds, "
                            "0 to 1000000 (0: wait for ever)",
                            v);
    *seconds = s;
    return SG_OK;
}

int sg_stall_watch_init(sg_stall_watch *w, const sg_graph *g, sg_error *err)
{
    int rc = sg_stall_seconds(&w->seconds, err);
    if (rc)
        return rc;
    int64_t largest = 0;
    for (int b = 0; b < g->nbuffers; b++)
        if (!g->buffers[b].persistent && g->buffers[b].bytes > largest)
            largest = g->buffers[b].bytes;
    w->room_bytes = largest + SG_STARPU_CHUNK_BYTES;
    w->last_check_us = w->restart_us = 0;
    w->err = NULL;
    return SG_OK;
}

void sg_stall_watch_start(sg_stall_watch *w, sg_error *err)
{
    w->err = err;
    w->last_check_us = w->restart_us = starpu_timing_now();
}

int sg_stall_quiet_past_window(sg_stall_watch *w, double now_us, int running, double last_us)
{
    if (now_us - w->last_check_us > 3 * SG_STALL_POLL_S * 1e6)
        w->restart_us = now_us; /* a late check: the process did not run meanwhile */
    w->last_check_us = now_us;
    double quiet_from = last_us > w->restart_us ? last_us : w->restart_us;
    return w->seconds > 0 && running == 0 && now_us - quiet_from >= w->seconds * 1e6;
}

int sg_stall_check(void *arg)
{
    sg_stall_watch *w = arg;
    double now = starpu_timing_now();
    int running;
    double last_us;
    sg_activity_read(&running, &last_us);
    if (!sg_stall_quiet_past_window(w, now, running, last_us))
        return 0;
    double quiet_from = last_us > w->restart_us ? last_us : w->restart_us;
    /* main memory only: StarPU makes room on a GPU by evicting to RAM, so a
     * GPU kept full (its cache of dead buffers) is no sign of a stall */
    unsigned nodes = starpu_memory_nodes_get_count();
    for (unsigned m = 0; m < nodes; m++) {
        starpu_ssize_t total = starpu_memory_get_total(m);
        if (starpu_node_get_kind(m) != STARPU_CPU_RAM || total <= 0)
            continue;
        starpu_ssize_t used = (starpu_ssize_t)starpu_memory_get_used(m);
        if (total - used >= w->room_bytes)
            continue;
        return sg_error_set(w->err, SG_ENOMEM,
                            "the step cannot go on: no task has run for %.0f s and StarPU "
                            "counts %.1f of the %.1f MiB it may use in main memory "
                            "(STARPU_LIMIT_CPU_MEM, else 90%% of RAM), so it waits for memory "
                            "that no task will free. Raise that limit, or lower the step's need "
                            "(a smaller train_micro_batch_size_per_gpu, "
                            "activation_checkpointing, --lookahead 1); `stepgraph graph CONFIG "
                            "--summary` prints the plan, STEPGRAPH_STALL_SECONDS how long this "
                            "wait lasts",
                            (now - quiet_from) * 1e-6, (double)used / 1048576.0,
                            (double)total / 1048576.0);
    }
    return 0;
}
