/* loss_scale.c - fp16: the loss-scale update after the overflow check,
 * with DeepSpeed's dynamic loss scaling (runtime/train/loss_scaler.h). CPU
 * only. */
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_loss_scale_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int ov = sg_arg_find(c, SG_BUF_OVERFLOW, -2), ls = sg_arg_find(c, SG_BUF_LOSS_SCALE, -2);
    if (ov < 0 || ls < 0 || !c->shared->scaler) {
        sg_task_fail(c, SG_EINVAL, "missing overflow or loss-scale buffer");
        return;
    }
    if (sg_loss_scaler_update(c->shared->scaler, *(const int32_t *)sg_arg_ptr(buffers, ov)) ==
        SG_LOSS_SCALER_AT_MIN) {
        /* DeepSpeed stops there too */
        sg_task_fail(c, SG_EINVAL, "gradient overflow with the loss scale already at "
                                   "fp16.min_loss_scale");
        return;
    }
    *(float *)sg_arg_ptr(buffers, ls) = (float)c->shared->scaler->scale;
}

SG_CODELET(loss_scale, sg_loss_scale_cpu);
