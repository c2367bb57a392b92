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

#endif /* SG_CODELETS_CUDA_ATTENTION_IMPL_H */
