/* loss_scaler.c - static and dynamic fp16 loss scale (see loss_scaler.h). */
#include "runtime/train/loss_scaler.h"

#include <math.h>
#include <string.h>

void sg_loss_scaler_init(sg_loss_scaler *s, const sg_ds_config *ds)
{
    memset(s, 0, sizeof *s);
    s->scale = 1.0;
    s->last_overflow_iter = -1;
    s->scale_factor = 2.0;
    s->min_scale = 1.0;
    s->scale_window = 1;
    s->delayed_shift = 1;
    s->cur_hysteresis = 1;
    if (!ds->fp16.enabled)
        return;                           /* fp32 / bf16: no scaling */
    if (ds->fp16.loss_scale > 0.0) {
        s->scale = ds->fp16.loss_scale;   /* static */
        return;
    }
    s->dynamic = 1;
    s->scale = ldexp(1.0, (int)ds->fp16.initial_scale_power);
    s->min_scale = ds->fp16.min_loss_scale;
    /* the config checks these; clamp so a hand-built config cannot divide
     * by zero or never shift */
    s->scale_window = ds->fp16.loss_scale_window > 0 ? ds->fp16.loss_scale_window : 1;
    s->delayed_shift = ds->fp16.hysteresis > 0 ? ds->fp16.hysteresis : 1;
    s->cur_hysteresis = s->delayed_shift;
}

int sg_loss_scaler_update(sg_loss_scaler *s, int overflow)
{
    if (!s->dynamic)
        return 0;
    if (overflow) {
        if (s->delayed_shift == 1 || s->cur_hysteresis == 1) {
            /* exact compare, as DeepSpeed does: halving a power of two lands
             * on a power-of-two min_scale exactly */
            if (s->scale == s->min_scale)
                return SG_LOSS_SCALER_AT_MIN;
            double next = s->scale / s->scale_factor;
            s->scale = next > s->min_scale ? next : s->min_scale;
        } else {
            s->cur_hysteresis--;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (s->consecutive_hysteresis)
            s->cur_hysteresis = s->delayed_shift;
        int64_t stable = s->cur_iter - s->last_overflow_iter - 1;
        if (stable > 0 && stable % s->scale_window == 0) {
            if (!s->consecutive_hysteresis)
                s->cur_hysteresis = s->delayed_shift;
            s->scale *= s->scale_factor;
        }
    }
    s->cur_iter++;
    return 0;
}

int sg_loss_scaler_is_dynamic(const sg_loss_scaler *s)
{
    return s->dynamic;
}
