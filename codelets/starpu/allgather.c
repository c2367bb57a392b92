/* allgather.c - the all-gather codelet: a unit's parameter pieces, end to
 * end, into its gathered (stage 3) or full (stage 1/2) buffer.
 *
 * CPU: one rank, so the gather is a concatenation.
 * CUDA: through the device's NCCL communicator when the build has it (with
 * one rank, NCCL's all-gather is a copy), else device copies. */
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_allgather_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[SG_ARG_MAX_SLOTS], dst;
    int n = sg_arg_gather_slots(c, slots, SG_ARG_MAX_SLOTS, &dst);
    if (n == 0)
        return;
    sg_arg_concat(c, buffers, slots, n, sg_arg_ptr(buffers, dst));
}

#ifdef SG_STARPU_CUDA
#include "codelets/starpu/cuda_task.h"

void sg_allgather_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[SG_ARG_MAX_SLOTS], dst;
    int n = sg_arg_gather_slots(c, slots, SG_ARG_MAX_SLOTS, &dst);
    if (n == 0)
        return;
    sg_cu cu = sg_cuda_task_cu();
    char *to = sg_arg_ptr(buffers, dst);
    for (int i = 0; i < n; i++) {
        const sg_buffer *b = sg_arg_buffer(c, slots[i]);
        int rc = sg_cuda_collective(c, &cu, to, sg_arg_ptr(buffers, slots[i]), (size_t)b->elems,
                                    b->dtype, 1);
        if (rc) {
            sg_cuda_task_fail(c, rc, "all-gather failed");
            return;
        }
        to += b->bytes;
    }
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(allgather, sg_allgather_cpu, sg_allgather_cuda);
