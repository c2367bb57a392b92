/* codelets.c - the codelet and performance-model structs (see codelets.h). */
#include "codelets/starpu/codelets.h"

#define SG_PERFMODEL(sym) \
    static struct starpu_perfmodel pm_##sym = {.type = STARPU_HISTORY_BASED, .symbol = "sg_" #sym}

/* Every kind of graph/op_kinds.h has one codelet below, sg_<name>, whose
 * name and performance-model symbol are the table's symbol column. */

/* A codelet with a CPU implementation only. */
#define SG_CODELET(sym, fn)                                                         \
    SG_PERFMODEL(sym);                                                              \
    struct starpu_codelet sg_##sym = {.cpu_funcs = {fn},                            \
                                      .cpu_funcs_name = {#fn},                      \
                                      .nbuffers = STARPU_VARIABLE_NBUFFERS,         \
                                      .model = &pm_##sym,                           \
                                      .name = "sg_" #sym}

/* A codelet with CPU and CUDA implementations (CPU only in a build without
 * CUDA). The CUDA ones queue their work on the worker's stream and return:
 * StarPU waits for the stream before the task counts as done. */
#ifdef SG_STARPU_CUDA
#define SG_CODELET2(sym, fn, cuda_fn)                                               \
    SG_PERFMODEL(sym);                                                              \
    struct starpu_codelet sg_##sym = {.cpu_funcs = {fn},                            \
                                      .cpu_funcs_name = {#fn},                      \
                                      .cuda_funcs = {cuda_fn},                      \
                                      .cuda_flags = {STARPU_CUDA_ASYNC},            \
                                      .nbuffers = STARPU_VARIABLE_NBUFFERS,         \
                                      .model = &pm_##sym,                           \
                                      .name = "sg_" #sym}
#else
#define SG_CODELET2(sym, fn, cuda_fn) SG_CODELET(sym, fn)
#endif

SG_CODELET2(allgather, sg_allgather_cpu, sg_allgather_cuda);
SG_CODELET2(forward, sg_forward_cpu, sg_forward_cuda);
SG_CODELET2(recompute, sg_recompute_cpu, sg_recompute_cuda);
SG_CODELET2(backward, sg_backward_cpu, sg_backward_cuda);
SG_CODELET2(reduce_scatter, sg_reduce_cpu, sg_reduce_cuda);
SG_CODELET2(allreduce, sg_reduce_cpu, sg_reduce_cuda);
SG_CODELET(d2h, sg_d2h_cpu);
SG_CODELET2(cast, sg_cast_cpu, sg_cast_cuda);
SG_CODELET2(grad_norm, sg_grad_norm_cpu, sg_grad_norm_cuda);
SG_CODELET(overflow_check, sg_overflow_check_cpu);
SG_CODELET(loss_scale, sg_loss_scale_cpu);
SG_CODELET(adam_cpu, sg_adam_cpu_cpu);
SG_CODELET2(adam_gpu, sg_adam_gpu_cpu, sg_adam_gpu_cuda);
SG_CODELET(validate, sg_validate_cpu);
SG_CODELET2(h2d, sg_h2d_cpu, sg_h2d_cuda);

struct starpu_codelet *sg_codelet_for(sg_op_kind kind)
{
    static struct starpu_codelet *const table[SG_OP_KIND_COUNT] = {
#define SG_CODELET_ENTRY_(id, nm, ...) [SG_OP_##id] = &sg_##nm,
        SG_OP_KINDS(SG_CODELET_ENTRY_)
#undef SG_CODELET_ENTRY_
    };
    return (unsigned)kind < SG_OP_KIND_COUNT ? table[kind] : NULL;
}
