/* grad_norm.c - the global gradient norm codelet. Its output, the
 * SG_BUF_GRAD_NORM layout: [norm of the unscaled gradients (inf if one is
 * not finite), 1 / the loss scale they carry]. Partial sums over the
 * gradient pieces in slot (program) order, so the result does not depend on
 * which worker runs it. A node without the norm buffer (norm_part.<unit>,
 * graph/compile.c) only takes its pieces' partials into an SG_BUF_NORM_PART
 * buffer, which the norm node then adds in order. With several ranks the
 * norm node also adds the other ranks' sums (comm.h): the norm is global. */
#include <math.h>
#include <stdio.h>

#include "codelets/cpu/ops.h"
#include "codelets/starpu/comm.h"
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

/* One entry of an SG_BUF_NORM_PART buffer: the layout the CUDA kernels use
 * (a double, then an int32 at the next double). */
typedef struct norm_entry {
    double sumsq;
    int32_t nonfinite, pad;
} norm_entry;

/* A node without the norm buffer takes the partials: the k-th gradient
 * piece's goes to entry k of the norm-part buffer. */
static void partials_cpu(const sg_task_ctx *c, void *buffers[])
{
    int out = sg_arg_find(c, SG_BUF_NORM_PART, -2);
    if (out < 0) {
        sg_task_fail(c, SG_EINVAL, "no norm buffer and no norm-part buffer");
        return;
    }
    norm_entry *e = sg_arg_ptr(buffers, out);
    int64_t cap = sg_arg_buffer(c, out)->elems / SG_NORM_PART_F32, k = 0;
    for (int i = 0; i < c->nslots; i++) { /* slot (piece) order */
        const sg_buffer *b = sg_arg_buffer(c, i);
        if (b->role != SG_BUF_GRAD_PIECE)
            continue;
        if (k >= cap) {
            sg_task_fail(c, SG_EINVAL, "more gradient pieces than norm-part entries");
            return;
        }
        sg_f32_view v;
        if (sg_f32_view_open(&v, sg_arg_ptr(buffers, i), b->dtype, (size_t)b->elems, 1)) {
            sg_task_fail(c, SG_ENOMEM, "out of memory");
            return;
        }
        int nf;
        sg_grad_norm_partial(&e[k].sumsq, &nf, v.p, (size_t)b->elems);
        sg_f32_view_close(&v, 0);
        e[k].nonfinite = nf;
        e[k].pad = 0;
        k++;
    }
}

/* Several ranks (comm non-NULL): whether buffer b's sum of squares counts
 * on another rank only. A unit whole on every rank (stage 0, stage 3
 * persistent units) counts once, rank 0's; shards count on each. Its
 * non-finite flag counts everywhere. */
static int counted_on_rank0(const sg_task_ctx *c, const sg_comm *comm, const sg_buffer *b)
{
    return comm && comm->rank > 0 && b->unit >= 0 &&
           (b->role == SG_BUF_NORM_PART || b->role == SG_BUF_GRAD_PIECE) &&
           sg_unit_shard_elems(c->shared->model, c->shared->spec, b->unit) ==
               sg_model_unit_params(c->shared->model, b->unit);
}

/* The run's collectives when it has several ranks, else NULL. */
static const sg_comm *ranks_comm(const sg_task_ctx *c)
{
    return c->shared->comm && c->shared->comm->size > 1 ? c->shared->comm : NULL;
}

void sg_grad_norm_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int out = sg_arg_find(c, SG_BUF_GRAD_NORM, -2);
    if (out < 0) {
        partials_cpu(c, buffers);
        return;
    }
    /* partials added in slot (program) order: a gradient piece's computed
     * here, or those a norm-part node took (the same values, so the same
     * sum) */
    double sumsq = 0.0;
    int nonfinite = 0;
    const sg_comm *comm = ranks_comm(c);
    for (int i = 0; i < c->nslots; i++) {
        const sg_buffer *b = sg_arg_buffer(c, i);
        int skip = counted_on_rank0(c, comm, b);
        if (b->role == SG_BUF_NORM_PART && skip) {
            const norm_entry *e = sg_arg_ptr(buffers, i);
            for (int64_t k = 0; k < b->elems / SG_NORM_PART_F32; k++)
                nonfinite |= e[k].nonfinite;
            continue;
        }
        if (b->role == SG_BUF_NORM_PART) {
            const norm_entry *e = sg_arg_ptr(buffers, i);
            for (int64_t k = 0; k < b->elems / SG_NORM_PART_F32; k++) {
                sumsq += e[k].sumsq;
                nonfinite |= e[k].nonfinite;
            }
            continue;
        }
        if (b->role != SG_BUF_GRAD_PIECE)
            continue;
        sg_f32_view v;
        if (sg_f32_view_open(&v, sg_arg_ptr(buffers, i), b->dtype, (size_t)b->elems, 1)) {
            sg_task_fail(c, SG_ENOMEM, "out of memory");
            return;
        }
        double part;
        int nf;
        sg_grad_norm_partial(&part, &nf, v.p, (size_t)b->elems);
        sg_f32_view_close(&v, 0);
        sumsq += skip ? 0.0 : part;
        nonfinite |= nf;
    }
    if (comm) {
        /* the global norm: every rank's sum of squares and non-finite count,
         * and the mean over the ranks of every micro-step's loss (its slots
         * read-write), in one collective on the comm_order chain
         * (graph/compile.c) */
        if (__atomic_load_n(&c->shared->failed, __ATOMIC_ACQUIRE))
            return;
        double v[2 + SG_ARG_MAX_SLOTS];
        int nv = 2, loss_slot[SG_ARG_MAX_SLOTS];
        v[0] = sumsq;
        v[1] = (double)nonfinite;
        for (int i = 0; i < c->nslots && nv < 2 + SG_ARG_MAX_SLOTS; i++)
            if (sg_arg_buffer(c, i)->role == SG_BUF_LOSS) {
                loss_slot[nv - 2] = i;
                v[nv++] = *(const float *)sg_arg_ptr(buffers, i);
            }
        char msg[256], what[320];
        int rc =
            comm->allreduce(comm->impl, v, (size_t)nv, SG_COMM_F64, SG_COMM_SUM, msg, sizeof msg);
        if (rc) {
            snprintf(what, sizeof what, "gradient norm: %s", msg);
            sg_task_fail(c, rc, what);
            return;
        }
        sumsq = v[0];
        nonfinite = v[1] > 0.0;
        for (int k = 2; k < nv; k++)
            *(float *)sg_arg_ptr(buffers, loss_slot[k - 2]) = (float)(v[k] / comm->size);
    }
    double scale = sg_arg_scalar(buffers, sg_arg_find(c, SG_BUF_LOSS_SCALE, -2), 1.0f);
    float *res = sg_arg_ptr(buffers, out);
    res[0] = nonfinite ? INFINITY : (float)(sqrt(sumsq) / scale);
    res[1] = (float)(1.0 / scale);
}

#ifdef SG_STARPU_CUDA
#include "codelets/starpu/cuda_task.h"

/* As partials_cpu: entry k of the norm-part buffer takes the k-th piece's
 * partial (zeroed, then accumulated). */
static void partials_cuda(const sg_task_ctx *c, void *buffers[])
{
    int out = sg_arg_find(c, SG_BUF_NORM_PART, -2);
    if (out < 0) {
        sg_task_fail(c, SG_EINVAL, "no norm buffer and no norm-part buffer");
        return;
    }
    sg_cu cu = sg_cuda_task_cu();
    double *e = sg_arg_ptr(buffers, out);
    int64_t cap = sg_arg_buffer(c, out)->elems / SG_NORM_PART_F32, k = 0;
    int rc = sg_cu_zero_async(&cu, e, (size_t)cap * 2 * sizeof(double));
    for (int i = 0; i < c->nslots && !rc; i++) {
        const sg_buffer *b = sg_arg_buffer(c, i);
        if (b->role != SG_BUF_GRAD_PIECE)
            continue;
        if (k >= cap) {
            rc = SG_EINVAL;
            break;
        }
        rc = sg_cu_grad_norm_accumulate(&cu, &e[2 * k], (int32_t *)&e[2 * k + 1],
                                        sg_arg_ptr(buffers, i), b->dtype, (size_t)b->elems);
        k++;
    }
    if (rc)
        sg_cuda_task_fail(c, rc, "gradient norm partials failed");
}

void sg_grad_norm_cuda(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    float *res = sg_arg_role_ptr(c, buffers, SG_BUF_GRAD_NORM);
    if (!res) {
        partials_cuda(c, buffers);
        return;
    }
    sg_cu cu = sg_cuda_task_cu();
    const sg_comm *comm = ranks_comm(c);
    /* the sum of squares (a double), the non-finite flag (an int32, 8-byte
     * aligned) and, with several ranks, a double that takes the sums of the
     * units counted on rank 0 only (counted_on_rank0: their flags count) */
    double *acc = sg_cu_malloc_async(&cu, 3 * sizeof(double));
    int32_t *nonfinite = acc ? (int32_t *)(acc + 1) : NULL;
    double *ignored = acc ? acc + 2 : NULL;
    int rc = acc ? sg_cu_zero_async(&cu, acc, 3 * sizeof(double)) : SG_ENOMEM;
    for (int i = 0; i < c->nslots && !rc; i++) {
        const sg_buffer *b = sg_arg_buffer(c, i);
        double *sum = counted_on_rank0(c, comm, b) ? ignored : acc;
        if (b->role == SG_BUF_GRAD_PIECE)
            rc = sg_cu_grad_norm_accumulate(&cu, sum, nonfinite, sg_arg_ptr(buffers, i), b->dtype,
                                            (size_t)b->elems);
        else if (b->role == SG_BUF_NORM_PART)
            rc = sg_cu_grad_norm_add_parts(&cu, sum, nonfinite, sg_arg_ptr(buffers, i),
                                           (size_t)(b->elems / SG_NORM_PART_F32));
    }
    if (rc) {
        sg_cu_free_async(&cu, acc);
        sg_cuda_task_fail(c, rc, "gradient norm failed");
        return;
    }
    if (comm) {
        /* as the CPU path: every rank's sum of squares and non-finite count
         * and the mean over the ranks of every micro-step's loss, one NCCL
         * group of all-reduces on the comm_order chain */
        if (__atomic_load_n(&c->shared->failed, __ATOMIC_ACQUIRE)) {
            sg_cu_free_async(&cu, acc);
            return;
        }
        sg_cuda_allreduce v[2 + SG_ARG_MAX_SLOTS] = {
            {.buf = acc, .count = 1, .type = SG_COMM_F64},
            {.buf = nonfinite, .count = 1, .type = SG_COMM_I32},
        };
        int nv = 2;
        for (int i = 0; i < c->nslots && nv < 2 + SG_ARG_MAX_SLOTS; i++)
            if (sg_arg_buffer(c, i)->role == SG_BUF_LOSS)
                v[nv++] = (sg_cuda_allreduce){
                    .buf = sg_arg_ptr(buffers, i), .count = 1, .type = SG_COMM_F32, .mean = 1};
        char msg[256], what[320];
        if ((rc = sg_cuda_nccl_allreduce(c, &cu, v, nv, msg, sizeof msg))) {
            sg_cu_free_async(&cu, acc);
            snprintf(what, sizeof what, "gradient norm: %s", msg);
            sg_task_fail(c, rc, what);
            return;
        }
    }
    rc = sg_cu_grad_norm_finish(&cu, res, acc, nonfinite,
                                sg_arg_role_ptr(c, buffers, SG_BUF_LOSS_SCALE));
    sg_cu_free_async(&cu, acc);
    if (rc)
        sg_cuda_task_fail(c, rc, "gradient norm failed");
}
#endif /* SG_STARPU_CUDA */

SG_CODELET2(grad_norm, sg_grad_norm_cpu, sg_grad_norm_cuda);
