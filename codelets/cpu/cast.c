/* cast.c - fp32 <-> bfloat16 and fp32 <-> IEEE binary16 (see ops.h).
 *
 * Scalar, bit-level and exact for every input: round to nearest, ties to
 * even; overflow to infinity; binary16 subnormals; NaNs stay NaNs (made
 * quiet, sign and top payload bits kept).
 */
#include "codelets/cpu/ops.h"

#include <string.h>

#include "codelets/cpu/simd.h"

static inline uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* fp32 -> bf16 is sg_f32_to_bf16, inline in common/dtype.h. */

float sg_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* binary16: 5 exponent bits (bias 15), 10 mantissa bits; max 65504. */
uint16_t sg_f32_to_f16(float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) // NaN
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) // >= 65520 (halfway from 65504 to 2^16) and Inf
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {                   // >= 2^-14: a normal binary16
        uint32_t h = (a - 0x38000000u) >> 13; // rebias exponent 127 -> 15, keep 10 bits
        uint32_t rem = a & 0x1fffu;           // the 13 dropped bits
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++; // a mantissa carry moves to the exponent, still exact
        return (uint16_t)(sign | h);
    }
    /* Subnormal (or zero) binary16: units of 2^-24. With e the fp32 biased
     * exponent and m the mantissa with its leading 1, x = m * 2^(e - 150),
     * i.e. m >> (126 - e) units. Below 2^-25 everything rounds to zero. */
    uint32_t e = a >> 23;
    if (e < 102)
        return sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; // 14 .. 24
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u)))
        h++; // 0x3ff + 1 = 0x400 is the smallest normal: correct encoding
    return (uint16_t)(sign | h);
}

float sg_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) // Inf, NaN (payload kept)
        return bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        if (m == 0)
            return bits_f32(sign);
        /* subnormal m * 2^-24: normalise, one exponent step per shift */
        uint32_t fe = 113; // fp32 biased exponent of 2^-14
        while (!(m & 0x400u)) {
            m <<= 1;
            fe--;
        }
        return bits_f32(sign | (fe << 23) | ((m & 0x3ffu) << 13));
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

#if SG_X86_AVX512
/* 16 lanes of sg_f32_to_bf16: round to nearest even on the bits, NaN made
 * quiet instead of rounded. Every CPU task of a bf16 run loads and stores its
 * buffers through these two (codelets/starpu/args.c). One core, 32M values,
 * Intel VM: to bf16 4.4-6.0 GB/s scalar, 10.4-11.0 here; to fp32 6.2-8.3
 * scalar, 8.8-9.7 here (bytes read and written). */
static SG_AVX512F void f32_to_bf16_avx512(uint16_t *out, const float *in, size_t n)
{
    size_t i = 0;
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512i r = sg_avx512_bf16_bits(_mm512_maskz_loadu_ps(k, in + i));
        _mm512_mask_cvtepi32_storeu_epi16(out + i, k, r);
    }
}

static SG_AVX512F void bf16_to_f32_avx512(float *out, const uint16_t *in, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) { // whole vectors: masked 16-bit loads need AVX-512BW
        __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(in + i)));
        _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(u, 16)));
    }
    for (; i < n; i++)
        out[i] = sg_bf16_to_f32(in[i]);
}

/* 16 lanes of sg_f32_to_f16 and sg_f16_to_f32 with the conversion
 * instructions: vcvtps2ph rounding to nearest even gives sg_f32_to_f16's
 * bits, NaNs included (quiet bit set, the top payload bits kept); vcvtph2ps
 * is exact but quiets a signalling NaN, so a vector holding a NaN is
 * converted a value at a time, keeping its payload as sg_f16_to_f32 does.
 * The tails go a value at a time. One core, 32M values, AMD EPYC VM: to
 * fp16 0.9-1.0 GB/s a value at a time, 20.7-23.5 here; to fp32 2.9-3.0 and
 * 25.0-27.0 (bytes read and written). */
static SG_AVX512F void f32_to_f16_avx512(uint16_t *out, const float *in, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h =
            _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_si256((__m256i *)(out + i), h);
    }
    for (; i < n; i++)
        out[i] = sg_f32_to_f16(in[i]);
}

static SG_AVX512F void f16_to_f32_avx512(float *out, const uint16_t *in, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(in + i)));
        if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q)) {
            for (size_t k = i; k < i + 16; k++)
                out[k] = sg_f16_to_f32(in[k]);
            continue;
        }
        _mm512_storeu_ps(out + i, x);
    }
    for (; i < n; i++)
        out[i] = sg_f16_to_f32(in[i]);
}
#endif

void sg_cast_f32_to_bf16(uint16_t *restrict out, const float *restrict in, size_t n)
{
#if SG_X86_AVX512
    if (sg_have_avx512f()) {
        f32_to_bf16_avx512(out, in, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        out[i] = sg_f32_to_bf16(in[i]);
}

void sg_cast_bf16_to_f32(float *restrict out, const uint16_t *restrict in, size_t n)
{
#if SG_X86_AVX512
    if (sg_have_avx512f()) {
        bf16_to_f32_avx512(out, in, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        out[i] = sg_bf16_to_f32(in[i]);
}

void sg_cast_f32_to_f16(uint16_t *restrict out, const float *restrict in, size_t n)
{
#if SG_X86_AVX512
    if (sg_have_avx512f()) {
        f32_to_f16_avx512(out, in, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        out[i] = sg_f32_to_f16(in[i]);
}

void sg_cast_f16_to_f32(float *restrict out, const uint16_t *restrict in, size_t n)
{
#if SG_X86_AVX512
    if (sg_have_avx512f()) {
        f16_to_f32_avx512(out, in, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        out[i] = sg_f16_to_f32(in[i]);
}
