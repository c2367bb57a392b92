/* grad_sum.c - the sum of a unit's weight-gradient partials (batch tiles,
 * see ops.h). */
#include "codelets/cpu/ops.h"

#include <string.h>

#include "codelets/cpu/simd.h"

#define BLOCK 1024 /* elements summed at a time in a stack buffer */

SG_SIMD_CLONES void sg_add_into(float *restrict acc, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] += x[i];
}

/* out (n) = acc or out + acc */
SG_SIMD_CLONES static void store_block(float *restrict out, const float *restrict acc, size_t n,
                                       int accumulate)
{
    if (accumulate)
        for (size_t i = 0; i < n; i++)
            out[i] += acc[i];
    else
        for (size_t i = 0; i < n; i++)
            out[i] = acc[i];
}

/* Per element: ((parts[0] + parts[1]) + ...) + out, in that order whatever
 * the block size or vector width, so the result is the same bits as an
 * element-by-element loop. */
int sg_grad_partials_sum(float *out, const float *const *parts, int nparts, size_t n,
                         int accumulate)
{
    if (nparts < 1 || (n && (!out || !parts)))
        return SG_EINVAL;
    for (int t = 0; t < nparts; t++)
        if (n && !parts[t])
            return SG_EINVAL;
    float acc[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t len = n - i < BLOCK ? n - i : BLOCK;
        memcpy(acc, parts[0] + i, len * sizeof(float));
        for (int t = 1; t < nparts; t++)
            sg_add_into(acc, parts[t] + i, len);
        store_block(out + i, acc, len, accumulate);
    }
    return SG_OK;
}
