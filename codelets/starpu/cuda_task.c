/* cuda_task.c - helpers of the CUDA entry points (cuda_task.h) and the
 * worker's device state (cuda_state.h). Empty in a build without CUDA. */
#include "codelets/starpu/codelets.h"

#ifdef SG_STARPU_CUDA
#include <stdio.h>

#ifdef SG_HAVE_NCCL
#include <nccl.h>
#endif

#include "codelets/starpu/cuda_task.h"
#include "codelets/starpu/cuda_state.h"

const sg_cuda_device *sg_cuda_local_device(const sg_exec_shared *sh)
{
    int devid = starpu_worker_get_devid(starpu_worker_get_id());
    if (!sh->cuda || devid < 0 || devid >= SG_CUDA_MAX_DEVICES || !sh->cuda->dev[devid].ready)
        return NULL;
    return &sh->cuda->dev[devid];
}

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

/* The rank of this process among the run's ranks (0 with one). */
static int run_rank(const sg_task_ctx *c)
{
    return c->shared->comm ? c->shared->comm->rank : 0;
}

#ifdef SG_HAVE_NCCL
/* "rank R: CALL: NCCL's message[ (its last error)]" into msg; SG_EIO. */
static int nccl_fail(const sg_task_ctx *c, ncclComm_t comm, ncclResult_t r, const char *call,
                     char *msg, size_t size)
{
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
    const char *last = comm ? ncclGetLastError(comm) : NULL;
#else
    const char *last = NULL;
    (void)comm;
#endif
    snprintf(msg, size, "rank %d: %s: %s%s%s%s", run_rank(c), call, ncclGetErrorString(r),
             last && *last ? " (" : "", last && *last ? last : "", last && *last ? ")" : "");
    return SG_EIO;
}

/* The local device's communicator and dt's NCCL type, or an error in msg. */
static int nccl_setup(const sg_task_ctx *c, sg_dtype dt, const char *call, ncclComm_t *comm,
                      ncclDataType_t *t, char *msg, size_t size)
{
    *comm = local_comm(c);
    if (!*comm) {
        snprintf(msg, size, "rank %d: %s: this CUDA worker's device has no NCCL communicator",
                 run_rank(c), call);
        return SG_EINVAL;
    }
    if (nccl_type(dt, t)) {
        snprintf(msg, size, "rank %d: %s: dtype %s has no NCCL type", run_rank(c), call,
                 sg_dtype_name(dt));
        return SG_EINVAL;
    }
    return SG_OK;
}
#else
static int no_nccl(const sg_task_ctx *c, const char *call, char *msg, size_t size)
{
    snprintf(msg, size,
             "rank %d: %s: this stepgraph was built without NCCL (configure found "
             "no nccl.h): CUDA workers cannot run several ranks",
             run_rank(c), call);
    return SG_ENOTSUP;
}
#endif

int sg_cuda_nccl_allgather(const sg_task_ctx *c, const sg_cu *cu, const void *send, void *recv,
                           size_t count, sg_dtype dt, char *msg, size_t msg_size)
{
#ifdef SG_HAVE_NCCL
    ncclComm_t comm;
    ncclDataType_t t;
    int rc = nccl_setup(c, dt, "ncclAllGather", &comm, &t, msg, msg_size);
    if (rc)
        return rc;
    ncclResult_t r = ncclAllGather(send, recv, count, t, comm, (cudaStream_t)cu->stream);
    return r == ncclSuccess ? SG_OK : nccl_fail(c, comm, r, "ncclAllGather", msg, msg_size);
#else
    (void)cu, (void)send, (void)recv, (void)count, (void)dt;
    return no_nccl(c, "ncclAllGather", msg, msg_size);
#endif
}

int sg_cuda_nccl_reduce_scatter(const sg_task_ctx *c, const sg_cu *cu, const void *send, void *recv,
                                size_t count, sg_dtype dt, char *msg, size_t msg_size)
{
#ifdef SG_HAVE_NCCL
    ncclComm_t comm;
    ncclDataType_t t;
    int rc = nccl_setup(c, dt, "ncclReduceScatter", &comm, &t, msg, msg_size);
    if (rc)
        return rc;
    ncclResult_t r =
        ncclReduceScatter(send, recv, count, t, ncclSum, comm, (cudaStream_t)cu->stream);
    return r == ncclSuccess ? SG_OK : nccl_fail(c, comm, r, "ncclReduceScatter", msg, msg_size);
#else
    (void)cu, (void)send, (void)recv, (void)count, (void)dt;
    return no_nccl(c, "ncclReduceScatter", msg, msg_size);
#endif
}

int sg_cuda_nccl_allreduce(const sg_task_ctx *c, const sg_cu *cu, const sg_cuda_allreduce *v, int n,
                           char *msg, size_t msg_size)
{
#ifdef SG_HAVE_NCCL
    ncclComm_t comm;
    ncclDataType_t t;
    int rc = nccl_setup(c, SG_F32, "ncclAllReduce", &comm, &t, msg, msg_size);
    if (rc)
        return rc;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess)
        return nccl_fail(c, comm, r, "ncclGroupStart", msg, msg_size);
    for (int i = 0; i < n && r == ncclSuccess; i++) {
        t = v[i].type == SG_COMM_F64   ? ncclFloat64
            : v[i].type == SG_COMM_I32 ? ncclInt32
                                       : ncclFloat32;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
        ncclRedOp_t op = v[i].mean ? ncclAvg : ncclSum;
#else
        ncclRedOp_t op = ncclSum;
        if (v[i].mean) { /* no ncclAvg before NCCL 2.10 */
            ncclGroupEnd();
            snprintf(msg, msg_size,
                     "rank %d: ncclAllReduce: NCCL %d.%d has no ncclAvg (2.10 or "
                     "later needed)",
                     run_rank(c), NCCL_MAJOR, NCCL_MINOR);
            return SG_ENOTSUP;
        }
#endif
        r = ncclAllReduce(v[i].buf, v[i].buf, v[i].count, t, op, comm, (cudaStream_t)cu->stream);
    }
    /* the group is closed whatever happened inside it */
    ncclResult_t r2 = ncclGroupEnd();
    if (r != ncclSuccess)
        return nccl_fail(c, comm, r, "ncclAllReduce", msg, msg_size);
    return r2 == ncclSuccess
               ? SG_OK
               : nccl_fail(c, comm, r2, "ncclGroupEnd (ncclAllReduce)", msg, msg_size);
#else
    (void)cu, (void)v, (void)n;
    return no_nccl(c, "ncclAllReduce", msg, msg_size);
#endif
}

int sg_cuda_collective(const sg_task_ctx *c, const sg_cu *cu, void *dst, const void *src, size_t n,
                       sg_dtype dt, int gather, char *msg, size_t msg_size)
{
#ifdef SG_HAVE_NCCL
    ncclComm_t comm = local_comm(c);
    ncclDataType_t t;
    if (comm && nccl_type(dt, &t) == SG_OK) {
        ncclResult_t r =
            gather ? ncclAllGather(src, dst, n, t, comm, (cudaStream_t)cu->stream)
                   : ncclReduceScatter(src, dst, n, t, ncclSum, comm, (cudaStream_t)cu->stream);
        return r == ncclSuccess
                   ? SG_OK
                   : nccl_fail(c, comm, r, gather ? "ncclAllGather" : "ncclReduceScatter", msg,
                               msg_size);
    }
#else
    (void)gather;
#endif
    int rc = sg_cu_copy_async(cu, dst, src, n * sg_dtype_size(dt));
    if (rc)
        snprintf(msg, msg_size, "rank %d: cudaMemcpyAsync: %s", run_rank(c), sg_cu_last_error());
    return rc;
}

const void *sg_cuda_unit_params(const sg_task_ctx *c, void *buffers[], int unit, sg_dtype dt,
                                const sg_cu *cu, void **copy)
{
    int slots[SG_ARG_MAX_SLOTS];
    *copy = NULL;
    int n = sg_arg_unit_param_slots(c, unit, slots, SG_ARG_MAX_SLOTS);
    if (n == 0)
        return NULL;
    size_t esize = sg_dtype_size(dt), total = 0;
    for (int i = 0; i < n; i++) {
        if (sg_arg_buffer(c, slots[i])->dtype != dt)
            return NULL;
        total += (size_t)sg_arg_buffer(c, slots[i])->elems;
    }
    if (n == 1)
        return sg_arg_ptr(buffers, slots[0]);
    char *p = sg_cu_malloc_async(cu, total * esize);
    if (!p)
        return NULL;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)sg_arg_buffer(c, slots[i])->elems * esize;
        sg_cu_copy_async(cu, p + off, sg_arg_ptr(buffers, slots[i]), bytes);
        off += bytes;
    }
    *copy = p;
    return p;
}

int sg_cuda_scatter_params(const sg_task_ctx *c, void *buffers[], int src, const sg_cu *cu)
{
    static const sg_buf_role PARAM_PIECE[] = {SG_BUF_PARAM_PIECE};
    int slots[SG_ARG_MAX_SLOTS];
    int n = sg_arg_collect(c, PARAM_PIECE, 1, -2, 1, slots, SG_ARG_MAX_SLOTS);
    const sg_buffer *sb = sg_arg_buffer(c, src);
    for (int i = 0; i < n; i++) {
        const sg_buffer *pb = sg_arg_buffer(c, slots[i]);
        int64_t at, pat, len = sg_arg_overlap(c, src, slots[i], &at, &pat);
        if (len <= 0)
            continue;
        int rc = sg_cu_cast(
            cu, (char *)sg_arg_ptr(buffers, slots[i]) + (size_t)pat * sg_dtype_size(pb->dtype),
            pb->dtype,
            (const char *)sg_arg_ptr(buffers, src) + (size_t)at * sg_dtype_size(sb->dtype),
            sb->dtype, (size_t)len);
        if (rc)
            return rc;
    }
    return SG_OK;
}

#endif /* SG_STARPU_CUDA */
