/* gemm.c - the CPU's matrix products (gemm.h): OpenBLAS's sgemm, or bf16
 * operands on Intel AMX tiles with fp32 sums.
 *
 * The amx engine packs op(A) and op(B) into tiles of bf16, zero-padded to
 * multiples of 32 in M, N and K:
 *   A tile (16 rows of M, 32 of K): word (i, kp) holds a(i, 2kp), a(i, 2kp+1);
 *   B tile (16 pairs of K, 16 of N): word (kp, j) holds b(2kp, j), b(2kp+1, j)
 * (the "VNNI" layout TDPBF16PS reads), each tile 1 KiB, 16 rows of 64 bytes.
 * It walks C in blocks of 32 x 32 (four accumulator tiles, two A and two
 * B tiles: the eight tile registers) and sums over K in order. B is packed
 * in column chunks whose tiles fit PACK_B_BYTES; A a panel of 32 rows at a
 * time. Packing reads rows along whichever dimension is contiguous in
 * memory and turns the result with a 16 x 16 word transpose when the tile
 * wants the other one. */
#define _GNU_SOURCE
#include "codelets/cpu/gemm.h"

#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __thread int thread_bf16;

int sg_gemm_set_bf16(int on)
{
    int prev = thread_bf16;
    thread_bf16 = on != 0;
    return prev;
}

static void gemm_sgemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                       const float *A, size_t lda, const float *B, size_t ldb, float beta, float *C,
                       size_t ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda, B,
                (int)ldb, beta, C, (int)ldc);
}

/* ---- SG_CPU_GEMM and the probe ------------------------------------------- */

enum { ENV_AUTO, ENV_SGEMM, ENV_AMX, ENV_BAD };

static int env_choice(void)
{
    const char *e = getenv("SG_CPU_GEMM");
    if (!e || !*e || strcmp(e, "auto") == 0)
        return ENV_AUTO;
    if (strcmp(e, "sgemm") == 0)
        return ENV_SGEMM;
    if (strcmp(e, "amx") == 0)
        return ENV_AMX;
    return ENV_BAD;
}

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 11)
#define SG_GEMM_AMX 1
#else
#define SG_GEMM_AMX 0
#endif

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int amx_hw;      /* the CPU has AMX-TILE and AMX-BF16 */
static int amx_granted; /* the kernel gave this process the tile state */
static int amx_on;      /* bf16 products use it */

#if SG_GEMM_AMX
#include <cpuid.h>
#include <immintrin.h>

#include "codelets/cpu/simd.h" /* sg_avx512_bf16_bits */
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static void probe(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d))
        amx_hw = (d >> 22 & 1) && (d >> 24 & 1) && (b >> 16 & 1) && (b >> 30 & 1);
    if (amx_hw) /* AVX-512 F and BW for the packing, AMX-BF16 and AMX-TILE */
        amx_granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    int env = env_choice();
    amx_on = amx_granted && (env == ENV_AUTO || env == ENV_AMX);
}

#define AMX_TARGET __attribute__((target("avx512f,avx512bw,amx-tile,amx-bf16")))
#define PACK_B_BYTES (8u << 20)

typedef struct __attribute__((aligned(64))) tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* 16 values from p (n <= 16 of them, zeros after), rounded to bf16: the
 * bits in the low half of each 32-bit lane (simd.h's rounding, that of the
 * bf16 casts). */
static inline AMX_TARGET __m512i load_bf16(const float *p, size_t n)
{
    __mmask16 k = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    return sg_avx512_bf16_bits(_mm512_maskz_loadu_ps(k, p));
}

static inline size_t clamp16(size_t avail)
{
    return avail > 16 ? 16 : avail;
}

/* 16 rows of 32 values contiguous along k (src row r at src + r * ld; rows
 * >= nr and values >= nk are zeros): word (r, kp) = values 2kp, 2kp+1. */
static AMX_TARGET void pack_rows_along_k(uint32_t *dst, const float *src, size_t ld, size_t nr,
                                         size_t nk)
{
    for (size_t r = 0; r < 16; r++) {
        __m512i w = _mm512_setzero_si512();
        if (r < nr) {
            const float *s = src + r * ld;
            __m256i lo = _mm512_cvtepi32_epi16(load_bf16(s, clamp16(nk)));
            __m256i hi = _mm512_cvtepi32_epi16(load_bf16(s + 16, nk > 16 ? clamp16(nk - 16) : 0));
            w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        _mm512_store_si512(dst + r * 16, w);
    }
}

/* 32 rows along k of 16 values contiguous along m or n (row k at src + k *
 * ld; rows >= nk and values >= nc are zeros): word (kp, c) = rows 2kp and
 * 2kp+1 of column c. */
static AMX_TARGET void pack_pairs_along_k(uint32_t *dst, const float *src, size_t ld, size_t nk,
                                          size_t nc)
{
    for (size_t kp = 0; kp < 16; kp++) {
        size_t k = 2 * kp;
        __m512i even = k < nk ? load_bf16(src + k * ld, nc) : _mm512_setzero_si512();
        __m512i odd = k + 1 < nk ? load_bf16(src + (k + 1) * ld, nc) : _mm512_setzero_si512();
        _mm512_store_si512(dst + kp * 16, _mm512_or_si512(even, _mm512_slli_epi32(odd, 16)));
    }
}

/* t (16 x 16 words) transposed in place: pairs of rows interleaved by
 * words, then by double words, then 128-bit lanes gathered twice. */
static AMX_TARGET void transpose16(uint32_t *t)
{
    __m512i r[16], u[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_load_si512(t + 16 * i);
    for (int g = 0; g < 16; g += 4) { /* u[g + j] lane L: column 4L + j of rows g..g+3 */
        __m512i a = _mm512_unpacklo_epi32(r[g], r[g + 1]),
                b = _mm512_unpackhi_epi32(r[g], r[g + 1]);
        __m512i c = _mm512_unpacklo_epi32(r[g + 2], r[g + 3]);
        __m512i d = _mm512_unpackhi_epi32(r[g + 2], r[g + 3]);
        u[g] = _mm512_unpacklo_epi64(a, c);
        u[g + 1] = _mm512_unpackhi_epi64(a, c);
        u[g + 2] = _mm512_unpacklo_epi64(b, d);
        u[g + 3] = _mm512_unpackhi_epi64(b, d);
    }
    for (int j = 0; j < 4; j++) { /* row 4L + j of the result: lane L of u[j], u[4+j], ... */
        __m512i v = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);
        __m512i w = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
        __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
        __m512i w2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
        _mm512_store_si512(t + 16 * j, _mm512_shuffle_i32x4(v, v2, 0x88));
        _mm512_store_si512(t + 16 * (4 + j), _mm512_shuffle_i32x4(w, w2, 0x88));
        _mm512_store_si512(t + 16 * (8 + j), _mm512_shuffle_i32x4(v, v2, 0xdd));
        _mm512_store_si512(t + 16 * (12 + j), _mm512_shuffle_i32x4(w, w2, 0xdd));
    }
}

/* One tile of op(X), rows r0.. (of M for A, of N for B) and k0.. of K:
 * along_k when X stores k contiguously (A untransposed, B transposed);
 * a_layout for an A tile (word (r, kp)), else a B tile (word (kp, r)). */
static AMX_TARGET void pack_tile(uint32_t *dst, int along_k, int a_layout, const float *X,
                                 size_t ld, size_t R, size_t K, size_t r0, size_t k0)
{
    size_t nr = r0 < R ? R - r0 : 0, nk = k0 < K ? K - k0 : 0;
    if (!nr || !nk) {
        memset(dst, 0, 1024);
        return;
    }
    if (along_k) /* x(r, k) = X[r ld + k]: the A layout */
        pack_rows_along_k(dst, X + r0 * ld + k0, ld, clamp16(nr), nk);
    else /* x(r, k) = X[k ld + r]: the B layout */
        pack_pairs_along_k(dst, X + k0 * ld + r0, ld, nk, clamp16(nr));
    if (along_k != a_layout)
        transpose16(dst);
}

/* C block (rows m0.. , columns n0.., at most 32 x 32) from the fp32 sums. */
static AMX_TARGET void store_block(float *C, size_t ldc, size_t M, size_t N, size_t m0, size_t n0,
                                   const float *acc, float alpha, float beta)
{
    size_t nm = M - m0 < 32 ? M - m0 : 32, nn = N - n0 < 32 ? N - n0 : 32;
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (size_t r = 0; r < nm; r++)
        for (size_t c = 0; c < nn; c += 16) {
            size_t w = nn - c < 16 ? nn - c : 16;
            __mmask16 k = (__mmask16)((1u << w) - 1);
            float *dst = C + (m0 + r) * ldc + n0 + c;
            __m512 v = _mm512_mul_ps(va, _mm512_loadu_ps(acc + r * 32 + c));
            if (beta != 0.0f)
                v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k, dst), v);
            _mm512_mask_storeu_ps(dst, k, v);
        }
}

static AMX_TARGET int gemm_amx(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                               const float *A, size_t lda, const float *B, size_t ldb, float beta,
                               float *C, size_t ldc)
{
    const size_t KT = (K + 31) / 32;                   /* 32-wide blocks of K */
    const size_t NT = (N + 31) / 32 * 2;               /* 16-wide tiles of N, even */
    size_t chunk = PACK_B_BYTES / (KT * 1024) / 2 * 2; /* B tiles per chunk, even */
    if (chunk < 2)
        chunk = 2;
    if (chunk > NT)
        chunk = NT;
    uint32_t *bp = aligned_alloc(64, chunk * KT * 1024);
    uint32_t *ap = aligned_alloc(64, 2 * KT * 1024);
    float *acc = aligned_alloc(64, 32 * 32 * sizeof(float));
    if (!bp || !ap || !acc) {
        free(bp);
        free(ap);
        free(acc);
        return -1;
    }
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    for (size_t nt0 = 0; nt0 < NT; nt0 += chunk) {
        size_t nts = NT - nt0 < chunk ? NT - nt0 : chunk;
        for (size_t t = 0; t < nts; t++)
            for (size_t kt = 0; kt < KT; kt++)
                pack_tile(bp + (t * KT + kt) * 256, trans_b, 0, B, ldb, N, K, (nt0 + t) * 16,
                          kt * 32);
        for (size_t m0 = 0; m0 < M; m0 += 32) {
            for (size_t h = 0; h < 2; h++)
                for (size_t kt = 0; kt < KT; kt++)
                    pack_tile(ap + (h * KT + kt) * 256, !trans_a, 1, A, lda, M, K, m0 + h * 16,
                              kt * 32);
            for (size_t t = 0; t < nts; t += 2) {
                const uint32_t *b0 = bp + t * KT * 256, *b1 = bp + (t + 1) * KT * 256;
                const uint32_t *a0 = ap, *a1 = ap + KT * 256;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (size_t kt = 0; kt < KT; kt++) {
                    _tile_loadd(4, a0 + kt * 256, 64);
                    _tile_loadd(5, a1 + kt * 256, 64);
                    _tile_loadd(6, b0 + kt * 256, 64);
                    _tile_loadd(7, b1 + kt * 256, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                _tile_stored(0, acc, 128);
                _tile_stored(1, acc + 16, 128);
                _tile_stored(2, acc + 16 * 32, 128);
                _tile_stored(3, acc + 16 * 32 + 16, 128);
                /* N rounds up to a whole 32-wide block: this one starts below N */
                store_block(C, ldc, M, N, m0, (nt0 + t) * 16, acc, alpha, beta);
            }
        }
    }
    _tile_release();
    free(bp);
    free(ap);
    free(acc);
    return 0;
}
#else
static void probe(void)
{
}
#endif /* SG_GEMM_AMX */

int sg_gemm_amx_usable(void)
{
    pthread_once(&probe_once, probe);
    return amx_on;
}

int sg_gemm_check_env(sg_error *err)
{
    int env = env_choice();
    if (env == ENV_BAD)
        return sg_error_set(err, SG_EINVAL,
                            "SG_CPU_GEMM=%s: unknown engine (expected auto, sgemm or amx)",
                            getenv("SG_CPU_GEMM"));
    if (env == ENV_AMX && !sg_gemm_amx_usable())
        return sg_error_set(err, SG_ENOTSUP, "SG_CPU_GEMM=amx: %s",
                            !amx_hw ? "this CPU (or build) has no AMX-BF16"
                                    : "the kernel refused the AMX tile "
                                      "state (arch_prctl)");
    return 0;
}

void sg_gemm_describe(char *buf, size_t len)
{
    pthread_once(&probe_once, probe);
    int env = env_choice();
    const char *why = amx_on             ? (env == ENV_AMX ? "SG_CPU_GEMM=amx" : "AMX-BF16 found")
                      : env == ENV_SGEMM ? "SG_CPU_GEMM=sgemm"
                      : env == ENV_BAD   ? "SG_CPU_GEMM is invalid"
                      : !amx_hw          ? "no AMX-BF16 on this CPU"
                                         : "the kernel refused the AMX tile state";
    snprintf(buf, len, "CPU products of bf16 runs: %s (%s); fp32 and fp16 runs: sgemm",
             amx_on ? "amx, bf16 operands, fp32 sums" : "sgemm, fp32", why);
}

void sg_gemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha, const float *A,
             size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (M == 0 || N == 0)
        return;
#if SG_GEMM_AMX
    if (thread_bf16 && K > 0 && sg_gemm_amx_usable() &&
        gemm_amx(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0)
        return;
#endif
    gemm_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
