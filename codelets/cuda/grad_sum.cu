/* grad_sum.cu - the sum of a unit's weight-gradient partials on the GPU
 * (codelets/cuda/cuda_ops.h): the semantics of codelets/cpu/grad_sum.c,
 * fp32 math, one rounding to the storage dtype. */
#include "codelets/cuda/cuda_compat.h"

#include <stdint.h>

#define THREADS 256

/* The partials travel by value (kernel parameters), so no device array of
 * pointers is needed. */
typedef struct grad_parts {
    const float *p[SG_CU_GRAD_SUM_MAX];
    int n;
} grad_parts;

template <typename T> __global__ void k_grad_sum(T *out, grad_parts parts, size_t n, int accumulate)
{
    SG_GRID_STRIDE(i, n)
    {
        float acc = parts.p[0][i];
        for (int t = 1; t < parts.n; t++)
            acc += parts.p[t][i];
        out[i] = sg_st<T>(accumulate ? sg_ld(out[i]) + acc : acc);
    }
}

int sg_cu_grad_sum(const sg_cu *cu, void *out, sg_dtype dt, const float *const *parts, int nparts,
                   size_t n, int accumulate)
{
    if (!cu || nparts < 1 || nparts > SG_CU_GRAD_SUM_MAX || (n && (!out || !parts)))
        return SG_EINVAL;
    if (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16)
        return SG_EINVAL;
    grad_parts gp;
    gp.n = nparts;
    for (int t = 0; t < nparts; t++) {
        if (n && !parts[t])
            return SG_EINVAL;
        gp.p[t] = parts[t];
    }
    if (n == 0)
        return SG_OK;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_grad_sum<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream, (T *)out,
                             gp, n, accumulate));
    return sg_cu_launch_status();
}
