/* reduce.c - the reduce-scatter and all-reduce codelets: a unit's gradient
 * into its gradient pieces, copied into a piece written fresh (first
 * micro-step) or added to one that accumulates (later ones).
 *
 * CPU: one rank, so the reduction is a copy or a sum.
 * CUDA: through the device's NCCL communicator when the build has it. With
 * one data-parallel rank (all `stepgraph run` supports today) it has one
 * rank, so NCCL's reductions copy; a later micro-step's gradient is reduced
 * into scratch and added into the piece on the device. Reduce-scatter and
 * all-reduce nodes both come here: with one rank their results are the
 * same. */
#include <string.h>

#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

void sg_reduce_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[SG_ARG_MAX_SLOTS], src;
    int n = sg_arg_reduce_slots(c, slots, SG_ARG_MAX_SLOTS, &src);
    if (n == 0)
        return;
    const sg_buffer *sb = sg_arg_buffer(c, src);
    const char *s = sg_arg_ptr(buffers, src);
    size_t esize = sg_dtype_size(sb->dtype);
    for (int i = 0; i < n; i++) {
        const sg_buffer *pb = sg_arg_buffer(c, slots[i]);
        const char *from = s + (size_t)pb->unit_offset * esize;
        void *to = sg_arg_ptr(buffers, slots[i]);
        if (sg_arg_write_only(c, slots[i])) {
            memcpy(to, from, (size_t)pb->bytes);
            continue;
        }
        sg_f32_view acc, add;
        if (sg_f32_view_open(&acc, to, pb->dtype, (size_t)pb->elems, 1) ||
            sg_f32_view_open(&add, (void *)from, pb->dtype, (size_t)pb->elems, 1)) {
            sg_f32_view_close(&acc, 0);
            sg_task_fail(c, SG_ENOMEM, "out of memory");
            return;
        }
        for (int64_t k = 0; k < pb->elems; k++)
            acc.p[k] += add.p[k];
        sg_f32_view_close(&add, 0);
        sg_f32_view_close(&acc, 1);
    }
}

#ifdef SG_STARPU_CUDA
#include "codelets/starpu/cuda_task.h"

void sg_reduce_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[SG_ARG_MAX_SLOTS], src;
    int n = sg_arg_reduce_slots(c, slots, SG_ARG_MAX_SLOTS, &src);
    if (n == 0)
        return;
    sg_cu cu = sg_cuda_task_cu();
    const sg_buffer *sb = sg_arg_buffer(c, src);
    const char *s = sg_arg_ptr(buffers, src);
    size_t esize = sg_dtype_size(sb->dtype);
    for (int i = 0; i < n; i++) {
        const sg_buffer *pb = sg_arg_buffer(c, slots[i]);
        const char *from = s + (size_t)pb->unit_offset * esize;
        void *to = sg_arg_ptr(buffers, slots[i]);
        int rc;
        if (pb->dtype != sb->dtype) {
            rc = SG_EINVAL;
        } else if (sg_arg_write_only(c, slots[i])) {
            rc = sg_cuda_collective(c, &cu, to, from, (size_t)pb->elems, pb->dtype, 0);
        } else {
            void *tmp = sg_cu_malloc_async(&cu, (size_t)pb->bytes);
            rc = !tmp ? SG_ENOMEM
                      : sg_cuda_collective(c, &cu, tmp, from, (size_t)pb->elems, pb->dtype, 0);
            if (!rc)
                rc = sg_cu_add_into(&cu, to, tmp, pb->dtype, (size_t)pb->elems);
            sg_cu_free_async(&cu, tmp);
        }
        if (rc) {
            sg_cuda_task_fail(c, rc, "gradient reduction failed");
            return;
        }
    }
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(reduce_scatter, sg_reduce_cpu, sg_reduce_cuda);
SG_CODELET2(allreduce, sg_reduce_cpu, sg_reduce_cuda);
