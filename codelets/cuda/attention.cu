/* attention.cu - causal grouped-query attention with an optional sliding
 * window on the GPU, forward and backward (cuda_ops.h; the semantics of
 * sg_attention_forward / _backward in codelets/cpu/attention.c).
 *
 * What it is: FlashAttention-2's structure written with plain fp32 FMAs on
 * shared-memory tiles, 128 threads a block, no tensor cores and no warp
 * primitives (cuda_compat.h: the same code runs under the CPU emulator).
 * - Forward: one block per (query tile of BR rows, query head, batch). The
 *   Q tile stays in shared memory; the block walks the key tiles of BC keys
 *   that its queries may see (causality and the window skip the others),
 *   computes the scores S = Q K^T, keeps a running max m and sum l per
 *   query (online softmax, in base 2: Q is pre-scaled by log2(e) / sqrt(D)
 *   so exp becomes exp2), rescales its output accumulator (registers) when m
 *   grows, and adds P V. It writes out = acc / l and lse = m + log(l)
 *   (natural log, like the CPU path), both in dt.
 * - Backward: a first kernel (sg_att_dvec_kernel, attention_impl.h, shared
 *   with the cuBLAS route) computes Dvec_i = sum_d dout_i out_i (fp32) and
 *   zeroes an fp32 dq accumulator. Then one block per (key tile of BC keys,
 *   kv head, batch) keeps its K, V tile in shared memory and its dK, dV
 *   accumulators in registers, and loops over the query heads of its group
 *   (deterministic GQA sum, no atomics for dk, dv) and over the query tiles
 *   that can see its keys. For each it recomputes P = exp(S - lse),
 *   dP = dout V^T, dS = P (dP - Dvec), adds dV += P^T dout, dK += dS^T Q,
 *   and adds scale dS K into dq with fp32 atomics (so the last bits of dq
 *   may vary from run to run; dk, dv do not). A last kernel rounds dq to dt.
 * - Head dims: kernels are templated on a compile-time bound MAXD (64, 96,
 *   128, 256) so that the per-thread accumulators are fixed-size register
 *   arrays; the smallest bound >= D is used and the columns past D are zero.
 *
 * Thread layout (all kernels but the small ones): 128 threads as 8 rows x
 * 16 columns (ty, tx). A thread owns tile rows ty + 8 i and columns tx + 16 j,
 * so that a warp reads 16 consecutive floats of a V / dout / Q row (no bank
 * conflict) and two rows of K / Q / P (rows padded to an odd stride, so
 * different rows fall in different banks).
 *
 * What a faster version would change: tensor cores (mma.sync / wgmma on
 * bf16 / fp16 tiles, with fp32 accumulation), warp-level softmax reductions
 * (shuffles) instead of shared-memory ones, asynchronous copies (cp.async /
 * TMA) double-buffering the next K, V tile while the current one is used,
 * vectorised 16-byte global loads, larger tiles with more warps, and a head
 * dim of 80 without padding to 96. None of that can run under the emulator,
 * which is why this version keeps to plain loads, FMAs and __syncthreads.
 */
#include <limits.h>
#include <math.h>

#include "codelets/cuda/cuda_compat.h"
#include "codelets/cuda/attention_impl.h"

#ifdef SG_CUDA_EMU
#define ATT_UNROLL
#else
#define ATT_UNROLL _Pragma("unroll")
#endif

#define ATT_THREADS 128 /* threads per block of the tile kernels */
#define ATT_TY 8        /* thread rows */
#define ATT_TX 16       /* thread columns */
#define ATT_LOG2E SG_ATT_LOG2E
#define ATT_LN2 SG_ATT_LN2

/* Tile sizes per head-dim bound: BR queries, BC keys. Chosen so that the
 * per-thread accumulators stay at <= 64 floats and shared memory at
 * <= ~75 KiB (fwd_smem_floats / bwd_smem_floats): forward 42 / 58 / 74 /
 * 68 KiB and backward 65 / 57 / 73 / 66 KiB for MAXD 64 / 96 / 128 / 256.
 * ptxas (CUDA 13, sm_90) gives 96-128 registers a thread for the forward
 * and 128-168 for the backward, no spills: 2-3 blocks per SM. */
template <int MAXD> struct fwd_tiles;
template <> struct fwd_tiles<64> {
    enum { BR = 64, BC = 32 };
};
template <> struct fwd_tiles<96> {
    enum { BR = 64, BC = 32 };
};
template <> struct fwd_tiles<128> {
    enum { BR = 64, BC = 32 };
};
template <> struct fwd_tiles<256> {
    enum { BR = 32, BC = 16 };
};

template <int MAXD> struct bwd_tiles;
template <> struct bwd_tiles<64> {
    enum { BR = 32, BC = 64 };
};
template <> struct bwd_tiles<96> {
    enum { BR = 32, BC = 32 };
};
template <> struct bwd_tiles<128> {
    enum { BR = 32, BC = 32 };
};
template <> struct bwd_tiles<256> {
    enum { BR = 16, BC = 16 };
};

/* Shared memory of the forward, in floats: Q (BR, MAXD+1), K (BC, MAXD+1),
 * V (BC, MAXD), S/P (BR, BC+1), m, l, alpha (BR each), two reduction
 * areas (ATT_THREADS each). */
static constexpr size_t fwd_smem_floats(int maxd, int br, int bc)
{
    return (size_t)br * (maxd + 1) + (size_t)bc * (maxd + 1) + (size_t)bc * maxd +
           (size_t)br * (bc + 1) + 3 * (size_t)br + 2 * (size_t)ATT_THREADS;
}

/* Backward: K, V (BC, MAXD+1), Q, dout (BR, MAXD+1), P, dS (BR, BC+1),
 * lse, Dvec (BR each). */
static constexpr size_t bwd_smem_floats(int maxd, int br, int bc)
{
    return 2 * (size_t)bc * (maxd + 1) + 2 * (size_t)br * (maxd + 1) + 2 * (size_t)br * (bc + 1) +
           2 * (size_t)br;
}

/* ---- forward ---------------------------------------------------------------- */

/* The steps of att_fwd_kernel, each run by every thread of the block (the
 * ones with __syncthreads() too), inlined into it. Thread (ty, tx) holds
 * rows ty + ATT_TY i and columns tx + ATT_TX j of its tiles. */

/* Ss (BR, BC + 1) = Qs Ks^T of query tile i0 (nq rows) and key tile j0 (nk
 * keys), -inf where a query does not see a key. */
template <int MAXD, int BR, int BC>
__device__ __forceinline__ void att_fwd_scores(float *Ss, const float *Qs, const float *Ks, int ty,
                                               int tx, int D, int nq, int nk, int i0, int j0,
                                               int window)
{
    constexpr int LD = MAXD + 1, LS = BC + 1;
    constexpr int RM = BR / ATT_TY, CN = BC / ATT_TX;
    float s[RM][CN];
    ATT_UNROLL
    for (int i = 0; i < RM; i++)
        ATT_UNROLL
    for (int j = 0; j < CN; j++)
        s[i][j] = 0.0f;
    for (int d = 0; d < D; d++) {
        float qv[RM], kv[CN];
        ATT_UNROLL
        for (int i = 0; i < RM; i++)
            qv[i] = Qs[(ty + ATT_TY * i) * LD + d];
        ATT_UNROLL
        for (int j = 0; j < CN; j++)
            kv[j] = Ks[(tx + ATT_TX * j) * LD + d];
        ATT_UNROLL
        for (int i = 0; i < RM; i++)
            ATT_UNROLL
        for (int j = 0; j < CN; j++)
            s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
    }
    ATT_UNROLL
    for (int i = 0; i < RM; i++)
        ATT_UNROLL
    for (int j = 0; j < CN; j++) {
        const int r = ty + ATT_TY * i, c = tx + ATT_TX * j;
        const bool vis = r < nq && c < nk && sg_att_visible(i0 + r, j0 + c, window);
        Ss[r * LS + c] = vis ? s[i][j] : -INFINITY;
    }
}

/* Online softmax of the key tile, ATT_THREADS / BR threads per row: the
 * rows' new maxima, P = 2^(S - max) in place of S, the running sums l_s and
 * maxima m_s updated and each row's rescale factor of the output in a_s.
 * red, red2: the partial maxima and sums (ATT_THREADS each). */
template <int BR, int BC>
__device__ __forceinline__ void att_fwd_softmax(float *Ss, float *m_s, float *l_s, float *a_s,
                                                float *red, float *red2, int tid)
{
    constexpr int LS = BC + 1, TPR = ATT_THREADS / BR;
    const int sr = tid / TPR, sp = tid % TPR; // softmax: row and part of it
    float mx = -INFINITY;
    for (int c = sp; c < BC; c += TPR)
        mx = fmaxf(mx, Ss[sr * LS + c]);
    red[tid] = mx;
    __syncthreads();
    const float mold = m_s[sr];
    float mnew = mold;
    for (int p = 0; p < TPR; p++)
        mnew = fmaxf(mnew, red[sr * TPR + p]);
    float sum = 0.0f;
    for (int c = sp; c < BC; c += TPR) {
        // a row with nothing visible yet (mnew = -inf) gets P = 0, not NaN
        const float p = mnew == -INFINITY ? 0.0f : exp2f(Ss[sr * LS + c] - mnew);
        Ss[sr * LS + c] = p;
        sum += p;
    }
    red2[tid] = sum;
    __syncthreads(); // every thread has read m_s[sr] before it changes
    if (sp == 0) {
        float tot = 0.0f;
        for (int p = 0; p < TPR; p++)
            tot += red2[sr * TPR + p];
        const float alpha = mnew == -INFINITY ? 1.0f : exp2f(mold - mnew); // 0 at first
        l_s[sr] = l_s[sr] * alpha + tot;
        m_s[sr] = mnew;
        a_s[sr] = alpha;
    }
    __syncthreads();
}

/* acc (BR, MAXD) = alpha acc + P (BR, BC) V (BC, MAXD), over the tile's nk
 * keys. */
template <int MAXD, int BR, int BC>
__device__ __forceinline__ void att_fwd_accumulate(float (&acc)[BR / ATT_TY][MAXD / ATT_TX],
                                                   const float *a_s, const float *Ss,
                                                   const float *Vs, int ty, int tx, int nk)
{
    constexpr int LS = BC + 1, RM = BR / ATT_TY, DN = MAXD / ATT_TX;
    ATT_UNROLL
    for (int i = 0; i < RM; i++) {
        const float alpha = a_s[ty + ATT_TY * i];
        ATT_UNROLL
        for (int j = 0; j < DN; j++)
            acc[i][j] *= alpha;
    }
    for (int c = 0; c < nk; c++) {
        float vv[DN];
        ATT_UNROLL
        for (int j = 0; j < DN; j++)
            vv[j] = Vs[c * MAXD + tx + ATT_TX * j];
        ATT_UNROLL
        for (int i = 0; i < RM; i++) {
            const float p = Ss[(ty + ATT_TY * i) * LS + c];
            ATT_UNROLL
            for (int j = 0; j < DN; j++)
                acc[i][j] = fmaf(p, vv[j], acc[i][j]);
        }
    }
}

/* out (B, T, Hq, D), lse (B, Hq, T); q (B, T, Hq, D), k, v (B, T, Hkv, D).
 * Grid (query tiles, Hq, B); qscale = log2(e) / sqrt(D). */
template <typename T, int MAXD, int BR, int BC>
__global__ void att_fwd_kernel(T *out, T *lse, const T *q, const T *k, const T *v, int len, int Hq,
                               int Hkv, int D, int window, float qscale)
{
    constexpr int LD = MAXD + 1, LS = BC + 1; // padded row strides
    constexpr int RM = BR / ATT_TY;           // per-thread output rows
    constexpr int DN = MAXD / ATT_TX;         // per-thread output columns
    constexpr int TPR = ATT_THREADS / BR;     // threads per row in the softmax
    static_assert(BR % ATT_TY == 0 && BC % ATT_TX == 0 && MAXD % ATT_TX == 0, "tiles");
    static_assert(TPR * BR == ATT_THREADS && BC % TPR == 0, "softmax split");

    SG_DYN_SHARED(float, sm);
    float *Qs = sm;                  // (BR, LD) pre-scaled queries
    float *Ks = Qs + BR * LD;        // (BC, LD)
    float *Vs = Ks + BC * LD;        // (BC, MAXD)
    float *Ss = Vs + BC * MAXD;      // (BR, LS) scores, then P
    float *m_s = Ss + BR * LS;       // (BR) running max (base 2)
    float *l_s = m_s + BR;           // (BR) running sum
    float *a_s = l_s + BR;           // (BR) rescale factor of this key tile
    float *red = a_s + BR;           // (ATT_THREADS) partial maxima
    float *red2 = red + ATT_THREADS; // (ATT_THREADS) partial sums

    const int tid = threadIdx.x, tx = tid % ATT_TX, ty = tid / ATT_TX;
    const int tile = gridDim.x - 1 - blockIdx.x; // the longest (last) query tiles first
    const int h = blockIdx.y, b = blockIdx.z, g = h / (Hq / Hkv);
    const int i0 = tile * BR;
    const int nq = len - i0 < BR ? len - i0 : BR;
    const size_t ldq = (size_t)Hq * D, ldk = (size_t)Hkv * D; // row strides
    const T *qb = q + ((size_t)b * len * Hq + h) * D;         // row t: qb + t * ldq
    const T *kb = k + ((size_t)b * len * Hkv + g) * D;        // row t: kb + t * ldk
    const T *vb = v + ((size_t)b * len * Hkv + g) * D;

    for (int e = tid; e < BR * MAXD; e += ATT_THREADS) {
        const int r = e / MAXD, d = e % MAXD;
        float x = 0.0f;
        if (r < nq && d < D)
            x = sg_ld(qb[(size_t)(i0 + r) * ldq + d]) * qscale;
        Qs[r * LD + d] = x;
    }
    if (tid < BR) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }

    float acc[RM][DN]; // output rows ty + 8 i, columns tx + 16 j
    ATT_UNROLL
    for (int i = 0; i < RM; i++)
        ATT_UNROLL
    for (int j = 0; j < DN; j++)
        acc[i][j] = 0.0f;

    // keys the tile's queries may see: [first key of query i0, i0 + nq)
    const int jlo = window && i0 + 1 > window ? i0 + 1 - window : 0;
    const int jend = i0 + nq;
    for (int j0 = jlo; j0 < jend; j0 += BC) {
        const int nk = jend - j0 < BC ? jend - j0 : BC;
        __syncthreads(); // the previous tile's readers of Ks, Vs, Ss are done
        for (int e = tid; e < BC * MAXD; e += ATT_THREADS) {
            const int c = e / MAXD, d = e % MAXD;
            float kx = 0.0f, vx = 0.0f; // zero padding: P is 0 there, and 0 * 0 is no NaN
            if (c < nk && d < D) {
                kx = sg_ld(kb[(size_t)(j0 + c) * ldk + d]);
                vx = sg_ld(vb[(size_t)(j0 + c) * ldk + d]);
            }
            Ks[c * LD + d] = kx;
            Vs[c * MAXD + d] = vx;
        }
        __syncthreads();

        // S (BR, BC) = Qs Ks^T, masked to -inf
        att_fwd_scores<MAXD, BR, BC>(Ss, Qs, Ks, ty, tx, D, nq, nk, i0, j0, window);
        __syncthreads();
        // online softmax, TPR threads per row: max, then P and its sum
        att_fwd_softmax<BR, BC>(Ss, m_s, l_s, a_s, red, red2, tid);
        // acc (BR, MAXD) = alpha acc + P (BR, BC) V (BC, MAXD)
        att_fwd_accumulate<MAXD, BR, BC>(acc, a_s, Ss, Vs, ty, tx, nk);
    }
    __syncthreads(); // l_s, m_s of the last tile (also when there was no tile)

    T *ob = out + ((size_t)b * len * Hq + h) * D;
    ATT_UNROLL
    for (int i = 0; i < RM; i++) {
        const int r = ty + ATT_TY * i;
        if (r >= nq)
            continue;
        const float l = l_s[r];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f; // l = 0 cannot happen: j = i is visible
        ATT_UNROLL
        for (int j = 0; j < DN; j++) {
            const int d = tx + ATT_TX * j;
            if (d < D)
                ob[(size_t)(i0 + r) * ldq + d] = sg_st<T>(acc[i][j] * inv);
        }
    }
    if (tid < nq) {
        const float l = l_s[tid];
        const float x = l > 0.0f ? (m_s[tid] + log2f(l)) * ATT_LN2 : -INFINITY;
        lse[((size_t)b * Hq + h) * len + i0 + tid] = sg_st<T>(x);
    }
}

/* ---- backward ----------------------------------------------------------------- */

/* The steps of att_bwd_kv_kernel, as the forward's: every thread runs each,
 * inlined into the kernel. */

/* For query tile i0 (nq rows) against key tile j0 (nk keys): S = Q K^T and
 * dP = dout V^T (BR, BC), then P = 2^(S scale log2(e) - lse) into Ps and
 * dS = P (dP - Dvec) into dSs (0 where a query does not see a key). */
template <int MAXD, int BR, int BC>
__device__ __forceinline__ void
att_bwd_p_ds(float *Ps, float *dSs, const float *Qs, const float *Os, const float *Ks,
             const float *Vs, const float *lse_s, const float *dvec_s, int ty, int tx, int D,
             int nq, int nk, int i0, int j0, int window, float slog2e)
{
    constexpr int LD = MAXD + 1, LP = BC + 1;
    constexpr int RM = BR / ATT_TY, CN = BC / ATT_TX;
    float s[RM][CN], dp[RM][CN];
    ATT_UNROLL
    for (int i = 0; i < RM; i++)
        ATT_UNROLL
    for (int j = 0; j < CN; j++)
        s[i][j] = dp[i][j] = 0.0f;
    for (int d = 0; d < D; d++) {
        float qv[RM], ov[RM], kv[CN], vv[CN];
        ATT_UNROLL
        for (int i = 0; i < RM; i++) {
            qv[i] = Qs[(ty + ATT_TY * i) * LD + d];
            ov[i] = Os[(ty + ATT_TY * i) * LD + d];
        }
        ATT_UNROLL
        for (int j = 0; j < CN; j++) {
            kv[j] = Ks[(tx + ATT_TX * j) * LD + d];
            vv[j] = Vs[(tx + ATT_TX * j) * LD + d];
        }
        ATT_UNROLL
        for (int i = 0; i < RM; i++)
            ATT_UNROLL
        for (int j = 0; j < CN; j++) {
            s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
            dp[i][j] = fmaf(ov[i], vv[j], dp[i][j]);
        }
    }
    ATT_UNROLL
    for (int i = 0; i < RM; i++)
        ATT_UNROLL
    for (int j = 0; j < CN; j++) {
        const int r = ty + ATT_TY * i, c = tx + ATT_TX * j;
        const bool vis = r < nq && c < nk && sg_att_visible(i0 + r, j0 + c, window);
        const float p = vis ? exp2f(s[i][j] * slog2e - lse_s[r]) : 0.0f;
        Ps[r * LP + c] = p;
        dSs[r * LP + c] = p * (dp[i][j] - dvec_s[r]);
    }
}

/* dV (BC, MAXD) += P^T dout, dK (BC, MAXD) += dS^T Q over the tile's nq
 * queries (dK's scale comes at the end). */
template <int MAXD, int BR, int BC>
__device__ __forceinline__ void
att_bwd_accumulate_kv(float (&dka)[BC / ATT_TY][MAXD / ATT_TX],
                      float (&dva)[BC / ATT_TY][MAXD / ATT_TX], const float *Os, const float *Qs,
                      const float *Ps, const float *dSs, int ty, int tx, int nq)
{
    constexpr int LD = MAXD + 1, LP = BC + 1;
    constexpr int KR = BC / ATT_TY, DN = MAXD / ATT_TX;
    for (int r = 0; r < nq; r++) {
        float ov[DN], qv[DN];
        ATT_UNROLL
        for (int j = 0; j < DN; j++) {
            ov[j] = Os[r * LD + tx + ATT_TX * j];
            qv[j] = Qs[r * LD + tx + ATT_TX * j];
        }
        ATT_UNROLL
        for (int i = 0; i < KR; i++) {
            const float p = Ps[r * LP + ty + ATT_TY * i];
            const float ds = dSs[r * LP + ty + ATT_TY * i];
            ATT_UNROLL
            for (int j = 0; j < DN; j++) {
                dva[i][j] = fmaf(p, ov[j], dva[i][j]);
                dka[i][j] = fmaf(ds, qv[j], dka[i][j]);
            }
        }
    }
}

/* The dq rows of query tile i0 (nq rows; dqb: the head's row 0, rows ldq
 * apart) += scale dS (BR, BC) K (BC, MAXD), by fp32 atomics. */
template <int MAXD, int BR, int BC>
__device__ __forceinline__ void att_bwd_add_dq(float *dqb, size_t ldq, const float *dSs,
                                               const float *Ks, int ty, int tx, int D, int nq,
                                               int nk, int i0, float scale)
{
    constexpr int LD = MAXD + 1, LP = BC + 1;
    constexpr int RM = BR / ATT_TY, DN = MAXD / ATT_TX;
    float dqa[RM][DN];
    ATT_UNROLL
    for (int i = 0; i < RM; i++)
        ATT_UNROLL
    for (int j = 0; j < DN; j++)
        dqa[i][j] = 0.0f;
    for (int c = 0; c < nk; c++) {
        float kv[DN];
        ATT_UNROLL
        for (int j = 0; j < DN; j++)
            kv[j] = Ks[c * LD + tx + ATT_TX * j];
        ATT_UNROLL
        for (int i = 0; i < RM; i++) {
            const float ds = dSs[(ty + ATT_TY * i) * LP + c];
            ATT_UNROLL
            for (int j = 0; j < DN; j++)
                dqa[i][j] = fmaf(ds, kv[j], dqa[i][j]);
        }
    }
    ATT_UNROLL
    for (int i = 0; i < RM; i++) {
        const int r = ty + ATT_TY * i;
        if (r >= nq)
            continue;
        float *dqr = dqb + (size_t)(i0 + r) * ldq; // (D)
        ATT_UNROLL
        for (int j = 0; j < DN; j++) {
            const int d = tx + ATT_TX * j;
            if (d < D)
                atomicAdd(dqr + d, dqa[i][j] * scale);
        }
    }
}

/* dk, dv (B, T, Hkv, D) of one key tile, and dq_acc (B, T, Hq, D) += its
 * part of scale dS K. Grid (key tiles, Hkv, B); scale = 1 / sqrt(D). */
template <typename T, int MAXD, int BR, int BC>
__global__ void att_bwd_kv_kernel(T *dk, T *dv, float *dq_acc, const T *dout, const T *q,
                                  const T *k, const T *v, const T *lse, const float *dvec, int len,
                                  int Hq, int Hkv, int D, int window, float scale)
{
    constexpr int LD = MAXD + 1, LP = BC + 1; // padded row strides
    constexpr int KR = BC / ATT_TY;           // dK, dV rows per thread
    constexpr int DN = MAXD / ATT_TX;         // columns per thread
    static_assert(BR % ATT_TY == 0 && BC % ATT_TX == 0 && MAXD % ATT_TX == 0, "tiles");

    SG_DYN_SHARED(float, sm);
    float *Ks = sm;               // (BC, LD)
    float *Vs = Ks + BC * LD;     // (BC, LD)
    float *Qs = Vs + BC * LD;     // (BR, LD)
    float *Os = Qs + BR * LD;     // (BR, LD) dout rows
    float *Ps = Os + BR * LD;     // (BR, LP) P
    float *dSs = Ps + BR * LP;    // (BR, LP) dS
    float *lse_s = dSs + BR * LP; // (BR) lse * log2(e)
    float *dvec_s = lse_s + BR;   // (BR)

    const int tid = threadIdx.x, tx = tid % ATT_TX, ty = tid / ATT_TX;
    const int g = blockIdx.y, b = blockIdx.z, rep = Hq / Hkv;
    const int j0 = blockIdx.x * BC;
    const int nk = len - j0 < BC ? len - j0 : BC;
    const size_t ldq = (size_t)Hq * D, ldk = (size_t)Hkv * D; // row strides
    const size_t kvoff = ((size_t)b * len * Hkv + g) * D;     // row t: + t * ldk
    const float slog2e = scale * ATT_LOG2E;

    for (int e = tid; e < BC * MAXD; e += ATT_THREADS) {
        const int c = e / MAXD, d = e % MAXD;
        float kx = 0.0f, vx = 0.0f;
        if (c < nk && d < D) {
            kx = sg_ld(k[kvoff + (size_t)(j0 + c) * ldk + d]);
            vx = sg_ld(v[kvoff + (size_t)(j0 + c) * ldk + d]);
        }
        Ks[c * LD + d] = kx;
        Vs[c * LD + d] = vx;
    }

    float dka[KR][DN], dva[KR][DN]; // key rows ty + 8 i, columns tx + 16 j
    ATT_UNROLL
    for (int i = 0; i < KR; i++)
        ATT_UNROLL
    for (int j = 0; j < DN; j++)
        dka[i][j] = dva[i][j] = 0.0f;

    // queries that see a key of the tile: [j0, last key + window) or [j0, T)
    const int iend = window && j0 + nk - 1 + window < len ? j0 + nk - 1 + window : len;
    for (int hr = 0; hr < rep; hr++) {
        const int h = g * rep + hr;
        const size_t qoff = ((size_t)b * len * Hq + h) * D; // row t: + t * ldq
        const size_t loff = ((size_t)b * Hq + h) * len;     // lse, dvec (T)
        for (int i0 = j0; i0 < iend; i0 += BR) {
            const int nq = iend - i0 < BR ? iend - i0 : BR;
            __syncthreads(); // the previous tile's readers of Qs, Os, Ps, dSs are done
            for (int e = tid; e < BR * MAXD; e += ATT_THREADS) {
                const int r = e / MAXD, d = e % MAXD;
                float qx = 0.0f, ox = 0.0f;
                if (r < nq && d < D) {
                    qx = sg_ld(q[qoff + (size_t)(i0 + r) * ldq + d]);
                    ox = sg_ld(dout[qoff + (size_t)(i0 + r) * ldq + d]);
                }
                Qs[r * LD + d] = qx;
                Os[r * LD + d] = ox;
            }
            if (tid < BR) {
                lse_s[tid] = tid < nq ? sg_ld(lse[loff + i0 + tid]) * ATT_LOG2E : 0.0f;
                dvec_s[tid] = tid < nq ? dvec[loff + i0 + tid] : 0.0f;
            }
            __syncthreads();

            // S = Q K^T and dP = dout V^T (BR, BC), then P and dS
            att_bwd_p_ds<MAXD, BR, BC>(Ps, dSs, Qs, Os, Ks, Vs, lse_s, dvec_s, ty, tx, D, nq, nk,
                                       i0, j0, window, slog2e);
            __syncthreads();
            // dV (BC, MAXD) += P^T dout, dK (BC, MAXD) += dS^T Q (scale at the end)
            att_bwd_accumulate_kv<MAXD, BR, BC>(dka, dva, Os, Qs, Ps, dSs, ty, tx, nq);
            // dq rows of this tile += scale dS (BR, BC) K (BC, MAXD), fp32 atomics
            att_bwd_add_dq<MAXD, BR, BC>(dq_acc + qoff, ldq, dSs, Ks, ty, tx, D, nq, nk, i0, scale);
        }
    }

    // every key of the tile is written (a key no query sees would get 0)
    ATT_UNROLL
    for (int i = 0; i < KR; i++) {
        const int c = ty + ATT_TY * i;
        if (c >= nk)
            continue;
        const size_t row = kvoff + (size_t)(j0 + c) * ldk;
        ATT_UNROLL
        for (int j = 0; j < DN; j++) {
            const int d = tx + ATT_TX * j;
            if (d < D) {
                dk[row + d] = sg_st<T>(dka[i][j] * scale);
                dv[row + d] = sg_st<T>(dva[i][j]);
            }
        }
    }
}

/* dq (n) = dq_acc (n) rounded to T. */
template <typename T> __global__ void att_dq_store_kernel(T *dq, const float *dq_acc, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dq[i] = sg_st<T>(dq_acc[i]);
}

/* ---- host side ---------------------------------------------------------------- */

/* Lets a kernel use more than the default 48 KiB of dynamic shared memory.
 * Set on every launch rather than once: the attribute belongs to the
 * current device, and StarPU drives several. A failure here shows up as
 * the launch's failure (sg_cu_launch_status). */
template <typename K> static void att_allow_smem(K kernel, size_t bytes)
{
#ifndef SG_CUDA_EMU
    if (bytes > 48 * 1024)
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
#else
    (void)kernel;
    (void)bytes;
#endif
}

template <typename T, int MAXD>
static void att_fwd_launch(const sg_cu *cu, T *out, T *lse, const T *q, const T *k, const T *v,
                           size_t B, size_t len, size_t Hq, size_t Hkv, size_t D, size_t window)
{
    enum { BR = fwd_tiles<MAXD>::BR, BC = fwd_tiles<MAXD>::BC };
    (void)cu; // the emulated SG_LAUNCH_SMEM drops its stream argument
    const size_t smem = fwd_smem_floats(MAXD, BR, BC) * sizeof(float);
    void (*kern)(T *, T *, const T *, const T *, const T *, int, int, int, int, int, float) =
        att_fwd_kernel<T, MAXD, BR, BC>;
    att_allow_smem(kern, smem);
    const dim3 grid((unsigned)((len + BR - 1) / BR), (unsigned)Hq, (unsigned)B);
    const float qscale = (float)(1.0 / sqrt((double)D)) * ATT_LOG2E;
    SG_LAUNCH_SMEM(kern, grid, ATT_THREADS, smem, cu->stream, out, lse, q, k, v, (int)len, (int)Hq,
                   (int)Hkv, (int)D, (int)window, qscale);
}

template <typename T, int MAXD>
static void att_bwd_launch(const sg_cu *cu, T *dk, T *dv, float *dq_acc, const T *dout, const T *q,
                           const T *k, const T *v, const T *lse, const float *dvec, size_t B,
                           size_t len, size_t Hq, size_t Hkv, size_t D, size_t window)
{
    enum { BR = bwd_tiles<MAXD>::BR, BC = bwd_tiles<MAXD>::BC };
    (void)cu; // the emulated SG_LAUNCH_SMEM drops its stream argument
    const size_t smem = bwd_smem_floats(MAXD, BR, BC) * sizeof(float);
    void (*kern)(T *, T *, float *, const T *, const T *, const T *, const T *, const T *,
                 const float *, int, int, int, int, int, float) =
        att_bwd_kv_kernel<T, MAXD, BR, BC>;
    att_allow_smem(kern, smem);
    const dim3 grid((unsigned)((len + BC - 1) / BC), (unsigned)Hkv, (unsigned)B);
    const float scale = (float)(1.0 / sqrt((double)D));
    SG_LAUNCH_SMEM(kern, grid, ATT_THREADS, smem, cu->stream, dk, dv, dq_acc, dout, q, k, v, lse,
                   dvec, (int)len, (int)Hq, (int)Hkv, (int)D, (int)window, scale);
}

template <typename T>
static void att_forward_t(const sg_cu *cu, void *out, void *lse, const void *q, const void *k,
                          const void *v, size_t B, size_t T_, size_t Hq, size_t Hkv, size_t D,
                          size_t window)
{
    T *o = (T *)out, *l = (T *)lse;
    const T *qq = (const T *)q, *kk = (const T *)k, *vv = (const T *)v;
    if (D <= 64)
        att_fwd_launch<T, 64>(cu, o, l, qq, kk, vv, B, T_, Hq, Hkv, D, window);
    else if (D <= 96)
        att_fwd_launch<T, 96>(cu, o, l, qq, kk, vv, B, T_, Hq, Hkv, D, window);
    else if (D <= 128)
        att_fwd_launch<T, 128>(cu, o, l, qq, kk, vv, B, T_, Hq, Hkv, D, window);
    else
        att_fwd_launch<T, 256>(cu, o, l, qq, kk, vv, B, T_, Hq, Hkv, D, window);
}

template <typename T>
static void att_backward_t(const sg_cu *cu, void *dq, void *dk, void *dv, const void *dout,
                           const void *q, const void *k, const void *v, const void *out,
                           const void *lse, size_t B, size_t T_, size_t Hq, size_t Hkv, size_t D,
                           size_t window, float *work)
{
    float *dvec = work;                 // (B, Hq, T)
    float *dq_acc = work + B * Hq * T_; // (B, T, Hq, D)
    const size_t rows = B * T_ * Hq;
    const unsigned pre_blocks = sg_cu_blocks(rows, SG_ATT_PRE_THREADS / SG_ATT_PRE_TPR);
    void (*pre)(float *, float *, const T *, const T *, size_t, int, int, int, int, int) =
        sg_att_dvec_kernel<T>;
    SG_LAUNCH(pre, pre_blocks, SG_ATT_PRE_THREADS, cu->stream, dvec, dq_acc, (const T *)dout,
              (const T *)out, rows, (int)T_, (int)Hq, (int)Hkv, (int)D, 0);

    T *dkt = (T *)dk, *dvt = (T *)dv;
    const T *dot = (const T *)dout, *qq = (const T *)q, *kk = (const T *)k, *vv = (const T *)v;
    const T *ll = (const T *)lse;
    if (D <= 64)
        att_bwd_launch<T, 64>(cu, dkt, dvt, dq_acc, dot, qq, kk, vv, ll, dvec, B, T_, Hq, Hkv, D,
                              window);
    else if (D <= 96)
        att_bwd_launch<T, 96>(cu, dkt, dvt, dq_acc, dot, qq, kk, vv, ll, dvec, B, T_, Hq, Hkv, D,
                              window);
    else if (D <= 128)
        att_bwd_launch<T, 128>(cu, dkt, dvt, dq_acc, dot, qq, kk, vv, ll, dvec, B, T_, Hq, Hkv, D,
                               window);
    else
        att_bwd_launch<T, 256>(cu, dkt, dvt, dq_acc, dot, qq, kk, vv, ll, dvec, B, T_, Hq, Hkv, D,
                               window);

    const size_t n = rows * D;
    void (*store)(T *, const float *, size_t) = att_dq_store_kernel<T>;
    SG_LAUNCH(store, sg_cu_blocks(n, 256), 256, cu->stream, (T *)dq, (const float *)dq_acc, n);
}

extern "C" int sg_cu_attention_fp32_forward(const sg_cu *cu, void *out, void *lse, const void *q,
                                            const void *k, const void *v, sg_dtype dt, size_t B,
                                            size_t T, size_t Hq, size_t Hkv, size_t D,
                                            size_t window)
{
    if (sg_att_check(dt, B, T, Hq, Hkv, D, &window))
        return SG_EINVAL;
    if (B == 0 || T == 0) // empty, as on the CPU
        return SG_OK;
    SG_CU_DISPATCH(dt, S, att_forward_t<S>(cu, out, lse, q, k, v, B, T, Hq, Hkv, D, window));
    return sg_cu_launch_status();
}

extern "C" int sg_cu_attention_fp32_backward(const sg_cu *cu, void *dq, void *dk, void *dv,
                                             const void *dout, const void *q, const void *k,
                                             const void *v, const void *out, const void *lse,
                                             sg_dtype dt, size_t B, size_t T, size_t Hq, size_t Hkv,
                                             size_t D, size_t window, float *work)
{
    if (sg_att_check(dt, B, T, Hq, Hkv, D, &window))
        return SG_EINVAL;
    if (B == 0 || T == 0)
        return SG_OK;
    if (!work)
        return SG_EINVAL;
    SG_CU_DISPATCH(
        dt, S,
        att_backward_t<S>(cu, dq, dk, dv, dout, q, k, v, out, lse, B, T, Hq, Hkv, D, window, work));
    return sg_cu_launch_status();
}

/* Dvec (B, Hq, T) then the fp32 dq accumulator (B, T, Hq, D). */
extern "C" size_t sg_cu_attention_backward_work_floats(size_t B, size_t T, size_t Hq, size_t Hkv,
                                                       size_t D)
{
    (void)Hkv;
    return B * Hq * T + B * T * Hq * D;
}

/* ---- attention sinks (GPT-OSS) ------------------------------------------------- */

/* One thread per (b, t, h) row: the sink column joins the softmax, so lse'
 * = log(exp(lse) + exp(sink)) and the row's weights shrink by exp(lse -
 * lse') (as sg_attention_sinks_forward, in double). */
template <typename T>
__global__ void k_sinks_fwd(T *out, T *lse, const T *sinks, size_t B, size_t T_, size_t Hq,
                            size_t D)
{
    SG_GRID_STRIDE(i, B * T_ * Hq)
    {
        const size_t h = i % Hq, t = i / Hq % T_, b = i / (Hq * T_);
        T *lp = lse + (b * Hq + h) * T_ + t;
        const double l = sg_ld(*lp), sk = sg_ld(sinks[h]), m = l > sk ? l : sk;
        const double l2 = m + log(exp(l - m) + exp(sk - m));
        const float r = (float)exp(l - l2);
        T *o = out + i * D;
        for (size_t d = 0; d < D; d++)
            o[d] = sg_st<T>(sg_ld(o[d]) * r);
        *lp = sg_st<T>((float)l2);
    }
}

/* One block per head: dsinks[h] += -sum over (b, t) of exp(sink - lse')
 * (dout . out); the threads take rows in turn, then a tree sum in double. */
template <typename T>
__global__ void k_sinks_bwd(T *dsinks, const T *dout, const T *out, const T *lse, const T *sinks,
                            size_t B, size_t T_, size_t Hq, size_t D)
{
    __shared__ double red[ATT_THREADS];
    const size_t h = blockIdx.x;
    const double sk = sg_ld(sinks[h]);
    double acc = 0.0;
    for (size_t r = threadIdx.x; r < B * T_; r += blockDim.x) {
        const size_t b = r / T_, t = r % T_;
        const size_t off = ((b * T_ + t) * Hq + h) * D;
        double delta = 0.0;
        for (size_t d = 0; d < D; d++)
            delta += (double)sg_ld(dout[off + d]) * sg_ld(out[off + d]);
        acc -= exp(sk - (double)sg_ld(lse[(b * Hq + h) * T_ + t])) * delta;
    }
    acc = sg_block_sum_d(acc, red);
    if (threadIdx.x == 0)
        dsinks[h] = sg_st<T>(sg_ld(dsinks[h]) + (float)acc);
}

int sg_cu_attention_sinks_forward(const sg_cu *cu, void *out, void *lse, const void *sinks,
                                  sg_dtype dt, size_t B, size_t T, size_t Hq, size_t D)
{
    size_t rows;
    if (!cu || !out || !lse || !sinks || !sg_cu_mul_ok(B, T, &rows) ||
        !sg_cu_mul_ok(rows, Hq, &rows) || D == 0)
        return SG_EINVAL;
    if (rows == 0)
        return SG_OK;
    SG_CU_DISPATCH(dt, E,
                   SG_LAUNCH(k_sinks_fwd<E>, sg_cu_blocks(rows, ATT_THREADS), ATT_THREADS,
                             cu->stream, (E *)out, (E *)lse, (const E *)sinks, B, T, Hq, D));
    return sg_cu_launch_status();
}

int sg_cu_attention_sinks_backward(const sg_cu *cu, void *dsinks, const void *dout, const void *out,
                                   const void *lse, const void *sinks, sg_dtype dt, size_t B,
                                   size_t T, size_t Hq, size_t D)
{
    size_t rows;
    if (!cu || !dsinks || !dout || !out || !lse || !sinks || !sg_cu_mul_ok(B, T, &rows) ||
        !sg_cu_mul_ok(rows, Hq, &rows) || D == 0 || Hq > 65535u * 8u)
        return SG_EINVAL;
    if (rows == 0)
        return SG_OK;
    SG_CU_DISPATCH(dt, E,
                   SG_LAUNCH(k_sinks_bwd<E>, (unsigned)Hq, ATT_THREADS, cu->stream, (E *)dsinks,
                             (const E *)dout, (const E *)out, (const E *)lse, (const E *)sinks, B,
                             T, Hq, D));
    return sg_cu_launch_status();
}
