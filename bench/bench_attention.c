/* bench_attention.c - times the GPU attention implementations
 * (codelets/cuda/: the fp32 route of attention.cu, the cuBLAS route of
 * attention_blas.cu) on one shape, forward and forward + backward, and
 * prints TFLOP/s against FlashAttention-2's published 294 TFLOP/s (H100
 * SXM, causal, head dim 128, seq 4096, forward + backward), so that a GPU
 * session chooses `auto` by measurement (docs/gpu.md, "Attention
 * implementations"; scripts/gpu_verify.sh, stage attention_bench). Not a
 * test: no assertion on time.
 *
 * FLOPs as FlashAttention's benchmarks count them: the forward's two
 * products, 4 B Hq T^2 D, halved when causal (window 0); forward +
 * backward 3.5 times that (the backward's five products). With a window
 * only the visible scores are counted.
 *
 * Each implementation runs the same inputs; after the timed loops its out
 * and dq are compared with the first implementation's (max |diff| / max
 * |first|), so a route that is fast because it is wrong shows.
 *
 * Usage: bench_attention [--impl fp32,cublas] [--dtype bf16] [--B 4]
 *   [--T 4096] [--Hq 16] [--Hkv 16] [--D 128] [--window 0] [--iters 10]
 *   [--warmup 2] [--tile 0] [--scratch-mb 512]
 * (the defaults are FlashAttention-2's benchmark shape: 16k tokens, hidden
 * 2048). One line per implementation:
 *   impl=cublas dtype=bf16 B=4 T=4096 ... fwd_gflop=.. fwd_ms=.. fwdbwd_ms=..
 *   fwd_tflops=.. fwdbwd_tflops=.. of_fa2=.. out_diff=.. dq_diff=..
 * then `best=IMPL`: the fastest forward + backward.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codelets/cpu/ops.h"
#include "codelets/cuda/cuda_ops.h"
#include "common/error.h"

#define FA2_TFLOPS 294.0 /* FlashAttention-2, H100 SXM, causal, D 128, T 4096, fwd + bwd */
#define MAX_IMPLS 4

typedef struct bench_opts {
    sg_cu_att_impl impl[MAX_IMPLS];
    int nimpl;
    sg_dtype dt;
    size_t B, T, Hq, Hkv, D, window, tile, scratch_mb;
    int iters, warmup;
} bench_opts;

typedef struct bench_bufs {
    void *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv;
    float *work;
} bench_bufs;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "bench_attention: %s\nusage: bench_attention [--impl fp32,cublas] [--dtype "
            "bf16|f16|f32] [--B N] [--T N] [--Hq N] [--Hkv N] [--D N] [--window N] "
            "[--iters N] [--warmup N] [--tile N] [--scratch-mb N]\n",
            why);
    return 2;
}

/* --impl's comma-separated list (auto is resolved for the shape). */
static int parse_impls(bench_opts *o, const char *list)
{
    char buf[128], *save = NULL;
    snprintf(buf, sizeof buf, "%s", list);
    o->nimpl = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        sg_error err;
        sg_error_clear(&err);
        sg_cu_att_impl impl;
        if (o->nimpl == MAX_IMPLS || sg_cu_attention_impl_parse(t, "--impl", &impl, &err)) {
            fprintf(stderr, "bench_attention: %s\n",
                    o->nimpl == MAX_IMPLS ? "too many --impl" : err.msg);
            return SG_EINVAL;
        }
        o->impl[o->nimpl++] = impl;
    }
    return o->nimpl ? SG_OK : SG_EINVAL;
}

static int parse_size(const char *flag, const char *v, size_t *out)
{
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (!*v || *end || v[0] == '-') {
        fprintf(stderr, "bench_attention: %s %s: expected a whole number\n", flag, v);
        return SG_EINVAL;
    }
    *out = (size_t)x;
    return SG_OK;
}

static int parse_args(bench_opts *o, int argc, char **argv)
{
    *o = (bench_opts){.dt = SG_BF16,
                      .B = 4,
                      .T = 4096,
                      .Hq = 16,
                      .Hkv = 16,
                      .D = 128,
                      .scratch_mb = 512,
                      .iters = 10,
                      .warmup = 2};
    if (parse_impls(o, "fp32,cublas"))
        return SG_EINVAL;
    struct {
        const char *flag;
        size_t *dst;
    } sizes[] = {{"--B", &o->B},       {"--T", &o->T},
                 {"--Hq", &o->Hq},     {"--Hkv", &o->Hkv},
                 {"--D", &o->D},       {"--window", &o->window},
                 {"--tile", &o->tile}, {"--scratch-mb", &o->scratch_mb}};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            return usage("each option takes a value");
        const char *f = argv[i], *v = argv[i + 1];
        size_t x;
        int done = 0;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            if (!strcmp(f, sizes[s].flag)) {
                if (parse_size(f, v, sizes[s].dst))
                    return SG_EINVAL;
                done = 1;
            }
        if (done)
            continue;
        if (!strcmp(f, "--impl")) {
            if (parse_impls(o, v))
                return SG_EINVAL;
        } else if (!strcmp(f, "--dtype")) {
            if (!strcmp(v, "bf16"))
                o->dt = SG_BF16;
            else if (!strcmp(v, "f16"))
                o->dt = SG_F16;
            else if (!strcmp(v, "f32"))
                o->dt = SG_F32;
            else
                return usage("--dtype: bf16, f16 or f32");
        } else if (!strcmp(f, "--iters") || !strcmp(f, "--warmup")) {
            if (parse_size(f, v, &x) || x > 100000)
                return SG_EINVAL;
            *(!strcmp(f, "--iters") ? &o->iters : &o->warmup) = (int)x;
        } else {
            return usage("unknown option");
        }
    }
    if (o->iters < 1 || o->B == 0 || o->T == 0 || o->scratch_mb == 0)
        return usage("--iters, --B, --T and --scratch-mb must be positive");
    return SG_OK;
}

/* Visible (query, key) pairs of one head: T (T + 1) / 2 causal, fewer
 * with a window. */
static double visible_pairs(size_t T, size_t W)
{
    if (W == 0 || W >= T)
        return (double)T * (double)(T + 1) / 2.0;
    return (double)W * (double)(W + 1) / 2.0 + (double)(T - W) * (double)W;
}

/* ---- device data ----------------------------------------------------------------- */

static void *dev_random(size_t n, sg_dtype dt, uint64_t *state)
{
    const size_t es = sg_dtype_size(dt);
    float *x = malloc(n * sizeof *x);
    void *h = malloc(n * es), *d = sg_cu_malloc(n * es);
    if (!x || !h || !d) {
        free(x), free(h), sg_cu_free(d);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) { // uniform in [-1, 1): xorshift
        *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;
        x[i] = (float)((double)(*state >> 11) * 0x1p-52 - 1.0);
    }
    if (dt == SG_F32)
        memcpy(h, x, n * es);
    else if (dt == SG_BF16)
        sg_cast_f32_to_bf16(h, x, n);
    else
        sg_cast_f32_to_f16(h, x, n);
    int rc = sg_cu_to_device(d, h, n * es);
    free(x), free(h);
    if (rc) {
        sg_cu_free(d);
        return NULL;
    }
    return d;
}

static int bufs_alloc(bench_bufs *b, const bench_opts *o)
{
    const size_t nq = o->B * o->T * o->Hq * o->D, nk = o->B * o->T * o->Hkv * o->D;
    const size_t es = sg_dtype_size(o->dt);
    uint64_t st = 0x5eed5eedull;
    memset(b, 0, sizeof *b);
    b->q = dev_random(nq, o->dt, &st), b->k = dev_random(nk, o->dt, &st);
    b->v = dev_random(nk, o->dt, &st), b->dout = dev_random(nq, o->dt, &st);
    b->out = sg_cu_malloc(nq * es), b->lse = sg_cu_malloc(o->B * o->Hq * o->T * es);
    b->dq = sg_cu_malloc(nq * es), b->dk = sg_cu_malloc(nk * es), b->dv = sg_cu_malloc(nk * es);
    b->work = sg_cu_malloc(sg_cu_attention_backward_work_floats(o->B, o->T, o->Hq, o->Hkv, o->D) *
                           sizeof(float));
    return b->q && b->k && b->v && b->dout && b->out && b->lse && b->dq && b->dk && b->dv && b->work
               ? SG_OK
               : SG_ENOMEM;
}

static void bufs_free(bench_bufs *b)
{
    void *p[] = {b->q, b->k, b->v, b->dout, b->out, b->lse, b->dq, b->dk, b->dv, b->work};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        sg_cu_free(p[i]);
}

/* ---- one implementation ----------------------------------------------------------- */

static int forward(const sg_cu *cu, const bench_opts *o, sg_cu_att_impl impl, bench_bufs *b)
{
    if (impl == SG_CU_ATT_CUBLAS)
        return sg_cu_attention_blas_forward(cu, o->tile, o->scratch_mb << 20, b->out, b->lse, b->q,
                                            b->k, b->v, o->dt, o->B, o->T, o->Hq, o->Hkv, o->D,
                                            o->window);
    return sg_cu_attention_fp32_forward(cu, b->out, b->lse, b->q, b->k, b->v, o->dt, o->B, o->T,
                                        o->Hq, o->Hkv, o->D, o->window);
}

static int backward(const sg_cu *cu, const bench_opts *o, sg_cu_att_impl impl, bench_bufs *b)
{
    if (impl == SG_CU_ATT_CUBLAS)
        return sg_cu_attention_blas_backward(cu, o->tile, o->scratch_mb << 20, b->dq, b->dk, b->dv,
                                             b->dout, b->q, b->k, b->v, b->out, b->lse, o->dt, o->B,
                                             o->T, o->Hq, o->Hkv, o->D, o->window);
    return sg_cu_attention_fp32_backward(cu, b->dq, b->dk, b->dv, b->dout, b->q, b->k, b->v, b->out,
                                         b->lse, o->dt, o->B, o->T, o->Hq, o->Hkv, o->D, o->window,
                                         b->work);
}

/* Seconds per call of forward (with_bwd 0) or forward + backward. */
static int time_calls(const sg_cu *cu, const bench_opts *o, sg_cu_att_impl impl, bench_bufs *b,
                      int with_bwd, double *sec)
{
    int rc = SG_OK;
    for (int i = 0; !rc && i < o->warmup + o->iters; i++) {
        if (i == o->warmup && !(rc = sg_cu_sync(cu)))
            *sec = now();
        rc = forward(cu, o, impl, b);
        if (!rc && with_bwd)
            rc = backward(cu, o, impl, b);
    }
    if (!rc)
        rc = sg_cu_sync(cu);
    *sec = (now() - *sec) / o->iters;
    return rc;
}

/* The n elements of dt at device d as floats (NULL on failure). */
static float *host_floats(const void *d, size_t n, sg_dtype dt)
{
    const size_t es = sg_dtype_size(dt);
    void *h = malloc(n * es);
    float *x = malloc(n * sizeof *x);
    if (!h || !x || sg_cu_to_host(h, d, n * es)) {
        free(h), free(x);
        return NULL;
    }
    if (dt == SG_F32)
        memcpy(x, h, n * es);
    else if (dt == SG_BF16)
        sg_cast_bf16_to_f32(x, h, n);
    else
        sg_cast_f16_to_f32(x, h, n);
    free(h);
    return x;
}

/* max |x - ref| / max |ref| for the n elements of dt at device d_x. */
static double rel_diff(const void *d_x, const float *ref, size_t n, sg_dtype dt)
{
    float *x = host_floats(d_x, n, dt);
    if (!x || !ref) {
        free(x);
        return NAN;
    }
    double err = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)x[i] - ref[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    free(x);
    return scale > 0 ? err / scale : err;
}

int main(int argc, char **argv)
{
    bench_opts o;
    if (parse_args(&o, argc, argv))
        return 2;
    if (sg_cu_device_count() == 0) {
        printf("bench_attention: no CUDA device\n");
        return 0;
    }
    sg_cu cu;
    bench_bufs b;
    if (sg_cu_open(&cu) || bufs_alloc(&b, &o)) {
        fprintf(stderr, "bench_attention: device set-up failed: %s\n", sg_cu_last_error());
        return 1;
    }
    const double fwd_flops = 4.0 * o.B * o.Hq * o.D * visible_pairs(o.T, o.window);
    const size_t nq = o.B * o.T * o.Hq * o.D;
    float *ref_out = NULL, *ref_dq = NULL;
    double best = INFINITY;
    const char *best_name = "none";
    int failed = 0;
    printf("bench_attention: %s device\n", sg_cu_is_emulated() ? "emulated" : "CUDA");
    for (int i = 0; i < o.nimpl; i++) {
        sg_cu_att_impl impl =
            o.impl[i] == SG_CU_ATT_AUTO ? sg_cu_attention_impl_auto(o.dt, o.T, o.D) : o.impl[i];
        double tf = 0, tfb = 0;
        int rc = time_calls(&cu, &o, impl, &b, 0, &tf);
        if (!rc)
            rc = time_calls(&cu, &o, impl, &b, 1, &tfb);
        if (rc) {
            printf("impl=%s failed: %s (%s)\n", sg_cu_attention_impl_name(impl), sg_strerror(rc),
                   sg_cu_last_error());
            failed = 1;
            continue;
        }
        if (!ref_out) {
            ref_out = host_floats(b.out, nq, o.dt);
            ref_dq = host_floats(b.dq, nq, o.dt);
        }
        const double od = rel_diff(b.out, ref_out, nq, o.dt);
        const double qd = rel_diff(b.dq, ref_dq, nq, o.dt);
        const double fb = 3.5 * fwd_flops / tfb * 1e-12;
        printf("impl=%s dtype=%s B=%zu T=%zu Hq=%zu Hkv=%zu D=%zu window=%zu tile=%zu "
               "scratch_mb=%zu fwd_gflop=%.9g fwd_ms=%.3f fwdbwd_ms=%.3f fwd_tflops=%.1f "
               "fwdbwd_tflops=%.1f of_fa2=%.2f out_diff=%.2e dq_diff=%.2e\n",
               sg_cu_attention_impl_name(impl), sg_dtype_name(o.dt), o.B, o.T, o.Hq, o.Hkv, o.D,
               o.window,
               impl == SG_CU_ATT_CUBLAS
                   ? sg_cu_attention_blas_tile_rows(o.tile, o.scratch_mb << 20, 1, o.dt, o.B, o.T,
                                                    o.Hq, o.Hkv, o.window)
                   : 0,
               o.scratch_mb, fwd_flops * 1e-9, tf * 1e3, tfb * 1e3, fwd_flops / tf * 1e-12, fb,
               fb / FA2_TFLOPS, od, qd);
        if (tfb < best) {
            best = tfb;
            best_name = sg_cu_attention_impl_name(impl);
        }
    }
    printf("best=%s\n", best_name);
    free(ref_out), free(ref_dq);
    bufs_free(&b);
    sg_cu_close(&cu);
    return failed;
}
