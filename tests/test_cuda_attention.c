/* test_cuda_attention.c - the GPU attention kernels (codelets/cuda/
 * attention.cu) against the CPU ones (codelets/cpu/attention.c).
 *
 * Each case draws random q, k, v and dout (fixed seed), runs
 * sg_cu_attention_forward and _backward, and compares with
 * sg_attention_forward and _backward on the same values:
 * - f32: the CPU reference runs on the same inputs; tolerance 1e-4 of
 *   max|ref| (only the order of fp32 operations differs).
 * - bf16 / f16: the inputs are rounded to the dtype first and the CPU
 *   reference runs in fp32 on the rounded values. The backward reference
 *   is given the GPU's own saved out and lse (rounded to the dtype, as the
 *   training path keeps them), so that it tests the backward alone. The
 *   GPU rounds every output once to the dtype, an error of at most half an
 *   ulp, i.e. 2^-9 (bf16) or 2^-12 (f16) of max|ref|; the tolerance is two
 *   ulps at the scale of max|ref|: 2^-7 of max|ref| for bf16, 2^-10 for f16.
 * The outputs and the backward's work area start as NaN, so a kernel that
 * skips part of an output, accumulates into it, or reads scratch it did
 * not initialise fails.
 *
 * The cuBLAS route (attention_blas.cu) runs the same checks on cases of
 * its own (BLAS_CASES, with small query tiles so that a case spans several
 * tiles), with one more term in the bound: it rounds P (forward, and dV's
 * product) and dS (dQ's and dK's products) to dt before an fp32-accumulated
 * product, an error of at most u |x| per factor (u = 2^-8 for bf16, 2^-11
 * for f16: round to nearest). An output element sum_j x_j y_j thus moves by
 * at most u sum_j |x_j| |y_j| =: u mag, which the test computes in double
 * (mags(), from the saved out and lse); the bound is 2 u mag (a factor 2
 * for the fp32 noise of P and dS themselves) plus the tolerance above.
 * Then the selection: STEPGRAPH_ATTENTION_IMPL picks the route (the same
 * bits as calling it directly), bad values are refused, and the tile size
 * follows the scratch bound.
 *
 * Shapes cover GQA (Hq / Hkv = 2 and 4), MHA, sliding windows (3, 5, 17,
 * 40, and one >= T), T not a multiple of any tile (1, 37, 70, 130, 150),
 * B = 2 and head dims 8, 32, 64, 80, 128 and 256 (each compile-time bound
 * of the kernels: 64, 96, 128, 256). Sizes stay small: under the emulator
 * every thread is a fiber.
 * Without a device (sg_cu_device_count() == 0) the program skips.
 * As codelets/cpu/ops.h asks of every caller, OpenBLAS is pinned to one
 * thread.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "codelets/cpu/blas_core.h"
#include "codelets/cpu/ops.h"
#include "codelets/cuda/cuda_ops.h"
#include "common/error.h"
#include "tests/tap.h"
#include "tests/test_util.h"

#define F32_TOL 1e-4
#define BF16_TOL 0x1p-7 /* two bf16 ulps (2^-8 relative each) of max|ref| */
#define F16_TOL 0x1p-10 /* two f16 ulps (2^-11 relative each) of max|ref| */

typedef struct acase {
    sg_dtype dt;
    size_t B, T, Hq, Hkv, D, W;
    size_t tile; /* cuBLAS route: query rows per tile (0: from the scratch bound) */
} acase;

static const acase CASES[] = {
    {SG_F32, 2, 37, 4, 2, 64, 0, 0},  // GQA 2:1, D = 64
    {SG_F32, 2, 70, 4, 1, 80, 0, 0},  // GQA 4:1 (MQA), D = 80 (bound 96)
    {SG_F32, 2, 37, 2, 2, 8, 3, 0},   // MHA, window 3
    {SG_F32, 2, 70, 4, 2, 128, 3, 0}, // window 3, D = 128
    {SG_F32, 2, 37, 4, 2, 8, 40, 0},  // window >= T: full attention
    {SG_F32, 1, 37, 2, 1, 256, 0, 0}, // D = 256
    {SG_F32, 2, 150, 2, 1, 8, 40, 0}, // window across several tiles
    {SG_F32, 1, 1, 1, 1, 8, 0, 0},    // a single position
    {SG_F32, 2, 130, 8, 2, 32, 0, 0}, // GQA 4:1 with 2 kv heads, 3 query tiles
    {SG_BF16, 2, 70, 4, 2, 64, 0, 0},   {SG_BF16, 2, 37, 4, 1, 128, 3, 0},
    {SG_BF16, 1, 37, 2, 2, 256, 0, 0},  {SG_BF16, 2, 37, 4, 2, 80, 5, 0},
    {SG_BF16, 2, 130, 4, 2, 64, 17, 0}, {SG_F16, 2, 37, 4, 2, 80, 5, 0},
};
#define NCASES (sizeof CASES / sizeof CASES[0])
#define CHECKS_PER_CASE 8

static const acase BLAS_CASES[] = {
    {SG_BF16, 2, 70, 4, 2, 64, 0, 16},   // GQA 2:1, D = 64, 5 tiles
    {SG_BF16, 2, 130, 8, 2, 128, 0, 32}, // GQA 4:1, D = 128
    {SG_BF16, 2, 70, 4, 2, 128, 17, 16}, // a window across tiles
    {SG_BF16, 1, 37, 2, 2, 64, 3, 0},    // MHA, window 3, one tile
    {SG_F16, 2, 37, 4, 1, 64, 5, 16},    // MQA, f16
    {SG_F32, 2, 37, 4, 2, 80, 0, 16},    // fp32 storage: fp32 products
    {SG_BF16, 1, 1, 1, 1, 8, 0, 0},      // a single position
    {SG_BF16, 1, 37, 2, 1, 256, 40, 32}, // D = 256, window >= T
    {SG_F16, 2, 150, 2, 1, 128, 40, 64}, // f16, D = 128, window 40
};
#define NBLAS (sizeof BLAS_CASES / sizeof BLAS_CASES[0])

/* ---- host data in a dtype --------------------------------------------------------- */

static size_t dt_size(sg_dtype dt)
{
    return dt == SG_F32 ? 4 : 2;
}

static float *randn(size_t n)
{
    float *p = xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = rng_normal();
    return p;
}

/* x (n) floats -> a new buffer of n elements of dt (round to nearest even). */
static void *to_dt(const float *x, size_t n, sg_dtype dt)
{
    if (dt == SG_F32) {
        float *p = xmalloc(n * sizeof *p);
        memcpy(p, x, n * sizeof *p);
        return p;
    }
    uint16_t *p = xmalloc(n * sizeof *p);
    if (dt == SG_BF16)
        sg_cast_f32_to_bf16(p, x, n);
    else
        sg_cast_f32_to_f16(p, x, n);
    return p;
}

static void from_dt(float *out, const void *x, size_t n, sg_dtype dt)
{
    if (dt == SG_F32)
        memcpy(out, x, n * sizeof *out);
    else if (dt == SG_BF16)
        sg_cast_bf16_to_f32(out, x, n);
    else
        sg_cast_f16_to_f32(out, x, n);
}

/* x (n) = x rounded to dt. */
static void round_to(float *x, size_t n, sg_dtype dt)
{
    void *t = to_dt(x, n, dt);
    from_dt(x, t, n, dt);
    free(t);
}

/* ---- device buffers ----------------------------------------------------------------- */

static void *dev_alloc(size_t bytes)
{
    void *p = sg_cu_malloc(bytes);
    if (!p) {
        printf("Bail out! sg_cu_malloc(%zu): %s\n", bytes, sg_cu_last_error());
        exit(1);
    }
    return p;
}

/* A device copy of x (n) stored in dt. */
static void *dev_put(const float *x, size_t n, sg_dtype dt)
{
    void *h = to_dt(x, n, dt), *d = dev_alloc(n * dt_size(dt));
    if (sg_cu_to_device(d, h, n * dt_size(dt))) {
        printf("Bail out! sg_cu_to_device: %s\n", sg_cu_last_error());
        exit(1);
    }
    free(h);
    return d;
}

/* Device memory of `bytes` filled with 0xff bytes: NaN in f32, bf16 and f16. */
static void *dev_nan(size_t bytes)
{
    void *h = xmalloc(bytes), *d = dev_alloc(bytes);
    memset(h, 0xff, bytes);
    if (sg_cu_to_device(d, h, bytes)) {
        printf("Bail out! sg_cu_to_device: %s\n", sg_cu_last_error());
        exit(1);
    }
    free(h);
    return d;
}

/* The n elements of dt at device d, as floats. */
static float *dev_get(const void *d, size_t n, sg_dtype dt)
{
    void *h = xmalloc(n * dt_size(dt));
    float *x = xmalloc(n * sizeof *x);
    if (sg_cu_to_host(h, d, n * dt_size(dt))) {
        printf("Bail out! sg_cu_to_host: %s\n", sg_cu_last_error());
        exit(1);
    }
    from_dt(x, h, n, dt);
    free(h);
    return x;
}

/* ---- comparison --------------------------------------------------------------------- */

/* ok if every got[i] is finite and |got - want| <= tol * max(max|want|, 1).
 * The floor 1 is the scale of the inputs: it matters only for outputs that
 * are zero up to rounding (dq, dk when T = 1: P = 1 and dP = Dvec), where
 * max|want| is itself rounding noise. */
static void cmp(const float *got, const float *want, size_t n, double tol, const char *what,
                const char *name)
{
    double err = 0.0, scale = 0.0;
    size_t bad = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            bad++;
        double e = fabs((double)got[i] - want[i]);
        if (e > err) {
            err = e;
            worst = i;
        }
        scale = fmax(scale, fabs(want[i]));
    }
    if (!ok(bad == 0 && err <= tol * fmax(scale, 1.0),
            "%s: %s (max err %.2e = %.2e of max|ref| %.3g)", name, what, err,
            scale > 0 ? err / scale : err, scale)) {
        tap_diag("  %zu non-finite; worst at %zu: got %.9g, expected %.9g (tol %g)", bad, worst,
                 got[worst], want[worst], tol);
    }
}

/* As cmp, with the cuBLAS route's extra term: element i may be off by
 * 2 u mag[i] more (see the top of the file). */
static void cmp_mag(const float *got, const float *want, const double *mag, size_t n, double tol,
                    double u, const char *what, const char *name)
{
    double scale = 0.0, worst_ratio = 0.0;
    size_t bad = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    const double base = tol * fmax(scale, 1.0);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            bad++;
        const double r = fabs((double)got[i] - want[i]) / (base + 2.0 * u * mag[i]);
        if (r > worst_ratio) {
            worst_ratio = r;
            worst = i;
        }
    }
    if (!ok(bad == 0 && worst_ratio <= 1.0, "%s: %s (worst error %.2f of its bound)", name, what,
            worst_ratio)) {
        tap_diag("  %zu non-finite; worst at %zu: got %.9g, expected %.9g (bound %.3g + 2u %.3g)",
                 bad, worst, got[worst], want[worst], base, mag[worst]);
    }
}

/* The magnitudes of the cuBLAS route's rounded products, in double, from
 * q, k, v, dout and the saved out, lse (B, Hq, T): with P_ij = exp(q_i k_j
 * / sqrt(D) - lse_i) on visible keys, dS_ij = P_ij (dout_i v_j - dout_i
 * out_i), s = 1 / sqrt(D):
 *   m_out (B, T, Hq, D) = sum_j P_ij |v_j|        m_dq = s sum_j |dS_ij| |k_j|
 *   m_dv (B, T, Hkv, D) = sum_(i, h of g) P_ij |dout_i|
 *   m_dk (B, T, Hkv, D) = s sum_(i, h of g) |dS_ij| |q_i|          (all zeroed first) */
static void mags(const acase *c, const float *q, const float *k, const float *v, const float *dout,
                 const float *out, const float *lse, double *m_out, double *m_dq, double *m_dk,
                 double *m_dv)
{
    const size_t B = c->B, T = c->T, Hq = c->Hq, Hkv = c->Hkv, D = c->D, G = Hq / Hkv;
    const size_t W = c->W >= T ? 0 : c->W;
    const double s = 1.0 / sqrt((double)D);
    memset(m_out, 0, B * T * Hq * D * sizeof *m_out);
    memset(m_dq, 0, B * T * Hq * D * sizeof *m_dq);
    memset(m_dk, 0, B * T * Hkv * D * sizeof *m_dk);
    memset(m_dv, 0, B * T * Hkv * D * sizeof *m_dv);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++)
            for (size_t i = 0; i < T; i++) {
                const size_t qi = ((b * T + i) * Hq + h) * D;
                double dvec = 0.0;
                for (size_t d = 0; d < D; d++)
                    dvec += (double)dout[qi + d] * out[qi + d];
                for (size_t j = (W && i + 1 > W) ? i + 1 - W : 0; j <= i; j++) {
                    const size_t kj = ((b * T + j) * Hkv + h / G) * D;
                    double sc = 0.0, dp = 0.0;
                    for (size_t d = 0; d < D; d++) {
                        sc += (double)q[qi + d] * k[kj + d];
                        dp += (double)dout[qi + d] * v[kj + d];
                    }
                    const double p = exp(sc * s - lse[(b * Hq + h) * T + i]);
                    const double ds = fabs(p * (dp - dvec)) * s;
                    for (size_t d = 0; d < D; d++) {
                        m_out[qi + d] += p * fabs(v[kj + d]);
                        m_dq[qi + d] += ds * fabs(k[kj + d]);
                        m_dv[kj + d] += p * fabs(dout[qi + d]);
                        m_dk[kj + d] += ds * fabs(q[qi + d]);
                    }
                }
            }
}

/* ---- one case ------------------------------------------------------------------------ */

/* The scratch bound the cuBLAS cases pass (their tile rows are explicit). */
#define TEST_SCRATCH ((size_t)64 << 20)

static int run_fwd(const sg_cu *cu, int blas, const acase *c, void *out, void *lse, const void *q,
                   const void *k, const void *v)
{
    if (blas)
        return sg_cu_attention_blas_forward(cu, c->tile, TEST_SCRATCH, out, lse, q, k, v, c->dt,
                                            c->B, c->T, c->Hq, c->Hkv, c->D, c->W);
    return sg_cu_attention_fp32_forward(cu, out, lse, q, k, v, c->dt, c->B, c->T, c->Hq, c->Hkv,
                                        c->D, c->W);
}

static int run_bwd(const sg_cu *cu, int blas, const acase *c, void *dq, void *dk, void *dv,
                   const void *dout, const void *q, const void *k, const void *v, const void *out,
                   const void *lse, float *work)
{
    int rc;
    if (blas)
        rc = sg_cu_attention_blas_backward(cu, c->tile, TEST_SCRATCH, dq, dk, dv, dout, q, k, v,
                                           out, lse, c->dt, c->B, c->T, c->Hq, c->Hkv, c->D, c->W);
    else
        rc = sg_cu_attention_fp32_backward(cu, dq, dk, dv, dout, q, k, v, out, lse, c->dt, c->B,
                                           c->T, c->Hq, c->Hkv, c->D, c->W, work);
    return rc ? rc : sg_cu_sync(cu);
}

/* Unit roundoff of dt (round to nearest): the cuBLAS route's P and dS. */
static double unit_roundoff(sg_dtype dt)
{
    return dt == SG_BF16 ? 0x1p-8 : dt == SG_F16 ? 0x1p-11 : 0x1p-24;
}

static void run_case(const sg_cu *cu, const acase *c, int blas)
{
    const size_t B = c->B, T = c->T, Hq = c->Hq, Hkv = c->Hkv, D = c->D, W = c->W;
    const sg_dtype dt = c->dt;
    const size_t nq = B * T * Hq * D, nk = B * T * Hkv * D, nl = B * Hq * T;
    const size_t es = dt_size(dt);
    const double tol = dt == SG_F32 ? F32_TOL : dt == SG_BF16 ? BF16_TOL : F16_TOL;
    char name[160];
    snprintf(name, sizeof name, "%s%s B=%zu T=%zu Hq=%zu Hkv=%zu D=%zu W=%zu tile=%zu",
             blas ? "cublas " : "", sg_dtype_name(dt), B, T, Hq, Hkv, D, W, c->tile);

    float *q = randn(nq), *k = randn(nk), *v = randn(nk), *dout = randn(nq);
    round_to(q, nq, dt); // the reference sees exactly what the GPU loads
    round_to(k, nk, dt);
    round_to(v, nk, dt);
    round_to(dout, nq, dt);

    /* forward */
    float *ref_out = xmalloc(nq * sizeof(float)), *ref_lse = xmalloc(nl * sizeof(float));
    if (sg_attention_forward(ref_out, ref_lse, q, k, v, B, T, Hq, Hkv, D, W)) {
        printf("Bail out! CPU attention forward failed\n");
        exit(1);
    }
    void *d_q = dev_put(q, nq, dt), *d_k = dev_put(k, nk, dt), *d_v = dev_put(v, nk, dt);
    void *d_dout = dev_put(dout, nq, dt);
    void *d_out = dev_nan(nq * es), *d_lse = dev_nan(nl * es);
    int rc = run_fwd(cu, blas, c, d_out, d_lse, d_q, d_k, d_v);
    if (!rc)
        rc = sg_cu_sync(cu);
    is_int(rc, 0, "%s: forward returns 0", name);
    float *out = dev_get(d_out, nq, dt), *lse = dev_get(d_lse, nl, dt);
    // the fp32 route rounds only its outputs: no extra term (zero magnitudes)
    double *m_out = calloc(nq, sizeof(double)), *m_dq = calloc(nq, sizeof(double));
    double *m_dk = calloc(nk, sizeof(double)), *m_dv = calloc(nk, sizeof(double));
    if (!m_out || !m_dq || !m_dk || !m_dv) {
        printf("Bail out! out of memory\n");
        exit(1);
    }
    const double u = blas ? unit_roundoff(dt) : 0.0;
    if (blas)
        mags(c, q, k, v, dout, out, lse, m_out, m_dq, m_dk, m_dv);
    cmp_mag(out, ref_out, m_out, nq, tol, u, "out", name);
    cmp(lse, ref_lse, nl, tol, "lse (B, Hq, T)", name);

    /* backward, from the GPU's saved out and lse */
    float *ref_dq = xmalloc(nq * sizeof(float)), *ref_dk = xmalloc(nk * sizeof(float));
    float *ref_dv = xmalloc(nk * sizeof(float));
    if (sg_attention_backward(ref_dq, ref_dk, ref_dv, dout, q, k, v, out, lse, B, T, Hq, Hkv, D,
                              W)) {
        printf("Bail out! CPU attention backward failed\n");
        exit(1);
    }
    size_t wf = sg_cu_attention_backward_work_floats(B, T, Hq, Hkv, D);
    float *d_work = dev_nan(wf * sizeof(float));
    void *d_dq = dev_nan(nq * es), *d_dk = dev_nan(nk * es), *d_dv = dev_nan(nk * es);
    rc = run_bwd(cu, blas, c, d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_out, d_lse, d_work);
    is_int(rc, 0, "%s: backward returns 0", name);
    float *dq = dev_get(d_dq, nq, dt), *dk = dev_get(d_dk, nk, dt), *dv = dev_get(d_dv, nk, dt);
    cmp_mag(dq, ref_dq, m_dq, nq, tol, u, "dq", name);
    cmp_mag(dk, ref_dk, m_dk, nk, tol, u, "dk (sum over the group's query heads)", name);
    cmp_mag(dv, ref_dv, m_dv, nk, tol, u, "dv (sum over the group's query heads)", name);

    /* dk, dv are summed without atomics (the fp32 route; cuBLAS products
     * are deterministic too): a second run gives the same bits */
    rc = run_bwd(cu, blas, c, d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_out, d_lse, d_work);
    float *dk2 = dev_get(d_dk, nk, dt), *dv2 = dev_get(d_dv, nk, dt);
    ok(rc == 0 && !memcmp(dk, dk2, nk * sizeof *dk) && !memcmp(dv, dv2, nk * sizeof *dv),
       "%s: dk, dv are the same on a second run", name);

    void *dev[] = {d_q, d_k, d_v, d_dout, d_out, d_lse, d_work, d_dq, d_dk, d_dv};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        sg_cu_free(dev[i]);
    void *host[] = {q,      k,  v,  dout, ref_out, ref_lse, out,   lse,  ref_dq, ref_dk,
                    ref_dv, dq, dk, dv,   dk2,     dv2,     m_out, m_dq, m_dk,   m_dv};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

/* ---- argument errors ------------------------------------------------------------------ */

#define N_ERROR_CHECKS 7

static void check_errors(const sg_cu *cu)
{
    /* nothing is dereferenced before the sizes are checked: a small valid
     * buffer stands for every tensor */
    void *p = dev_alloc(4096);
    float *w = p;
    is_int(sg_cu_attention_forward(cu, p, p, p, p, p, SG_F32, 1, 4, 3, 2, 8, 0), SG_EINVAL,
           "forward: Hq %% Hkv != 0 is SG_EINVAL");
    is_int(sg_cu_attention_forward(cu, p, p, p, p, p, SG_F32, 1, 4, 2, 2, 0, 0), SG_EINVAL,
           "forward: D = 0 is SG_EINVAL");
    is_int(sg_cu_attention_forward(cu, p, p, p, p, p, SG_F32, 1, 4, 2, 2, 257, 0), SG_EINVAL,
           "forward: D = 257 is SG_EINVAL");
    is_int(sg_cu_attention_forward(cu, p, p, p, p, p, SG_I32, 1, 4, 2, 2, 8, 0), SG_EINVAL,
           "forward: dtype i32 is SG_EINVAL");
    is_int(sg_cu_attention_backward(cu, p, p, p, p, p, p, p, p, p, SG_F32, 1, 4, 2, 0, 8, 0, w),
           SG_EINVAL, "backward: Hkv = 0 is SG_EINVAL");
    is_int(sg_cu_attention_backward(cu, p, p, p, p, p, p, p, p, p, SG_BF16, 1, 4, 2, 1, 8, 0, NULL),
           SG_EINVAL, "backward: no work area is SG_EINVAL");
    is_int(sg_cu_attention_backward_work_floats(2, 5, 4, 2, 8), 2 * 4 * 5 + 2 * 5 * 4 * 8,
           "work floats: Dvec (B, Hq, T) + dq accumulator (B, T, Hq, D)");
    sg_cu_free(p);
}

/* ---- choosing the route ----------------------------------------------------------------- */

#define N_SELECT_CHECKS 23
#define IMPL_ENV "STEPGRAPH_ATTENTION_IMPL"
#define SCRATCH_ENV "STEPGRAPH_ATTENTION_SCRATCH_MB"

static void check_parse(void)
{
    sg_cu_att_impl impl = SG_CU_ATT_CUDNN;
    sg_error err;
    ok(!sg_cu_attention_impl_parse("fp32", "X", &impl, NULL) && impl == SG_CU_ATT_FP32,
       "parse: fp32");
    ok(!sg_cu_attention_impl_parse("cublas", "X", &impl, NULL) && impl == SG_CU_ATT_CUBLAS,
       "parse: cublas");
    ok(!sg_cu_attention_impl_parse("auto", "X", &impl, NULL) && impl == SG_CU_ATT_AUTO &&
           !sg_cu_attention_impl_parse("", "X", &impl, NULL) && impl == SG_CU_ATT_AUTO &&
           !sg_cu_attention_impl_parse(NULL, "X", &impl, NULL) && impl == SG_CU_ATT_AUTO,
       "parse: auto, empty and unset are auto");
    sg_error_clear(&err);
    is_int(sg_cu_attention_impl_parse("cudnn", IMPL_ENV, &impl, &err), SG_EINVAL,
           "parse: cudnn (not built) is SG_EINVAL");
    like(err.msg, IMPL_ENV "=cudnn: cuDNN", "parse: ... and the message names the value");
    sg_error_clear(&err);
    is_int(sg_cu_attention_impl_parse("fast", IMPL_ENV, &impl, &err), SG_EINVAL,
           "parse: fast is SG_EINVAL");
    like(err.msg, IMPL_ENV "=fast: expected fp32, cublas or auto",
         "parse: ... and the message names the value and the choices");

    size_t bytes = 0;
    setenv(IMPL_ENV, "cublas", 1);
    setenv(SCRATCH_ENV, "3", 1);
    ok(!sg_cu_attention_impl_env(&impl, &bytes, NULL) && impl == SG_CU_ATT_CUBLAS &&
           bytes == (size_t)3 << 20,
       "env: " IMPL_ENV "=cublas, " SCRATCH_ENV "=3 is 3 MiB");
    const char *bad[] = {"0", "12x", "-1"};
    int refused = 0;
    for (int i = 0; i < 3; i++) {
        setenv(SCRATCH_ENV, bad[i], 1);
        sg_error_clear(&err);
        refused += sg_cu_attention_impl_env(&impl, &bytes, &err) == SG_EINVAL &&
                   strstr(err.msg, SCRATCH_ENV "=") != NULL;
    }
    is_int(refused, 3, "env: " SCRATCH_ENV " 0, 12x and -1 are refused, naming the variable");
    unsetenv(SCRATCH_ENV);
    ok(!sg_cu_attention_impl_env(&impl, &bytes, NULL) && bytes == (size_t)512 << 20,
       "env: the scratch bound defaults to 512 MiB");
    unsetenv(IMPL_ENV);
    is_str(sg_cu_attention_impl_name(sg_cu_attention_impl_auto(SG_BF16, 4096, 128)), "fp32",
           "auto is fp32 until a GPU session measures (docs/gpu.md)");
}

static void check_tile_rows(void)
{
    /* bf16, B 1, Hq 16, T 4096: forward 6 bytes a score (S fp32, P bf16),
     * 16 x 4096 x 6 = 384 KiB a query row: 512 MiB / 384 KiB = 1365.3,
     * down to a multiple of 16 */
    is_int(sg_cu_attention_blas_tile_rows(0, (size_t)512 << 20, 0, SG_BF16, 1, 4096, 16, 16, 0),
           1360, "tile rows: forward, bf16, 512 MiB: 1360");
    /* backward: 12 bytes a score: 682.7 -> 672 */
    is_int(sg_cu_attention_blas_tile_rows(0, (size_t)512 << 20, 1, SG_BF16, 1, 4096, 16, 16, 0),
           672, "tile rows: backward: 672");
    /* window 128: a tile's rows hold its rows + 127 keys, + 7 (the first
     * key rounded down to 8), rounded up to 8: 48 rows give 184 keys, 48 x
     * 184 x 16 x 6 = 847872 <= 1 MiB; 64 rows give 200, 1228800 > 1 MiB */
    is_int(sg_cu_attention_blas_tile_rows(0, (size_t)1 << 20, 0, SG_BF16, 1, 4096, 16, 16, 128), 48,
           "tile rows: a window of 128 keys bounds the keys of a tile: 48");
    is_int(sg_cu_attention_blas_tile_rows(100, 1, 0, SG_F32, 1, 37, 2, 1, 0), 37,
           "tile rows: an explicit tile is capped at T");
    is_int(sg_cu_attention_blas_tile_rows(0, 1, 0, SG_F32, 1, 4096, 2, 1, 0), 16,
           "tile rows: at least 16 whatever the bound");
}

/* The bits of out and dq of one run through the dispatcher (env as set). */
static int dispatch_bits(const sg_cu *cu, const acase *c, void **dev, void *out_bits, void *dq_bits)
{
    const size_t es = dt_size(c->dt), nq = c->B * c->T * c->Hq * c->D;
    int rc = sg_cu_attention_forward(cu, dev[4], dev[5], dev[0], dev[1], dev[2], c->dt, c->B, c->T,
                                     c->Hq, c->Hkv, c->D, c->W);
    if (!rc)
        rc = sg_cu_attention_backward(cu, dev[6], dev[7], dev[8], dev[3], dev[0], dev[1], dev[2],
                                      dev[4], dev[5], c->dt, c->B, c->T, c->Hq, c->Hkv, c->D, c->W,
                                      dev[9]);
    if (!rc)
        rc = sg_cu_sync(cu);
    if (!rc &&
        (sg_cu_to_host(out_bits, dev[4], nq * es) || sg_cu_to_host(dq_bits, dev[6], nq * es)))
        rc = SG_EIO;
    return rc;
}

static void check_dispatch(const sg_cu *cu)
{
    const acase c = {SG_BF16, 2, 130, 8, 2, 64, 0, 0}; // 1 MiB: 32-row tiles
    const size_t nq = c.B * c.T * c.Hq * c.D, nk = c.B * c.T * c.Hkv * c.D, es = 2;
    float *x = randn(nq), *y = randn(nq);
    void *dev[10];
    dev[0] = dev_put(x, nq, c.dt);     // q
    dev[1] = dev_put(x + 5, nk, c.dt); // k
    dev[2] = dev_put(y + 3, nk, c.dt); // v
    dev[3] = dev_put(y, nq, c.dt);     // dout
    dev[4] = dev_nan(nq * es), dev[5] = dev_nan(c.B * c.Hq * c.T * es);
    dev[6] = dev_nan(nq * es), dev[7] = dev_nan(nk * es), dev[8] = dev_nan(nk * es);
    dev[9] = dev_nan(sg_cu_attention_backward_work_floats(c.B, c.T, c.Hq, c.Hkv, c.D) * 4);
    const size_t bytes = nq * es;
    unsigned char *b_fp32 = xmalloc(bytes), *b_fp32dq = xmalloc(bytes);
    unsigned char *b_blas = xmalloc(bytes), *b_blasdq = xmalloc(bytes);
    unsigned char *b_env = xmalloc(bytes), *b_envdq = xmalloc(bytes);

    setenv(IMPL_ENV, "cublas", 1);
    setenv(SCRATCH_ENV, "1", 1); // 1 MiB: several tiles
    int rc = dispatch_bits(cu, &c, dev, b_env, b_envdq);
    unsetenv(SCRATCH_ENV);
    // the same route called directly, with the tile rows 1 MiB gives
    const size_t rows =
        sg_cu_attention_blas_tile_rows(0, (size_t)1 << 20, 1, c.dt, c.B, c.T, c.Hq, c.Hkv, c.W);
    if (!rc)
        rc = sg_cu_attention_blas_forward(cu, 0, (size_t)1 << 20, dev[4], dev[5], dev[0], dev[1],
                                          dev[2], c.dt, c.B, c.T, c.Hq, c.Hkv, c.D, c.W) ||
             sg_cu_attention_blas_backward(cu, 0, (size_t)1 << 20, dev[6], dev[7], dev[8], dev[3],
                                           dev[0], dev[1], dev[2], dev[4], dev[5], c.dt, c.B, c.T,
                                           c.Hq, c.Hkv, c.D, c.W) ||
             sg_cu_sync(cu) || sg_cu_to_host(b_blas, dev[4], bytes) ||
             sg_cu_to_host(b_blasdq, dev[6], bytes);
    ok(rc == 0 && rows < c.T && !memcmp(b_env, b_blas, bytes) && !memcmp(b_envdq, b_blasdq, bytes),
       "dispatch: " IMPL_ENV "=cublas runs the cuBLAS route (%zu-row tiles: same out, dq bits)",
       rows);
    unsetenv(IMPL_ENV);
    rc = dispatch_bits(cu, &c, dev, b_fp32, b_fp32dq);
    ok(rc == 0 && memcmp(b_fp32, b_blas, bytes) != 0,
       "dispatch: unset is auto, the fp32 route (other out bits than cuBLAS's)");
    setenv(IMPL_ENV, "fp32", 1);
    rc = dispatch_bits(cu, &c, dev, b_env, b_envdq);
    ok(rc == 0 && !memcmp(b_env, b_fp32, bytes), "dispatch: " IMPL_ENV "=fp32 is the fp32 route");
    setenv(IMPL_ENV, "cudnn", 1);
    is_int(sg_cu_attention_forward(cu, dev[4], dev[5], dev[0], dev[1], dev[2], c.dt, c.B, c.T, c.Hq,
                                   c.Hkv, c.D, c.W),
           SG_EINVAL, "dispatch: forward with " IMPL_ENV "=cudnn is SG_EINVAL");
    is_int(sg_cu_attention_backward(cu, dev[6], dev[7], dev[8], dev[3], dev[0], dev[1], dev[2],
                                    dev[4], dev[5], c.dt, c.B, c.T, c.Hq, c.Hkv, c.D, c.W, dev[9]),
           SG_EINVAL, "dispatch: backward likewise");
    unsetenv(IMPL_ENV);
    is_int(sg_cu_attention_blas_forward(cu, 0, 1 << 20, dev[4], dev[5], dev[0], dev[1], dev[2],
                                        c.dt, 1, 4, 3, 2, 8, 0),
           SG_EINVAL, "cuBLAS route: Hq %% Hkv != 0 is SG_EINVAL");
    is_int(sg_cu_attention_blas_backward(cu, 0, 1 << 20, dev[6], dev[7], dev[8], dev[3], dev[0],
                                         dev[1], dev[2], dev[4], dev[5], SG_I32, 1, 4, 2, 2, 8, 0),
           SG_EINVAL, "cuBLAS route: dtype i32 is SG_EINVAL");
    for (int i = 0; i < 10; i++)
        sg_cu_free(dev[i]);
    void *host[] = {x, y, b_fp32, b_fp32dq, b_blas, b_blasdq, b_env, b_envdq};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* the OpenBLAS kernels `stepgraph` itself runs (codelets/cpu/blas_core.h) */
    sg_blas_core_select(argv);
    if (sg_cu_device_count() == 0)
        return tap_plan_skip_all("no CUDA device");
    openblas_set_num_threads(1);
    tap_plan((int)((NCASES + NBLAS) * CHECKS_PER_CASE) + N_ERROR_CHECKS + N_SELECT_CHECKS);
    unsetenv(IMPL_ENV); // the cases name their route; the dispatch checks set these
    unsetenv(SCRATCH_ENV);
    tap_diag("%s", sg_cu_is_emulated() ? "emulated device (CPU fibers)" : "real CUDA device");
    sg_cu cu;
    if (sg_cu_open(&cu)) {
        printf("Bail out! sg_cu_open: %s\n", sg_cu_last_error());
        return 1;
    }
    g_rng = 0xa77e5710ull;
    for (size_t i = 0; i < NCASES; i++)
        run_case(&cu, &CASES[i], 0);
    for (size_t i = 0; i < NBLAS; i++)
        run_case(&cu, &BLAS_CASES[i], 1);
    check_errors(&cu);
    check_parse();
    check_tile_rows();
    check_dispatch(&cu);
    sg_cu_close(&cu);
    return tap_done();
}
