/* lion_adagrad.c - CPU Lion and Adagrad steps and rollbacks (formulas and
 * roundings in adam.h), behind sg_adam_step / sg_adam_rollback.
 *
 * Each rule is one plain C loop (an always-inline body), compiled into one
 * function per ISA with __attribute__((target(...))) and vectorised there by
 * the compiler, instead of Adam's hand-written intrinsics. That keeps one
 * statement of each formula, and it makes every variant give the same bits:
 * the loops use only operations IEEE 754 rounds once (*, /, sqrt, and fmaf
 * wherever a multiply-add is fused), the vector and scalar forms of which
 * agree exactly, and the build never contracts a * b + c on its own (ISO
 * C11; in GNU mode every multiply-add here is already an explicit fmaf, so
 * none is left to contract). The GPU kernel (codelets/cuda/adam.cu) does the
 * same operations with __fmaf_rn and friends.
 *
 * Vectorising needs two flags Makefile.am gives this file alone:
 * -fno-math-errno (a sqrtf that may set errno is a call, which stops the
 * vectoriser) and -fno-trapping-math (the skip_nonfinite selects are
 * if-converted only when computing both sides cannot trap; nothing here
 * unmasks FP exceptions). Neither changes a value: built without them the
 * loops are scalar and give the same bits, slower.
 *
 * Traffic per element: Lion reads p, g, m (12 B) and writes p, m (8 B);
 * Adagrad reads p, g, v and writes p, v; 2 B more with the bf16 copy. The
 * loops are memory-bound like Adam's.
 */
#include "codelets/cpu/lion_adagrad.h"

#include <float.h>
#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define SG_LA_X86 1
/* AVX-512BW too: without it GCC does not vectorise the loops that store the
 * bf16 copy (16-bit lanes in 512-bit vectors). */
#define SG_LA_AVX512 __attribute__((target("avx512f,avx512bw")))
#define SG_LA_AVX2 __attribute__((target("avx2,fma")))
#else
#define SG_LA_X86 0
#endif

#define SG_LA_INLINE static inline __attribute__((always_inline))

/* Finite without a branch or a subtraction that could be fused. */
SG_LA_INLINE int finite_f(float x)
{
    return fabsf(x) <= FLT_MAX;
}

/* sign with sign(+-0) = +0 (Lion's paper and torch.sign; DeepSpeed's CPU
 * Lion gives +-1 there) and sign(NaN) = NaN, so a NaN propagates as in torch. */
SG_LA_INLINE float sign_f(float x)
{
    return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x - x;
}

/* Software prefetch of a stream SG_LA_AHEAD floats (2 KiB) ahead of the
 * block at i, one per 64-byte line of the block (a hint: past the end of an
 * array it does nothing), as adam.c does for Adam. On the Intel VM (1
 * thread, 64M parameters, alternating runs) it took both steps from about
 * 950 to 1150 M params/s, AVX2 and AVX-512 alike; 256 and 1024 floats ahead
 * did as well or slightly worse. */
#define SG_LA_AHEAD 512
#define SG_LA_BLOCK 64

SG_LA_INLINE void prefetch_block(const float *x, size_t i)
{
    for (size_t q = 0; q < SG_LA_BLOCK; q += 16)
        __builtin_prefetch(x + i + q + SG_LA_AHEAD);
}

/* ---- Lion ----------------------------------------------------------------------
 * c = b1*m + (1-b1)*ge decides the direction; the step moves every element
 * by exactly lr (times the decay). */

/* Lion's step over n elements (k: a local copy, so that its fields stay in
 * registers). */
SG_LA_INLINE void lion_step_run(const sg_adam_coef *k, float *restrict p, const float *restrict g,
                                float *restrict m, uint16_t *restrict pb, size_t n, const int bf16)
{
    for (size_t i = 0; i < n; i++) {
        float p0 = p[i], m0 = m[i];
        float ge = g[i] * k->gs;
        float c = fmaf(k->omb1, ge, k->b1 * m0);
        float pi = fmaf(p0, k->decay, -k->lr * sign_f(c)); /* lr * sign: exact */
        float mi = fmaf(k->omb2, ge, k->b2 * m0);
        int keep = k->skip && !finite_f(ge);
        pi = keep ? p0 : pi;
        mi = keep ? m0 : mi;
        p[i] = pi;
        m[i] = mi;
        if (bf16)
            pb[i] = sg_f32_to_bf16(pi);
    }
}

/* Blocks of SG_LA_BLOCK with their prefetches, then the rest. */
SG_LA_INLINE void lion_step_body(const sg_adam_coef *kp, float *p, const float *g, float *m,
                                 uint16_t *pb, size_t n, const int bf16)
{
    const sg_adam_coef k = *kp;
    size_t i = 0;
    for (; i + SG_LA_BLOCK <= n; i += SG_LA_BLOCK) {
        prefetch_block(p, i);
        prefetch_block(g, i);
        prefetch_block(m, i);
        lion_step_run(&k, p + i, g + i, m + i, bf16 ? pb + i : NULL, SG_LA_BLOCK, bf16);
    }
    lion_step_run(&k, p + i, g + i, m + i, bf16 ? pb + i : NULL, n - i, bf16);
}

/* The step's m update divided out (its b2*m rounding is the error), the
 * direction recomputed from the recovered m, the signed step added back and
 * the decay divided out. */
SG_LA_INLINE void lion_rollback_body(const sg_adam_coef *k, float *restrict p,
                                     const float *restrict g, float *restrict m, size_t n)
{
    const float gs = k->gs, b1 = k->b1, omb1 = k->omb1, b2 = k->b2, omb2 = k->omb2;
    const float decay = k->decay, lr = k->lr;
    const int skip = k->skip;
    for (size_t i = 0; i < n; i++) {
        float p1 = p[i], m1 = m[i];
        float ge = g[i] * gs;
        float mi = fmaf(-omb2, ge, m1) / b2;
        float c = fmaf(omb1, ge, b1 * mi);
        float pi = fmaf(lr, sign_f(c), p1) / decay;
        int keep = skip && !finite_f(ge);
        p[i] = keep ? p1 : pi;
        m[i] = keep ? m1 : mi;
    }
}

/* ---- Adagrad ------------------------------------------------------------------- */

SG_LA_INLINE void adagrad_step_run(const sg_adam_coef *k, float *restrict p,
                                   const float *restrict g, float *restrict v,
                                   uint16_t *restrict pb, size_t n, const int bf16)
{
    for (size_t i = 0; i < n; i++) {
        float p0 = p[i], v0 = v[i];
        float ge0 = g[i] * k->gs;
        float ge = k->l2 ? fmaf(k->wd, p0, ge0) : ge0;
        float vi = fmaf(ge, ge, v0);
        float pi = fmaf(-k->clr, ge / (sqrtf(vi) + k->eps), p0);
        int keep = k->skip && !finite_f(ge0);
        pi = keep ? p0 : pi;
        vi = keep ? v0 : vi;
        p[i] = pi;
        v[i] = vi;
        if (bf16)
            pb[i] = sg_f32_to_bf16(pi);
    }
}

SG_LA_INLINE void adagrad_step_body(const sg_adam_coef *kp, float *p, const float *g, float *v,
                                    uint16_t *pb, size_t n, const int bf16)
{
    const sg_adam_coef k = *kp;
    size_t i = 0;
    for (; i + SG_LA_BLOCK <= n; i += SG_LA_BLOCK) {
        prefetch_block(p, i);
        prefetch_block(g, i);
        prefetch_block(v, i);
        adagrad_step_run(&k, p + i, g + i, v + i, bf16 ? pb + i : NULL, SG_LA_BLOCK, bf16);
    }
    adagrad_step_run(&k, p + i, g + i, v + i, bf16 ? pb + i : NULL, n - i, bf16);
}

/* den = sqrt(v) + eps comes back bit for bit from the post-step v, so
 * without L2 the step's update ge/den is recomputed exactly and added back.
 * With L2 the step's ge = g*gs + wd*p_old depends on the p being recovered:
 * p = p_old - kk*(g*gs + wd*p_old) with kk = clr/den is linear in p_old, so
 *   ge = (g*gs + wd*p) / (1 - wd*kk),   p_old = p + kk*ge
 * gives an estimate of p_old, from which ge is recomputed as the step did
 * (fmaf(wd, p_old, g*gs)): the same bits as the step's ge unless the
 * estimate is off by enough to move wd*p_old by half an ulp of ge, and then
 * the update as without L2. 1 - wd*kk <= 0 (den <= clr*wd: a tiny sum of
 * squares, and a step that overshot the decay) is not invertible; see adam.h. */
SG_LA_INLINE void adagrad_rollback_body(const sg_adam_coef *k, float *restrict p,
                                        const float *restrict g, float *restrict v, size_t n)
{
    const float gs = k->gs, wd = k->wd, eps = k->eps, clr = k->clr;
    const int skip = k->skip, l2 = k->l2;
    for (size_t i = 0; i < n; i++) {
        float p1 = p[i], v1 = v[i];
        float ge0 = g[i] * gs;
        float den = sqrtf(v1) + eps; /* as the step computed it */
        float ge = ge0, pe = 0.0f, kw = 0.0f;
        if (l2) {
            float kk = clr / den;
            kw = wd * kk;
            float gl = fmaf(wd, p1, ge0) / fmaf(-wd, kk, 1.0f);
            pe = fmaf(kk, gl, p1);
            ge = fmaf(wd, pe, ge0);
        }
        float pi = fmaf(clr, ge / den, p1);
        /* The recomputed update carries pe's error times wd*kk: better
         * than pe below 1, worse above (den < clr*wd). */
        pi = kw < 1.0f ? pi : pe;
        float vi = fmaf(-ge, ge, v1);
        vi = vi > 0.0f ? vi : 0.0f; /* cancellation can leave -tiny */
        int keep = skip && !finite_f(ge0);
        p[i] = keep ? p1 : pi;
        v[i] = keep ? v1 : vi;
    }
}

/* ---- the variants -----------------------------------------------------------------
 * One function per rule and ISA; the bf16 store is a separate instance of
 * the loop (a store under a condition is not vectorised). The scalar one is
 * the baseline ISA's code: on x86-64 its fmaf is a libm call (no FMA in the
 * baseline), on AArch64 an instruction, and the compiler may vectorise it. */

#define SG_LA_VARIANTS(isa, ATTR)                                                                  \
    static ATTR void lion_step_##isa(const sg_adam_coef *k, float *p, const float *g, float *m,    \
                                     float *v, uint16_t *pb, size_t n)                             \
    {                                                                                              \
        (void)v;                                                                                   \
        if (pb)                                                                                    \
            lion_step_body(k, p, g, m, pb, n, 1);                                                  \
        else                                                                                       \
            lion_step_body(k, p, g, m, NULL, n, 0);                                                \
    }                                                                                              \
    static ATTR void lion_rollback_##isa(const sg_adam_coef *k, float *p, const float *g,          \
                                         float *m, float *v, size_t n)                             \
    {                                                                                              \
        (void)v;                                                                                   \
        lion_rollback_body(k, p, g, m, n);                                                         \
    }                                                                                              \
    static ATTR void adagrad_step_##isa(const sg_adam_coef *k, float *p, const float *g, float *m, \
                                        float *v, uint16_t *pb, size_t n)                          \
    {                                                                                              \
        (void)m;                                                                                   \
        if (pb)                                                                                    \
            adagrad_step_body(k, p, g, v, pb, n, 1);                                               \
        else                                                                                       \
            adagrad_step_body(k, p, g, v, NULL, n, 0);                                             \
    }                                                                                              \
    static ATTR void adagrad_rollback_##isa(const sg_adam_coef *k, float *p, const float *g,       \
                                            float *m, float *v, size_t n)                          \
    {                                                                                              \
        (void)m;                                                                                   \
        adagrad_rollback_body(k, p, g, v, n);                                                      \
    }

#define SG_LA_NOATTR
SG_LA_VARIANTS(scalar, SG_LA_NOATTR)
#if SG_LA_X86
SG_LA_VARIANTS(avx2, SG_LA_AVX2)
SG_LA_VARIANTS(avx512, SG_LA_AVX512)

static int have_avx512bw(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw");
}
#endif

/* The variant to run: 0 scalar, 1 AVX2, 2 AVX-512. On AArch64 the NEON
 * variant is the scalar code, which the compiler vectorises with NEON (the
 * baseline there); the bits are the same either way. */
static int variant(sg_adam_isa isa)
{
#if SG_LA_X86
    if (isa == SG_ADAM_ISA_AVX512)
        return have_avx512bw() ? 2 : 1; /* the AVX2 code, the same bits */
    if (isa == SG_ADAM_ISA_AVX2)
        return 1;
#endif
    (void)isa;
    return 0;
}

sg_optim_step_fn sg_lion_adagrad_step_fn(sg_optim_algo algo, sg_adam_isa isa)
{
    static const sg_optim_step_fn lion[] = {
        lion_step_scalar,
#if SG_LA_X86
        lion_step_avx2,
        lion_step_avx512,
#endif
    };
    static const sg_optim_step_fn adagrad[] = {
        adagrad_step_scalar,
#if SG_LA_X86
        adagrad_step_avx2,
        adagrad_step_avx512,
#endif
    };
    if (algo == SG_OPTIM_LION)
        return lion[variant(isa)];
    if (algo == SG_OPTIM_ADAGRAD)
        return adagrad[variant(isa)];
    return NULL;
}

sg_optim_rollback_fn sg_lion_adagrad_rollback_fn(sg_optim_algo algo, sg_adam_isa isa)
{
    static const sg_optim_rollback_fn lion[] = {
        lion_rollback_scalar,
#if SG_LA_X86
        lion_rollback_avx2,
        lion_rollback_avx512,
#endif
    };
    static const sg_optim_rollback_fn adagrad[] = {
        adagrad_rollback_scalar,
#if SG_LA_X86
        adagrad_rollback_avx2,
        adagrad_rollback_avx512,
#endif
    };
    if (algo == SG_OPTIM_LION)
        return lion[variant(isa)];
    if (algo == SG_OPTIM_ADAGRAD)
        return adagrad[variant(isa)];
    return NULL;
}
