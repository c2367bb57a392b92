/* adam_loops.h - what adam.c shares with adam_lowp.c inside libsgcpu: the
 * argument checks and the resolved per-ISA loops of the three update rules,
 * so that the 16-bit entry points (adam_lowp.h) step blocks with the very
 * loops sg_adam_step runs. Not for callers outside codelets/cpu/.
 */
#ifndef SG_CODELETS_CPU_ADAM_LOOPS_H
#define SG_CODELETS_CPU_ADAM_LOOPS_H

#include <stddef.h>
#include <stdint.h>

#include "codelets/cpu/adam.h"
#include "codelets/cpu/lion_adagrad.h" /* sg_optim_step_fn, sg_optim_rollback_fn */

/* sg_adam_step's checks: SG_EINVAL (bad parameters, t < 1, a non-finite
 * grad_scale, a buffer the rule needs is NULL with n > 0) or the ISA's
 * resolution error; 0 with *isa resolved. g is only tested for NULL, so it
 * may point at a gradient of any dtype. */
int sg_adam_check_call(const sg_adam_params *prm, int64_t t, const float *p, const void *g,
                       const float *m, const float *v, size_t n, float grad_scale,
                       sg_adam_isa *isa);

/* The checks and coefficients of a rollback of step t taken with grad_scale:
 * 1 when there is nothing to do (n == 0), 0 when c and isa are set, or an
 * error (sg_adam_rollback's). */
int sg_adam_rollback_prepare(const sg_adam_params *prm, int64_t t, const float *p, const void *g,
                             const float *m, const float *v, size_t n, float grad_scale,
                             sg_adam_coef *c, sg_adam_isa *isa);

/* The step and rollback loops of algo for a resolved isa (never NULL for a
 * value the checks accepted). */
sg_optim_step_fn sg_adam_step_loop(sg_optim_algo algo, sg_adam_isa isa);
sg_optim_rollback_fn sg_adam_rollback_loop(sg_optim_algo algo, sg_adam_isa isa);

#endif /* SG_CODELETS_CPU_ADAM_LOOPS_H */
