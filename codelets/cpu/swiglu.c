/* swiglu.c - SwiGLU gating of the MLP, forward and backward (see ops.h).
 *
 * h = silu(g) * u with silu(g) = g * sigmoid(g). With s = sigmoid(g):
 * dsilu/dg = s * (1 + g * (1 - s)).
 */
#include "codelets/cpu/ops.h"
#include "codelets/cpu/simd.h"
#include "codelets/cpu/vexp.h"

/* sigmoid(g) is computed for a block of this many elements at a time
 * (sg_vsigmoid: 0 for g -> -inf, no NaN), kept on the stack */
#define SWIGLU_BLOCK 256

SG_SIMD_CLONES int sg_swiglu_forward(float *restrict h, const float *restrict gate,
                                     const float *restrict up, size_t N, size_t F)
{
    size_t n = N * F; // (N, F) elementwise
    float s[SWIGLU_BLOCK];
    for (size_t i0 = 0; i0 < n; i0 += SWIGLU_BLOCK) {
        size_t len = n - i0 < SWIGLU_BLOCK ? n - i0 : SWIGLU_BLOCK;
        sg_vsigmoid(s, gate + i0, len);
        for (size_t j = 0; j < len; j++)
            h[i0 + j] = gate[i0 + j] * s[j] * up[i0 + j];
    }
    return SG_OK;
}

SG_SIMD_CLONES int sg_swiglu_backward(float *restrict dgate, float *restrict dup,
                                      const float *restrict dh, const float *restrict gate,
                                      const float *restrict up, size_t N, size_t F)
{
    size_t n = N * F; // (N, F) elementwise
    float sig[SWIGLU_BLOCK];
    for (size_t i0 = 0; i0 < n; i0 += SWIGLU_BLOCK) {
        size_t len = n - i0 < SWIGLU_BLOCK ? n - i0 : SWIGLU_BLOCK;
        sg_vsigmoid(sig, gate + i0, len);
        for (size_t j = 0; j < len; j++) {
            size_t i = i0 + j;
            float g = gate[i], s = sig[j];
            float silu = g * s;
            dup[i] = dh[i] * silu;
            dgate[i] = dh[i] * up[i] * s * (1.0f + g * (1.0f - s));
        }
    }
    return SG_OK;
}
