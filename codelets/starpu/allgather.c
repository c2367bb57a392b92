/* allgather.c - the all-gather codelet: a unit's parameter pieces, end to
 * end, into its gathered (stage 3) or full (stage 1/2) buffer.
 *
 * CPU, one rank: the gather is a concatenation. Several ranks (comm.h):
 * every rank's shard (its pieces end to end, ceil(p / dp) elements, the
 * last rank's padded) is all-gathered rank-major; the buffer takes the
 * first p elements, so the padding never reaches the parameters.
 * CUDA: through the device's NCCL communicator when the build has it (with
 * one rank, NCCL's all-gather is a copy), else device copies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"
#include "codelets/starpu/comm.h"

/* Several ranks: the shards of every rank into dst (p elements of esize). */
static void allgather_ranks(const sg_task_ctx *c, void *buffers[], const int *slots, int n,
                            int dst)
{
    const sg_comm *comm = c->shared->comm;
    /* a rank whose step already failed calls no more collectives: it ends
     * the step, reports, and the CLI's MPI_Abort ends the ranks that wait */
    if (__atomic_load_n(&c->shared->failed, __ATOMIC_ACQUIRE))
        return;
    const sg_buffer *db = sg_arg_buffer(c, dst);
    size_t esize = sg_dtype_size(db->dtype), shard = 0;
    for (int i = 0; i < n; i++)
        shard += (size_t)sg_arg_buffer(c, slots[i])->elems;
    size_t p = (size_t)db->elems, all = shard * (size_t)comm->size;
    char msg[256], what[400];
    if (all < p) {
        snprintf(what, sizeof what, "all-gather of %s: %d ranks x %zu elements cannot hold %zu",
                 db->name, comm->size, shard, p);
        sg_task_fail(c, SG_EINVAL, what);
        return;
    }
    char *send = n == 1 ? sg_arg_ptr(buffers, slots[0]) : malloc(shard * esize + 1);
    char *recv = all == p ? sg_arg_ptr(buffers, dst) : malloc(all * esize + 1);
    int rc = !send || !recv ? SG_ENOMEM : SG_OK;
    if (!rc && n > 1)
        sg_arg_concat(c, buffers, slots, n, send);
    if (!rc && (rc = comm->allgather(comm->impl, send, recv, shard * esize, msg, sizeof msg))) {
        snprintf(what, sizeof what, "all-gather of %s: %s", db->name, msg);
        sg_task_fail(c, rc, what);
    } else if (rc)
        sg_task_fail(c, rc, "out of memory");
    else if (recv != sg_arg_ptr(buffers, dst))
        memcpy(sg_arg_ptr(buffers, dst), recv, p * esize);
    if (n > 1)
        free(send);
    if (recv != sg_arg_ptr(buffers, dst))
        free(recv);
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
