/* test_cuda_ops.c - the GPU kernels of codelets/cuda/cuda_ops.h (casts,
 * element-wise ops, embedding, RMSNorm, RoPE, SwiGLU, cross-entropy,
 * gradient norm, Adam) against the CPU kernels of codelets/cpu/ops.h and
 * adam.h, on small random inputs (fixed seed) of several sizes, odd ones
 * included.
 *
 * Each op runs in f32 and in bf16. The bf16 inputs are the f32 ones rounded
 * to bf16, and the CPU reference runs in fp32 on those rounded values (and,
 * for backward passes, on the saved activations the GPU forward stored in
 * bf16: rstd, lse), so the two sides see the same numbers. Tolerances:
 * - f32: norm-wise relative error ||got - want|| / ||want|| <= 1e-5 (the
 *   kernels sum in another order, and the GPU's expf differs by an ulp);
 * - bf16: element-wise |got - want| <= 1 bf16 ulp of want + 1e-6 max|want|
 *   (one rounding of the fp32 result to bf16 is at most half an ulp; the
 *   rest covers fp32 differences, and the absolute term values that cancel
 *   to near zero). The embedding backward adds with bf16 atomics, one
 *   rounding per repeated id: 2 ulps of the sum of the magnitudes added;
 * - exact where the operation is: casts (RNE, NaN stays NaN), the embedding
 *   lookup, in-place versus out-of-place calls, repeated calls (the RMSNorm
 *   weight gradient is deterministic), the gradient-norm result from its
 *   sum, and Adam in the emulated build, which must give the bits of the
 *   scalar CPU variant (same operations, same order, no FMA; on a real GPU
 *   the same holds unless the build changes the float flags, so there it
 *   gets 1e-6); Lion and Adagrad likewise (their fused multiply-adds are
 *   explicit on both sides), with f16 gradients as well.
 *
 * Without a CUDA device the program prints a skip plan. The same source is
 * linked against the emulated build (libsgcudaemu.a), where the kernels run
 * on the CPU; a diagnostic line says which build runs.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/adam.h"
#include "codelets/cpu/ops.h"
#include "codelets/cuda/cuda_ops.h"
#include "common/error.h"
#include "tests/tap.h"
#include "tests/test_util.h"

#define F32_TOL 1e-5
#define ADAM_TOL 1e-6

static sg_cu g_cu;
static int g_emulated;

static const sg_dtype DTS[2] = {SG_F32, SG_BF16};

static void bail(const char *what)
{
    printf("Bail out! %s\n", what);
    exit(1);
}

/* ---- host arrays ----------------------------------------------------------------- */

static float *randn(size_t n, float scale)
{
    float *p = alloc_f32(n);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * rng_normal();
    return p;
}

static float *filled(size_t n, float v)
{
    float *p = alloc_f32(n);
    for (size_t i = 0; i < n; i++)
        p[i] = v;
    return p;
}

#define FREE(...)                                                  \
    do {                                                           \
        void *ps_[] = {__VA_ARGS__};                               \
        for (size_t i_ = 0; i_ < sizeof ps_ / sizeof ps_[0]; i_++) \
            free(ps_[i_]);                                         \
    } while (0)

/* ---- 16-bit storage ---------------------------------------------------------------- */

static size_t dt_size(sg_dtype dt)
{
    return dt == SG_F32 ? 4 : 2;
}

/* ---- device buffers (freed together at the end of each section) ------------------ */

#define MAX_DEV 256
static void *g_dev[MAX_DEV];
static int g_ndev;

static void *dev_alloc(size_t bytes)
{
    if (g_ndev == MAX_DEV)
        bail("too many device buffers");
    void *p = sg_cu_malloc(bytes ? bytes : 1);
    if (!p)
        bail("sg_cu_malloc failed");
    g_dev[g_ndev++] = p;
    return p;
}

static void dev_free_all(void)
{
    if (sg_cu_sync(&g_cu))
        bail("a kernel failed");
    while (g_ndev)
        sg_cu_free(g_dev[--g_ndev]);
}

static void sync_or_bail(void)
{
    if (sg_cu_sync(&g_cu)) {
        tap_diag("%s", sg_cu_last_error());
        bail("a kernel failed");
    }
}

/* Copies host bytes into device memory d, after the queued work that may
 * still use it. */
static void put_raw_into(void *d, const void *h, size_t bytes)
{
    sync_or_bail();
    if (bytes && sg_cu_to_device(d, h, bytes))
        bail("sg_cu_to_device failed");
}

static void *put_raw(const void *h, size_t bytes)
{
    void *d = dev_alloc(bytes);
    put_raw_into(d, h, bytes);
    return d;
}

/* x (n) stored in dt into device memory d. */
static void put_into(void *d, const float *x, size_t n, sg_dtype dt)
{
    if (dt == SG_F32) {
        put_raw_into(d, x, n * sizeof *x);
        return;
    }
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    if (!h)
        bail("out of memory");
    for (size_t i = 0; i < n; i++)
        h[i] = to16(x[i], dt);
    put_raw_into(d, h, n * sizeof *h);
    free(h);
}

static void *put(const float *x, size_t n, sg_dtype dt)
{
    void *d = dev_alloc(n * dt_size(dt));
    put_into(d, x, n, dt);
    return d;
}

/* The n elements of d (stored in dt) as floats, once the stream has run. */
static float *get(const void *d, size_t n, sg_dtype dt)
{
    sync_or_bail();
    float *x = alloc_f32(n);
    if (dt == SG_F32) {
        if (n && sg_cu_to_host(x, d, n * sizeof *x))
            bail("sg_cu_to_host failed");
        return x;
    }
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    if (!h)
        bail("out of memory");
    if (n && sg_cu_to_host(h, d, n * sizeof *h))
        bail("sg_cu_to_host failed");
    for (size_t i = 0; i < n; i++)
        x[i] = from16(h[i], dt);
    free(h);
    return x;
}

static void get_raw(void *h, const void *d, size_t bytes)
{
    sync_or_bail();
    if (bytes && sg_cu_to_host(h, d, bytes))
        bail("sg_cu_to_host failed");
}

/* ---- return codes: each section checks that all its calls returned 0 ------------ */

static int g_calls, g_calls_bad;

#define CALL(expr)                                                               \
    do {                                                                         \
        int rc_ = (expr);                                                        \
        g_calls++;                                                               \
        if (rc_ != SG_OK) {                                                      \
            g_calls_bad++;                                                       \
            tap_diag("  %s:%d: %s returned %d", __FILE__, __LINE__, #expr, rc_); \
        }                                                                        \
    } while (0)

static void calls_ok(const char *section)
{
    ok(g_calls_bad == 0, "%s: all %d calls return SG_OK", section, g_calls);
    g_calls = g_calls_bad = 0;
}

/* ---- comparison ------------------------------------------------------------------ */

/* Spacing of the 16-bit format's values in the binade of a >= 0. */
static double ulp16(double a, sg_dtype dt)
{
    int mant = dt == SG_BF16 ? 7 : 10; // stored mantissa bits
    double tiny = dt == SG_BF16 ? ldexp(1.0, -133) : ldexp(1.0, -24);
    if (!(a > 0.0))
        return tiny;
    int e;
    frexp(a, &e); // a = f 2^e, f in [0.5, 1)
    double u = ldexp(1.0, e - 1 - mant);
    return u > tiny ? u : tiny;
}

/* f32: ||got - want|| <= F32_TOL ||want||. bf16 / f16: every element within
 * ulps ulps of |scale[i]| (scale NULL: of |want[i]|) plus 1e-6 max|want|. */
static int check_vals(const float *got, const float *want, const float *scale, size_t n,
                      sg_dtype dt, double ulps, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static int check_vals(const float *got, const float *want, const float *scale, size_t n,
                      sg_dtype dt, double ulps, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    double num = 0.0, den = 0.0, maxw = 0.0, maxabs = 0.0;
    size_t imax = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)want[i];
        num += d * d;
        den += (double)want[i] * want[i];
        if (fabs(want[i]) > maxw)
            maxw = fabs(want[i]);
        if (!(fabs(d) <= maxabs)) { // NaN too
            maxabs = fabs(d);
            imax = i;
        }
    }
    double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    int good;
    if (dt == SG_F32) {
        good = rel <= F32_TOL;
        ok(good, "%s [f32]: rel err %.2e, max abs err %.2e", what, rel, maxabs);
    } else {
        double atol = 1e-6 * maxw, worst = 0.0;
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)got[i] - (double)want[i]);
            double u = ulp16(fabs(scale ? scale[i] : want[i]), dt);
            if (!(d <= ulps * u + atol)) {
                if (!bad)
                    imax = i;
                bad++;
            }
            if (!(d / u <= worst))
                worst = d / u;
        }
        good = bad == 0;
        ok(good, "%s [%s]: max err %.2f ulps (limit %g), rel err %.2e", what, sg_dtype_name(dt),
           worst, ulps, rel);
    }
    if (!good)
        tap_diag("  at [%zu]: got %.9g, want %.9g", imax, got[imax], want[imax]);
    return good;
}

static int same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* ---- casts ----------------------------------------------------------------------- */

static int is_nan16(uint16_t h, sg_dtype dt)
{
    return dt == SG_BF16 ? (h & 0x7fffu) > 0x7f80u : (h & 0x7fffu) > 0x7c00u;
}

static void test_cast(void)
{
    const size_t n = 1031;
    static const float edges[] = {
        INFINITY,       -INFINITY,    NAN,
        -NAN,           0.0f,         -0.0f,
        1.0f,           -1.0f,        65504.0f,
        65519.0f,       65520.0f,     -65536.0f,
        3.0e38f,        -3.4e38f, // f16 max, overflow
        6.0e-8f,        3.0e-8f,      2.9e-8f,
        1.0e-5f,        6.1e-5f,                       // f16 subnormals
        1.0e-40f,       -1.0e-45f,    1.17549435e-38f, // f32 subnormals
        1.00390625f,    1.01171875f,  1.0009765625f,
        1.00146484375f, // bf16 / f16 ties
        3.14159265f,    -2.71828183f, 0.1f,
    };
    const size_t ne = sizeof edges / sizeof *edges;
    float *x = alloc_f32(n);
    for (size_t i = 0; i < n; i++)
        x[i] = i < ne ? edges[i] : rng_normal() * (float)pow(10.0, 12.0 * rng_unit() - 6.0);
    sg_dtype all[3] = {SG_F32, SG_BF16, SG_F16};
    for (int a = 0; a < 3; a++) {
        sg_dtype in_dt = all[a];
        /* the input in its storage, and the exact float value of each */
        void *hin = malloc(n * 4);
        float *xin = alloc_f32(n);
        if (!hin)
            bail("out of memory");
        for (size_t i = 0; i < n; i++) {
            if (in_dt == SG_F32) {
                ((float *)hin)[i] = x[i];
                xin[i] = x[i];
            } else {
                ((uint16_t *)hin)[i] = to16(x[i], in_dt);
                xin[i] = from16(((uint16_t *)hin)[i], in_dt);
            }
        }
        void *din = put_raw(hin, n * dt_size(in_dt));
        for (int b = 0; b < 3; b++) {
            sg_dtype out_dt = all[b];
            void *dout = dev_alloc(n * dt_size(out_dt));
            CALL(sg_cu_cast(&g_cu, dout, out_dt, din, in_dt, n));
            void *hout = malloc(n * 4);
            if (!hout)
                bail("out of memory");
            get_raw(hout, dout, n * dt_size(out_dt));
            size_t bad = 0, nans = 0;
            for (size_t i = 0; i < n; i++) {
                int got_nan, same;
                if (out_dt == SG_F32) {
                    float g = ((float *)hout)[i];
                    got_nan = isnan(g);
                    same = !memcmp(&g, &xin[i], 4);
                } else {
                    uint16_t g = ((uint16_t *)hout)[i];
                    got_nan = is_nan16(g, out_dt);
                    same = g == to16(xin[i], out_dt);
                }
                if (isnan(xin[i])) {
                    nans++;
                    bad += !got_nan;
                } else {
                    bad += !same;
                }
            }
            ok(bad == 0,
               "cast %s -> %s: %zu values as the CPU casts (RNE), %zu NaN stay NaN "
               "(%zu differ)",
               sg_dtype_name(in_dt), sg_dtype_name(out_dt), n, nans, bad);
            free(hout);
        }
        FREE(hin, xin);
    }
    free(x);
    calls_ok("cast");
    dev_free_all();
}

/* ---- acc += x ---------------------------------------------------------------------- */

static void test_add_into(void)
{
    const size_t sizes[] = {7, 1000};
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            sg_dtype dt = DTS[k];
            size_t n = sizes[s];
            float *acc = randn(n, 1.0f), *x = randn(n, 1.0f);
            round_dt(acc, n, dt);
            round_dt(x, n, dt);
            void *dacc = put(acc, n, dt), *dx = put(x, n, dt);
            CALL(sg_cu_add_into(&g_cu, dacc, dx, dt, n));
            float *want = alloc_f32(n);
            for (size_t i = 0; i < n; i++)
                want[i] = acc[i] + x[i];
            float *got = get(dacc, n, dt);
            check_vals(got, want, NULL, n, dt, 1.0, "add_into n=%zu", n);
            FREE(acc, x, want, got);
        }
    calls_ok("add_into");
    dev_free_all();
}

/* ---- batch tiles: sum of gradient partials ------------------------------------------ */

/* The same bits as the CPU kernel (fp32 partials added in order, then into
 * the accumulated gradient), rounded once to the storage dtype. */
static void test_grad_sum(void)
{
    const size_t n = 1000;
    for (int k = 0; k < 2; k++)
        for (int np = 1; np <= 3; np += 2)
            for (int accumulate = 0; accumulate <= 1; accumulate++) {
                sg_dtype dt = DTS[k];
                float *parts[3], *dparts[3];
                for (int t = 0; t < np; t++) {
                    parts[t] = randn(n, 1.0f);
                    dparts[t] = put(parts[t], n, SG_F32);
                }
                float *out = randn(n, 1.0f);
                round_dt(out, n, dt);
                void *dout = put(out, n, dt);
                CALL(sg_cu_grad_sum(&g_cu, dout, dt, (const float *const *)dparts, np, n,
                                    accumulate));
                float *want = alloc_f32(n);
                memcpy(want, out, n * sizeof *want);
                if (sg_grad_partials_sum(want, (const float *const *)parts, np, n, accumulate))
                    bail("sg_grad_partials_sum failed");
                round_dt(want, n, dt);
                float *got = get(dout, n, dt);
                size_t bad = 0;
                for (size_t i = 0; i < n; i++)
                    bad += memcmp(&got[i], &want[i], sizeof got[i]) != 0;
                ok(bad == 0,
                   "grad_sum %s, %d partial(s)%s: the CPU kernel's bits (%zu of %zu "
                   "differ)",
                   sg_dtype_name(dt), np, accumulate ? ", accumulated" : "", bad, n);
                for (int t = 0; t < np; t++)
                    free(parts[t]);
                FREE(out, want, got);
            }
    /* the order is the partials' order: (1e8 + 1) - 1e8 is 0 in fp32, then + 5 */
    float big[1] = {1e8f}, one[1] = {1.0f}, neg[1] = {-1e8f}, five[1] = {5.0f};
    const float *hp[3] = {big, one, neg};
    const float *dp[3] = {put(big, 1, SG_F32), put(one, 1, SG_F32), put(neg, 1, SG_F32)};
    void *dfive = put(five, 1, SG_F32);
    CALL(sg_cu_grad_sum(&g_cu, dfive, SG_F32, dp, 3, 1, 1));
    float *g5 = get(dfive, 1, SG_F32);
    int crc = sg_grad_partials_sum(five, hp, 3, 1, 1);
    ok(crc == SG_OK && five[0] == 5.0f && g5[0] == 5.0f,
       "grad_sum adds the partials in the order given, then into the gradient: "
       "CPU %g, GPU %g (5 expected)",
       five[0], g5[0]);
    free(g5);
    calls_ok("grad_sum");
    dev_free_all();
}

/* ---- embedding --------------------------------------------------------------------- */

static void test_embedding(void)
{
    const size_t shapes[][3] = {{7, 50, 33}, {37, 1000, 300}}; // N, V, C
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            sg_dtype dt = DTS[k];
            size_t N = shapes[s][0], V = shapes[s][1], C = shapes[s][2];
            int32_t *tok = malloc(N * sizeof *tok), *bad = malloc(N * sizeof *bad);
            int32_t *tok_c = malloc(N * sizeof *tok_c);
            if (!tok || !bad || !tok_c)
                bail("out of memory");
            for (size_t n = 0; n < N; n++)
                tok[n] = (int32_t)(rng_u64() % V);
            tok[3] = tok[5] = tok[0]; // repeated ids: the backward sums them
            tok[1] = 0;
            tok[N - 1] = (int32_t)V - 1;
            memcpy(bad, tok, N * sizeof *bad);
            bad[2] = -1; // out of range: skipped by the kernels
            bad[4] = (int32_t)V;
            float *table = randn(V * C, 1.0f), *dout = randn(N * C, 1.0f);
            float *dt0 = randn(V * C, 1.0f);
            round_dt(table, V * C, dt);
            round_dt(dout, N * C, dt);
            round_dt(dt0, V * C, dt);

            /* forward: a copy of rows, bit-exact */
            float *want = alloc_f32(N * C);
            CALL(sg_embedding_forward(want, tok, table, N, V, C));
            void *dtok = put_raw(tok, N * sizeof *tok), *dbad = put_raw(bad, N * sizeof *bad);
            void *dtab = put(table, V * C, dt), *dout_g = put(dout, N * C, dt);
            float *sentinel = filled(N * C, 7.0f);
            void *dy = put(sentinel, N * C, dt);
            CALL(sg_cu_embedding_forward(&g_cu, dy, dtok, dtab, dt, N, V, C));
            float *got = get(dy, N * C, dt);
            ok(same_bits(got, want, N * C),
               "embedding N=%zu V=%zu C=%zu [%s]: forward = rows "
               "of the table, bit-exact",
               N, V, C, sg_dtype_name(dt));
            /* ids -1 and V: their rows are left alone, the others written */
            put_into(dy, sentinel, N * C, dt);
            CALL(sg_cu_embedding_forward(&g_cu, dy, dbad, dtab, dt, N, V, C));
            free(got);
            got = get(dy, N * C, dt);
            for (size_t c = 0; c < C; c++)
                want[2 * C + c] = want[4 * C + c] = 7.0f;
            ok(same_bits(got, want, N * C), "embedding N=%zu [%s]: ids -1 and V are skipped", N,
               sg_dtype_name(dt));

            /* backward with the same bad ids: the CPU reference without them */
            size_t Nc = 0;
            float *dout_c = alloc_f32(N * C), *abs_c = alloc_f32(N * C);
            for (size_t n = 0; n < N; n++) {
                if (n == 2 || n == 4)
                    continue;
                tok_c[Nc] = tok[n];
                for (size_t c = 0; c < C; c++) {
                    dout_c[Nc * C + c] = dout[n * C + c];
                    abs_c[Nc * C + c] = fabsf(dout[n * C + c]);
                }
                Nc++;
            }
            float *want_dt = dup_f32(dt0, V * C), *mag = alloc_f32(V * C);
            for (size_t i = 0; i < V * C; i++)
                mag[i] = fabsf(dt0[i]);
            CALL(sg_embedding_backward(want_dt, tok_c, dout_c, Nc, V, C));
            CALL(sg_embedding_backward(mag, tok_c, abs_c, Nc, V, C)); // magnitudes added
            void *ddt = put(dt0, V * C, dt);
            CALL(sg_cu_embedding_backward(&g_cu, ddt, dbad, dout_g, dt, N, V, C));
            float *got_dt = get(ddt, V * C, dt);
            check_vals(got_dt, want_dt, mag, V * C, dt, 2.0,
                       "embedding N=%zu: dtable accumulates, ids -1 and V skipped", N);
            FREE(tok, bad, tok_c, table, dout, dt0, want, sentinel, got, dout_c, abs_c, want_dt,
                 mag, got_dt);
            dev_free_all();
        }
    calls_ok("embedding");
}

/* ---- RMSNorm ------------------------------------------------------------------------ */

static void test_rmsnorm(void)
{
    /* (136, 16): Qwen3's QK-norm rows; (1030, 24): more rows than blocks,
     * so some blocks sum two rows into their dw partial (in f32 only: the
     * partials are fp32 whatever the dtype, and its 1030 blocks of
     * barriers are what the emulator is slowest at); (3, 9000): rows too
     * wide for the shared-memory dw partial. */
    const size_t shapes[][2] = {{7, 33}, {34, 64}, {136, 16}, {1030, 24}, {5, 300}, {3, 9000}};
    const float eps = 1e-5f;
    for (int s = 0; s < 6; s++)
        for (int k = 0; k < 2; k++) {
            sg_dtype dt = DTS[k];
            size_t N = shapes[s][0], C = shapes[s][1], NC = N * C;
            if (N > 1000 && dt != SG_F32)
                continue;
            float *x = randn(NC, 3.0f), *w = randn(C, 0.2f), *dout = randn(NC, 1.0f);
            float *dw0 = randn(C, 1.0f);
            for (size_t c = 0; c < C; c++) {
                w[c] += 1.0f;
                x[C + c] *= 1000.0f; // one row of large values, one of tiny ones
                if (N > 2)
                    x[2 * C + c] *= 1e-3f;
            }
            round_dt(x, NC, dt);
            round_dt(w, C, dt);
            round_dt(dout, NC, dt);
            round_dt(dw0, C, dt);
            float *want = alloc_f32(NC), *want_r = alloc_f32(N);
            CALL(sg_rmsnorm_forward(want, want_r, x, w, N, C, eps));
            void *dx_in = put(x, NC, dt), *dw_in = put(w, C, dt), *ddy = put(dout, NC, dt);
            void *dy = dev_alloc(NC * dt_size(dt)), *dr = dev_alloc(N * dt_size(dt));
            CALL(sg_cu_rmsnorm_forward(&g_cu, dy, dr, dx_in, dw_in, dt, N, C, eps));
            float *got = get(dy, NC, dt), *got_r = get(dr, N, dt);
            check_vals(got, want, NULL, NC, dt, 1.0, "rmsnorm N=%zu C=%zu: out", N, C);
            check_vals(got_r, want_r, NULL, N, dt, 1.0, "rmsnorm N=%zu C=%zu: rstd", N, C);
            void *dy2 = dev_alloc(NC * dt_size(dt));
            CALL(sg_cu_rmsnorm_forward(&g_cu, dy2, NULL, dx_in, dw_in, dt, N, C, eps));
            float *got2 = get(dy2, NC, dt);
            ok(same_bits(got, got2, NC), "rmsnorm N=%zu C=%zu [%s]: rstd = NULL, same out", N, C,
               sg_dtype_name(dt));

            /* backward from the rstd the GPU saved (in dt) */
            float *want_dx = alloc_f32(NC), *want_dw = dup_f32(dw0, C);
            CALL(sg_rmsnorm_backward(want_dx, want_dw, dout, x, w, got_r, N, C));
            float *nans = filled(NC, NAN);
            void *ddx = put(nans, NC, dt), *ddw = put(dw0, C, dt);
            size_t wf = sg_cu_rmsnorm_backward_work_floats(N, C);
            float *work = dev_alloc(wf * sizeof(float));
            CALL(sg_cu_rmsnorm_backward(&g_cu, ddx, ddw, ddy, dx_in, dw_in, dr, dt, N, C, work));
            float *got_dx = get(ddx, NC, dt), *got_dw = get(ddw, C, dt);
            check_vals(got_dx, want_dx, NULL, NC, dt, 1.0, "rmsnorm N=%zu C=%zu: dx", N, C);
            check_vals(got_dw, want_dw, NULL, C, dt, 1.0, "rmsnorm N=%zu C=%zu: dw accumulates", N,
                       C);
            /* again: the same dw bits (no float atomics); dw = NULL: same dx */
            put_into(ddw, dw0, C, dt);
            put_into(ddx, nans, NC, dt);
            CALL(sg_cu_rmsnorm_backward(&g_cu, ddx, ddw, ddy, dx_in, dw_in, dr, dt, N, C, work));
            float *again = get(ddw, C, dt), *again_dx = get(ddx, NC, dt);
            put_into(ddx, nans, NC, dt);
            CALL(sg_cu_rmsnorm_backward(&g_cu, ddx, NULL, ddy, dx_in, dw_in, dr, dt, N, C, NULL));
            float *nodw_dx = get(ddx, NC, dt);
            ok(same_bits(again, got_dw, C) && same_bits(again_dx, got_dx, NC) &&
                   same_bits(nodw_dx, got_dx, NC),
               "rmsnorm N=%zu C=%zu [%s]: repeated backward gives the same bits; dw = NULL "
               "gives the same dx",
               N, C, sg_dtype_name(dt));
            FREE(x, w, dout, dw0, want, want_r, got, got_r, got2, want_dx, want_dw, nans, got_dx,
                 got_dw, again, again_dx, nodw_dx);
            dev_free_all();
        }
    calls_ok("rmsnorm");
}

/* ---- RoPE ------------------------------------------------------------------------- */

static void test_rope(void)
{
    /* D = 160, H = 4: 320 pairs per token, more than a block's threads;
     * D = 2: one pair per head */
    const size_t shapes[][4] = {{2, 5, 3, 16}, {1, 7, 4, 160}, {1, 3, 1, 2}}; // B, T, H, D
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 2; k++) {
            sg_dtype dt = DTS[k];
            size_t B = shapes[s][0], T = shapes[s][1], H = shapes[s][2], D = shapes[s][3];
            size_t n = B * T * H * D, nt = T * D / 2;
            float *cs = alloc_f32(nt), *sn = alloc_f32(nt);
            CALL(sg_rope_table(T, D, 10000.0, cs, sn));
            float *x = randn(n, 1.0f), *dout = randn(n, 1.0f);
            round_dt(x, n, dt);
            round_dt(dout, n, dt);
            float *want = alloc_f32(n), *want_dx = alloc_f32(n);
            CALL(sg_rope_forward(want, x, cs, sn, B, T, H, D));
            CALL(sg_rope_backward(want_dx, dout, cs, sn, B, T, H, D));
            float *dcs = put(cs, nt, SG_F32), *dsn = put(sn, nt, SG_F32);
            void *dx = put(x, n, dt), *ddy = put(dout, n, dt);
            void *dy = dev_alloc(n * dt_size(dt)), *ddx = dev_alloc(n * dt_size(dt));
            CALL(sg_cu_rope_forward(&g_cu, dy, dx, dcs, dsn, dt, B, T, H, D));
            CALL(sg_cu_rope_backward(&g_cu, ddx, ddy, dcs, dsn, dt, B, T, H, D));
            float *got = get(dy, n, dt), *got_dx = get(ddx, n, dt);
            check_vals(got, want, NULL, n, dt, 1.0, "rope B=%zu T=%zu H=%zu D=%zu: forward", B, T,
                       H, D);
            check_vals(got_dx, want_dx, NULL, n, dt, 1.0, "rope D=%zu: backward", D);
            /* in place: out = x, dx = dout */
            CALL(sg_cu_rope_forward(&g_cu, dx, dx, dcs, dsn, dt, B, T, H, D));
            CALL(sg_cu_rope_backward(&g_cu, ddy, ddy, dcs, dsn, dt, B, T, H, D));
            float *in1 = get(dx, n, dt), *in2 = get(ddy, n, dt);
            ok(same_bits(in1, got, n) && same_bits(in2, got_dx, n),
               "rope D=%zu [%s]: in place gives the same bits", D, sg_dtype_name(dt));
            FREE(cs, sn, x, dout, want, want_dx, got, got_dx, in1, in2);
            dev_free_all();
        }
    calls_ok("rope");
}

/* ---- SwiGLU ------------------------------------------------------------------------- */

static void test_swiglu(void)
{
    const size_t shapes[][2] = {{7, 33}, {3, 1000}}; // N, F
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            sg_dtype dt = DTS[k];
            size_t N = shapes[s][0], F = shapes[s][1], n = N * F;
            float *gate = randn(n, 2.0f), *up = randn(n, 1.0f), *dh = randn(n, 1.0f);
            const float extreme[] = {-100.0f, 100.0f, -90.0f, 0.0f, -0.0f, 1e-20f, -17.5f};
            for (size_t i = 0; i < sizeof extreme / sizeof *extreme && i * 7 < n; i++)
                gate[i * 7] = extreme[i];
            round_dt(gate, n, dt);
            round_dt(up, n, dt);
            round_dt(dh, n, dt);
            float *want_h = alloc_f32(n), *want_dg = alloc_f32(n), *want_du = alloc_f32(n);
            CALL(sg_swiglu_forward(want_h, gate, up, N, F));
            CALL(sg_swiglu_backward(want_dg, want_du, dh, gate, up, N, F));
            void *dg = put(gate, n, dt), *du = put(up, n, dt), *ddh = put(dh, n, dt);
            void *dhh = dev_alloc(n * dt_size(dt)), *ddg = dev_alloc(n * dt_size(dt));
            void *ddu = dev_alloc(n * dt_size(dt));
            CALL(sg_cu_swiglu_forward(&g_cu, dhh, dg, du, dt, N, F));
            CALL(sg_cu_swiglu_backward(&g_cu, ddg, ddu, ddh, dg, du, dt, N, F));
            float *h = get(dhh, n, dt), *gg = get(ddg, n, dt), *gu = get(ddu, n, dt);
            check_vals(h, want_h, NULL, n, dt, 1.0, "swiglu N=%zu F=%zu: h", N, F);
            check_vals(gg, want_dg, NULL, n, dt, 1.0, "swiglu N=%zu F=%zu: dgate", N, F);
            check_vals(gu, want_du, NULL, n, dt, 1.0, "swiglu N=%zu F=%zu: dup", N, F);
            FREE(gate, up, dh, want_h, want_dg, want_du, h, gg, gu);
            dev_free_all();
        }
    calls_ok("swiglu");
}

/* ---- cross-entropy ------------------------------------------------------------------ */

static void test_cross_entropy(void)
{
    /* V = 33: fewer columns than threads; V = 3001: odd, several per thread */
    const size_t shapes[][2] = {{7, 1000}, {34, 33}, {5, 3001}}; // N, V
    const float dloss = 0.7f, scale = 1024.0f; // a power of two: dloss * scale is exact
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 2; k++) {
            sg_dtype dt = DTS[k];
            size_t N = shapes[s][0], V = shapes[s][1], NV = N * V;
            float *logits = randn(NV, 2.0f);
            int32_t *tg = malloc(N * sizeof *tg), *tg_c = malloc(N * sizeof *tg_c);
            int32_t *ign = malloc(N * sizeof *ign);
            if (!tg || !tg_c || !ign)
                bail("out of memory");
            for (size_t n = 0; n < N; n++)
                tg[n] = (int32_t)(rng_u64() % V);
            for (size_t v = 0; v < V; v++)
                logits[1 * V + v] += 60.0f;        // exp would overflow without the max
            logits[3 * V + (size_t)tg[3]] = 80.0f; // a near-certain prediction
            logits[0] = -INFINITY;                 // a masked logit: exp gives 0
            tg[0] = (int32_t)V - 1;
            tg[2] = -1;         // ignored (llm.c)
            tg[4] = (int32_t)V; // out of range: ignored by the GPU, never read
            if (N > 10)
                tg[10] = -100; // ignored (Hugging Face)
            for (size_t n = 0; n < N; n++) {
                tg_c[n] = tg[n] >= (int32_t)V ? -1 : tg[n]; // the CPU refuses >= V
                ign[n] = n == 1 ? (int32_t)V : -1;
            }
            round_dt(logits, NV, dt);

            float want_loss = NAN, *want_lse = alloc_f32(N);
            int64_t count = -1;
            CALL(sg_cross_entropy_forward(&want_loss, &count, want_lse, logits, tg_c, N, V));
            void *dl = put(logits, NV, dt), *dtg = put_raw(tg, N * sizeof *tg);
            void *dign = put_raw(ign, N * sizeof *ign);
            float *dloss_g = dev_alloc(sizeof(float)), *dscale = put(&scale, 1, SG_F32);
            void *dlse = dev_alloc(N * dt_size(dt));
            float *work = dev_alloc(sg_cu_cross_entropy_work_floats(N) * sizeof(float));
            CALL(sg_cu_cross_entropy_forward(&g_cu, dloss_g, dlse, dl, dtg, dt, N, V, work));
            float loss;
            get_raw(&loss, dloss_g, sizeof loss);
            float *lse = get(dlse, N, dt);
            is_close(loss, want_loss, F32_TOL,
                     "cross_entropy N=%zu V=%zu [%s]: mean loss %.6f "
                     "over %lld targets",
                     N, V, sg_dtype_name(dt), (double)loss, (long long)count);
            check_vals(lse, want_lse, NULL, N, dt, 1.0, "cross_entropy N=%zu V=%zu: lse", N, V);

            /* backward from the lse the GPU saved (in dt) */
            float *want_dl = alloc_f32(NV), *want_dl2 = alloc_f32(NV);
            CALL(sg_cross_entropy_backward(want_dl, logits, lse, tg_c, N, V, dloss, count));
            CALL(
                sg_cross_entropy_backward(want_dl2, logits, lse, tg_c, N, V, dloss * scale, count));
            float *nans = filled(NV, NAN);
            void *ddl = put(nans, NV, dt);
            CALL(sg_cu_cross_entropy_backward(&g_cu, ddl, dl, dlse, dtg, dt, N, V, dloss, NULL,
                                              work));
            float *got = get(ddl, NV, dt);
            check_vals(got, want_dl, NULL, NV, dt, 1.0, "cross_entropy N=%zu V=%zu: dlogits", N, V);
            /* in place, times the loss scale */
            void *dl2 = put(logits, NV, dt);
            CALL(sg_cu_cross_entropy_backward(&g_cu, dl2, dl2, dlse, dtg, dt, N, V, dloss, dscale,
                                              work));
            float *got2 = get(dl2, NV, dt);
            check_vals(got2, want_dl2, NULL, NV, dt, 1.0,
                       "cross_entropy N=%zu V=%zu: in place, dloss_scale %g", N, V, (double)scale);

            /* the pieces the chunked head calls (rows + mean, weight + backward_rows)
             * over chunks of 3 rows: the same bits as the whole calls */
            {
                const size_t es = dt_size(dt), C = 3;
                float *work2 = dev_alloc(sg_cu_cross_entropy_work_floats(N) * sizeof(float));
                void *dlse2 = dev_alloc(N * es), *ddl3 = put(nans, NV, dt);
                float *dloss2 = dev_alloc(sizeof(float)), *g = dev_alloc(sizeof(float));
                for (size_t r = 0; r < N; r += C) {
                    size_t nc = N - r < C ? N - r : C;
                    CALL(sg_cu_cross_entropy_rows(&g_cu, work2 + r, (char *)dlse2 + r * es,
                                                  (const char *)dl + r * V * es,
                                                  (const int32_t *)dtg + r, dt, nc, V));
                }
                CALL(sg_cu_cross_entropy_mean(&g_cu, dloss2, work2, dtg, N, V));
                CALL(sg_cu_cross_entropy_weight(&g_cu, g, dtg, N, V, dloss, NULL));
                for (size_t r = 0; r < N; r += C) {
                    size_t nc = N - r < C ? N - r : C;
                    CALL(sg_cu_cross_entropy_backward_rows(
                        &g_cu, (char *)ddl3 + r * V * es, (const char *)dl + r * V * es,
                        (const char *)dlse + r * es, (const int32_t *)dtg + r, dt, nc, V, g));
                }
                float loss2;
                get_raw(&loss2, dloss2, sizeof loss2);
                float *lse2 = get(dlse2, N, dt), *got3 = get(ddl3, NV, dt);
                ok(memcmp(&loss2, &loss, sizeof loss) == 0 &&
                       memcmp(lse2, lse, N * sizeof *lse) == 0 &&
                       memcmp(got3, got, NV * sizeof *got) == 0,
                   "cross_entropy N=%zu V=%zu [%s]: in chunks of 3 rows (rows, mean, weight, "
                   "backward_rows): loss, lse and dlogits bit-identical",
                   N, V, sg_dtype_name(dt));
                FREE(lse2, got3);
            }

            /* every target ignored (-1, and one V): loss 0, zero gradient */
            put_into(ddl, nans, NV, dt);
            CALL(sg_cu_cross_entropy_forward(&g_cu, dloss_g, NULL, dl, dign, dt, N, V, work));
            CALL(sg_cu_cross_entropy_backward(&g_cu, ddl, dl, dlse, dign, dt, N, V, dloss, dscale,
                                              work));
            get_raw(&loss, dloss_g, sizeof loss);
            float *zero = get(ddl, NV, dt);
            size_t nonzero = 0;
            for (size_t i = 0; i < NV; i++)
                nonzero += zero[i] != 0.0f;
            ok(loss == 0.0f && nonzero == 0,
               "cross_entropy N=%zu V=%zu [%s]: all ignored: "
               "loss 0 (%g), dlogits 0 (%zu not)",
               N, V, sg_dtype_name(dt), (double)loss, nonzero);
            FREE(logits, tg, tg_c, ign, want_lse, lse, want_dl, want_dl2, nans, got, got2, zero);
            dev_free_all();
        }
    /* N = 0: the loss is still written (0) */
    float five = 5.0f, loss = -1.0f;
    float *dloss_g = put(&five, 1, SG_F32);
    float *work = dev_alloc(sg_cu_cross_entropy_work_floats(0) * sizeof(float));
    CALL(sg_cu_cross_entropy_forward(&g_cu, dloss_g, NULL, NULL, NULL, SG_F32, 0, 10, work));
    get_raw(&loss, dloss_g, sizeof loss);
    ok(loss == 0.0f, "cross_entropy N=0: loss 0 (%g)", (double)loss);
    dev_free_all();
    calls_ok("cross_entropy");
}

/* ---- gradient norm ------------------------------------------------------------------ */

static void test_grad_norm(void)
{
    const size_t na = 7, nb = 3001;
    for (int k = 0; k < 2; k++) {
        sg_dtype dt = DTS[k];
        float *a = randn(na, 1.0f), *b = randn(nb, 1.0f);
        for (size_t i = 0; i < nb; i++)
            b[i] *= (float)pow(10.0, 6.0 * rng_unit() - 3.0);
        round_dt(a, na, dt);
        round_dt(b, nb, dt);
        double pa, pb;
        int fa, fb;
        CALL(sg_grad_norm_partial(&pa, &fa, a, na));
        CALL(sg_grad_norm_partial(&pb, &fb, b, nb));
        double zero = 0.0;
        int32_t izero = 0;
        double *dsum = put_raw(&zero, sizeof zero);
        int32_t *dnf = put_raw(&izero, sizeof izero);
        void *da = put(a, na, dt), *db = put(b, nb, dt);
        CALL(sg_cu_grad_norm_accumulate(&g_cu, dsum, dnf, da, dt, na));
        CALL(sg_cu_grad_norm_accumulate(&g_cu, dsum, dnf, db, dt, nb));
        double sum;
        int32_t nf;
        get_raw(&sum, dsum, sizeof sum);
        get_raw(&nf, dnf, sizeof nf);
        is_close(sum, pa + pb, 1e-12, "grad_norm [%s]: sum of squares of %zu + %zu values",
                 sg_dtype_name(dt), na, nb);
        is_int(nf, 0, "grad_norm [%s]: finite: no flag", sg_dtype_name(dt));

        /* the SG_BUF_GRAD_NORM result, without and with a loss scale */
        float res[2], ls = 1024.0f;
        float *dres = dev_alloc(2 * sizeof(float)), *dls = put(&ls, 1, SG_F32);
        CALL(sg_cu_grad_norm_finish(&g_cu, dres, dsum, dnf, NULL));
        get_raw(res, dres, sizeof res);
        ok(res[0] == (float)sqrt(sum) && res[1] == 1.0f,
           "grad_norm [%s]: finish = [sqrt(sumsq), 1] (%g, %g)", sg_dtype_name(dt), (double)res[0],
           (double)res[1]);
        CALL(sg_cu_grad_norm_finish(&g_cu, dres, dsum, dnf, dls));
        get_raw(res, dres, sizeof res);
        ok(res[0] == (float)(sqrt(sum) / 1024.0) && res[1] == (float)(1.0 / 1024.0),
           "grad_norm [%s]: finish with loss scale 1024 = [sqrt(sumsq) / 1024, 1 / 1024]",
           sg_dtype_name(dt));

        /* NaN first, +Inf in the middle, -Inf last: the flag, and +inf as the norm */
        size_t pos[3] = {0, nb / 2, nb - 1};
        float badv[3] = {NAN, INFINITY, -INFINITY};
        int flagged = 0;
        for (int i = 0; i < 3; i++) {
            float saved = b[pos[i]];
            b[pos[i]] = badv[i];
            put_into(db, b, nb, dt);
            b[pos[i]] = saved;
            put_raw_into(dsum, &zero, sizeof zero);
            put_raw_into(dnf, &izero, sizeof izero);
            CALL(sg_cu_grad_norm_accumulate(&g_cu, dsum, dnf, da, dt, na));
            CALL(sg_cu_grad_norm_accumulate(&g_cu, dsum, dnf, db, dt, nb));
            CALL(sg_cu_grad_norm_finish(&g_cu, dres, dsum, dnf, dls));
            get_raw(&nf, dnf, sizeof nf);
            get_raw(res, dres, sizeof res);
            flagged += nf == 1 && res[0] == INFINITY && res[1] == (float)(1.0 / 1024.0);
        }
        is_int(flagged, 3, "grad_norm [%s]: NaN, +Inf, -Inf set the flag, norm +inf",
               sg_dtype_name(dt));

        /* piece partials (SG_BUF_NORM_PART: a double, an int32, padding),
         * added in order onto what is there: ((1 + pa) + pb) + pa exactly,
         * the flag of the one flagged entry */
        struct {
            double s;
            int32_t nf, pad;
        } parts[3] = {{pa, 0, 0}, {pb, 1, 0}, {pa, 0, 0}};
        double one = 1.0;
        put_raw_into(dsum, &one, sizeof one);
        put_raw_into(dnf, &izero, sizeof izero);
        void *dparts = put_raw(parts, sizeof parts);
        CALL(sg_cu_grad_norm_add_parts(&g_cu, dsum, dnf, dparts, 3));
        get_raw(&sum, dsum, sizeof sum);
        get_raw(&nf, dnf, sizeof nf);
        ok(sum == ((1.0 + pa) + pb) + pa && nf == 1,
           "grad_norm [%s]: add_parts adds the partials in order, ORs the flags",
           sg_dtype_name(dt));
        FREE(a, b);
        dev_free_all();
    }
    calls_ok("grad_norm");
}

/* ---- Adam ---------------------------------------------------------------------------- */

/* sg_adam_grad_multiplier (codelets/cpu/adam.h): 1 / loss scale, and DeepSpeed's clipping. */
static float grad_multiplier(const float *norm, double clip)
{
    double combined = 1.0 / (double)norm[1];
    if (clip > 0) {
        double f = ((double)norm[0] + 1e-6) / clip;
        if (f > 1.0)
            combined *= f;
    }
    return (float)(1.0 / combined);
}

typedef struct adam_case {
    const char *name;
    sg_adam_params prm;
    int use_norm;  /* pass the norm buffer (else NULL: multiplier 1) */
    float norm[2]; /* [norm, 1 / loss scale] */
    double clip;
    float gscale;  /* gradients are randn * gscale */
    int nonfinite; /* put Inf and NaN into g */
} adam_case;

/* ||got - want|| / ||want||, and whether the bits are the same. */
static double adam_err(const float *got, const float *want, size_t n, int *same)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    *same &= same_bits(got, want, n);
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static void test_adam(void)
{
    sg_adam_params adamw = SG_ADAM_PARAMS_DEFAULT, l2 = SG_ADAM_PARAMS_DEFAULT;
    sg_adam_params skip = SG_ADAM_PARAMS_DEFAULT;
    adamw.weight_decay = 0.01f;
    adamw.isa = SG_ADAM_ISA_SCALAR;
    l2.adamw_mode = 0;
    l2.weight_decay = 0.1f;
    l2.bias_correction = 0;
    l2.lr = 3e-3f;
    l2.isa = SG_ADAM_ISA_SCALAR;
    skip.skip_nonfinite = 1;
    skip.isa = SG_ADAM_ISA_SCALAR;
    const adam_case cases[] = {
        /* loss-scaled gradients, norm 5 > clip 1: clipped */
        {"AdamW, loss scale 1024, clipped", adamw, 1, {5.0f, 1.0f / 1024.0f}, 1.0, 1024.0f, 0},
        {"Adam L2, no bias correction, no norm", l2, 0, {0.0f, 0.0f}, 0.0, 1.0f, 0},
        /* (3 + 1e-6) / 10 < 1: not clipped; Inf and NaN gradients skipped */
        {"AdamW skip_nonfinite, loss scale 8", skip, 1, {3.0f, 0.125f}, 10.0, 8.0f, 1},
    };
    const size_t sizes[] = {7, 1000};
    const int steps = 3;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < 2; k++) {
                const adam_case *c = &cases[ci];
                sg_dtype dt = DTS[k];
                size_t n = sizes[s];
                float *p = randn(n, 1.0f), *m = alloc_f32(n), *v = alloc_f32(n);
                for (size_t i = 0; i < n; i++)
                    m[i] = 0.0f, v[i] = 0.0f;
                float *dp = put(p, n, SG_F32), *dm = put(m, n, SG_F32), *dv = put(v, n, SG_F32);
                float *dnorm = put(c->norm, 2, SG_F32);
                int32_t zero = 0;
                int32_t *dov = put_raw(&zero, sizeof zero);
                void *dg = dev_alloc(n * dt_size(dt));
                float mult = c->use_norm ? grad_multiplier(c->norm, c->clip) : 1.0f;
                for (int t = 1; t <= steps; t++) {
                    float *g = randn(n, c->gscale);
                    if (c->nonfinite && n > 5)
                        g[1] = INFINITY, g[n / 2] = NAN, g[n - 1] = -INFINITY;
                    round_dt(g, n, dt);
                    put_into(dg, g, n, dt);
                    CALL(sg_adam_step(&c->prm, t, p, g, m, v, NULL, n, mult));
                    CALL(sg_cu_adam_step(&g_cu, &c->prm, t, dp, dg, dt, dm, dv, n,
                                         c->use_norm ? dnorm : NULL, dov, c->clip));
                    free(g);
                }
                float *gp = get(dp, n, SG_F32), *gm = get(dm, n, SG_F32);
                float *gv = get(dv, n, SG_F32);
                int same = 1;
                double ep = adam_err(gp, p, n, &same), em = adam_err(gm, m, n, &same);
                double ev = adam_err(gv, v, n, &same);
                int finite = 1;
                for (size_t i = 0; i < n; i++)
                    finite &= isfinite(gp[i]) && isfinite(gm[i]) && isfinite(gv[i]);
                int good = finite &&
                           (g_emulated ? same : ep <= ADAM_TOL && em <= ADAM_TOL && ev <= ADAM_TOL);
                ok(good,
                   "adam %s, n=%zu, g %s, %d steps: p, m, v as the scalar CPU step "
                   "(rel err %.1e %.1e %.1e; bit-identical: %s)",
                   c->name, n, sg_dtype_name(dt), steps, ep, em, ev, same ? "yes" : "no");

                /* overflow flag set: nothing changes */
                int32_t one = 1;
                put_raw_into(dov, &one, sizeof one);
                CALL(sg_cu_adam_step(&g_cu, &c->prm, steps + 1, dp, dg, dt, dm, dv, n,
                                     c->use_norm ? dnorm : NULL, dov, c->clip));
                float *op = get(dp, n, SG_F32), *om = get(dm, n, SG_F32);
                float *ov = get(dv, n, SG_F32);
                ok(same_bits(op, gp, n) && same_bits(om, gm, n) && same_bits(ov, gv, n),
                   "adam %s, n=%zu, g %s: overflow flag set: p, m, v unchanged", c->name, n,
                   sg_dtype_name(dt));
                FREE(p, m, v, gp, gm, gv, op, om, ov);
                dev_free_all();
            }
    calls_ok("adam");
}

/* Lion and Adagrad through the same entry point (prm.algo), against the
 * scalar CPU kernel (codelets/cpu/lion_adagrad.c, whose variants all give
 * the same bits) on the same rounded gradients, in f32, bf16 and f16: bit
 * for bit in the emulated build. Some gradients are exactly 0 (Lion's
 * sign(0) = 0 from a zero moment); the moment a rule never touches starts
 * random and must keep its bits on both sides. */
static void test_lion_adagrad(void)
{
    static const sg_dtype dts[3] = {SG_F32, SG_BF16, SG_F16};
    sg_adam_params lion = SG_ADAM_PARAMS_DEFAULT, ada = SG_ADAM_PARAMS_DEFAULT;
    lion.algo = SG_OPTIM_LION;
    lion.lr = 1e-4f;
    lion.beta2 = 0.99f;
    lion.isa = SG_ADAM_ISA_SCALAR;
    sg_adam_params lion_wd = lion;
    lion_wd.weight_decay = 0.1f;
    lion_wd.skip_nonfinite = 1;
    ada.algo = SG_OPTIM_ADAGRAD;
    ada.lr = 1e-2f;
    ada.eps = 1e-10f;
    ada.isa = SG_ADAM_ISA_SCALAR;
    sg_adam_params ada_l2 = ada;
    ada_l2.weight_decay = 0.01f;
    ada_l2.lr_decay = 0.5f;
    ada_l2.skip_nonfinite = 1;
    const adam_case cases[] = {
        {"Lion, loss scale 1024, clipped", lion, 1, {5.0f, 1.0f / 1024.0f}, 1.0, 1024.0f, 0},
        {"Lion wd 0.1, skip_nonfinite, loss scale 8", lion_wd, 1, {3.0f, 0.125f}, 10.0, 8.0f, 1},
        {"Adagrad, no norm", ada, 0, {0.0f, 0.0f}, 0.0, 1.0f, 0},
        {"Adagrad L2 0.01, lr_decay 0.5, skip_nonfinite, clipped",
         ada_l2,
         1,
         {5.0f, 1.0f / 1024.0f},
         1.0,
         1024.0f,
         1},
    };
    const size_t sizes[] = {7, 1000};
    const int steps = 3;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < 3; k++) {
                const adam_case *c = &cases[ci];
                const int is_lion = c->prm.algo == SG_OPTIM_LION;
                sg_dtype dt = dts[k];
                size_t n = sizes[s];
                float *p = randn(n, 1.0f), *m = randn(n, 0.01f), *v = randn(n, 0.01f);
                for (size_t i = 0; i < n; i++) {
                    v[i] *= v[i];
                    if (is_lion)
                        m[i] = 0.0f; /* v: never touched */
                    else
                        v[i] = 0.0f; /* m: never touched */
                }
                float *unused0 = alloc_f32(n), *p0 = alloc_f32(n);
                memcpy(unused0, is_lion ? v : m, n * sizeof(float));
                memcpy(p0, p, n * sizeof(float));
                float *dp = put(p, n, SG_F32), *dm = put(m, n, SG_F32), *dv = put(v, n, SG_F32);
                float *dnorm = put(c->norm, 2, SG_F32);
                int32_t zero = 0;
                int32_t *dov = put_raw(&zero, sizeof zero);
                void *dg = dev_alloc(n * dt_size(dt));
                float mult = c->use_norm ? grad_multiplier(c->norm, c->clip) : 1.0f;
                for (int t = 1; t <= steps; t++) {
                    float *g = randn(n, c->gscale);
                    g[2 % n] = 0.0f;
                    if (c->nonfinite && n > 5)
                        g[1] = INFINITY, g[n / 2] = NAN, g[n - 1] = -INFINITY;
                    round_dt(g, n, dt);
                    put_into(dg, g, n, dt);
                    CALL(sg_adam_step(&c->prm, t, p, g, m, v, NULL, n, mult));
                    CALL(sg_cu_adam_step(&g_cu, &c->prm, t, dp, dg, dt, dm, dv, n,
                                         c->use_norm ? dnorm : NULL, dov, c->clip));
                    free(g);
                }
                float *gp = get(dp, n, SG_F32), *gm = get(dm, n, SG_F32);
                float *gv = get(dv, n, SG_F32);
                int same = 1;
                double ep = adam_err(gp, p, n, &same);
                double emo = is_lion ? adam_err(gm, m, n, &same) : adam_err(gv, v, n, &same);
                int untouched = same_bits(is_lion ? gv : gm, unused0, n) &&
                                same_bits(is_lion ? v : m, unused0, n);
                size_t moved = 0;
                int finite = 1;
                for (size_t i = 0; i < n; i++) {
                    finite &= isfinite(gp[i]) && isfinite(gm[i]) && isfinite(gv[i]);
                    moved += gp[i] != p0[i];
                }
                int good = finite && untouched && moved >= n / 2 &&
                           (g_emulated ? same : ep <= ADAM_TOL && emo <= ADAM_TOL);
                ok(good,
                   "%s, n=%zu, g %s, %d steps: p, %s as the scalar CPU step, %s "
                   "untouched (rel err %.1e %.1e; bit-identical: %s)",
                   c->name, n, sg_dtype_name(dt), steps, is_lion ? "m" : "v", is_lion ? "v" : "m",
                   ep, emo, same ? "yes" : "no");

                int32_t one = 1;
                put_raw_into(dov, &one, sizeof one);
                CALL(sg_cu_adam_step(&g_cu, &c->prm, steps + 1, dp, dg, dt, dm, dv, n,
                                     c->use_norm ? dnorm : NULL, dov, c->clip));
                float *op = get(dp, n, SG_F32), *om = get(dm, n, SG_F32);
                float *ov = get(dv, n, SG_F32);
                ok(same_bits(op, gp, n) && same_bits(om, gm, n) && same_bits(ov, gv, n),
                   "%s, n=%zu, g %s: overflow flag set: p, m, v unchanged", c->name, n,
                   sg_dtype_name(dt));
                FREE(p, m, v, unused0, p0, gp, gm, gv, op, om, ov);
                dev_free_all();
            }
    calls_ok("lion/adagrad");
}

/* ---- argument checks --------------------------------------------------------------- */

static void test_errors(void)
{
    const sg_dtype bad = SG_I32;
    float *b = dev_alloc(4096); // large enough for every call below
    int32_t *ib = dev_alloc(4096);
    double *db = dev_alloc(64);
    sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
    int r[24], i = 0;
    r[i++] = sg_cu_cast(&g_cu, b, bad, b, SG_F32, 4);
    r[i++] = sg_cu_cast(&g_cu, b, SG_F32, b, bad, 4);
    r[i++] = sg_cu_add_into(&g_cu, b, b, bad, 4);
    const float *parts[SG_CU_GRAD_SUM_MAX + 1];
    for (int t = 0; t <= SG_CU_GRAD_SUM_MAX; t++)
        parts[t] = b;
    r[i++] = sg_cu_grad_sum(&g_cu, b, bad, parts, 2, 4, 0);
    r[i++] = sg_cu_embedding_forward(&g_cu, b, ib, b, bad, 2, 4, 4);
    r[i++] = sg_cu_embedding_backward(&g_cu, b, ib, b, bad, 2, 4, 4);
    r[i++] = sg_cu_rmsnorm_forward(&g_cu, b, b, b, b, bad, 2, 4, 1e-5f);
    r[i++] = sg_cu_rmsnorm_backward(&g_cu, b, b, b, b, b, b, bad, 2, 4, b);
    r[i++] = sg_cu_rope_forward(&g_cu, b, b, b, b, bad, 1, 2, 1, 4);
    r[i++] = sg_cu_rope_backward(&g_cu, b, b, b, b, bad, 1, 2, 1, 4);
    r[i++] = sg_cu_swiglu_forward(&g_cu, b, b, b, bad, 2, 4);
    r[i++] = sg_cu_swiglu_backward(&g_cu, b, b, b, b, b, bad, 2, 4);
    r[i++] = sg_cu_cross_entropy_forward(&g_cu, b, b, b, ib, bad, 2, 4, b);
    r[i++] = sg_cu_cross_entropy_backward(&g_cu, b, b, b, ib, bad, 2, 4, 1.0f, NULL, b);
    r[i++] = sg_cu_grad_norm_accumulate(&g_cu, db, ib, b, bad, 4);
    r[i++] = sg_cu_adam_step(&g_cu, &prm, 1, b, b, bad, b, b, 4, NULL, NULL, 0.0);
    int nbad = 0;
    for (int j = 0; j < i; j++)
        nbad += r[j] != SG_EINVAL;
    ok(nbad == 0, "errors: a non-float dtype gives SG_EINVAL (%d of %d calls do not)", nbad, i);

    i = 0;
    r[i++] = sg_cu_rmsnorm_forward(&g_cu, b, b, b, b, SG_F32, 2, 0, 1e-5f);       // C = 0
    r[i++] = sg_cu_rmsnorm_forward(&g_cu, b, b, b, b, SG_F32, 2, 4, -1.0f);       // eps < 0
    r[i++] = sg_cu_rmsnorm_backward(&g_cu, b, b, b, b, b, b, SG_F32, 2, 4, NULL); // no work
    r[i++] = sg_cu_rope_forward(&g_cu, b, b, b, b, SG_F32, 1, 2, 1, 5);           // odd D
    r[i++] = sg_cu_cross_entropy_forward(&g_cu, b, b, b, ib, SG_F32, 2, 0, b);    // V = 0
    r[i++] = sg_cu_cross_entropy_backward(&g_cu, b, b, b, ib, SG_F32, 2, 4, 1.0f, NULL, NULL);
    r[i++] = sg_cu_embedding_forward(&g_cu, b, ib, b, SG_F32, 2, 0, 4);               // V = 0
    r[i++] = sg_cu_adam_step(&g_cu, &prm, 0, b, b, SG_F32, b, b, 4, NULL, NULL, 0.0); // t = 0
    prm.beta1 = 1.0f;
    r[i++] = sg_cu_adam_step(&g_cu, &prm, 1, b, b, SG_F32, b, b, 4, NULL, NULL, 0.0);
    prm.beta1 = 0.9f;
    r[i++] = sg_cu_grad_sum(&g_cu, b, SG_F32, parts, 0, 4, 0);                      // no partial
    r[i++] = sg_cu_grad_sum(&g_cu, b, SG_F32, parts, SG_CU_GRAD_SUM_MAX + 1, 4, 0); // too many
    nbad = 0;
    for (int j = 0; j < i; j++)
        nbad += r[j] != SG_EINVAL;
    ok(nbad == 0,
       "errors: C = 0, eps < 0, dw without work, odd D, V = 0, no work, t = 0, "
       "beta1 = 1, grad_sum of 0 or too many partials give SG_EINVAL (%d of %d calls do not)",
       nbad, i);

    /* empty tensors: valid, nothing queued */
    i = 0;
    r[i++] = sg_cu_cast(&g_cu, NULL, SG_BF16, NULL, SG_F32, 0);
    r[i++] = sg_cu_add_into(&g_cu, NULL, NULL, SG_F32, 0);
    r[i++] = sg_cu_grad_sum(&g_cu, NULL, SG_F32, parts, 1, 0, 1);
    r[i++] = sg_cu_embedding_forward(&g_cu, NULL, NULL, NULL, SG_F32, 0, 4, 4);
    r[i++] = sg_cu_embedding_backward(&g_cu, NULL, NULL, NULL, SG_F32, 0, 4, 4);
    r[i++] = sg_cu_rmsnorm_forward(&g_cu, NULL, NULL, NULL, NULL, SG_F32, 0, 4, 1e-5f);
    r[i++] = sg_cu_rmsnorm_backward(&g_cu, NULL, NULL, NULL, NULL, NULL, NULL, SG_F32, 0, 4, NULL);
    r[i++] = sg_cu_rope_forward(&g_cu, NULL, NULL, NULL, NULL, SG_F32, 0, 2, 1, 4);
    r[i++] = sg_cu_rope_backward(&g_cu, NULL, NULL, NULL, NULL, SG_F32, 1, 0, 1, 4);
    r[i++] = sg_cu_swiglu_forward(&g_cu, NULL, NULL, NULL, SG_F32, 0, 4);
    r[i++] = sg_cu_swiglu_backward(&g_cu, NULL, NULL, NULL, NULL, NULL, SG_F32, 3, 0);
    r[i++] =
        sg_cu_cross_entropy_backward(&g_cu, NULL, NULL, NULL, NULL, SG_F32, 0, 4, 1.0f, NULL, NULL);
    r[i++] = sg_cu_grad_norm_accumulate(&g_cu, db, ib, NULL, SG_F32, 0);
    r[i++] = sg_cu_adam_step(&g_cu, &prm, 1, NULL, NULL, SG_F32, NULL, NULL, 0, NULL, NULL, 0.0);
    nbad = 0;
    for (int j = 0; j < i; j++)
        nbad += r[j] != SG_OK;
    ok(nbad == 0 && sg_cu_sync(&g_cu) == SG_OK,
       "errors: empty tensors are valid no-ops (%d of %d calls fail)", nbad, i);
    dev_free_all();
}

/* The MoE and sink kernels (moe.cu, attention.cu) refuse bad sizes and
 * missing buffers, and treat empty inputs as no-ops. Their numerics are
 * checked against PyTorch by tests/test_cuda_vs_torch.sh and, composed, by
 * tests/test_cuda_block.c. */
static void test_moe_errors(void)
{
    float *b = dev_alloc(1 << 16);
    int32_t *ib = dev_alloc(4096);
    const sg_dtype bad = SG_I32;
    int r[32], i = 0;
    r[i++] = sg_cu_moe_router_forward(&g_cu, b, b, b, b, b, b, SG_F32, 4, 8, 4, 5, 1); // K > E
    r[i++] = sg_cu_moe_router_forward(&g_cu, b, b, b, b, b, b, SG_F32, 4, 8, 4, 0, 1); // K = 0
    r[i++] = sg_cu_moe_router_forward(&g_cu, b, b, b, b, b, b, bad, 4, 8, 4, 2, 1);
    r[i++] = sg_cu_moe_oss_router_forward(&g_cu, b, b, b, b, b, b, NULL, SG_F32, 4, 8, 4, 2);
    r[i++] = sg_cu_moe_router_backward(&g_cu, b, b, b, b, b, b, b, NULL, 0.0, NULL, b, b, SG_F32, 4,
                                       8, 4, 2, 1, NULL); // no work
    r[i++] = sg_cu_moe_oss_router_backward(&g_cu, b, b, b, b, b, b, b, b, NULL, 0.0, NULL, b, b,
                                           SG_F32, 4, 8, 4, 8, b); // K > E
    r[i++] = sg_cu_moe_stats_add(&g_cu, b, b, b, 4, 0, 2);         // E = 0
    r[i++] = sg_cu_moe_aux_loss(&g_cu, b, b, 4, 0, 4);             // L = 0
    r[i++] = sg_cu_moe_expert_slots(&g_cu, ib, ib, b, 4, 2, 3, 1); // e1 < e0
    r[i++] = sg_cu_moe_expert_forward(&g_cu, b, b, b, b, ib, NULL, 2, b, b, NULL, SG_F32, 8, 4, 2,
                                      b); // out without Wd
    r[i++] = sg_cu_moe_expert_forward(&g_cu, b, b, NULL, b, ib, NULL, 2, b, b, b, SG_F32, 8, 4, 0,
                                      b); // K = 0
    r[i++] = sg_cu_moe_expert_backward(&g_cu, b, b, b, b, b, b, b, b, b, b, ib, NULL, 2, b, b, b,
                                       SG_F32, 8, 4, 2, NULL); // no work
    r[i++] = sg_cu_moe_oss_expert_forward(&g_cu, b, b, b, b, ib, NULL, 2, b, NULL, b, b, SG_F32, 8,
                                          4, 2, b); // no gate_up bias
    r[i++] = sg_cu_moe_oss_expert_backward(&g_cu, b, b, b, b, b, b, b, b, b, b, b, ib, NULL, 2, b,
                                           b, NULL, SG_F32, 8, 4, 2, b); // no down bias
    r[i++] = sg_cu_oss_glu_forward(&g_cu, b, b, b, bad, 2, 4);
    r[i++] = sg_cu_moe_combine_forward(&g_cu, b, b, NULL, b, SG_F32, 4, 8, 2);
    r[i++] = sg_cu_moe_slots_sum(&g_cu, b, (const void *const *)b, SG_F32, 4, 8, 0); // K = 0
    r[i++] = sg_cu_attention_sinks_forward(&g_cu, b, b, NULL, SG_F32, 1, 4, 2, 8);
    r[i++] = sg_cu_attention_sinks_backward(&g_cu, b, b, b, b, b, SG_F32, 1, 4, 2, 0); // D = 0
    int nbad = 0;
    for (int j = 0; j < i; j++)
        nbad += r[j] != SG_EINVAL;
    ok(nbad == 0,
       "moe errors: k > E, k = 0, bad dtype, missing bias, work or weights, E = 0, "
       "L = 0, e1 < e0, D = 0 give SG_EINVAL (%d of %d calls do not)",
       nbad, i);

    /* empty: no tokens, an expert without slots, no experts in a range */
    i = 0;
    r[i++] = sg_cu_moe_router_forward(&g_cu, b, b, b, b, b, b, SG_F32, 0, 8, 4, 2, 1);
    r[i++] = sg_cu_moe_expert_slots(&g_cu, ib, ib, b, 4, 2, 3, 3);
    r[i++] = sg_cu_moe_expert_forward(&g_cu, b, b, b, b, ib, NULL, 0, b, b, b, SG_F32, 8, 4, 2, b);
    r[i++] = sg_cu_moe_expert_backward(&g_cu, b, b, b, b, b, b, b, b, b, b, ib, NULL, 0, b, b, b,
                                       SG_F32, 8, 4, 2, b);
    r[i++] = sg_cu_moe_oss_expert_backward(&g_cu, b, b, b, b, b, b, b, b, b, b, b, ib, NULL, 0, b,
                                           b, b, SG_F32, 8, 4, 2, b);
    r[i++] = sg_cu_moe_scatter_slots(&g_cu, b, b, ib, 0);
    r[i++] = sg_cu_moe_slot_rows(&g_cu, (const void **)b, ib, 0, b, 32);
    r[i++] = sg_cu_attention_sinks_forward(&g_cu, b, b, b, SG_F32, 0, 4, 2, 8);
    nbad = 0;
    for (int j = 0; j < i; j++)
        nbad += r[j] != SG_OK;
    ok(nbad == 0 && sg_cu_sync(&g_cu) == SG_OK,
       "moe errors: no tokens, no slots, an empty expert range are valid no-ops (%d of %d "
       "calls fail)",
       nbad, i);
    dev_free_all();
}

int main(void)
{
    g_rng = 0x5eedc0ffee123457ull;
    if (sg_cu_device_count() == 0)
        return tap_plan_skip_all("no CUDA device");
    g_emulated = sg_cu_is_emulated();
    tap_diag("%s", g_emulated ? "emulated build: the kernels run on the CPU emulator"
                              : "real build: the kernels run on a CUDA device");
    if (sg_cu_open(&g_cu))
        bail("sg_cu_open failed");

    test_cast();
    test_add_into();
    test_grad_sum();
    test_embedding();
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_cross_entropy();
    test_grad_norm();
    test_adam();
    test_lion_adagrad();
    test_errors();
    test_moe_errors();

    sg_cu_close(&g_cu);
    return tap_done();
}
