/* eval.h - the validation loss during a run (run options eval_data,
 * eval_interval, eval_batches; docs/training.md, "Validation").
 *
 * Held-out token shards are read by a loader of their own (the training
 * data's position never moves), in file order, from their first window at
 * every evaluation: each evaluation sees the same batches, so its losses
 * compare across the run. With world ranks a global micro-batch is world x B
 * consecutive windows, rank r reading the r-th B, as in training.
 *
 * An evaluation runs the step's forward alone (graph/forward_only.h,
 * runtime/exec/exec_eval.h) on the training state, as many micro-batches at
 * once as there are compute CPU workers (one with CUDA workers), once no step
 * is in flight: no backward, no gradient, no optimizer state, and the
 * training's losses are bit for bit those of a run without it
 * (tests/test_eval.sh).
 *
 * The loss: each batch's mean cross-entropy over its trained targets
 * (targets under a loss mask's 0 are not), weighted by those targets, summed
 * over the batches and the ranks and divided by their targets: the mean over
 * every trained target of the held-out batches. Perplexity is its exp. With
 * a MoE model each batch's loss includes the load-balancing term, as the
 * training loss does.
 */
#ifndef SG_EVAL_H
#define SG_EVAL_H

#include <stdint.h>

#include "graph/ir.h"
#include "runtime/config/config.h"
#include "runtime/exec/exec_eval.h"
#include "runtime/io/data_loader.h"
#include "runtime/io/tokenizer_info.h"
#include "runtime/train/step_log.h"

struct sg_dist;

typedef struct sg_eval {
    int on;           /* eval_data given */
    int64_t interval; /* eval_interval: also every N global steps (0: the last only) */
    int64_t batches;  /* micro-batches per evaluation, resolved */
    int rank, world;
    sg_data_loader data;
    int data_open;
    sg_step_spec spec; /* the run's, with the micro-steps of one run of the forward
                                   graph and no checkpointing */
    sg_graph graph;    /* its forward (graph/forward_only.h) */
    sg_exec_eval x;
    int lowered;
    const sg_model *model;
    int32_t *inputs, *targets; /* (micro, B, T) each: a run's micro-batches */
    float *losses;             /* [micro]: their losses */
    int64_t last_step;         /* global step of the last evaluation, -1 before one */
} sg_eval;

/* The result of one evaluation (the same on every rank). */
typedef struct sg_eval_result {
    int64_t step;     /* global step evaluated after */
    double loss, ppl; /* mean over the trained targets, exp(loss) */
    int64_t tokens;   /* trained targets evaluated, every rank's */
    double seconds;
} sg_eval_result;

/* Checks the eval options of cfg and opens eval_data (before StarPU starts:
 * a bad eval_data is refused before any step, with a message naming
 * eval_data: a missing file, tokens outside the model's vocabulary, another
 * tokenizer than the training data's, fewer windows than one micro-batch,
 * masks that leave no target), then compiles the forward graph of spec.
 * train_tok: the training shards' tokenizer, NULL when they do not say;
 * dist: the ranks (NULL: one process; with several, every rank calls this
 * at the same point: it sums the targets over the ranks). Without
 * eval_data e->on stays 0 (eval_interval or eval_batches set without it
 * are refused). */
int sg_eval_open(sg_eval *e, const sg_config *cfg, const sg_model *m, const sg_step_spec *spec,
                 const struct sg_dist *dist, const sg_tokenizer_info *train_tok, sg_error *err);

/* Compiles the forward graph for the workers StarPU started (micro-batches
 * side by side on the compute CPU workers, one at a time with CUDA workers;
 * with several ranks the fewest of any rank, every rank calling this at the
 * same point) and lowers it beside x's step graph (after sg_exec_init and
 * the state's load). */
int sg_eval_attach(sg_eval *e, sg_exec *x, const struct sg_dist *dist, sg_error *err);

/* The header's line ("  eval: ..."), nothing when off. */
void sg_eval_print_header(const sg_eval *e, const char *path);

/* Whether global step `step` is evaluated: every interval, and the last
 * step of the run (last != 0). */
int sg_eval_due(const sg_eval *e, int64_t step, int last);

/* Evaluates the weights after global step `step` (no step in flight on any
 * rank): rank 0 prints the line
 *   Eval at step 12 | eval_loss: 4.1234 | eval_ppl: 61.78 | tokens: 2048 | Time: 45.67 ms
 * and, when metrics is not NULL, writes its metrics line. */
int sg_eval_run(sg_eval *e, sg_exec *x, const struct sg_dist *dist, int64_t step,
                sg_metrics *metrics, sg_eval_result *out, sg_error *err);

/* Frees everything; the forward's lowering before x's (call before
 * sg_exec_shutdown). lowering 0: StarPU is left running as it is (several
 * ranks after an error, whose workers may wait in a collective), and the
 * lowering's handles with it. Safe on a zeroed or closed e. */
void sg_eval_close(sg_eval *e, int lowering);

#endif /* SG_EVAL_H */
