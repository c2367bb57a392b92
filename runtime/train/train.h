/* train.h - `stepgraph run`: the training loop.
 *
 * Per step: the next micro-batches from the data loader into the token
 * buffers, the step's learning rate and Adam step number into the shared
 * state, the whole step graph run on StarPU (exec.h), then the losses, the
 * gradient norm and the step time read back and logged. Checkpoints,
 * metrics and traces as the run options ask.
 */
#ifndef SG_TRAIN_H
#define SG_TRAIN_H

#include <stdint.h>

#include "runtime/config/config.h"

typedef struct sg_train_result {
    int64_t steps;     /* steps run in this invocation */
    int64_t last_step; /* global step number of the last one */
    double first_loss, last_loss;
    double mean_step_s; /* over non-warm-up steps */
    double tokens_per_s;
    int workers_cpu, workers_cuda; /* StarPU workers of the run */
    int signo;                     /* SIGINT or SIGTERM: the signal that stopped the run
                                   early (runtime/train/interrupt.h), else 0 */
} sg_train_result;

/* cfg must be finalized. Prints the run's header, step lines and summary on
 * stdout. */
int sg_train(const sg_config *cfg, sg_train_result *res, sg_error *err);

struct sg_dist;
/* The same as one of several data-parallel ranks (runtime/dist/dist.h;
 * NULL: one process). The config's dp_size must be the world size. Every
 * rank trains its shard; the logged loss and gradient norm are global; only
 * rank 0 writes the metrics and the trace. On an error with
 * several ranks, StarPU is left running (its workers may wait in a
 * collective for another rank): the caller must end the process, through
 * sg_dist_abort, which ends every rank. */
int sg_train_ranks(const sg_config *cfg, const struct sg_dist *dist, sg_train_result *res,
                   sg_error *err);

#endif /* SG_TRAIN_H */
