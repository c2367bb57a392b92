/* loss_scaler.c - the fp16 loss scaler from the DeepSpeed config (see
 * loss_scaler.h). */
#include "runtime/train/loss_scaler.h"

#include <math.h>
#include <string.h>

void sg_loss_scaler_init(sg_loss_scaler_params *p, sg_loss_scaler_state *s, const sg_ds_config *ds)
{
    memset(p, 0, sizeof *p);
    memset(s, 0, sizeof *s);
    s->scale = 1.0;
    s->last_overflow_iter = -1;
    s->cur_hysteresis = 1;
    p->scale_factor = 2.0;
    p->min_scale = 1.0;
    p->scale_window = 1;
    p->delayed_shift = 1;
    if (!ds->fp16.enabled)
        return; /* fp32 / bf16: no scaling */
    if (ds->fp16.loss_scale > 0.0) {
        s->scale = ds->fp16.loss_scale; /* static */
        return;
    }
    p->dynamic = 1;
    s->scale = ldexp(1.0, (int)ds->fp16.initial_scale_power);
    p->min_scale = ds->fp16.min_loss_scale;
    /* the config checks these; clamp so a hand-built config cannot divide
     * by zero or never shift */
    p->scale_window = ds->fp16.loss_scale_window > 0 ? ds->fp16.loss_scale_window : 1;
    p->delayed_shift = ds->fp16.hysteresis > 0 ? ds->fp16.hysteresis : 1;
    s->cur_hysteresis = p->delayed_shift;
}
