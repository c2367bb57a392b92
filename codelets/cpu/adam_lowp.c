/* adam_lowp.c - the optimizer step and the rollback/redo with a 16-bit
 * gradient in and 16-bit parameters out, in one pass (adam_lowp.h); also
 * sg_adam_redo, the fp32 case of the same blocked walk. */
#include "codelets/cpu/adam_lowp.h"

#include <math.h>

#include "codelets/cpu/adam_loops.h"
#include "codelets/cpu/ops.h" /* the cast codelet's conversions */

static int grad_dtype_ok(sg_dtype dt)
{
    return dt == SG_F32 || dt == SG_BF16 || dt == SG_F16;
}

static int out_dtype_ok(const void *out, sg_dtype dt)
{
    return !out || dt == SG_BF16 || dt == SG_F16;
}

/* Elements off .. off+len of the gradient as fp32: the array itself when it
 * is fp32, else converted into scratch (len <= SG_ADAM_LOWP_BLOCK). */
static const float *grad_block(const void *g, sg_dtype dt, size_t off, size_t len, float *scratch)
{
    if (dt == SG_F32)
        return (const float *)g + off;
    const uint16_t *h = (const uint16_t *)g + off;
    if (dt == SG_BF16)
        sg_cast_bf16_to_f32(scratch, h, len);
    else
        sg_cast_f16_to_f32(scratch, h, len);
    return scratch;
}

/* The 16-bit copy of p's block, unless the step loop wrote it (bf16). */
static void store_block(void *out, sg_dtype dt, const float *p, size_t off, size_t len)
{
    uint16_t *o = (uint16_t *)out + off;
    if (dt == SG_BF16)
        sg_cast_f32_to_bf16(o, p + off, len);
    else
        sg_cast_f32_to_f16(o, p + off, len);
}

int sg_adam_step_lowp(const sg_adam_params *prm, int64_t t, float *p, const void *g, sg_dtype g_dt,
                      float *m, float *v, void *p_out, sg_dtype out_dt, size_t n, float grad_scale)
{
    sg_adam_isa isa;
    if (!grad_dtype_ok(g_dt) || !out_dtype_ok(p_out, out_dt))
        return SG_EINVAL;
    int rc = sg_adam_check_call(prm, t, p, g, m, v, n, grad_scale, &isa);
    if (rc)
        return rc;
    sg_adam_coef c;
    sg_adam_coef_init(&c, prm, t, grad_scale);
    sg_optim_step_fn step = sg_adam_step_loop(prm->algo, isa);
    /* the bf16 rounding is the loops' own (sg_f32_to_bf16's bits) */
    int loop_bf16 = p_out && out_dt == SG_BF16;
    float scratch[SG_ADAM_LOWP_BLOCK];
    for (size_t off = 0; off < n; off += SG_ADAM_LOWP_BLOCK) {
        size_t len = n - off < SG_ADAM_LOWP_BLOCK ? n - off : SG_ADAM_LOWP_BLOCK;
        const float *gb = grad_block(g, g_dt, off, len, scratch);
        step(&c, p + off, gb, m ? m + off : NULL, v ? v + off : NULL,
             loop_bf16 ? (uint16_t *)p_out + off : NULL, len);
        if (p_out && !loop_bf16)
            store_block(p_out, out_dt, p, off, len);
    }
    return 0;
}

int sg_adam_redo_lowp(const sg_adam_params *prm, int64_t t, float *p, const void *g, sg_dtype g_dt,
                      float *m, float *v, void *p_out, sg_dtype out_dt, size_t n, float spec_scale,
                      float grad_scale, int redo)
{
    sg_adam_isa isa;
    sg_adam_coef undo, again;
    if (!grad_dtype_ok(g_dt) || !out_dtype_ok(p_out, out_dt))
        return SG_EINVAL;
    int rc = sg_adam_rollback_prepare(prm, t, p, g, m, v, n, spec_scale, &undo, &isa);
    if (rc < 0)
        return rc;
    if (redo && !isfinite(grad_scale))
        return SG_EINVAL;
    if (rc)
        return 0;
    sg_adam_coef_init(&again, prm, t, grad_scale);
    sg_optim_rollback_fn back = sg_adam_rollback_loop(prm->algo, isa);
    sg_optim_step_fn step = sg_adam_step_loop(prm->algo, isa);
    int loop_bf16 = redo && p_out && out_dt == SG_BF16;
    float scratch[SG_ADAM_LOWP_BLOCK];
    /* block by block: the block's state is still in cache when the redo
     * reads it back, so it crosses memory once instead of twice */
    for (size_t off = 0; off < n; off += SG_ADAM_LOWP_BLOCK) {
        size_t len = n - off < SG_ADAM_LOWP_BLOCK ? n - off : SG_ADAM_LOWP_BLOCK;
        const float *gb = grad_block(g, g_dt, off, len, scratch);
        float *bm = m ? m + off : NULL, *bv = v ? v + off : NULL;
        back(&undo, p + off, gb, bm, bv, len);
        if (redo)
            step(&again, p + off, gb, bm, bv, loop_bf16 ? (uint16_t *)p_out + off : NULL, len);
        if (p_out && !loop_bf16)
            store_block(p_out, out_dt, p, off, len);
    }
    return 0;
}

int sg_adam_redo(const sg_adam_params *prm, int64_t t, float *p, const float *g, float *m, float *v,
                 size_t n, float spec_scale, float grad_scale, int redo)
{
    return sg_adam_redo_lowp(prm, t, p, g, SG_F32, m, v, NULL, SG_BF16, n, spec_scale, grad_scale,
                             redo);
}
