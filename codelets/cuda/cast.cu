/* cast.cu - casts between f32, bf16 and f16, and acc += x, on the GPU
 * (codelets/cuda/cuda_ops.h): the semantics of codelets/cpu/cast.c, math in
 * fp32. Grid-stride loops: any size runs with a grid capped by
 * sg_cu_blocks; indices are size_t.
 */
#include "codelets/cuda/cuda_compat.h"

#include <math.h>
#include <stdint.h>

#define THREADS 256 /* threads per block of the flat element-wise kernels */

/* ---- casts ----------------------------------------------------------------- */

/* One template argument per kernel: a kernel name passed to SG_LAUNCH must
 * not contain a comma (it is a macro argument), so the two storage types
 * travel in one struct. */
template <typename TI, typename TO> struct cast_pair {
    typedef TI in;
    typedef TO out;
};

template <typename P>
__global__ void k_cast(typename P::out *out, const typename P::in *in, size_t n)
{
    /* through float: exact for bf16/f16 -> f32, one RNE rounding otherwise */
    SG_GRID_STRIDE(i, n)
    out[i] = sg_st<typename P::out>(sg_ld(in[i]));
}

int sg_cu_cast(const sg_cu *cu, void *out, sg_dtype out_dt, const void *in, sg_dtype in_dt,
               size_t n)
{
    if (!cu || (n && (!out || !in)))
        return SG_EINVAL;
    if ((out_dt != SG_F32 && out_dt != SG_BF16 && out_dt != SG_F16) ||
        (in_dt != SG_F32 && in_dt != SG_BF16 && in_dt != SG_F16))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    SG_CU_DISPATCH(in_dt, TI,
                   SG_CU_DISPATCH(out_dt, TO, typedef cast_pair<TI, TO> P;
                                  SG_LAUNCH(k_cast<P>, sg_cu_blocks(n, THREADS), THREADS,
                                            cu->stream, (TO *)out, (const TI *)in, n)));
    return sg_cu_launch_status();
}

/* ---- acc += x ----------------------------------------------------------------- */

template <typename T> __global__ void k_add_into(T *acc, const T *x, size_t n)
{
    SG_GRID_STRIDE(i, n)
    acc[i] = sg_st<T>(sg_ld(acc[i]) + sg_ld(x[i]));
}

int sg_cu_add_into(const sg_cu *cu, void *acc, const void *x, sg_dtype dt, size_t n)
{
    if (!cu || (n && (!acc || !x)))
        return SG_EINVAL;
    if (n == 0)
        return dt == SG_F32 || dt == SG_BF16 || dt == SG_F16 ? SG_OK : SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_add_into<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream, (T *)acc,
                             (const T *)x, n));
    return sg_cu_launch_status();
}
