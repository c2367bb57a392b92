/* cast.c - the cast codelet, three cases: a CPU sub-group's host gradients
 * to fp32; the fp32 master to the compute dtype, into the host copy of a
 * CPU sub-group or the parameter pieces of a GPU one. On the GPU, StarPU
 * brings the host buffers over when the scheduler picks a CUDA worker. */
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_cast_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int g = sg_arg_find(c, SG_BUF_GRAD_HOST, -2), g32 = sg_arg_find(c, SG_BUF_GRAD_HOST_F32, -2);
    if (g >= 0 && g32 >= 0) {
        const sg_buffer *b = sg_arg_buffer(c, g);
        sg_f32_load(sg_arg_ptr(buffers, g32), sg_arg_ptr(buffers, g), b->dtype, (size_t)b->elems);
        return;
    }
    int master = sg_arg_find(c, SG_BUF_MASTER, -2), host = sg_arg_find(c, SG_BUF_PARAM_HOST, -2);
    if (master < 0) {
        sg_task_fail(c, SG_EINVAL, "nothing to cast");
        return;
    }
    if (host >= 0) {
        const sg_buffer *b = sg_arg_buffer(c, host);
        sg_f32_store(sg_arg_ptr(buffers, host), b->dtype, sg_arg_ptr(buffers, master),
                     (size_t)b->elems);
        return;
    }
    sg_arg_scatter_params(c, buffers, master);
}

#ifdef SG_STARPU_CUDA
#include "codelets/starpu/cuda_task.h"

void sg_cast_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    sg_cu cu = sg_cuda_task_cu();
    int rc;
    int g = sg_arg_find(c, SG_BUF_GRAD_HOST, -2), g32 = sg_arg_find(c, SG_BUF_GRAD_HOST_F32, -2);
    int master = sg_arg_find(c, SG_BUF_MASTER, -2), host = sg_arg_find(c, SG_BUF_PARAM_HOST, -2);
    if (g >= 0 && g32 >= 0) {
        const sg_buffer *b = sg_arg_buffer(c, g);
        rc = sg_cu_cast(&cu, sg_arg_ptr(buffers, g32), SG_F32, sg_arg_ptr(buffers, g), b->dtype,
                        (size_t)b->elems);
    } else if (master < 0) {
        rc = SG_EINVAL;
    } else if (host >= 0) {
        const sg_buffer *b = sg_arg_buffer(c, host);
        rc = sg_cu_cast(&cu, sg_arg_ptr(buffers, host), b->dtype, sg_arg_ptr(buffers, master),
                        SG_F32, (size_t)b->elems);
    } else {
        rc = sg_cuda_scatter_params(c, buffers, master, &cu);
    }
    if (rc)
        sg_cuda_task_fail(c, rc, rc == SG_EINVAL ? "nothing to cast" : "cast failed");
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(cast, sg_cast_cpu, sg_cast_cuda);
