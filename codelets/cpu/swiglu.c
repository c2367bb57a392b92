/* swiglu.c - SwiGLU gating of the MLP, forward and backward (see ops.h).
 *
 * h = silu(g) * u with silu(g) = g * sigmoid(g). With s = sigmoid(g):
 * dsilu/dg = s * (1 + g * (1 - s)).
 */
#include "codelets/cpu/ops.h"

#include <math.h>

/* 1 / (1 + e^-g): for g -> -inf, e^-g overflows to inf and s to 0, no NaN. */
static inline float sigmoidf(float g)
{
    return 1.0f / (1.0f + expf(-g));
}

int sg_swiglu_forward(float *restrict h, const float *restrict gate, const float *restrict up,
                      size_t N, size_t F)
{
    size_t n = N * F; // (N, F) elementwise
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        h[i] = g * sigmoidf(g) * up[i];
    }
    return SG_OK;
}

int sg_swiglu_backward(float *restrict dgate, float *restrict dup, const float *restrict dh,
                       const float *restrict gate, const float *restrict up, size_t N,
                       size_t F)
{
    size_t n = N * F; // (N, F) elementwise
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], s = sigmoidf(g);
        float silu = g * s;
        dup[i] = dh[i] * silu;
        dgate[i] = dh[i] * up[i] * s * (1.0f + g * (1.0f - s));
    }
    return SG_OK;
}
