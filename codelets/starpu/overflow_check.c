/* overflow_check.c - fp16: the overflow flag (1 when the gradient norm is
 * not finite), read by the loss-scale update and the optimizer nodes. CPU
 * only. */
#include <math.h>

#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_overflow_check_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int in = sg_arg_find(c, SG_BUF_GRAD_NORM, -2), out = sg_arg_find(c, SG_BUF_OVERFLOW, -2);
    if (in < 0 || out < 0) {
        sg_task_fail(c, SG_EINVAL, "missing norm or overflow buffer");
        return;
    }
    *(int32_t *)sg_arg_ptr(buffers, out) = !isfinite(sg_arg_scalar(buffers, in, 0.0f));
}

SG_CODELET(overflow_check, sg_overflow_check_cpu);
