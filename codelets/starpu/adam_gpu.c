/* adam_gpu.c - the device Adam codelet: Adam on a sub-group whose state
 * stays with the compute (no offload, or SuperOffload's ratio < 1), over
 * its gradient pieces, into the fp32 master (mixed precision; a cast node
 * then refreshes the pieces) or into the fp32 parameter pieces themselves.
 * Skipped after an fp16 overflow; gradients are unscaled and clipped.
 *
 * CPU: in fp32 views of the gradient pieces.
 * CUDA: the overflow flag, the norm and the loss scale are read on the
 * device, so no task waits for the host. */
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_adam_gpu_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    float mult = 1.0f;
    if (sg_arg_step_checks(c, buffers, &mult))
        return;
    sg_adam_group a;
    if (sg_arg_adam_group(c, buffers, &a))
        return;
    sg_adam_params prm = sg_arg_adam_params(c);
    for (int i = 0; i < a.n; i++) {
        const sg_buffer *gb = sg_arg_buffer(c, a.grad[i]);
        size_t off = (size_t)gb->subgroup_offset, len = (size_t)gb->elems;
        sg_f32_view g;
        if (sg_f32_view_open(&g, sg_arg_ptr(buffers, a.grad[i]), gb->dtype, len, 1)) {
            sg_task_fail(c, SG_ENOMEM, "out of memory");
            return;
        }
        int rc = sg_adam_step(&prm, c->step->t, sg_adam_group_params(&a, c, buffers, i), g.p,
                              a.m + off, a.v + off, NULL, len, mult);
        sg_f32_view_close(&g, 0);
        if (rc) {
            sg_task_fail(c, rc, "Adam step failed");
            return;
        }
    }
}

#ifdef SG_STARPU_CUDA
#include "codelets/starpu/cuda_task.h"

void sg_adam_gpu_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    sg_adam_group a;
    if (sg_arg_adam_group(c, buffers, &a))
        return;
    sg_cu cu = sg_cuda_task_cu();
    sg_adam_params prm = sg_arg_adam_params(c);
    const float *norm = sg_arg_role_ptr(c, buffers, SG_BUF_GRAD_NORM);
    const int32_t *overflow = sg_arg_role_ptr(c, buffers, SG_BUF_OVERFLOW);
    for (int i = 0; i < a.n; i++) {
        const sg_buffer *gb = sg_arg_buffer(c, a.grad[i]);
        size_t off = (size_t)gb->subgroup_offset;
        int rc = sg_cu_adam_step(&cu, &prm, c->step->t, sg_adam_group_params(&a, c, buffers, i),
                                 sg_arg_ptr(buffers, a.grad[i]), gb->dtype, a.m + off, a.v + off,
                                 (size_t)gb->elems, norm, overflow, c->step->clip);
        if (rc) {
            sg_cuda_task_fail(c, rc, "Adam step failed");
            return;
        }
    }
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(adam_gpu, sg_adam_gpu_cpu, sg_adam_gpu_cuda);
