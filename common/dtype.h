/* dtype.h - element types shared by the IR, the kernels and the file formats.
 *
 * One enum for the whole code base: graph buffers (graph/ir.h) and
 * safetensors tensors (runtime/io/safetensors.h, which spells the names its
 * own way: "F32", "BF16"...) both use it.
 */
#ifndef SG_DTYPE_H
#define SG_DTYPE_H

#include <stddef.h>
#include <stdint.h>

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

#endif /* SG_DTYPE_H */
