/* simd.h - SG_SIMD_CLONES: compile an elementwise kernel for the vector
 * units the CPU has.
 *
 * The build targets the baseline x86-64 (SSE2) so that one binary runs on
 * any x86-64 machine. A function marked SG_SIMD_CLONES is compiled three
 * times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and the baseline,
 * and the loader picks the one this CPU runs (GCC's target_clones, an
 * ifunc). Mark the plain loops over activations (norms, rotations, gating,
 * additions) whose time a profile shows; the BLAS products and vexp.c have
 * their own dispatch. Within a clone the compiler may fuse a * b + c into
 * one FMA, so results can differ in the last bit between machines, never
 * between runs, workers or schedulers on one machine. */
#ifndef SG_CODELETS_CPU_SIMD_H
#define SG_CODELETS_CPU_SIMD_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define SG_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SG_SIMD_CLONES
#endif

/* SG_X86_AVX512: kernels with an AVX-512F variant (intrinsics under
 * __attribute__((target("avx512f")))) pick it at run time with
 * sg_have_avx512f(), probed once per process. */
#if defined(__x86_64__) && defined(__GNUC__)
#define SG_X86_AVX512 1
#include <immintrin.h>
#define SG_AVX512F __attribute__((target("avx512f")))

static inline int sg_have_avx512f(void)
{
    static int known = -1; /* CPU features never change while the process runs */
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") ? 1 : 0;
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* 16 lanes of sg_f32_to_bf16 (common/dtype.h), each in the low 16 bits of
 * its 32-bit lane: round to nearest even on the bits, a NaN made quiet
 * instead of rounded (used by the bf16 casts and CPU Adam's bf16 copy). */
static inline SG_AVX512F __m512i sg_avx512_bf16_bits(__m512 x)
{
    __m512i u = _mm512_castps_si512(x);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i bias =
        _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
}
#else
#define SG_X86_AVX512 0
#endif

#endif
