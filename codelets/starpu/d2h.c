/* d2h.c - the device-to-host codelet, two cases:
 * - a CPU sub-group's gradient pieces, end to end by sub-group offset, into
 *   its host buffer (the whole sub-group, or one chunk of it when the
 *   optimizer is tiled: the parts of the pieces in the chunk's range);
 * - parameters offloaded (ZeRO-3 offload_param): a GPU sub-group's update
 *   (its cast to the compute dtype, else its fp32 master) scattered into its
 *   parameter pieces, which live on the host.
 * CPU only: StarPU brings the device buffers over to main memory. */
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_d2h_cpu(void *buffers[], void *arg)
{
    static const sg_buf_role GRAD_PIECE[] = {SG_BUF_GRAD_PIECE};
    const sg_task_ctx *c = arg;
    if (sg_arg_find(c, SG_BUF_PARAM_PIECE, -2) >= 0) {
        int src = sg_arg_param_source(c);
        if (src >= 0)
            sg_arg_scatter_params(c, buffers, src);
        return;
    }
    int slots[SG_ARG_MAX_SLOTS];
    int n = sg_arg_collect(c, GRAD_PIECE, 1, -2, 1, slots, SG_ARG_MAX_SLOTS);
    int dst = sg_arg_find(c, SG_BUF_GRAD_HOST, -2);
    if (dst < 0 || n == 0) {
        sg_task_fail(c, SG_EINVAL, "no gradient pieces or host buffer");
        return;
    }
    sg_arg_gather_grads(c, buffers, dst);
}

SG_CODELET(d2h, sg_d2h_cpu);
