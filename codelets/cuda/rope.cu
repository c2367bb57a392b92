/* rope.cu - rotary position embedding forward and backward on the GPU
 * (codelets/cuda/cuda_ops.h): the semantics of codelets/cpu/rope.c, on
 * tensors stored in f32, bf16 or f16 with the math in fp32. One block per
 * token (grid-stride over tokens); indices are size_t.
 */
#include "codelets/cuda/cuda_compat.h"

#include <math.h>
#include <stdint.h>

/* ---- rotary embedding ----------------------------------------------------- */

/* One block per token (b, t) (grid-stride over tokens), its threads over the
 * H * D/2 pairs (i, i + D/2) of the token's heads: consecutive threads take
 * consecutive i, so both halves are read and written contiguously, the
 * token's cos / sin row is shared by its heads, and the index arithmetic
 * inside the loop is 32-bit (a 64-bit division per element would cost more
 * than the memory traffic). Each pair is read before it is written by the
 * same thread: out may equal x. sign = +1 rotates by the angle (forward),
 * -1 by its opposite (backward). */
template <typename T>
__global__ void k_rope(T *out, const T *x, const float *cos_tab, const float *sin_tab,
                       size_t tokens, size_t seq, unsigned H, unsigned half, float sign)
{
    const unsigned pairs = H * half; // per token; checked to fit on the host
    for (size_t bt = blockIdx.x; bt < tokens; bt += gridDim.x) {
        const float *cr = cos_tab + (bt % seq) * half; // (D/2) of position t
        const float *sr = sin_tab + (bt % seq) * half; // (D/2)
        size_t tok = bt * pairs * 2;                   // x[b, t] (H, D)
        for (unsigned j = threadIdx.x; j < pairs; j += blockDim.x) {
            unsigned h = j / half, i = j - h * half;
            size_t o = tok + (size_t)h * 2 * half + i;
            float x1 = sg_ld(x[o]), x2 = sg_ld(x[o + half]);
            float c = cr[i], s = sign * sr[i];
            out[o] = sg_st<T>(x1 * c - x2 * s);
            out[o + half] = sg_st<T>(x2 * c + x1 * s);
        }
    }
}

static int rope(const sg_cu *cu, void *out, const void *x, const float *cos_tab,
                const float *sin_tab, sg_dtype dt, size_t B, size_t T, size_t H, size_t D,
                float sign)
{
    size_t tokens, per, n;
    if (!cu || D == 0 || D % 2 || !sg_cu_mul_ok(B, T, &tokens) || !sg_cu_mul_ok(H, D, &per) ||
        !sg_cu_mul_ok(tokens, per, &n) || per / 2 > 0xffffffffu)
        return SG_EINVAL;
    if (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16)
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    if (!out || !x || !cos_tab || !sin_tab)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, S,
                   SG_LAUNCH(k_rope<S>, sg_cu_row_blocks(tokens), sg_cu_row_threads(per / 2),
                             cu->stream, (S *)out, (const S *)x, cos_tab, sin_tab, tokens, T,
                             (unsigned)H, (unsigned)(D / 2), sign));
    return sg_cu_launch_status();
}

int sg_cu_rope_forward(const sg_cu *cu, void *out, const void *x, const float *cos_tab,
                       const float *sin_tab, sg_dtype dt, size_t B, size_t T, size_t H, size_t D)
{
    return rope(cu, out, x, cos_tab, sin_tab, dt, B, T, H, D, 1.0f);
}

/* The inverse of a rotation is the rotation by the opposite angle. */
int sg_cu_rope_backward(const sg_cu *cu, void *dx, const void *dout, const float *cos_tab,
                        const float *sin_tab, sg_dtype dt, size_t B, size_t T, size_t H, size_t D)
{
    return rope(cu, dx, dout, cos_tab, sin_tab, dt, B, T, H, D, -1.0f);
}
