/* gemm_model.c - a GEMM's time from its shape (gemm_model.h). */
#include "runtime/sim/gemm_model.h"

#include <math.h>

#define BF16_BYTES 2.0

double sg_gemm_batched_seconds(const sg_gpu_kernels *k, double batch, double m, double n, double kk)
{
    if (batch <= 0 || m <= 0 || n <= 0 || kk <= 0)
        return 0;
    /* output tiles of 128 x 256, run in waves of one tile per SM: a partial
     * tile or a partial last wave costs as much as a full one; the batch's
     * products share the waves */
    double tiles = batch * ceil(m / SG_GEMM_TILE_M) * ceil(n / SG_GEMM_TILE_N);
    double waves = ceil(tiles / k->sms);
    double padded_flops = 2.0 * waves * k->sms * SG_GEMM_TILE_M * SG_GEMM_TILE_N * kk;
    double compute = padded_flops / (k->gemm_tflops * 1e12);
    /* A (M,K), B (K,N), C (M,N) of each product */
    double bytes = batch * BF16_BYTES * (m * kk + kk * n + m * n);
    double memory = bytes / (k->hbm_gbs * 1e9);
    return compute > memory ? compute : memory;
}

double sg_gemm_seconds(const sg_gpu_kernels *k, double m, double n, double kk)
{
    return sg_gemm_batched_seconds(k, 1, m, n, kk);
}
