/* args.c - slot lookup, fp32 views and scratch for the codelets. */
#include "codelets/starpu/args.h"

#include <starpu.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/ops.h"

const sg_buffer *sg_arg_buffer(const sg_task_ctx *c, int slot)
{
    return &c->shared->graph->buffers[c->slot_buffer[slot]];
}

void *sg_arg_ptr(void *buffers[], int slot)
{
    return (void *)STARPU_VECTOR_GET_PTR(buffers[slot]);
}

int sg_arg_write_only(const sg_task_ctx *c, int slot)
{
    return c->slot_mode[slot] == SG_W;
}

int sg_arg_find(const sg_task_ctx *c, sg_buf_role role, int unit)
{
    for (int i = 0; i < c->nslots; i++) {
        const sg_buffer *b = sg_arg_buffer(c, i);
        if (b->role == role && (unit < -1 || b->unit == unit))
            return i;
    }
    return -1;
}

static int has_role(const sg_buffer *b, const sg_buf_role *roles, int nroles)
{
    for (int r = 0; r < nroles; r++)
        if (b->role == roles[r])
            return 1;
    return 0;
}

int sg_arg_collect(const sg_task_ctx *c, const sg_buf_role *roles, int nroles, int unit,
                   int by_subgroup, int *out, int cap)
{
    int n = 0;
    for (int i = 0; i < c->nslots && n < cap; i++) {
        const sg_buffer *b = sg_arg_buffer(c, i);
        if (!has_role(b, roles, nroles) || (unit >= -1 && b->unit != unit))
            continue;
        /* insertion sort by offset: a handful of slots */
        int64_t key = by_subgroup ? b->subgroup_offset : b->unit_offset;
        int j = n++;
        while (j > 0) {
            const sg_buffer *p = sg_arg_buffer(c, out[j - 1]);
            int64_t pk = by_subgroup ? p->subgroup_offset : p->unit_offset;
            if (pk <= key)
                break;
            out[j] = out[j - 1];
            j--;
        }
        out[j] = i;
    }
    return n;
}

void sg_f32_load(float *dst, const void *raw, sg_dtype dt, size_t n)
{
    if (dt == SG_BF16)
        sg_cast_bf16_to_f32(dst, raw, n);
    else if (dt == SG_F16)
        sg_cast_f16_to_f32(dst, raw, n);
    else
        memcpy(dst, raw, n * sizeof(float));
}

void sg_f32_store(void *raw, sg_dtype dt, const float *src, size_t n)
{
    if (dt == SG_BF16)
        sg_cast_f32_to_bf16(raw, src, n);
    else if (dt == SG_F16)
        sg_cast_f32_to_f16(raw, src, n);
    else
        memcpy(raw, src, n * sizeof(float));
}

int sg_task_mem_alloc(sg_task_mem *s, size_t bytes)
{
    /* the memory node of the calling CPU worker (its NUMA node where StarPU
     * has several), else main memory */
    unsigned node = starpu_worker_get_local_memory_node();
    if (starpu_node_get_kind(node) != STARPU_CPU_RAM)
        node = STARPU_MAIN_RAM;
    s->node = node;
    s->bytes = bytes ? bytes : 1;
    s->p = (void *)starpu_malloc_on_node_flags(node, s->bytes, 0);
    return s->p ? SG_OK : SG_ENOMEM;
}

void sg_task_mem_free(sg_task_mem *s)
{
    if (s->p)
        starpu_free_on_node_flags(s->node, (uintptr_t)s->p, s->bytes, 0);
    s->p = NULL;
    s->bytes = 0;
}

int sg_f32_view_open(sg_f32_view *v, void *raw, sg_dtype dt, size_t n, int load)
{
    v->raw = raw;
    v->dt = dt;
    v->n = n;
    v->owned = dt != SG_F32;
    v->copy = (sg_task_mem){0};
    if (!v->owned) {
        v->p = raw;
        return SG_OK;
    }
    if (sg_task_mem_alloc(&v->copy, n * sizeof(float)))
        return SG_ENOMEM;
    v->p = v->copy.p;
    if (load)
        sg_f32_load(v->p, raw, dt, n);
    return SG_OK;
}

void sg_f32_view_close(sg_f32_view *v, int store)
{
    if (v->owned) {
        if (store)
            sg_f32_store(v->raw, v->dt, v->p, v->n);
        sg_task_mem_free(&v->copy);
    }
    v->p = NULL;
    v->owned = 0;
}

#define MAX_PIECES 4096

static int node_unit(const sg_task_ctx *c)
{
    return c->shared->graph->nodes[c->node].layer;
}

int sg_arg_gather_slots(const sg_task_ctx *c, int *pieces, int cap, int *dst)
{
    static const sg_buf_role piece[] = {SG_BUF_PARAM_PIECE, SG_BUF_PARAM_SHARD};
    int unit = node_unit(c);
    int n = sg_arg_collect(c, piece, 2, unit, 0, pieces, cap);
    *dst = sg_arg_find(c, SG_BUF_GATHERED, unit);
    if (*dst < 0)
        *dst = sg_arg_find(c, SG_BUF_PARAM_FULL, unit);
    if (*dst < 0 || n == 0) {
        sg_task_fail(c, SG_EINVAL, "no parameter pieces or target");
        return 0;
    }
    return n;
}

int sg_arg_fetch_slots(const sg_task_ctx *c, int *pieces, int cap, int *dst)
{
    static const sg_buf_role piece = SG_BUF_PARAM_PIECE;
    int unit = node_unit(c);
    int n = sg_arg_collect(c, &piece, 1, unit, 0, pieces, cap);
    *dst = sg_arg_find(c, SG_BUF_PARAM_SHARD, unit);
    if (*dst < 0)
        *dst = sg_arg_find(c, SG_BUF_GATHERED, unit);
    if (*dst < 0 || n == 0) {
        sg_task_fail(c, SG_EINVAL, "no parameter pieces or device buffer to fetch them into");
        return 0;
    }
    int64_t bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += sg_arg_buffer(c, pieces[i])->bytes;
    if (bytes != sg_arg_buffer(c, *dst)->bytes) {
        sg_task_fail(c, SG_EINVAL, "the pieces fetched are not the size of their device buffer");
        return 0;
    }
    return n;
}

int sg_arg_reduce_slots(const sg_task_ctx *c, int *pieces, int cap, int *src)
{
    static const sg_buf_role piece = SG_BUF_GRAD_PIECE;
    int unit = node_unit(c);
    int n = sg_arg_collect(c, &piece, 1, unit, 0, pieces, cap);
    *src = sg_arg_find(c, SG_BUF_GRAD, unit);
    if (*src < 0 || n == 0) {
        sg_task_fail(c, SG_EINVAL, "no gradient or pieces");
        return 0;
    }
    return n;
}

int sg_arg_param_source(const sg_task_ctx *c)
{
    int src = sg_arg_find(c, SG_BUF_PARAM_HOST, -2);
    if (src < 0)
        src = sg_arg_find(c, SG_BUF_MASTER, -2);
    if (src < 0)
        sg_task_fail(c, SG_EINVAL, "no host parameters");
    return src;
}

int sg_arg_unit_param_slots(const sg_task_ctx *c, int unit, int *slots, int cap)
{
    static const sg_buf_role whole[] = {SG_BUF_GATHERED, SG_BUF_PARAM_FULL};
    static const sg_buf_role piece = SG_BUF_PARAM_PIECE;
    /* a gathered or full buffer holds the whole unit; pieces a part each */
    int n = sg_arg_collect(c, whole, 2, unit, 0, slots, 1);
    return n ? n : sg_arg_collect(c, &piece, 1, unit, 0, slots, cap);
}

const float *sg_arg_unit_params(const sg_task_ctx *c, void *buffers[], int unit, sg_task_mem *copy)
{
    int slots[MAX_PIECES];
    *copy = (sg_task_mem){0};
    int n = sg_arg_unit_param_slots(c, unit, slots, MAX_PIECES);
    if (n == 0)
        return NULL;
    if (n == 1 && sg_arg_buffer(c, slots[0])->dtype == SG_F32)
        return sg_arg_ptr(buffers, slots[0]);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += sg_arg_buffer(c, slots[i])->elems;
    if (sg_task_mem_alloc(copy, (size_t)total * sizeof(float)))
        return NULL;
    float *p = copy->p;
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const sg_buffer *b = sg_arg_buffer(c, slots[i]);
        sg_f32_load(p + off, sg_arg_ptr(buffers, slots[i]), b->dtype, (size_t)b->elems);
        off += b->elems;
    }
    return p;
}

void *sg_arg_subgroup_at(const sg_task_ctx *c, void *buffers[], int src, int piece)
{
    size_t esize = sg_dtype_size(sg_arg_buffer(c, src)->dtype);
    return (char *)sg_arg_ptr(buffers, src) +
           (size_t)sg_arg_buffer(c, piece)->subgroup_offset * esize;
}

int sg_arg_adam_group(const sg_task_ctx *c, void *buffers[], sg_adam_group *a)
{
    static const sg_buf_role grad = SG_BUF_GRAD_PIECE, param = SG_BUF_PARAM_PIECE;
    a->n = sg_arg_collect(c, &grad, 1, -2, 1, a->grad, SG_ARG_MAX_SLOTS);
    int np = sg_arg_collect(c, &param, 1, -2, 1, a->param, SG_ARG_MAX_SLOTS);
    a->master = sg_arg_find(c, SG_BUF_MASTER, -2);
    int mv = sg_arg_find(c, SG_BUF_MOMENTS, -2);
    if (mv < 0 || (a->master < 0 && np != a->n)) {
        sg_task_fail(c, SG_EINVAL, "missing Adam buffers");
        return SG_EINVAL;
    }
    for (int i = 0; a->master < 0 && i < np; i++)
        if (sg_arg_buffer(c, a->param[i])->dtype != SG_F32) {
            sg_task_fail(c, SG_EINVAL, "parameters without an fp32 master must be fp32");
            return SG_EINVAL;
        }
    /* one array (Lion's momentum or Adagrad's sum): both pointers on it, the
     * rule touches only its own */
    a->m = sg_arg_ptr(buffers, mv);
    a->v = c->shared->spec->optimizer_state == SG_STATE_ADAM
               ? a->m + (size_t)sg_arg_buffer(c, mv)->elems / 2
               : a->m;
    return SG_OK;
}

float *sg_adam_group_params(const sg_adam_group *a, const sg_task_ctx *c, void *buffers[], int i)
{
    return a->master >= 0 ? sg_arg_subgroup_at(c, buffers, a->master, a->grad[i])
                          : sg_arg_ptr(buffers, a->param[i]);
}

sg_adam_params sg_arg_adam_params(const sg_task_ctx *c)
{
    sg_adam_params prm = c->step->adam;
    prm.skip_nonfinite = c->shared->spec->compute_dtype == SG_F16;
    return prm;
}

static _Thread_local float *scratch_mem;
static _Thread_local size_t scratch_cap;

float *sg_scratch(size_t n)
{
    if (n == 0)
        n = 16;
    if (n <= scratch_cap)
        return scratch_mem;
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, n * sizeof(float)))
        return NULL;
    free(scratch_mem);
    scratch_mem = p;
    scratch_cap = n;
    return p;
}

void sg_task_fail(const sg_task_ctx *c, int code, const char *what)
{
    int expected = 0;
    sg_exec_shared *sh = c->shared;
    if (__atomic_compare_exchange_n(&sh->failed, &expected, code ? code : SG_EINVAL, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        snprintf(sh->fail_msg, sizeof sh->fail_msg, "task %s: %s", sh->graph->nodes[c->node].name,
                 what);
}

void sg_arg_concat(const sg_task_ctx *c, void *buffers[], const int *slots, int n, char *dst)
{
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)sg_arg_buffer(c, slots[i])->bytes;
        memcpy(dst, sg_arg_ptr(buffers, slots[i]), bytes);
        dst += bytes;
    }
}

int64_t sg_arg_overlap(const sg_task_ctx *c, int range, int piece, int64_t *range_at,
                       int64_t *piece_at)
{
    const sg_buffer *rb = sg_arg_buffer(c, range), *pb = sg_arg_buffer(c, piece);
    int64_t lo =
        rb->subgroup_offset > pb->subgroup_offset ? rb->subgroup_offset : pb->subgroup_offset;
    int64_t rhi = rb->subgroup_offset + rb->elems, phi = pb->subgroup_offset + pb->elems;
    int64_t hi = rhi < phi ? rhi : phi;
    if (hi <= lo)
        return 0;
    *range_at = lo - rb->subgroup_offset;
    *piece_at = lo - pb->subgroup_offset;
    return hi - lo;
}

void sg_arg_gather_grads(const sg_task_ctx *c, void *buffers[], int dst)
{
    static const sg_buf_role GRAD_PIECE[] = {SG_BUF_GRAD_PIECE};
    int slots[SG_ARG_MAX_SLOTS];
    int n = sg_arg_collect(c, GRAD_PIECE, 1, -2, 1, slots, SG_ARG_MAX_SLOTS);
    const sg_buffer *db = sg_arg_buffer(c, dst);
    size_t es = sg_dtype_size(db->dtype);
    int64_t covered = 0;
    for (int i = 0; i < n; i++) {
        int64_t at, pat, len = sg_arg_overlap(c, dst, slots[i], &at, &pat);
        if (len <= 0)
            continue;
        if (sg_arg_buffer(c, slots[i])->dtype != db->dtype) {
            sg_task_fail(c, SG_EINVAL, "gradient piece and host buffer differ in dtype");
            return;
        }
        memcpy((char *)sg_arg_ptr(buffers, dst) + (size_t)at * es,
               (const char *)sg_arg_ptr(buffers, slots[i]) + (size_t)pat * es, (size_t)len * es);
        covered += len;
    }
    if (covered != db->elems)
        sg_task_fail(c, SG_EINVAL, "gradient pieces do not cover the host buffer");
}

void sg_arg_scatter_params(const sg_task_ctx *c, void *buffers[], int src)
{
    static const sg_buf_role PARAM_PIECE[] = {SG_BUF_PARAM_PIECE};
    int slots[SG_ARG_MAX_SLOTS];
    int n = sg_arg_collect(c, PARAM_PIECE, 1, -2, 1, slots, SG_ARG_MAX_SLOTS);
    const sg_buffer *sb = sg_arg_buffer(c, src);
    size_t ses = sg_dtype_size(sb->dtype);
    for (int i = 0; i < n; i++) {
        const sg_buffer *pb = sg_arg_buffer(c, slots[i]);
        int64_t at, pat, len = sg_arg_overlap(c, src, slots[i], &at, &pat);
        if (len <= 0)
            continue;
        const char *from = (const char *)sg_arg_ptr(buffers, src) + (size_t)at * ses;
        char *to = (char *)sg_arg_ptr(buffers, slots[i]) + (size_t)pat * sg_dtype_size(pb->dtype);
        if (sb->dtype == pb->dtype)
            memcpy(to, from, (size_t)len * ses);
        else if (sb->dtype == SG_F32)
            sg_f32_store(to, pb->dtype, (const float *)from, (size_t)len);
        else
            sg_task_fail(c, SG_EINVAL, "unsupported parameter conversion");
    }
}

float sg_arg_scalar(void *buffers[], int slot, float dflt)
{
    return slot < 0 ? dflt : *(const float *)sg_arg_ptr(buffers, slot);
}

void *sg_arg_role_ptr(const sg_task_ctx *c, void *buffers[], sg_buf_role role)
{
    int s = sg_arg_find(c, role, -2);
    return s < 0 ? NULL : sg_arg_ptr(buffers, s);
}

int sg_arg_step_checks(const sg_task_ctx *c, void *buffers[], float *mult)
{
    int ov = sg_arg_find(c, SG_BUF_OVERFLOW, -2);
    if (ov >= 0 && *(const int32_t *)sg_arg_ptr(buffers, ov))
        return 1;
    int nb = sg_arg_find(c, SG_BUF_GRAD_NORM, -2);
    *mult = nb < 0 ? 1.0f : sg_adam_grad_multiplier(sg_arg_ptr(buffers, nb), c->step->clip);
    return 0;
}

int sg_arg_host_group(const sg_task_ctx *c, void *buffers[], sg_host_group *h)
{
    int g = sg_arg_find(c, SG_BUF_GRAD_HOST_F32, -2);
    if (g < 0)
        g = sg_arg_find(c, SG_BUF_GRAD_HOST, -2);
    int p = sg_arg_find(c, SG_BUF_MASTER, -2), mv = sg_arg_find(c, SG_BUF_MOMENTS, -2);
    int ph = sg_arg_find(c, SG_BUF_PARAM_HOST, -2);
    if (g < 0 || p < 0 || mv < 0)
        return SG_EINVAL;
    h->n = (size_t)sg_arg_buffer(c, p)->elems;
    h->g = sg_arg_ptr(buffers, g);
    h->gdt = sg_arg_buffer(c, g)->dtype;
    h->pout = ph >= 0 ? sg_arg_ptr(buffers, ph) : NULL;
    h->pdt = ph >= 0 ? sg_arg_buffer(c, ph)->dtype : SG_F32;
    h->p = sg_arg_ptr(buffers, p);
    h->m = sg_arg_ptr(buffers, mv);
    h->v = c->shared->spec->optimizer_state == SG_STATE_ADAM ? h->m + h->n : h->m;
    return SG_OK;
}
