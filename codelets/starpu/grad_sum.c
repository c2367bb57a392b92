/* grad_sum.c - the grad_sum codelet (batch tiles): a unit's weight gradient
 * is the sum of its tiles' fp32 partials, added in tile order, written into
 * the gradient (W) or added to it (RW: later micro-steps of an accumulation,
 * ZeRO stage 0/1). The order is fixed by the graph, not by which tile
 * finished first, so losses are the same bits under every scheduler and
 * worker count. */
#include <string.h>

#include "codelets/cpu/ops.h"
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

/* The gradient slot and the partial slots by tile (parts[t]); the number
 * of partials, or 0 when a buffer is missing, a tile is absent or twice, or
 * a partial is not fp32 or has another size. */
static int grad_sum_slots(const sg_task_ctx *c, int *grad, int *parts, int cap)
{
    *grad = sg_arg_find(c, SG_BUF_GRAD, -2);
    if (*grad < 0)
        return 0;
    int n = 0;
    for (int s = 0; s < c->nslots; s++) {
        const sg_buffer *b = sg_arg_buffer(c, s);
        if (b->role != SG_BUF_GRAD_PART)
            continue;
        if (b->tile < 0 || b->tile >= cap || b->dtype != SG_F32 ||
            b->elems != sg_arg_buffer(c, *grad)->elems)
            return 0;
        n++;
    }
    if (n == 0 || n > cap)
        return 0;
    for (int t = 0; t < n; t++)
        parts[t] = -1;
    for (int s = 0; s < c->nslots; s++) {
        const sg_buffer *b = sg_arg_buffer(c, s);
        if (b->role != SG_BUF_GRAD_PART)
            continue;
        if (b->tile >= n || parts[b->tile] >= 0)
            return 0;
        parts[b->tile] = s;
    }
    return n;
}

void sg_grad_sum_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int grad, slots[SG_ARG_MAX_SLOTS];
    int n = grad_sum_slots(c, &grad, slots, SG_ARG_MAX_SLOTS);
    if (n == 0) {
        sg_task_fail(c, SG_EINVAL, "grad_sum: a gradient or a tile partial is missing");
        return;
    }
    const float *parts[SG_ARG_MAX_SLOTS];
    for (int t = 0; t < n; t++)
        parts[t] = sg_arg_ptr(buffers, slots[t]);
    const sg_buffer *g = sg_arg_buffer(c, grad);
    int accumulate = !sg_arg_write_only(c, grad);
    sg_f32_view v;
    if (sg_f32_view_open(&v, sg_arg_ptr(buffers, grad), g->dtype, (size_t)g->elems, accumulate)) {
        sg_task_fail(c, SG_ENOMEM, "grad_sum: out of memory");
        return;
    }
    int rc = sg_grad_partials_sum(v.p, parts, n, (size_t)g->elems, accumulate);
    sg_f32_view_close(&v, rc == SG_OK);
    if (rc)
        sg_task_fail(c, rc, "grad_sum failed");
}

#ifdef SG_STARPU_CUDA
#include "codelets/cuda/cuda_ops.h"
#include "codelets/starpu/cuda_task.h"

void sg_grad_sum_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int grad, slots[SG_CU_GRAD_SUM_MAX];
    int n = grad_sum_slots(c, &grad, slots, SG_CU_GRAD_SUM_MAX);
    if (n == 0) {
        sg_cuda_task_fail(c, SG_EINVAL,
                          "grad_sum: a gradient or a tile partial is missing "
                          "(or more tiles than a CUDA worker sums)");
        return;
    }
    const float *parts[SG_CU_GRAD_SUM_MAX];
    for (int t = 0; t < n; t++)
        parts[t] = sg_arg_ptr(buffers, slots[t]);
    const sg_buffer *g = sg_arg_buffer(c, grad);
    sg_cu cu = sg_cuda_task_cu();
    int rc = sg_cu_grad_sum(&cu, sg_arg_ptr(buffers, grad), g->dtype, parts, n, (size_t)g->elems,
                            !sg_arg_write_only(c, grad));
    if (rc)
        sg_cuda_task_fail(c, rc, "grad_sum failed");
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(grad_sum, sg_grad_sum_cpu, sg_grad_sum_cuda);
