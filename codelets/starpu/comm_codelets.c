/* comm_codelets.c - CPU entry points of the data-movement nodes: gathers and
 * reductions of a unit's parameters and gradients (one rank: copies and
 * sums; several ranks go through NCCL on GPU workers), host/device copies of
 * a sub-group, and precision casts. */
#include <string.h>

#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"

#define MAX_SLOTS 4096

static const sg_buf_role PARAM_PIECE[] = {SG_BUF_PARAM_PIECE};
static const sg_buf_role GRAD_PIECE[] = {SG_BUF_GRAD_PIECE};

static size_t bytes_of(const sg_buffer *b)
{
    return (size_t)b->bytes;
}

/* Concatenates the slots (in order) into dst. */
static void concat(const sg_task_ctx *c, void *buffers[], const int *slots, int n, char *dst)
{
    for (int i = 0; i < n; i++) {
        const sg_buffer *b = sg_arg_buffer(c, slots[i]);
        memcpy(dst, sg_arg_ptr(buffers, slots[i]), bytes_of(b));
        dst += bytes_of(b);
    }
}

void sg_allgather_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[MAX_SLOTS], dst;
    int n = sg_arg_gather_slots(c, slots, MAX_SLOTS, &dst);
    if (n == 0)
        return;
    concat(c, buffers, slots, n, sg_arg_ptr(buffers, dst));
}

/* Gradient reduction with one rank: the unit's gradient is copied into
 * (first micro-step) or added to (later ones) its pieces. */
void sg_reduce_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[MAX_SLOTS], src;
    int n = sg_arg_reduce_slots(c, slots, MAX_SLOTS, &src);
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
            memcpy(to, from, bytes_of(pb));
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

/* Device-to-host: a CPU sub-group's gradient pieces into one host buffer. */
void sg_d2h_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int slots[MAX_SLOTS];
    int n = sg_arg_collect(c, GRAD_PIECE, 1, -2, 1, slots, MAX_SLOTS);
    int dst = sg_arg_find(c, SG_BUF_GRAD_HOST, -2);
    if (dst < 0 || n == 0) {
        sg_task_fail(c, SG_EINVAL, "no gradient pieces or host buffer");
        return;
    }
    concat(c, buffers, slots, n, sg_arg_ptr(buffers, dst));
}

/* Scatters a sub-group's parameters (src: fp32 master or compute-dtype host
 * copy) into its pieces, converting to the pieces' dtype. */
static void scatter_params(const sg_task_ctx *c, void *buffers[], int src)
{
    int slots[MAX_SLOTS];
    int n = sg_arg_collect(c, PARAM_PIECE, 1, -2, 1, slots, MAX_SLOTS);
    const sg_buffer *sb = sg_arg_buffer(c, src);
    for (int i = 0; i < n; i++) {
        const sg_buffer *pb = sg_arg_buffer(c, slots[i]);
        const char *from = sg_arg_subgroup_at(c, buffers, src, slots[i]);
        void *to = sg_arg_ptr(buffers, slots[i]);
        if (sb->dtype == pb->dtype)
            memcpy(to, from, bytes_of(pb));
        else if (sb->dtype == SG_F32)
            sg_f32_store(to, pb->dtype, (const float *)from, (size_t)pb->elems);
        else
            sg_task_fail(c, SG_EINVAL, "unsupported parameter conversion");
    }
}

void sg_h2d_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int src = sg_arg_param_source(c);
    if (src >= 0)
        scatter_params(c, buffers, src);
}

/* Casts: host gradients to fp32, or the fp32 master to the compute dtype
 * (into the host copy of a CPU sub-group, or the pieces of a GPU one). */
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
    scatter_params(c, buffers, master);
}
