/* moe_router.cu - the router of the mixture-of-experts MLPs of Qwen3-MoE
 * and GPT-OSS on the GPU, forward and backward (cuda_ops.h), and the
 * load-balancing statistics and loss; the experts, slot lists and combine
 * are moe.cu's (its comment states how the MoE runs on the device). The
 * semantics are those of codelets/cpu/moe.c and codelets/cpu/gpt_oss.c.
 *
 * Router state is fp32 whatever the storage dtype: logits and probs (N, E),
 * sel (N, K: expert indices held as floats, as on the CPU), topw (N, K),
 * dtopw, the statistics (2 E). The logits' gradient is in dt. One thread
 * per token row does the softmax, the top-k (by (value desc, index asc):
 * the same picks as the CPU's repeated selection, ties to the lowest index)
 * and the renormalisation, in the CPU's order of operations.
 */

#include <limits.h>
#include <math.h>

#include "codelets/cuda/cuda_prologue.h"
/* The C headers have no extern "C" of their own (ops.h: the GPT-OSS
 * constants SG_OSS_SWIGLU_LIMIT and SG_OSS_SWIGLU_ALPHA). */
extern "C" {
#include "codelets/cpu/ops.h"
}
#include "codelets/cuda/cuda_compat.h"

#define THREADS 256

/* ---- router ------------------------------------------------------------------- */

/* One thread per token row. oss: top-k of the logits, softmax over them;
 * else top-k of the softmax, renormalised when norm. */
__global__ void k_router_fwd(float *probs, float *sel, float *topw, const float *logits, size_t N,
                             size_t E, size_t K, int oss, int norm)
{
    SG_GRID_STRIDE(n, N)
    {
        const float *l = logits + n * E;
        float *p = probs + n * E, *s = sel + n * K, *w = topw + n * K;
        float mx = sg_ld(l[0]);
        for (size_t e = 1; e < E; e++) {
            const float v = sg_ld(l[e]);
            mx = v > mx ? v : mx;
        }
        double sum = 0.0;
        for (size_t e = 0; e < E; e++) {
            p[e] = expf(sg_ld(l[e]) - mx);
            sum += p[e];
        }
        const float inv = (float)(1.0 / sum);
        for (size_t e = 0; e < E; e++)
            p[e] *= inv;
        /* the k largest by (value desc, index asc): the next pick is the best
         * of those strictly after the previous one in that order */
        float pv = 0.0f;
        size_t pi = 0;
        for (size_t j = 0; j < K; j++) {
            size_t best = E;
            float bv = 0.0f;
            for (size_t e = 0; e < E; e++) {
                const float v = oss ? sg_ld(l[e]) : p[e];
                const int after = j == 0 || v < pv || (v == pv && e > pi);
                if (after && (best == E || v > bv)) {
                    best = e;
                    bv = v;
                }
            }
            if (best == E) // NaN scores: nothing orders after; take the next index
                best = j;
            s[j] = (float)best;
            pv = bv;
            pi = best;
        }
        if (oss) { /* softmax over the selected logits; the first is the largest */
            const float top = sg_ld(l[(size_t)s[0]]);
            double ws = 0.0;
            for (size_t j = 0; j < K; j++) {
                w[j] = expf(sg_ld(l[(size_t)s[j]]) - top);
                ws += w[j];
            }
            const float winv = (float)(1.0 / ws);
            for (size_t j = 0; j < K; j++)
                w[j] *= winv;
        } else {
            float wsum = 0.0f;
            for (size_t j = 0; j < K; j++) {
                w[j] = p[(size_t)s[j]];
                wsum += w[j];
            }
            if (norm)
                for (size_t j = 0; j < K; j++)
                    w[j] /= wsum;
        }
    }
}

/* logits (N, E) fp32 = b (E, in dt) on every row, or 0. */
template <typename T> __global__ void k_logit_bias(float *y, const T *b, size_t N, size_t E)
{
    SG_GRID_STRIDE(i, N * E)
    y[i] = b ? sg_ld(b[i % E]) : 0.0f;
}

/* The router's logits stay fp32 whatever dt (x, Wr in dt, fp32 accumulation
 * and output: one rounding fewer than a dt GEMM output), so that the picks
 * are those of the CPU path, which keeps them in fp32. */
static int router_logits(const sg_cu *cu, float *logits, const void *x, const void *Wr,
                         const void *br, sg_dtype dt, size_t N, size_t H, size_t E)
{
    if (N > INT_MAX || H > INT_MAX || E > INT_MAX)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_logit_bias<T>, sg_cu_blocks(N * E, THREADS), THREADS, cu->stream,
                             logits, (const T *)br, N, E));
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    // logits' (E, N) = op_T(Wr' (H, E)) x' (H, N) + logits', A, B in dt, C fp32
    const float alpha = 1.0f, beta = 1.0f;
    cudaDataType t = sg_cu_blas_type(dt);
    cublasStatus_t st =
        cublasGemmEx((cublasHandle_t)cu->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)E, (int)N, (int)H,
                     &alpha, Wr, t, (int)H, x, t, (int)H, &beta, logits, CUDA_R_32F, (int)E,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? SG_OK : SG_EIO;
}

static int router_forward(const sg_cu *cu, float *probs, float *sel, float *topw, float *logits,
                          const void *x, const void *Wr, const void *br, sg_dtype dt, size_t N,
                          size_t H, size_t E, size_t K, int oss, int norm)
{
    if (!cu || !probs || !sel || !topw || !logits || !x || !Wr || (oss && !br) ||
        !sg_cu_dtype_ok(dt) || E == 0 || K == 0 || K > E || E > (1u << 24) || H == 0)
        return SG_EINVAL;
    if (N == 0)
        return SG_OK;
    SG_CU_TRY_OR_RETURN(router_logits(cu, logits, x, Wr, br, dt, N, H, E));
    SG_LAUNCH(k_router_fwd, sg_cu_blocks(N, 64), 64, cu->stream, probs, sel, topw,
              (const float *)logits, N, E, K, oss, norm);
    return sg_cu_launch_status();
}

int sg_cu_moe_router_forward(const sg_cu *cu, float *probs, float *sel, float *topw, float *logits,
                             const void *x, const void *Wr, sg_dtype dt, size_t N, size_t H,
                             size_t E, size_t K, int norm_topk_prob)
{
    return router_forward(cu, probs, sel, topw, logits, x, Wr, NULL, dt, N, H, E, K, 0,
                          norm_topk_prob);
}

int sg_cu_moe_oss_router_forward(const sg_cu *cu, float *probs, float *sel, float *topw,
                                 float *logits, const void *x, const void *Wr, const void *br,
                                 sg_dtype dt, size_t N, size_t H, size_t E, size_t K)
{
    return router_forward(cu, probs, sel, topw, logits, x, Wr, br, dt, N, H, E, K, 1, 0);
}

/* dlogits (N, E) in dt, one thread per row (moe.c / gpt_oss.c's router
 * backward, same order of operations). */
template <typename T>
__global__ void k_router_bwd(T *dlogits, float *dp_work, const float *dtopw, const float *probs,
                             const float *sel, const float *topw, const float *stats,
                             double aux_scale, const float *scale, size_t N, size_t E, size_t K,
                             int oss, int norm)
{
    if (scale)
        aux_scale *= (double)*scale;
    SG_GRID_STRIDE(n, N)
    {
        const float *p = probs + n * E, *s = sel + n * K, *w = topw + n * K;
        const float *dw = dtopw + n * K;
        float *dp = dp_work + n * E;
        for (size_t e = 0; e < E; e++)
            dp[e] = stats && aux_scale != 0.0 ? (float)(aux_scale * (double)stats[e]) : 0.0f;
        if (oss) {
            double pd = 0.0;
            for (size_t e = 0; e < E; e++)
                pd += (double)p[e] * dp[e];
            for (size_t e = 0; e < E; e++)
                dp[e] = p[e] * (dp[e] - (float)pd);
            float dot = 0.0f;
            for (size_t j = 0; j < K; j++)
                dot += w[j] * dw[j];
            for (size_t j = 0; j < K; j++)
                dp[(size_t)s[j]] += w[j] * (dw[j] - dot);
        } else {
            float dot = 0.0f, S = 0.0f;
            if (norm)
                for (size_t j = 0; j < K; j++) {
                    dot += dw[j] * w[j];
                    S += p[(size_t)s[j]];
                }
            for (size_t j = 0; j < K; j++)
                dp[(size_t)s[j]] += norm ? (dw[j] - dot) / S : dw[j];
            double pd = 0.0;
            for (size_t e = 0; e < E; e++)
                pd += (double)p[e] * dp[e];
            for (size_t e = 0; e < E; e++)
                dp[e] = p[e] * (dp[e] - (float)pd);
        }
        T *dl = dlogits + n * E;
        for (size_t e = 0; e < E; e++)
            dl[e] = sg_st<T>(dp[e]);
    }
}

size_t sg_cu_moe_router_backward_work_floats(size_t N, size_t E)
{
    size_t lin = sg_cu_linear_backward_work_floats(N, E);
    return N * E + lin;
}

static int router_backward(const sg_cu *cu, void *dx, void *dWr, void *dbr, void *dlogits,
                           const float *dtopw, const float *probs, const float *sel,
                           const float *topw, const float *stats, double aux_scale,
                           const float *scale, const void *x, const void *Wr, sg_dtype dt, size_t N,
                           size_t H, size_t E, size_t K, int oss, int norm, float *work)
{
    if (!cu || !dx || !dlogits || !dtopw || !probs || !sel || !topw || !x || !Wr || !work ||
        !sg_cu_dtype_ok(dt) || E == 0 || K == 0 || K > E || H == 0)
        return SG_EINVAL;
    if (N == 0)
        return SG_OK;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_router_bwd<T>, sg_cu_blocks(N, 64), 64, cu->stream, (T *)dlogits,
                             work, dtopw, probs, sel, topw, stats, aux_scale, scale, N, E, K, oss,
                             norm));
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    return sg_cu_linear_backward(cu, dx, dWr, dbr, dlogits, x, Wr, dt, N, H, E, work + N * E);
}

int sg_cu_moe_router_backward(const sg_cu *cu, void *dx, void *dWr, void *dlogits,
                              const float *dtopw, const float *probs, const float *sel,
                              const float *topw, const float *stats, double aux_scale,
                              const float *aux_scale_mul, const void *x, const void *Wr,
                              sg_dtype dt, size_t N, size_t H, size_t E, size_t K,
                              int norm_topk_prob, float *work)
{
    return router_backward(cu, dx, dWr, NULL, dlogits, dtopw, probs, sel, topw, stats, aux_scale,
                           aux_scale_mul, x, Wr, dt, N, H, E, K, 0, norm_topk_prob, work);
}

int sg_cu_moe_oss_router_backward(const sg_cu *cu, void *dx, void *dWr, void *dbr, void *dlogits,
                                  const float *dtopw, const float *probs, const float *sel,
                                  const float *topw, const float *stats, double aux_scale,
                                  const float *aux_scale_mul, const void *x, const void *Wr,
                                  sg_dtype dt, size_t N, size_t H, size_t E, size_t K, float *work)
{
    return router_backward(cu, dx, dWr, dbr, dlogits, dtopw, probs, sel, topw, stats, aux_scale,
                           aux_scale_mul, x, Wr, dt, N, H, E, K, 1, 0, work);
}

/* ---- load-balancing statistics and loss ------------------------------------------ */

/* One thread per expert: picks and the probability sum in token order. */
__global__ void k_stats_add(float *stats, const float *probs, const float *sel, size_t N, size_t E,
                            size_t K)
{
    SG_GRID_STRIDE(e, E)
    {
        double picks = 0.0, psum = 0.0;
        for (size_t n = 0; n < N; n++) {
            psum += probs[n * E + e];
            for (size_t j = 0; j < K; j++)
                picks += (size_t)sel[n * K + j] == e;
        }
        stats[e] += (float)picks;
        stats[E + e] += (float)psum;
    }
}

int sg_cu_moe_stats_add(const sg_cu *cu, float *stats, const float *probs, const float *sel,
                        size_t N, size_t E, size_t K)
{
    if (!cu || !stats || !probs || !sel || E == 0)
        return SG_EINVAL;
    SG_LAUNCH(k_stats_add, sg_cu_blocks(E, 64), 64, cu->stream, stats, probs, sel, N, E, K);
    return sg_cu_launch_status();
}

__global__ void k_aux_loss(float *loss, const float *stats, size_t E, double rows)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double s = 0.0;
    for (size_t e = 0; e < E; e++)
        s += ((double)stats[e] / rows) * ((double)stats[E + e] / rows);
    *loss = (float)((double)E * s);
}

int sg_cu_moe_aux_loss(const sg_cu *cu, float *loss, const float *stats, size_t E, size_t L,
                       size_t N)
{
    if (!cu || !loss || !stats || E == 0 || L == 0 || N == 0)
        return SG_EINVAL;
    SG_LAUNCH(k_aux_loss, 1, 1, cu->stream, loss, stats, E, (double)L * (double)N);
    return sg_cu_launch_status();
}

__global__ void k_aux_loss_add(float *loss, const float *stats, size_t E, double rows, double coef)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double s = 0.0;
    for (size_t e = 0; e < E; e++)
        s += ((double)stats[e] / rows) * ((double)stats[E + e] / rows);
    *loss = (float)((double)*loss + coef * ((double)E * s));
}

int sg_cu_moe_aux_loss_add(const sg_cu *cu, float *loss, const float *stats, size_t E, size_t L,
                           size_t N, double coef)
{
    if (!cu || !loss || !stats || E == 0 || L == 0 || N == 0)
        return SG_EINVAL;
    SG_LAUNCH(k_aux_loss_add, 1, 1, cu->stream, loss, stats, E, (double)L * (double)N, coef);
    return sg_cu_launch_status();
}
