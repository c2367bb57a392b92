/* gpt_oss.c - the GPT-OSS mixture-of-experts MLP: router with a bias, top-k
 * on the logits, clamped SwiGLU experts with biases, forward and backward
 * (declared in ops.h; attention sinks are in attention.c).
 *
 * The formulas are those of Hugging Face transformers'
 * models/gpt_oss/modeling_gpt_oss.py (GptOssTopKRouter, GptOssExperts, and
 * load_balancing_loss_func on the raw router logits as transformers 5
 * records them), restated here:
 *   logits (N, E) = x Wr^T + br                  (mlp.router, with a bias)
 *   (v, sel) = topk(logits, k)                   (descending; ties here go to
 *                                                 the lowest index)
 *   w = softmax(v) over the k selected logits
 *   expert e on a row x:
 *     gu = x @ gate_up_proj[e] + gate_up_proj_bias[e]   ((H, 2I): in, out)
 *     gate = gu[0::2], up = gu[1::2]             (interleaved columns)
 *     gate = min(gate, limit), up = clamp(up, -limit, limit)   (limit 7.0)
 *     glu = gate * sigmoid(alpha * gate)          (alpha 1.702)
 *     out = ((up + 1) * glu) @ down_proj[e] + down_proj_bias[e]   ((I, H))
 *   y_n = sum_j w_nj * expert_{sel_nj}(x_n)
 *   aux (when the loss weight is set) = E * sum_e f_e P_e with P_e the mean
 *   of softmax(logits) over all E experts and f_e the share of top-k picks,
 *   as moe.c (top-k of the softmax = top-k of the logits).
 * softmax(v) over the selected logits equals p_sel / sum(p_sel) with p the
 * full softmax, so its backward is dv_j = w_j (dw_j - sum_i w_i dw_i). The
 * clamps pass no gradient where they cut (torch.clamp passes it at the
 * bounds themselves).
 *
 * An expert's slots are handled as in moe.c: gathered rows, only its own
 * rows written, every sum in a fixed order.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/gemm.h"
#include "codelets/cpu/ops.h"

/* ---- router ------------------------------------------------------------------ */

int sg_moe_oss_router_forward(float *probs, float *sel, float *topw, float *logits, const float *x,
                              const float *Wr, const float *br, size_t N, size_t H, size_t E,
                              size_t K)
{
    if (!probs || !sel || !topw || !logits || !x || !Wr || !br || E == 0 || K == 0 || K > E ||
        E > (1u << 24))
        return SG_EINVAL;
    SG_TRY(sg_linear_forward(logits, x, Wr, br, N, H, E)); // (N, E)
    for (size_t n = 0; n < N; n++) {
        const float *l = logits + n * E;
        float *p = probs + n * E, *s = sel + n * K, *w = topw + n * K;
        sg_moe_softmax_row(p, l, E);
        sg_moe_topk_row(s, l, E, K); // top-k of the logits
        /* softmax over the k selected logits; the first is the largest */
        const float top = l[(size_t)s[0]];
        double ws = 0.0;
        for (size_t j = 0; j < K; j++) {
            w[j] = expf(l[(size_t)s[j]] - top);
            ws += w[j];
        }
        const float winv = (float)(1.0 / ws);
        for (size_t j = 0; j < K; j++)
            w[j] *= winv;
    }
    return 0;
}

int sg_moe_oss_router_backward(float *dx, float *dWr, float *dbr, float *dlogits,
                               const float *dtopw, const float *probs, const float *sel,
                               const float *topw, const float *stats, double aux_scale,
                               const float *x, const float *Wr, size_t N, size_t H, size_t E,
                               size_t K)
{
    if (!dx || !dlogits || !dtopw || !probs || !sel || !topw || !x || !Wr)
        return SG_EINVAL;
    const int aux = stats && aux_scale != 0.0;
    for (size_t n = 0; n < N; n++) {
        const float *p = probs + n * E, *s = sel + n * K, *w = topw + n * K;
        const float *dw = dtopw + n * K;
        float *dl = dlogits + n * E;
        /* the load-balancing term: d aux / d p_e = scale * picks_e (all
         * layers), through the full softmax: dl = p (dp - sum p dp) */
        double pd = 0.0;
        for (size_t e = 0; e < E; e++) {
            dl[e] = aux ? (float)(aux_scale * (double)stats[e]) : 0.0f;
            pd += (double)p[e] * dl[e];
        }
        for (size_t e = 0; e < E; e++)
            dl[e] = p[e] * (dl[e] - (float)pd);
        /* the softmax over the selected logits */
        float dot = 0.0f;
        for (size_t j = 0; j < K; j++)
            dot += w[j] * dw[j];
        for (size_t j = 0; j < K; j++)
            dl[(size_t)s[j]] += w[j] * (dw[j] - dot);
    }
    return sg_linear_backward(dx, dWr, dbr, dlogits, x, Wr, N, H, E); // dx (N, H) WRITES
}

/* ---- clamped SwiGLU ------------------------------------------------------------ */

static float sigmoidf(float z)
{
    return 1.0f / (1.0f + expf(-z));
}

int sg_oss_glu_forward(float *h, const float *gate, const float *up, size_t N, size_t F)
{
    if (!h || !gate || !up)
        return SG_EINVAL;
    const float lim = SG_OSS_SWIGLU_LIMIT, a = SG_OSS_SWIGLU_ALPHA;
    for (size_t i = 0; i < N * F; i++) {
        const float g = gate[i] > lim ? lim : gate[i];
        const float u = up[i] > lim ? lim : up[i] < -lim ? -lim : up[i];
        h[i] = (u + 1.0f) * (g * sigmoidf(a * g));
    }
    return 0;
}

int sg_oss_glu_backward(float *dgate, float *dup, const float *dh, const float *gate,
                        const float *up, size_t N, size_t F)
{
    if (!dgate || !dup || !dh || !gate || !up)
        return SG_EINVAL;
    const float lim = SG_OSS_SWIGLU_LIMIT, a = SG_OSS_SWIGLU_ALPHA;
    for (size_t i = 0; i < N * F; i++) {
        const float g0 = gate[i], u0 = up[i], d = dh[i];
        const int gcut = g0 > lim, ucut = u0 > lim || u0 < -lim;
        const float g = gcut ? lim : g0, u = ucut ? (u0 > 0 ? lim : -lim) : u0;
        const float sg = sigmoidf(a * g);
        /* d/dg [g sigmoid(a g)] = sigmoid + a g sigmoid (1 - sigmoid) */
        dgate[i] = gcut ? 0.0f : d * (u + 1.0f) * (sg + a * g * sg * (1.0f - sg));
        dup[i] = ucut ? 0.0f : d * (g * sg);
    }
    return 0;
}

/* ---- experts ------------------------------------------------------------------- */

static int dims_ok(size_t n, size_t H, size_t F)
{
    return n <= INT_MAX && H <= INT_MAX && 2 * F <= INT_MAX && H > 0 && F > 0;
}

/* y (n, out) = x (n, in) @ W (in, out) + b: the fused tensors' layout. */
static void mm_in_out(float *y, const float *x, const float *W, const float *b, size_t n, size_t in,
                      size_t out)
{
    for (size_t r = 0; r < n; r++)
        memcpy(y + r * out, b, out * sizeof *y);
    sg_gemm(0, 0, n, out, in, 1.0f, x, in, W, out, 1.0f, y, out);
}

/* db (C) += column sums of d (n, C), summed in double. */
static int colsum_into(float *db, const float *d, size_t n, size_t C)
{
    double *acc = calloc(C, sizeof *acc);
    if (!acc)
        return SG_ENOMEM;
    for (size_t r = 0; r < n; r++)
        for (size_t c = 0; c < C; c++)
            acc[c] += d[r * C + c];
    for (size_t c = 0; c < C; c++)
        db[c] += (float)acc[c];
    free(acc);
    return 0;
}

int sg_moe_oss_expert_forward(float *gate_s, float *up_s, float *out_s, const float *x,
                              const int32_t *slots, const int32_t *rows, size_t n, const float *Wgu,
                              const float *bgu, const float *Wd, const float *bd, size_t H,
                              size_t F, size_t K, float *scratch)
{
    if (!gate_s || !up_s || !x || !slots || !Wgu || !bgu || !scratch || K == 0 || !dims_ok(n, H, F))
        return SG_EINVAL;
    if (n == 0)
        return 0;
    float *xe = scratch, *gu = xe + n * H, *act = gu + 2 * n * F, *o = act + n * F;
    for (size_t r = 0; r < n; r++)
        memcpy(xe + r * H, x + (size_t)slots[r] / K * H, H * sizeof *xe);
    mm_in_out(gu, xe, Wgu, bgu, n, H, 2 * F); // (n, 2F)
    for (size_t r = 0; r < n; r++) {
        const size_t row = rows ? (size_t)rows[r] : r;
        float *g = gate_s + row * F, *u = up_s + row * F;
        const float *in = gu + r * 2 * F;
        for (size_t i = 0; i < F; i++) {
            g[i] = in[2 * i];
            u[i] = in[2 * i + 1];
        }
    }
    if (!out_s) // recompute: what is saved only
        return 0;
    if (!Wd || !bd)
        return SG_EINVAL;
    for (size_t r = 0; r < n; r++) { // glu from the interleaved columns
        const size_t row = rows ? (size_t)rows[r] : r;
        SG_TRY(sg_oss_glu_forward(act + r * F, gate_s + row * F, up_s + row * F, 1, F));
    }
    mm_in_out(o, act, Wd, bd, n, F, H); // (n, H)
    for (size_t r = 0; r < n; r++)
        memcpy(out_s + (rows ? (size_t)rows[r] : r) * H, o + r * H, H * sizeof *o);
    return 0;
}

int sg_moe_oss_expert_backward(float *dx_s, float *dtopw, float *dWgu, float *dbgu, float *dWd,
                               float *dbd, const float *dy, const float *x, const float *gate_s,
                               const float *up_s, const float *topw, const int32_t *slots,
                               const int32_t *rows, size_t n, const float *Wgu, const float *Wd,
                               const float *bd, size_t H, size_t F, size_t K, float *scratch)
{
    if (!dx_s || !dtopw || !dy || !x || !gate_s || !up_s || !topw || !slots || !Wgu || !Wd || !bd ||
        !scratch || K == 0 || !dims_ok(n, H, F))
        return SG_EINVAL;
    if (n == 0)
        return 0;
    float *xe = scratch, *o = xe + n * H, *dout = o + n * H, *dxe = dout + n * H;
    float *g = dxe + 2 * n * H, *u = g + n * F, *act = u + n * F, *dact = act + n * F;
    for (size_t r = 0; r < n; r++) {
        const size_t row = rows ? (size_t)rows[r] : r;
        memcpy(xe + r * H, x + (size_t)slots[r] / K * H, H * sizeof *xe);
        memcpy(g + r * F, gate_s + row * F, F * sizeof *g);
        memcpy(u + r * F, up_s + row * F, F * sizeof *u);
    }
    SG_TRY(sg_oss_glu_forward(act, g, u, n, F)); // recomputed
    mm_in_out(o, act, Wd, bd, n, F, H);          // the expert's output, recomputed
    for (size_t r = 0; r < n; r++) {
        const size_t s = (size_t)slots[r];
        const float *dyr = dy + s / K * H, *orow = o + r * H;
        float d = 0.0f;
        for (size_t i = 0; i < H; i++) {
            d += dyr[i] * orow[i];
            dout[r * H + i] = topw[s] * dyr[i];
        }
        dtopw[rows ? (size_t)rows[r] : r] = d;
    }
    if (dWd) // dWd (F, H) += act^T dout
        sg_gemm(1, 0, F, H, n, 1.0f, act, F, dout, H, 1.0f, dWd, H);
    if (dbd)
        SG_TRY(colsum_into(dbd, dout, n, H));
    // dact (n, F) = dout Wd^T
    sg_gemm(0, 1, n, F, H, 1.0f, dout, H, Wd, H, 0.0f, dact, F);
    SG_TRY(sg_oss_glu_backward(g, u, dact, g, u, n, F)); // dgate, dup in place
    float *dgu = act; // act and dact are dead: d gate_up (n, 2F), interleaved
    for (size_t r = 0; r < n; r++)
        for (size_t i = 0; i < F; i++) {
            dgu[r * 2 * F + 2 * i] = g[r * F + i];
            dgu[r * 2 * F + 2 * i + 1] = u[r * F + i];
        }
    // dxe (n, H) = dgu Wgu^T, Wgu (H, 2F)
    sg_gemm(0, 1, n, H, 2 * F, 1.0f, dgu, 2 * F, Wgu, 2 * F, 0.0f, dxe, H);
    if (dWgu) // dWgu (H, 2F) += xe^T dgu
        sg_gemm(1, 0, H, 2 * F, n, 1.0f, xe, H, dgu, 2 * F, 1.0f, dWgu, 2 * F);
    if (dbgu)
        SG_TRY(colsum_into(dbgu, dgu, n, 2 * F));
    for (size_t r = 0; r < n; r++)
        memcpy(dx_s + (rows ? (size_t)rows[r] : r) * H, dxe + r * H, H * sizeof *dxe);
    return 0;
}
