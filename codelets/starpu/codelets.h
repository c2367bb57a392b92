/* codelets.h - the StarPU codelets of the step graph: one struct
 * starpu_codelet per node kind, named sg_<op>, each with a history-based
 * performance model of the same symbol (calibrated in $STARPU_HOME, used by
 * the dm* schedulers and by SimGrid). Buffers are variable in number; every
 * task's cl_arg is its node's sg_task_ctx (codelets/starpu/task_ctx.h).
 *
 * One file per node kind (or family sharing an entry point) holds its
 * codelet struct, its CPU entry point and, under SG_STARPU_CUDA, its CUDA
 * one: codelets/starpu/unit.c (forward, recompute, backward), allgather.c,
 * reduce.c (reduce-scatter, all-reduce), d2h.c, h2d.c, cast.c, grad_norm.c,
 * overflow_check.c, loss_scale.c, adam_cpu.c, adam_gpu.c, validate.c, grad_sum.c
 * (the sum of a unit's batch-tile gradient partials); the
 * table of codelets by kind is codelets.c. The CUDA entry points (on the
 * worker's stream with STARPU_CUDA_ASYNC) exist when stepgraph is built
 * with CUDA against a StarPU built with CUDA: SG_STARPU_CUDA is then 1.
 */
#ifndef SG_CODELETS_H
#define SG_CODELETS_H

#include <starpu.h>

#include "sg_autoconf.h"

#if defined(SG_HAVE_CUDA) && defined(STARPU_USE_CUDA)
#define SG_STARPU_CUDA 1
#endif

#include "codelets/starpu/activity.h"
#include "graph/ir.h"

/* sg_allgather, sg_forward, ...: one per row of graph/op_kinds.h */
#define SG_CODELET_DECL_(id, nm, ...) extern struct starpu_codelet sg_##nm;
SG_OP_KINDS(SG_CODELET_DECL_)
#undef SG_CODELET_DECL_

/* The codelet of a node kind. */
struct starpu_codelet *sg_codelet_for(sg_op_kind kind);

/* Defining a codelet (in its kind's file). */
#define SG_PERFMODEL(sym) \
    static struct starpu_perfmodel pm_##sym = {.type = STARPU_HISTORY_BASED, .symbol = "sg_" #sym}

/* An entry point as StarPU calls it: fn bracketed by the activity marks
 * (activity.h), which tell a long task from a step that cannot progress. */
#define SG_CODELET_ENTRY(entry, fn)               \
    static void entry(void *buffers[], void *arg) \
    {                                             \
        sg_activity_begin();                      \
        fn(buffers, arg);                         \
        sg_activity_end();                        \
    }

/* A codelet with a CPU implementation only. */
#define SG_CODELET(sym, fn)                                                 \
    SG_PERFMODEL(sym);                                                      \
    SG_CODELET_ENTRY(sym##_cpu_entry, fn)                                   \
    struct starpu_codelet sg_##sym = {.cpu_funcs = {sym##_cpu_entry},       \
                                      .cpu_funcs_name = {#fn},              \
                                      .nbuffers = STARPU_VARIABLE_NBUFFERS, \
                                      .model = &pm_##sym,                   \
                                      .name = "sg_" #sym}

/* A codelet with CPU and CUDA implementations (CPU only in a build without
 * CUDA). The CUDA ones queue their work on the worker's stream and return:
 * StarPU waits for the stream before the task counts as done. */
#ifdef SG_STARPU_CUDA
#define SG_CODELET2(sym, fn, cuda_fn)                                       \
    SG_PERFMODEL(sym);                                                      \
    SG_CODELET_ENTRY(sym##_cpu_entry, fn)                                   \
    SG_CODELET_ENTRY(sym##_cuda_entry, cuda_fn)                             \
    struct starpu_codelet sg_##sym = {.cpu_funcs = {sym##_cpu_entry},       \
                                      .cpu_funcs_name = {#fn},              \
                                      .cuda_funcs = {sym##_cuda_entry},     \
                                      .cuda_flags = {STARPU_CUDA_ASYNC},    \
                                      .nbuffers = STARPU_VARIABLE_NBUFFERS, \
                                      .model = &pm_##sym,                   \
                                      .name = "sg_" #sym}
#else
#define SG_CODELET2(sym, fn, cuda_fn) SG_CODELET(sym, fn)
#endif

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
void sg_grad_sum_cpu(void *buffers[], void *arg);

#ifdef SG_STARPU_CUDA
void sg_forward_cuda(void *buffers[], void *arg);
void sg_recompute_cuda(void *buffers[], void *arg);
void sg_backward_cuda(void *buffers[], void *arg);
void sg_allgather_cuda(void *buffers[], void *arg);
void sg_reduce_cuda(void *buffers[], void *arg);
void sg_h2d_cuda(void *buffers[], void *arg);
void sg_cast_cuda(void *buffers[], void *arg);
void sg_grad_norm_cuda(void *buffers[], void *arg);
void sg_adam_gpu_cuda(void *buffers[], void *arg);
void sg_grad_sum_cuda(void *buffers[], void *arg);
void sg_moe_expert_cuda(void *buffers[], void *arg);
void sg_moe_combine_cuda(void *buffers[], void *arg);
void sg_moe_expert_bwd_cuda(void *buffers[], void *arg);
#endif

#endif /* SG_CODELETS_H */
