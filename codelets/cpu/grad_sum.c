/* grad_sum.c - the sum of a unit's weight-gradient partials (batch tiles,
 * see ops.h). */
#include "codelets/cpu/ops.h"

int sg_grad_partials_sum(float *out, const float *const *parts, int nparts, size_t n,
                         int accumulate)
{
    if (nparts < 1 || (n && (!out || !parts)))
        return SG_EINVAL;
    for (int t = 0; t < nparts; t++)
        if (n && !parts[t])
            return SG_EINVAL;
    for (size_t i = 0; i < n; i++) {
        float acc = parts[0][i];
        for (int t = 1; t < nparts; t++)
            acc += parts[t][i];
        out[i] = accumulate ? out[i] + acc : acc;
    }
    return SG_OK;
}
