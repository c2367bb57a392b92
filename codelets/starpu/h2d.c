/* h2d.c - the host-to-device codelet, two cases (sg_node_is_param_fetch):
 * - a sub-group's parameters (the compute-dtype host copy, else the fp32
 *   master) scattered into its parameter pieces, converted to the pieces'
 *   dtype;
 * - parameters offloaded (ZeRO-3 offload_param): a unit's pieces, which
 *   live on the host, end to end into its device buffer before an
 *   all-gather or a forward/backward (a fetch node has no host copy or
 *   master among its buffers).
 * The node runs on a CUDA worker when there is one: StarPU brings the host
 * buffers over as its inputs. The CPU entry point serves CPU-only runs. */
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

static int is_fetch(const sg_task_ctx *c)
{
    return sg_node_is_param_fetch(&c->shared->graph->nodes[c->node]);
}

void sg_h2d_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    if (is_fetch(c)) {
        int slots[SG_ARG_MAX_SLOTS], dst;
        int n = sg_arg_fetch_slots(c, slots, SG_ARG_MAX_SLOTS, &dst);
        if (n > 0)
            sg_arg_concat(c, buffers, slots, n, sg_arg_ptr(buffers, dst));
        return;
    }
    int src = sg_arg_param_source(c);
    if (src >= 0)
        sg_arg_scatter_params(c, buffers, src);
}

#ifdef SG_STARPU_CUDA
#include "codelets/starpu/cuda_task.h"

static void fetch_cuda(const sg_task_ctx *c, void *buffers[], sg_cu *cu)
{
    int slots[SG_ARG_MAX_SLOTS], dst;
    int n = sg_arg_fetch_slots(c, slots, SG_ARG_MAX_SLOTS, &dst);
    char *to = sg_arg_ptr(buffers, dst);
    for (int i = 0; i < n; i++) {
        const sg_buffer *b = sg_arg_buffer(c, slots[i]);
        if (sg_cu_copy_async(cu, to, sg_arg_ptr(buffers, slots[i]), (size_t)b->bytes)) {
            sg_cuda_task_fail(c, SG_EIO, "parameter fetch failed");
            return;
        }
        to += b->bytes;
    }
}

void sg_h2d_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    sg_cu cu = sg_cuda_task_cu();
    if (is_fetch(c)) {
        fetch_cuda(c, buffers, &cu);
        return;
    }
    int src = sg_arg_param_source(c);
    if (src < 0)
        return;
    int rc = sg_cuda_scatter_params(c, buffers, src, &cu);
    if (rc)
        sg_cuda_task_fail(c, rc, "parameter scatter failed");
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(h2d, sg_h2d_cpu, sg_h2d_cuda);
