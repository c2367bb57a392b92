/* loss_scale.c - fp16: the loss-scale update after the overflow check,
 * DeepSpeed's dynamic loss scaling (codelets/cpu/loss_scale.h). The
 * scaler's state is a persistent buffer the task reads and writes
 * (SG_BUF_LOSS_SCALER_STATE, the raw bytes of sg_loss_scaler_state), so
 * StarPU orders it like any other data; the new scale goes to the loss-scale
 * buffer the next step's backward and gradient norm read. CPU only. */
#include <string.h>

#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_loss_scale_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int ov = sg_arg_find(c, SG_BUF_OVERFLOW, -2), ls = sg_arg_find(c, SG_BUF_LOSS_SCALE, -2);
    int st = sg_arg_find(c, SG_BUF_LOSS_SCALER_STATE, -2);
    if (ov < 0 || ls < 0 || st < 0 ||
        sg_arg_buffer(c, st)->bytes != (int64_t)sizeof(sg_loss_scaler_state)) {
        sg_task_fail(c, SG_EINVAL, "missing overflow, loss-scale or loss-scaler state buffer");
        return;
    }
    sg_loss_scaler_state s; /* copied: the buffer is int32 elements */
    memcpy(&s, sg_arg_ptr(buffers, st), sizeof s);
    if (sg_loss_scaler_update(&s, &c->shared->loss_scaler,
                              *(const int32_t *)sg_arg_ptr(buffers, ov)) == SG_LOSS_SCALER_AT_MIN) {
        /* DeepSpeed stops there too */
        sg_task_fail(c, SG_EINVAL,
                     "gradient overflow with the loss scale already at "
                     "fp16.min_loss_scale");
        return;
    }
    memcpy(sg_arg_ptr(buffers, st), &s, sizeof s);
    *(float *)sg_arg_ptr(buffers, ls) = (float)s.scale;
}

SG_CODELET(loss_scale, sg_loss_scale_cpu);
