/* linear.cu - y = x W^T + b and its backward through cuBLAS (cuda_ops.h).
 *
 * Row-major (N, in) data is column-major (in, N) data to cuBLAS, so each
 * row-major product is written as the column-major product of the
 * transposes:
 *   y (N, out) = x W^T        ->  y' (out, N) = op_T(W' (in, out)) x' (in, N)
 *   dx (N, in) = dy W         ->  dx' (in, N) = W' (in, out) dy' (out, N)
 *   dW (out, in) += dy^T x    ->  dW' (in, out) += x' (in, N) op_T(dy' (out, N))
 * (M' is the column-major view of row-major M.) Inputs and outputs are in
 * the storage dtype; cuBLAS accumulates in fp32 (CUBLAS_COMPUTE_32F) and
 * rounds once per output, like the CPU path's fp32 math on bf16 storage.
 */
#include <limits.h>

#include "codelets/cuda/cuda_compat.h"

#define BIAS_ROWS_PER_CHUNK 256u

static int fits_int(size_t a, size_t b, size_t c)
{
    return a <= INT_MAX && b <= INT_MAX && c <= INT_MAX;
}

/* C (m, n) = alpha op(A) op(B) + beta C, column-major, all in dt. */
static int gemm(const sg_cu *cu, cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n,
                size_t k, const void *A, size_t lda, const void *B, size_t ldb, float beta, void *C,
                size_t ldc, sg_dtype dt)
{
    if (m == 0 || n == 0)
        return SG_OK;
    const float alpha = 1.0f;
    cudaDataType t = sg_cu_blas_type(dt);
    cublasStatus_t st = cublasGemmEx((cublasHandle_t)cu->blas, ta, tb, (int)m, (int)n, (int)k,
                                     &alpha, A, t, (int)lda, B, t, (int)ldb, &beta, C, t, (int)ldc,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? SG_OK : SG_EIO;
}

/* y (N, out) = b (out) on every row: the GEMM then adds x W^T with beta 1,
 * so the bias is added in fp32 before the one rounding of each output. */
template <typename T> __global__ void broadcast_bias_kernel(T *y, const T *b, size_t N, size_t out)
{
    const size_t total = N * out;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = b[i % out];
}

/* work (chunks, out) = column sums of dy over each chunk of rows: one
 * thread per (chunk, column), rows in order, so the result is the same on
 * every run. */
template <typename T>
__global__ void bias_partial_kernel(float *work, const T *dy, size_t N, size_t out)
{
    const size_t col = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t chunk = blockIdx.y;
    if (col >= out)
        return;
    const size_t r0 = chunk * BIAS_ROWS_PER_CHUNK;
    const size_t r1 = r0 + BIAS_ROWS_PER_CHUNK < N ? r0 + BIAS_ROWS_PER_CHUNK : N;
    float s = 0.0f;
    for (size_t r = r0; r < r1; r++)
        s += sg_ld(dy[r * out + col]);
    work[chunk * out + col] = s;
}

/* db (out) += sum over chunks of work (chunks, out), chunks in order. */
template <typename T>
__global__ void bias_finish_kernel(T *db, const float *work, size_t chunks, size_t out)
{
    const size_t col = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (col >= out)
        return;
    float s = 0.0f;
    for (size_t c = 0; c < chunks; c++)
        s += work[c * out + col];
    db[col] = sg_st<T>(sg_ld(db[col]) + s);
}

size_t sg_cu_linear_backward_work_floats(size_t N, size_t out)
{
    return (N + BIAS_ROWS_PER_CHUNK - 1) / BIAS_ROWS_PER_CHUNK * out;
}

int sg_cu_linear_forward(const sg_cu *cu, void *y, const void *x, const void *W, const void *b,
                         sg_dtype dt, size_t N, size_t in, size_t out)
{
    if (!y || !x || !W || !fits_int(N, in, out) || in == 0)
        return SG_EINVAL;
    if (b && N > 0 && out > 0) {
        SG_CU_DISPATCH(dt, T,
                       SG_LAUNCH(broadcast_bias_kernel<T>, sg_cu_blocks(N * out, 256), 256,
                                 cu->stream, (T *)y, (const T *)b, N, out));
        if (sg_cu_launch_status())
            return SG_EIO;
    }
    return gemm(cu, CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, W, in, x, in, b ? 1.0f : 0.0f, y, out,
                dt);
}

static int bias_backward(const sg_cu *cu, void *db, const void *dy, sg_dtype dt, size_t N,
                         size_t out, float *work)
{
    if (N == 0 || out == 0)
        return SG_OK;
    if (!work)
        return SG_EINVAL;
    const size_t chunks = (N + BIAS_ROWS_PER_CHUNK - 1) / BIAS_ROWS_PER_CHUNK;
    if (chunks > 65535)
        return SG_EINVAL;
    const unsigned threads = 128, cols = (unsigned)((out + threads - 1) / threads);
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(bias_partial_kernel<T>, dim3(cols, (unsigned)chunks), threads,
                             cu->stream, work, (const T *)dy, N, out);
                   SG_LAUNCH(bias_finish_kernel<T>, cols, threads, cu->stream, (T *)db,
                             (const float *)work, chunks, out));
    return sg_cu_launch_status();
}

int sg_cu_linear_backward(const sg_cu *cu, void *dx, void *dW, void *db, const void *dy,
                          const void *x, const void *W, sg_dtype dt, size_t N, size_t in,
                          size_t out, float *work)
{
    if (!dy || !fits_int(N, in, out) || (dx && !W) || (dW && !x))
        return SG_EINVAL;
    if (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16)
        return SG_EINVAL;
    int rc = SG_OK;
    if (dx)
        rc = out == 0
                 ? sg_cu_zero_async(cu, dx, N * in * sg_dtype_size(dt))
                 : gemm(cu, CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, W, in, dy, out, 0.0f, dx, in, dt);
    if (!rc && dW && N > 0)
        rc = gemm(cu, CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, x, in, dy, out, 1.0f, dW, in, dt);
    if (!rc && db)
        rc = bias_backward(cu, db, dy, dt, N, out, work);
    return rc;
}
