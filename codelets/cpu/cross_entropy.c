/* cross_entropy.c - mean token cross-entropy over a vocabulary, forward and
 * backward (see ops.h). Rows are max-subtracted before exp; sums are double.
 * A negative target marks an ignored token. */
#include "codelets/cpu/ops.h"
#include "codelets/cpu/vexp.h"

#include <math.h>

/* the exponentials of a row are computed this many at a time (sg_vexp) */
#define CE_BLOCK 256

static int check_targets(const int32_t *targets, size_t N, size_t V)
{
    for (size_t n = 0; n < N; n++)
        if (targets[n] >= 0 && (size_t)targets[n] >= V)
            return SG_EINVAL;
    return SG_OK;
}

/* log(sum_v exp(row[v])) of one row (V). */
static double row_lse(const float *restrict row, size_t V)
{
    float mx = row[0];
    for (size_t v = 1; v < V; v++)
        mx = row[v] > mx ? row[v] : mx;
    double sum = 0.0;
    float e[CE_BLOCK];
    for (size_t v0 = 0; v0 < V; v0 += CE_BLOCK) {
        size_t len = V - v0 < CE_BLOCK ? V - v0 : CE_BLOCK;
        sg_vexp(e, row + v0, len, mx);
        for (size_t j = 0; j < len; j++)
            sum += (double)e[j];
    }
    return (double)mx + log(sum);
}

int sg_cross_entropy_rows(double *total, int64_t *count, float *lse, const float *logits,
                          const int32_t *targets, size_t N, size_t V)
{
    if (V == 0 || !total || !count || check_targets(targets, N, V))
        return SG_EINVAL;
    double tot = *total;
    int64_t cnt = *count;
    for (size_t n = 0; n < N; n++) {
        const float *row = logits + n * V; // (V)
        double l = row_lse(row, V);
        if (lse)
            lse[n] = (float)l;
        if (targets[n] < 0)
            continue;
        tot += l - (double)row[targets[n]]; // -log softmax[target]
        cnt++;
    }
    *total = tot;
    *count = cnt;
    return SG_OK;
}

int sg_cross_entropy_forward(float *loss, int64_t *count, float *lse, const float *logits,
                             const int32_t *targets, size_t N, size_t V)
{
    double total = 0.0;
    int64_t cnt = 0;
    int rc = sg_cross_entropy_rows(&total, &cnt, lse, logits, targets, N, V);
    if (rc)
        return rc;
    *loss = cnt ? (float)(total / (double)cnt) : 0.0f;
    *count = cnt;
    return SG_OK;
}

/* No restrict on dlogits / logits: they may be the same buffer. Each element
 * is read before it is written, at the same index. */
int sg_cross_entropy_backward(float *dlogits, const float *logits, const float *lse,
                              const int32_t *targets, size_t N, size_t V, float dloss,
                              int64_t count)
{
    if (V == 0 || count < 0 || check_targets(targets, N, V))
        return SG_EINVAL;
    float g = count ? (float)((double)dloss / (double)count) : 0.0f; // per-token weight
    for (size_t n = 0; n < N; n++) {
        const float *row = logits + n * V; // (V)
        float *drow = dlogits + n * V;     // (V)
        if (targets[n] < 0 || g == 0.0f) {
            for (size_t v = 0; v < V; v++)
                drow[v] = 0.0f;
            continue;
        }
        float l = lse[n];
        sg_vexp(drow, row, V, l); // drow may be row: element by element
        for (size_t v = 0; v < V; v++)
            drow[v] *= g;
        drow[targets[n]] -= g;
    }
    return SG_OK;
}
