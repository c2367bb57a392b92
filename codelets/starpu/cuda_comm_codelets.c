/* cuda_comm_codelets.c - CUDA entry points of the data-movement nodes: the
 * all-gather of a unit's parameters, the reduce-scatter / all-reduce of its
 * gradient (through NCCL when the build has it), the scatter of a
 * sub-group's host parameters into its device pieces, and casts. The
 * counterpart of comm_codelets.c.
 *
 * With one data-parallel rank (all `stepgraph run` supports today) the
 * communicator has one rank, so NCCL's all-gather is a copy and its
 * reductions copy too; a later micro-step's gradient is then added into the
 * piece on the device. */
#include "codelets/starpu/codelets.h"

#ifdef SG_STARPU_CUDA
#include <stdio.h>

#ifdef SG_HAVE_NCCL
#include <nccl.h>
#endif

#include "codelets/starpu/cuda_task.h"
#include "runtime/exec/exec_cuda.h"

#define MAX_SLOTS 4096

static const sg_buf_role PARAM_PIECE[] = {SG_BUF_PARAM_PIECE};

#ifdef SG_HAVE_NCCL
static int nccl_type(sg_dtype dt, ncclDataType_t *t)
{
    switch (dt) {
    case SG_F32: *t = ncclFloat32; return SG_OK;
    case SG_F16: *t = ncclFloat16; return SG_OK;
    case SG_BF16: *t = ncclBfloat16; return SG_OK;
    case SG_I32: *t = ncclInt32; return SG_OK;
    }
    return SG_EINVAL;
}

static ncclComm_t local_comm(const sg_task_ctx *c)
{
    const sg_cuda_device *d = sg_cuda_local_device(c->shared);
    return d ? (ncclComm_t)d->nccl : NULL;
}
#endif

/* dst <- src (n elements of dt) through the communicator: all-gather
 * (`gather`) or sum-reduction; a plain device copy without NCCL. */
static int collective(const sg_task_ctx *c, const sg_cu *cu, void *dst, const void *src,
                      size_t n, sg_dtype dt, int gather)
{
#ifdef SG_HAVE_NCCL
    ncclComm_t comm = local_comm(c);
    ncclDataType_t t;
    if (comm && nccl_type(dt, &t) == SG_OK) {
        ncclResult_t r = gather ? ncclAllGather(src, dst, n, t, comm, (cudaStream_t)cu->stream)
                                : ncclReduceScatter(src, dst, n, t, ncclSum, comm,
                                                    (cudaStream_t)cu->stream);
        return r == ncclSuccess ? SG_OK : SG_EIO;
    }
#else
    (void)c;
    (void)gather;
#endif
    return sg_cu_copy_async(cu, dst, src, n * sg_dtype_size(dt));
}

void sg_allgather_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[MAX_SLOTS], dst;
    int n = sg_arg_gather_slots(c, slots, MAX_SLOTS, &dst);
    if (n == 0)
        return;
    sg_cu cu = sg_cuda_task_cu();
    char *to = sg_arg_ptr(buffers, dst);
    for (int i = 0; i < n; i++) {
        const sg_buffer *b = sg_arg_buffer(c, slots[i]);
        int rc = collective(c, &cu, to, sg_arg_ptr(buffers, slots[i]), (size_t)b->elems,
                            b->dtype, 1);
        if (rc) {
            sg_cuda_task_fail(c, rc, "all-gather failed");
            return;
        }
        to += b->bytes;
    }
}

/* The unit's gradient into its pieces: reduced into the piece when the
 * piece is written fresh (first micro-step), reduced into scratch and added
 * when it accumulates. Reduce-scatter and all-reduce nodes both come here:
 * with one rank their results are the same. */
void sg_reduce_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[MAX_SLOTS], src;
    int n = sg_arg_reduce_slots(c, slots, MAX_SLOTS, &src);
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
            rc = collective(c, &cu, to, from, (size_t)pb->elems, pb->dtype, 0);
        } else {
            void *tmp = sg_cu_malloc_async(&cu, (size_t)pb->bytes);
            rc = !tmp ? SG_ENOMEM : collective(c, &cu, tmp, from, (size_t)pb->elems, pb->dtype, 0);
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

/* A sub-group's parameters (src: fp32 master or compute-dtype copy, now on
 * the device) into its pieces, converted to the pieces' dtype. */
static int scatter_params(const sg_task_ctx *c, void *buffers[], int src, const sg_cu *cu)
{
    int slots[MAX_SLOTS];
    int n = sg_arg_collect(c, PARAM_PIECE, 1, -2, 1, slots, MAX_SLOTS);
    const sg_buffer *sb = sg_arg_buffer(c, src);
    for (int i = 0; i < n; i++) {
        const sg_buffer *pb = sg_arg_buffer(c, slots[i]);
        int rc = sg_cu_cast(cu, sg_arg_ptr(buffers, slots[i]), pb->dtype,
                            sg_arg_subgroup_at(c, buffers, src, slots[i]), sb->dtype,
                            (size_t)pb->elems);
        if (rc)
            return rc;
    }
    return SG_OK;
}

void sg_h2d_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int src = sg_arg_param_source(c);
    if (src < 0)
        return;
    sg_cu cu = sg_cuda_task_cu();
    int rc = scatter_params(c, buffers, src, &cu);
    if (rc)
        sg_cuda_task_fail(c, rc, "parameter scatter failed");
}

/* The same three casts as sg_cast_cpu, on the GPU: StarPU brings the host
 * buffers over when the scheduler picks a CUDA worker for them. */
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
        rc = scatter_params(c, buffers, master, &cu);
    }
    if (rc)
        sg_cuda_task_fail(c, rc, rc == SG_EINVAL ? "nothing to cast" : "cast failed");
}

#endif /* SG_STARPU_CUDA */
