/* reduce.c - the reduce-scatter and all-reduce codelets: a unit's gradient
 * into its gradient pieces, copied into a piece written fresh (first
 * micro-step) or added to one that accumulates (later ones).
 *
 * CPU, one rank: the reduction is a copy or a sum. Several ranks (comm.h):
 * the gradient, in fp32 and padded to dp x ceil(p / dp) elements, is
 * reduce-scattered (every element summed once, by one rank). The head's
 * backward already divided by dp (unit.c: the loss is the global batch's
 * mean), so the sum is the mean over ranks and dp ranks of micro batch B
 * train as one rank of micro batch dp x B. A sharded unit's pieces take the rank's block;
 * a unit whole on every rank (stage 0, stage 3 persistent units) gathers
 * the blocks back first (reduce-scatter + all-gather: an all-reduce whose
 * result has the same bits on every rank, so replicas never drift).
 * CUDA, one rank: through the device's single-rank NCCL communicator when
 * the build has it, so NCCL's reductions copy; a later micro-step's
 * gradient is reduced into scratch and added into the piece on the device.
 * CUDA, several ranks: the CPU path's layout and order over NCCL, one GPU
 * per rank (written, not yet run on a machine with several GPUs:
 * docs/gpu.md). Reduce-scatter and all-reduce nodes both come here: the
 * unit's sharding decides which result the pieces take. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"
#include "codelets/starpu/comm.h"

/* A gradient piece that accumulates (a later micro-step): to (n elements of
 * dt) += from, in fp32. 0, or SG_ENOMEM. */
static int add_into(void *to, sg_dtype dt, const float *from, size_t n)
{
    sg_f32_view acc;
    if (sg_f32_view_open(&acc, to, dt, n, 1))
        return SG_ENOMEM;
    for (size_t k = 0; k < n; k++)
        acc.p[k] += from[k];
    sg_f32_view_close(&acc, 1);
    return 0;
}

/* Several ranks: the unit's layout over the ranks (comm.h) and whether the
 * pieces at slots hold the whole unit (every rank holds it) rather than the
 * rank's block; they must be one or the other. 0, or nonzero when the
 * reduction must not run: the step already failed (as allgather.c: no
 * collective after a failure) or the pieces fit no layout (then it fails
 * the task). */
static int reduce_layout(const sg_task_ctx *c, const int *slots, int n, int src, sg_comm_layout *l,
                         int *whole)
{
    if (__atomic_load_n(&c->shared->failed, __ATOMIC_ACQUIRE))
        return SG_EINVAL;
    const sg_comm *comm = c->shared->comm;
    const sg_buffer *sb = sg_arg_buffer(c, src);
    size_t shard = 0;
    for (int i = 0; i < n; i++)
        shard += (size_t)sg_arg_buffer(c, slots[i])->elems;
    *whole = sg_unit_shard_elems(c->shared->model, c->shared->spec, sb->unit) == sb->elems;
    if (sg_comm_layout_of(l, (size_t)sb->elems, comm->size, comm->rank) ||
        !sg_comm_layout_holds(l, shard, *whole)) {
        sg_task_fail(c, SG_EINVAL, "gradient pieces match neither a shard nor the unit");
        return SG_EINVAL;
    }
    return SG_OK;
}

/* Several ranks: see the top of the file. */
static void reduce_ranks(const sg_task_ctx *c, void *buffers[], const int *slots, int n, int src)
{
    const sg_comm *comm = c->shared->comm;
    const sg_buffer *sb = sg_arg_buffer(c, src);
    sg_comm_layout l;
    int whole;
    if (reduce_layout(c, slots, n, src, &l, &whole))
        return;
    size_t p = l.elems, blk = l.block;
    sg_task_mem all_mem = {0}, mine_mem = {0};
    char msg[256], what[400];
    int rc = sg_task_mem_alloc(&all_mem, l.padded * sizeof(float));
    if (!rc)
        rc = sg_task_mem_alloc(&mine_mem, blk * sizeof(float));
    float *all = all_mem.p, *mine = mine_mem.p;
    if (!rc) {
        sg_f32_load(all, sg_arg_ptr(buffers, src), sb->dtype, p);
        memset(all + p, 0, (l.padded - p) * sizeof(float));
        rc = comm->reduce_scatter(comm->impl, all, mine, blk, msg, sizeof msg);
    }
    if (!rc && whole)
        rc = comm->allgather(comm->impl, mine, all, blk * sizeof(float), msg, sizeof msg);
    if (rc) {
        if (rc == SG_ENOMEM)
            snprintf(msg, sizeof msg, "out of memory");
        snprintf(what, sizeof what, "reduction of %s: %s", sb->name, msg);
        sg_task_fail(c, rc, what);
        sg_task_mem_free(&all_mem);
        sg_task_mem_free(&mine_mem);
        return;
    }
    const float *base = whole ? all : mine;
    for (int i = 0; i < n && !rc; i++) {
        const sg_buffer *pb = sg_arg_buffer(c, slots[i]);
        const float *from = base + pb->unit_offset;
        void *to = sg_arg_ptr(buffers, slots[i]);
        if (sg_arg_write_only(c, slots[i])) {
            sg_f32_store(to, pb->dtype, from, (size_t)pb->elems);
            continue;
        }
        if (add_into(to, pb->dtype, from, (size_t)pb->elems)) {
            sg_task_fail(c, SG_ENOMEM, "out of memory");
            break;
        }
    }
    sg_task_mem_free(&all_mem);
    sg_task_mem_free(&mine_mem);
}

void sg_reduce_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[SG_ARG_MAX_SLOTS], src;
    int n = sg_arg_reduce_slots(c, slots, SG_ARG_MAX_SLOTS, &src);
    if (n == 0)
        return;
    if (c->shared->comm && c->shared->comm->size > 1) {
        reduce_ranks(c, buffers, slots, n, src);
        return;
    }
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
        sg_f32_view add;
        int rc = sg_f32_view_open(&add, (void *)from, pb->dtype, (size_t)pb->elems, 1);
        if (!rc)
            rc = add_into(to, pb->dtype, add.p, (size_t)pb->elems);
        sg_f32_view_close(&add, 0);
        if (rc) {
            sg_task_fail(c, SG_ENOMEM, "out of memory");
            return;
        }
    }
}

#ifdef SG_STARPU_CUDA
#include "codelets/starpu/cuda_task.h"

/* Several ranks, as reduce_ranks over the device's NCCL communicator: the
 * gradient in fp32 in stream-ordered scratch of the padded size (its
 * padding zeroed), reduce-scattered in place (rank r's block at r x block)
 * and, for a unit whole on every rank, all-gathered back in place; each
 * piece then takes its part in its dtype, written fresh or added in fp32
 * with one rounding (sg_cu_grad_sum), as the CPU path does. */
static void reduce_ranks_cuda(const sg_task_ctx *c, void *buffers[], const int *slots, int n,
                              int src)
{
    const sg_buffer *sb = sg_arg_buffer(c, src);
    sg_comm_layout l;
    int whole;
    if (reduce_layout(c, slots, n, src, &l, &whole))
        return;
    sg_cu cu = sg_cuda_task_cu();
    int rank = c->shared->comm->rank;
    char msg[256] = "", what[400];
    float *all = sg_cu_malloc_async(&cu, l.padded * sizeof(float));
    float *mine = all ? all + l.lo : NULL;
    int rc = all ? SG_OK : SG_ENOMEM;
    if (!rc && (rc = sg_cu_cast(&cu, all, SG_F32, sg_arg_ptr(buffers, src), sb->dtype, l.elems)))
        snprintf(msg, sizeof msg, "rank %d: the gradient in fp32: %s", rank, sg_cu_last_error());
    if (!rc && l.padded > l.elems &&
        (rc = sg_cu_zero_async(&cu, all + l.elems, (l.padded - l.elems) * sizeof(float))))
        snprintf(msg, sizeof msg, "rank %d: zeroing the padding: %s", rank, sg_cu_last_error());
    if (!rc)
        rc = sg_cuda_nccl_reduce_scatter(c, &cu, all, mine, l.block, SG_F32, msg, sizeof msg);
    if (!rc && whole)
        rc = sg_cuda_nccl_allgather(c, &cu, mine, all, l.block, SG_F32, msg, sizeof msg);
    const float *base = whole ? all : mine;
    for (int i = 0; i < n && !rc; i++) {
        const sg_buffer *pb = sg_arg_buffer(c, slots[i]);
        const float *from = base + pb->unit_offset;
        if ((rc = sg_cu_grad_sum(&cu, sg_arg_ptr(buffers, slots[i]), pb->dtype, &from, 1,
                                 (size_t)pb->elems, !sg_arg_write_only(c, slots[i]))))
            snprintf(msg, sizeof msg, "rank %d: into %s: %s", rank, pb->name,
                     rc == SG_EIO ? sg_cu_last_error() : sg_strerror(rc));
    }
    if (rc == SG_ENOMEM)
        snprintf(msg, sizeof msg, "rank %d: out of device memory for %zu padded elements", rank,
                 l.padded);
    sg_cu_free_async(&cu, all);
    if (rc) {
        snprintf(what, sizeof what, "reduction of %s: %s", sb->name, msg);
        sg_task_fail(c, rc, what);
    }
}

void sg_reduce_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[SG_ARG_MAX_SLOTS], src;
    int n = sg_arg_reduce_slots(c, slots, SG_ARG_MAX_SLOTS, &src);
    if (n == 0)
        return;
    if (c->shared->comm && c->shared->comm->size > 1) {
        reduce_ranks_cuda(c, buffers, slots, n, src);
        return;
    }
    sg_cu cu = sg_cuda_task_cu();
    const sg_buffer *sb = sg_arg_buffer(c, src);
    const char *s = sg_arg_ptr(buffers, src);
    size_t esize = sg_dtype_size(sb->dtype);
    char msg[256], what[400];
    for (int i = 0; i < n; i++) {
        const sg_buffer *pb = sg_arg_buffer(c, slots[i]);
        const char *from = s + (size_t)pb->unit_offset * esize;
        void *to = sg_arg_ptr(buffers, slots[i]);
        int rc;
        msg[0] = '\0';
        if (pb->dtype != sb->dtype) {
            rc = SG_EINVAL;
            snprintf(msg, sizeof msg, "a piece's dtype is not the gradient's");
        } else if (sg_arg_write_only(c, slots[i])) {
            rc = sg_cuda_collective(c, &cu, to, from, (size_t)pb->elems, pb->dtype, 0, msg,
                                    sizeof msg);
        } else {
            void *tmp = sg_cu_malloc_async(&cu, (size_t)pb->bytes);
            rc = !tmp ? SG_ENOMEM
                      : sg_cuda_collective(c, &cu, tmp, from, (size_t)pb->elems, pb->dtype, 0, msg,
                                           sizeof msg);
            if (!rc && (rc = sg_cu_add_into(&cu, to, tmp, pb->dtype, (size_t)pb->elems)))
                snprintf(msg, sizeof msg, "adding into %s: %s", pb->name, sg_cu_last_error());
            sg_cu_free_async(&cu, tmp);
        }
        if (rc) {
            if (rc == SG_ENOMEM)
                snprintf(msg, sizeof msg, "out of device memory");
            snprintf(what, sizeof what, "reduction of %s: %s", sb->name, msg);
            sg_task_fail(c, rc, what);
            return;
        }
    }
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(reduce_scatter, sg_reduce_cpu, sg_reduce_cuda);
SG_CODELET2(allreduce, sg_reduce_cpu, sg_reduce_cuda);
