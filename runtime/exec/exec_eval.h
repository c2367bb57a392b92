/* exec_eval.h - a forward-only graph run on the training state, one
 * micro-batch at a time: the evaluation of runtime/train/eval.h.
 *
 * The graph (graph/forward_only.h) is lowered beside the run's step graph,
 * sharing every buffer named alike (lower.h: sg_lower_init_sharing): the
 * parameters are the training's own, and the evaluation allocates only its
 * step-local activations, one micro-batch's, freed as they die. It holds no
 * gradient and no optimizer state. Its token and loss buffers are the
 * step's micro-step 0's: the next training step writes its tokens again
 * before reading them, so the training's results do not change.
 *
 * Call only while no training step is in flight (after sg_exec_finish_step
 * of every submitted step): each batch is submitted and waited for.
 */
#ifndef SG_EXEC_EVAL_H
#define SG_EXEC_EVAL_H

#include <stdint.h>

#include "runtime/exec/exec.h"

typedef struct sg_exec_eval {
    sg_lowering low;
    sg_exec_shared shared;        /* the run's, with the forward graph and its spec */
    int tokens;                   /* the token buffer (IR index in the forward graph) */
    int nloss, *loss;             /* its loss buffers (a loss per batch tile) */
    size_t token_elems;           /* int32: B*T inputs then B*T targets */
    const sg_exec *exec;          /* the run's exec, whose handles this lowering borrows */
    int started;
} sg_exec_eval;

/* Lowers g (the forward of spec, a step of one micro-step) beside x's step
 * graph. Free with sg_exec_eval_free before sg_exec_shutdown(x). */
int sg_exec_eval_init(sg_exec_eval *e, sg_exec *x, const sg_step_spec *spec, const sg_graph *g,
                      sg_error *err);

/* Runs the forward on one micro-batch (inputs and targets: B*T int32 each,
 * targets -1 where not trained) and waits for it: *loss is this rank's mean
 * cross-entropy over the batch's trained targets (0 when none), as the
 * training step computes a micro-step's. */
int sg_exec_eval_batch(sg_exec_eval *e, sg_exec *x, const int32_t *inputs,
                       const int32_t *targets, float *loss, sg_error *err);

void sg_exec_eval_free(sg_exec_eval *e);

#endif /* SG_EXEC_EVAL_H */
