/* test_cpu_ops.c - the CPU kernels of codelets/cpu/ops.h against PyTorch.
 *
 * Every op runs on random inputs (fixed seed) and its forward and backward
 * are compared with PyTorch fp32 autograd (tests/torch_ops_ref.py, run with
 * the system interpreter $SYSTEM_PYTHON, default /usr/bin/python3, where
 * Debian's python3-torch lives). The exchange goes through raw little-endian
 * files in a temporary directory: this program writes the inputs and the
 * upstream gradients of every case, runs the reference once for all of them,
 * then runs the kernels and compares. Tolerance: norm-wise relative error
 * ||got - want|| / ||want|| <= 1e-5; the maximum absolute error is printed
 * too. Some properties that need no reference (accumulation, in-place calls,
 * error returns, round trips) are checked directly.
 *
 * Weight gradients start from random values and input gradients from NaN,
 * so a kernel that overwrites an accumulator, or skips part of an output,
 * fails. Without python3 + torch the program skips (TAP "1..0 # SKIP").
 * Set SG_KEEP_TMP=1 to keep the directory (it is also kept on failure).
 * As ops.h asks of every caller, OpenBLAS is pinned to one thread.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cblas.h>

#include "codelets/cpu/blas_core.h"
#include "codelets/cpu/ops.h"
#include "common/error.h"
#include "tests/tap.h"
#include "tests/test_util.h"

#define TOL 1e-5
#define MAX_CASES 32

static char g_root[4096]; /* the temporary directory */

/* ---- random numbers (splitmix64, fixed seed) ------------------------------------ */

static float *randn(size_t n, float scale)
{
    float *p = alloc_f32(n);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * rng_normal();
    return p;
}

/* ---- files ---------------------------------------------------------------------- */

typedef struct tcase {
    const char *op;   /* torch_ops_ref.py op */
    const char *name; /* directory and test-name prefix */
    char dir[4200];
    size_t B, T, Hq, Hkv, D, W, N, C, V, F, in, out, bias;
    double eps, theta, dloss;
    void (*check)(struct tcase *);
} tcase;

static tcase g_cases[MAX_CASES];
static int g_ncases;

static int write_raw(const tcase *c, const char *file, const void *p, size_t bytes)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = bytes ? fwrite(p, 1, bytes, f) : 0;
    int rc = fclose(f);
    return w == bytes && rc == 0 ? 0 : -1;
}

/* Reads exactly `bytes` from DIR/file; NULL (with a diagnostic) otherwise. */
static void *read_raw(const tcase *c, const char *file, size_t bytes)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    FILE *f = fopen(path, "rb");
    if (!f) {
        tap_diag("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    void *p = malloc(bytes + 1);
    size_t r = p ? fread(p, 1, bytes + 1, f) : 0;
    fclose(f);
    if (!p || r != bytes) {
        tap_diag("%s: %zu bytes, expected %zu", path, r, bytes);
        free(p);
        return NULL;
    }
    return p;
}

static void put_f32(const tcase *c, const char *name, const float *p, size_t n)
{
    char file[256];
    snprintf(file, sizeof file, "%s.f32", name);
    if (write_raw(c, file, p, n * sizeof *p)) {
        printf("Bail out! cannot write %s/%s\n", c->dir, file);
        exit(1);
    }
}

static void put_raw(const tcase *c, const char *file, const void *p, size_t bytes)
{
    if (write_raw(c, file, p, bytes)) {
        printf("Bail out! cannot write %s/%s\n", c->dir, file);
        exit(1);
    }
}

static float *get_f32(const tcase *c, const char *name, size_t n)
{
    char file[256];
    snprintf(file, sizeof file, "%s.f32", name);
    return read_raw(c, file, n * sizeof(float));
}

static double *get_f64(const tcase *c, const char *name, size_t n)
{
    char file[256];
    snprintf(file, sizeof file, "%s.f64", name);
    return read_raw(c, file, n * sizeof(double));
}

/* Registers a case: makes its directory and writes args.txt from the fields. */
static tcase *new_case(const char *op, const char *name, void (*check)(tcase *), tcase proto)
{
    if (g_ncases == MAX_CASES) {
        printf("Bail out! too many cases\n");
        exit(1);
    }
    tcase *c = &g_cases[g_ncases++];
    *c = proto;
    c->op = op;
    c->name = name;
    c->check = check;
    snprintf(c->dir, sizeof c->dir, "%s/%s", g_root, name);
    if (mkdir(c->dir, 0700)) {
        printf("Bail out! mkdir %s: %s\n", c->dir, strerror(errno));
        exit(1);
    }
    char args[1024];
    int len = snprintf(args, sizeof args,
                       "B %zu\nT %zu\nHq %zu\nHkv %zu\nD %zu\nW %zu\nH %zu\nN %zu\nC %zu\n"
                       "V %zu\nF %zu\nin %zu\nout %zu\nbias %zu\neps %.17g\ntheta %.17g\n"
                       "dloss %.17g\n",
                       c->B, c->T, c->Hq, c->Hkv, c->D, c->W, c->Hq, c->N, c->C, c->V, c->F, c->in,
                       c->out, c->bias, c->eps, c->theta, c->dloss);
    put_raw(c, "args.txt", args, (size_t)len);
    return c;
}

static void add_arg(const tcase *c, const char *key, double value)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/args.txt", c->dir);
    FILE *f = fopen(path, "a");
    if (!f || fprintf(f, "%s %.17g\n", key, value) < 0 || fclose(f)) {
        printf("Bail out! cannot write %s\n", path);
        exit(1);
    }
}

/* ---- comparison ---------------------------------------------------------------- */

/* ok() if ||got - want|| <= tol ||want|| (norm-wise, in double); prints the
 * relative error and the largest absolute error with its index. */
static int cmp_f32(const float *got, const float *want, size_t n, double tol, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int cmp_f32(const float *got, const float *want, size_t n, double tol, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!got || !want) {
        ok(0, "%s (no data)", what);
        return 0;
    }
    double num = 0.0, den = 0.0, maxabs = 0.0;
    size_t imax = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)want[i];
        num += d * d;
        den += (double)want[i] * want[i];
        if (!(fabs(d) <= maxabs)) { /* also catches NaN */
            maxabs = fabs(d);
            imax = i;
        }
    }
    double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    int good = rel <= tol; /* false for NaN */
    ok(good, "%s: rel err %.2e, max abs err %.2e", what, rel, maxabs);
    if (!good)
        tap_diag("  at [%zu]: got %.9g, want %.9g (norm of want %.3g)", imax, got[imax], want[imax],
                 sqrt(den));
    return good;
}

/* a + b elementwise, for "initial accumulator + reference gradient". */
static float *sum_f32(const float *a, const float *b, size_t n)
{
    if (!a || !b)
        return NULL;
    float *p = alloc_f32(n);
    for (size_t i = 0; i < n; i++)
        p[i] = a[i] + b[i];
    return p;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#define FREE(...)                                                  \
    do {                                                           \
        void *ps_[] = {__VA_ARGS__};                               \
        for (size_t i_ = 0; i_ < sizeof ps_ / sizeof ps_[0]; i_++) \
            free(ps_[i_]);                                         \
    } while (0)

/* ---- embedding ------------------------------------------------------------------ */

static void check_embedding(tcase *c)
{
    size_t N = c->N, V = c->V, C = c->C;
    int32_t *tok = read_raw(c, "tokens.i32", N * sizeof *tok);
    float *table = get_f32(c, "table", V * C), *dout = get_f32(c, "dout", N * C);
    float *dt0 = get_f32(c, "dtable0", V * C);
    float *want_out = get_f32(c, "out", N * C), *want_dt = get_f32(c, "dtable", V * C);
    if (!tok || !table || !dout || !dt0) {
        ok(0, "%s: inputs", c->name);
        return;
    }
    float *out = nans(N * C), *dt = dup_f32(dt0, V * C);
    is_int(sg_embedding_forward(out, tok, table, N, V, C), 0, "%s: forward returns 0", c->name);
    cmp_f32(out, want_out, N * C, TOL, "%s: out", c->name);
    is_int(sg_embedding_backward(dt, tok, dout, N, V, C), 0, "%s: backward returns 0", c->name);
    float *want = sum_f32(dt0, want_dt, V * C);
    cmp_f32(dt, want, V * C, TOL, "%s: dtable accumulates (dtable0 + torch)", c->name);

    /* An id out of range is refused and nothing is written. */
    int32_t saved = tok[N / 2];
    float *before = dup_f32(out, N * C), *dt_before = dup_f32(dt, V * C);
    tok[N / 2] = (int32_t)V;
    int rc1 = sg_embedding_forward(out, tok, table, N, V, C);
    int rc2 = sg_embedding_backward(dt, tok, dout, N, V, C);
    tok[N / 2] = -1;
    int rc3 = sg_embedding_forward(out, tok, table, N, V, C);
    tok[N / 2] = saved;
    ok(rc1 == SG_EINVAL && rc2 == SG_EINVAL && rc3 == SG_EINVAL &&
           !memcmp(before, out, N * C * sizeof *out) && !memcmp(dt_before, dt, V * C * sizeof *dt),
       "%s: ids V and -1 give SG_EINVAL and write nothing", c->name);
    FREE(tok, table, dout, dt0, want_out, want_dt, out, dt, want, before, dt_before);
}

static void prep_embedding(void)
{
    tcase *c =
        new_case("embedding", "embedding", check_embedding, (tcase){.N = 37, .V = 50, .C = 24});
    int32_t tok[37];
    for (size_t n = 0; n < c->N; n++)
        tok[n] = (int32_t)(rng_u64() % c->V);
    tok[9] = tok[3] = tok[0]; /* repeated ids: the backward must sum them */
    tok[20] = 0;
    tok[21] = (int32_t)c->V - 1;
    put_raw(c, "tokens.i32", tok, sizeof tok);
    float *table = randn(c->V * c->C, 1.0f), *dout = randn(c->N * c->C, 1.0f);
    float *dt0 = randn(c->V * c->C, 1.0f);
    put_f32(c, "table", table, c->V * c->C);
    put_f32(c, "dout", dout, c->N * c->C);
    put_f32(c, "dtable0", dt0, c->V * c->C);
    FREE(table, dout, dt0);
}

/* ---- RMSNorm (and Qwen3's QK-norm) ------------------------------------------ */

static void check_rmsnorm(tcase *c)
{
    int qk = !strcmp(c->op, "qknorm");
    size_t N = qk ? c->B * c->T * c->Hq : c->N, C = qk ? c->D : c->C;
    float *x = get_f32(c, "x", N * C), *w = get_f32(c, "w", C), *dout = get_f32(c, "dout", N * C);
    float *dw0 = get_f32(c, "dw0", C);
    float *want_out = get_f32(c, "out", N * C), *want_dx = get_f32(c, "dx", N * C);
    float *want_dw = get_f32(c, "dw", C);
    float *want_rstd = qk ? NULL : get_f32(c, "rstd", N);
    if (!x || !w || !dout || !dw0) {
        ok(0, "%s: inputs", c->name);
        return;
    }
    float *out = nans(N * C), *rstd = nans(N), *dx = nans(N * C), *dw = dup_f32(dw0, C);
    is_int(sg_rmsnorm_forward(out, rstd, x, w, N, C, (float)c->eps), 0, "%s: forward returns 0",
           c->name);
    cmp_f32(out, want_out, N * C, TOL, "%s: out (rows of %zu)", c->name, C);
    if (!qk)
        cmp_f32(rstd, want_rstd, N, TOL, "%s: rstd", c->name);
    is_int(sg_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C), 0, "%s: backward returns 0",
           c->name);
    cmp_f32(dx, want_dx, N * C, TOL, "%s: dx", c->name);
    float *want = sum_f32(dw0, want_dw, C);
    cmp_f32(dw, want, C, TOL, "%s: dw accumulates", c->name);
    FREE(x, w, dout, dw0, want_out, want_dx, want_dw, want_rstd, out, rstd, dx, dw, want);
}

static void prep_rmsnorm_data(tcase *c, size_t N, size_t C)
{
    float *x = randn(N * C, 3.0f), *w = randn(C, 0.2f), *dout = randn(N * C, 1.0f);
    float *dw0 = randn(C, 1.0f);
    for (size_t i = 0; i < C; i++)
        w[i] += 1.0f;
    for (size_t i = 0; i < C; i++) /* one row of large values, one tiny */
        x[C + i] *= 1000.0f, x[2 * C + i] *= 1e-3f;
    put_f32(c, "x", x, N * C);
    put_f32(c, "w", w, C);
    put_f32(c, "dout", dout, N * C);
    put_f32(c, "dw0", dw0, C);
    FREE(x, w, dout, dw0);
}

static void prep_rmsnorm(void)
{
    tcase *c =
        new_case("rmsnorm", "rmsnorm", check_rmsnorm, (tcase){.N = 34, .C = 64, .eps = 1e-5});
    prep_rmsnorm_data(c, c->N, c->C);
    /* Qwen3 QK-norm: the same kernel over rows of head_dim, weight (D). */
    c = new_case("qknorm", "qknorm", check_rmsnorm,
                 (tcase){.B = 2, .T = 17, .Hq = 4, .D = 16, .eps = 1e-6});
    prep_rmsnorm_data(c, c->B * c->T * c->Hq, c->D);
}

/* ---- rotary embedding ------------------------------------------------------------ */

static void check_rope_table(tcase *c)
{
    int llama3 = strstr(c->name, "llama3") != NULL;
    size_t n = c->T * (c->D / 2);
    float *want_cos = get_f32(c, "cos", n), *want_sin = get_f32(c, "sin", n);
    float *cs = nans(n), *sn = nans(n);
    int rc = llama3 ? sg_rope_table_llama3(c->T, c->D, c->theta, 8.0, 1.0, 4.0, 8192.0, cs, sn)
                    : sg_rope_table(c->T, c->D, c->theta, cs, sn);
    is_int(rc, 0, "%s: returns 0", c->name);
    /* Both sides compute in double: only the last float rounding may differ. */
    cmp_f32(cs, want_cos, n, 1e-6, "%s: cos (T=%zu, D=%zu)", c->name, c->T, c->D);
    cmp_f32(sn, want_sin, n, 1e-6, "%s: sin", c->name);
    if (llama3) {
        /* The scaling must change the low frequencies and keep the highest. */
        float *pc = nans(n), *ps = nans(n);
        sg_rope_table(c->T, c->D, c->theta, pc, ps);
        size_t half = c->D / 2, t = c->T - 1;
        size_t lo = t * half + half - 1; /* lowest frequency at the last position */
        ok(pc[t * half] == cs[t * half] && fabsf(ps[lo] - sn[lo]) > 1e-3f,
           "%s: highest frequency unchanged, lowest scaled", c->name);
        FREE(pc, ps);
    }
    float dummy[2];
    ok(sg_rope_table(4, 7, 1e4, dummy, dummy) == SG_EINVAL &&
           sg_rope_table_llama3(4, 8, 1e4, 8.0, 4.0, 1.0, 8192.0, dummy, dummy) == SG_EINVAL,
       "%s: odd D, high_freq_factor <= low_freq_factor give SG_EINVAL", c->name);
    FREE(want_cos, want_sin, cs, sn);
}

/* YaRN (GPT-OSS) against the published formula written in the reference. */
static void check_rope_table_yarn(tcase *c)
{
    size_t n = c->T * (c->D / 2);
    int truncate = strstr(c->name, "trunc") != NULL;
    float *want_cos = get_f32(c, "cos", n), *want_sin = get_f32(c, "sin", n);
    float *cs = nans(n), *sn = nans(n);
    const double att = 0.1 * log(32.0) + 1.0;
    int rc =
        sg_rope_table_yarn(c->T, c->D, c->theta, 32.0, 32.0, 1.0, 4096.0, truncate, att, cs, sn);
    is_int(rc, 0, "%s: returns 0", c->name);
    cmp_f32(cs, want_cos, n, 1e-6, "%s: cos (T=%zu, D=%zu)", c->name, c->T, c->D);
    cmp_f32(sn, want_sin, n, 1e-6, "%s: sin", c->name);
    float dummy[2];
    ok(sg_rope_table_yarn(4, 8, 1e4, 32.0, 32.0, 1.0, 4096.0, 0, 0.0, dummy, dummy) == SG_EINVAL,
       "%s: an attention factor of 0 gives SG_EINVAL", c->name);
    FREE(want_cos, want_sin, cs, sn);
}

static void prep_rope_table(void)
{
    tcase *c = new_case("rope_table", "rope_table", check_rope_table,
                        (tcase){.T = 300, .D = 16, .theta = 10000.0});
    add_arg(c, "llama3", 0);
    /* Long positions: the angle is computed in double. */
    c = new_case("rope_table", "rope_table_long", check_rope_table,
                 (tcase){.T = 8200, .D = 128, .theta = 500000.0});
    add_arg(c, "llama3", 0);
    /* Llama-3.1: all three frequency bands occur with D = 128, theta = 5e5. */
    c = new_case("rope_table", "rope_table_llama3", check_rope_table,
                 (tcase){.T = 2048, .D = 128, .theta = 500000.0});
    add_arg(c, "llama3", 1);
    add_arg(c, "factor", 8.0);
    add_arg(c, "low", 1.0);
    add_arg(c, "high", 4.0);
    add_arg(c, "orig", 8192.0);
    /* GPT-OSS-20B's YaRN (D 64, theta 1.5e5, factor 32, original context
     * 4096): the ramp runs over dimensions 8 to 17, truncated or not */
    for (int tr = 0; tr < 2; tr++) {
        c = new_case("rope_table_yarn", tr ? "rope_table_yarn_trunc" : "rope_table_yarn",
                     check_rope_table_yarn, (tcase){.T = 300, .D = 64, .theta = 150000.0});
        add_arg(c, "factor", 32.0);
        add_arg(c, "orig", 4096.0);
        add_arg(c, "truncate", tr);
    }
}

static void check_rope(tcase *c)
{
    size_t B = c->B, T = c->T, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    size_t nq = B * T * Hq * D, nk = B * T * Hkv * D;
    float *q = get_f32(c, "q", nq), *k = get_f32(c, "k", nk);
    float *dqo = get_f32(c, "dq_out", nq), *dko = get_f32(c, "dk_out", nk);
    float *want_q = get_f32(c, "q_out", nq), *want_k = get_f32(c, "k_out", nk);
    float *want_dq = get_f32(c, "dq", nq), *want_dk = get_f32(c, "dk", nk);
    if (!q || !k || !dqo || !dko) {
        ok(0, "%s: inputs", c->name);
        return;
    }
    float *cs = alloc_f32(T * D / 2), *sn = alloc_f32(T * D / 2);
    sg_rope_table(T, D, c->theta, cs, sn);
    float *qo = nans(nq), *ko = dup_f32(k, nk), *dq = nans(nq), *dk = dup_f32(dko, nk);
    int rc =
        sg_rope_forward(qo, q, cs, sn, B, T, Hq, D) | sg_rope_forward(ko, ko, cs, sn, B, T, Hkv, D);
    is_int(rc, 0, "%s: forward returns 0", c->name);
    cmp_f32(qo, want_q, nq, TOL, "%s: q out (D=%zu)", c->name, D);
    cmp_f32(ko, want_k, nk, TOL, "%s: k out, in place", c->name);
    rc = sg_rope_backward(dq, dqo, cs, sn, B, T, Hq, D) |
         sg_rope_backward(dk, dk, cs, sn, B, T, Hkv, D);
    is_int(rc, 0, "%s: backward returns 0", c->name);
    cmp_f32(dq, want_dq, nq, TOL, "%s: dq", c->name);
    cmp_f32(dk, want_dk, nk, TOL, "%s: dk, in place", c->name);
    FREE(q, k, dqo, dko, want_q, want_k, want_dq, want_dk, cs, sn, qo, ko, dq, dk);
}

static void prep_rope(void)
{
    tcase *c = new_case("rope", "rope", check_rope,
                        (tcase){.B = 2, .T = 17, .Hq = 4, .Hkv = 2, .D = 16, .theta = 10000.0});
    float *x;
    size_t nq = c->B * c->T * c->Hq * c->D, nk = c->B * c->T * c->Hkv * c->D;
    put_f32(c, "q", x = randn(nq, 1.0f), nq), free(x);
    put_f32(c, "k", x = randn(nk, 1.0f), nk), free(x);
    put_f32(c, "dq_out", x = randn(nq, 1.0f), nq), free(x);
    put_f32(c, "dk_out", x = randn(nk, 1.0f), nk), free(x);
    /* D/2 = 80 pairs: more than one of the kernel's 64-pair chunks. */
    c = new_case("rope", "rope_d160", check_rope,
                 (tcase){.B = 1, .T = 9, .Hq = 2, .Hkv = 1, .D = 160, .theta = 1000000.0});
    nq = c->B * c->T * c->Hq * c->D, nk = c->B * c->T * c->Hkv * c->D;
    put_f32(c, "q", x = randn(nq, 1.0f), nq), free(x);
    put_f32(c, "k", x = randn(nk, 1.0f), nk), free(x);
    put_f32(c, "dq_out", x = randn(nq, 1.0f), nq), free(x);
    put_f32(c, "dk_out", x = randn(nk, 1.0f), nk), free(x);
}

/* ---- attention ----------------------------------------------------------------- */

static void check_attention(tcase *c)
{
    size_t B = c->B, T = c->T, Hq = c->Hq, Hkv = c->Hkv, D = c->D, W = c->W;
    size_t nq = B * T * Hq * D, nk = B * T * Hkv * D, nl = B * Hq * T;
    float *q = get_f32(c, "q", nq), *k = get_f32(c, "k", nk), *v = get_f32(c, "v", nk);
    float *dout = get_f32(c, "dout", nq);
    float *want_out = get_f32(c, "out", nq), *want_lse = get_f32(c, "lse", nl);
    float *want_dq = get_f32(c, "dq", nq), *want_dk = get_f32(c, "dk", nk);
    float *want_dv = get_f32(c, "dv", nk);
    if (!q || !k || !v || !dout) {
        ok(0, "%s: inputs", c->name);
        return;
    }
    float *out = nans(nq), *lse = nans(nl), *dq = nans(nq), *dk = nans(nk), *dv = nans(nk);
    char shape[128];
    snprintf(shape, sizeof shape, "B=%zu T=%zu Hq=%zu Hkv=%zu D=%zu W=%zu", B, T, Hq, Hkv, D, W);
    is_int(sg_attention_forward(out, lse, q, k, v, B, T, Hq, Hkv, D, W), 0,
           "%s: forward returns 0 (%s)", c->name, shape);
    cmp_f32(out, want_out, nq, TOL, "%s: out", c->name);
    cmp_f32(lse, want_lse, nl, TOL, "%s: lse", c->name);
    is_int(sg_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, Hq, Hkv, D, W), 0,
           "%s: backward returns 0", c->name);
    cmp_f32(dq, want_dq, nq, TOL, "%s: dq", c->name);
    cmp_f32(dk, want_dk, nk, TOL, "%s: dk (sum over the %zu heads of a group)", c->name, Hq / Hkv);
    cmp_f32(dv, want_dv, nk, TOL, "%s: dv", c->name);

    if (W > 0 && W < T) {
        /* The window must matter: the full-causal result is different. */
        float *full = nans(nq), *lfull = nans(nl);
        sg_attention_forward(full, lfull, q, k, v, B, T, Hq, Hkv, D, 0);
        double d = rel_diff(out, full, nq);
        ok(d > 1e-2, "%s: the window changes the output (rel diff %.2e from full)", c->name, d);
        /* A window of T or more is full attention, bit for bit. */
        float *wide = nans(nq), *lwide = nans(nl);
        sg_attention_forward(wide, lwide, q, k, v, B, T, Hq, Hkv, D, T + 3);
        ok(!memcmp(wide, full, nq * sizeof *wide) && !memcmp(lwide, lfull, nl * sizeof *lwide),
           "%s: window >= T equals full attention", c->name);
        FREE(full, lfull, wide, lwide);
    }
    if (W == 0 && T > 1) {
        /* Window 1: each query sees only itself: out = v of its kv head, dq = 0,
         * dv = the group's summed dout, dk = 0. */
        float *o1 = nans(nq), *l1 = nans(nl), *dq1 = nans(nq), *dk1 = nans(nk), *dv1 = nans(nk);
        sg_attention_forward(o1, l1, q, k, v, B, T, Hq, Hkv, D, 1);
        sg_attention_backward(dq1, dk1, dv1, dout, q, k, v, o1, l1, B, T, Hq, Hkv, D, 1);
        double e_out = 0.0, e_dv = 0.0, e_zero = 0.0;
        size_t rep = Hq / Hkv;
        for (size_t bt = 0; bt < B * T; bt++)
            for (size_t g = 0; g < Hkv; g++)
                for (size_t d = 0; d < D; d++) {
                    double s = 0.0, vv = v[(bt * Hkv + g) * D + d];
                    for (size_t r = 0; r < rep; r++) {
                        size_t iq = (bt * Hq + g * rep + r) * D + d;
                        e_out = fmax(e_out, fabs(o1[iq] - vv));
                        e_zero = fmax(e_zero, fabs(dq1[iq]));
                        s += dout[iq];
                    }
                    e_dv = fmax(e_dv, fabs(dv1[(bt * Hkv + g) * D + d] - s));
                    e_zero = fmax(e_zero, fabs(dk1[(bt * Hkv + g) * D + d]));
                }
        /* dk is scale * (dP - delta) q with dP = delta only up to rounding */
        ok(e_out <= 1e-6 && e_dv <= 1e-5 && e_zero <= 1e-5,
           "%s: window 1 gives out = v, dv = group sum of dout, dq = dk = 0 "
           "(max errs %.1e %.1e %.1e)",
           c->name, e_out, e_dv, e_zero);
        FREE(o1, l1, dq1, dk1, dv1);
    }
    FREE(q, k, v, dout, want_out, want_lse, want_dq, want_dk, want_dv, out, lse, dq, dk, dv);
}

static void prep_attention_case(const char *name, tcase shape)
{
    tcase *c = new_case("attention", name, check_attention, shape);
    size_t nq = c->B * c->T * c->Hq * c->D, nk = c->B * c->T * c->Hkv * c->D;
    float *x;
    put_f32(c, "q", x = randn(nq, 1.0f), nq), free(x);
    put_f32(c, "k", x = randn(nk, 1.0f), nk), free(x);
    put_f32(c, "v", x = randn(nk, 1.0f), nk), free(x);
    put_f32(c, "dout", x = randn(nq, 1.0f), nq), free(x);
}

static void prep_attention(void)
{
    prep_attention_case("attention", (tcase){.B = 2, .T = 17, .Hq = 4, .Hkv = 2, .D = 16});
    prep_attention_case("attention_window",
                        (tcase){.B = 2, .T = 17, .Hq = 4, .Hkv = 2, .D = 16, .W = 5});
    /* T = 300: several 64-query and 64-key tiles, the last one partial. */
    prep_attention_case("attention_long_mqa",
                        (tcase){.B = 1, .T = 300, .Hq = 4, .Hkv = 1, .D = 32});
    /* A window of 70 across tiles: some key tiles partly, some fully hidden. */
    prep_attention_case("attention_long_window",
                        (tcase){.B = 2, .T = 300, .Hq = 4, .Hkv = 2, .D = 16, .W = 70});
}

/* ---- SwiGLU ---------------------------------------------------------------------- */

static void check_swiglu(tcase *c)
{
    size_t n = c->N * c->F;
    float *gate = get_f32(c, "gate", n), *up = get_f32(c, "up", n), *dh = get_f32(c, "dh", n);
    float *want_h = get_f32(c, "h", n), *want_dg = get_f32(c, "dgate", n);
    float *want_du = get_f32(c, "dup", n);
    if (!gate || !up || !dh) {
        ok(0, "%s: inputs", c->name);
        return;
    }
    float *h = nans(n), *dg = nans(n), *du = nans(n);
    is_int(sg_swiglu_forward(h, gate, up, c->N, c->F), 0, "%s: forward returns 0", c->name);
    cmp_f32(h, want_h, n, TOL, "%s: h", c->name);
    is_int(sg_swiglu_backward(dg, du, dh, gate, up, c->N, c->F), 0, "%s: backward returns 0",
           c->name);
    cmp_f32(dg, want_dg, n, TOL, "%s: dgate", c->name);
    cmp_f32(du, want_du, n, TOL, "%s: dup", c->name);
    FREE(gate, up, dh, want_h, want_dg, want_du, h, dg, du);
}

static void prep_swiglu(void)
{
    tcase *c = new_case("swiglu", "swiglu", check_swiglu, (tcase){.N = 34, .F = 48});
    size_t n = c->N * c->F;
    float *gate = randn(n, 3.0f), *up = randn(n, 1.0f), *dh = randn(n, 1.0f);
    const float extreme[] = {30.0f, -30.0f, 90.0f, -90.0f, 0.0f, -0.0f, 1e-20f, -17.5f};
    for (size_t i = 0; i < sizeof extreme / sizeof *extreme; i++)
        gate[i * 7] = extreme[i];
    put_f32(c, "gate", gate, n);
    put_f32(c, "up", up, n);
    put_f32(c, "dh", dh, n);
    FREE(gate, up, dh);
}

/* ---- linear ---------------------------------------------------------------------- */

static void check_linear(tcase *c)
{
    size_t N = c->N, in = c->in, out = c->out;
    float *x = get_f32(c, "x", N * in), *W = get_f32(c, "W", out * in);
    float *b = c->bias ? get_f32(c, "b", out) : NULL, *dy = get_f32(c, "dy", N * out);
    float *dW0 = get_f32(c, "dW0", out * in), *db0 = get_f32(c, "db0", out);
    float *want_y = get_f32(c, "y", N * out), *want_dx = get_f32(c, "dx", N * in);
    float *want_dW = get_f32(c, "dW", out * in);
    float *want_db = c->bias ? get_f32(c, "db", out) : NULL;
    if (!x || !W || !dy || !dW0 || !db0 || (c->bias && !b)) {
        ok(0, "%s: inputs", c->name);
        return;
    }
    float *y = nans(N * out), *dx = nans(N * in), *dW = dup_f32(dW0, out * in);
    float *db = dup_f32(db0, out);
    is_int(sg_linear_forward(y, x, W, b, N, in, out), 0, "%s: forward returns 0", c->name);
    cmp_f32(y, want_y, N * out, TOL, "%s: y (N=%zu in=%zu out=%zu)", c->name, N, in, out);
    is_int(sg_linear_backward(dx, dW, c->bias ? db : NULL, dy, x, W, N, in, out), 0,
           "%s: backward returns 0", c->name);
    cmp_f32(dx, want_dx, N * in, TOL, "%s: dx", c->name);
    float *w1 = sum_f32(dW0, want_dW, out * in);
    cmp_f32(dW, w1, out * in, TOL, "%s: dW accumulates", c->name);
    if (c->bias) {
        float *w2 = sum_f32(db0, want_db, out);
        cmp_f32(db, w2, out, TOL, "%s: db accumulates", c->name);
        free(w2);
    } else {
        ok(!memcmp(db, db0, out * sizeof *db), "%s: db = NULL leaves db alone", c->name);
    }
    FREE(x, W, b, dy, dW0, db0, want_y, want_dx, want_dW, want_db, y, dx, dW, db, w1);
}

static void prep_linear_case(const char *name, tcase shape)
{
    tcase *c = new_case("linear", name, check_linear, shape);
    size_t N = c->N, in = c->in, out = c->out;
    float *x;
    put_f32(c, "x", x = randn(N * in, 1.0f), N * in), free(x);
    put_f32(c, "W", x = randn(out * in, 0.1f), out * in), free(x);
    put_f32(c, "b", x = randn(out, 0.1f), out), free(x);
    put_f32(c, "dy", x = randn(N * out, 1.0f), N * out), free(x);
    put_f32(c, "dW0", x = randn(out * in, 1.0f), out * in), free(x);
    put_f32(c, "db0", x = randn(out, 1.0f), out), free(x);
}

static void prep_linear(void)
{
    prep_linear_case("linear_bias", (tcase){.N = 34, .in = 48, .out = 40, .bias = 1});
    prep_linear_case("linear", (tcase){.N = 17, .in = 64, .out = 24, .bias = 0});
}

/* ---- cross-entropy --------------------------------------------------------------- */

static void check_cross_entropy(tcase *c)
{
    size_t N = c->N, V = c->V;
    float *logits = get_f32(c, "logits", N * V);
    int32_t *tg = read_raw(c, "targets.i32", N * sizeof *tg);
    double *want_loss = get_f64(c, "loss", 2);
    float *want_lse = get_f32(c, "lse", N), *want_dl = get_f32(c, "dlogits", N * V);
    if (!logits || !tg || !want_loss) {
        ok(0, "%s: inputs", c->name);
        return;
    }
    float loss = NAN, *lse = nans(N), *dl = nans(N * V);
    int64_t count = -1;
    is_int(sg_cross_entropy_forward(&loss, &count, lse, logits, tg, N, V), 0,
           "%s: forward returns 0", c->name);
    is_int(count, (long long)want_loss[1], "%s: count of non-ignored tokens", c->name);
    is_close(loss, want_loss[0], 1e-6, "%s: mean loss %.6f", c->name, (double)loss);
    cmp_f32(lse, want_lse, N, TOL, "%s: lse", c->name);
    is_int(sg_cross_entropy_backward(dl, logits, lse, tg, N, V, (float)c->dloss, count), 0,
           "%s: backward returns 0", c->name);
    cmp_f32(dl, want_dl, N * V, TOL, "%s: dlogits (dloss %g)", c->name, c->dloss);

    /* In place (dlogits = logits) gives the same bits. */
    float *inplace = dup_f32(logits, N * V);
    sg_cross_entropy_backward(inplace, inplace, lse, tg, N, V, (float)c->dloss, count);
    ok(!memcmp(inplace, dl, N * V * sizeof *dl), "%s: in-place backward is identical", c->name);

    /* Every token ignored: count 0, loss 0, zero gradient (no NaN). */
    int32_t *ign = malloc(N * sizeof *ign);
    for (size_t n = 0; n < N; n++)
        ign[n] = -1;
    float l0 = NAN;
    int64_t c0 = -1;
    int rc = sg_cross_entropy_forward(&l0, &c0, lse, logits, ign, N, V);
    rc |= sg_cross_entropy_backward(inplace, logits, lse, ign, N, V, 1.0f, c0);
    int zero = 1;
    for (size_t i = 0; i < N * V; i++)
        zero &= inplace[i] == 0.0f;
    ok(rc == 0 && c0 == 0 && l0 == 0.0f && zero, "%s: all ignored: count 0, loss 0, dlogits 0",
       c->name);
    /* A target >= V is refused. */
    int32_t saved = tg[1];
    tg[1] = (int32_t)V;
    float lbad = 123.0f;
    int64_t cbad = 77;
    rc = sg_cross_entropy_forward(&lbad, &cbad, NULL, logits, tg, N, V);
    ok(rc == SG_EINVAL && lbad == 123.0f && cbad == 77 &&
           sg_cross_entropy_backward(inplace, logits, lse, tg, N, V, 1.0f, 1) == SG_EINVAL,
       "%s: target V gives SG_EINVAL, nothing written", c->name);
    tg[1] = saved;
    FREE(logits, tg, want_loss, want_lse, want_dl, lse, dl, inplace, ign);
}

static void prep_cross_entropy(void)
{
    tcase *c = new_case("cross_entropy", "cross_entropy", check_cross_entropy,
                        (tcase){.N = 34, .V = 1000, .dloss = 0.7});
    size_t N = c->N, V = c->V;
    float *logits = randn(N * V, 2.0f);
    int32_t tg[34];
    for (size_t n = 0; n < N; n++)
        tg[n] = (int32_t)(rng_u64() % V);
    tg[3] = -1, tg[20] = -1, tg[10] = -100; /* ignored: llm.c's -1, Hugging Face's -100 */
    for (size_t v = 0; v < V; v++)
        logits[7 * V + v] += 60.0f;        /* a shifted row: exp would overflow without the max */
    logits[8 * V + (size_t)tg[8]] = 80.0f; /* a near-certain prediction */
    tg[9] = (int32_t)V - 1;
    put_f32(c, "logits", logits, N * V);
    put_raw(c, "targets.i32", tg, sizeof tg);
    free(logits);
}

/* ---- casts ----------------------------------------------------------------------- */

#define NX32 400000

static int f32_isnan_bits(uint32_t u)
{
    return (u & 0x7fffffffu) > 0x7f800000u;
}

static void check_cast(tcase *c)
{
    uint16_t *all16 = read_raw(c, "all16.u16", 65536 * sizeof *all16);
    uint32_t *x32 = read_raw(c, "x32.u32", NX32 * sizeof *x32);
    uint32_t *w_bf_f32 = read_raw(c, "bf16_to_f32.u32", 65536 * 4);
    uint32_t *w_h_f32 = read_raw(c, "f16_to_f32.u32", 65536 * 4);
    uint16_t *w_f32_bf = read_raw(c, "f32_to_bf16.u16", NX32 * 2);
    uint16_t *w_f32_h = read_raw(c, "f32_to_f16.u16", NX32 * 2);
    if (!all16 || !x32 || !w_bf_f32 || !w_h_f32 || !w_f32_bf || !w_f32_h) {
        ok(0, "%s: data", c->name);
        return;
    }
    float *f = alloc_f32(65536);
    uint16_t *h = malloc(NX32 * sizeof *h);
    float *xf = alloc_f32(NX32);
    memcpy(xf, x32, NX32 * sizeof *xf);

    /* To fp32: every 16-bit pattern, bit for bit (NaN payloads included). */
    sg_cast_bf16_to_f32(f, all16, 65536);
    size_t bad = 0;
    for (size_t i = 0; i < 65536; i++)
        bad += memcmp(&f[i], &w_bf_f32[i], 4) != 0;
    ok(bad == 0, "%s: bf16 -> fp32, all 65536 patterns = torch (%zu differ)", c->name, bad);
    sg_cast_f16_to_f32(f, all16, 65536);
    bad = 0;
    for (size_t i = 0; i < 65536; i++)
        bad += memcmp(&f[i], &w_h_f32[i], 4) != 0;
    ok(bad == 0, "%s: fp16 -> fp32, all 65536 patterns = numpy (%zu differ)", c->name, bad);

    /* From fp32: bit for bit except NaN, which must stay a NaN of the same sign
     * (torch returns one canonical NaN, numpy keeps the payload unquieted). */
    size_t nnan = 0, bad_nan = 0;
    sg_cast_f32_to_bf16(h, xf, NX32);
    bad = 0;
    for (size_t i = 0; i < NX32; i++) {
        if (f32_isnan_bits(x32[i])) {
            nnan++;
            bad_nan += !((h[i] & 0x7fffu) > 0x7f80u && (h[i] >> 15) == (x32[i] >> 31));
        } else if (h[i] != w_f32_bf[i]) {
            if (bad++ < 5)
                tap_diag("  bf16(0x%08x): got 0x%04x, torch 0x%04x", x32[i], h[i], w_f32_bf[i]);
        }
    }
    ok(bad == 0 && bad_nan == 0,
       "%s: fp32 -> bf16, %d values = torch (%zu differ; %zu NaN, %zu not kept)", c->name, NX32,
       bad, nnan, bad_nan);
    sg_cast_f32_to_f16(h, xf, NX32);
    bad = 0, bad_nan = 0;
    for (size_t i = 0; i < NX32; i++) {
        if (f32_isnan_bits(x32[i])) {
            bad_nan += !((h[i] & 0x7fffu) > 0x7c00u && (h[i] >> 15) == (x32[i] >> 31));
        } else if (h[i] != w_f32_h[i]) {
            if (bad++ < 5)
                tap_diag("  fp16(0x%08x): got 0x%04x, numpy 0x%04x", x32[i], h[i], w_f32_h[i]);
        }
    }
    ok(bad == 0 && bad_nan == 0,
       "%s: fp32 -> fp16, %d values = numpy (%zu differ; %zu NaN not kept)", c->name, NX32, bad,
       bad_nan);

    /* Round trips of every 16-bit value through fp32. */
    size_t bad_bf = 0, bad_h = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t p = (uint16_t)i;
        uint16_t rb = sg_f32_to_bf16(sg_bf16_to_f32(p)), rh = sg_f32_to_f16(sg_f16_to_f32(p));
        int nan_b = (p & 0x7fffu) > 0x7f80u, nan_h = (p & 0x7fffu) > 0x7c00u;
        bad_bf += nan_b ? !((rb & 0x7fffu) > 0x7f80u) : rb != p;
        bad_h += nan_h ? !((rh & 0x7fffu) > 0x7c00u) : rh != p;
    }
    ok(bad_bf == 0 && bad_h == 0, "%s: 16 -> 32 -> 16 round trips (%zu bf16, %zu fp16 differ)",
       c->name, bad_bf, bad_h);

    /* The array casts (AVX-512 where the CPU has it) give the one-value
     * functions' bits, NaN payloads included, at every length and offset:
     * a vector's tail, an unaligned start. */
    for (int half = 0; half < 2; half++) { /* bf16, then fp16 */
        void (*to16)(uint16_t *, const float *, size_t) =
            half ? sg_cast_f32_to_f16 : sg_cast_f32_to_bf16;
        void (*to32)(float *, const uint16_t *, size_t) =
            half ? sg_cast_f16_to_f32 : sg_cast_bf16_to_f32;
        uint16_t (*one16)(float) = half ? sg_f32_to_f16 : sg_f32_to_bf16;
        float (*one32)(uint16_t) = half ? sg_f16_to_f32 : sg_bf16_to_f32;
        size_t bad_len = 0;
        uint16_t h2[80];
        float f2[80];
        for (size_t off = 0; off < 4; off++)
            for (size_t len = 0; len <= 40; len++) {
                const size_t base = 997 * (off + len) % (NX32 - 80);
                memset(h2, 0xab, sizeof h2);
                to16(h2 + off, xf + base, len);
                for (size_t i = 0; i < len; i++)
                    bad_len += h2[off + i] != one16(xf[base + i]);
                bad_len += len + off < 80 && h2[off + len] != 0xabab; // nothing past the end
                to32(f2 + off, all16 + base % 65000, len);
                for (size_t i = 0; i < len; i++) {
                    float want = one32(all16[base % 65000 + i]);
                    bad_len += memcmp(&f2[off + i], &want, 4) != 0;
                }
            }
        /* every NaN, from fp32 and (at an odd offset: vectors that mix NaN
         * and numbers differently) from every 16-bit pattern */
        size_t bad_payload = 0;
        to16(h, xf, NX32);
        for (size_t i = 0; i < NX32; i++)
            if (f32_isnan_bits(x32[i]))
                bad_payload += h[i] != one16(xf[i]);
        to32(f, all16 + 7, 65536 - 7);
        for (size_t i = 0; i < 65536 - 7; i++) {
            float want = one32(all16[7 + i]);
            bad_payload += memcmp(&f[i], &want, 4) != 0;
        }
        ok(bad_len == 0 && bad_payload == 0,
           "%s: %s array casts = the one-value functions at lengths 0-40, offsets 0-3, on "
           "every NaN and every 16-bit pattern (%zu, %zu differ)",
           c->name, half ? "fp16" : "bf16", bad_len, bad_payload);
    }
    FREE(all16, x32, w_bf_f32, w_h_f32, w_f32_bf, w_f32_h, f, h, xf);
}

static void prep_cast(void)
{
    tcase *c = new_case("cast", "cast", check_cast, (tcase){0});
    uint16_t *all16 = malloc(65536 * sizeof *all16);
    for (uint32_t i = 0; i < 65536; i++)
        all16[i] = (uint16_t)i;
    put_raw(c, "all16.u16", all16, 65536 * sizeof *all16);
    free(all16);

    uint32_t *x = malloc(NX32 * sizeof *x);
    static const uint32_t edges[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, /* zeros, infinities */
        0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0x7fa00000, /* NaNs */
        0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff,             /* bf16 overflow and its edge */
        0x00000001, 0x00800000, 0x007fffff, 0x00008000, 0x00018000, /* fp32 subnormals */
        0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x47800000, /* fp16 max, overflow */
        0x38800000, 0x387fffff, 0x387fe000, 0x387ff000, /* fp16 smallest normal and below */
        0x33800000, 0x33000000, 0x33000001, 0x32ffffff, 0x33c00000, 0x34200000, /* 2^-24.. */
        0x3f800000, 0x3f801000, 0x3f803000, 0x3f808000, 0x3f818000, 0x3f800001, /* ties */
        0x3f7fffff, 0x40490fdb, 0xc0490fdb, 0x3eaaaaab,
    };
    size_t ne = sizeof edges / sizeof *edges, i = 0;
    for (; i < ne; i++)
        x[i] = edges[i];
    for (; i < NX32; i++) {
        uint32_t r = (uint32_t)rng_u64();
        switch (i % 4) {
        case 0: /* any bit pattern */ x[i] = r; break;
        case 1: /* within (and around) the fp16 range: biased exponents 98 .. 145 */
            x[i] = (r & 0x807fffffu) | ((98u + (uint32_t)(rng_u64() % 48)) << 23);
            break;
        case 2: /* exact or near ties for fp16 (13 dropped bits) */
            x[i] = (r & 0x807fe000u) | ((98u + (uint32_t)(rng_u64() % 48)) << 23) |
                   (0x1000u + (uint32_t)(rng_u64() % 3) - 1u);
            break;
        default: /* exact or near ties for bf16 (16 dropped bits) */
            x[i] = (r & 0xffff0000u) | (0x8000u + (uint32_t)(rng_u64() % 3) - 1u);
            break;
        }
    }
    put_raw(c, "x32.u32", x, NX32 * sizeof *x);
    free(x);
}

/* ---- gradient norm ------------------------------------------------------------- */

#define NGN 100003

static void check_grad_norm(tcase *c)
{
    float *x = get_f32(c, "x", NGN);
    double *want = get_f64(c, "sumsq", 1);
    if (!x || !want) {
        ok(0, "%s: data", c->name);
        return;
    }
    double s = -1.0;
    int nf = -1;
    is_int(sg_grad_norm_partial(&s, &nf, x, NGN), 0, "%s: returns 0", c->name);
    is_close(s, want[0], 1e-12, "%s: sum of squares of %d values", c->name, NGN);
    is_int(nf, 0, "%s: finite input: no overflow flag", c->name);
    /* Huge finite values do not overflow the double sum. */
    float big[9];
    for (int i = 0; i < 9; i++)
        big[i] = 3.4e38f;
    sg_grad_norm_partial(&s, &nf, big, 9);
    ok(nf == 0 && isfinite(s), "%s: 9 x 3.4e38 is finite (%g)", c->name, s);
    /* NaN or +-Inf anywhere sets the flag. */
    size_t pos[3] = {0, NGN / 2, NGN - 1};
    float bad[3] = {NAN, INFINITY, -INFINITY};
    int flags = 0;
    for (int i = 0; i < 3; i++) {
        float saved = x[pos[i]];
        x[pos[i]] = bad[i];
        sg_grad_norm_partial(&s, &nf, x, NGN);
        flags += nf == 1;
        x[pos[i]] = saved;
    }
    is_int(flags, 3, "%s: NaN first, +Inf middle, -Inf last all set the flag", c->name);
    sg_grad_norm_partial(&s, &nf, x, 0);
    ok(s == 0.0 && nf == 0, "%s: empty partial is 0", c->name);
    FREE(x, want);
}

static void prep_grad_norm(void)
{
    tcase *c = new_case("grad_norm", "grad_norm", check_grad_norm, (tcase){0});
    float *x = randn(NGN, 1.0f);
    for (size_t i = 0; i < NGN; i++)
        x[i] *= (float)pow(10.0, 6.0 * rng_unit() - 3.0);
    put_f32(c, "x", x, NGN);
    free(x);
}

/* ---- weight-gradient partials ------------------------------------------------------ */

/* sg_grad_partials_sum against the plain element loop written here (the
 * kernel works in blocks of 1024 with vector clones): the same bits for 1 to
 * 4 partials, written and accumulated, over several blocks and a tail; and
 * the order is the partials' own at every position: (1e8 - 1e8) + 1 = 1, then
 * + 5 (the reverse order, (1 - 1e8) + 1e8, gives 0 in fp32). No torch needed. */
static void check_grad_partials_sum(void)
{
    const size_t n = 3 * 1024 + 17;
    float *parts[4], *out = randn(n, 1.0f), *got = malloc(n * sizeof(float));
    float *want = malloc(n * sizeof(float));
    for (int t = 0; t < 4; t++)
        parts[t] = randn(n, (float)(t + 1));
    for (int np = 1; np <= 4 && got && want; np++)
        for (int accumulate = 0; accumulate <= 1; accumulate++) {
            for (size_t i = 0; i < n; i++) {
                float acc = parts[0][i];
                for (int t = 1; t < np; t++)
                    acc = acc + parts[t][i];
                want[i] = accumulate ? out[i] + acc : acc;
            }
            memcpy(got, out, n * sizeof(float));
            int rc = sg_grad_partials_sum(got, (const float *const *)parts, np, n, accumulate);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
            ok(rc == 0 && bad == 0,
               "grad_partials_sum, %d partial(s)%s, %zu values: the "
               "element loop's bits (%zu differ)",
               np, accumulate ? ", accumulated" : "", n, bad);
        }
    const size_t at[3] = {0, 1500, n - 1};
    int order_ok = 1;
    for (int k = 0; k < 3; k++) {
        parts[0][at[k]] = 1e8f;
        parts[1][at[k]] = -1e8f;
        parts[2][at[k]] = 1.0f;
        got[at[k]] = 5.0f;
    }
    sg_grad_partials_sum(got, (const float *const *)parts, 3, n, 1);
    for (int k = 0; k < 3; k++)
        order_ok &= got[at[k]] == 6.0f;
    ok(order_ok,
       "grad_partials_sum adds in the partials' order at the first, a middle and the "
       "last position (6 expected: %g %g %g)",
       got[at[0]], got[at[1]], got[at[2]]);
    for (int t = 0; t < 4; t++)
        free(parts[t]);
    FREE(out, got, want);
}

/* ---- running the reference -------------------------------------------------------- */

int main(int argc, char **main_argv)
{
    (void)argc;
    /* the OpenBLAS kernels `stepgraph` itself runs (codelets/cpu/blas_core.h) */
    sg_blas_core_select(main_argv);
    g_rng = 0x5eedc0ffee123457ull;
#ifdef OPENBLAS_VERSION
    /* The environment variable is read when the library loads, before main:
     * the call is what pins it here. */
    openblas_set_num_threads(1);
#endif
    int begin = torch_test_begin(g_root, sizeof g_root, "sg_cpu_ops");
    if (begin > 0)
        return tap_plan_skip_all("torch not available");
    if (begin < 0)
        return 1;

    prep_embedding();
    prep_rmsnorm();
    prep_rope_table();
    prep_rope();
    prep_attention();
    prep_swiglu();
    prep_linear();
    prep_cross_entropy();
    prep_cast();
    prep_grad_norm();

    char script[4200];
    snprintf(script, sizeof script, "%s/tests/torch_ops_ref.py", srcdir());
    char *argv[3 + 2 * MAX_CASES];
    int a = 0;
    argv[a++] = (char *)system_python();
    argv[a++] = script;
    for (int i = 0; i < g_ncases; i++) {
        argv[a++] = (char *)g_cases[i].op;
        argv[a++] = g_cases[i].dir;
    }
    argv[a] = NULL;
    int rc = run_program(argv, 0);
    if (!ok(rc == 0, "torch reference ran (%d cases)", g_ncases))
        tap_diag("%s %s ... exited with %d", system_python(), script, rc);

    for (int i = 0; i < g_ncases; i++)
        g_cases[i].check(&g_cases[i]);
    check_grad_partials_sum();

    int failed = tap_count_failed != 0;
    const char *keep = getenv("SG_KEEP_TMP");
    if (failed || (keep && *keep && strcmp(keep, "0")))
        tap_diag("inputs and reference outputs kept in %s", g_root);
    else
        rm_tree(g_root);
    return tap_done();
}
