/* cross_entropy.cu - mean token cross-entropy on the GPU, forward and
 * backward (codelets/cuda/cuda_ops.h; the semantics of
 * codelets/cpu/cross_entropy.c). A target < 0 is ignored; so is a target
 * >= V, which the caller refuses beforehand but which must never make a
 * kernel read out of bounds.
 *
 * Forward: one block per row (V up to ~150k, threads striding along it).
 * Each thread keeps an online (max, sum of exp) of its elements, so the row
 * is read once; the block then merges them into the row's log-sum-exp (sums
 * in double, as the CPU). Per-row losses go to `work`; one block sums them
 * in a fixed order and divides by the count of targets, also counted on the
 * device: the loss does not depend on timing.
 * Backward: one block computes the per-token weight dloss * scale / count,
 * then one block per row writes (softmax - onehot) * weight.
 * Both are also callable in pieces (rows, then mean; weight, then rows), so
 * the head (block.cu) can feed them its logits a chunk of tokens at a time.
 */
#include "codelets/cuda/cuda_compat.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

#define THREADS 256
#define MAX_ROW_BLOCKS (65535u * 8u)

static int mul_ok(size_t a, size_t b, size_t *out)
{
    if (b && a > SIZE_MAX / b)
        return 0;
    *out = a * b;
    return 1;
}

static unsigned row_blocks(size_t N)
{
    return N == 0 ? 1u : N > MAX_ROW_BLOCKS ? MAX_ROW_BLOCKS : (unsigned)N;
}

__device__ static inline int target_ok(int32_t t, size_t V)
{
    return t >= 0 && (size_t)t < V;
}

/* The number of counted targets of targets (N), on every thread of a block
 * (a double holds any count exactly; it is what the divisions use). */
__device__ static double count_targets(const int32_t *targets, size_t N, size_t V, double *red)
{
    double cnt = 0.0;
    for (size_t n = threadIdx.x; n < N; n += blockDim.x)
        cnt += target_ok(targets[n], V) ? 1.0 : 0.0;
    return sg_block_sum_d(cnt, red);
}

/* ---- forward ------------------------------------------------------------------ */

/* row_loss (N) float: lse - logit[target], 0 for ignored rows; lse (N) in T
 * (may be NULL). */
template <typename T>
__global__ void k_ce_rows(float *row_loss, T *lse, const T *logits, const int32_t *targets,
                          size_t N, size_t V)
{
    __shared__ float red[THREADS];
    __shared__ double redd[THREADS];
    for (size_t n = blockIdx.x; n < N; n += gridDim.x) { // block-uniform: all reach the syncs
        const T *row = logits + n * V;                   // (V)
        /* Online max and sum of exp(x - m). m starts at -FLT_MAX, not -inf,
         * so that a -inf logit adds exp(-inf) = 0 rather than exp(NaN). */
        float m = -FLT_MAX;
        double s = 0.0;
        for (size_t v = threadIdx.x; v < V; v += blockDim.x) {
            float x = sg_ld(row[v]);
            if (x > m) {
                s = s * (double)expf(m - x) + 1.0; // rescale to the new max
                m = x;
            } else {
                s += (double)expf(x - m);
            }
        }
        float M = sg_block_max(m, red);
        double S = sg_block_sum_d(s == 0.0 ? 0.0 : s * (double)expf(m - M), redd);
        if (threadIdx.x == 0) {
            double l = (double)M + log(S);
            if (lse)
                lse[n] = sg_st<T>((float)l);
            int32_t t = targets[n];
            row_loss[n] = target_ok(t, V) ? (float)(l - (double)sg_ld(row[t])) : 0.0f;
        }
    }
}

/* *loss = sum of row_loss (N) / count, 0 when count is 0; one block. */
__global__ void k_ce_mean(float *loss, const float *row_loss, const int32_t *targets, size_t N,
                          size_t V)
{
    __shared__ double redd[THREADS];
    double tot = 0.0;
    for (size_t n = threadIdx.x; n < N; n += blockDim.x) // fixed order per thread, fixed tree
        tot += (double)row_loss[n];
    tot = sg_block_sum_d(tot, redd);
    double cnt = count_targets(targets, N, V, redd);
    if (threadIdx.x == 0)
        *loss = cnt > 0.0 ? (float)(tot / cnt) : 0.0f;
}

size_t sg_cu_cross_entropy_work_floats(size_t N)
{
    return N + 1; // forward: the row losses (N); backward: the weight (1)
}

static int dt_ok(sg_dtype dt)
{
    return dt == SG_F32 || dt == SG_BF16 || dt == SG_F16;
}

int sg_cu_cross_entropy_rows(const sg_cu *cu, float *row_loss, void *lse, const void *logits,
                             const int32_t *targets, sg_dtype dt, size_t N, size_t V)
{
    size_t nv;
    if (!cu || V == 0 || !mul_ok(N, V, &nv) || !dt_ok(dt))
        return SG_EINVAL;
    if (N == 0)
        return SG_OK;
    if (!row_loss || !logits || !targets)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_ce_rows<T>, row_blocks(N), THREADS, cu->stream, row_loss, (T *)lse,
                             (const T *)logits, targets, N, V));
    return sg_cu_launch_status();
}

int sg_cu_cross_entropy_mean(const sg_cu *cu, float *loss, const float *row_loss,
                             const int32_t *targets, size_t N, size_t V)
{
    if (!cu || V == 0 || !loss || (N && (!row_loss || !targets)))
        return SG_EINVAL;
    /* N = 0 still writes the loss (0, as the CPU) */
    SG_LAUNCH(k_ce_mean, 1, THREADS, cu->stream, loss, row_loss, targets, N, V);
    return sg_cu_launch_status();
}

int sg_cu_cross_entropy_forward(const sg_cu *cu, float *loss, void *lse, const void *logits,
                                const int32_t *targets, sg_dtype dt, size_t N, size_t V,
                                float *work)
{
    size_t nv;
    if (!cu || V == 0 || !mul_ok(N, V, &nv) || !loss || !work || !dt_ok(dt))
        return SG_EINVAL;
    if (N && (!logits || !targets))
        return SG_EINVAL;
    int rc = sg_cu_cross_entropy_rows(cu, work, lse, logits, targets, dt, N, V);
    return rc ? rc : sg_cu_cross_entropy_mean(cu, loss, work, targets, N, V);
}

/* ---- backward ----------------------------------------------------------------- */

/* *g = dloss * (*dloss_scale or 1) / count, 0 when count is 0 (double, then
 * one rounding, as the CPU's (float)(dloss / count)); one block. */
__global__ void k_ce_weight(float *g, const int32_t *targets, size_t N, size_t V, float dloss,
                            const float *dloss_scale)
{
    __shared__ double redd[THREADS];
    double cnt = count_targets(targets, N, V, redd);
    if (threadIdx.x == 0) {
        double d = (double)dloss * (dloss_scale ? (double)*dloss_scale : 1.0);
        *g = cnt > 0.0 ? (float)(d / cnt) : 0.0f;
    }
}

/* dlogits may equal logits: each element is read, then written, by one
 * thread. */
template <typename T>
__global__ void k_ce_bwd(T *dlogits, const T *logits, const T *lse, const int32_t *targets,
                         size_t N, size_t V, const float *gp)
{
    float g = *gp;
    for (size_t n = blockIdx.x; n < N; n += gridDim.x) {
        const T *row = logits + n * V; // (V)
        T *drow = dlogits + n * V;     // (V)
        int32_t t = targets[n];
        if (!target_ok(t, V) || g == 0.0f) {
            for (size_t v = threadIdx.x; v < V; v += blockDim.x)
                drow[v] = sg_st<T>(0.0f);
            continue;
        }
        float l = sg_ld(lse[n]);
        for (size_t v = threadIdx.x; v < V; v += blockDim.x) {
            float d = expf(sg_ld(row[v]) - l) * g;
            if (v == (size_t)t)
                d -= g;
            drow[v] = sg_st<T>(d);
        }
    }
}

int sg_cu_cross_entropy_weight(const sg_cu *cu, float *g, const int32_t *targets, size_t N,
                               size_t V, float dloss, const float *dloss_scale)
{
    if (!cu || V == 0 || !g || (N && !targets))
        return SG_EINVAL;
    SG_LAUNCH(k_ce_weight, 1, THREADS, cu->stream, g, targets, N, V, dloss, dloss_scale);
    return sg_cu_launch_status();
}

int sg_cu_cross_entropy_backward_rows(const sg_cu *cu, void *dlogits, const void *logits,
                                      const void *lse, const int32_t *targets, sg_dtype dt,
                                      size_t N, size_t V, const float *g)
{
    size_t nv;
    if (!cu || V == 0 || !mul_ok(N, V, &nv) || !dt_ok(dt))
        return SG_EINVAL;
    if (N == 0)
        return SG_OK;
    if (!dlogits || !logits || !lse || !targets || !g)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_ce_bwd<T>, row_blocks(N), THREADS, cu->stream, (T *)dlogits,
                             (const T *)logits, (const T *)lse, targets, N, V, g));
    return sg_cu_launch_status();
}

int sg_cu_cross_entropy_backward(const sg_cu *cu, void *dlogits, const void *logits,
                                 const void *lse, const int32_t *targets, sg_dtype dt, size_t N,
                                 size_t V, float dloss, const float *dloss_scale, float *work)
{
    size_t nv;
    if (!cu || V == 0 || !mul_ok(N, V, &nv) || !dt_ok(dt))
        return SG_EINVAL;
    if (N == 0)
        return SG_OK;
    if (!dlogits || !logits || !lse || !targets || !work)
        return SG_EINVAL;
    int rc = sg_cu_cross_entropy_weight(cu, work, targets, N, V, dloss, dloss_scale);
    return rc ? rc
              : sg_cu_cross_entropy_backward_rows(cu, dlogits, logits, lse, targets, dt, N, V,
                                                  work);
}
