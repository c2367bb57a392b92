/* attention.c - causal grouped-query attention with an optional sliding
 * window, forward and backward (see ops.h).
 *
 * Flash-attention structure on one core: for each (batch, query head) the
 * queries are taken in tiles of ATT_BQ and, for each, the keys they may see
 * in tiles of ATT_BK. The forward keeps a running max m and sum l per query
 * (online softmax) and rescales the partial output when m grows; it saves
 * lse = m + log(l). The backward recomputes each score tile and its
 * probabilities P = exp(s - lse), so nothing of size (T, T) is ever stored.
 * Tile products go through cblas_sgemm with the heads' row strides.
 *
 * Visible keys of query i: j <= i and, with a window W > 0, j > i - W.
 */
#include "codelets/cpu/ops.h"
#include "codelets/cpu/simd.h"
#include "codelets/cpu/vexp.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATT_BQ 64 /* queries per tile */
#define ATT_BK 64 /* keys per tile */

static int check_dims(size_t Hq, size_t Hkv, size_t D)
{
    if (Hq == 0 || Hkv == 0 || D == 0 || Hq % Hkv)
        return SG_EINVAL;
    if (Hq > (size_t)INT_MAX / D) // leading dimensions passed to BLAS as int
        return SG_EINVAL;
    return SG_OK;
}

/* First key visible to query i. */
static size_t first_key(size_t i, size_t window)
{
    return window && i + 1 > window ? i + 1 - window : 0;
}

/* The visible part [lo, hi) of key tile [j0, j0 + nk) for query i, relative
 * to j0; returns 0 when the tile holds no visible key. */
static int visible(size_t i, size_t window, size_t j0, size_t nk, size_t *lo, size_t *hi)
{
    size_t a = first_key(i, window), z = i + 1;
    if (a < j0)
        a = j0;
    if (z > j0 + nk)
        z = j0 + nk;
    if (a >= z)
        return 0;
    *lo = a - j0;
    *hi = z - j0;
    return 1;
}

/* S (nq, nk; row stride ATT_BK) = scale * Qtile Ktile^T. */
static void scores(float *S, const float *q, int ldq, const float *k, int ldk, size_t nq, size_t nk,
                   size_t D, float scale)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk, (int)D, scale, q, ldq, k,
                ldk, 0.0f, S, ATT_BK);
}

SG_SIMD_CLONES int sg_attention_forward(float *out, float *lse, const float *q, const float *k,
                                        const float *v, size_t B, size_t T, size_t Hq, size_t Hkv,
                                        size_t D, size_t window)
{
    if (check_dims(Hq, Hkv, D))
        return SG_EINVAL;
    float *S = malloc(sizeof(float) * ATT_BQ * ATT_BK); // (BQ, BK) scores, then P
    if (!S)
        return SG_ENOMEM;
    float m[ATT_BQ], l[ATT_BQ]; // running max and sum per query of the tile
    const size_t rep = Hq / Hkv;
    const size_t ldq = Hq * D, ldk = Hkv * D; // row strides of q and k, v
    const float scale = (float)(1.0 / sqrt((double)D));

    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++) {
            const float *qb = q + (b * T * Hq + h) * D;        // row t: qb + t * ldq
            const float *kb = k + (b * T * Hkv + h / rep) * D; // row t: kb + t * ldk
            const float *vb = v + (b * T * Hkv + h / rep) * D;
            float *ob = out + (b * T * Hq + h) * D;
            float *lseb = lse + (b * Hq + h) * T; // (T)
            for (size_t i0 = 0; i0 < T; i0 += ATT_BQ) {
                size_t nq = T - i0 < ATT_BQ ? T - i0 : ATT_BQ;
                for (size_t i = 0; i < nq; i++) {
                    m[i] = -INFINITY;
                    l[i] = 0.0f;
                    memset(ob + (i0 + i) * ldq, 0, D * sizeof(float));
                }
                size_t jend = i0 + nq; // the tile's last query sees keys < jend
                for (size_t j0 = first_key(i0, window); j0 < jend; j0 += ATT_BK) {
                    size_t nk = jend - j0 < ATT_BK ? jend - j0 : ATT_BK;
                    scores(S, qb + i0 * ldq, (int)ldq, kb + j0 * ldk, (int)ldk, nq, nk, D, scale);
                    for (size_t i = 0; i < nq; i++) {
                        float *restrict Si = S + i * ATT_BK; // (nk)
                        size_t lo, hi;
                        if (!visible(i0 + i, window, j0, nk, &lo, &hi)) {
                            memset(Si, 0, nk * sizeof(float));
                            continue;
                        }
                        float mx = sg_vmax(Si + lo, hi - lo, m[i]);
                        float alpha = expf(m[i] - mx); // 0 on the first visible tile
                        for (size_t j = 0; j < lo; j++)
                            Si[j] = 0.0f;
                        float sum = sg_vexp_sum(Si + lo, Si + lo, hi - lo, mx);
                        for (size_t j = hi; j < nk; j++)
                            Si[j] = 0.0f;
                        l[i] = l[i] * alpha + sum;
                        m[i] = mx;
                        if (alpha != 1.0f) {
                            float *restrict oi = ob + (i0 + i) * ldq; // (D)
                            for (size_t d = 0; d < D; d++)
                                oi[d] *= alpha;
                        }
                    }
                    // out tile (nq, D) += P (nq, nk) @ V tile (nk, D)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nq, (int)D, (int)nk,
                                1.0f, S, ATT_BK, vb + j0 * ldk, (int)ldk, 1.0f, ob + i0 * ldq,
                                (int)ldq);
                }
                for (size_t i = 0; i < nq; i++) { // every query sees itself: l > 0
                    float *restrict oi = ob + (i0 + i) * ldq;
                    float inv = 1.0f / l[i];
                    for (size_t d = 0; d < D; d++)
                        oi[d] *= inv;
                    lseb[i0 + i] = m[i] + logf(l[i]);
                }
            }
        }
    free(S);
    return SG_OK;
}

/* With P = softmax(s), dP = dout v^T and delta_i = sum_d dout_i out_i
 * (= sum_j P_ij dP_ij): dS = P * (dP - delta), dq = scale dS k,
 * dk = scale dS^T q, dv = P^T dout. */
SG_SIMD_CLONES int sg_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                         const float *q, const float *k, const float *v,
                                         const float *out, const float *lse, size_t B, size_t T,
                                         size_t Hq, size_t Hkv, size_t D, size_t window)
{
    if (check_dims(Hq, Hkv, D))
        return SG_EINVAL;
    float *P = malloc(sizeof(float) * 2 * ATT_BQ * ATT_BK); // (BQ, BK) twice
    if (!P)
        return SG_ENOMEM;
    float *dS = P + ATT_BQ * ATT_BK; // dP, then dS, (BQ, BK)
    float delta[ATT_BQ];
    const size_t rep = Hq / Hkv;
    const size_t ldq = Hq * D, ldk = Hkv * D; // row strides of q and k, v
    const float scale = (float)(1.0 / sqrt((double)D));

    memset(dq, 0, B * T * Hq * D * sizeof(float));
    memset(dk, 0, B * T * Hkv * D * sizeof(float));
    memset(dv, 0, B * T * Hkv * D * sizeof(float));
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++) {
            size_t qoff = (b * T * Hq + h) * D, kvoff = (b * T * Hkv + h / rep) * D;
            const float *qb = q + qoff, *dob = dout + qoff, *ob = out + qoff;
            const float *kb = k + kvoff, *vb = v + kvoff;
            float *dqb = dq + qoff, *dkb = dk + kvoff, *dvb = dv + kvoff;
            const float *lseb = lse + (b * Hq + h) * T; // (T)
            for (size_t i0 = 0; i0 < T; i0 += ATT_BQ) {
                size_t nq = T - i0 < ATT_BQ ? T - i0 : ATT_BQ;
                for (size_t i = 0; i < nq; i++) {
                    const float *restrict doi = dob + (i0 + i) * ldq; // (D)
                    const float *restrict oi = ob + (i0 + i) * ldq;   // (D)
                    double s = 0.0;
                    for (size_t d = 0; d < D; d++)
                        s += (double)doi[d] * oi[d];
                    delta[i] = (float)s;
                }
                size_t jend = i0 + nq;
                for (size_t j0 = first_key(i0, window); j0 < jend; j0 += ATT_BK) {
                    size_t nk = jend - j0 < ATT_BK ? jend - j0 : ATT_BK;
                    const float *kt = kb + j0 * ldk, *vt = vb + j0 * ldk;
                    scores(P, qb + i0 * ldq, (int)ldq, kt, (int)ldk, nq, nk, D, scale);
                    // dP (nq, nk) = dout tile (nq, D) @ V tile^T (D, nk)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk, (int)D,
                                1.0f, dob + i0 * ldq, (int)ldq, vt, (int)ldk, 0.0f, dS, ATT_BK);
                    for (size_t i = 0; i < nq; i++) {
                        float *restrict Pi = P + i * ATT_BK, *restrict dSi = dS + i * ATT_BK;
                        size_t lo = 0, hi = 0;
                        visible(i0 + i, window, j0, nk, &lo, &hi);
                        float li = lseb[i0 + i];
                        for (size_t j = 0; j < lo; j++)
                            Pi[j] = 0.0f;
                        sg_vexp(Pi + lo, Pi + lo, hi - lo, li);
                        for (size_t j = hi; j < nk; j++)
                            Pi[j] = 0.0f;
                        for (size_t j = 0; j < nk; j++)
                            dSi[j] = Pi[j] * (dSi[j] - delta[i]);
                    }
                    // dV tile (nk, D) += P^T (nk, nq) @ dout tile (nq, D)
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk, (int)D, (int)nq,
                                1.0f, P, ATT_BK, dob + i0 * ldq, (int)ldq, 1.0f, dvb + j0 * ldk,
                                (int)ldk);
                    // dK tile (nk, D) += scale dS^T (nk, nq) @ Q tile (nq, D)
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nk, (int)D, (int)nq,
                                scale, dS, ATT_BK, qb + i0 * ldq, (int)ldq, 1.0f, dkb + j0 * ldk,
                                (int)ldk);
                    // dQ tile (nq, D) += scale dS (nq, nk) @ K tile (nk, D)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nq, (int)D, (int)nk,
                                scale, dS, ATT_BK, kt, (int)ldk, 1.0f, dqb + i0 * ldq, (int)ldq);
                }
            }
        }
    free(P);
    return SG_OK;
}

/* ---- attention sinks (GPT-OSS) ---------------------------------------------- */

/* transformers' GptOssAttention (eager_attention_forward): the scaled scores
 * of a query get one more column, the head's sink logit; the softmax runs
 * over all of them and the sink's column is dropped, so the weights of the
 * keys sum to 1 - exp(sink - lse'). From the plain attention's out and lse
 * that is a rescaling: lse' = log(exp(lse) + exp(sink)), out *= exp(lse -
 * lse'). */
int sg_attention_sinks_forward(float *out, float *lse, const float *sinks, size_t B, size_t T,
                               size_t Hq, size_t D)
{
    if (!out || !lse || !sinks)
        return SG_EINVAL;
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < Hq; h++) {
            float *lseb = lse + (b * Hq + h) * T; // (T)
            const double sk = sinks[h];
            for (size_t t = 0; t < T; t++) {
                const double l = lseb[t], m = l > sk ? l : sk;
                const double l2 = m + log(exp(l - m) + exp(sk - m));
                const float r = (float)exp(l - l2);
                float *o = out + ((b * T + t) * Hq + h) * D;
                for (size_t d = 0; d < D; d++)
                    o[d] *= r;
                lseb[t] = (float)l2;
            }
        }
    return SG_OK;
}

/* d loss / d sink_h = sum over queries of P_sink (dP_sink - delta), dP_sink
 * = 0 (no value), delta = dout . out. */
int sg_attention_sinks_backward(float *dsinks, const float *dout, const float *out,
                                const float *lse, const float *sinks, size_t B, size_t T, size_t Hq,
                                size_t D)
{
    if (!dsinks || !dout || !out || !lse || !sinks)
        return SG_EINVAL;
    for (size_t h = 0; h < Hq; h++) {
        double acc = 0.0; // (b, t) order
        for (size_t b = 0; b < B; b++)
            for (size_t t = 0; t < T; t++) {
                const size_t off = ((b * T + t) * Hq + h) * D;
                double delta = 0.0;
                for (size_t d = 0; d < D; d++)
                    delta += (double)dout[off + d] * out[off + d];
                acc -= exp((double)sinks[h] - lse[(b * Hq + h) * T + t]) * delta;
            }
        dsinks[h] += (float)acc;
    }
    return SG_OK;
}
