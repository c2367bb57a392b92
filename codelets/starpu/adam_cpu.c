/* adam_cpu.c - the CPU Adam codelet: Adam on a sub-group whose state is
 * offloaded to the host (fp32 gradients on the host, fp32 master,
 * moments; with cast_placement "fused" the 16-bit host gradients instead,
 * and the 16-bit host parameters written in the same pass). With SuperOffload the step is speculative: unscaled but not
 * clipped, and not skipped on overflow; the validate node then keeps it or
 * corrects it. CPU only. */
#include "codelets/cpu/adam_lowp.h"
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_adam_cpu_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    sg_host_group h;
    if (sg_arg_host_group(c, buffers, &h)) {
        sg_task_fail(c, SG_EINVAL, "missing Adam buffers");
        return;
    }
    float mult = 1.0f;
    if (c->shared->spec->super_offload) {
        /* speculative: unscaled, not clipped; validation corrects it */
        mult = (float)(1.0 /
                       (double)sg_arg_scalar(buffers, sg_arg_find(c, SG_BUF_LOSS_SCALE, -2), 1.0f));
    } else if (sg_arg_step_checks(c, buffers, &mult)) {
        /* overflow: skip; with fused casts the 16-bit parameters this task
         * writes are still the master's, as the cast node would make them */
        if (h.pout)
            sg_f32_store(h.pout, h.pdt, h.p, h.n);
        return;
    }
    sg_adam_params prm = sg_arg_adam_params(c);
    int rc;
    if (h.gdt == SG_F32 && !h.pout)
        rc = sg_adam_step(&prm, c->step->t, h.p, h.g, h.m, h.v, NULL, h.n, mult);
    else /* fused casts: 16-bit gradients in, 16-bit parameters out, one pass */
        rc = sg_adam_step_lowp(&prm, c->step->t, h.p, h.g, h.gdt, h.m, h.v, h.pout, h.pdt, h.n,
                               mult);
    if (rc)
        sg_task_fail(c, rc, "Adam step failed");
}

SG_CODELET(adam_cpu, sg_adam_cpu_cpu);
