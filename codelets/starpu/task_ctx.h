/* task_ctx.h - what a stepgraph codelet receives besides its buffers.
 *
 * Every task carries (as its cl_arg, not copied) a pointer to the sg_task_ctx
 * of its graph node: the node, the IR buffer behind each of its StarPU buffer
 * slots, the run-wide sg_exec_shared state (model, step settings), and the
 * hyper-parameters and task records of ITS optimizer step. Several steps may
 * be in flight at once (run option lookahead): the lowering keeps one copy
 * of every node's context per step in flight, each pointing at its own
 * step's parameters, so a task never reads a value the trainer has since
 * set for a later step. Codelets find their arguments by buffer role
 * (graph/ir.h), so they do not depend on the order the compiler listed the
 * accesses in.
 */
#ifndef SG_TASK_CTX_H
#define SG_TASK_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "codelets/cpu/adam.h"
#include "codelets/cpu/block.h"
#include "codelets/cpu/loss_scale.h"
#include "graph/compile.h"
#include "graph/ir.h"
#include "models/model.h"

/* Settings of one optimizer step; written by the trainer before the step's
 * tasks are submitted, never while they may run. */
typedef struct sg_step_params {
    sg_adam_params adam; /* lr of this step included */
    int64_t t;           /* Adam step number (1 for the first update) */
    double clip;         /* gradient_clipping, 0 = off */
} sg_step_params;

#include "graph/task_record.h"

struct sg_cuda_state; /* codelets/starpu/cuda_state.h: per-device state of CUDA workers */

typedef struct sg_exec_shared {
    const sg_model *model;
    const sg_step_spec *spec;
    const sg_graph *graph;
    sg_rope_cache rope;
    struct sg_cuda_state *cuda; /* NULL without CUDA workers */
    /* several data-parallel ranks: the collectives (runtime/dist/); NULL
     * with one rank, where collectives are local copies */
    const struct sg_comm *comm;
    /* fp16: the loss-scale update's parameters, set by the trainer before
     * the first step; its state is a buffer (SG_BUF_LOSS_SCALER_STATE) */
    sg_loss_scaler_params loss_scaler;
    /* a task that fails says so here (set atomically, first one wins); what
     * a step computed is read back from its buffers (exec.h) */
    int failed;         /* first failing task's code */
    char fail_msg[256]; /* and its message */
} sg_exec_shared;

struct sg_lower_flight; /* runtime/exec/lower.h: one step in flight */

typedef struct sg_task_ctx {
    sg_exec_shared *shared;
    const sg_step_params *step;     /* this task's step: lr, Adam t, clipping */
    sg_task_record *records;        /* this task's step's records, per node (task callbacks) */
    struct sg_lower_flight *flight; /* counts the step's unfinished tasks */
    int node;                       /* index in graph->nodes */
    int nslots;                     /* StarPU buffers of the task */
    int *slot_buffer;               /* IR buffer of each slot (accesses merged per buffer) */
    sg_access_mode *slot_mode;
} sg_task_ctx;

#endif /* SG_TASK_CTX_H */
