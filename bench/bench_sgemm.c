/* bench_sgemm.c - what one core's BLAS sgemm reaches on the matrix products
 * of a training step, to put a training benchmark's FLOP rate in context
 * (scripts/bench_train.sh): stepgraph runs one single-threaded task per CPU
 * worker, so the machine's GEMM bound for it is cores x this rate.
 *
 *   bench/bench_sgemm [M N K] [seconds]
 *
 * Defaults: 2048 x 688 x 256 (a bench-3m MLP product over 8 sequences of
 * 256 tokens), 2 s. Set OPENBLAS_NUM_THREADS=1 (the script does). Prints
 * "sgemm M N K: X GFLOP/s (best of R runs)" and the kernels OpenBLAS used,
 * chosen as `stepgraph` chooses them (codelets/cpu/blas_core.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "codelets/cpu/blas_core.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long arg(int argc, char **argv, int i, long dflt)
{
    if (argc <= i)
        return dflt;
    char *end;
    long v = strtol(argv[i], &end, 10);
    return *end || v <= 0 || v > 65536 ? -1 : v;
}

int main(int argc, char **argv)
{
    sg_blas_core_select(argv);
    long M = arg(argc, argv, 1, 2048), N = arg(argc, argv, 2, 688), K = arg(argc, argv, 3, 256);
    double budget = argc > 4 ? atof(argv[4]) : 2.0;
    if (M < 0 || N < 0 || K < 0 || !(budget > 0 && budget < 600)) {
        fprintf(stderr, "usage: bench_sgemm [M N K] [seconds]  (sizes 1..65536)\n");
        return 2;
    }
    float *a = malloc((size_t)M * (size_t)K * sizeof *a);
    float *b = malloc((size_t)K * (size_t)N * sizeof *b);
    float *c = malloc((size_t)M * (size_t)N * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_sgemm: out of memory\n");
        return 1;
    }
    for (long i = 0; i < M * K; i++)
        a[i] = (float)((i % 13) - 6) * 0.01f;
    for (long i = 0; i < K * N; i++)
        b[i] = (float)((i % 7) - 3) * 0.01f;
    double flops = 2.0 * (double)M * (double)N * (double)K, best = 0, t_end = now_s() + budget;
    int runs = 0;
    while (runs < 3 || now_s() < t_end) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, a,
                    (int)K, b, (int)N, 0.0f, c, (int)N);
        double dt = now_s() - t0;
        if (dt > 0 && flops / dt > best)
            best = flops / dt;
        runs++;
    }
    printf("sgemm %ld %ld %ld: %.1f GFLOP/s (best of %d runs, checksum %g)\n", M, N, K, best * 1e-9,
           runs, (double)c[(M * N) / 2]);
    char blas[200];
    sg_blas_core_describe(blas, sizeof blas);
    fprintf(stderr, "%s\n", blas);
    free(a);
    free(b);
    free(c);
    return 0;
}
