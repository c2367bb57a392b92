/* loss_scaler.h - fp16 loss scale, with DeepSpeed's DynamicLossScaler rules.
 *
 * One job: hold the loss scale of an fp16 run and move it after each step the
 * way deepspeed/runtime/fp16/loss_scaler.py does, so a stepgraph run and a
 * DeepSpeed run skip the same steps and print the same scales.
 *
 * Three modes, chosen from the DeepSpeed config by sg_loss_scaler_init():
 * - fp16 disabled (fp32 or bf16): scale 1, never changes.
 * - fp16 with "loss_scale" > 0: that static scale, never changes.
 * - fp16 with "loss_scale" 0: dynamic, starting at 2^initial_scale_power.
 *
 * Dynamic rules, applied once per optimizer step (sg_loss_scaler_update):
 * - overflow: if hysteresis is used up (delayed_shift == 1 or
 *   cur_hysteresis == 1) the scale is divided by scale_factor (2), not
 *   below min_scale; otherwise only cur_hysteresis drops by one. Either way
 *   last_overflow_iter = cur_iter. An overflow while the scale already equals
 *   min_scale is where DeepSpeed raises "Current loss scale already at
 *   minimum" and the run ends: update then changes nothing and returns
 *   SG_LOSS_SCALER_AT_MIN.
 * - no overflow: with consecutive_hysteresis, cur_hysteresis is refilled.
 *   When the steps since the last overflow, not counting this one
 *   (cur_iter - last_overflow_iter - 1), are a positive multiple of
 *   scale_window, the scale is multiplied by scale_factor and (without
 *   consecutive_hysteresis) cur_hysteresis is refilled. So the scale first
 *   grows on the (scale_window + 1)-th clean step in a row.
 * - cur_iter counts every update, overflowing or not.
 * Note that a scale decrease does not refill the hysteresis: after the first
 * delayed_shift - 1 overflows, every overflow halves the scale until the
 * next increase.
 */
#ifndef SG_LOSS_SCALER_H
#define SG_LOSS_SCALER_H

#include <stdint.h>

#include "runtime/config/config.h"

/* Returned by sg_loss_scaler_update() where DeepSpeed would stop the run. */
#define SG_LOSS_SCALER_AT_MIN 1

typedef struct sg_loss_scaler {
    double scale;                   /* multiply the loss by this */
    int dynamic;                    /* 0: static (or no fp16), never changes */
    int64_t cur_iter;               /* updates so far */
    int64_t last_overflow_iter;     /* -1 before the first overflow */
    int64_t cur_hysteresis;         /* overflows still tolerated at this scale */
    /* parameters (DeepSpeed names) */
    int64_t scale_window;           /* fp16.loss_scale_window */
    double min_scale;               /* fp16.min_loss_scale */
    int64_t delayed_shift;          /* fp16.hysteresis */
    int consecutive_hysteresis;     /* fp16.consecutive_hysteresis, default 0 */
    double scale_factor;            /* 2 */
} sg_loss_scaler;

void sg_loss_scaler_init(sg_loss_scaler *s, const sg_ds_config *ds);

/* Records one optimizer step (overflow: gradients had inf/NaN, the step is
 * skipped). Returns 0, or SG_LOSS_SCALER_AT_MIN (state unchanged) when the
 * overflow happened at min_scale. Static scalers ignore the call. */
int sg_loss_scaler_update(sg_loss_scaler *s, int overflow);

int sg_loss_scaler_is_dynamic(const sg_loss_scaler *s);

#endif /* SG_LOSS_SCALER_H */
