/* exec_eval.h - a forward-only graph run on the training state: the
 * evaluation of runtime/train/eval.h.
 *
 * The graph (graph/forward_only.h: the forward of a step of `micro`
 * micro-steps) is lowered beside the run's step graph, sharing every buffer
 * named alike (lower.h: sg_lower_init_sharing): the parameters are the
 * training's own, and the evaluation allocates only step-local activations,
 * freed as they die. It holds no gradient and no optimizer state. Its token
 * and loss buffers are the step's of the same micro-steps (its own beyond
 * the step's accumulation): the next training step writes its tokens again
 * before reading them, so the training's results do not change.
 *
 * Call only while no training step is in flight (after sg_exec_finish_step
 * of every submitted step): each run is submitted and waited for.
 */
#ifndef SG_EXEC_EVAL_H
#define SG_EXEC_EVAL_H

#include <stdint.h>

#include "runtime/exec/exec.h"

typedef struct sg_exec_eval {
    sg_lowering low;
    sg_exec_shared shared; /* the run's, with the forward graph and its spec */
    int micro;             /* micro-batches per run: the graph's micro-steps */
    int *tokens;           /* [micro]: each micro-step's token buffer (IR index) */
    int nloss, *loss;      /* loss buffers, by micro-step then batch tile */
    size_t token_elems;    /* int32 per token buffer: B*T inputs then B*T targets */
    const sg_exec *exec;   /* the run's exec, whose handles this lowering borrows */
    int started;
} sg_exec_eval;

/* Lowers g (the forward of spec's step) beside x's step graph. Free with
 * sg_exec_eval_free before sg_exec_shutdown(x). */
int sg_exec_eval_init(sg_exec_eval *e, sg_exec *x, const sg_step_spec *spec, const sg_graph *g,
                      sg_error *err);

/* Runs the forward on n <= e->micro micro-batches (inputs and targets: n x
 * B*T int32 each, targets -1 where not trained; the micro-steps past n get
 * no target) and waits for it: losses[i] is this rank's mean cross-entropy
 * over micro-batch i's trained targets (0 when none), as the training step
 * computes a micro-step's. */
int sg_exec_eval_run(sg_exec_eval *e, sg_exec *x, int n, const int32_t *inputs,
                     const int32_t *targets, float *losses, sg_error *err);

void sg_exec_eval_free(sg_exec_eval *e);
/* Frees e's own memory and leaves its lowering to StarPU, which is left
 * running (several ranks after an error: a wait could hang). */
void sg_exec_eval_forget(sg_exec_eval *e);

#endif /* SG_EXEC_EVAL_H */
