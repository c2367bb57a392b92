/* dtype.c - element type sizes and names (see dtype.h). */
#include "common/dtype.h"

size_t sg_dtype_size(sg_dtype t)
{
    switch (t) {
    case SG_BF16:
    case SG_F16: return 2;
    case SG_F32:
    case SG_I32: return 4;
    }
    return 4;
}

const char *sg_dtype_name(sg_dtype t)
{
    static const char *const names[] = {"f32", "bf16", "f16", "i32"};
    return (unsigned)t < 4 ? names[t] : "?";
}
