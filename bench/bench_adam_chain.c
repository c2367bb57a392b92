/* bench_adam_chain.c - the whole CPU optimizer chain of a bf16 mixed-precision
 * CPU sub-group, per parameter, as stepgraph runs it with unfused casts
 * (cast.grad bf16 -> fp32, adam_cpu, cast.param fp32 -> bf16: three passes)
 * and with cast_placement "fused" (one pass: sg_adam_step_lowp), against
 * this machine's copy bandwidth (the copy probe of `stepgraph calibrate`,
 * runtime/sim/host_probe.c) and against peers timed by
 * scripts/bench_adam_chain.sh (DeepSpeed's chain). Not a test: timings are
 * never asserted.
 *
 * Usage: bench_adam_chain [--n N] [--threads 1,2] [--reps R]
 *                         [--peer 'NAME=T:SECONDS,...']...
 *
 * Bytes per parameter are those the arrays' passes move (reads + writes):
 *   unfused  cast.grad 2 + 4, Adam 16 + 12, cast.param 4 + 2   = 40 B
 *   fused    g 2, p m v 12 read; p m v 12, bf16 p 2 written     = 28 B
 * The bound is the copy probe's GB/s (bytes read + written, T threads at
 * once) over 28 B: the fused chain's parameters per second if it streamed at
 * memcpy's speed. glibc's memcpy of large buffers may use non-temporal
 * stores, which some hosts (VMs) run slower than in-place updates, so the
 * fused chain's own access pattern is timed too ("pattern"): the same arrays
 * read and written with trivial arithmetic instead of Adam's, the fastest
 * this machine moves those 28 B. Each of T threads runs the chain on its own contiguous
 * share of the N parameters (as T CPU workers run T optimizer tiles), each
 * pass over the whole share before the next (the graph's nodes), so every
 * pass streams from memory. Every figure is the best of R rounds after one
 * warm-up round; a round runs both chains once.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/adam.h"
#include "codelets/cpu/adam_lowp.h"
#include "codelets/cpu/ops.h"
#include "common/clock.h"
#include "runtime/sim/host_probe.h"
#include "bench/bench_util.h"

#define UNFUSED_BYTES 40.0
#define FUSED_BYTES 28.0

/* The fused chain's traffic with no Adam in it: g16 and p, m, v read; p,
 * m, v and the bf16 p written (truncated, not rounded: a bound, not a
 * cast), with the software prefetch of adam.c's loops (256 floats ahead,
 * once per 16 elements), which lifts Adam from 81-87% to 94-103% of this
 * machine's read-4/write-3 bound (adam.c). */
static inline void pattern_block(float *restrict p, const uint16_t *restrict g, float *restrict m,
                                 float *restrict v, uint16_t *restrict pb, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)g[i] << 16;
        float gi;
        memcpy(&gi, &u, sizeof gi);
        float pi = p[i] + 1e-7f * gi;
        p[i] = pi;
        m[i] = 0.5f * m[i] + gi;
        v[i] = 0.5f * v[i] + gi * gi;
        uint32_t w;
        memcpy(&w, &pi, sizeof w);
        pb[i] = (uint16_t)(w >> 16);
    }
}

BW_KERNEL static void k_pattern(float *restrict p, const uint16_t *restrict g, float *restrict m,
                                float *restrict v, uint16_t *restrict pb, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __builtin_prefetch(p + i + 256);
        __builtin_prefetch(m + i + 256);
        __builtin_prefetch(v + i + 256);
        __builtin_prefetch(g + i + 256);
        pattern_block(p + i, g + i, m + i, v + i, pb + i, 16);
    }
    pattern_block(p + i, g + i, m + i, v + i, pb + i, n - i);
}

typedef struct chain {
    float *p, *m, *v, *g32;
    uint16_t *g16, *p16;
    size_t n;
    int64_t t;
    int fused; /* 0 unfused, 1 fused, 2 the pattern kernel */
    int rc;
} chain;

static void *chain_run(void *arg)
{
    chain *c = arg;
    sg_adam_params prm = SG_ADAM_PARAMS_DEFAULT;
    prm.weight_decay = 0.01f;
    if (c->fused == 2) {
        k_pattern(c->p, c->g16, c->m, c->v, c->p16, c->n);
        return NULL;
    }
    if (c->fused) {
        c->rc = sg_adam_step_lowp(&prm, c->t, c->p, c->g16, SG_BF16, c->m, c->v, c->p16, SG_BF16,
                                  c->n, 1.0f);
        return NULL;
    }
    sg_cast_bf16_to_f32(c->g32, c->g16, c->n); /* cast.grad */
    c->rc = sg_adam_step(&prm, c->t, c->p, c->g32, c->m, c->v, NULL, c->n, 1.0f);
    sg_cast_f32_to_bf16(c->p16, c->p, c->n); /* cast.param */
    return NULL;
}

typedef struct arrays {
    float *p, *m, *v, *g32;
    uint16_t *g16, *p16;
    size_t n;
} arrays;

/* Seconds of one round of a chain over all n parameters on nthreads. */
static double run_chain(const arrays *a, int nthreads, int fused, int64_t t, int *rc)
{
    chain ch[MAXT];
    pthread_t tid[MAXT];
    /* whole cache lines per thread, as the pthreads split of sg_adam does */
    size_t per = ((a->n + (size_t)nthreads - 1) / (size_t)nthreads + 15) / 16 * 16;
    int nc = 0;
    for (size_t off = 0; off < a->n && nc < MAXT; off += per, nc++)
        ch[nc] = (chain){a->p + off,
                         a->m + off,
                         a->v + off,
                         a->g32 + off,
                         a->g16 + off,
                         a->p16 + off,
                         a->n - off < per ? a->n - off : per,
                         t,
                         fused,
                         0};
    double t0 = sg_monotonic_s();
    for (int i = 1; i < nc; i++)
        if (pthread_create(&tid[i], NULL, chain_run, &ch[i]))
            chain_run(&ch[i]), tid[i] = 0;
    chain_run(&ch[0]);
    for (int i = 1; i < nc; i++)
        if (tid[i])
            pthread_join(tid[i], NULL);
    double s = sg_monotonic_s() - t0;
    for (int i = 0; i < nc; i++)
        *rc |= ch[i].rc;
    return s;
}

static void *xalloc(size_t bytes)
{
    void *b = NULL;
    if (posix_memalign(&b, 64, bytes))
        return NULL;
    return b;
}

static int alloc_arrays(arrays *a, size_t n)
{
    a->n = n;
    a->p = xalloc(n * sizeof(float));
    a->m = xalloc(n * sizeof(float));
    a->v = xalloc(n * sizeof(float));
    a->g32 = xalloc(n * sizeof(float));
    a->g16 = xalloc(n * sizeof(uint16_t));
    a->p16 = xalloc(n * sizeof(uint16_t));
    if (!a->p || !a->m || !a->v || !a->g32 || !a->g16 || !a->p16)
        return -1;
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        float r = (float)(x >> 8) / 16777216.0f - 0.5f;
        a->p[i] = r;
        a->g16[i] = sg_f32_to_bf16(0.01f * r);
    }
    memset(a->m, 0, n * sizeof(float));
    memset(a->v, 0, n * sizeof(float));
    memset(a->g32, 0, n * sizeof(float));
    memset(a->p16, 0, n * sizeof(uint16_t));
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_adam_chain [--n N] [--threads 1,2] [--reps R] "
                    "[--peer 'NAME=T:SECONDS,...']...\n");
}

int main(int argc, char **argv)
{
    size_t n = 64u << 20;
    int threads[8] = {1, 2}, nthr = 2, reps = 5, npeers = 0;
    static peer peers[MAXPEER];
    for (int i = 1; i < argc; i++) {
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--n") && val) {
            n = (size_t)strtod(val, NULL);
        } else if (!strcmp(argv[i], "--threads") && val) {
            nthr = parse_list(val, threads, 8);
        } else if (!strcmp(argv[i], "--reps") && val) {
            reps = atoi(val);
        } else if (!strcmp(argv[i], "--peer") && val && npeers < MAXPEER) {
            if (parse_peer(val, NULL, &peers[npeers++])) {
                fprintf(stderr, "bench_adam_chain: --peer '%s': expected NAME=T:SECONDS,...\n",
                        val);
                return 2;
            }
        } else {
            usage();
            return 2;
        }
        i++;
    }
    if (n < 1024 || nthr < 1 || reps < 1) {
        usage();
        return 2;
    }
    arrays a;
    if (alloc_arrays(&a, n)) {
        fprintf(stderr, "bench_adam_chain: cannot allocate %zu parameters\n", n);
        return 1;
    }
    printf("CPU optimizer chain, bf16 gradients in, bf16 parameters out, %zu parameters "
           "(Adam variant %s); best of %d rounds\n\n",
           n, sg_adam_isa_name(SG_ADAM_ISA_AUTO), reps);
    printf("| threads | copy probe | bound (28 B) | pattern (28 B) | unfused (40 B) | "
           "fused (28 B) | fused/bound | fused/pattern | fused/unfused |");
    for (int k = 0; k < npeers; k++)
        printf(" %s | fused/that |", peers[k].name);
    printf("\n|---|---|---|---|---|---|---|---|---|");
    for (int k = 0; k < npeers; k++)
        printf("---|---|");
    printf("\n");
    int rc = 0;
    int64_t t = 1;
    for (int ti = 0; ti < nthr; ti++) {
        int T = threads[ti];
        double copy = sg_host_copy_gbs(T); /* GB/s, read + written */
        double best[3] = {INFINITY, INFINITY, INFINITY};
        for (int r = 0; r <= reps; r++) {
            for (int f = 0; f < 3; f++) {
                double s = run_chain(&a, T, f, t++, &rc);
                if (r > 0) /* round 0 warms up */
                    best[f] = fmin(best[f], s);
            }
        }
        double pps_u = (double)n / best[0], pps_f = (double)n / best[1];
        double pps_k = (double)n / best[2];
        double bound = copy * 1e9 / FUSED_BYTES;
        printf("| %d | %.1f GB/s | %.0f M/s | %.0f M/s, %.1f GB/s | %.0f M/s, %.1f GB/s | "
               "%.0f M/s, %.1f GB/s | %.0f%% | %.0f%% | %.2fx |",
               T, copy, bound / 1e6, pps_k / 1e6, pps_k * FUSED_BYTES / 1e9, pps_u / 1e6,
               pps_u * UNFUSED_BYTES / 1e9, pps_f / 1e6, pps_f * FUSED_BYTES / 1e9,
               bound > 0 ? 100.0 * pps_f / bound : 0.0, 100.0 * pps_f / pps_k, pps_f / pps_u);
        for (int k = 0; k < npeers; k++) {
            double s = peers[k].s[T];
            if (s > 0)
                printf(" %.0f M/s | %.2fx |", (double)n / s / 1e6, pps_f * s / (double)n);
            else
                printf(" n/a | n/a |");
        }
        printf("\n");
    }
    if (rc)
        fprintf(stderr, "bench_adam_chain: a step failed (%d)\n", rc);
    return rc ? 1 : 0;
}
