/* grad_norm.c - the global gradient norm codelet. Its output, the
 * SG_BUF_GRAD_NORM layout: [norm of the unscaled gradients (inf if one is
 * not finite), 1 / the loss scale they carry]. Partial sums over the
 * gradient pieces in slot (program) order, so the result does not depend on
 * which worker runs it. */
#include <math.h>

#include "codelets/cpu/ops.h"
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_grad_norm_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int out = sg_arg_find(c, SG_BUF_GRAD_NORM, -2);
    if (out < 0) {
        sg_task_fail(c, SG_EINVAL, "no norm buffer");
        return;
    }
    double sumsq = 0.0;
    int nonfinite = 0;
    for (int i = 0; i < c->nslots; i++) { /* slot (program) order */
        const sg_buffer *b = sg_arg_buffer(c, i);
        if (b->role != SG_BUF_GRAD_PIECE)
            continue;
        sg_f32_view v;
        if (sg_f32_view_open(&v, sg_arg_ptr(buffers, i), b->dtype, (size_t)b->elems, 1)) {
            sg_task_fail(c, SG_ENOMEM, "out of memory");
            return;
        }
        double part;
        int nf;
        sg_grad_norm_partial(&part, &nf, v.p, (size_t)b->elems);
        sg_f32_view_close(&v, 0);
        sumsq += part;
        nonfinite |= nf;
    }
    double scale = sg_arg_scalar(buffers, sg_arg_find(c, SG_BUF_LOSS_SCALE, -2), 1.0f);
    float *res = sg_arg_ptr(buffers, out);
    res[0] = nonfinite ? INFINITY : (float)(sqrt(sumsq) / scale);
    res[1] = (float)(1.0 / scale);
}

#ifdef SG_STARPU_CUDA
#include "codelets/starpu/cuda_task.h"

void sg_grad_norm_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    float *res = sg_arg_role_ptr(c, buffers, SG_BUF_GRAD_NORM);
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
                                    sg_arg_role_ptr(c, buffers, SG_BUF_LOSS_SCALE));
    sg_cu_free_async(&cu, acc);
    if (rc)
        sg_cuda_task_fail(c, rc, "gradient norm failed");
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(grad_norm, sg_grad_norm_cpu, sg_grad_norm_cuda);
