/* loss_scaler.h - the fp16 loss scaler's parameters and first state, from
 * the DeepSpeed config. The update rule is codelets/cpu/loss_scale.h (its
 * modes and rules are described there); during a run the state lives in a
 * StarPU buffer that the loss-scale task updates after each step.
 */
#ifndef SG_LOSS_SCALER_H
#define SG_LOSS_SCALER_H

#include "codelets/cpu/loss_scale.h"
#include "runtime/config/config.h"

/* fp16 disabled: scale 1, static; "loss_scale" > 0: that scale, static;
 * "loss_scale" 0: dynamic from 2^initial_scale_power. */
void sg_loss_scaler_init(sg_loss_scaler_params *p, sg_loss_scaler_state *s, const sg_ds_config *ds);

#endif /* SG_LOSS_SCALER_H */
