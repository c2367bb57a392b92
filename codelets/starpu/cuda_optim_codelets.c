/* cuda_optim_codelets.c - CUDA entry points of the optimizer nodes that
 * stay with the compute: the global gradient norm and Adam on a sub-group
 * whose state lives on the GPU (no offload, or SuperOffload's ratio < 1).
 * The counterpart of optim_codelets.c; the overflow flag, the norm and the
 * loss scale are read on the device, so no task waits for the host. */
#include "codelets/starpu/codelets.h"

#ifdef SG_STARPU_CUDA
#include <stdio.h>

#include "codelets/starpu/cuda_task.h"

#define MAX_SLOTS 4096

static const sg_buf_role GRAD_PIECE[] = {SG_BUF_GRAD_PIECE};
static const sg_buf_role PARAM_PIECE[] = {SG_BUF_PARAM_PIECE};

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
    int gs[MAX_SLOTS], ps[MAX_SLOTS];
    int n = sg_arg_collect(c, GRAD_PIECE, 1, -2, 1, gs, MAX_SLOTS);
    int np = sg_arg_collect(c, PARAM_PIECE, 1, -2, 1, ps, MAX_SLOTS);
    int master = sg_arg_find(c, SG_BUF_MASTER, -2), mv = sg_arg_find(c, SG_BUF_MOMENTS, -2);
    if (mv < 0 || (master < 0 && np != n)) {
        sg_task_fail(c, SG_EINVAL, "missing Adam buffers");
        return;
    }
    sg_cu cu = sg_cuda_task_cu();
    size_t total = (size_t)sg_arg_buffer(c, mv)->elems / 2;
    float *m = sg_arg_ptr(buffers, mv), *v = m + total;
    sg_adam_params prm = c->shared->step.adam;
    prm.skip_nonfinite = c->shared->spec->compute_dtype == SG_F16;
    const float *norm = slot_or_null(c, buffers, SG_BUF_GRAD_NORM);
    const int32_t *overflow = slot_or_null(c, buffers, SG_BUF_OVERFLOW);
    for (int i = 0; i < n; i++) {
        const sg_buffer *gb = sg_arg_buffer(c, gs[i]);
        size_t off = (size_t)gb->subgroup_offset, len = (size_t)gb->elems;
        if (master < 0 && sg_arg_buffer(c, ps[i])->dtype != SG_F32) {
            sg_task_fail(c, SG_EINVAL, "parameters without an fp32 master must be fp32");
            return;
        }
        float *p = master >= 0 ? (float *)sg_arg_ptr(buffers, master) + off
                               : (float *)sg_arg_ptr(buffers, ps[i]);
        int rc = sg_cu_adam_step(&cu, &prm, c->shared->step.t, p, sg_arg_ptr(buffers, gs[i]),
                                 gb->dtype, m + off, v + off, len, norm, overflow,
                                 c->shared->step.clip);
        if (rc) {
            sg_cuda_task_fail(c, rc, "Adam step failed");
            return;
        }
    }
}

#endif /* SG_STARPU_CUDA */
