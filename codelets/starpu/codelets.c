/* codelets.c - the codelet and performance-model structs (see codelets.h). */
#include "codelets/starpu/codelets.h"

#define SG_PERFMODEL(sym) \
    static struct starpu_perfmodel pm_##sym = {.type = STARPU_HISTORY_BASED, .symbol = "sg_" #sym}

#define SG_CODELET(sym, fn)                                                         \
    SG_PERFMODEL(sym);                                                              \
    struct starpu_codelet sg_##sym = {.cpu_funcs = {fn},                            \
                                      .cpu_funcs_name = {#fn},                      \
                                      .nbuffers = STARPU_VARIABLE_NBUFFERS,         \
                                      .model = &pm_##sym,                           \
                                      .name = "sg_" #sym}

SG_CODELET(allgather, sg_allgather_cpu);
SG_CODELET(forward, sg_forward_cpu);
SG_CODELET(recompute, sg_recompute_cpu);
SG_CODELET(backward, sg_backward_cpu);
SG_CODELET(reduce_scatter, sg_reduce_cpu);
SG_CODELET(allreduce, sg_reduce_cpu);
SG_CODELET(d2h, sg_d2h_cpu);
SG_CODELET(cast, sg_cast_cpu);
SG_CODELET(grad_norm, sg_grad_norm_cpu);
SG_CODELET(overflow_check, sg_overflow_check_cpu);
SG_CODELET(loss_scale, sg_loss_scale_cpu);
SG_CODELET(adam_cpu, sg_adam_cpu_cpu);
SG_CODELET(adam_gpu, sg_adam_gpu_cpu);
SG_CODELET(validate, sg_validate_cpu);
SG_CODELET(h2d, sg_h2d_cpu);

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
