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
 * Shapes cover GQA (Hq / Hkv = 2 and 4), MHA, sliding windows (3, 5, 17,
 * 40, and one >= T), T not a multiple of any tile (1, 37, 70, 130, 150),
 * B = 2 and head dims 8, 32, 64, 80, 128 and 256 (each compile-time bound
 * of the kernels: 64, 96, 128, 256). Sizes stay small: under the emulator
 * every thread is a fiber.
 * Without a device (sg_cu_device_count() == 0) the program skips.
 * As codelets/cpu/ops.h asks of every caller, OpenBLAS is pinned to one
 * thread.
 */
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
} acase;

static const acase CASES[] = {
    {SG_F32, 2, 37, 4, 2, 64, 0},   // GQA 2:1, D = 64
    {SG_F32, 2, 70, 4, 1, 80, 0},   // GQA 4:1 (MQA), D = 80 (bound 96)
    {SG_F32, 2, 37, 2, 2, 8, 3},    // MHA, window 3
    {SG_F32, 2, 70, 4, 2, 128, 3},  // window 3, D = 128
    {SG_F32, 2, 37, 4, 2, 8, 40},   // window >= T: full attention
    {SG_F32, 1, 37, 2, 1, 256, 0},  // D = 256
    {SG_F32, 2, 150, 2, 1, 8, 40},  // window across several tiles
    {SG_F32, 1, 1, 1, 1, 8, 0},     // a single position
    {SG_F32, 2, 130, 8, 2, 32, 0},  // GQA 4:1 with 2 kv heads, 3 query tiles
    {SG_BF16, 2, 70, 4, 2, 64, 0},
    {SG_BF16, 2, 37, 4, 1, 128, 3},
    {SG_BF16, 1, 37, 2, 2, 256, 0},
    {SG_BF16, 2, 37, 4, 2, 80, 5},
    {SG_BF16, 2, 130, 4, 2, 64, 17},
    {SG_F16, 2, 37, 4, 2, 80, 5},
};
#define NCASES (sizeof CASES / sizeof CASES[0])
#define CHECKS_PER_CASE 8

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
    if (!ok(bad == 0 && err <= tol * fmax(scale, 1.0), "%s: %s (max err %.2e = %.2e of max|ref| %.3g)",
            name, what, err, scale > 0 ? err / scale : err, scale)) {
        tap_diag("  %zu non-finite; worst at %zu: got %.9g, expected %.9g (tol %g)", bad, worst,
                 got[worst], want[worst], tol);
    }
}

/* ---- one case ------------------------------------------------------------------------ */

static void run_case(const sg_cu *cu, const acase *c)
{
    const size_t B = c->B, T = c->T, Hq = c->Hq, Hkv = c->Hkv, D = c->D, W = c->W;
    const sg_dtype dt = c->dt;
    const size_t nq = B * T * Hq * D, nk = B * T * Hkv * D, nl = B * Hq * T;
    const size_t es = dt_size(dt);
    const double tol = dt == SG_F32 ? F32_TOL : dt == SG_BF16 ? BF16_TOL : F16_TOL;
    char name[160];
    snprintf(name, sizeof name, "%s B=%zu T=%zu Hq=%zu Hkv=%zu D=%zu W=%zu", sg_dtype_name(dt), B, T,
             Hq, Hkv, D, W);

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
    int rc = sg_cu_attention_forward(cu, d_out, d_lse, d_q, d_k, d_v, dt, B, T, Hq, Hkv, D, W);
    if (!rc)
        rc = sg_cu_sync(cu);
    is_int(rc, 0, "%s: forward returns 0", name);
    float *out = dev_get(d_out, nq, dt), *lse = dev_get(d_lse, nl, dt);
    cmp(out, ref_out, nq, tol, "out", name);
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
    rc = sg_cu_attention_backward(cu, d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_out, d_lse, dt,
                                  B, T, Hq, Hkv, D, W, d_work);
    if (!rc)
        rc = sg_cu_sync(cu);
    is_int(rc, 0, "%s: backward returns 0", name);
    float *dq = dev_get(d_dq, nq, dt), *dk = dev_get(d_dk, nk, dt), *dv = dev_get(d_dv, nk, dt);
    cmp(dq, ref_dq, nq, tol, "dq", name);
    cmp(dk, ref_dk, nk, tol, "dk (sum over the group's query heads)", name);
    cmp(dv, ref_dv, nk, tol, "dv (sum over the group's query heads)", name);

    /* dk, dv are summed without atomics: a second run gives the same bits */
    rc = sg_cu_attention_backward(cu, d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_out, d_lse, dt,
                                  B, T, Hq, Hkv, D, W, d_work);
    if (!rc)
        rc = sg_cu_sync(cu);
    float *dk2 = dev_get(d_dk, nk, dt), *dv2 = dev_get(d_dv, nk, dt);
    ok(rc == 0 && !memcmp(dk, dk2, nk * sizeof *dk) && !memcmp(dv, dv2, nk * sizeof *dv),
       "%s: dk, dv are the same on a second run", name);

    void *dev[] = {d_q, d_k, d_v, d_dout, d_out, d_lse, d_work, d_dq, d_dk, d_dv};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        sg_cu_free(dev[i]);
    float *host[] = {q, k, v, dout, ref_out, ref_lse, out, lse, ref_dq, ref_dk,
                     ref_dv, dq, dk, dv, dk2, dv2};
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
    is_int(sg_cu_attention_backward(cu, p, p, p, p, p, p, p, p, p, SG_BF16, 1, 4, 2, 1, 8, 0,
                                    NULL),
           SG_EINVAL, "backward: no work area is SG_EINVAL");
    is_int(sg_cu_attention_backward_work_floats(2, 5, 4, 2, 8), 2 * 4 * 5 + 2 * 5 * 4 * 8,
           "work floats: Dvec (B, Hq, T) + dq accumulator (B, T, Hq, D)");
    sg_cu_free(p);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* the OpenBLAS kernels `stepgraph` itself runs (codelets/cpu/blas_core.h) */
    sg_blas_core_select(argv);
    if (sg_cu_device_count() == 0)
        return tap_plan_skip_all("no CUDA device");
    openblas_set_num_threads(1);
    tap_plan((int)(NCASES * CHECKS_PER_CASE) + N_ERROR_CHECKS);
    tap_diag("%s", sg_cu_is_emulated() ? "emulated device (CPU fibers)" : "real CUDA device");
    sg_cu cu;
    if (sg_cu_open(&cu)) {
        printf("Bail out! sg_cu_open: %s\n", sg_cu_last_error());
        return 1;
    }
    g_rng = 0xa77e5710ull;
    for (size_t i = 0; i < NCASES; i++)
        run_case(&cu, &CASES[i]);
    check_errors(&cu);
    sg_cu_close(&cu);
    return tap_done();
}
