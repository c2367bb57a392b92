/* adam_variants.c - the loops of the CPU Adam / AdamW step and rollback:
 * scalar, AVX2+FMA, AVX-512F and (on AArch64) NEON, and which of them this
 * CPU and build have (adam_loops.h, adam.h). Lion's and Adagrad's loops are
 * lion_adagrad.c's; the checks, coefficients and entry points adam.c's.
 *
 * Every variant walks the four arrays once: read p, g, m, v (16 B/element),
 * write p, m, v (12 B) and optionally the bf16 copy of p (2 B). The step is
 * memory-bound on any recent x86 core, so the vector code keeps torch's
 * IEEE sqrt and divisions rather than approximations.
 *
 * The ISA variants are functions compiled with __attribute__((target(...)))
 * so the file needs no special compiler flags.
 */

#define _POSIX_C_SOURCE 200809L
#include "codelets/cpu/adam.h"

#include <math.h>
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

/* ---- scalar ---------------------------------------------------------------
 * Unfused operations in torch's order; the reference the vector variants are
 * tested against. */

static void step_scalar(const adam_coef *c, float *p, const float *g, float *m, float *v,
                        uint16_t *pb, size_t n)
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

static void rollback_scalar(const adam_coef *c, float *p, const float *g, float *m, float *v,
                            size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float ge = g[i] * c->gs;
        if (c->skip && !isfinite(ge))
            continue;
        float mi = m[i], vi = v[i];
        float den = sqrtf(vi) / c->bc2s + c->eps; /* as the step computed it */
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

static inline void prefetch_streams(const float *p, const float *g, const float *m, const float *v,
                                    size_t i)
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
        .gs = _mm256_set1_ps(c->gs),
        .wd = _mm256_set1_ps(c->wd),
        .decay = _mm256_set1_ps(c->decay),
        .b1 = _mm256_set1_ps(c->b1),
        .omb1 = _mm256_set1_ps(c->omb1),
        .b2 = _mm256_set1_ps(c->b2),
        .omb2 = _mm256_set1_ps(c->omb2),
        .bc2s = _mm256_set1_ps(c->bc2s),
        .nss = _mm256_set1_ps(c->nss),
        .eps = _mm256_set1_ps(c->eps),
    };
    return k;
}

/* 8 bf16 values (round to nearest even, quiet NaN) from 8 floats. */
static inline SG_AVX2 __m128i avx2_to_bf16(__m256 x)
{
    __m256i u = _mm256_castps_si256(x);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i bias =
        _mm256_add_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    /* (8 x u32 <= 0xffff) -> 8 x u16: pack within 128-bit lanes, then gather
     * the two low quadwords. */
    __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
    return _mm256_castsi256_si128(pk);
}

/* One vector of 8 elements; p, m, v updated in place in registers. */
static inline SG_AVX2 void avx2_step_vec(const avx2_coef *k, int l2, int skip, __m256 *pp, __m256 g,
                                         __m256 *pm, __m256 *pv)
{
    __m256 p0 = *pp, m0 = *pm, v0 = *pv;
    __m256 ge = _mm256_mul_ps(g, k->gs);
    if (l2)
        ge = _mm256_fmadd_ps(k->wd, p0, ge);
    __m256 p = _mm256_mul_ps(p0, k->decay);
    __m256 m = _mm256_fmadd_ps(k->omb1, ge, _mm256_mul_ps(m0, k->b1));
    __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(k->omb2, ge), ge, _mm256_mul_ps(v0, k->b2));
    __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), k->bc2s), k->eps);
    p = _mm256_fmadd_ps(k->nss, _mm256_div_ps(m, den), p);
    if (skip) {
        /* finite lanes: g*gs - g*gs == 0; Inf and NaN give NaN */
        __m256 gs0 = _mm256_mul_ps(g, k->gs);
        __m256 fin = _mm256_cmp_ps(_mm256_sub_ps(gs0, gs0), _mm256_setzero_ps(), _CMP_EQ_OQ);
        p = _mm256_blendv_ps(p0, p, fin);
        m = _mm256_blendv_ps(m0, m, fin);
        v = _mm256_blendv_ps(v0, v, fin);
    }
    *pp = p;
    *pm = m;
    *pv = v;
}

static SG_AVX2 void step_avx2(const adam_coef *c, float *p, const float *g, float *m, float *v,
                              uint16_t *pb, size_t n)
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

static inline SG_AVX2 void avx2_rollback_vec(const avx2_coef *k, int l2, int skip, __m256 *pp,
                                             __m256 g, __m256 *pm, __m256 *pv)
{
    __m256 p1 = *pp, m1 = *pm, v1 = *pv;
    __m256 ge = _mm256_mul_ps(g, k->gs);
    __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v1), k->bc2s), k->eps);
    __m256 p = _mm256_fnmadd_ps(k->nss, _mm256_div_ps(m1, den), p1);
    p = _mm256_div_ps(p, k->decay);
    __m256 gl = l2 ? _mm256_fmadd_ps(k->wd, p, ge) : ge;
    __m256 m = _mm256_div_ps(_mm256_fnmadd_ps(k->omb1, gl, m1), k->b1);
    __m256 v = _mm256_div_ps(_mm256_fnmadd_ps(_mm256_mul_ps(k->omb2, gl), gl, v1), k->b2);
    v = _mm256_max_ps(v, _mm256_setzero_ps());
    if (skip) {
        __m256 fin = _mm256_cmp_ps(_mm256_sub_ps(ge, ge), _mm256_setzero_ps(), _CMP_EQ_OQ);
        p = _mm256_blendv_ps(p1, p, fin);
        m = _mm256_blendv_ps(m1, m, fin);
        v = _mm256_blendv_ps(v1, v, fin);
    }
    *pp = p;
    *pm = m;
    *pv = v;
}

static SG_AVX2 void rollback_avx2(const adam_coef *c, float *p, const float *g, float *m, float *v,
                                  size_t n)
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
        .gs = _mm512_set1_ps(c->gs),
        .wd = _mm512_set1_ps(c->wd),
        .decay = _mm512_set1_ps(c->decay),
        .b1 = _mm512_set1_ps(c->b1),
        .omb1 = _mm512_set1_ps(c->omb1),
        .b2 = _mm512_set1_ps(c->b2),
        .omb2 = _mm512_set1_ps(c->omb2),
        .bc2s = _mm512_set1_ps(c->bc2s),
        .nss = _mm512_set1_ps(c->nss),
        .eps = _mm512_set1_ps(c->eps),
    };
    return k;
}

/* 16 bf16 values as the low halves of 16 x u32 lanes. */

static inline SG_AVX512 void avx512_step_vec(const avx512_coef *k, int l2, int skip, __m512 *pp,
                                             __m512 g, __m512 *pm, __m512 *pv)
{
    __m512 p0 = *pp, m0 = *pm, v0 = *pv;
    __m512 ge = _mm512_mul_ps(g, k->gs);
    __mmask16 fin = 0xffff;
    if (skip)
        fin = _mm512_cmp_ps_mask(_mm512_sub_ps(ge, ge), _mm512_setzero_ps(), _CMP_EQ_OQ);
    if (l2)
        ge = _mm512_fmadd_ps(k->wd, p0, ge);
    __m512 p = _mm512_mul_ps(p0, k->decay);
    __m512 m = _mm512_fmadd_ps(k->omb1, ge, _mm512_mul_ps(m0, k->b1));
    __m512 v = _mm512_fmadd_ps(_mm512_mul_ps(k->omb2, ge), ge, _mm512_mul_ps(v0, k->b2));
    __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), k->bc2s), k->eps);
    p = _mm512_fmadd_ps(k->nss, _mm512_div_ps(m, den), p);
    *pp = _mm512_mask_blend_ps(fin, p0, p);
    *pm = _mm512_mask_blend_ps(fin, m0, m);
    *pv = _mm512_mask_blend_ps(fin, v0, v);
}

static SG_AVX512 void step_avx512(const adam_coef *c, float *p, const float *g, float *m, float *v,
                                  uint16_t *pb, size_t n)
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

static inline SG_AVX512 void avx512_rollback_vec(const avx512_coef *k, int l2, int skip, __m512 *pp,
                                                 __m512 g, __m512 *pm, __m512 *pv)
{
    __m512 p1 = *pp, m1 = *pm, v1 = *pv;
    __m512 ge = _mm512_mul_ps(g, k->gs);
    __mmask16 fin = 0xffff;
    if (skip)
        fin = _mm512_cmp_ps_mask(_mm512_sub_ps(ge, ge), _mm512_setzero_ps(), _CMP_EQ_OQ);
    __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v1), k->bc2s), k->eps);
    __m512 p = _mm512_fnmadd_ps(k->nss, _mm512_div_ps(m1, den), p1);
    p = _mm512_div_ps(p, k->decay);
    if (l2)
        ge = _mm512_fmadd_ps(k->wd, p, ge);
    __m512 m = _mm512_div_ps(_mm512_fnmadd_ps(k->omb1, ge, m1), k->b1);
    __m512 v = _mm512_div_ps(_mm512_fnmadd_ps(_mm512_mul_ps(k->omb2, ge), ge, v1), k->b2);
    v = _mm512_max_ps(v, _mm512_setzero_ps());
    *pp = _mm512_mask_blend_ps(fin, p1, p);
    *pm = _mm512_mask_blend_ps(fin, m1, m);
    *pv = _mm512_mask_blend_ps(fin, v1, v);
}

static SG_AVX512 void rollback_avx512(const adam_coef *c, float *p, const float *g, float *m,
                                      float *v, size_t n)
{
    const avx512_coef k = avx512_coef_make(c);
    size_t i = 0;
    for (; i < n; i += 16) {
        prefetch_streams(p, g, m, v, i);
        __mmask16 k16 = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
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
        .gs = vdupq_n_f32(c->gs),
        .wd = vdupq_n_f32(c->wd),
        .decay = vdupq_n_f32(c->decay),
        .b1 = vdupq_n_f32(c->b1),
        .omb1 = vdupq_n_f32(c->omb1),
        .b2 = vdupq_n_f32(c->b2),
        .omb2 = vdupq_n_f32(c->omb2),
        .bc2s = vdupq_n_f32(c->bc2s),
        .nss = vdupq_n_f32(c->nss),
        .eps = vdupq_n_f32(c->eps),
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

static void rollback_neon(const adam_coef *c, float *p, const float *g, float *m, float *v,
                          size_t n)
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

int sg_adam_isa_supported(sg_adam_isa isa)
{
    switch (isa) {
    case SG_ADAM_ISA_SCALAR: return 1;
#if SG_ADAM_X86
    case SG_ADAM_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SG_ADAM_ISA_AVX512: __builtin_cpu_init(); return __builtin_cpu_supports("avx512f");
#endif
#if SG_ADAM_NEON
    case SG_ADAM_ISA_NEON: return 1; // Advanced SIMD is part of every AArch64 CPU
#endif
    default: return 0;
    }
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
