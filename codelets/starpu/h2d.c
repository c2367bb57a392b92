/* h2d.c - the host-to-device codelet: a sub-group's parameters (the
 * compute-dtype host copy, else the fp32 master) scattered into its
 * parameter pieces, converted to the pieces' dtype. The node runs on a CUDA
 * worker when there is one; the CPU entry point serves CPU-only runs. */
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_h2d_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int src = sg_arg_param_source(c);
    if (src >= 0)
        sg_arg_scatter_params(c, buffers, src);
}

#ifdef SG_STARPU_CUDA
#include "codelets/starpu/cuda_task.h"

void sg_h2d_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int src = sg_arg_param_source(c);
    if (src < 0)
        return;
    sg_cu cu = sg_cuda_task_cu();
    int rc = sg_cuda_scatter_params(c, buffers, src, &cu);
    if (rc)
        sg_cuda_task_fail(c, rc, "parameter scatter failed");
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(h2d, sg_h2d_cpu, sg_h2d_cuda);
