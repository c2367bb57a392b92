/* speculation.h - SuperOffload's adaptive speculation: when to stop
 * speculating and wait for the gradient norm, and when to start again.
 *
 * A speculative CPU Adam step is unscaled and unclipped; when clipping fires
 * (or fp16 overflows) validation rolls it back and redoes it, so the
 * optimizer does its work twice. Training from scratch, clipping fires on
 * nearly every step. The trainer records, after each step, whether
 * speculation would have been rolled back (known from the gradient norm
 * whichever graph ran). Over the last SG_SPEC_WINDOW steps, speculation stops
 * when at least SG_SPEC_STOP of them would have rolled back, and resumes
 * when at most SG_SPEC_RESUME would have; the gap keeps the mode from
 * flapping.
 *
 * A run that can roll back from its first step (gradient clipping on, or
 * fp16 whose loss scale overflows while it settles) starts waiting, with the
 * window full of would-be rollbacks: speculation starts only once the norm
 * has stayed under the threshold for SG_SPEC_WINDOW - SG_SPEC_RESUME of the
 * last steps. From scratch, clipping fires on nearly every early step, and
 * a run that speculated first lost each of those steps' CPU Adam twice. */
#ifndef SG_SPECULATION_H
#define SG_SPECULATION_H

#include <stdint.h>

#define SG_SPEC_WINDOW 8
#define SG_SPEC_STOP 4
#define SG_SPEC_RESUME 2

typedef struct sg_speculation {
    uint8_t would_fail[SG_SPEC_WINDOW]; /* ring of the last steps */
    int64_t steps;                      /* steps recorded */
    int waiting;                        /* the next step waits for the norm */
} sg_speculation;

/* The rule's state before the first step: speculating (start_waiting 0), or
 * waiting with a window of SG_SPEC_WINDOW would-be rollbacks. */
void sg_speculation_init(sg_speculation *s, int start_waiting);

/* Records one step and returns the next step's mode (1: wait). */
int sg_speculation_update(sg_speculation *s, int would_fail);

#endif /* SG_SPECULATION_H */
