/* swiglu.cu - SwiGLU forward and backward on the GPU
 * (codelets/cuda/cuda_ops.h): the semantics of codelets/cpu/swiglu.c, on
 * tensors stored in f32, bf16 or f16 with the math in fp32. Grid-stride
 * loops: any size runs with a grid capped by sg_cu_blocks; indices are
 * size_t because tensors can exceed 2^31 elements.
 */
#include "codelets/cuda/cuda_compat.h"

#include <math.h>
#include <stdint.h>

#define THREADS 256 /* threads per block of the flat element-wise kernels */

/* ---- SwiGLU ------------------------------------------------------------------- */

/* 1 / (1 + e^-g): for g -> -inf, e^-g overflows to inf and s to 0, no NaN
 * (as swiglu.c). */
__device__ static inline float sigmoid_f(float g)
{
    return 1.0f / (1.0f + expf(-g));
}

template <typename T> __global__ void k_swiglu_fwd(T *h, const T *gate, const T *up, size_t n)
{
    SG_GRID_STRIDE(i, n)
    {
        float g = sg_ld(gate[i]);
        h[i] = sg_st<T>(g * sigmoid_f(g) * sg_ld(up[i]));
    }
}

/* With s = sigmoid(g): dsilu/dg = s (1 + g (1 - s)). */
template <typename T>
__global__ void k_swiglu_bwd(T *dgate, T *dup, const T *dh, const T *gate, const T *up, size_t n)
{
    SG_GRID_STRIDE(i, n)
    {
        float g = sg_ld(gate[i]), s = sigmoid_f(g), d = sg_ld(dh[i]), u = sg_ld(up[i]);
        dup[i] = sg_st<T>(d * (g * s));
        dgate[i] = sg_st<T>(d * u * s * (1.0f + g * (1.0f - s)));
    }
}

int sg_cu_swiglu_forward(const sg_cu *cu, void *h, const void *gate, const void *up, sg_dtype dt,
                         size_t N, size_t F)
{
    size_t n;
    if (!cu || !sg_cu_mul_ok(N, F, &n) || (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    if (!h || !gate || !up)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_swiglu_fwd<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream, (T *)h,
                             (const T *)gate, (const T *)up, n));
    return sg_cu_launch_status();
}

int sg_cu_swiglu_backward(const sg_cu *cu, void *dgate, void *dup, const void *dh, const void *gate,
                          const void *up, sg_dtype dt, size_t N, size_t F)
{
    size_t n;
    if (!cu || !sg_cu_mul_ok(N, F, &n) || (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    if (!dgate || !dup || !dh || !gate || !up)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_swiglu_bwd<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream,
                             (T *)dgate, (T *)dup, (const T *)dh, (const T *)gate, (const T *)up,
                             n));
    return sg_cu_launch_status();
}
