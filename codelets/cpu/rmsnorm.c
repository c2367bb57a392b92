/* rmsnorm.c - RMSNorm over the last dimension, forward and backward (see ops.h).
 *
 * y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps). Row sums are taken
 * in double; rows may be as short as a head (Qwen3's QK-norm, C = D).
 */
#include "codelets/cpu/ops.h"
#include "codelets/cpu/simd.h"

#include <math.h>
#include <stdlib.h>

#define LANES 8 /* independent partial sums: the loop vectorises */

/* sum_c a[c] * b[c] in double, in a fixed order. */
SG_SIMD_CLONES static double dot_f64(const float *restrict a, const float *restrict b, size_t n)
{
    double acc[LANES] = {0};
    size_t c = 0;
    for (; c + LANES <= n; c += LANES)
        for (size_t j = 0; j < LANES; j++)
            acc[j] += (double)a[c + j] * b[c + j];
    for (; c < n; c++)
        acc[0] += (double)a[c] * b[c];
    double s = 0.0;
    for (size_t j = 0; j < LANES; j++)
        s += acc[j];
    return s;
}

SG_SIMD_CLONES int sg_rmsnorm_forward(float *restrict out, float *restrict rstd,
                                      const float *restrict x, const float *restrict w, size_t N,
                                      size_t C, float eps)
{
    if (C == 0 || !(eps >= 0.0f))
        return SG_EINVAL;
    for (size_t n = 0; n < N; n++) {
        const float *restrict xr = x + n * C; // (C)
        float *restrict yr = out + n * C;     // (C)
        double ss = dot_f64(xr, xr, C);
        float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
        if (rstd)
            rstd[n] = r;
        for (size_t c = 0; c < C; c++)
            yr[c] = xr[c] * r * w[c];
    }
    return SG_OK;
}

/* With g = w * dy:  dx = rstd * g - x * rstd^3 * mean(g * x),
 *                   dw += sum over rows of dy * x * rstd. */
SG_SIMD_CLONES int sg_rmsnorm_backward(float *restrict dx, float *restrict dw,
                                       const float *restrict dout, const float *restrict x,
                                       const float *restrict w, const float *restrict rstd,
                                       size_t N, size_t C)
{
    if (C == 0)
        return SG_EINVAL;
    /* dw is summed over rows in double, then added once: a long batch does
     * not lose the small rows' contributions to float rounding. */
    double *dwacc = NULL;
    if (dw) {
        dwacc = calloc(C, sizeof *dwacc); // (C)
        if (!dwacc)
            return SG_ENOMEM;
    }
    for (size_t n = 0; n < N; n++) {
        const float *restrict xr = x + n * C;     // (C)
        const float *restrict dyr = dout + n * C; // (C)
        float *restrict dxr = dx + n * C;         // (C)
        float r = rstd[n];
        for (size_t c = 0; c < C; c++) // w dy, staged in dx
            dxr[c] = w[c] * dyr[c];
        double dot = dot_f64(dxr, xr, C); // sum_c w dy x
        float k = (float)(dot / (double)C * (double)r * (double)r * (double)r);
        for (size_t c = 0; c < C; c++)
            dxr[c] = r * dxr[c] - k * xr[c];
        if (dwacc)
            for (size_t c = 0; c < C; c++)
                dwacc[c] += (double)(dyr[c] * xr[c] * r);
    }
    if (dwacc) {
        for (size_t c = 0; c < C; c++)
            dw[c] += (float)dwacc[c];
        free(dwacc);
    }
    return SG_OK;
}
