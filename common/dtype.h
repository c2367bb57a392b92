/* dtype.h - element types shared by the IR, the kernels and the file formats.
 *
 * One enum for the whole code base: graph buffers (graph/ir.h) and
 * safetensors tensors (runtime/io/safetensors.h, which spells the names its
 * own way: "F32", "BF16"...) both use it. Also the one fp32 -> bf16
 * rounding of the CPU code: casts (codelets/cpu/ops.h), Adam's bf16 copy of
 * the parameters and the safetensors writer all call sg_f32_to_bf16.
 */
#ifndef SG_DTYPE_H
#define SG_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum sg_dtype {
    SG_F32,
    SG_BF16,
    SG_F16,
    SG_I32,
} sg_dtype;

/* Bytes per element: 4 (f32, i32) or 2 (bf16, f16). */
size_t sg_dtype_size(sg_dtype t);
/* "f32", "bf16", "f16", "i32"; "?" for anything else. */
const char *sg_dtype_name(sg_dtype t);

/* fp32 -> bf16 bits (bfloat16 is the top half of an fp32: same exponent
 * range, 7 mantissa bits). Round to nearest, ties to even; overflow gives
 * infinity; a NaN stays a NaN with its sign and the top bits of its payload,
 * made quiet (as torch's .to(torch.bfloat16) and x86's VCVTNEPS2BF16 do).
 * Inline: Adam calls it once per element in its fused loop. */
static inline uint16_t sg_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)        /* NaN: rounding could make it Inf */
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet bit of bf16 */
    u += 0x7fffu + ((u >> 16) & 1u);            /* RNE; a carry may reach Inf, as it should */
    return (uint16_t)(u >> 16);
}

#endif /* SG_DTYPE_H */
