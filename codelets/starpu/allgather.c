/* allgather.c - the all-gather codelet: a unit's parameter pieces, end to
 * end, into its gathered (stage 3) or full (stage 1/2) buffer.
 *
 * CPU, one rank: the gather is a concatenation. Several ranks (comm.h):
 * every rank's shard (its pieces end to end, ceil(p / dp) elements, the
 * last rank's padded) is all-gathered rank-major; the buffer takes the
 * first p elements, so the padding never reaches the parameters.
 * CUDA: through the device's NCCL communicator when the build has it (with
 * one rank, NCCL's all-gather is a copy), else device copies; with several
 * ranks the same layout (comm.h's sg_comm_layout) over NCCL, one GPU per
 * rank (written, not yet run on a machine with several GPUs: docs/gpu.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"
#include "codelets/starpu/comm.h"

/* The rank-major layout of dst over the ranks (comm.h), checked against the
 * n pieces at slots: together they must be this rank's block. 0, or fails
 * the task. */
static int gather_layout(const sg_task_ctx *c, const int *slots, int n, int dst, sg_comm_layout *l)
{
    const sg_comm *comm = c->shared->comm;
    const sg_buffer *db = sg_arg_buffer(c, dst);
    size_t shard = 0;
    for (int i = 0; i < n; i++)
        shard += (size_t)sg_arg_buffer(c, slots[i])->elems;
    if (sg_comm_layout_of(l, (size_t)db->elems, comm->size, comm->rank) ||
        !sg_comm_layout_holds(l, shard, 0)) {
        char what[400];
        snprintf(what, sizeof what,
                 "all-gather of %s: pieces of %zu elements on rank %d of %d, "
                 "not its block of ceil(%lld / %d)",
                 db->name, shard, comm->rank, comm->size, (long long)db->elems, comm->size);
        sg_task_fail(c, SG_EINVAL, what);
        return SG_EINVAL;
    }
    return SG_OK;
}

/* Several ranks: the blocks of every rank into dst (p elements of esize). */
static void allgather_ranks(const sg_task_ctx *c, void *buffers[], const int *slots, int n, int dst)
{
    const sg_comm *comm = c->shared->comm;
    /* a rank whose step already failed calls no more collectives: it ends
     * the step, reports, and the CLI's MPI_Abort ends the ranks that wait */
    if (__atomic_load_n(&c->shared->failed, __ATOMIC_ACQUIRE))
        return;
    sg_comm_layout l;
    if (gather_layout(c, slots, n, dst, &l))
        return;
    const sg_buffer *db = sg_arg_buffer(c, dst);
    size_t esize = sg_dtype_size(db->dtype);
    char msg[256], what[400];
    /* the pieces end to end, and the padded gather, when neither is a buffer */
    sg_task_mem send_mem = {0}, recv_mem = {0};
    int rc = n > 1 ? sg_task_mem_alloc(&send_mem, l.block * esize) : SG_OK;
    if (!rc && l.padded != l.elems)
        rc = sg_task_mem_alloc(&recv_mem, l.padded * esize);
    char *send = n > 1 ? send_mem.p : sg_arg_ptr(buffers, slots[0]);
    char *recv = l.padded != l.elems ? recv_mem.p : sg_arg_ptr(buffers, dst);
    if (!rc && n > 1)
        sg_arg_concat(c, buffers, slots, n, send);
    if (!rc && (rc = comm->allgather(comm->impl, send, recv, l.block * esize, msg, sizeof msg))) {
        snprintf(what, sizeof what, "all-gather of %s: %s", db->name, msg);
        sg_task_fail(c, rc, what);
    } else if (rc)
        sg_task_fail(c, rc, "out of memory");
    else if (recv != sg_arg_ptr(buffers, dst))
        memcpy(sg_arg_ptr(buffers, dst), recv, l.elems * esize);
    sg_task_mem_free(&send_mem);
    sg_task_mem_free(&recv_mem);
}

void sg_allgather_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[SG_ARG_MAX_SLOTS], dst;
    int n = sg_arg_gather_slots(c, slots, SG_ARG_MAX_SLOTS, &dst);
    if (n == 0)
        return;
    if (c->shared->comm && c->shared->comm->size > 1) {
        allgather_ranks(c, buffers, slots, n, dst);
        return;
    }
    sg_arg_concat(c, buffers, slots, n, sg_arg_ptr(buffers, dst));
}

#ifdef SG_STARPU_CUDA
#include "codelets/starpu/cuda_task.h"

/* Several ranks, as allgather_ranks over the device's NCCL communicator:
 * the pieces end to end (stream-ordered scratch unless there is one) are
 * this rank's block; the blocks are gathered into dst, or into scratch of
 * the padded size when the last rank's block runs past the unit (then the
 * first p elements are copied into dst). */
static void allgather_ranks_cuda(const sg_task_ctx *c, void *buffers[], const int *slots, int n,
                                 int dst)
{
    if (__atomic_load_n(&c->shared->failed, __ATOMIC_ACQUIRE))
        return; /* as on the CPU: no collective after a failure */
    sg_comm_layout l;
    if (gather_layout(c, slots, n, dst, &l))
        return;
    const sg_buffer *db = sg_arg_buffer(c, dst);
    for (int i = 0; i < n; i++)
        if (sg_arg_buffer(c, slots[i])->dtype != db->dtype) {
            sg_task_fail(c, SG_EINVAL, "all-gather: a piece's dtype is not its buffer's");
            return;
        }
    sg_cu cu = sg_cuda_task_cu();
    size_t esize = sg_dtype_size(db->dtype);
    char *to = sg_arg_ptr(buffers, dst), msg[256] = "", what[400];
    char *send = n == 1 ? sg_arg_ptr(buffers, slots[0]) : sg_cu_malloc_async(&cu, l.block * esize);
    char *recv = l.padded == l.elems ? to : sg_cu_malloc_async(&cu, l.padded * esize);
    int rc = !send || !recv ? SG_ENOMEM : SG_OK;
    size_t off = 0;
    for (int i = 0; !rc && n > 1 && i < n; i++) {
        const sg_buffer *b = sg_arg_buffer(c, slots[i]);
        rc = sg_cu_copy_async(&cu, send + off * esize, sg_arg_ptr(buffers, slots[i]),
                              (size_t)b->bytes);
        off += (size_t)b->elems;
    }
    if (!rc)
        rc = sg_cuda_nccl_allgather(c, &cu, send, recv, l.block, db->dtype, msg, sizeof msg);
    else if (rc == SG_EIO)
        snprintf(msg, sizeof msg, "rank %d: copying the pieces: %s", c->shared->comm->rank,
                 sg_cu_last_error());
    if (!rc && recv != to && (rc = sg_cu_copy_async(&cu, to, recv, l.elems * esize)))
        snprintf(msg, sizeof msg, "rank %d: copying the gathered blocks: %s", c->shared->comm->rank,
                 sg_cu_last_error());
    if (rc == SG_ENOMEM)
        snprintf(msg, sizeof msg, "rank %d: out of device memory for %zu padded elements",
                 c->shared->comm->rank, l.padded);
    if (n > 1)
        sg_cu_free_async(&cu, send);
    if (recv != to)
        sg_cu_free_async(&cu, recv);
    if (rc) {
        snprintf(what, sizeof what, "all-gather of %s: %s", db->name, msg);
        sg_task_fail(c, rc, what);
    }
}

void sg_allgather_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[SG_ARG_MAX_SLOTS], dst;
    int n = sg_arg_gather_slots(c, slots, SG_ARG_MAX_SLOTS, &dst);
    if (n == 0)
        return;
    if (c->shared->comm && c->shared->comm->size > 1) {
        allgather_ranks_cuda(c, buffers, slots, n, dst);
        return;
    }
    sg_cu cu = sg_cuda_task_cu();
    char *to = sg_arg_ptr(buffers, dst), msg[256], what[400];
    for (int i = 0; i < n; i++) {
        const sg_buffer *b = sg_arg_buffer(c, slots[i]);
        int rc = sg_cuda_collective(c, &cu, to, sg_arg_ptr(buffers, slots[i]), (size_t)b->elems,
                                    b->dtype, 1, msg, sizeof msg);
        if (rc) {
            snprintf(what, sizeof what, "all-gather of %s: %s", b->name, msg);
            sg_task_fail(c, rc, what);
            return;
        }
        to += b->bytes;
    }
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(allgather, sg_allgather_cpu, sg_allgather_cuda);
