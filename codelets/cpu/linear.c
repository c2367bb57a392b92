/* linear.c - fully connected layer y = x W^T + b, forward and backward, with
 * W (out, in) in Hugging Face's layout (see ops.h). Products by gemm.h:
 * OpenBLAS's sgemm (pin it to one thread for reproducible results), or
 * bf16 operands on AMX when the calling thread runs a bf16 task. */
#include "codelets/cpu/gemm.h"
#include "codelets/cpu/ops.h"

#include <limits.h>
#include <stdlib.h>

static int check_dims(size_t N, size_t in, size_t out)
{
    if (in == 0 || out == 0)
        return SG_EINVAL;
    if (N > INT_MAX || in > INT_MAX || out > INT_MAX) // BLAS takes int sizes
        return SG_EINVAL;
    return SG_OK;
}

int sg_linear_forward(float *y, const float *x, const float *W, const float *b, size_t N, size_t in,
                      size_t out)
{
    if (check_dims(N, in, out))
        return SG_EINVAL;
    if (N == 0)
        return SG_OK;
    float beta = 0.0f;
    if (b) { // start from the bias, then add the product
        for (size_t n = 0; n < N; n++)
            for (size_t o = 0; o < out; o++)
                y[n * out + o] = b[o];
        beta = 1.0f;
    }
    // y (N, out) = x (N, in) @ W^T (in, out)
    sg_gemm(0, 1, N, out, in, 1.0f, x, in, W, in, beta, y, out);
    return SG_OK;
}

int sg_linear_backward(float *dx, float *dW, float *db, const float *dy, const float *x,
                       const float *W, size_t N, size_t in, size_t out)
{
    if (check_dims(N, in, out))
        return SG_EINVAL;
    if (N == 0)
        return SG_OK;
    double *dbacc = NULL;
    if (db) {
        dbacc = calloc(out, sizeof *dbacc); // (out)
        if (!dbacc)
            return SG_ENOMEM;
    }
    if (dx) // dx (N, in) = dy (N, out) @ W (out, in)
        sg_gemm(0, 0, N, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
    if (dW) // dW (out, in) += dy^T (out, N) @ x (N, in)
        sg_gemm(1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in);
    if (db) { // db (out) += column sums of dy, summed in double
        for (size_t n = 0; n < N; n++) {
            const float *restrict dyr = dy + n * out; // (out)
            for (size_t o = 0; o < out; o++)
                dbacc[o] += dyr[o];
        }
        for (size_t o = 0; o < out; o++)
            db[o] += (float)dbacc[o];
        free(dbacc);
    }
    return SG_OK;
}
