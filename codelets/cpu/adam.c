/* adam.c - CPU Adam / AdamW step and rollback: scalar, AVX2+FMA and AVX-512F
 * variants with runtime dispatch. See adam.h for the formulas. Lion and
 * Adagrad go through the same entry points (the checks, the coefficients,
 * the pthreads split) to their loops in lion_adagrad.c.
 *
 * Every variant walks the four arrays once: read p, g, m, v (16 B/element),
 * write p, m, v (12 B) and optionally the bf16 copy of p (2 B). The step is
 * memory-bound on any recent x86 core, so the vector code keeps torch's
 * IEEE sqrt and divisions rather than approximations.
 *
 * The ISA variants are functions compiled with __attribute__((target(...)))
 * so the file needs no special compiler flags; the one picked is resolved
 * once per process (CPU features and $SG_ADAM_ISA never change while it
 * runs), which is the only static state here.
 */
#define _POSIX_C_SOURCE 200809L
#include "codelets/cpu/adam.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/adam_loops.h"
#include "codelets/cpu/lion_adagrad.h"
#include "codelets/cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__) /* as simd.h's SG_X86_AVX512 */
#define SG_ADAM_X86 1
#include <immintrin.h>
#else
#define SG_ADAM_X86 0
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
#define SG_ADAM_NEON 1
#include <arm_neon.h>
#else
#define SG_ADAM_NEON 0
#endif

typedef sg_adam_coef adam_coef;

void sg_adam_coef_init(sg_adam_coef *c, const sg_adam_params *prm, int64_t t,
                       float grad_scale)
{
    double lr = prm->lr, wd = prm->weight_decay;
    double b1 = prm->beta1, b2 = prm->beta2;
    double bc1 = 1.0, bc2 = 1.0;
    if (prm->bias_correction) {
        bc1 = 1.0 - pow(b1, (double)t);
        bc2 = 1.0 - pow(b2, (double)t);
    }
    c->gs = grad_scale;
    c->wd = prm->weight_decay;
    c->l2 = !prm->adamw_mode && prm->weight_decay != 0.0f;
    c->decay = prm->adamw_mode ? (float)(1.0 - lr * wd) : 1.0f;
    c->b1 = prm->beta1;
    c->omb1 = (float)(1.0 - b1);
    c->b2 = prm->beta2;
    c->omb2 = (float)(1.0 - b2);
    c->bc2s = (float)sqrt(bc2);
    c->nss = (float)(-(lr / bc1));
    c->eps = prm->eps;
    c->skip = prm->skip_nonfinite != 0;
    c->algo = prm->algo;
    c->lr = 0.0f;
    c->clr = 0.0f;
    switch (prm->algo) {
    case SG_OPTIM_ADAM:
        break;
    case SG_OPTIM_LION: /* decay always decoupled; no moment corrections */
        c->l2 = 0;
        c->decay = (float)(1.0 - lr * wd);
        c->bc2s = 1.0f;
        c->nss = 0.0f;
        c->lr = prm->lr;
        break;
    case SG_OPTIM_ADAGRAD: /* L2 whenever wd != 0, as torch and DeepSpeed */
        c->l2 = prm->weight_decay != 0.0f;
        c->decay = 1.0f;
        c->bc2s = 1.0f;
        c->nss = 0.0f;
        c->clr = (float)(lr / (1.0 + (double)(t - 1) * (double)prm->lr_decay));
        break;
    }
}

/* ---- scalar ---------------------------------------------------------------
 * Unfused operations in torch's order; the reference the vector variants are
 * tested against. */

static void step_scalar(const adam_coef *c, float *p, const float *g, float *m,
                        float *v, uint16_t *pb, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float pi = p[i];
        float ge = g[i] * c->gs;
        if (c->skip && !isfinite(ge)) {
            if (pb)
                pb[i] = sg_f32_to_bf16(pi);
            continue;
        }
        if (c->l2)
            ge = ge + c->wd * pi;
        pi = pi * c->decay;
        float mi = m[i] * c->b1 + c->omb1 * ge;
        float vi = v[i] * c->b2 + (c->omb2 * ge) * ge;
        float den = sqrtf(vi) / c->bc2s + c->eps;
        pi = pi + c->nss * (mi / den);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
        if (pb)
            pb[i] = sg_f32_to_bf16(pi);
    }
}

static void rollback_scalar(const adam_coef *c, float *p, const float *g,
                            float *m, float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float ge = g[i] * c->gs;
        if (c->skip && !isfinite(ge))
            continue;
        float mi = m[i], vi = v[i];
        float den = sqrtf(vi) / c->bc2s + c->eps;   /* as the step computed it */
        float pi = (p[i] - c->nss * (mi / den)) / c->decay;
        if (c->l2)
            ge = ge + c->wd * pi;
        mi = (mi - c->omb1 * ge) / c->b1;
        vi = (vi - (c->omb2 * ge) * ge) / c->b2;
        p[i] = pi;
        m[i] = mi;
        v[i] = vi > 0.0f ? vi : 0.0f;
    }
}

typedef sg_optim_step_fn step_fn; /* (c, p, g, m, v, p_bf16, n) */
typedef sg_optim_rollback_fn rollback_fn;

/* The last r elements (r < width <= 16) of a vector variant's step or
 * rollback, through zero-padded buffers, so that they get the same vector
 * arithmetic as the rest: fn runs one whole vector of width there. */
static void step_tail(step_fn fn, size_t width, const adam_coef *c, float *p, const float *g,
                      float *m, float *v, uint16_t *pb, size_t r)
{
    float bp[16] = {0}, bg[16] = {0}, bm[16] = {0}, bv[16] = {0};
    uint16_t bb[16];
    memcpy(bp, p, r * sizeof(float));
    memcpy(bg, g, r * sizeof(float));
    memcpy(bm, m, r * sizeof(float));
    memcpy(bv, v, r * sizeof(float));
    fn(c, bp, bg, bm, bv, pb ? bb : NULL, width);
    memcpy(p, bp, r * sizeof(float));
    memcpy(m, bm, r * sizeof(float));
    memcpy(v, bv, r * sizeof(float));
    if (pb)
        memcpy(pb, bb, r * sizeof(uint16_t));
}

static void rollback_tail(rollback_fn fn, size_t width, const adam_coef *c, float *p,
                          const float *g, float *m, float *v, size_t r)
{
    float bp[16] = {0}, bg[16] = {0}, bm[16] = {0}, bv[16] = {0};
    memcpy(bp, p, r * sizeof(float));
    memcpy(bg, g, r * sizeof(float));
    memcpy(bm, m, r * sizeof(float));
    memcpy(bv, v, r * sizeof(float));
    fn(c, bp, bg, bm, bv, width);
    memcpy(p, bp, r * sizeof(float));
    memcpy(m, bm, r * sizeof(float));
    memcpy(v, bv, r * sizeof(float));
}

/* Software prefetch of the four streams this far ahead (floats: 1 KiB, 16
 * lines), by every vector variant. The step's divide/square-root chain fills
 * the reorder buffer long before its loads run far enough ahead to keep the
 * memory busy: on the Intel VM (Emerald Rapids) sg_adam ran at 81-87% of the
 * read-4/write-3 bound without it and 94-103% with it, at 1 and 2 threads
 * (tests/bench_adam, alternating rounds on the quiet VM; 128, 256 and 512
 * floats ahead alike). A prefetch
 * is a hint: past the end of an array it does nothing. */
#define ADAM_PREFETCH_FLOATS 256

static inline void prefetch_streams(const float *p, const float *g, const float *m,
                                    const float *v, size_t i)
{
    __builtin_prefetch(p + i + ADAM_PREFETCH_FLOATS);
    __builtin_prefetch(g + i + ADAM_PREFETCH_FLOATS);
    __builtin_prefetch(m + i + ADAM_PREFETCH_FLOATS);
    __builtin_prefetch(v + i + ADAM_PREFETCH_FLOATS);
}

#if SG_ADAM_X86
/* ---- AVX2 + FMA (8 floats) ------------------------------------------------ */

#define SG_AVX2 __attribute__((target("avx2,fma")))

typedef struct avx2_coef {
    __m256 gs, wd, decay, b1, omb1, b2, omb2, bc2s, nss, eps;
} avx2_coef;

static inline SG_AVX2 avx2_coef avx2_coef_make(const adam_coef *c)
{
    avx2_coef k = {
        .gs = _mm256_set1_ps(c->gs), .wd = _mm256_set1_ps(c->wd),
        .decay = _mm256_set1_ps(c->decay), .b1 = _mm256_set1_ps(c->b1),
        .omb1 = _mm256_set1_ps(c->omb1), .b2 = _mm256_set1_ps(c->b2),
        .omb2 = _mm256_set1_ps(c->omb2), .bc2s = _mm256_set1_ps(c->bc2s),
        .nss = _mm256_set1_ps(c->nss), .eps = _mm256_set1_ps(c->eps),
    };
    return k;
}

/* 8 bf16 values (round to nearest even, quiet NaN) from 8 floats. */
static inline SG_AVX2 __m128i avx2_to_bf16(__m256 x)
{
    __m256i u = _mm256_castps_si256(x);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i bias = _mm256_add_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)),
                                    _mm256_set1_epi32(0x7fff));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    /* (8 x u32 <= 0xffff) -> 8 x u16: pack within 128-bit lanes, then gather
     * the two low quadwords. */
    __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
    return _mm256_castsi256_si128(pk);
}

/* One vector of 8 elements; p, m, v updated in place in registers. */
static inline SG_AVX2 void avx2_step_vec(const avx2_coef *k, int l2, int skip,
                                         __m256 *pp, __m256 g, __m256 *pm,
                                         __m256 *pv)
{
    __m256 p0 = *pp, m0 = *pm, v0 = *pv;
    __m256 ge = _mm256_mul_ps(g, k->gs);
    if (l2)
        ge = _mm256_fmadd_ps(k->wd, p0, ge);
    __m256 p = _mm256_mul_ps(p0, k->decay);
    __m256 m = _mm256_fmadd_ps(k->omb1, ge, _mm256_mul_ps(m0, k->b1));
    __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(k->omb2, ge), ge,
                               _mm256_mul_ps(v0, k->b2));
    __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), k->bc2s), k->eps);
    p = _mm256_fmadd_ps(k->nss, _mm256_div_ps(m, den), p);
    if (skip) {
        /* finite lanes: g*gs - g*gs == 0; Inf and NaN give NaN */
        __m256 gs0 = _mm256_mul_ps(g, k->gs);
        __m256 fin = _mm256_cmp_ps(_mm256_sub_ps(gs0, gs0), _mm256_setzero_ps(),
                                   _CMP_EQ_OQ);
        p = _mm256_blendv_ps(p0, p, fin);
        m = _mm256_blendv_ps(m0, m, fin);
        v = _mm256_blendv_ps(v0, v, fin);
    }
    *pp = p;
    *pm = m;
    *pv = v;
}

static SG_AVX2 void step_avx2(const adam_coef *c, float *p, const float *g,
                              float *m, float *v, uint16_t *pb, size_t n)
{
    const avx2_coef k = avx2_coef_make(c);
    const int l2 = c->l2, skip = c->skip;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if (!(i & 15)) // once per 16 floats: a line of each stream when aligned
            prefetch_streams(p, g, m, v, i);
        __m256 pv_ = _mm256_loadu_ps(p + i), mv = _mm256_loadu_ps(m + i);
        __m256 vv = _mm256_loadu_ps(v + i), gv = _mm256_loadu_ps(g + i);
        avx2_step_vec(&k, l2, skip, &pv_, gv, &mv, &vv);
        _mm256_storeu_ps(p + i, pv_);
        _mm256_storeu_ps(m + i, mv);
        _mm256_storeu_ps(v + i, vv);
        if (pb)
            _mm_storeu_si128((__m128i *)(pb + i), avx2_to_bf16(pv_));
    }
    if (i < n)
        step_tail(step_avx2, 8, c, p + i, g + i, m + i, v + i, pb ? pb + i : NULL, n - i);
}

static inline SG_AVX2 void avx2_rollback_vec(const avx2_coef *k, int l2,
                                             int skip, __m256 *pp, __m256 g,
                                             __m256 *pm, __m256 *pv)
{
    __m256 p1 = *pp, m1 = *pm, v1 = *pv;
    __m256 ge = _mm256_mul_ps(g, k->gs);
    __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v1), k->bc2s), k->eps);
    __m256 p = _mm256_fnmadd_ps(k->nss, _mm256_div_ps(m1, den), p1);
    p = _mm256_div_ps(p, k->decay);
    __m256 gl = l2 ? _mm256_fmadd_ps(k->wd, p, ge) : ge;
    __m256 m = _mm256_div_ps(_mm256_fnmadd_ps(k->omb1, gl, m1), k->b1);
    __m256 v = _mm256_div_ps(_mm256_fnmadd_ps(_mm256_mul_ps(k->omb2, gl), gl, v1),
                             k->b2);
    v = _mm256_max_ps(v, _mm256_setzero_ps());
    if (skip) {
        __m256 fin = _mm256_cmp_ps(_mm256_sub_ps(ge, ge), _mm256_setzero_ps(),
                                   _CMP_EQ_OQ);
        p = _mm256_blendv_ps(p1, p, fin);
        m = _mm256_blendv_ps(m1, m, fin);
        v = _mm256_blendv_ps(v1, v, fin);
    }
    *pp = p;
    *pm = m;
    *pv = v;
}

static SG_AVX2 void rollback_avx2(const adam_coef *c, float *p, const float *g,
                                  float *m, float *v, size_t n)
{
    const avx2_coef k = avx2_coef_make(c);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if (!(i & 15)) // once per 16 floats: a line of each stream when aligned
            prefetch_streams(p, g, m, v, i);
        __m256 pv_ = _mm256_loadu_ps(p + i), mv = _mm256_loadu_ps(m + i);
        __m256 vv = _mm256_loadu_ps(v + i), gv = _mm256_loadu_ps(g + i);
        avx2_rollback_vec(&k, c->l2, c->skip, &pv_, gv, &mv, &vv);
        _mm256_storeu_ps(p + i, pv_);
        _mm256_storeu_ps(m + i, mv);
        _mm256_storeu_ps(v + i, vv);
    }
    if (i < n)
        rollback_tail(rollback_avx2, 8, c, p + i, g + i, m + i, v + i, n - i);
}

/* ---- AVX-512F (16 floats) -------------------------------------------------
 * Same operations as AVX2, tails with masked loads and stores. */

#define SG_AVX512 __attribute__((target("avx512f")))

typedef struct avx512_coef {
    __m512 gs, wd, decay, b1, omb1, b2, omb2, bc2s, nss, eps;
} avx512_coef;

static inline SG_AVX512 avx512_coef avx512_coef_make(const adam_coef *c)
{
    avx512_coef k = {
        .gs = _mm512_set1_ps(c->gs), .wd = _mm512_set1_ps(c->wd),
        .decay = _mm512_set1_ps(c->decay), .b1 = _mm512_set1_ps(c->b1),
        .omb1 = _mm512_set1_ps(c->omb1), .b2 = _mm512_set1_ps(c->b2),
        .omb2 = _mm512_set1_ps(c->omb2), .bc2s = _mm512_set1_ps(c->bc2s),
        .nss = _mm512_set1_ps(c->nss), .eps = _mm512_set1_ps(c->eps),
    };
    return k;
}

/* 16 bf16 values as the low halves of 16 x u32 lanes. */

static inline SG_AVX512 void avx512_step_vec(const avx512_coef *k, int l2,
                                             int skip, __m512 *pp, __m512 g,
                                             __m512 *pm, __m512 *pv)
{
    __m512 p0 = *pp, m0 = *pm, v0 = *pv;
    __m512 ge = _mm512_mul_ps(g, k->gs);
    __mmask16 fin = 0xffff;
    if (skip)
        fin = _mm512_cmp_ps_mask(_mm512_sub_ps(ge, ge), _mm512_setzero_ps(),
                                 _CMP_EQ_OQ);
    if (l2)
        ge = _mm512_fmadd_ps(k->wd, p0, ge);
    __m512 p = _mm512_mul_ps(p0, k->decay);
    __m512 m = _mm512_fmadd_ps(k->omb1, ge, _mm512_mul_ps(m0, k->b1));
    __m512 v = _mm512_fmadd_ps(_mm512_mul_ps(k->omb2, ge), ge,
                               _mm512_mul_ps(v0, k->b2));
    __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), k->bc2s), k->eps);
    p = _mm512_fmadd_ps(k->nss, _mm512_div_ps(m, den), p);
    *pp = _mm512_mask_blend_ps(fin, p0, p);
    *pm = _mm512_mask_blend_ps(fin, m0, m);
    *pv = _mm512_mask_blend_ps(fin, v0, v);
}

static SG_AVX512 void step_avx512(const adam_coef *c, float *p, const float *g,
                                  float *m, float *v, uint16_t *pb, size_t n)
{
    const avx512_coef k = avx512_coef_make(c);
    const int l2 = c->l2, skip = c->skip;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        prefetch_streams(p, g, m, v, i);
        __m512 pv_ = _mm512_loadu_ps(p + i), mv = _mm512_loadu_ps(m + i);
        __m512 vv = _mm512_loadu_ps(v + i), gv = _mm512_loadu_ps(g + i);
        avx512_step_vec(&k, l2, skip, &pv_, gv, &mv, &vv);
        _mm512_storeu_ps(p + i, pv_);
        _mm512_storeu_ps(m + i, mv);
        _mm512_storeu_ps(v + i, vv);
        if (pb)
            _mm256_storeu_si256((__m256i *)(pb + i),
                                _mm512_cvtepi32_epi16(sg_avx512_bf16_bits(pv_)));
    }
    if (i < n) {
        __mmask16 k16 = (__mmask16)((1u << (n - i)) - 1u);
        __m512 pv_ = _mm512_maskz_loadu_ps(k16, p + i);
        __m512 mv = _mm512_maskz_loadu_ps(k16, m + i);
        __m512 vv = _mm512_maskz_loadu_ps(k16, v + i);
        __m512 gv = _mm512_maskz_loadu_ps(k16, g + i);
        avx512_step_vec(&k, l2, skip, &pv_, gv, &mv, &vv);
        _mm512_mask_storeu_ps(p + i, k16, pv_);
        _mm512_mask_storeu_ps(m + i, k16, mv);
        _mm512_mask_storeu_ps(v + i, k16, vv);
        if (pb)
            _mm512_mask_cvtepi32_storeu_epi16(pb + i, k16, sg_avx512_bf16_bits(pv_));
    }
}

static inline SG_AVX512 void avx512_rollback_vec(const avx512_coef *k, int l2,
                                                 int skip, __m512 *pp, __m512 g,
                                                 __m512 *pm, __m512 *pv)
{
    __m512 p1 = *pp, m1 = *pm, v1 = *pv;
    __m512 ge = _mm512_mul_ps(g, k->gs);
    __mmask16 fin = 0xffff;
    if (skip)
        fin = _mm512_cmp_ps_mask(_mm512_sub_ps(ge, ge), _mm512_setzero_ps(),
                                 _CMP_EQ_OQ);
    __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v1), k->bc2s), k->eps);
    __m512 p = _mm512_fnmadd_ps(k->nss, _mm512_div_ps(m1, den), p1);
    p = _mm512_div_ps(p, k->decay);
    if (l2)
        ge = _mm512_fmadd_ps(k->wd, p, ge);
    __m512 m = _mm512_div_ps(_mm512_fnmadd_ps(k->omb1, ge, m1), k->b1);
    __m512 v = _mm512_div_ps(_mm512_fnmadd_ps(_mm512_mul_ps(k->omb2, ge), ge, v1),
                             k->b2);
    v = _mm512_max_ps(v, _mm512_setzero_ps());
    *pp = _mm512_mask_blend_ps(fin, p1, p);
    *pm = _mm512_mask_blend_ps(fin, m1, m);
    *pv = _mm512_mask_blend_ps(fin, v1, v);
}

static SG_AVX512 void rollback_avx512(const adam_coef *c, float *p,
                                      const float *g, float *m, float *v,
                                      size_t n)
{
    const avx512_coef k = avx512_coef_make(c);
    size_t i = 0;
    for (; i < n; i += 16) {
        prefetch_streams(p, g, m, v, i);
        __mmask16 k16 = n - i >= 16 ? (__mmask16)0xffff
                                    : (__mmask16)((1u << (n - i)) - 1u);
        __m512 pv_ = _mm512_maskz_loadu_ps(k16, p + i);
        __m512 mv = _mm512_maskz_loadu_ps(k16, m + i);
        __m512 vv = _mm512_maskz_loadu_ps(k16, v + i);
        __m512 gv = _mm512_maskz_loadu_ps(k16, g + i);
        avx512_rollback_vec(&k, c->l2, c->skip, &pv_, gv, &mv, &vv);
        _mm512_mask_storeu_ps(p + i, k16, pv_);
        _mm512_mask_storeu_ps(m + i, k16, mv);
        _mm512_mask_storeu_ps(v + i, k16, vv);
    }
}
#endif /* SG_ADAM_X86 */

#if SG_ADAM_NEON
/* ---- AArch64 Advanced SIMD (4 floats) ---------------------------------------
 * The AVX variants' operations one for one: the same fused multiply-adds
 * (vfmaq_f32(c, a, b) = a * b + c, vfmsq_f32(c, a, b) = c - a * b, each
 * rounded once), IEEE square root and divisions, so the three give the same
 * bits. Grace's cores have four 128-bit SIMD pipes; NEON is SVE2's width
 * there. */

typedef struct neon_coef {
    float32x4_t gs, wd, decay, b1, omb1, b2, omb2, bc2s, nss, eps;
} neon_coef;

static neon_coef neon_coef_make(const adam_coef *c)
{
    neon_coef k = {
        .gs = vdupq_n_f32(c->gs), .wd = vdupq_n_f32(c->wd),
        .decay = vdupq_n_f32(c->decay), .b1 = vdupq_n_f32(c->b1),
        .omb1 = vdupq_n_f32(c->omb1), .b2 = vdupq_n_f32(c->b2),
        .omb2 = vdupq_n_f32(c->omb2), .bc2s = vdupq_n_f32(c->bc2s),
        .nss = vdupq_n_f32(c->nss), .eps = vdupq_n_f32(c->eps),
    };
    return k;
}

/* Lanes whose g * gs is finite (g*gs - g*gs == 0; Inf and NaN give NaN). */
static inline uint32x4_t neon_finite(float32x4_t ge)
{
    return vceqq_f32(vsubq_f32(ge, ge), vdupq_n_f32(0.0f));
}

static inline uint16x4_t neon_to_bf16(float32x4_t x)
{
    uint32x4_t u = vreinterpretq_u32_f32(x);
    uint32x4_t hi = vshrq_n_u32(u, 16);
    uint32x4_t bias = vaddq_u32(vandq_u32(hi, vdupq_n_u32(1)), vdupq_n_u32(0x7fff));
    uint32x4_t r = vshrq_n_u32(vaddq_u32(u, bias), 16);
    uint32x4_t num = vceqq_f32(x, x); // all ones unless NaN
    r = vbslq_u32(num, r, vorrq_u32(hi, vdupq_n_u32(0x40)));
    return vmovn_u32(r);
}

static inline void neon_step_vec(const neon_coef *k, int l2, int skip, float32x4_t *pp,
                                 float32x4_t g, float32x4_t *pm, float32x4_t *pv)
{
    float32x4_t p0 = *pp, m0 = *pm, v0 = *pv;
    float32x4_t ge = vmulq_f32(g, k->gs);
    uint32x4_t fin = skip ? neon_finite(ge) : vdupq_n_u32(~0u);
    if (l2)
        ge = vfmaq_f32(ge, k->wd, p0);
    float32x4_t p = vmulq_f32(p0, k->decay);
    float32x4_t m = vfmaq_f32(vmulq_f32(m0, k->b1), k->omb1, ge);
    float32x4_t v = vfmaq_f32(vmulq_f32(v0, k->b2), vmulq_f32(k->omb2, ge), ge);
    float32x4_t den = vaddq_f32(vdivq_f32(vsqrtq_f32(v), k->bc2s), k->eps);
    p = vfmaq_f32(p, k->nss, vdivq_f32(m, den));
    *pp = vbslq_f32(fin, p, p0);
    *pm = vbslq_f32(fin, m, m0);
    *pv = vbslq_f32(fin, v, v0);
}

static void step_neon(const adam_coef *c, float *p, const float *g, float *m, float *v,
                      uint16_t *pb, size_t n)
{
    const neon_coef k = neon_coef_make(c);
    const int l2 = c->l2, skip = c->skip;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        if (!(i & 15))
            prefetch_streams(p, g, m, v, i);
        float32x4_t pv_ = vld1q_f32(p + i), mv = vld1q_f32(m + i);
        float32x4_t vv = vld1q_f32(v + i), gv = vld1q_f32(g + i);
        neon_step_vec(&k, l2, skip, &pv_, gv, &mv, &vv);
        vst1q_f32(p + i, pv_);
        vst1q_f32(m + i, mv);
        vst1q_f32(v + i, vv);
        if (pb)
            vst1_u16(pb + i, neon_to_bf16(pv_));
    }
    if (i < n)
        step_tail(step_neon, 4, c, p + i, g + i, m + i, v + i, pb ? pb + i : NULL, n - i);
}

static inline void neon_rollback_vec(const neon_coef *k, int l2, int skip, float32x4_t *pp,
                                     float32x4_t g, float32x4_t *pm, float32x4_t *pv)
{
    float32x4_t p1 = *pp, m1 = *pm, v1 = *pv;
    float32x4_t ge = vmulq_f32(g, k->gs);
    uint32x4_t fin = skip ? neon_finite(ge) : vdupq_n_u32(~0u);
    float32x4_t den = vaddq_f32(vdivq_f32(vsqrtq_f32(v1), k->bc2s), k->eps);
    float32x4_t p = vfmsq_f32(p1, k->nss, vdivq_f32(m1, den));
    p = vdivq_f32(p, k->decay);
    if (l2)
        ge = vfmaq_f32(ge, k->wd, p);
    float32x4_t m = vdivq_f32(vfmsq_f32(m1, k->omb1, ge), k->b1);
    float32x4_t v = vdivq_f32(vfmsq_f32(v1, vmulq_f32(k->omb2, ge), ge), k->b2);
    v = vmaxnmq_f32(v, vdupq_n_f32(0.0f)); // NaN -> 0, as the other variants
    *pp = vbslq_f32(fin, p, p1);
    *pm = vbslq_f32(fin, m, m1);
    *pv = vbslq_f32(fin, v, v1);
}

static void rollback_neon(const adam_coef *c, float *p, const float *g, float *m,
                          float *v, size_t n)
{
    const neon_coef k = neon_coef_make(c);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        if (!(i & 15))
            prefetch_streams(p, g, m, v, i);
        float32x4_t pv_ = vld1q_f32(p + i), mv = vld1q_f32(m + i);
        float32x4_t vv = vld1q_f32(v + i), gv = vld1q_f32(g + i);
        neon_rollback_vec(&k, c->l2, c->skip, &pv_, gv, &mv, &vv);
        vst1q_f32(p + i, pv_);
        vst1q_f32(m + i, mv);
        vst1q_f32(v + i, vv);
    }
    if (i < n)
        rollback_tail(rollback_neon, 4, c, p + i, g + i, m + i, v + i, n - i);
}
#endif /* SG_ADAM_NEON */

/* ---- dispatch -------------------------------------------------------------- */


int sg_adam_isa_supported(sg_adam_isa isa)
{
    switch (isa) {
    case SG_ADAM_ISA_SCALAR:
        return 1;
#if SG_ADAM_X86
    case SG_ADAM_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SG_ADAM_ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f");
#endif
#if SG_ADAM_NEON
    case SG_ADAM_ISA_NEON:
        return 1; // Advanced SIMD is part of every AArch64 CPU
#endif
    default:
        return 0;
    }
}

int sg_adam_isa_parse(const char *name, sg_adam_isa *out)
{
    static const struct { const char *name; sg_adam_isa isa; } tab[] = {
        {"auto", SG_ADAM_ISA_AUTO}, {"scalar", SG_ADAM_ISA_SCALAR},
        {"avx2", SG_ADAM_ISA_AVX2}, {"avx512", SG_ADAM_ISA_AVX512},
        {"neon", SG_ADAM_ISA_NEON},
    };
    for (size_t i = 0; name && i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(name, tab[i].name) == 0) {
            *out = tab[i].isa;
            return 0;
        }
    return SG_EINVAL;
}

static const char *isa_str(sg_adam_isa isa)
{
    switch (isa) {
    case SG_ADAM_ISA_SCALAR: return "scalar";
    case SG_ADAM_ISA_AVX2: return "avx2";
    case SG_ADAM_ISA_AVX512: return "avx512";
    case SG_ADAM_ISA_NEON: return "neon";
    default: return "auto";
    }
}

/* The resolution of SG_ADAM_ISA_AUTO, done once. */
static pthread_once_t auto_once = PTHREAD_ONCE_INIT;
static sg_adam_isa auto_isa;
static int auto_rc;
static char auto_env[64];

static void auto_resolve(void)
{
    const char *env = getenv("SG_ADAM_ISA");
    if (env && *env && strcmp(env, "auto") != 0) {
        snprintf(auto_env, sizeof auto_env, "%s", env);
        sg_adam_isa isa;
        if (sg_adam_isa_parse(env, &isa) != 0)
            auto_rc = SG_EINVAL;
        else if (!sg_adam_isa_supported(isa))
            auto_rc = SG_ENOTSUP;
        else
            auto_isa = isa;
        return;
    }
    auto_isa = sg_adam_isa_supported(SG_ADAM_ISA_AVX512) ? SG_ADAM_ISA_AVX512
               : sg_adam_isa_supported(SG_ADAM_ISA_AVX2) ? SG_ADAM_ISA_AVX2
               : sg_adam_isa_supported(SG_ADAM_ISA_NEON) ? SG_ADAM_ISA_NEON
                                                         : SG_ADAM_ISA_SCALAR;
}

int sg_adam_isa_resolve(sg_adam_isa isa, sg_adam_isa *out, sg_error *err)
{
    if (isa == SG_ADAM_ISA_AUTO) {
        pthread_once(&auto_once, auto_resolve);
        if (auto_rc == SG_EINVAL)
            return sg_error_set(err, SG_EINVAL,
                                "SG_ADAM_ISA=%s: unknown variant (expected "
                                "scalar, avx2, avx512, neon or auto)", auto_env);
        if (auto_rc)
            return sg_error_set(err, auto_rc,
                                "SG_ADAM_ISA=%s: this CPU or build lacks it",
                                auto_env);
        isa = auto_isa;
    } else if (isa < SG_ADAM_ISA_SCALAR || isa > SG_ADAM_ISA_NEON) {
        return sg_error_set(err, SG_EINVAL, "adam: isa %d is not a variant",
                            (int)isa);
    } else if (!sg_adam_isa_supported(isa)) {
        return sg_error_set(err, SG_ENOTSUP,
                            "adam: the %s variant needs a CPU feature this "
                            "machine (or build) lacks", isa_str(isa));
    }
    if (out)
        *out = isa;
    return 0;
}

const char *sg_adam_isa_name(sg_adam_isa isa)
{
    sg_adam_isa got;
    if (isa == SG_ADAM_ISA_AUTO)
        return sg_adam_isa_resolve(isa, &got, NULL) ? "invalid" : isa_str(got);
    return isa_str(isa);
}

const char *sg_optim_algo_name(sg_optim_algo algo)
{
    switch (algo) {
    case SG_OPTIM_ADAM: return "adam";
    case SG_OPTIM_LION: return "lion";
    case SG_OPTIM_ADAGRAD: return "adagrad";
    }
    return "invalid";
}

/* lr, eps, weight_decay, lr_decay: finite and >= 0; name: the optimizer. */
static int check_nonneg(const char *name, const char *field, float x, sg_error *err)
{
    if (!isfinite(x) || x < 0.0f)
        return sg_error_set(err, SG_EINVAL,
                            "%s: %s %g is invalid (expected a finite value >= 0)", name,
                            field, (double)x);
    return 0;
}

static int check_beta(const char *name, const char *field, float x, sg_error *err)
{
    if (!(x >= 0.0f && x < 1.0f))
        return sg_error_set(err, SG_EINVAL, "%s: %s %g is out of range (expected [0, 1))",
                            name, field, (double)x);
    return 0;
}

int sg_adam_check_params(const sg_adam_params *prm, sg_error *err)
{
    if (!prm)
        return sg_error_set(err, SG_EINVAL, "adam: no parameters");
    const char *name = sg_optim_algo_name(prm->algo);
    int rc;
    switch (prm->algo) {
    case SG_OPTIM_ADAM:
        if ((rc = check_nonneg(name, "lr", prm->lr, err)) ||
            (rc = check_beta(name, "beta1", prm->beta1, err)) ||
            (rc = check_beta(name, "beta2", prm->beta2, err)) ||
            (rc = check_nonneg(name, "eps", prm->eps, err)) ||
            (rc = check_nonneg(name, "weight_decay", prm->weight_decay, err)))
            return rc;
        break;
    case SG_OPTIM_LION: /* eps, bias_correction, adamw_mode, lr_decay unused */
        if ((rc = check_nonneg(name, "lr", prm->lr, err)) ||
            (rc = check_beta(name, "beta1", prm->beta1, err)) ||
            (rc = check_beta(name, "beta2", prm->beta2, err)) ||
            (rc = check_nonneg(name, "weight_decay", prm->weight_decay, err)))
            return rc;
        break;
    case SG_OPTIM_ADAGRAD: /* the betas, bias_correction, adamw_mode unused */
        if ((rc = check_nonneg(name, "lr", prm->lr, err)) ||
            (rc = check_nonneg(name, "eps", prm->eps, err)) ||
            (rc = check_nonneg(name, "weight_decay", prm->weight_decay, err)) ||
            (rc = check_nonneg(name, "lr_decay", prm->lr_decay, err)))
            return rc;
        break;
    default:
        return sg_error_set(err, SG_EINVAL,
                            "optimizer %d is not an update rule (expected adam, lion "
                            "or adagrad)", (int)prm->algo);
    }
    if (prm->isa < SG_ADAM_ISA_AUTO || prm->isa > SG_ADAM_ISA_NEON)
        return sg_error_set(err, SG_EINVAL, "%s: isa %d is not a variant", name,
                            (int)prm->isa);
    return 0;
}

int sg_adam_check_call(const sg_adam_params *prm, int64_t t, const float *p,
                       const void *g, const float *m, const float *v, size_t n,
                       float grad_scale, sg_adam_isa *isa)
{
    if (sg_adam_check_params(prm, NULL))
        return SG_EINVAL;
    if (t < 1 || !isfinite(grad_scale))
        return SG_EINVAL;
    /* Lion never touches v, Adagrad never m: those may be NULL */
    if (n > 0 && (!p || !g || (!m && prm->algo != SG_OPTIM_ADAGRAD) ||
                  (!v && prm->algo != SG_OPTIM_LION)))
        return SG_EINVAL;
    return sg_adam_isa_resolve(prm->isa, isa, NULL);
}

step_fn sg_adam_step_loop(sg_optim_algo algo, sg_adam_isa isa)
{
    if (algo != SG_OPTIM_ADAM)
        return sg_lion_adagrad_step_fn(algo, isa);
#if SG_ADAM_X86
    if (isa == SG_ADAM_ISA_AVX512)
        return step_avx512;
    if (isa == SG_ADAM_ISA_AVX2)
        return step_avx2;
#endif
#if SG_ADAM_NEON
    if (isa == SG_ADAM_ISA_NEON)
        return step_neon;
#endif
    (void)isa;
    return step_scalar;
}

rollback_fn sg_adam_rollback_loop(sg_optim_algo algo, sg_adam_isa isa)
{
    if (algo != SG_OPTIM_ADAM)
        return sg_lion_adagrad_rollback_fn(algo, isa);
#if SG_ADAM_X86
    if (isa == SG_ADAM_ISA_AVX512)
        return rollback_avx512;
    if (isa == SG_ADAM_ISA_AVX2)
        return rollback_avx2;
#endif
#if SG_ADAM_NEON
    if (isa == SG_ADAM_ISA_NEON)
        return rollback_neon;
#endif
    (void)isa;
    return rollback_scalar;
}

int sg_adam_step(const sg_adam_params *prm, int64_t t, float *p, const float *g,
                 float *m, float *v, uint16_t *p_bf16, size_t n,
                 float grad_scale)
{
    sg_adam_isa isa;
    int rc = sg_adam_check_call(prm, t, p, g, m, v, n, grad_scale, &isa);
    if (rc)
        return rc;
    if (n == 0)
        return 0;
    adam_coef c;
    sg_adam_coef_init(&c, prm, t, grad_scale);
    sg_adam_step_loop(prm->algo, isa)(&c, p, g, m, v, p_bf16, n);
    return 0;
}

float sg_adam_grad_multiplier(const float norm[2], double clip)
{
    double combined = 1.0 / (double)norm[1];
    if (clip > 0) {
        double f = ((double)norm[0] + 1e-6) / clip;
        if (f > 1.0)
            combined *= f;
    }
    return (float)(1.0 / combined);
}

int sg_adam_speculation_fails(const float norm[2], int overflow, double clip)
{
    return overflow || sg_adam_grad_multiplier(norm, clip) != norm[1];
}

int sg_adam_rollback_prepare(const sg_adam_params *prm, int64_t t, const float *p,
                             const void *g, const float *m, const float *v, size_t n,
                             float grad_scale, adam_coef *c, sg_adam_isa *isa)
{
    int rc = sg_adam_check_call(prm, t, p, g, m, v, n, grad_scale, isa);
    if (rc)
        return rc;
    sg_adam_coef_init(c, prm, t, grad_scale);
    /* beta = 0 forgets the old moment; a zero decay factor forgets p.
     * Lion's beta1 only weighs the direction (m is recovered through
     * beta2); Adagrad forgets nothing. */
    if (prm->algo == SG_OPTIM_ADAM &&
        (prm->beta1 == 0.0f || prm->beta2 == 0.0f || c->decay == 0.0f))
        return SG_EINVAL;
    if (prm->algo == SG_OPTIM_LION && (prm->beta2 == 0.0f || c->decay == 0.0f))
        return SG_EINVAL;
    return n == 0;
}

int sg_adam_rollback(const sg_adam_params *prm, int64_t t, float *p,
                     const float *g, float *m, float *v, size_t n,
                     float grad_scale)
{
    sg_adam_isa isa;
    adam_coef c;
    int rc = sg_adam_rollback_prepare(prm, t, p, g, m, v, n, grad_scale, &c, &isa);
    if (rc)
        return rc < 0 ? rc : 0;
    sg_adam_rollback_loop(prm->algo, isa)(&c, p, g, m, v, n);
    return 0;
}

/* ---- pthreads split -------------------------------------------------------- */

typedef struct adam_chunk {
    step_fn fn;
    const adam_coef *c;
    float *p, *m, *v;
    const float *g;
    uint16_t *pb;
    size_t n;
} adam_chunk;

static void *chunk_run(void *arg)
{
    adam_chunk *a = arg;
    a->fn(a->c, a->p, a->g, a->m, a->v, a->pb, a->n);
    return NULL;
}

#define SG_ADAM_MAX_THREADS 256

int sg_adam_step_parallel(const sg_adam_params *prm, int64_t t, float *p,
                          const float *g, float *m, float *v, uint16_t *p_bf16,
                          size_t n, float grad_scale, int nthreads)
{
    sg_adam_isa isa;
    int rc = sg_adam_check_call(prm, t, p, g, m, v, n, grad_scale, &isa);
    if (rc)
        return rc;
    if (nthreads < 1 || nthreads > SG_ADAM_MAX_THREADS)
        return SG_EINVAL;
    if (n == 0)
        return 0;
    adam_coef c;
    sg_adam_coef_init(&c, prm, t, grad_scale);
    step_fn fn = sg_adam_step_loop(prm->algo, isa);

    /* Chunks of whole 64-byte lines (16 floats) so threads never share one. */
    size_t per = (n + (size_t)nthreads - 1) / (size_t)nthreads;
    per = (per + 15) / 16 * 16;
    adam_chunk ch[SG_ADAM_MAX_THREADS];
    pthread_t tid[SG_ADAM_MAX_THREADS];
    int started[SG_ADAM_MAX_THREADS] = {0};
    int nch = 0;
    for (size_t off = 0; off < n; off += per, nch++) {
        size_t len = n - off < per ? n - off : per;
        ch[nch] = (adam_chunk){fn, &c, p + off, m + off, v + off, g + off,
                               p_bf16 ? p_bf16 + off : NULL, len};
    }
    /* Chunk 0 runs on the calling thread; a chunk whose thread cannot be
     * created runs there too. */
    for (int i = 1; i < nch; i++)
        started[i] = pthread_create(&tid[i], NULL, chunk_run, &ch[i]) == 0;
    chunk_run(&ch[0]);
    for (int i = 1; i < nch; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            chunk_run(&ch[i]);
    }
    return 0;
}
