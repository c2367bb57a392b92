/* cuda_optim_codelets.c - CUDA entry points of the optimizer nodes that
 * stay with the compute: the global gradient norm and Adam on a sub-group
 * whose state lives on the GPU (no offload, or SuperOffload's ratio < 1).
 * The counterpart of optim_codelets.c; the overflow flag, the norm and the
 * loss scale are read on the device, so no task waits for the host. */
#include "codelets/starpu/codelets.h"

#ifdef SG_STARPU_CUDA
#include <stdio.h>

#include "codelets/starpu/cuda_task.h"


static void *slot_or_null(const sg_task_ctx *c, void *buffers[], sg_buf_role role)
{
    int s = sg_arg_find(c, role, -2);
    return s < 0 ? NULL : sg_arg_ptr(buffers, s);
}

/* The SG_BUF_GRAD_NORM layout [norm of the unscaled gradients or inf, 1 /
 * loss scale], partial sums over the gradient pieces in slot order. */
void sg_grad_norm_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    float *res = slot_or_null(c, buffers, SG_BUF_GRAD_NORM);
    if (!res) {
        sg_task_fail(c, SG_EINVAL, "no norm buffer");
        return;
    }
    sg_cu cu = sg_cuda_task_cu();
    /* one double and one int32, 8-byte aligned */
    double *acc = sg_cu_malloc_async(&cu, 2 * sizeof(double));
    int32_t *nonfinite = acc ? (int32_t *)(acc + 1) : NULL;
    int rc = acc ? sg_cu_zero_async(&cu, acc, 2 * sizeof(double)) : SG_ENOMEM;
    for (int i = 0; i < c->nslots && !rc; i++) {
        const sg_buffer *b = sg_arg_buffer(c, i);
        if (b->role == SG_BUF_GRAD_PIECE)
            rc = sg_cu_grad_norm_accumulate(&cu, acc, nonfinite, sg_arg_ptr(buffers, i), b->dtype,
                                            (size_t)b->elems);
    }
    if (!rc)
        rc = sg_cu_grad_norm_finish(&cu, res, acc, nonfinite,
                                    slot_or_null(c, buffers, SG_BUF_LOSS_SCALE));
    sg_cu_free_async(&cu, acc);
    if (rc)
        sg_cuda_task_fail(c, rc, "gradient norm failed");
}

/* Adam over a device sub-group's gradient pieces, into the fp32 master
 * (mixed precision; a cast node then refreshes the pieces) or into the fp32
 * parameter pieces themselves. */
void sg_adam_gpu_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    sg_adam_group a;
    if (sg_arg_adam_group(c, buffers, &a))
        return;
    sg_cu cu = sg_cuda_task_cu();
    sg_adam_params prm = sg_arg_adam_params(c);
    const float *norm = slot_or_null(c, buffers, SG_BUF_GRAD_NORM);
    const int32_t *overflow = slot_or_null(c, buffers, SG_BUF_OVERFLOW);
    for (int i = 0; i < a.n; i++) {
        const sg_buffer *gb = sg_arg_buffer(c, a.grad[i]);
        size_t off = (size_t)gb->subgroup_offset;
        int rc = sg_cu_adam_step(&cu, &prm, c->shared->step.t,
                                 sg_adam_group_params(&a, c, buffers, i),
                                 sg_arg_ptr(buffers, a.grad[i]), gb->dtype, a.m + off, a.v + off,
                                 (size_t)gb->elems, norm, overflow, c->shared->step.clip);
        if (rc) {
            sg_cuda_task_fail(c, rc, "Adam step failed");
            return;
        }
    }
}

#endif /* SG_STARPU_CUDA */
