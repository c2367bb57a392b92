/* grad_norm.cu - the global gradient norm on the GPU (codelets/cuda/cuda_ops.h):
 * partials of codelets/cpu/grad_norm.c (squares summed in double) and the
 * SG_BUF_GRAD_NORM result, [norm of the unscaled gradients or +inf,
 * 1 / loss scale], read from the loss scale in device memory.
 */
#include "codelets/cuda/cuda_compat.h"

#include <math.h>

#define THREADS 256
/* Blocks of the norm kernel: each adds one double atomically, so a few per
 * SM and no more. */
#define NORM_MAX_BLOCKS 1024u

/* ---- gradient norm ------------------------------------------------------------ */

/* As sg_grad_norm_partial: squares summed in double. A square of a finite
 * float (or bf16, f16) is finite in double and squares are >= 0, so the sum
 * is NaN or Inf exactly when some x is: one test per block, not per element. */
template <typename T>
__global__ void k_grad_norm(double *sumsq, int32_t *nonfinite, const T *x, size_t n)
{
    __shared__ double redd[THREADS];
    double s = 0.0;
    SG_GRID_STRIDE(i, n)
    {
        double v = (double)sg_ld(x[i]);
        s += v * v;
    }
    s = sg_block_sum_d(s, redd);
    if (threadIdx.x == 0) {
        atomicAdd(sumsq, s);
        if (!isfinite(s))
            *nonfinite = 1; // every writer stores the same value: a plain store suffices
    }
}

int sg_cu_grad_norm_accumulate(const sg_cu *cu, double *sumsq, int32_t *nonfinite, const void *x,
                               sg_dtype dt, size_t n)
{
    if (!cu || !sumsq || !nonfinite || (n && !x) || (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    unsigned blocks = sg_cu_blocks(n, THREADS);
    if (blocks > NORM_MAX_BLOCKS)
        blocks = NORM_MAX_BLOCKS;
    SG_CU_DISPATCH(
        dt, T,
        SG_LAUNCH(k_grad_norm<T>, blocks, THREADS, cu->stream, sumsq, nonfinite, (const T *)x, n));
    return sg_cu_launch_status();
}

/* The partials in order, by one thread: sg_grad_norm_cpu's sums. */
__global__ void k_grad_norm_add_parts(double *sumsq, int32_t *nonfinite, const double *parts,
                                      size_t n)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    double s = *sumsq;
    int32_t nf = *nonfinite;
    for (size_t k = 0; k < n; k++) {
        s += parts[2 * k];
        nf |= *(const int32_t *)&parts[2 * k + 1];
    }
    *sumsq = s;
    *nonfinite = nf;
}

int sg_cu_grad_norm_add_parts(const sg_cu *cu, double *sumsq, int32_t *nonfinite, const void *parts,
                              size_t n)
{
    if (!cu || !sumsq || !nonfinite || (n && !parts))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    SG_LAUNCH(k_grad_norm_add_parts, 1, 32, cu->stream, sumsq, nonfinite, (const double *)parts, n);
    return sg_cu_launch_status();
}

/* res = [sqrt(sumsq) / scale or +inf, 1 / scale]: sg_grad_norm_cpu's formula. */
__global__ void k_grad_norm_finish(float *res, const double *sumsq, const int32_t *nonfinite,
                                   const float *loss_scale)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    double scale = loss_scale ? (double)*loss_scale : 1.0;
    res[0] = *nonfinite ? INFINITY : (float)(sqrt(*sumsq) / scale);
    res[1] = (float)(1.0 / scale);
}

int sg_cu_grad_norm_finish(const sg_cu *cu, float *res, const double *sumsq,
                           const int32_t *nonfinite, const float *loss_scale)
{
    if (!cu || !res || !sumsq || !nonfinite)
        return SG_EINVAL;
    SG_LAUNCH(k_grad_norm_finish, 1, 32, cu->stream, res, sumsq, nonfinite, loss_scale);
    return sg_cu_launch_status();
}
