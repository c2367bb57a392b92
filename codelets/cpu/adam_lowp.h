/* adam_lowp.h - the optimizer step with the casts of mixed precision fused
 * into its pass (compute only, no StarPU).
 *
 * The chain a CPU sub-group runs with unfused casts crosses memory three
 * times per parameter: the 16-bit gradient cast to an fp32 copy (2 B read +
 * 4 B written), the step on p, g, m, v (16 B read + 12 B written), the fp32
 * master cast back to 16 bits (4 B read + 2 B written): 40 B per parameter.
 * These entry points read the 16-bit gradient and write the 16-bit
 * parameters in the step's own pass: 2 + 12 B read, 12 + 2 B written, 28 B.
 *
 * How: the n elements are walked in blocks of SG_ADAM_LOWP_BLOCK; a block's
 * gradient is converted into an fp32 scratch on the stack (8 KiB, which
 * stays in the core's L1/L2 and never reaches memory), stepped by the same
 * per-ISA loop sg_adam_step runs (codelets/cpu/adam.c: scalar, AVX2,
 * AVX-512, NEON; Adam, Lion and Adagrad alike), and its updated p is
 * rounded into the 16-bit output while still in cache. The conversions are
 * the cast codelet's own (codelets/cpu/ops.h: bf16 -> fp32 is exact,
 * fp32 -> bf16/fp16 round to nearest even) and every loop is element-wise
 * with whole vectors up to the array's tail, so the results are bit for bit
 * those of cast, sg_adam_step (or sg_adam_redo), cast (tests/test_adam.c
 * checks every variant and rule).
 *
 * Functions return 0 or a negative SG_E* code; they never print or exit.
 */
#ifndef SG_CODELETS_CPU_ADAM_LOWP_H
#define SG_CODELETS_CPU_ADAM_LOWP_H

#include <stddef.h>
#include <stdint.h>

#include "codelets/cpu/adam.h"
#include "common/dtype.h"

/* Elements per block: 2048 floats (8 KiB) of gradient scratch; a multiple of
 * 16, so every vector variant runs whole vectors up to the array's tail. */
#define SG_ADAM_LOWP_BLOCK 2048

/* sg_adam_step with the gradient g (n,) stored as g_dt (SG_BF16, SG_F16 or
 * SG_F32) and, when p_out is not NULL, the updated p (n,) stored into p_out
 * as out_dt (SG_BF16 or SG_F16) in the same pass. The same errors as
 * sg_adam_step, and SG_EINVAL for another dtype. */
int sg_adam_step_lowp(const sg_adam_params *prm, int64_t t, float *p, const void *g, sg_dtype g_dt,
                      float *m, float *v, void *p_out, sg_dtype out_dt, size_t n, float grad_scale);

/* sg_adam_redo (rollback of the speculative step taken with spec_scale,
 * then the step again with grad_scale when redo is set) with g stored as
 * g_dt, and, when p_out is not NULL, the final p (rolled back, or redone)
 * stored into p_out as out_dt in the same pass: after a rollback the 16-bit
 * parameters must be the master's again. The same errors as sg_adam_redo. */
int sg_adam_redo_lowp(const sg_adam_params *prm, int64_t t, float *p, const void *g, sg_dtype g_dt,
                      float *m, float *v, void *p_out, sg_dtype out_dt, size_t n, float spec_scale,
                      float grad_scale, int redo);

#endif /* SG_CODELETS_CPU_ADAM_LOWP_H */
