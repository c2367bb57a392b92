/* moe.c - the Qwen3-MoE mixture-of-experts MLP: router, experts, combine and
 * the load-balancing loss, forward and backward (declared in ops.h).
 *
 * The formulas are those of Hugging Face transformers'
 * models/qwen3_moe/modeling_qwen3_moe.py (Qwen3MoeSparseMoeBlock,
 * Qwen3MoeMLP and load_balancing_loss_func), restated here:
 *   logits (N, E) = x Wr^T                      (mlp.gate, no bias)
 *   p = softmax(logits) over the experts, in fp32
 *   (w, sel) = topk(p, k)                       (sel: the k largest, ties to the
 *                                                lowest index, as this file picks)
 *   w /= sum(w) when norm_topk_prob
 *   y_n = sum_j w_nj * expert_{sel_nj}(x_n), expert(x) = down(silu(gate(x)) * up(x))
 *   aux = E * sum_e f_e P_e over the router outputs of every layer concatenated:
 *         f_e = (picks of e in any slot) / (L N), P_e = sum of p_e / (L N);
 *         the model's loss adds router_aux_loss_coef * aux.
 * The picks are not differentiable; the gradient flows through w (top-k
 * values, renormalisation) and through P (aux) into the softmax and Wr.
 *
 * A (token n, slot j) pair is a "slot" s = n k + j: per-slot arrays are
 * (N, k, ...). An expert works on its exact list of slots in token order
 * (sg_moe_expert_slots), gathered into contiguous rows; it writes only its own
 * slots, so experts are independent and every sum over slots or experts is
 * taken in a fixed order: the same bits whatever order experts run in.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/ops.h"

/* ---- router ------------------------------------------------------------------ */

void sg_moe_softmax_row(float *p, const float *l, size_t E)
{
    float mx = l[0];
    for (size_t e = 1; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    double sum = 0.0;
    for (size_t e = 0; e < E; e++) {
        p[e] = expf(l[e] - mx);
        sum += p[e];
    }
    const float inv = (float)(1.0 / sum);
    for (size_t e = 0; e < E; e++)
        p[e] *= inv;
}

void sg_moe_topk_row(float *sel, const float *v, size_t E, size_t K)
{
    /* repeated selection: the largest not yet taken, the lowest index among
     * equals; slots in descending order as torch.topk */
    for (size_t j = 0; j < K; j++) {
        size_t best = E;
        for (size_t e = 0; e < E; e++) {
            int taken = 0;
            for (size_t i = 0; i < j; i++)
                taken |= (size_t)sel[i] == e;
            if (!taken && (best == E || v[e] > v[best]))
                best = e;
        }
        sel[j] = (float)best;
    }
}

int sg_moe_router_forward(float *probs, float *sel, float *topw, float *logits, const float *x,
                          const float *Wr, size_t N, size_t H, size_t E, size_t K,
                          int norm_topk_prob)
{
    if (!probs || !sel || !topw || !logits || !x || !Wr || E == 0 || K == 0 || K > E ||
        E > (1u << 24))
        return SG_EINVAL;
    SG_TRY(sg_linear_forward(logits, x, Wr, NULL, N, H, E)); // (N, E)
    for (size_t n = 0; n < N; n++) {
        float *p = probs + n * E, *s = sel + n * K, *w = topw + n * K;
        sg_moe_softmax_row(p, logits + n * E, E);
        sg_moe_topk_row(s, p, E, K);
        float wsum = 0.0f;
        for (size_t j = 0; j < K; j++) {
            w[j] = p[(size_t)s[j]];
            wsum += w[j];
        }
        if (norm_topk_prob)
            for (size_t j = 0; j < K; j++)
                w[j] /= wsum;
    }
    return 0;
}

int sg_moe_stats_add(float *stats, const float *probs, const float *sel, size_t N, size_t E,
                     size_t K)
{
    if (!stats || !probs || !sel)
        return SG_EINVAL;
    for (size_t e = 0; e < E; e++) {
        double picks = 0.0, psum = 0.0; // token order
        for (size_t n = 0; n < N; n++) {
            psum += probs[n * E + e];
            for (size_t j = 0; j < K; j++)
                picks += (size_t)sel[n * K + j] == e;
        }
        stats[e] += (float)picks;
        stats[E + e] += (float)psum;
    }
    return 0;
}

double sg_moe_aux_loss(const float *stats, size_t E, size_t L, size_t N)
{
    if (!stats || E == 0 || L == 0 || N == 0)
        return 0.0;
    const double rows = (double)L * (double)N;
    double s = 0.0;
    for (size_t e = 0; e < E; e++)
        s += ((double)stats[e] / rows) * ((double)stats[E + e] / rows);
    return (double)E * s;
}

int sg_moe_router_backward(float *dx, float *dWr, float *dlogits, const float *dtopw,
                           const float *probs, const float *sel, const float *topw,
                           const float *stats, double aux_scale, const float *x, const float *Wr,
                           size_t N, size_t H, size_t E, size_t K, int norm_topk_prob)
{
    if (!dx || !dlogits || !dtopw || !probs || !sel || !topw || !x || !Wr)
        return SG_EINVAL;
    for (size_t n = 0; n < N; n++) {
        const float *p = probs + n * E, *s = sel + n * K, *w = topw + n * K;
        const float *dw = dtopw + n * K;
        float *dp = dlogits + n * E;   // d p first, then d logits in place
        for (size_t e = 0; e < E; e++) // d aux / d p_e = scale * picks_e (all layers)
            dp[e] = stats && aux_scale != 0.0 ? (float)(aux_scale * (double)stats[e]) : 0.0f;
        /* d of w_j = r_j / S (S = sum r): dr_j = (dw_j - sum_i dw_i w_i) / S */
        float dot = 0.0f, S = 0.0f;
        if (norm_topk_prob)
            for (size_t j = 0; j < K; j++) {
                dot += dw[j] * w[j];
                S += p[(size_t)s[j]];
            }
        for (size_t j = 0; j < K; j++)
            dp[(size_t)s[j]] += norm_topk_prob ? (dw[j] - dot) / S : dw[j];
        double pd = 0.0; // softmax backward: dl = p (dp - sum p dp)
        for (size_t e = 0; e < E; e++)
            pd += (double)p[e] * dp[e];
        for (size_t e = 0; e < E; e++)
            dp[e] = p[e] * (dp[e] - (float)pd);
    }
    return sg_linear_backward(dx, dWr, NULL, dlogits, x, Wr, N, H, E); // dx (N, H) WRITES
}

/* ---- experts ------------------------------------------------------------------- */

size_t sg_moe_expert_slots(int32_t *slots, const float *sel, size_t N, size_t K, size_t e)
{
    size_t c = 0;
    for (size_t s = 0; s < N * K; s++)
        if ((size_t)sel[s] == e)
            slots[c++] = (int32_t)s;
    return c;
}

/* rows (n, C) = src[idx / div] for each of the n entries (idx NULL: rows
 * 0..n-1 of src) */
static void gather(float *rows, const float *src, const int32_t *idx, size_t n, size_t C,
                   size_t div)
{
    for (size_t r = 0; r < n; r++)
        memcpy(rows + r * C, src + (idx ? (size_t)idx[r] / div : r) * C, C * sizeof *rows);
}

/* dst[idx[r]] = rows[r] (idx NULL: dst rows 0..n-1) */
static void scatter(float *dst, const float *rows, const int32_t *idx, size_t n, size_t C)
{
    for (size_t r = 0; r < n; r++)
        memcpy(dst + (idx ? (size_t)idx[r] : r) * C, rows + r * C, C * sizeof *rows);
}

int sg_moe_expert_forward(float *gate_s, float *up_s, float *out_s, const float *x,
                          const int32_t *slots, const int32_t *rows, size_t n, const float *Wg,
                          const float *Wu, const float *Wd, size_t H, size_t F, size_t K,
                          float *scratch)
{
    if (!gate_s || !up_s || !x || !slots || !Wg || !Wu || !scratch || K == 0)
        return SG_EINVAL;
    if (n == 0)
        return 0;
    float *xe = scratch, *g = xe + n * H, *u = g + n * F, *act = u + n * F, *o = act + n * F;
    gather(xe, x, slots, n, H, K);                       // (n, H)
    SG_TRY(sg_linear_forward(g, xe, Wg, NULL, n, H, F)); // (n, F)
    SG_TRY(sg_linear_forward(u, xe, Wu, NULL, n, H, F)); // (n, F)
    scatter(gate_s, g, rows, n, F);
    scatter(up_s, u, rows, n, F);
    if (!out_s) // recompute: what is saved only
        return 0;
    if (!Wd)
        return SG_EINVAL;
    SG_TRY(sg_swiglu_forward(act, g, u, n, F));
    SG_TRY(sg_linear_forward(o, act, Wd, NULL, n, F, H)); // (n, H)
    scatter(out_s, o, rows, n, H);
    return 0;
}

int sg_moe_combine_forward(float *y, const float *h, const float *const *outs, const float *topw,
                           size_t N, size_t H, size_t K)
{
    if (!y || !h || !outs || !topw)
        return SG_EINVAL;
    for (size_t t = 0; t < N; t++) {
        float *yr = y + t * H;
        memcpy(yr, h + t * H, H * sizeof *yr);
        for (size_t j = 0; j < K; j++) { // slot order
            const float w = topw[t * K + j], *o = outs[t * K + j];
            for (size_t i = 0; i < H; i++)
                yr[i] += w * o[i];
        }
    }
    return 0;
}

int sg_moe_expert_backward(float *dx_s, float *dtopw, float *dWg, float *dWu, float *dWd,
                           const float *dy, const float *x, const float *gate_s, const float *up_s,
                           const float *topw, const int32_t *slots, const int32_t *rows, size_t n,
                           const float *Wg, const float *Wu, const float *Wd, size_t H, size_t F,
                           size_t K, float *scratch)
{
    if (!dx_s || !dtopw || !dy || !x || !gate_s || !up_s || !topw || !slots || !Wg || !Wu || !Wd ||
        !scratch || K == 0)
        return SG_EINVAL;
    if (n == 0)
        return 0;
    float *xe = scratch, *o = xe + n * H, *dout = o + n * H, *dxe = dout + n * H;
    float *tmp = dxe + n * H, *g = tmp + n * H, *u = g + n * F, *act = u + n * F;
    float *dact = act + n * F, *dup = dact + n * F;
    gather(xe, x, slots, n, H, K);
    gather(g, gate_s, rows, n, F, 1);
    gather(u, up_s, rows, n, F, 1);
    SG_TRY(sg_swiglu_forward(act, g, u, n, F));           // recomputed
    SG_TRY(sg_linear_forward(o, act, Wd, NULL, n, F, H)); // the expert's output, recomputed
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
    SG_TRY(sg_linear_backward(dact, dWd, NULL, dout, act, Wd, n, F, H));
    float *dgate = act; // act is dead
    SG_TRY(sg_swiglu_backward(dgate, dup, dact, g, u, n, F));
    SG_TRY(sg_linear_backward(dxe, dWg, NULL, dgate, xe, Wg, n, H, F));
    SG_TRY(sg_linear_backward(tmp, dWu, NULL, dup, xe, Wu, n, H, F));
    for (size_t i = 0; i < n * H; i++)
        dxe[i] += tmp[i];
    scatter(dx_s, dxe, rows, n, H);
    return 0;
}

int sg_moe_slots_sum(float *dx, const float *const *dx_s, size_t N, size_t H, size_t K)
{
    if (!dx || !dx_s)
        return SG_EINVAL;
    for (size_t t = 0; t < N; t++) {
        float *d = dx + t * H;
        memcpy(d, dx_s[t * K], H * sizeof *d);
        for (size_t j = 1; j < K; j++) { // slot order
            const float *s = dx_s[t * K + j];
            for (size_t i = 0; i < H; i++)
                d[i] += s[i];
        }
    }
    return 0;
}
