/* optim_codelets.c - CPU entry points of the optimizer nodes: the global
 * gradient norm, the fp16 overflow check and loss-scale update, Adam on a
 * sub-group (CPU-resident or device-resident state), and SuperOffload's
 * validation of a speculative step. */
#include <math.h>
#include <string.h>

#include "codelets/cpu/ops.h"
#include "codelets/starpu/args.h"
#include "codelets/starpu/codelets.h"


static float scalar_at(void *buffers[], int slot, float dflt)
{
    return slot < 0 ? dflt : *(const float *)sg_arg_ptr(buffers, slot);
}

/* grad_norm = [norm of the unscaled gradients (inf if one is not finite),
 * 1 / the loss scale they carry]. Partial sums in slot order: the result does
 * not depend on which worker runs it. */
void sg_grad_norm_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int out = sg_arg_find(c, SG_BUF_GRAD_NORM, -2);
    if (out < 0) {
        sg_task_fail(c, SG_EINVAL, "no norm buffer");
        return;
    }
    double sumsq = 0.0;
    int nonfinite = 0;
    for (int i = 0; i < c->nslots; i++) { /* slot (program) order */
        const sg_buffer *b = sg_arg_buffer(c, i);
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
        sumsq += part;
        nonfinite |= nf;
    }
    double scale = scalar_at(buffers, sg_arg_find(c, SG_BUF_LOSS_SCALE, -2), 1.0f);
    float *res = sg_arg_ptr(buffers, out);
    res[0] = nonfinite ? INFINITY : (float)(sqrt(sumsq) / scale);
    res[1] = (float)(1.0 / scale);
}

void sg_overflow_check_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int in = sg_arg_find(c, SG_BUF_GRAD_NORM, -2), out = sg_arg_find(c, SG_BUF_OVERFLOW, -2);
    if (in < 0 || out < 0) {
        sg_task_fail(c, SG_EINVAL, "missing norm or overflow buffer");
        return;
    }
    *(int32_t *)sg_arg_ptr(buffers, out) = !isfinite(scalar_at(buffers, in, 0.0f));
}

/* DeepSpeed's dynamic loss scaling (runtime/train/loss_scaler.h). */
void sg_loss_scale_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    int ov = sg_arg_find(c, SG_BUF_OVERFLOW, -2), ls = sg_arg_find(c, SG_BUF_LOSS_SCALE, -2);
    if (ov < 0 || ls < 0 || !c->shared->scaler) {
        sg_task_fail(c, SG_EINVAL, "missing overflow or loss-scale buffer");
        return;
    }
    if (sg_loss_scaler_update(c->shared->scaler, *(const int32_t *)sg_arg_ptr(buffers, ov)) ==
        SG_LOSS_SCALER_AT_MIN) {
        /* DeepSpeed stops there too */
        sg_task_fail(c, SG_EINVAL, "gradient overflow with the loss scale already at "
                                   "fp16.min_loss_scale");
        return;
    }
    *(float *)sg_arg_ptr(buffers, ls) = (float)c->shared->scaler->scale;
}

/* Whether the step must be skipped (fp16 overflow), and the multiplier. */
static int step_checks(const sg_task_ctx *c, void *buffers[], float *mult)
{
    int ov = sg_arg_find(c, SG_BUF_OVERFLOW, -2);
    if (ov >= 0 && *(const int32_t *)sg_arg_ptr(buffers, ov))
        return 1;
    int nb = sg_arg_find(c, SG_BUF_GRAD_NORM, -2);
    *mult = nb < 0 ? 1.0f : sg_adam_grad_multiplier(sg_arg_ptr(buffers, nb), c->shared->step.clip);
    return 0;
}

typedef struct host_group {
    float *g, *p, *m, *v;
    size_t n;
} host_group;

/* A CPU sub-group: fp32 gradients on the host, master, moments. */
static int host_group_bind(const sg_task_ctx *c, void *buffers[], host_group *h)
{
    int g = sg_arg_find(c, SG_BUF_GRAD_HOST_F32, -2);
    if (g < 0)
        g = sg_arg_find(c, SG_BUF_GRAD_HOST, -2);
    int p = sg_arg_find(c, SG_BUF_MASTER, -2), mv = sg_arg_find(c, SG_BUF_MOMENTS, -2);
    if (g < 0 || p < 0 || mv < 0 || sg_arg_buffer(c, g)->dtype != SG_F32)
        return SG_EINVAL;
    h->n = (size_t)sg_arg_buffer(c, p)->elems;
    h->g = sg_arg_ptr(buffers, g);
    h->p = sg_arg_ptr(buffers, p);
    h->m = sg_arg_ptr(buffers, mv);
    h->v = h->m + h->n;
    return SG_OK;
}

void sg_adam_cpu_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    host_group h;
    if (host_group_bind(c, buffers, &h)) {
        sg_task_fail(c, SG_EINVAL, "missing Adam buffers");
        return;
    }
    float mult = 1.0f;
    if (c->shared->spec->super_offload) {
        /* speculative: unscaled, not clipped; validation corrects it */
        mult = (float)(1.0 / (double)scalar_at(buffers, sg_arg_find(c, SG_BUF_LOSS_SCALE, -2), 1.0f));
    } else if (step_checks(c, buffers, &mult)) {
        return; /* overflow: skip */
    }
    sg_adam_params prm = sg_arg_adam_params(c);
    int rc = sg_adam_step(&prm, c->shared->step.t, h.p, h.g, h.m, h.v, NULL, h.n, mult);
    if (rc)
        sg_task_fail(c, rc, "Adam step failed");
}

/* SuperOffload: keep the speculative step, or undo it (overflow), or undo
 * and redo it with the clipping coefficient now known. */
void sg_validate_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    host_group h;
    int nb = sg_arg_find(c, SG_BUF_GRAD_NORM, -2);
    if (host_group_bind(c, buffers, &h) || nb < 0) {
        sg_task_fail(c, SG_EINVAL, "missing validation buffers");
        return;
    }
    const float *norm = sg_arg_ptr(buffers, nb);
    float spec_mult = norm[1]; /* what the speculative step used */
    float mult = spec_mult;
    int skip = step_checks(c, buffers, &mult);
    int ov = sg_arg_find(c, SG_BUF_OVERFLOW, -2);
    if (!sg_adam_speculation_fails(norm, ov >= 0 && *(const int32_t *)sg_arg_ptr(buffers, ov),
                                   c->shared->step.clip))
        return;
    sg_adam_params prm = sg_arg_adam_params(c);
    int64_t t = c->shared->step.t;
    int rc = sg_adam_rollback(&prm, t, h.p, h.g, h.m, h.v, h.n, spec_mult);
    if (!rc && !skip)
        rc = sg_adam_step(&prm, t, h.p, h.g, h.m, h.v, NULL, h.n, mult);
    if (rc)
        sg_task_fail(c, rc, "rollback failed");
}

/* A sub-group whose state stays with the compute (no offload, or ratio < 1):
 * Adam over its gradient pieces, into the fp32 master (mixed precision) or
 * the fp32 parameter pieces themselves. */
void sg_adam_gpu_cpu(void *buffers[], void *arg)
{
    const sg_task_ctx *c = arg;
    float mult = 1.0f;
    if (step_checks(c, buffers, &mult))
        return;
    sg_adam_group a;
    if (sg_arg_adam_group(c, buffers, &a))
        return;
    sg_adam_params prm = sg_arg_adam_params(c);
    for (int i = 0; i < a.n; i++) {
        const sg_buffer *gb = sg_arg_buffer(c, a.grad[i]);
        size_t off = (size_t)gb->subgroup_offset, len = (size_t)gb->elems;
        sg_f32_view g;
        if (sg_f32_view_open(&g, sg_arg_ptr(buffers, a.grad[i]), gb->dtype, len, 1)) {
            sg_task_fail(c, SG_ENOMEM, "out of memory");
            return;
        }
        int rc = sg_adam_step(&prm, c->shared->step.t, sg_adam_group_params(&a, c, buffers, i),
                              g.p, a.m + off, a.v + off, NULL, len, mult);
        sg_f32_view_close(&g, 0);
        if (rc) {
            sg_task_fail(c, rc, "Adam step failed");
            return;
        }
    }
}
