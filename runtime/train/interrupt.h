/* interrupt.h - a run stopped by SIGINT or SIGTERM at a step boundary
 * (docs/interrupts.md).
 *
 * `stepgraph run` defers the first SIGINT or SIGTERM (common/cleanup.h: the
 * handler only records it). The training loop asks here, before submitting
 * each step, whether to go on; once told to stop it submits no more steps,
 * finishes the ones in flight (at most `lookahead`), saves when --save is
 * given, and the command exits with 128 + the signal's number.
 *
 * One rank stops before its next submission. Several ranks must stop after
 * the same step although a signal may reach one rank only, or each at
 * another moment: every rank votes at each step's submission (the signal
 * it has seen, 0 for none; sg_dist_vote, a non-blocking MAX over the ranks)
 * and reads the vote when the step finishes. The first step n whose vote
 * says "signal" is the same on every rank; no rank has submitted beyond
 * n + lookahead - 1 by then (a step is submitted only once the one
 * `lookahead` before it finished), so every rank runs up to exactly that
 * step. A signal that comes after the last vote is agreed once more at the
 * end (sg_interrupt_settle, with no step in flight).
 */
#ifndef SG_RUNTIME_TRAIN_INTERRUPT_H
#define SG_RUNTIME_TRAIN_INTERRUPT_H

#include <stdint.h>

#include "common/error.h"
#include "runtime/config/run_options.h"
#include "runtime/dist/dist.h"

typedef struct sg_interrupt {
    const sg_dist *dist; /* NULL or one rank: no votes */
    int world, lookahead;
    int signo;          /* the signal that stops the run, 0 until one does */
    int64_t stop_after; /* the last step (of this invocation, from 1) to submit */
    /* step n's vote at n % (SG_LOOKAHEAD_MAX + 1): at most lookahead in flight */
    sg_dist_vote votes[SG_LOOKAHEAD_MAX + 1];
} sg_interrupt;

/* d: the ranks (NULL: one process); lookahead: the run's steps in flight. */
void sg_interrupt_init(sg_interrupt *it, const sg_dist *d, int lookahead);

/* Before submitting step n (counted from 1 in this invocation): whether to.
 * One rank: no once a signal came. */
int sg_interrupt_may_submit(sg_interrupt *it, int64_t n);

/* Right after submitting step n: its vote starts (several ranks). */
int sg_interrupt_submitted(sg_interrupt *it, int64_t n, sg_error *err);

/* Right after finishing step n: its vote's result (several ranks); a
 * signal on any rank stops the run after step n + lookahead - 1. */
int sg_interrupt_finished(sg_interrupt *it, int64_t n, sg_error *err);

/* After the loop, with no step in flight on any rank: a signal that came
 * after the last vote, agreed over the ranks (sg_dist_host_allreduce),
 * into it->signo (still 0 when none came on any rank). */
int sg_interrupt_settle(sg_interrupt *it, sg_error *err);

/* "SIGINT", "SIGTERM", else "signal N" (buf holds at least 24 bytes). */
const char *sg_interrupt_signal_name(int signo, char *buf, size_t size);

/* On stdout, once the run stopped by it->signo ended (rank 0's; the other
 * ranks' stdout is /dev/null): "interrupted at step STEP (SIGTERM);
 * checkpoint SAVE/step-0000000N", "...; no checkpoint (no --save)" when
 * save is empty, or "interrupted (SIGTERM) before the first step; nothing
 * to save" when steps_run (this invocation's) is 0. */
void sg_interrupt_print(const sg_interrupt *it, int64_t steps_run, int64_t step, const char *save);

#endif /* SG_RUNTIME_TRAIN_INTERRUPT_H */
