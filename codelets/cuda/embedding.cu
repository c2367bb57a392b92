/* embedding.cu - token embedding forward and backward on the GPU
 * (codelets/cuda/cuda_ops.h): the semantics of codelets/cpu/embedding.c,
 * on tables stored in f32, bf16 or f16 with the math in fp32. One block per
 * token (grid-stride over tokens), striding over the row; indices are size_t.
 */
#include "codelets/cuda/cuda_compat.h"

#include <math.h>
#include <stdint.h>

/* ---- embedding ---------------------------------------------------------------- */

/* One block per token (grid-stride over tokens), threads along the row:
 * both the table row and the output row are read / written contiguously. */
template <typename T>
__global__ void k_embedding_fwd(T *out, const int32_t *tokens, const T *table, size_t N, size_t V,
                                size_t C)
{
    for (size_t n = blockIdx.x; n < N; n += gridDim.x) {
        int32_t id = tokens[n];
        if (id < 0 || (size_t)id >= V) // the caller checks ids; never read out of bounds
            continue;
        const T *row = table + (size_t)id * C; // (C)
        T *o = out + n * C;                    // (C)
        for (size_t c = threadIdx.x; c < C; c += blockDim.x)
            o[c] = row[c]; // a copy: no conversion, bit-exact
    }
}

/* Repeated ids add into the same row from different blocks: atomics. */
template <typename T>
__global__ void k_embedding_bwd(T *dtable, const int32_t *tokens, const T *dout, size_t N, size_t V,
                                size_t C)
{
    for (size_t n = blockIdx.x; n < N; n += gridDim.x) {
        int32_t id = tokens[n];
        if (id < 0 || (size_t)id >= V)
            continue;
        T *drow = dtable + (size_t)id * C; // (C)
        const T *g = dout + n * C;         // (C)
        for (size_t c = threadIdx.x; c < C; c += blockDim.x)
            sg_atomic_add(&drow[c], sg_ld(g[c]));
    }
}

/* Shared checks of both directions: SG_OK to launch, 1 for nothing to do,
 * or an error. */
static int embedding_check(const sg_cu *cu, const void *a, const int32_t *tokens, const void *b,
                           sg_dtype dt, size_t N, size_t V, size_t C)
{
    size_t nc, vc;
    if (!cu || (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16) || !sg_cu_mul_ok(N, C, &nc) ||
        !sg_cu_mul_ok(V, C, &vc))
        return SG_EINVAL;
    if (N == 0 || C == 0)
        return 1;
    if (V == 0 || !a || !tokens || !b) // V = 0: no id can be valid (the CPU refuses too)
        return SG_EINVAL;
    return SG_OK;
}

int sg_cu_embedding_forward(const sg_cu *cu, void *out, const int32_t *tokens, const void *table,
                            sg_dtype dt, size_t N, size_t V, size_t C)
{
    int rc = embedding_check(cu, out, tokens, table, dt, N, V, C);
    if (rc)
        return rc < 0 ? rc : SG_OK;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_embedding_fwd<T>, sg_cu_row_blocks(N), sg_cu_row_threads(C),
                             cu->stream, (T *)out, tokens, (const T *)table, N, V, C));
    return sg_cu_launch_status();
}

int sg_cu_embedding_backward(const sg_cu *cu, void *dtable, const int32_t *tokens, const void *dout,
                             sg_dtype dt, size_t N, size_t V, size_t C)
{
    int rc = embedding_check(cu, dtable, tokens, dout, dt, N, V, C);
    if (rc)
        return rc < 0 ? rc : SG_OK;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_embedding_bwd<T>, sg_cu_row_blocks(N), sg_cu_row_threads(C),
                             cu->stream, (T *)dtable, tokens, (const T *)dout, N, V, C));
    return sg_cu_launch_status();
}
