/* bench_gemm.c - the two engines of codelets/cpu/gemm.h on one core, on the
 * products of a bench-3m layer (hidden 256, MLP 688) over T tokens: the
 * forward x W^T, the input gradient dy W and the weight gradient dW +=
 * dy^T x of the q (256 x 256), gate (688 x 256) and down (256 x 688)
 * projections. Each product is timed with sgemm (fp32) and with bf16
 * operands on AMX, the two alternating, best of R rounds of at least
 * 0.2 s each; prints GFLOP/s and their ratio. Not a test: docs/cpu-kernels.md's
 * figures ("bf16 products on AMX") come from it.
 *
 * Usage: OPENBLAS_NUM_THREADS=1 bench_gemm [T] [R]
 *        (defaults 2048 = 8 sequences of 256, 5; one BLAS thread, as a
 *        stepgraph task runs it: without that variable it refuses) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codelets/cpu/blas_core.h"
#include "codelets/cpu/gemm.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct product {
    const char *name;
    int ta, tb;
    size_t M, N, K;
    float beta;
} product;

/* GFLOP/s of one engine: repeated calls for at least 0.2 s */
static double rate(const product *p, int bf16, const float *A, const float *B, float *C)
{
    sg_gemm_set_bf16(bf16);
    size_t lda = p->ta ? p->M : p->K, ldb = p->tb ? p->K : p->N;
    sg_gemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, p->beta, C, p->N);
    int reps = 0;
    double t0 = now(), t;
    do {
        sg_gemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, A, lda, B, ldb, p->beta, C, p->N);
        reps++;
    } while ((t = now() - t0) < 0.2);
    return 2.0 * (double)p->M * (double)p->N * (double)p->K * reps / t * 1e-9;
}

int main(int argc, char **argv)
{
    const char *threads = getenv("OPENBLAS_NUM_THREADS");
    if (!threads || strcmp(threads, "1") != 0) {
        fprintf(stderr, "bench_gemm: run it with OPENBLAS_NUM_THREADS=1 (one core, as a "
                        "stepgraph task uses its BLAS)\n");
        return 2;
    }
    sg_blas_core_select(argv);
    long T = argc > 1 ? strtol(argv[1], NULL, 10) : 2048;
    long R = argc > 2 ? strtol(argv[2], NULL, 10) : 5;
    if (T < 1 || T > 1 << 20 || R < 1 || R > 100) {
        fprintf(stderr, "usage: bench_gemm [T tokens, 1..1048576] [R rounds, 1..100]\n");
        return 2;
    }
    if (!sg_gemm_amx_usable())
        fprintf(stderr, "bench_gemm: bf16 products run on sgemm here (no AMX): both "
                        "columns measure sgemm\n");
    const size_t t = (size_t)T;
    const product prods[] = {
        {"forward q", 0, 1, t, 256, 256, 0.0f},    {"forward gate", 0, 1, t, 688, 256, 0.0f},
        {"forward down", 0, 1, t, 256, 688, 0.0f}, {"dx gate", 0, 0, t, 256, 688, 0.0f},
        {"dx down", 0, 0, t, 688, 256, 0.0f},      {"dW q", 1, 0, 256, 256, t, 1.0f},
        {"dW gate", 1, 0, 688, 256, t, 1.0f},      {"dW down", 1, 0, 256, 688, t, 1.0f},
    };
    size_t most = t * 688;
    float *A = malloc(most * sizeof *A), *B = malloc(most * sizeof *B);
    float *C = calloc(most > 688 * 688 ? most : 688 * 688, sizeof *C);
    if (!A || !B || !C) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < most; i++) {
        A[i] = (float)((int)(i % 13) - 6) * 0.01f;
        B[i] = (float)((int)(i % 7) - 3) * 0.01f;
    }
    char what[200];
    sg_gemm_describe(what, sizeof what);
    printf("%s\none core, %ld tokens, best of %ld alternating rounds\n", what, T, R);
    printf("%-14s %6s %6s %6s %12s %12s %7s\n", "product", "M", "N", "K", "sgemm GF/s", "amx GF/s",
           "ratio");
    for (size_t i = 0; i < sizeof prods / sizeof prods[0]; i++) {
        double best[2] = {0, 0};
        for (long r = 0; r < R; r++)
            for (int e = 0; e < 2; e++) {
                double g = rate(&prods[i], e, A, B, C);
                best[e] = g > best[e] ? g : best[e];
            }
        printf("%-14s %6zu %6zu %6zu %12.1f %12.1f %6.2fx\n", prods[i].name, prods[i].M, prods[i].N,
               prods[i].K, best[0], best[1], best[1] / best[0]);
    }
    free(A);
    free(B);
    free(C);
    return 0;
}
