/* embedding.c - token embedding lookup, forward and backward (see ops.h). */
#include "codelets/cpu/ops.h"

#include <string.h>

/* Ids are checked before anything is written, so bad input changes nothing. */
static int check_ids(const int32_t *tokens, size_t N, size_t V)
{
    for (size_t n = 0; n < N; n++)
        if (tokens[n] < 0 || (size_t)tokens[n] >= V)
            return SG_EINVAL;
    return SG_OK;
}

int sg_embedding_forward(float *restrict out, const int32_t *restrict tokens,
                         const float *restrict table, size_t N, size_t V, size_t C)
{
    if (check_ids(tokens, N, V))
        return SG_EINVAL;
    for (size_t n = 0; n < N; n++) {
        const float *row = table + (size_t)tokens[n] * C; // (C)
        memcpy(out + n * C, row, C * sizeof *out);        // out[n] (C)
    }
    return SG_OK;
}

int sg_embedding_backward(float *restrict dtable, const int32_t *restrict tokens,
                          const float *restrict dout, size_t N, size_t V, size_t C)
{
    if (check_ids(tokens, N, V))
        return SG_EINVAL;
    /* In token order: a repeated id sums its rows in a fixed order. */
    for (size_t n = 0; n < N; n++) {
        float *restrict drow = dtable + (size_t)tokens[n] * C; // (C)
        const float *restrict g = dout + n * C;                // (C)
        for (size_t c = 0; c < C; c++)
            drow[c] += g[c];
    }
    return SG_OK;
}
