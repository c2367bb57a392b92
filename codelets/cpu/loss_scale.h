/* loss_scale.h - fp16 dynamic loss scaling with DeepSpeed's
 * DynamicLossScaler rules (deepspeed/runtime/fp16/loss_scaler.py), so a
 * stepgraph run and a DeepSpeed run skip the same steps and print the same
 * scales. Pure C: the loss-scale codelet (codelets/starpu/loss_scale.c)
 * applies it to the state it holds in a StarPU buffer; the trainer sets the
 * parameters and the first state from the DeepSpeed config
 * (runtime/train/loss_scaler.h).
 *
 * Three modes:
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
#ifndef SG_CPU_LOSS_SCALE_H
#define SG_CPU_LOSS_SCALE_H

#include <stdint.h>

#include "graph/ir.h"

/* Returned by sg_loss_scaler_update() where DeepSpeed would stop the run. */
#define SG_LOSS_SCALER_AT_MIN 1

/* What does not change during a run (DeepSpeed's names in comments). */
typedef struct sg_loss_scaler_params {
    int dynamic;                /* 0: static (or no fp16), the scale never changes */
    int64_t scale_window;       /* fp16.loss_scale_window, >= 1 */
    double min_scale;           /* fp16.min_loss_scale */
    int64_t delayed_shift;      /* fp16.hysteresis, >= 1 */
    int consecutive_hysteresis; /* fp16.consecutive_hysteresis, default 0 */
    double scale_factor;        /* 2 */
} sg_loss_scaler_params;

/* What an update changes. In a run it lives in the persistent buffer of
 * role SG_BUF_LOSS_SCALER_STATE (graph/ir.h): the raw bytes of this struct
 * (32 bytes, no padding) in an I32 buffer of SG_LOSS_SCALER_STATE_I32
 * elements, read and written only by the loss-scale task between the
 * trainer's loads and reads. */
typedef struct sg_loss_scaler_state {
    double scale;               /* multiply the loss by this */
    int64_t cur_iter;           /* updates so far */
    int64_t last_overflow_iter; /* -1 before the first overflow */
    int64_t cur_hysteresis;     /* overflows still tolerated at this scale */
} sg_loss_scaler_state;

/* the buffer the step compiler sizes (graph/ir.h) holds exactly this */
_Static_assert(sizeof(sg_loss_scaler_state) == SG_LOSS_SCALER_STATE_I32 * sizeof(int32_t),
               "SG_LOSS_SCALER_STATE_I32 must match sg_loss_scaler_state");

/* Records one optimizer step (overflow: gradients had inf/NaN, the step is
 * skipped). Returns 0, or SG_LOSS_SCALER_AT_MIN (state unchanged) when the
 * overflow happened at min_scale. Static scalers ignore the call. */
int sg_loss_scaler_update(sg_loss_scaler_state *s, const sg_loss_scaler_params *p, int overflow);

#endif /* SG_CPU_LOSS_SCALE_H */
