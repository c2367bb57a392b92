/* codelets.c - the codelet of each node kind (see codelets.h; the structs
 * are in their kinds' files). */
#include "codelets/starpu/codelets.h"

struct starpu_codelet *sg_codelet_for(sg_op_kind kind)
{
    static struct starpu_codelet *const table[SG_OP_KIND_COUNT] = {
        [SG_OP_ALLGATHER] = &sg_allgather,
        [SG_OP_FORWARD] = &sg_forward,
        [SG_OP_RECOMPUTE] = &sg_recompute,
        [SG_OP_BACKWARD] = &sg_backward,
        [SG_OP_REDUCE_SCATTER] = &sg_reduce_scatter,
        [SG_OP_ALLREDUCE] = &sg_allreduce,
        [SG_OP_D2H] = &sg_d2h,
        [SG_OP_CAST] = &sg_cast,
        [SG_OP_GRAD_NORM] = &sg_grad_norm,
        [SG_OP_OVERFLOW_CHECK] = &sg_overflow_check,
        [SG_OP_LOSS_SCALE] = &sg_loss_scale,
        [SG_OP_ADAM_CPU] = &sg_adam_cpu,
        [SG_OP_ADAM_GPU] = &sg_adam_gpu,
        [SG_OP_VALIDATE] = &sg_validate,
        [SG_OP_H2D] = &sg_h2d,
    };
    return (unsigned)kind < SG_OP_KIND_COUNT ? table[kind] : NULL;
}
