/* codelets.h - the StarPU codelets of the step graph: one struct
 * starpu_codelet per node kind, named sg_<op>, each with a history-based
 * performance model of the same symbol (calibrated in $STARPU_HOME, used by
 * the dm* schedulers and by SimGrid). Buffers are variable in number; every
 * task's cl_arg is its node's sg_task_ctx (codelets/starpu/task_ctx.h).
 *
 * CPU entry points are below; CUDA ones come with codelets/cuda/.
 */
#ifndef SG_CODELETS_H
#define SG_CODELETS_H

#include <starpu.h>

#include "graph/ir.h"

extern struct starpu_codelet sg_allgather, sg_forward, sg_recompute, sg_backward,
    sg_reduce_scatter, sg_allreduce, sg_d2h, sg_cast, sg_grad_norm, sg_overflow_check,
    sg_loss_scale, sg_adam_cpu, sg_adam_gpu, sg_validate, sg_h2d;

/* The codelet of a node kind. */
struct starpu_codelet *sg_codelet_for(sg_op_kind kind);

void sg_forward_cpu(void *buffers[], void *arg);
void sg_recompute_cpu(void *buffers[], void *arg);
void sg_backward_cpu(void *buffers[], void *arg);
void sg_allgather_cpu(void *buffers[], void *arg);
void sg_reduce_cpu(void *buffers[], void *arg);
void sg_d2h_cpu(void *buffers[], void *arg);
void sg_h2d_cpu(void *buffers[], void *arg);
void sg_cast_cpu(void *buffers[], void *arg);
void sg_grad_norm_cpu(void *buffers[], void *arg);
void sg_overflow_check_cpu(void *buffers[], void *arg);
void sg_loss_scale_cpu(void *buffers[], void *arg);
void sg_adam_cpu_cpu(void *buffers[], void *arg);
void sg_adam_gpu_cpu(void *buffers[], void *arg);
void sg_validate_cpu(void *buffers[], void *arg);

#endif /* SG_CODELETS_H */
