/* test_gemm.c - sg_gemm (codelets/cpu/gemm.h) against a reference written
 * here: a double-precision triple loop over the operands rounded to bf16
 * by common/dtype.h's scalar sg_f32_to_bf16 (not the engine's vector
 * rounding). Every shape is checked in all four transpositions, with
 * sizes that are and are not multiples of the tiles (1, 15, 16, 17, 31,
 * 33, 100), row strides wider than the rows, alpha and beta; then that
 * beta 0 never reads C, that splitting the rows of A leaves every row's
 * bits unchanged (AMX), and that fp32 products (the default, and bf16 on a
 * machine without AMX) are OpenBLAS's sgemm exactly.
 *
 * The bound: fp32 sums of K exact products (a product of two bf16 values
 * is exact in fp32) are within K * 2^-24 * sum |a b| of the exact sum,
 * plus the final alpha / beta rounding; the check uses 4x that, and a
 * wrong rounding of the operands (truncation instead of round to nearest,
 * or fp32 operands) breaks it by far: the test asserts so on one case. */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/gemm.h"
#include "common/dtype.h"
#include "tests/tap.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float uniform(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static double bf16_value(float x)
{
    uint32_t u = (uint32_t)sg_f32_to_bf16(x) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double exact(float x)
{
    return x;
}

static double truncated(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u &= 0xffff0000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

typedef struct shape {
    int ta, tb;
    size_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
} shape;

static float *random_array(size_t n)
{
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++)
        a[i] = uniform();
    return a;
}

static double op_at(const float *X, size_t ld, int trans, size_t r, size_t c,
                    double (*round)(float))
{
    return round(trans ? X[c * ld + r] : X[r * ld + c]);
}

/* the worst |got - ref| / bound over C; 1 means at the bound */
static double worst_error(const shape *s, const float *A, const float *B, const float *C0,
                          const float *C, double (*round)(float))
{
    double worst = 0.0;
    for (size_t m = 0; m < s->M; m++)
        for (size_t n = 0; n < s->N; n++) {
            double sum = 0.0, mag = 0.0;
            for (size_t k = 0; k < s->K; k++) {
                double p =
                    op_at(A, s->lda, s->ta, m, k, round) * op_at(B, s->ldb, s->tb, k, n, round);
                sum += p;
                mag += fabs(p);
            }
            double c0 = s->beta != 0.0f ? C0[m * s->ldc + n] : 0.0;
            double ref = s->alpha * sum + s->beta * c0;
            double bound = 4.0 * ((double)s->K * 0x1p-24 * fabs(s->alpha) * mag +
                                  0x1p-24 * (fabs(ref) + fabs(s->beta * c0))) +
                           1e-30;
            double e = fabs(C[m * s->ldc + n] - ref) / bound;
            if (!(e <= worst)) /* NaN counts as the worst */
                worst = isnan(e) ? INFINITY : e;
        }
    return worst;
}

/* C of the shape from sg_gemm, starting from C0; returns it (malloc'd) */
static float *run(const shape *s, const float *A, const float *B, const float *C0)
{
    float *C = malloc(s->M * s->ldc * sizeof *C);
    memcpy(C, C0, s->M * s->ldc * sizeof *C);
    sg_gemm(s->ta, s->tb, s->M, s->N, s->K, s->alpha, A, s->lda, B, s->ldb, s->beta, C, s->ldc);
    return C;
}

static shape make(int ta, int tb, size_t M, size_t N, size_t K, size_t pad, float alpha, float beta)
{
    shape s = {ta, tb, M, N, K, (ta ? M : K) + pad, (tb ? K : N) + pad, N + pad, alpha, beta};
    return s;
}

/* every value finite: a bit-for-bit comparison of two NaN arrays proves nothing */
static int all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

static size_t a_elems(const shape *s)
{
    return (s->ta ? s->K : s->M) * s->lda;
}

static size_t b_elems(const shape *s)
{
    return (s->tb ? s->N : s->K) * s->ldb;
}

int main(void)
{
    int amx = sg_gemm_amx_usable();
    char what[200];
    sg_gemm_describe(what, sizeof what);
    tap_diag("%s", what);
    tap_plan(9);

    static const size_t sizes[][3] = {{1, 1, 1},     {16, 16, 32},   {15, 17, 31}, {33, 31, 33},
                                      {100, 48, 70}, {64, 100, 256}, {17, 1, 100}, {1, 33, 65}};
    const size_t nsizes = sizeof sizes / sizeof sizes[0];
    sg_gemm_set_bf16(1);

    /* 1-4: each transposition, every size, with and without padding, alpha, beta */
    for (int t = 0; t < 4; t++) {
        if (!amx) {
            tap_skip(1, "no AMX-BF16 here (or SG_CPU_GEMM=sgemm): bf16 products stay fp32");
            continue;
        }
        double worst = 0.0;
        for (size_t i = 0; i < nsizes; i++)
            for (int v = 0; v < 2; v++) {
                shape s = make(t >> 1, t & 1, sizes[i][0], sizes[i][1], sizes[i][2], v * 5,
                               v ? 0.37f : 1.0f, v ? 1.0f : 0.0f);
                float *A = random_array(a_elems(&s)), *B = random_array(b_elems(&s));
                float *C0 = random_array(s.M * s.ldc);
                float *C = run(&s, A, B, C0);
                double e = worst_error(&s, A, B, C0, C, bf16_value);
                worst = e > worst ? e : worst;
                /* padding between rows of C is left alone */
                for (size_t m = 0; m < s.M; m++)
                    for (size_t n = s.N; n < s.ldc; n++)
                        if (C[m * s.ldc + n] != C0[m * s.ldc + n])
                            worst = INFINITY;
                free(A), free(B), free(C0), free(C);
            }
        ok(worst <= 1.0,
           "bf16 products, op(A)%s op(B)%s: within the fp32-sum bound of the "
           "bf16-rounded reference (worst %.3g of it)",
           t >> 1 ? "^T" : "", t & 1 ? "^T" : "", worst);
    }

    /* 5: the check has teeth: truncated (not rounded) operands miss the bound */
    if (amx) {
        shape s = make(0, 1, 64, 64, 256, 0, 1.0f, 0.0f);
        float *A = random_array(a_elems(&s)), *B = random_array(b_elems(&s));
        float *C0 = calloc(s.M * s.ldc, sizeof *C0);
        float *C = run(&s, A, B, C0);
        double right = worst_error(&s, A, B, C0, C, bf16_value);
        double wrong = worst_error(&s, A, B, C0, C, truncated);
        ok(right <= 1.0 && wrong > 10.0,
           "the reference tells round-to-nearest from truncation (%.3g vs %.3g of the bound)",
           right, wrong);
        free(A), free(B), free(C0), free(C);
    } else {
        tap_skip(1, "no AMX-BF16 here");
    }

    /* 6: beta 0 never reads C: NaN in C does not reach the result */
    {
        shape s = make(1, 0, 40, 40, 40, 0, 1.0f, 0.0f);
        float *A = random_array(a_elems(&s)), *B = random_array(b_elems(&s));
        float *C0 = malloc(s.M * s.ldc * sizeof *C0);
        for (size_t i = 0; i < s.M * s.ldc; i++)
            C0[i] = NAN;
        float *C = run(&s, A, B, C0);
        double e = worst_error(&s, A, B, C0, C, amx ? bf16_value : exact);
        ok(e <= 1.0, "beta 0 ignores a C full of NaN (worst %.3g of the bound)", e);
        free(A), free(B), free(C0), free(C);
    }

    /* 7: rows computed in pieces (batch tiles) have the bits of the whole
     * (an AMX promise; OpenBLAS picks its kernels by size) */
    if (!amx) {
        tap_skip(1, "no AMX-BF16 here");
    } else {
        shape s = make(0, 1, 96, 70, 130, 0, 1.0f, 0.0f);
        float *A = random_array(a_elems(&s)), *B = random_array(b_elems(&s));
        float *C0 = calloc(s.M * s.ldc, sizeof *C0);
        float *whole = run(&s, A, B, C0);
        float *parts = calloc(s.M * s.ldc, sizeof *parts);
        static const size_t cuts[] = {0, 7, 40, 41, 96};
        for (size_t i = 0; i + 1 < sizeof cuts / sizeof cuts[0]; i++)
            sg_gemm(0, 1, cuts[i + 1] - cuts[i], s.N, s.K, 1.0f, A + cuts[i] * s.lda, s.lda, B,
                    s.ldb, 0.0f, parts + cuts[i] * s.ldc, s.ldc);
        ok(all_finite(whole, s.M * s.ldc) && memcmp(whole, parts, s.M * s.ldc * sizeof *whole) == 0,
           "rows 0-6, 7-39, 40, 41-95 computed apart: the same bits as all 96 at once (finite)");
        free(A), free(B), free(C0), free(whole), free(parts);
    }

    /* 8-9: fp32 products are OpenBLAS's sgemm, bit for bit */
    for (int on = 0; on < 2; on++) {
        sg_gemm_set_bf16(on);
        shape s = make(0, 1, 50, 60, 70, 3, 0.5f, 1.0f);
        float *A = random_array(a_elems(&s)), *B = random_array(b_elems(&s));
        float *C0 = random_array(s.M * s.ldc);
        float *C = run(&s, A, B, C0);
        float *R = malloc(s.M * s.ldc * sizeof *R);
        memcpy(R, C0, s.M * s.ldc * sizeof *R);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)s.M, (int)s.N, (int)s.K, s.alpha,
                    A, (int)s.lda, B, (int)s.ldb, s.beta, R, (int)s.ldc);
        int same = all_finite(R, s.M * s.ldc) && memcmp(C, R, s.M * s.ldc * sizeof *C) == 0;
        if (on && amx)
            ok(all_finite(C, s.M * s.ldc) && !same,
               "bf16 on AMX differs from the fp32 sgemm (the operands are rounded; finite)");
        else
            ok(same, "%s: OpenBLAS's sgemm bit for bit", on ? "bf16 without AMX" : "fp32");
        free(A), free(B), free(C0), free(C), free(R);
    }
    return tap_done();
}
