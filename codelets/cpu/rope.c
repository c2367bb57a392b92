/* rope.c - rotary position embedding, Hugging Face "rotate_half" convention
 * (Llama, Qwen3), forward and backward, and its cos/sin tables (see ops.h).
 *
 * Element i of a head is paired with element i + D/2 and the pair is rotated
 * by the angle t * inv_freq[i] of token t. The backward rotates the gradient
 * by the opposite angle (a rotation's inverse is its transpose).
 */
#include "codelets/cpu/ops.h"
#include "codelets/cpu/simd.h"

#include <math.h>

#define SG_PI 3.14159265358979323846

/* Pairs handled per chunk: a chunk of x is copied to the stack first, so the
 * rotation can run in place (out == x) with loops that still vectorise. */
#define ROPE_CHUNK 64

/* cos, sin (T, D/2) from inv_freq (D/2), angles in double. */
static void fill_table(size_t T, size_t half, const double *inv_freq, float *cos_, float *sin_)
{
    for (size_t t = 0; t < T; t++)
        for (size_t i = 0; i < half; i++) {
            double a = (double)t * inv_freq[i];
            cos_[t * half + i] = (float)cos(a);
            sin_[t * half + i] = (float)sin(a);
        }
}

/* Largest head size the tables accept: inv_freq lives on the stack. */
#define ROPE_MAX_D 4096

int sg_rope_table(size_t T, size_t D, double theta, float *cos_, float *sin_)
{
    if (D == 0 || D % 2 || D > ROPE_MAX_D || !(theta > 0.0))
        return SG_EINVAL;
    size_t half = D / 2;
    double inv_freq[ROPE_MAX_D / 2]; // (D/2)
    for (size_t i = 0; i < half; i++)
        inv_freq[i] = pow(theta, -(double)(2 * i) / (double)D);
    fill_table(T, half, inv_freq, cos_, sin_);
    return SG_OK;
}

int sg_rope_table_llama3(size_t T, size_t D, double theta, double factor, double low_freq_factor,
                         double high_freq_factor, double orig_max_pos, float *cos_, float *sin_)
{
    if (D == 0 || D % 2 || D > ROPE_MAX_D || !(theta > 0.0) || !(factor > 0.0) ||
        !(low_freq_factor > 0.0) || !(high_freq_factor > low_freq_factor) || !(orig_max_pos > 0.0))
        return SG_EINVAL;
    size_t half = D / 2;
    double low_freq_wavelen = orig_max_pos / low_freq_factor;   // tokens
    double high_freq_wavelen = orig_max_pos / high_freq_factor; // tokens
    double inv_freq[ROPE_MAX_D / 2];                            // (D/2)
    for (size_t i = 0; i < half; i++) {
        double f = pow(theta, -(double)(2 * i) / (double)D);
        double wavelen = 2.0 * SG_PI / f;
        if (wavelen > low_freq_wavelen) {
            f /= factor; // long wavelengths: interpolated positions
        } else if (wavelen >= high_freq_wavelen) {
            /* in between: blend of the scaled and unscaled frequency */
            double smooth =
                (orig_max_pos / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            f = (1.0 - smooth) * f / factor + smooth * f;
        } // short wavelengths: unchanged
        inv_freq[i] = f;
    }
    fill_table(T, half, inv_freq, cos_, sin_);
    return SG_OK;
}

/* transformers' _compute_yarn_parameters (modeling_rope_utils.py), restated:
 *   extrapolated f_i = theta^(-2i/D), interpolated f_i / factor;
 *   d(r) = D ln(orig_max_pos / (2 pi r)) / (2 ln theta) (the dimension that
 *   turns r times over the original context); low = d(beta_fast), high =
 *   d(beta_slow), floored / ceiled when `truncate`, clipped to [0, D - 1];
 *   ramp_i = clamp((i - low) / (high - low), 0, 1) (high += 0.001 when equal);
 *   f_i = interpolated ramp_i + extrapolated (1 - ramp_i);
 *   cos and sin are multiplied by attention_factor (the caller's: transformers
 *   defaults it to 0.1 ln(factor) + 1 for factor > 1, else 1). */
int sg_rope_table_yarn(size_t T, size_t D, double theta, double factor, double beta_fast,
                       double beta_slow, double orig_max_pos, int truncate, double attention_factor,
                       float *cos_, float *sin_)
{
    if (D == 0 || D % 2 || D > ROPE_MAX_D || !(theta > 1.0) || !(factor > 0.0) ||
        !(beta_fast > 0.0) || !(beta_slow > 0.0) || !(orig_max_pos > 0.0) ||
        !(attention_factor > 0.0))
        return SG_EINVAL;
    const size_t half = D / 2;
    const double dd = (double)D;
    double low = dd * log(orig_max_pos / (beta_fast * 2.0 * SG_PI)) / (2.0 * log(theta));
    double high = dd * log(orig_max_pos / (beta_slow * 2.0 * SG_PI)) / (2.0 * log(theta));
    if (truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = low > 0.0 ? low : 0.0;
    high = high < dd - 1.0 ? high : dd - 1.0;
    if (low == high)
        high += 0.001;
    double inv_freq[ROPE_MAX_D / 2]; // (D/2)
    for (size_t i = 0; i < half; i++) {
        const double extra = pow(theta, -(double)(2 * i) / dd), inter = extra / factor;
        double ramp = ((double)i - low) / (high - low);
        ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
        inv_freq[i] = inter * ramp + extra * (1.0 - ramp);
    }
    for (size_t t = 0; t < T; t++)
        for (size_t i = 0; i < half; i++) {
            const double a = (double)t * inv_freq[i];
            cos_[t * half + i] = (float)(cos(a) * attention_factor);
            sin_[t * half + i] = (float)(sin(a) * attention_factor);
        }
    return SG_OK;
}

/* Rotates every head of x (B, T, H, D) by sign * angle(t, i). */
SG_SIMD_CLONES static int rotate(float *out, const float *x, const float *cos_, const float *sin_,
                                 size_t B, size_t T, size_t H, size_t D, float sign)
{
    if (D == 0 || D % 2)
        return SG_EINVAL;
    size_t half = D / 2;
    for (size_t b = 0; b < B; b++)
        for (size_t t = 0; t < T; t++) {
            const float *restrict c = cos_ + t * half; // (D/2)
            const float *restrict s = sin_ + t * half; // (D/2)
            for (size_t h = 0; h < H; h++) {
                size_t row = ((b * T + t) * H + h) * D;
                for (size_t i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
                    size_t n = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
                    float x1[ROPE_CHUNK], x2[ROPE_CHUNK]; // first and second halves
                    for (size_t i = 0; i < n; i++) {
                        x1[i] = x[row + i0 + i];
                        x2[i] = x[row + half + i0 + i];
                    }
                    float *restrict o1 = out + row + i0;
                    float *restrict o2 = out + row + half + i0;
                    for (size_t i = 0; i < n; i++) {
                        float ci = c[i0 + i], si = sign * s[i0 + i];
                        o1[i] = x1[i] * ci - x2[i] * si;
                        o2[i] = x2[i] * ci + x1[i] * si;
                    }
                }
            }
        }
    return SG_OK;
}

int sg_rope_forward(float *out, const float *x, const float *cos_, const float *sin_, size_t B,
                    size_t T, size_t H, size_t D)
{
    return rotate(out, x, cos_, sin_, B, T, H, D, 1.0f);
}

int sg_rope_backward(float *dx, const float *dout, const float *cos_, const float *sin_, size_t B,
                     size_t T, size_t H, size_t D)
{
    return rotate(dx, dout, cos_, sin_, B, T, H, D, -1.0f);
}
