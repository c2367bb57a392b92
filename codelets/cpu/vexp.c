/* vexp.c - see vexp.h. The AVX-512F variant is compiled with
 * __attribute__((target)) and chosen once per process from the CPU's
 * features, as adam.c does. */
#include "codelets/cpu/vexp.h"

#include <math.h>

#include "codelets/cpu/simd.h"

#define SG_VEXP_X86 SG_X86_AVX512

static void vexp_scalar(float *y, const float *x, size_t n, float shift)
{
    for (size_t i = 0; i < n; i++)
        y[i] = expf(x[i] - shift);
}

static float vmax_scalar(const float *x, size_t n, float m)
{
    for (size_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static float vexp_sum_scalar(float *y, const float *x, size_t n, float shift)
{
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - shift);
        sum += y[i];
    }
    return sum;
}

static void vsigmoid_scalar(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = 1.0f / (1.0f + expf(-x[i]));
}

#if SG_VEXP_X86
#define SG_AVX512 SG_AVX512F

/* e^x for 16 lanes (see vexp.h for the method) */
static inline SG_AVX512 __m512 exp16(__m512 x)
{
    /* max/min return their second operand when one is NaN: NaN passes */
    x = _mm512_max_ps(_mm512_set1_ps(-150.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(100.0f), x);
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(k, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, k);
}

static SG_AVX512 void vexp_avx512(float *y, const float *x, size_t n, float shift)
{
    const __m512 s = _mm512_set1_ps(shift);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), s)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_sub_ps(v, s)));
    }
}

static SG_AVX512 float vmax_avx512(const float *x, size_t n, float init)
{
    __m512 acc = _mm512_set1_ps(init);
    size_t i = 0;
    /* max_ps(x, acc) is acc where x is NaN: NaN is passed over */
    for (; i + 16 <= n; i += 16)
        acc = _mm512_max_ps(_mm512_loadu_ps(x + i), acc);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        acc = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i), acc);
    }
    return _mm512_reduce_max_ps(acc);
}

static SG_AVX512 float vexp_sum_avx512(float *y, const float *x, size_t n, float shift)
{
    const __m512 s = _mm512_set1_ps(shift);
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
        _mm512_storeu_ps(y + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s));
        _mm512_mask_storeu_ps(y + i, m, e);
        acc = _mm512_mask_add_ps(acc, m, acc, e);
    }
    return _mm512_reduce_add_ps(acc);
}

static inline SG_AVX512 __m512 sigmoid16(__m512 v)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), v));
    return _mm512_div_ps(one, _mm512_add_ps(one, e));
}

static SG_AVX512 void vsigmoid_avx512(float *y, const float *x, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, sigmoid16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, sigmoid16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

#endif

void sg_vexp(float *y, const float *x, size_t n, float shift)
{
#if SG_VEXP_X86
    if (sg_have_avx512f()) {
        vexp_avx512(y, x, n, shift);
        return;
    }
#endif
    vexp_scalar(y, x, n, shift);
}

float sg_vmax(const float *x, size_t n, float init)
{
#if SG_VEXP_X86
    if (sg_have_avx512f())
        return vmax_avx512(x, n, init);
#endif
    return vmax_scalar(x, n, init);
}

float sg_vexp_sum(float *y, const float *x, size_t n, float shift)
{
#if SG_VEXP_X86
    if (sg_have_avx512f())
        return vexp_sum_avx512(y, x, n, shift);
#endif
    return vexp_sum_scalar(y, x, n, shift);
}

void sg_vsigmoid(float *y, const float *x, size_t n)
{
#if SG_VEXP_X86
    if (sg_have_avx512f()) {
        vsigmoid_avx512(y, x, n);
        return;
    }
#endif
    vsigmoid_scalar(y, x, n);
}

const char *sg_vexp_isa(void)
{
#if SG_VEXP_X86
    if (sg_have_avx512f())
        return "avx512f";
#endif
    return "scalar";
}
