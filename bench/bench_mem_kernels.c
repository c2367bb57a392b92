/* bench_mem_kernels.c - the memory-bound CPU kernels of a step on one core:
 * the gradient-norm partial, the sum of two weight-gradient partials into a
 * gradient, and the bf16 casts both ways, each the best of 6 calls on N
 * values (default 32M; 262144 fits in cache), in GB/s of bytes read and
 * written. Not a test: the figures in docs/cpu-kernels.md ("Memory-bound kernels") come
 * from it.
 *
 * Usage: bench_mem_kernels [N] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "codelets/cpu/ops.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { NORM, SUM2, TO_BF16, TO_F32, NKERNELS };

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : (size_t)32 << 20;
    if (n < 1024) {
        fprintf(stderr, "usage: bench_mem_kernels [N >= 1024]\n");
        return 2;
    }
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *o = malloc(n * sizeof *o);
    uint16_t *h = malloc(n * sizeof *h);
    if (!a || !b || !o || !h) {
        fprintf(stderr, "bench_mem_kernels: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)(i % 1000) * 1e-3f - 0.3f;
        b[i] = (float)(i % 777) * 1e-3f;
        o[i] = 0.5f;
    }
    const float *parts[2] = {a, b};
    const double bytes[NKERNELS] = {4.0 * n, 16.0 * n, 6.0 * n, 6.0 * n};
    const char *name[NKERNELS] = {"grad_norm_partial", "grad_partials_sum (2, accumulate)",
                                  "cast f32 -> bf16", "cast bf16 -> f32"};
    double best[NKERNELS], sumsq = 0;
    int nonfinite = 0;
    for (int k = 0; k < NKERNELS; k++) {
        best[k] = 1e30;
        for (int r = 0; r < 6; r++) {
            double t0 = now();
            switch (k) {
            case NORM: sg_grad_norm_partial(&sumsq, &nonfinite, a, n); break;
            case SUM2: sg_grad_partials_sum(o, parts, 2, n, 1); break;
            case TO_BF16: sg_cast_f32_to_bf16(h, a, n); break;
            default: sg_cast_bf16_to_f32(o, h, n); break;
            }
            double t = now() - t0;
            best[k] = t < best[k] ? t : best[k];
        }
        printf("%-36s %7.2f GB/s\n", name[k], bytes[k] / best[k] / 1e9);
    }
    printf("(N = %zu; sum of squares %.6g, so the calls are not optimised away)\n", n, sumsq);
    free(a), free(b), free(o), free(h);
    return nonfinite;
}
