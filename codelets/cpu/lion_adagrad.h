/* lion_adagrad.h - the CPU Lion and Adagrad loops behind sg_adam_step,
 * sg_adam_rollback and sg_adam_step_parallel (codelets/cpu/adam.h states the
 * formulas and their roundings). Internal to libsgcpu: adam.c checks the
 * arguments, fills the sg_adam_coef and calls what these functions return.
 */
#ifndef SG_CODELETS_CPU_LION_ADAGRAD_H
#define SG_CODELETS_CPU_LION_ADAGRAD_H

#include <stddef.h>
#include <stdint.h>

#include "codelets/cpu/adam.h"

/* The loops have Adam's signature, so that the pthreads split and the
 * dispatch treat the three rules alike: p (n,) master weights, g (n,)
 * gradients, m (n,) first moment (Lion; Adagrad ignores it, may be NULL),
 * v (n,) sum of squares (Adagrad; Lion ignores it, may be NULL), p_bf16 (n,)
 * or NULL. */
typedef void (*sg_optim_step_fn)(const sg_adam_coef *c, float *p, const float *g, float *m,
                                 float *v, uint16_t *p_bf16, size_t n);
typedef void (*sg_optim_rollback_fn)(const sg_adam_coef *c, float *p, const float *g, float *m,
                                     float *v, size_t n);

/* The step of algo (SG_OPTIM_LION or SG_OPTIM_ADAGRAD) for a resolved,
 * supported isa (not AUTO); NULL for SG_OPTIM_ADAM or a value outside the
 * enum. All variants give the same bits; the AVX-512 one needs AVX-512BW as
 * well (its bf16 stores) and falls back to the AVX2 one without it. */
sg_optim_step_fn sg_lion_adagrad_step_fn(sg_optim_algo algo, sg_adam_isa isa);

/* The rollback, likewise. */
sg_optim_rollback_fn sg_lion_adagrad_rollback_fn(sg_optim_algo algo, sg_adam_isa isa);

#endif /* SG_CODELETS_CPU_LION_ADAGRAD_H */
