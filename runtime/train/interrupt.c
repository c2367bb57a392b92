/* interrupt.c - a run stopped by SIGINT or SIGTERM at a step boundary
 * (interrupt.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/train/interrupt.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/cleanup.h"
#include "runtime/io/checkpoint.h"

#define NVOTES (SG_LOOKAHEAD_MAX + 1)

void sg_interrupt_init(sg_interrupt *it, const sg_dist *d, int lookahead)
{
    memset(it, 0, sizeof *it);
    it->dist = d;
    it->world = d ? d->size : 1;
    it->lookahead = lookahead > 0 ? lookahead : 1;
    it->stop_after = INT64_MAX;
}

int sg_interrupt_may_submit(sg_interrupt *it, int64_t n)
{
    /* several ranks stop only where their votes say (sg_interrupt_finished) */
    int sig = sg_cleanup_deferred_signal();
    if (it->world == 1 && sig && !it->signo) {
        it->signo = sig;
        it->stop_after = n - 1;
    }
    return n <= it->stop_after;
}

int sg_interrupt_submitted(sg_interrupt *it, int64_t n, sg_error *err)
{
    if (it->world == 1)
        return SG_OK;
    return sg_dist_vote_start(it->dist, &it->votes[n % NVOTES], sg_cleanup_deferred_signal(), err);
}

int sg_interrupt_finished(sg_interrupt *it, int64_t n, sg_error *err)
{
    if (it->world == 1)
        return SG_OK;
    int sig = 0;
    int rc = sg_dist_vote_wait(it->dist, &it->votes[n % NVOTES], &sig, err);
    if (rc)
        return sg_error_prefix(err, "step %lld: ", (long long)n), rc;
    /* the first vote that says "signal" decides, the same on every rank */
    if (sig && !it->signo) {
        it->signo = sig;
        it->stop_after = n + it->lookahead - 1;
    }
    return SG_OK;
}

int sg_interrupt_settle(sg_interrupt *it, sg_error *err)
{
    double v = it->signo ? it->signo : sg_cleanup_deferred_signal();
    if (it->world > 1) {
        int rc = sg_dist_host_allreduce(it->dist, &v, 1, SG_COMM_MAX, err);
        if (rc)
            return rc;
    }
    it->signo = (int)v;
    return SG_OK;
}

const char *sg_interrupt_signal_name(int signo, char *buf, size_t size)
{
    if (signo == SIGINT)
        return "SIGINT";
    if (signo == SIGTERM)
        return "SIGTERM";
    snprintf(buf, size, "signal %d", signo);
    return buf;
}

void sg_interrupt_print(const sg_interrupt *it, int64_t steps_run, int64_t step, const char *save)
{
    char buf[24];
    const char *sig = sg_interrupt_signal_name(it->signo, buf, sizeof buf);
    if (steps_run == 0)
        printf("interrupted (%s) before the first step; nothing to save\n", sig);
    else if (save[0])
        printf("interrupted at step %lld (%s); checkpoint %s/" SG_CHECKPOINT_STEP_PREFIX "%08lld\n",
               (long long)step, sig, save, (long long)step);
    else
        printf("interrupted at step %lld (%s); no checkpoint (no --save)\n", (long long)step, sig);
    fflush(stdout);
}
