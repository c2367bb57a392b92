/* cuda_ops_dump.c - runs every GPU kernel of codelets/cuda/cuda_ops.h on
 * fixed inputs and writes inputs and outputs to files, for a comparison
 * with PyTorch (tests/torch_cuda_ops_ref.py; scripts/check_cuda_vs_torch.sh
 * runs both).
 *
 * Usage: cuda_ops_dump DIR [--dtype f32|bf16] [--seed N]
 *
 * Writes DIR/DTYPE/manifest.json and one directory per case,
 * DIR/DTYPE/OP.CASE/, holding raw little-endian files as
 * tests/torch_ops_ref.py reads them: NAME.f32 (float32) for every tensor,
 * NAME.i32 (int32) for token ids and targets. A tensor the kernel held in
 * bf16 is written widened to fp32 (exact); its manifest entry says
 * "storage": "bf16", so the reader can turn it back into a bf16 tensor
 * without rounding. Inputs are generated in fp32 from a splitmix64 stream
 * seeded by --seed (default 1) and the case name, then rounded to the
 * storage dtype before the kernel sees them: the files hold exactly what
 * the device held.
 *
 * The manifest (JSON):
 *   {"format": "stepgraph-cuda-ops-dump 1", "dtype": "bf16", "seed": 1,
 *    "emulated": true, "files": "...",
 *    "cases": [{"op": "rmsnorm", "case": "N64_C256", "dtype": "bf16",
 *               "dir": "rmsnorm.N64_C256", "params": {"N": 64, ...},
 *               "inputs":  {"x": {"file": "rmsnorm.N64_C256/x.f32",
 *                                 "shape": [64, 256], "storage": "bf16"}, ...},
 *               "outputs": {"out": {...}, ...}}, ...]}
 * File paths are relative to the manifest's directory.
 *
 * Cases (all in --dtype, but the casts, which convert between the formats
 * their params "from" and "to" name, and the optimizers, whose p, m, v are always
 * fp32):
 *   cast           bf16 run: f32 -> bf16 and bf16 -> f32; f32 run: f32 -> f16
 *                  and f16 -> f32 (the other 16-bit format the kernels have);
 *                  4096 values: random over 24 decades, plus Inf, NaN, ties,
 *                  subnormals, overflow
 *   add_into       acc (16384) += x
 *   embedding      N=64 tokens (repeated ids), V=1000, C=256: out; dtable
 *                  accumulated into dtable0
 *   rmsnorm        (N=64, C=256, eps 1e-5; a row x1000, a row x1e-3) and
 *                  (N=512, C=64, eps 1e-6: QK-norm rows): out, rstd; dx, dw
 *                  accumulated into dw0; the backward reads the rstd the
 *                  forward stored (in dtype), as training does
 *   rope           B=2, T=128, H=8, D=64, theta 1e4 (HF rotate_half): out;
 *                  dx from dout
 *   swiglu         N=64, F=768: h; dgate, dup
 *   linear         N=64, in=256, out=384 with bias, and in=384, out=256
 *                  without: y; dx, dW (into dW0), db (into db0)
 *   attention      B=2, T=128, Hq=8, Hkv=2, D=64, causal, window 0 and 32:
 *                  out, lse; dq, dk, dv (from the forward's stored out, lse)
 *   cross_entropy  N=64, V=1000, logits N(0, 2^2), every 9th target -1
 *                  (ignored), dloss 1: loss, lse; dlogits (from stored lse)
 *   grad_norm      three buffers (1000, 4096, 777), loss scale 1024: sumsq,
 *                  [norm, 1/scale]; and the same with one +Inf
 *   adam           AdamW (lr 1e-3, wd 0.01) step t=5 from a random state,
 *                  gradients loss-scaled by 1024 and clipped at 1 by their
 *                  norm (computed on the device by the grad_norm kernels);
 *                  Adam with L2 (lr 3e-3, wd 0.1) step t=1 from zero state,
 *                  no norm: p, m, v
 *   lion           Lion (lr 1e-4, betas 0.9 / 0.99, wd 0.1) step t=3 from a
 *                  random m, gradients loss-scaled by 1024 and clipped at 1
 *                  as Adam's: p, m (v is not an output: never touched)
 *   adagrad        Adagrad (lr 1e-2, lr_decay 0.1, weight_decay 0.01, eps
 *                  1e-10) step t=3 from a random sum of squares, no norm:
 *                  p, v (the sum)
 *   moe            Qwen3-MoE layer, N=48, H=32, F=24, E=8, top 2: router,
 *                  statistics, aux loss, slot lists, experts, combine, and
 *                  the backward with dy (aux coefficient 0.01 with
 *                  norm_topk_prob; 0 without, experts writing slot-indexed
 *                  rows): logits, probs, sel, topw, aux, y, dlogits, dx, dWr,
 *                  dWg, dWu, dWd
 *   moe_oss        GPT-OSS layer (f32 run only), top 4, gate_up weights large
 *                  enough that both clamps cut; the same outputs with dbr,
 *                  dgate_up, dgate_up_bias, ddown, ddown_bias
 *   attention_sinks B=2, T=64, Hq=4, Hkv=2, D=32, window 0 and 16, sinks
 *                  N(0, 1.5^2) (f32 run only): out, lse; dq, dk, dv, dsinks
 * Outputs start as NaN on the device (so an element a kernel skips shows).
 * The real-GPU build (linked with libsgcuda.a) and the emulated one (with
 * libsgcudaemu.a) write the same files; the manifest says which ran.
 *
 * Exit status: 0 written; 1 a kernel or a file failed; 2 bad usage or no
 * CUDA device.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "codelets/cpu/adam.h"
#include "codelets/cpu/ops.h"
#include "codelets/cuda/cuda_ops.h"
#include "common/error.h"
#include "tests/test_util.h"

/* ---- failures ------------------------------------------------------------------- */

static const char *g_case = "-"; /* the case being run, for messages */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda_ops_dump: %s: ", g_case);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static sg_cu g_cu;

/* A kernel call that must return SG_OK. */
#define CK(expr)                                                        \
    do {                                                                \
        int rc_ = (expr);                                               \
        if (rc_ != SG_OK)                                               \
            die("%s returned %d (%s)", #expr, rc_, sg_cu_last_error()); \
    } while (0)

/* ---- dtypes ---------------------------------------------------------------------- */

static size_t dt_size(sg_dtype dt)
{
    return dt == SG_F32 ? 4 : 2;
}

/* ---- shapes ----------------------------------------------------------------------- */

typedef struct dims {
    int nd;
    size_t d[4];
} dims;

static dims dims_make(const size_t *d, size_t nd)
{
    dims s = {(int)nd, {0}};
    for (size_t i = 0; i < nd && i < 4; i++)
        s.d[i] = d[i];
    return s;
}

#define DIMS(...) \
    dims_make((const size_t[]){__VA_ARGS__}, sizeof((const size_t[]){__VA_ARGS__}) / sizeof(size_t))

static size_t dims_n(dims s)
{
    size_t n = 1;
    for (int i = 0; i < s.nd; i++)
        n *= s.d[i];
    return n;
}

/* ---- random inputs ---------------------------------------------------------------- */

static uint64_t g_seed = 1;

/* Each case draws from its own stream: seed and case name. */
static void seed_case(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; // FNV-1a of the name
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    g_rng = g_seed * 0x9e3779b97f4a7c15ull ^ h;
}

static float *randn(size_t n, float scale)
{
    float *p = xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * rng_normal();
    return p;
}

static float *zeros(size_t n)
{
    float *p = xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = 0.0f;
    return p;
}

/* ---- the output tree ---------------------------------------------------------------- */

static char g_root[4096]; /* DIR/DTYPE */
static cJSON *g_cases;

typedef struct dcase {
    char rel[256]; /* OP.CASE, relative to g_root */
    cJSON *obj, *params, *inputs, *outputs;
    void *dev[64];
    int ndev;
} dcase;

static dcase g_c;

static void mkdir_p(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0777) && errno != EEXIST)
                die("mkdir %s: %s", tmp, strerror(errno));
            *p = '/';
        }
    if (mkdir(tmp, 0777) && errno != EEXIST)
        die("mkdir %s: %s", tmp, strerror(errno));
}

static void write_file(const char *rel, const void *p, size_t bytes)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", g_root, rel);
    FILE *f = fopen(path, "wb");
    if (!f)
        die("cannot write %s: %s", path, strerror(errno));
    size_t w = bytes ? fwrite(p, 1, bytes, f) : 0;
    if (fclose(f) || w != bytes)
        die("cannot write %s", path);
}

/* Raw little-endian: this program runs on little-endian machines only. */
static void check_little_endian(void)
{
    const uint32_t one = 1;
    if (*(const unsigned char *)&one != 1) {
        fprintf(stderr, "cuda_ops_dump: the file format is little-endian; this machine is not\n");
        exit(2);
    }
}

static void case_begin(const char *op, const char *name, sg_dtype dt)
{
    memset(&g_c, 0, sizeof g_c);
    snprintf(g_c.rel, sizeof g_c.rel, "%s.%s", op, name);
    g_case = g_c.rel;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", g_root, g_c.rel);
    mkdir_p(path);
    seed_case(g_c.rel);
    g_c.obj = cJSON_CreateObject();
    cJSON_AddStringToObject(g_c.obj, "op", op);
    cJSON_AddStringToObject(g_c.obj, "case", name);
    cJSON_AddStringToObject(g_c.obj, "dtype", sg_dtype_name(dt));
    cJSON_AddStringToObject(g_c.obj, "dir", g_c.rel);
    g_c.params = cJSON_AddObjectToObject(g_c.obj, "params");
    g_c.inputs = cJSON_AddObjectToObject(g_c.obj, "inputs");
    g_c.outputs = cJSON_AddObjectToObject(g_c.obj, "outputs");
}

static void param(const char *key, double v)
{
    cJSON_AddNumberToObject(g_c.params, key, v);
}

static void param_str(const char *key, const char *v)
{
    cJSON_AddStringToObject(g_c.params, key, v);
}

static void add_entry(cJSON *where, const char *name, const char *ext, dims s, const char *storage)
{
    char file[512];
    snprintf(file, sizeof file, "%s/%s.%s", g_c.rel, name, ext);
    cJSON *e = cJSON_AddObjectToObject(where, name);
    cJSON_AddStringToObject(e, "file", file);
    cJSON *sh = cJSON_AddArrayToObject(e, "shape");
    for (int i = 0; i < s.nd; i++)
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)s.d[i]));
    cJSON_AddStringToObject(e, "storage", storage);
}

static void save_f32(cJSON *where, const char *name, const float *x, dims s, const char *storage)
{
    char file[512];
    snprintf(file, sizeof file, "%s/%s.f32", g_c.rel, name);
    write_file(file, x, dims_n(s) * sizeof *x);
    add_entry(where, name, "f32", s, storage);
}

/* ---- device memory (freed at the end of each case) ------------------------------- */

static void *dev_alloc(size_t bytes)
{
    if (g_c.ndev == (int)(sizeof g_c.dev / sizeof g_c.dev[0]))
        die("too many device buffers");
    void *p = sg_cu_malloc(bytes ? bytes : 1);
    if (!p)
        die("sg_cu_malloc(%zu): %s", bytes, sg_cu_last_error());
    g_c.dev[g_c.ndev++] = p;
    return p;
}

static void sync_or_die(void)
{
    if (sg_cu_sync(&g_cu))
        die("a kernel failed: %s", sg_cu_last_error());
}

static void put_raw_into(void *d, const void *h, size_t bytes)
{
    sync_or_die();
    if (bytes && sg_cu_to_device(d, h, bytes))
        die("sg_cu_to_device: %s", sg_cu_last_error());
}

static void *put_raw(const void *h, size_t bytes)
{
    void *d = dev_alloc(bytes);
    put_raw_into(d, h, bytes);
    return d;
}

static void get_raw(void *h, const void *d, size_t bytes)
{
    sync_or_die();
    if (bytes && sg_cu_to_host(h, d, bytes))
        die("sg_cu_to_host: %s", sg_cu_last_error());
}

/* x (n) stored in dt, on the device. */
static void *dev_put(const float *x, size_t n, sg_dtype dt)
{
    if (dt == SG_F32)
        return put_raw(x, n * sizeof *x);
    uint16_t *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[i] = to16(x[i], dt);
    void *d = put_raw(h, n * sizeof *h);
    free(h);
    return d;
}

/* bytes of device memory filled with 0xff: NaN in f32, bf16, f16, f64. */
static void *dev_nan(size_t bytes)
{
    unsigned char *h = xmalloc(bytes);
    memset(h, 0xff, bytes);
    void *d = put_raw(h, bytes);
    free(h);
    return d;
}

/* The n elements of dt at d, widened to float (exact). */
static float *dev_get(const void *d, size_t n, sg_dtype dt)
{
    float *x = xmalloc(n * sizeof *x);
    if (dt == SG_F32) {
        get_raw(x, d, n * sizeof *x);
        return x;
    }
    uint16_t *h = xmalloc(n * sizeof *h);
    get_raw(h, d, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        x[i] = from16(h[i], dt);
    free(h);
    return x;
}

/* ---- inputs and outputs of the current case -------------------------------------- */

/* x rounded to dt (in place), written as an input, and put on the device. */
static void *input(const char *name, float *x, dims s, sg_dtype dt)
{
    size_t n = dims_n(s);
    round_dt(x, n, dt);
    save_f32(g_c.inputs, name, x, s, sg_dtype_name(dt));
    return dev_put(x, n, dt);
}

static int32_t *input_i32(const char *name, const int32_t *x, dims s)
{
    char file[512];
    snprintf(file, sizeof file, "%s/%s.i32", g_c.rel, name);
    write_file(file, x, dims_n(s) * sizeof *x);
    add_entry(g_c.inputs, name, "i32", s, "i32");
    return put_raw(x, dims_n(s) * sizeof *x);
}

/* The device tensor d (stored in dt) written as an output. */
static void output(const char *name, const void *d, dims s, sg_dtype dt)
{
    float *x = dev_get(d, dims_n(s), dt);
    save_f32(g_c.outputs, name, x, s, sg_dtype_name(dt));
    free(x);
}

static void output_host(const char *name, const float *x, dims s, const char *storage)
{
    save_f32(g_c.outputs, name, x, s, storage);
}

static void output_host_i32(const char *name, const int32_t *x, dims s)
{
    char file[512];
    snprintf(file, sizeof file, "%s/%s.i32", g_c.rel, name);
    write_file(file, x, dims_n(s) * sizeof *x);
    add_entry(g_c.outputs, name, "i32", s, "i32");
}

static void case_end(void)
{
    sync_or_die();
    while (g_c.ndev)
        sg_cu_free(g_c.dev[--g_c.ndev]);
    cJSON_AddItemToArray(g_cases, g_c.obj);
    fprintf(stderr, "cuda_ops_dump: %s done\n", g_c.rel);
    g_case = "-";
}

/* ---- casts ------------------------------------------------------------------------- */

/* in the run of dtype dt (the case's "dtype"; from and to say the formats) */
static void case_cast(sg_dtype in_dt, sg_dtype out_dt, sg_dtype dt)
{
    char name[64];
    snprintf(name, sizeof name, "%s_to_%s", sg_dtype_name(in_dt), sg_dtype_name(out_dt));
    case_begin("cast", name, dt);
    const size_t n = 4096;
    static const float edges[] = {
        INFINITY,       -INFINITY,     NAN,
        -NAN,           0.0f,          -0.0f,
        1.0f,           -1.0f,         65504.0f,
        65519.0f,       65520.0f,      -65536.0f,
        3.0e38f,        -3.4e38f,                      // f16 max, overflow
        3.3961776e38f,  3.3895314e38f, -3.4028235e38f, // bf16 max, overflow
        6.0e-8f,        3.0e-8f,       2.9e-8f,
        1.0e-5f,        6.1e-5f, // f16 subnormals
        1.0e-40f,       -1.0e-45f,     1.17549435e-38f,
        9.2e-41f, // f32 subnormals
        1.00390625f,    1.01171875f,   1.0009765625f,
        1.00146484375f, // bf16 / f16 ties
        1.0039063f,     0.99609375f,   -1.00390625f,
        3.14159265f,    -2.71828183f,  0.1f,
    };
    const size_t ne = sizeof edges / sizeof *edges;
    float *x = xmalloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = i < ne ? edges[i] : rng_normal() * (float)pow(10.0, 24.0 * rng_unit() - 12.0);
    param("n", (double)n);
    param_str("from", sg_dtype_name(in_dt));
    param_str("to", sg_dtype_name(out_dt));
    void *din = input("x", x, DIMS(n), in_dt);
    void *dout = dev_nan(n * dt_size(out_dt));
    CK(sg_cu_cast(&g_cu, dout, out_dt, din, in_dt, n));
    output("y", dout, DIMS(n), out_dt);
    free(x);
    case_end();
}

/* ---- acc += x ------------------------------------------------------------------------ */

static void case_add_into(sg_dtype dt)
{
    const size_t n = 64 * 256;
    case_begin("add_into", "n16384", dt);
    param("n", (double)n);
    float *acc = randn(n, 1.0f), *x = randn(n, 1.0f);
    void *dacc = input("acc0", acc, DIMS(n), dt);
    void *dx = input("x", x, DIMS(n), dt);
    CK(sg_cu_add_into(&g_cu, dacc, dx, dt, n));
    output("acc", dacc, DIMS(n), dt);
    free(acc);
    free(x);
    case_end();
}

/* ---- embedding ------------------------------------------------------------------------ */

static void case_embedding(sg_dtype dt)
{
    const size_t N = 64, V = 1000, C = 256;
    case_begin("embedding", "N64_V1000_C256", dt);
    param("N", (double)N);
    param("V", (double)V);
    param("C", (double)C);
    int32_t tok[64];
    for (size_t n = 0; n < N; n++)
        tok[n] = (int32_t)(rng_u64() % V);
    tok[3] = tok[5] = tok[17] = tok[0]; // repeated ids: the backward sums them
    tok[40] = tok[41] = tok[9];
    tok[1] = 0;
    tok[N - 1] = (int32_t)V - 1;
    float *table = randn(V * C, 1.0f), *dout = randn(N * C, 1.0f), *dt0 = randn(V * C, 1.0f);
    int32_t *dtok = input_i32("tokens", tok, DIMS(N));
    void *dtab = input("table", table, DIMS(V, C), dt);
    void *ddout = input("dout", dout, DIMS(N, C), dt);
    void *ddt = input("dtable0", dt0, DIMS(V, C), dt);
    void *dy = dev_nan(N * C * dt_size(dt));
    CK(sg_cu_embedding_forward(&g_cu, dy, dtok, dtab, dt, N, V, C));
    CK(sg_cu_embedding_backward(&g_cu, ddt, dtok, ddout, dt, N, V, C));
    output("out", dy, DIMS(N, C), dt);
    output("dtable", ddt, DIMS(V, C), dt);
    free(table);
    free(dout);
    free(dt0);
    case_end();
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

static void case_rmsnorm(sg_dtype dt, size_t N, size_t C, float eps, const char *name)
{
    case_begin("rmsnorm", name, dt);
    param("N", (double)N);
    param("C", (double)C);
    param("eps", (double)eps);
    const size_t NC = N * C;
    float *x = randn(NC, 3.0f), *w = randn(C, 0.2f), *dout = randn(NC, 1.0f);
    float *dw0 = randn(C, 1.0f);
    for (size_t c = 0; c < C; c++) {
        w[c] += 1.0f;
        x[C + c] *= 1000.0f;   // a row of large values
        x[2 * C + c] *= 1e-3f; // and one of small values (eps matters)
    }
    void *dx = input("x", x, DIMS(N, C), dt);
    void *dw = input("w", w, DIMS(C), dt);
    void *ddout = input("dout", dout, DIMS(N, C), dt);
    void *ddw = input("dw0", dw0, DIMS(C), dt);
    void *dy = dev_nan(NC * dt_size(dt)), *dr = dev_nan(N * dt_size(dt));
    void *ddx = dev_nan(NC * dt_size(dt));
    float *work = dev_nan(sg_cu_rmsnorm_backward_work_floats(N, C) * sizeof(float));
    CK(sg_cu_rmsnorm_forward(&g_cu, dy, dr, dx, dw, dt, N, C, eps));
    CK(sg_cu_rmsnorm_backward(&g_cu, ddx, ddw, ddout, dx, dw, dr, dt, N, C, work));
    output("out", dy, DIMS(N, C), dt);
    output("rstd", dr, DIMS(N), dt);
    output("dx", ddx, DIMS(N, C), dt);
    output("dw", ddw, DIMS(C), dt);
    free(x);
    free(w);
    free(dout);
    free(dw0);
    case_end();
}

/* ---- rotary embedding ------------------------------------------------------------------ */

static void case_rope(sg_dtype dt)
{
    const size_t B = 2, T = 128, H = 8, D = 64;
    const double theta = 10000.0;
    case_begin("rope", "B2_T128_H8_D64", dt);
    param("B", (double)B);
    param("T", (double)T);
    param("H", (double)H);
    param("D", (double)D);
    param("theta", theta);
    const size_t n = B * T * H * D, half = D / 2;
    /* the tables of sg_rope_table / HF's default rotary embedding: angle
     * t * theta^(-2i/D) in double, cos and sin rounded to float */
    float *cs = xmalloc(T * half * sizeof *cs), *sn = xmalloc(T * half * sizeof *sn);
    for (size_t t = 0; t < T; t++)
        for (size_t i = 0; i < half; i++) {
            double a = (double)t * pow(theta, -(double)(2 * i) / (double)D);
            cs[t * half + i] = (float)cos(a);
            sn[t * half + i] = (float)sin(a);
        }
    float *x = randn(n, 1.0f), *dout = randn(n, 1.0f);
    void *dx = input("x", x, DIMS(B, T, H, D), dt);
    void *ddout = input("dout", dout, DIMS(B, T, H, D), dt);
    float *dcos = input("cos", cs, DIMS(T, half), SG_F32);
    float *dsin = input("sin", sn, DIMS(T, half), SG_F32);
    void *dy = dev_nan(n * dt_size(dt)), *ddx = dev_nan(n * dt_size(dt));
    CK(sg_cu_rope_forward(&g_cu, dy, dx, dcos, dsin, dt, B, T, H, D));
    CK(sg_cu_rope_backward(&g_cu, ddx, ddout, dcos, dsin, dt, B, T, H, D));
    output("out", dy, DIMS(B, T, H, D), dt);
    output("dx", ddx, DIMS(B, T, H, D), dt);
    free(cs);
    free(sn);
    free(x);
    free(dout);
    case_end();
}

/* ---- SwiGLU ------------------------------------------------------------------------------ */

static void case_swiglu(sg_dtype dt)
{
    const size_t N = 64, F = 768, n = N * F;
    case_begin("swiglu", "N64_F768", dt);
    param("N", (double)N);
    param("F", (double)F);
    float *gate = randn(n, 2.0f), *up = randn(n, 1.0f), *dh = randn(n, 1.0f);
    void *dg = input("gate", gate, DIMS(N, F), dt);
    void *du = input("up", up, DIMS(N, F), dt);
    void *ddh = input("dh", dh, DIMS(N, F), dt);
    void *dhh = dev_nan(n * dt_size(dt)), *ddg = dev_nan(n * dt_size(dt));
    void *ddu = dev_nan(n * dt_size(dt));
    CK(sg_cu_swiglu_forward(&g_cu, dhh, dg, du, dt, N, F));
    CK(sg_cu_swiglu_backward(&g_cu, ddg, ddu, ddh, dg, du, dt, N, F));
    output("h", dhh, DIMS(N, F), dt);
    output("dgate", ddg, DIMS(N, F), dt);
    output("dup", ddu, DIMS(N, F), dt);
    free(gate);
    free(up);
    free(dh);
    case_end();
}

/* ---- linear ------------------------------------------------------------------------------ */

static void case_linear(sg_dtype dt, size_t N, size_t in, size_t out, int bias, const char *name)
{
    case_begin("linear", name, dt);
    param("N", (double)N);
    param("in", (double)in);
    param("out", (double)out);
    param("bias", bias);
    float *x = randn(N * in, 1.0f), *W = randn(out * in, (float)(1.0 / sqrt((double)in)));
    float *dy = randn(N * out, 1.0f), *dW0 = randn(out * in, 0.1f);
    void *dx_in = input("x", x, DIMS(N, in), dt);
    void *dW = input("W", W, DIMS(out, in), dt);
    void *ddy = input("dy", dy, DIMS(N, out), dt);
    void *ddW = input("dW0", dW0, DIMS(out, in), dt);
    void *db = NULL, *ddb = NULL;
    float *b = NULL, *db0 = NULL, *work = NULL;
    if (bias) {
        b = randn(out, 0.5f);
        db0 = randn(out, 0.5f);
        db = input("b", b, DIMS(out), dt);
        ddb = input("db0", db0, DIMS(out), dt);
        work = dev_nan(sg_cu_linear_backward_work_floats(N, out) * sizeof(float));
    }
    void *dy_out = dev_nan(N * out * dt_size(dt)), *ddx = dev_nan(N * in * dt_size(dt));
    CK(sg_cu_linear_forward(&g_cu, dy_out, dx_in, dW, db, dt, N, in, out));
    CK(sg_cu_linear_backward(&g_cu, ddx, ddW, ddb, ddy, dx_in, dW, dt, N, in, out, work));
    output("y", dy_out, DIMS(N, out), dt);
    output("dx", ddx, DIMS(N, in), dt);
    output("dW", ddW, DIMS(out, in), dt);
    if (bias)
        output("db", ddb, DIMS(out), dt);
    free(x);
    free(W);
    free(dy);
    free(dW0);
    free(b);
    free(db0);
    case_end();
}

/* ---- attention --------------------------------------------------------------------------- */

static void case_attention(sg_dtype dt, size_t window, const char *name)
{
    const size_t B = 2, T = 128, Hq = 8, Hkv = 2, D = 64;
    case_begin("attention", name, dt);
    param("B", (double)B);
    param("T", (double)T);
    param("Hq", (double)Hq);
    param("Hkv", (double)Hkv);
    param("D", (double)D);
    param("window", (double)window);
    const size_t nq = B * T * Hq * D, nk = B * T * Hkv * D, nl = B * Hq * T;
    const size_t es = dt_size(dt);
    float *q = randn(nq, 1.0f), *k = randn(nk, 1.0f), *v = randn(nk, 1.0f);
    float *dout = randn(nq, 1.0f);
    void *dq_in = input("q", q, DIMS(B, T, Hq, D), dt);
    void *dk_in = input("k", k, DIMS(B, T, Hkv, D), dt);
    void *dv_in = input("v", v, DIMS(B, T, Hkv, D), dt);
    void *ddout = input("dout", dout, DIMS(B, T, Hq, D), dt);
    void *dout_o = dev_nan(nq * es), *dlse = dev_nan(nl * es);
    void *ddq = dev_nan(nq * es), *ddk = dev_nan(nk * es), *ddv = dev_nan(nk * es);
    float *work = dev_nan(sg_cu_attention_backward_work_floats(B, T, Hq, Hkv, D) * sizeof(float));
    CK(sg_cu_attention_forward(&g_cu, dout_o, dlse, dq_in, dk_in, dv_in, dt, B, T, Hq, Hkv, D,
                               window));
    CK(sg_cu_attention_backward(&g_cu, ddq, ddk, ddv, ddout, dq_in, dk_in, dv_in, dout_o, dlse, dt,
                                B, T, Hq, Hkv, D, window, work));
    output("out", dout_o, DIMS(B, T, Hq, D), dt);
    output("lse", dlse, DIMS(B, Hq, T), dt);
    output("dq", ddq, DIMS(B, T, Hq, D), dt);
    output("dk", ddk, DIMS(B, T, Hkv, D), dt);
    output("dv", ddv, DIMS(B, T, Hkv, D), dt);
    free(q);
    free(k);
    free(v);
    free(dout);
    case_end();
}

/* ---- cross-entropy ----------------------------------------------------------------------- */

static void case_cross_entropy(sg_dtype dt)
{
    const size_t N = 64, V = 1000;
    const float dloss = 1.0f;
    case_begin("cross_entropy", "N64_V1000", dt);
    param("N", (double)N);
    param("V", (double)V);
    param("dloss", dloss);
    float *logits = randn(N * V, 2.0f);
    int32_t tg[64];
    for (size_t n = 0; n < N; n++)
        tg[n] = n % 9 == 4 ? -1 : (int32_t)(rng_u64() % V);
    tg[0] = 0;
    tg[1] = (int32_t)V - 1;
    void *dl = input("logits", logits, DIMS(N, V), dt);
    int32_t *dtg = input_i32("targets", tg, DIMS(N));
    float *dloss_g = dev_nan(sizeof(float));
    void *dlse = dev_nan(N * dt_size(dt)), *ddl = dev_nan(N * V * dt_size(dt));
    float *work = dev_nan(sg_cu_cross_entropy_work_floats(N) * sizeof(float));
    CK(sg_cu_cross_entropy_forward(&g_cu, dloss_g, dlse, dl, dtg, dt, N, V, work));
    CK(sg_cu_cross_entropy_backward(&g_cu, ddl, dl, dlse, dtg, dt, N, V, dloss, NULL, work));
    output("loss", dloss_g, DIMS(1), SG_F32);
    output("lse", dlse, DIMS(N), dt);
    output("dlogits", ddl, DIMS(N, V), dt);
    free(logits);
    case_end();
}

/* ---- gradient norm ----------------------------------------------------------------------- */

/* Three gradient buffers (magnitudes over 4 decades in the second), loss
 * scale 1024; with_inf puts +Inf into the second. */
static void case_grad_norm(sg_dtype dt, int with_inf)
{
    const size_t na = 1000, nb = 4096, nc = 777;
    const float ls = 1024.0f;
    case_begin("grad_norm", with_inf ? "3bufs_inf" : "3bufs", dt);
    param("loss_scale", ls);
    float *a = randn(na, ls), *b = randn(nb, ls), *c = randn(nc, ls);
    for (size_t i = 0; i < nb; i++)
        b[i] *= (float)pow(10.0, 4.0 * rng_unit() - 2.0);
    if (with_inf)
        b[nb / 3] = INFINITY;
    void *da = input("g0", a, DIMS(na), dt);
    void *db = input("g1", b, DIMS(nb), dt);
    void *dc = input("g2", c, DIMS(nc), dt);
    double zero = 0.0;
    int32_t izero = 0;
    double *dsum = put_raw(&zero, sizeof zero);
    int32_t *dnf = put_raw(&izero, sizeof izero);
    float *dls = put_raw(&ls, sizeof ls);
    float *dres = dev_nan(2 * sizeof(float));
    CK(sg_cu_grad_norm_accumulate(&g_cu, dsum, dnf, da, dt, na));
    CK(sg_cu_grad_norm_accumulate(&g_cu, dsum, dnf, db, dt, nb));
    CK(sg_cu_grad_norm_accumulate(&g_cu, dsum, dnf, dc, dt, nc));
    CK(sg_cu_grad_norm_finish(&g_cu, dres, dsum, dnf, dls));
    double sum;
    int32_t nf;
    float res[2];
    get_raw(&sum, dsum, sizeof sum);
    get_raw(&nf, dnf, sizeof nf);
    get_raw(res, dres, sizeof res);
    float sumf = (float)sum;
    output_host("sumsq", &sumf, DIMS(1), "f64");
    output_host_i32("nonfinite", &nf, DIMS(1));
    output_host("norm", &res[0], DIMS(1), "f32");
    output_host("inv_scale", &res[1], DIMS(1), "f32");
    free(a);
    free(b);
    free(c);
    case_end();
}

/* ---- Adam -------------------------------------------------------------------------------- */

static void case_adam(sg_dtype dt, int adamw)
{
    const size_t n = 4096;
    sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
    prm.isa = SG_ADAM_ISA_SCALAR;
    int64_t t;
    float ls;
    double clip;
    if (adamw) {
        prm.weight_decay = 0.01f; // lr 1e-3, betas 0.9 / 0.999, eps 1e-8
        t = 5;
        ls = 1024.0f;
        clip = 1.0;
        case_begin("adam", "adamw_n4096_t5_clip1_ls1024", dt);
    } else {
        prm.adamw_mode = 0;
        prm.weight_decay = 0.1f;
        prm.lr = 3e-3f;
        t = 1;
        ls = 1.0f;
        clip = 0.0;
        case_begin("adam", "adam_l2_n4096_t1", dt);
    }
    param("n", (double)n);
    param("lr", prm.lr);
    param("beta1", prm.beta1);
    param("beta2", prm.beta2);
    param("eps", prm.eps);
    param("weight_decay", prm.weight_decay);
    param("adamw", prm.adamw_mode);
    param("bias_correction", prm.bias_correction);
    param("t", (double)t);
    param("loss_scale", ls);
    param("clip", clip);
    param("use_norm", adamw);
    float *p = randn(n, 1.0f), *m, *v, *g = randn(n, ls);
    if (t > 1) { // a state as after t - 1 steps
        m = randn(n, 0.01f);
        v = randn(n, 0.01f);
        for (size_t i = 0; i < n; i++)
            v[i] *= v[i];
    } else {
        m = zeros(n);
        v = zeros(n);
    }
    float *dp = input("p0", p, DIMS(n), SG_F32);
    float *dm = input("m0", m, DIMS(n), SG_F32);
    float *dv = input("v0", v, DIMS(n), SG_F32);
    void *dg = input("g", g, DIMS(n), dt);
    float *dnorm = NULL;
    int32_t *dnf = NULL;
    if (adamw) { // the norm buffer as training makes it: loss scale, norm of g
        double zero = 0.0;
        int32_t izero = 0;
        double *dsum = put_raw(&zero, sizeof zero);
        dnf = put_raw(&izero, sizeof izero);
        float *dls = put_raw(&ls, sizeof ls);
        dnorm = dev_nan(2 * sizeof(float));
        CK(sg_cu_grad_norm_accumulate(&g_cu, dsum, dnf, dg, dt, n));
        CK(sg_cu_grad_norm_finish(&g_cu, dnorm, dsum, dnf, dls));
    }
    CK(sg_cu_adam_step(&g_cu, &prm, t, dp, dg, dt, dm, dv, n, dnorm, dnf, clip));
    if (dnorm)
        output("norm", dnorm, DIMS(2), SG_F32);
    output("p", dp, DIMS(n), SG_F32);
    output("m", dm, DIMS(n), SG_F32);
    output("v", dv, DIMS(n), SG_F32);
    free(p);
    free(m);
    free(v);
    free(g);
    case_end();
}

/* ---- Lion and Adagrad ---------------------------------------------------------------------- */

static void case_lion_adagrad(sg_dtype dt, sg_optim_algo algo)
{
    const size_t n = 4096;
    const int lion = algo == SG_OPTIM_LION;
    sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
    prm.isa = SG_ADAM_ISA_SCALAR;
    prm.algo = algo;
    const int64_t t = 3;
    const float ls = lion ? 1024.0f : 1.0f;
    const double clip = lion ? 1.0 : 0.0;
    if (lion) {
        prm.lr = 1e-4f;
        prm.beta2 = 0.99f;
        prm.weight_decay = 0.1f;
        case_begin("lion", "n4096_t3_wd0.1_clip1_ls1024", dt);
    } else {
        prm.lr = 1e-2f;
        prm.lr_decay = 0.1f;
        prm.weight_decay = 0.01f;
        prm.eps = 1e-10f;
        case_begin("adagrad", "n4096_t3_l2_lr_decay0.1", dt);
    }
    param("n", (double)n);
    param("lr", prm.lr);
    param("beta1", prm.beta1);
    param("beta2", prm.beta2);
    param("eps", prm.eps);
    param("weight_decay", prm.weight_decay);
    param("lr_decay", prm.lr_decay);
    param("t", (double)t);
    param("loss_scale", ls);
    param("clip", clip);
    param("use_norm", lion);
    /* the state after t - 1 steps: Lion's m, Adagrad's sum of squares */
    float *p = randn(n, 1.0f), *m = randn(n, 0.01f), *v = randn(n, 0.01f), *g = randn(n, ls);
    for (size_t i = 0; i < n; i++)
        v[i] = 2.0f * v[i] * v[i];
    float *dp = input("p0", p, DIMS(n), SG_F32);
    float *dm = input("m0", m, DIMS(n), SG_F32);
    float *dv = input("v0", v, DIMS(n), SG_F32);
    void *dg = input("g", g, DIMS(n), dt);
    float *dnorm = NULL;
    int32_t *dnf = NULL;
    if (lion) { // the norm buffer as training makes it, as for AdamW
        double zero = 0.0;
        int32_t izero = 0;
        double *dsum = put_raw(&zero, sizeof zero);
        dnf = put_raw(&izero, sizeof izero);
        float *dls = put_raw(&ls, sizeof ls);
        dnorm = dev_nan(2 * sizeof(float));
        CK(sg_cu_grad_norm_accumulate(&g_cu, dsum, dnf, dg, dt, n));
        CK(sg_cu_grad_norm_finish(&g_cu, dnorm, dsum, dnf, dls));
    }
    CK(sg_cu_adam_step(&g_cu, &prm, t, dp, dg, dt, dm, dv, n, dnorm, dnf, clip));
    if (dnorm)
        output("norm", dnorm, DIMS(2), SG_F32);
    output("p", dp, DIMS(n), SG_F32);
    if (lion)
        output("m", dm, DIMS(n), SG_F32);
    else
        output("v", dv, DIMS(n), SG_F32);
    free(p);
    free(m);
    free(v);
    free(g);
    case_end();
}

/* ---- mixture of experts (f32 run only) ----------------------------------------------- */

/* A whole MoE MLP through the kernels of moe.cu, as a layer runs it: router,
 * statistics and aux loss, every expert's slot list, the experts (one group
 * holding all experts: rows expert by expert), combine; then with dy the
 * experts' backward, the slot sum, dtopw back in slot order, the router's
 * backward (with the load-balancing term, coefficient `coef`, one layer) and
 * dx = the router's dx + the experts'. oss: GPT-OSS (router bias, fused
 * interleaved gate_up with biases, clamped GLU), else Qwen3-MoE. by_slot:
 * the experts write slot-indexed rows (rows = their slots, as
 * codelets/cpu/block.c does) instead of a group's consecutive rows. */
static void case_moe(sg_dtype dt, int oss, int norm, float coef, float wscale, int by_slot,
                     const char *name)
{
    const size_t N = 48, H = 32, F = 24, E = 8, K = oss ? 4 : 2;
    case_begin(oss ? "moe_oss" : "moe", name, dt);
    param("N", (double)N);
    param("H", (double)H);
    param("F", (double)F);
    param("E", (double)E);
    param("K", (double)K);
    param("norm_topk_prob", norm);
    param("aux_coef", coef);
    param("by_slot", by_slot);
    const size_t es = dt_size(dt), NK = N * K;
    float *x = randn(N * H, 1.0f), *h = randn(N * H, 1.0f), *dy = randn(N * H, 1.0f);
    float *Wr = randn(E * H, 0.3f), *br = randn(E, 0.5f);
    void *dx_in = input("x", x, DIMS(N, H), dt);
    void *dh = input("h", h, DIMS(N, H), dt);
    void *ddy = input("dy", dy, DIMS(N, H), dt);
    void *dWr = input("Wr", Wr, DIMS(E, H), dt);
    void *dbr = oss ? input("br", br, DIMS(E), dt) : NULL;
    /* expert weights, expert-major; Qwen3: Wg, Wu (E, F, H), Wd (E, H, F);
     * GPT-OSS: gate_up (E, H, 2F), its bias (E, 2F), down (E, F, H), bias (E, H) */
    float *w1 = randn(E * 2 * F * H, wscale), *b1 = randn(E * 2 * F, 0.5f);
    float *w2 = randn(E * F * H, oss ? 0.2f : 0.2f), *b2 = randn(E * H, 0.5f);
    void *dw1, *db1 = NULL, *dw1b = NULL, *dw2, *db2 = NULL;
    if (oss) {
        dw1 = input("gate_up", w1, DIMS(E, H, 2 * F), dt);
        db1 = input("gate_up_bias", b1, DIMS(E, 2 * F), dt);
        dw2 = input("down", w2, DIMS(E, F, H), dt);
        db2 = input("down_bias", b2, DIMS(E, H), dt);
    } else {
        dw1 = input("Wg", w1, DIMS(E, F, H), dt);
        dw1b = input("Wu", w1 + E * F * H, DIMS(E, F, H), dt);
        dw2 = input("Wd", w2, DIMS(E, H, F), dt);
    }
    float *probs = dev_nan(N * E * 4), *sel = dev_nan(NK * 4), *topw = dev_nan(NK * 4);
    float *logits = dev_nan(N * E * 4);
    void *y = dev_nan(N * H * es);
    float *zs = zeros(2 * E), *stats = dev_put(zs, 2 * E, SG_F32), *aux = dev_nan(4);
    free(zs);
    int32_t *slots = dev_nan(NK * 4), *counts = dev_nan(E * 4);
    void *gate = dev_nan(NK * F * es), *up = dev_nan(NK * F * es), *outs = dev_nan(NK * H * es);
    const void **ptrs = dev_nan(NK * sizeof(void *));
    void *work = dev_nan(sg_cu_moe_expert_work_bytes(N, H, F, dt));
    if (oss)
        CK(sg_cu_moe_oss_router_forward(&g_cu, probs, sel, topw, logits, dx_in, dWr, dbr, dt, N, H,
                                        E, K));
    else
        CK(sg_cu_moe_router_forward(&g_cu, probs, sel, topw, logits, dx_in, dWr, dt, N, H, E, K,
                                    norm));
    CK(sg_cu_moe_stats_add(&g_cu, stats, probs, sel, N, E, K));
    CK(sg_cu_moe_aux_loss(&g_cu, aux, stats, E, 1, N));
    CK(sg_cu_moe_expert_slots(&g_cu, slots, counts, sel, N, K, 0, E));
    int32_t cnt[8], iota[8 * 48];
    get_raw(cnt, counts, sizeof cnt);
    for (size_t i = 0; i < NK; i++)
        iota[i] = (int32_t)i;
    int32_t *diota = put_raw(iota, NK * sizeof *iota);
    /* expert e's rows: its slots (by_slot) or the group's rows off[e].. */
#define ROWS_AT(r) (by_slot ? slots + (r) : NULL)
#define ROW0(r) (by_slot ? 0 : (r))
    size_t off[9] = {0};
    for (size_t e = 0; e < E; e++)
        off[e + 1] = off[e] + (size_t)cnt[e];
    if (off[E] != NK)
        die("the slot counts add up to %zu, not N K = %zu", off[E], NK);
    for (size_t e = 0; e < E; e++) {
        const size_t r = off[e], n = (size_t)cnt[e], r0 = ROW0(r);
        char *g = (char *)gate + r0 * F * es, *u = (char *)up + r0 * F * es;
        char *o = (char *)outs + r0 * H * es;
        if (oss)
            CK(sg_cu_moe_oss_expert_forward(
                &g_cu, g, u, o, dx_in, slots + r, ROWS_AT(r), n, (char *)dw1 + e * H * 2 * F * es,
                (char *)db1 + e * 2 * F * es, (char *)dw2 + e * F * H * es,
                (char *)db2 + e * H * es, dt, H, F, K, work));
        else
            CK(sg_cu_moe_expert_forward(&g_cu, g, u, o, dx_in, slots + r, ROWS_AT(r), n,
                                        (char *)dw1 + e * F * H * es, (char *)dw1b + e * F * H * es,
                                        (char *)dw2 + e * H * F * es, dt, H, F, K, work));
    }
    CK(sg_cu_moe_slot_rows(&g_cu, ptrs, by_slot ? diota : slots, NK, outs, H * es));
    CK(sg_cu_moe_combine_forward(&g_cu, y, dh, (const void *const *)ptrs, topw, dt, N, H, K));
    /* backward */
    void *dxs = dev_nan(NK * H * es), *dxe = dev_nan(N * H * es), *dx = dev_nan(N * H * es);
    float *dtopw_rows = dev_nan(NK * 4), *dtopw = dev_nan(NK * 4);
    float *z1 = zeros(E * 2 * F * H), *z2 = zeros(E * F * H);
    void *gw1 = dev_put(z1, E * 2 * F * H, dt), *gw2 = dev_put(z2, E * F * H, dt);
    void *gb1 = dev_put(z1, E * 2 * F, dt), *gb2 = dev_put(z2, E * H, dt);
    void *gWr = dev_put(z1, E * H, dt), *gbr = dev_put(z1, E, dt);
    void *dlogits = dev_nan(N * E * es);
    for (size_t e = 0; e < E; e++) {
        const size_t r = off[e], n = (size_t)cnt[e], r0 = ROW0(r);
        const char *g = (char *)gate + r0 * F * es, *u = (char *)up + r0 * F * es;
        char *dxr = (char *)dxs + r0 * H * es;
        if (oss)
            CK(sg_cu_moe_oss_expert_backward(
                &g_cu, dxr, (by_slot ? dtopw : dtopw_rows) + r0, (char *)gw1 + e * H * 2 * F * es,
                (char *)gb1 + e * 2 * F * es, (char *)gw2 + e * F * H * es,
                (char *)gb2 + e * H * es, ddy, dx_in, g, u, topw, slots + r, ROWS_AT(r), n,
                (char *)dw1 + e * H * 2 * F * es, (char *)dw2 + e * F * H * es,
                (char *)db2 + e * H * es, dt, H, F, K, work));
        else
            CK(sg_cu_moe_expert_backward(
                &g_cu, dxr, (by_slot ? dtopw : dtopw_rows) + r0, (char *)gw1 + e * F * H * es,
                (char *)gw1 + (E + e) * F * H * es, (char *)gw2 + e * H * F * es, ddy, dx_in, g, u,
                topw, slots + r, ROWS_AT(r), n, (char *)dw1 + e * F * H * es,
                (char *)dw1b + e * F * H * es, (char *)dw2 + e * H * F * es, dt, H, F, K, work));
    }
#undef ROWS_AT
#undef ROW0
    CK(sg_cu_moe_slot_rows(&g_cu, ptrs, by_slot ? diota : slots, NK, dxs, H * es));
    CK(sg_cu_moe_slots_sum(&g_cu, dxe, (const void *const *)ptrs, dt, N, H, K));
    if (!by_slot)
        CK(sg_cu_moe_scatter_slots(&g_cu, dtopw, dtopw_rows, slots, NK));
    const double aux_scale = (double)coef * (double)E / ((double)N * (double)N);
    float *rwork = dev_nan(sg_cu_moe_router_backward_work_floats(N, E) * 4);
    if (oss)
        CK(sg_cu_moe_oss_router_backward(&g_cu, dx, gWr, gbr, dlogits, dtopw, probs, sel, topw,
                                         coef ? stats : NULL, aux_scale, NULL, dx_in, dWr, dt, N, H,
                                         E, K, rwork));
    else
        CK(sg_cu_moe_router_backward(&g_cu, dx, gWr, dlogits, dtopw, probs, sel, topw,
                                     coef ? stats : NULL, aux_scale, NULL, dx_in, dWr, dt, N, H, E,
                                     K, norm, rwork));
    CK(sg_cu_add_into(&g_cu, dx, dxe, dt, N * H));
    output("logits", logits, DIMS(N, E), SG_F32);
    output("probs", probs, DIMS(N, E), SG_F32);
    output("sel", sel, DIMS(N, K), SG_F32);
    output("topw", topw, DIMS(N, K), SG_F32);
    output("aux", aux, DIMS(1), SG_F32);
    output("y", y, DIMS(N, H), dt);
    output("dlogits", dlogits, DIMS(N, E), dt);
    output("dx", dx, DIMS(N, H), dt);
    output("dWr", gWr, DIMS(E, H), dt);
    if (oss) {
        output("dbr", gbr, DIMS(E), dt);
        output("dgate_up", gw1, DIMS(E, H, 2 * F), dt);
        output("dgate_up_bias", gb1, DIMS(E, 2 * F), dt);
        output("ddown", gw2, DIMS(E, F, H), dt);
        output("ddown_bias", gb2, DIMS(E, H), dt);
    } else {
        output("dWg", gw1, DIMS(E, F, H), dt);
        output("dWu", (char *)gw1 + E * F * H * es, DIMS(E, F, H), dt);
        output("dWd", gw2, DIMS(E, H, F), dt);
    }
    free(x);
    free(h);
    free(dy);
    free(Wr);
    free(br);
    free(w1);
    free(b1);
    free(w2);
    free(b2);
    free(z1);
    free(z2);
    case_end();
}

/* Attention with GPT-OSS sinks (f32 run only): the flash kernels, then the
 * sinks' rescaling; backward through the same kernels on the rescaled out and
 * lse, and the sinks' gradient. */
static void case_attention_sinks(sg_dtype dt, size_t window, const char *name)
{
    const size_t B = 2, T = 64, Hq = 4, Hkv = 2, D = 32;
    case_begin("attention_sinks", name, dt);
    param("B", (double)B);
    param("T", (double)T);
    param("Hq", (double)Hq);
    param("Hkv", (double)Hkv);
    param("D", (double)D);
    param("window", (double)window);
    const size_t nq = B * T * Hq * D, nk = B * T * Hkv * D, nl = B * Hq * T;
    const size_t es = dt_size(dt);
    float *q = randn(nq, 1.0f), *k = randn(nk, 1.0f), *v = randn(nk, 1.0f);
    float *dout = randn(nq, 1.0f), *sinks = randn(Hq, 1.5f), *z = zeros(Hq);
    void *dq_in = input("q", q, DIMS(B, T, Hq, D), dt);
    void *dk_in = input("k", k, DIMS(B, T, Hkv, D), dt);
    void *dv_in = input("v", v, DIMS(B, T, Hkv, D), dt);
    void *dsk = input("sinks", sinks, DIMS(Hq), dt);
    void *ddout = input("dout", dout, DIMS(B, T, Hq, D), dt);
    void *dout_o = dev_nan(nq * es), *dlse = dev_nan(nl * es);
    void *ddq = dev_nan(nq * es), *ddk = dev_nan(nk * es), *ddv = dev_nan(nk * es);
    void *dds = dev_put(z, Hq, dt);
    float *work = dev_nan(sg_cu_attention_backward_work_floats(B, T, Hq, Hkv, D) * sizeof(float));
    CK(sg_cu_attention_forward(&g_cu, dout_o, dlse, dq_in, dk_in, dv_in, dt, B, T, Hq, Hkv, D,
                               window));
    CK(sg_cu_attention_sinks_forward(&g_cu, dout_o, dlse, dsk, dt, B, T, Hq, D));
    CK(sg_cu_attention_backward(&g_cu, ddq, ddk, ddv, ddout, dq_in, dk_in, dv_in, dout_o, dlse, dt,
                                B, T, Hq, Hkv, D, window, work));
    CK(sg_cu_attention_sinks_backward(&g_cu, dds, ddout, dout_o, dlse, dsk, dt, B, T, Hq, D));
    output("out", dout_o, DIMS(B, T, Hq, D), dt);
    output("lse", dlse, DIMS(B, Hq, T), dt);
    output("dq", ddq, DIMS(B, T, Hq, D), dt);
    output("dk", ddk, DIMS(B, T, Hkv, D), dt);
    output("dv", ddv, DIMS(B, T, Hkv, D), dt);
    output("dsinks", dds, DIMS(Hq), dt);
    free(q);
    free(k);
    free(v);
    free(dout);
    free(sinks);
    free(z);
    case_end();
}

/* ---- main -------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: cuda_ops_dump DIR [--dtype f32|bf16] [--seed N]\n"
               "Runs the kernels of codelets/cuda/cuda_ops.h on fixed inputs and writes\n"
               "DIR/DTYPE/manifest.json with the inputs and outputs as raw little-endian\n"
               "files (for tests/torch_cuda_ops_ref.py).\n");
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    sg_dtype dt = SG_BF16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            const char *s = argv[++i];
            if (!strcmp(s, "f32") || !strcmp(s, "fp32"))
                dt = SG_F32;
            else if (!strcmp(s, "bf16"))
                dt = SG_BF16;
            else {
                fprintf(stderr, "cuda_ops_dump: --dtype %s: f32 or bf16\n", s);
                return 2;
            }
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(argv[++i], &end, 0);
            if (errno || *end || end == argv[i]) {
                fprintf(stderr, "cuda_ops_dump: --seed %s: not a number\n", argv[i]);
                return 2;
            }
            g_seed = s;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || dir) {
            usage(stderr);
            return 2;
        } else {
            dir = argv[i];
        }
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }
    check_little_endian();
    if (sg_cu_device_count() == 0) {
        fprintf(stderr, "cuda_ops_dump: no CUDA device (%s)\n", sg_cu_last_error());
        return 2;
    }
    if (sg_cu_open(&g_cu)) {
        fprintf(stderr, "cuda_ops_dump: sg_cu_open: %s\n", sg_cu_last_error());
        return 2;
    }
    snprintf(g_root, sizeof g_root, "%s/%s", dir, sg_dtype_name(dt));
    mkdir_p(g_root);

    cJSON *man = cJSON_CreateObject();
    cJSON_AddStringToObject(man, "format", "stepgraph-cuda-ops-dump 1");
    cJSON_AddStringToObject(man, "dtype", sg_dtype_name(dt));
    cJSON_AddNumberToObject(man, "seed", (double)g_seed);
    cJSON_AddBoolToObject(man, "emulated", sg_cu_is_emulated());
    cJSON_AddStringToObject(man, "files",
                            "raw little-endian; NAME.f32 float32, NAME.i32 int32; paths relative "
                            "to this file; storage: the dtype the kernel held the tensor in (the "
                            "float32 values are exactly representable in it; f64: a double "
                            "rounded to float32)");
    g_cases = cJSON_AddArrayToObject(man, "cases");

    if (dt == SG_BF16) {
        case_cast(SG_F32, SG_BF16, dt);
        case_cast(SG_BF16, SG_F32, dt);
    } else {
        case_cast(SG_F32, SG_F16, dt);
        case_cast(SG_F16, SG_F32, dt);
    }
    case_add_into(dt);
    case_embedding(dt);
    case_rmsnorm(dt, 64, 256, 1e-5f, "N64_C256");
    case_rmsnorm(dt, 512, 64, 1e-6f, "N512_C64");
    case_rope(dt);
    case_swiglu(dt);
    case_linear(dt, 64, 256, 384, 1, "N64_in256_out384_bias");
    case_linear(dt, 64, 384, 256, 0, "N64_in384_out256");
    case_attention(dt, 0, "B2_T128_Hq8_Hkv2_D64");
    case_attention(dt, 32, "B2_T128_Hq8_Hkv2_D64_W32");
    case_cross_entropy(dt);
    case_grad_norm(dt, 0);
    case_grad_norm(dt, 1);
    case_adam(dt, 1);
    case_adam(dt, 0);
    case_lion_adagrad(dt, SG_OPTIM_LION);
    case_lion_adagrad(dt, SG_OPTIM_ADAGRAD);
    case_moe(dt, 0, 1, 0.01f, 0.3f, 0, "N48_H32_F24_E8_K2_norm_aux");
    case_moe(dt, 0, 0, 0.0f, 0.3f, 1, "N48_H32_F24_E8_K2_by_slot");
    /* GPT-OSS and sinks in fp32 only: in bf16 a clamped value within an ulp of
     * 7 flips between cut (no gradient) and not, a near-tie of logits can flip
     * a pick, and dsinks reads the bf16 lse (see torch_cuda_ops_ref.py) */
    if (dt == SG_F32) {
        case_moe(dt, 1, 0, 0.02f, 0.9f, 0, "N48_H32_F24_E8_K4_aux_clamps");
        case_moe(dt, 1, 0, 0.0f, 0.9f, 1, "N48_H32_F24_E8_K4_clamps_by_slot");
        case_attention_sinks(dt, 0, "B2_T64_Hq4_Hkv2_D32");
        case_attention_sinks(dt, 16, "B2_T64_Hq4_Hkv2_D32_W16");
    }

    char *text = cJSON_Print(man);
    if (!text)
        die("cannot print the manifest");
    g_case = "manifest";
    write_file("manifest.json", text, strlen(text));
    printf("%s/manifest.json: %d cases, dtype %s, %s build\n", g_root, cJSON_GetArraySize(g_cases),
           sg_dtype_name(dt), sg_cu_is_emulated() ? "emulated" : "CUDA");
    free(text);
    cJSON_Delete(man);
    sg_cu_close(&g_cu);
    return 0;
}
