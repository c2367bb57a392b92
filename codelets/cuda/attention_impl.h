/* attention_impl.h - what the attention routes of codelets/cuda/ share
 * (attention.cu: fp32 FMA tiles; attention_blas.cu: cuBLAS products on
 * tensor cores; attention_select.cu: which one runs). Private to those
 * files: C++, after cuda_compat.h. */
#ifndef SG_CODELETS_CUDA_ATTENTION_IMPL_H
#define SG_CODELETS_CUDA_ATTENTION_IMPL_H

#include <limits.h>

#define SG_ATT_LOG2E 1.4426950408889634f
#define SG_ATT_LN2 0.6931471805599453f

/* Sizes the kernels can take (ints inside, grid y and z limits) and a
 * dtype they store; also folds a window >= T into 0 (the same attention).
 * SG_OK or SG_EINVAL. */
static inline int sg_att_check(sg_dtype dt, size_t B, size_t T, size_t Hq, size_t Hkv, size_t D,
                               size_t *window)
{
    if (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16)
        return SG_EINVAL;
    if (Hq == 0 || Hkv == 0 || D == 0 || D > 256 || Hq % Hkv)
        return SG_EINVAL;
    if (B > 65535 || Hq > 65535 || T > (size_t)INT_MAX / 2)
        return SG_EINVAL;
    if (*window >= T)
        *window = 0;
    return SG_OK;
}

/* Key j is visible to query i (both < T): j <= i and, when window > 0,
 * j > i - window. The host has turned a window >= T into 0, so
 * j + window cannot overflow. */
__host__ __device__ static inline bool sg_att_visible(int i, int j, int window)
{
    return j <= i && (window == 0 || j + window > i);
}

#define SG_ATT_PRE_THREADS 128 /* threads a block of sg_att_dvec_kernel */
#define SG_ATT_PRE_TPR 16      /* of which along one row */

/* The backward's first step in both routes: Dvec = sum_d dout * out of
 * each (B, T, Hq) row of dout, out (B, T, Hq, D), in fp32, into dvec
 * (B, Hq, T) or, with `packed`, (B, Hkv, T, G) (the cuBLAS route's row
 * order); `zero` (B, T, Hq, D), unless NULL, is zeroed alongside (the fp32
 * route's dq accumulator). SG_ATT_PRE_TPR threads along d (coalesced),
 * partial sums through shared memory; blocks of SG_ATT_PRE_THREADS. */
template <typename T>
static __global__ void sg_att_dvec_kernel(float *dvec, float *zero, const T *dout, const T *out,
                                          size_t rows, int len, int Hq, int Hkv, int D, int packed)
{
    __shared__ float red[SG_ATT_PRE_THREADS];
    const int tid = threadIdx.x, part = tid % SG_ATT_PRE_TPR, sub = tid / SG_ATT_PRE_TPR;
    const size_t per_block = SG_ATT_PRE_THREADS / SG_ATT_PRE_TPR;
    // the same trip count for the whole block, since the body synchronises
    for (size_t base = blockIdx.x * per_block; base < rows; base += gridDim.x * per_block) {
        const size_t row = base + sub; // (b T + t) Hq + h
        float s = 0.0f;
        if (row < rows)
            for (int d = part; d < D; d += SG_ATT_PRE_TPR) {
                s += sg_ld(dout[row * D + d]) * sg_ld(out[row * D + d]);
                if (zero)
                    zero[row * D + d] = 0.0f;
            }
        red[tid] = s;
        __syncthreads();
        if (part == 0 && row < rows) {
            float tot = 0.0f;
            for (int p = 0; p < SG_ATT_PRE_TPR; p++)
                tot += red[tid + p];
            const size_t h = row % Hq, t = row / Hq % len, b = row / Hq / len, G = Hq / Hkv;
            dvec[packed ? ((b * Hkv + h / G) * len + t) * G + h % G : (b * Hq + h) * len + t] = tot;
        }
        __syncthreads();
    }
}

#endif /* SG_CODELETS_CUDA_ATTENTION_IMPL_H */
