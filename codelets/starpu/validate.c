/* validate.c - SuperOffload's validation of a speculative CPU Adam step:
 * keep it, or undo it (fp16 overflow), or undo and redo it with the
 * clipping coefficient now known. CPU only. */
#include "codelets/cpu/adam_lowp.h"
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_validate_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    sg_host_group h;
    int nb = sg_arg_find(c, SG_BUF_GRAD_NORM, -2);
    if (sg_arg_host_group(c, buffers, &h) || nb < 0) {
        sg_task_fail(c, SG_EINVAL, "missing validation buffers");
        return;
    }
    const float *norm = sg_arg_ptr(buffers, nb);
    float spec_mult = norm[1]; /* what the speculative step used */
    float mult = spec_mult;
    int skip = sg_arg_step_checks(c, buffers, &mult);
    int ov = sg_arg_find(c, SG_BUF_OVERFLOW, -2);
    if (!sg_adam_speculation_fails(norm, ov >= 0 && *(const int32_t *)sg_arg_ptr(buffers, ov),
                                   c->step->clip))
        return;
    sg_adam_params prm = sg_arg_adam_params(c);
    int64_t t = c->step->t;
    /* undo the speculative step and, unless the step is skipped, redo it
     * with the multiplier now known: one pass over the state; with fused
     * casts the 16-bit parameters the step wrote are rewritten in it */
    int rc = sg_adam_redo_lowp(&prm, t, h.p, h.g, h.gdt, h.m, h.v, h.pout, h.pdt, h.n, spec_mult,
                               mult, !skip);
    if (rc)
        sg_task_fail(c, rc, "rollback failed");
}

SG_CODELET(validate, sg_validate_cpu);
