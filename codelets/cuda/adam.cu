/* adam.cu - the Adam / AdamW step of codelets/cpu/adam.c on the GPU
 * (codelets/cuda/cuda_ops.h; scalar variant: the same formulas in the same
 * order, without FMA contraction), and the Lion and Adagrad steps of
 * codelets/cpu/lion_adagrad.c (the same operations, its explicit fmaf as
 * __fmaf_rn: the bits of every CPU variant).
 *
 * The gradient multiplier (1 / loss scale, clipping) depends on the norm,
 * which is device memory computed by earlier work on the stream: the Adam
 * kernel derives it on the device, in double as the CPU codelets do
 * (sg_adam_grad_multiplier, codelets/cpu/adam.h), so the host never waits
 * for the GPU.
 */
#include "codelets/cuda/cuda_compat.h"

#include <math.h>

#define THREADS 256

/* ---- Adam ----------------------------------------------------------------------- */

/* Per-call scalars: sg_adam_coef (computed on the host by adam.c's
 * sg_adam_coef_init, the CPU kernel's own values; its gs is unused: the
 * multiplier comes from the device) and the clipping threshold. */
typedef struct adam_k {
    sg_adam_coef c;
    double clip; /* DeepSpeed's gradient clipping, <= 0: none */
} adam_k;

/* Single roundings, never fused into an FMA (nvcc contracts a * b + c by
 * default), and IEEE division and square root whatever the build's flags:
 * the scalar CPU variant's results, bit for bit. */
__device__ static inline float f_mul(float a, float b)
{
    return __fmul_rn(a, b);
}
__device__ static inline float f_add(float a, float b)
{
    return __fadd_rn(a, b);
}
__device__ static inline float f_div(float a, float b)
{
    return __fdiv_rn(a, b);
}
__device__ static inline float f_sqrt(float a)
{
    return __fsqrt_rn(a);
}
__device__ static inline float f_sub(float a, float b)
{
    return __fsub_rn(a, b);
}
__device__ static inline float f_fma(float a, float b, float c)
{
    return __fmaf_rn(a, b, c);
}

/* The factor gradients are multiplied by, from norm = [norm, 1 / loss
 * scale]: 1 / loss scale, times DeepSpeed's clipping coefficient
 * clip / (norm + 1e-6) when (norm + 1e-6) / clip exceeds 1 (the CPU
 * codelet's grad_multiplier). */
__device__ static inline float grad_multiplier(const float *norm, double clip)
{
    double combined = 1.0 / (double)norm[1];
    if (clip > 0) {
        double f = ((double)norm[0] + 1e-6) / clip;
        if (f > 1.0)
            combined *= f;
    }
    return (float)(1.0 / combined);
}

template <typename T>
__global__ void k_adam(adam_k k, float *p, const T *g, float *m, float *v, size_t n,
                       const float *norm, const int32_t *overflow)
{
    if (overflow && *overflow) // fp16 overflow: the step is skipped
        return;
    const sg_adam_coef &c = k.c;
    float gs = norm ? grad_multiplier(norm, k.clip) : 1.0f; // the same on every thread
    SG_GRID_STRIDE(i, n)
    {
        float pi = p[i];
        float ge = f_mul(sg_ld(g[i]), gs);
        if (c.skip && !isfinite(ge))
            continue;
        if (c.l2)
            ge = f_add(ge, f_mul(c.wd, pi));
        pi = f_mul(pi, c.decay);
        float mi = f_add(f_mul(m[i], c.b1), f_mul(c.omb1, ge));
        float vi = f_add(f_mul(v[i], c.b2), f_mul(f_mul(c.omb2, ge), ge));
        float den = f_add(f_div(f_sqrt(vi), c.bc2s), c.eps);
        pi = f_add(pi, f_mul(c.nss, f_div(mi, den)));
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

/* ---- Lion and Adagrad (formulas and roundings: codelets/cpu/adam.h) --------------- */

/* sign(+-0) = +0, sign(NaN) = NaN: lion_adagrad.c's sign_f */
__device__ static inline float sign_f(float x)
{
    return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : f_sub(x, x);
}

template <typename T>
__global__ void k_lion(adam_k k, float *p, const T *g, float *m, size_t n, const float *norm,
                       const int32_t *overflow)
{
    if (overflow && *overflow)
        return;
    const sg_adam_coef &c = k.c;
    float gs = norm ? grad_multiplier(norm, k.clip) : 1.0f;
    SG_GRID_STRIDE(i, n)
    {
        float ge = f_mul(sg_ld(g[i]), gs);
        if (c.skip && !isfinite(ge))
            continue;
        float p0 = p[i], m0 = m[i];
        float d = f_fma(c.omb1, ge, f_mul(c.b1, m0));       // the direction
        p[i] = f_fma(p0, c.decay, f_mul(-c.lr, sign_f(d))); // lr * sign: exact
        m[i] = f_fma(c.omb2, ge, f_mul(c.b2, m0));
    }
}

template <typename T>
__global__ void k_adagrad(adam_k k, float *p, const T *g, float *v, size_t n, const float *norm,
                          const int32_t *overflow)
{
    if (overflow && *overflow)
        return;
    const sg_adam_coef &c = k.c;
    float gs = norm ? grad_multiplier(norm, k.clip) : 1.0f;
    SG_GRID_STRIDE(i, n)
    {
        float ge = f_mul(sg_ld(g[i]), gs);
        if (c.skip && !isfinite(ge))
            continue;
        float p0 = p[i];
        if (c.l2)
            ge = f_fma(c.wd, p0, ge);
        float vi = f_fma(ge, ge, v[i]);
        p[i] = f_fma(-c.clr, f_div(ge, f_add(f_sqrt(vi), c.eps)), p0);
        v[i] = vi;
    }
}

int sg_cu_adam_step(const sg_cu *cu, const sg_adam_params *prm, int64_t t, float *p, const void *g,
                    sg_dtype dt, float *m, float *v, size_t n, const float *norm,
                    const int32_t *overflow, double clip)
{
    if (!cu || sg_adam_check_params(prm, NULL) || t < 1 || isnan(clip) ||
        (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    /* as on the CPU, Lion never touches v and Adagrad never m */
    if (!p || !g || (!m && prm->algo != SG_OPTIM_ADAGRAD) || (!v && prm->algo != SG_OPTIM_LION))
        return SG_EINVAL;
    adam_k c;
    sg_adam_coef_init(&c.c, prm, t, 1.0f); /* the CPU kernel's own scalars */
    c.clip = clip;
    unsigned blocks = sg_cu_blocks(n, THREADS);
    switch (prm->algo) {
    case SG_OPTIM_LION:
        SG_CU_DISPATCH(dt, T,
                       SG_LAUNCH(k_lion<T>, blocks, THREADS, cu->stream, c, p, (const T *)g, m, n,
                                 norm, overflow));
        break;
    case SG_OPTIM_ADAGRAD:
        SG_CU_DISPATCH(dt, T,
                       SG_LAUNCH(k_adagrad<T>, blocks, THREADS, cu->stream, c, p, (const T *)g, v,
                                 n, norm, overflow));
        break;
    default:
        SG_CU_DISPATCH(dt, T,
                       SG_LAUNCH(k_adam<T>, blocks, THREADS, cu->stream, c, p, (const T *)g, m, v,
                                 n, norm, overflow));
        break;
    }
    return sg_cu_launch_status();
}
