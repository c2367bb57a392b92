/* loss_scale.c - DeepSpeed's dynamic loss-scale update (loss_scale.h). */
#include "codelets/cpu/loss_scale.h"

_Static_assert(sizeof(sg_loss_scaler_state) == 32 && sizeof(sg_loss_scaler_state) % 4 == 0,
               "the state buffer holds the struct's raw bytes as int32 elements");

int sg_loss_scaler_update(sg_loss_scaler_state *s, const sg_loss_scaler_params *p, int overflow)
{
    if (!p->dynamic)
        return 0;
    if (overflow) {
        if (p->delayed_shift == 1 || s->cur_hysteresis == 1) {
            /* exact compare, as DeepSpeed does: halving a power of two lands
             * on a power-of-two min_scale exactly */
            if (s->scale == p->min_scale)
                return SG_LOSS_SCALER_AT_MIN;
            double next = s->scale / p->scale_factor;
            s->scale = next > p->min_scale ? next : p->min_scale;
        } else {
            s->cur_hysteresis--;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (p->consecutive_hysteresis)
            s->cur_hysteresis = p->delayed_shift;
        int64_t stable = s->cur_iter - s->last_overflow_iter - 1;
        if (stable > 0 && stable % p->scale_window == 0) {
            if (!p->consecutive_hysteresis)
                s->cur_hysteresis = p->delayed_shift;
            s->scale *= p->scale_factor;
        }
    }
    s->cur_iter++;
    return 0;
}
