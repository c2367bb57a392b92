/* attention_blas.cu - causal grouped-query attention with an optional
 * sliding window through cuBLAS batched products, so that the O(T^2 D)
 * work runs on tensor cores (bf16 / f16 inputs, fp32 accumulation);
 * forward and backward, the semantics of sg_attention_forward / _backward
 * (codelets/cpu/attention.c) and of the fp32 route in attention.cu.
 *
 * Layout. q (B, T, Hq, D) is (B, T, Hkv, G, D) with G = Hq / Hkv query
 * heads per kv head. It is repacked to (B, Hkv, T, G, D): for one (b, g),
 * the G heads of positions i0..i1-1 are then nq G consecutive rows of D, so
 * one GEMM per (b, g) covers a query tile of every head of the group, and
 * the group's sum in dK, dV (GQA) is that GEMM's inner dimension. k, v
 * (B, T, Hkv, D) are repacked to (B, Hkv, T, D). The (b, g) pairs are the
 * batch of cublasGemmStridedBatchedEx: every operand has one stride.
 *
 * Forward, per query tile [i0, i1) (the keys it may see are [jlo, i1)):
 *   S (Mq = nq G, nk) = Q K^T                  fp32, one GEMM
 *   P = exp(S / sqrt(D) - lse), lse per row    one kernel, a block per row
 *   O (Mq, D) = P V                            dt, one GEMM
 * so the softmax is exact over the tile's whole key range (no online
 * rescaling); masked entries of P are 0. Per tile only that range is
 * computed: a causal run does T^2 / 2 plus half a tile per tile.
 * Backward, per query tile, with Dvec = rowsum(dout * out) first:
 *   S = Q K^T, dP = dout V^T                   fp32, two GEMMs
 *   P, dS = P (dP - Dvec) / sqrt(D)            dt, one fused kernel
 *   dV += P^T dout, dK += dS^T Q               fp32 accumulators, beta 1
 *   dQ = dS K                                  dt, complete per tile
 *
 * Numerics: the GEMMs accumulate in fp32 (CUBLAS_COMPUTE_32F); P and dS
 * are rounded to dt once before their products (as FlashAttention-2 does
 * with bf16), the scores and dP stay fp32 (rounding a score of magnitude s
 * would change exp(s) by s 2^-9 in bf16). For fp32 storage the route is
 * fp32 throughout (no TF32). lse is computed in fp32 and stored in dt.
 *
 * Memory: the (Mq, nk) tiles of S, dP, P and dS for all (b, g) are the
 * scratch that `tile_rows` or `scratch_bytes` bound; they are materialised
 * in global memory, so this route moves about 12 (forward) and 24
 * (backward) bytes per visible score in bf16: it is bound by memory
 * bandwidth well before the tensor cores, unlike a fused kernel.
 */
#include <math.h>

#include "codelets/cuda/cuda_compat.h"
#include "codelets/cuda/attention_impl.h"

#define ABL_THREADS 256 /* threads of the row kernels */
#define ABL_MIN_ROWS 16 /* smallest query tile */
#define ABL_ALIGN 256   /* bytes: each scratch buffer starts on this */

/* ---- repacking --------------------------------------------------------------- */

/* dst <- src between (B, T, H, E) ("row-major by position") and (B, H, T, E)
 * ("head-major"): to_head_major says which way. One thread per element of
 * dst, so writes are coalesced and reads come in runs of E. */
template <typename TD, typename TS>
__global__ void abl_repack_kernel(TD *dst, const TS *src, size_t B, size_t T, size_t H, size_t E,
                                  int to_head_major)
{
    SG_GRID_STRIDE(i, B * T * H * E)
    {
        const size_t e = i % E, r = i / E;
        size_t b, t, h; // of element i of dst
        if (to_head_major) {
            t = r % T, h = r / T % H, b = r / T / H;
        } else {
            h = r % H, t = r / H % T, b = r / H / T;
        }
        const size_t s =
            to_head_major ? ((b * T + t) * H + h) * E + e : ((b * H + h) * T + t) * E + e;
        dst[i] = sg_st<TD>(sg_ld(src[s]));
    }
}

template <typename TD, typename TS>
static void abl_repack(const sg_cu *cu, TD *dst, const TS *src, size_t B, size_t T, size_t H,
                       size_t E, int to_head_major)
{
    (void)cu; // the emulated SG_LAUNCH drops its stream argument
    void (*kern)(TD *, const TS *, size_t, size_t, size_t, size_t, int) = abl_repack_kernel<TD, TS>;
    SG_LAUNCH(kern, sg_cu_blocks(B * T * H * E, 256), 256, cu->stream, dst, src, B, T, H, E,
              to_head_major);
}

/* ---- the row kernels --------------------------------------------------------- */

/* Where a row of a score tile is: the tile holds, for each of the batch's
 * (b, g), Mq = nq G rows (position i0 + rr / G, head g G + rr % G) of nk
 * keys from jlo, ld apart. jlo and ld are multiples of 8 (16 bytes of bf16)
 * so that cuBLAS can take its aligned tensor-core kernels; the keys before
 * the first visible one are masked like the others. */
struct abl_tile {
    int T, Hq, Hkv, G, i0, nq, jlo, nk, ld, window;
};

struct abl_row {
    size_t bg;  // b Hkv + g
    int t, h;   // position and query head
    int c0, c1; // visible keys: columns [c0, c1) of the row
};

__device__ static inline abl_row abl_row_of(const abl_tile &tl, size_t row)
{
    const size_t Mq = (size_t)tl.nq * tl.G;
    abl_row r;
    r.bg = row / Mq;
    const int rr = (int)(row % Mq);
    r.t = tl.i0 + rr / tl.G;
    r.h = (int)(r.bg % tl.Hkv) * tl.G + rr % tl.G;
    const int first = tl.window && r.t + 1 > tl.window ? r.t + 1 - tl.window : 0;
    r.c0 = first - tl.jlo; // >= 0: jlo is at most the first key of the tile's first query
    r.c1 = r.t + 1 - tl.jlo;
    return r;
}

/* Forward softmax: one block per row of S (fp32, nk of ld), qscale =
 * log2(e) / sqrt(D). Writes P (dt, likewise; 0 where masked) normalised,
 * and lse (B, Hq, T) in dt (natural log). Two passes over the row: an
 * online max and sum per thread, then P. */
template <typename T>
__global__ void abl_softmax_fwd_kernel(T *P, T *lse, const float *S, abl_tile tl, size_t rows,
                                       float qscale)
{
    __shared__ float red[ABL_THREADS];
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const abl_row r = abl_row_of(tl, row);
        const float *s = S + row * tl.ld;
        float m = -INFINITY, l = 0.0f; // base 2
        for (int c = r.c0 + (int)threadIdx.x; c < r.c1; c += blockDim.x) {
            const float x = s[c] * qscale;
            if (x > m) {
                l = l * exp2f(m - x) + 1.0f;
                m = x;
            } else {
                l += exp2f(x - m);
            }
        }
        const float M = sg_block_max(m, red); // finite: key t is always visible
        const float L = sg_block_sum(m == -INFINITY ? 0.0f : l * exp2f(m - M), red);
        const float lse2 = M + log2f(L);
        T *p = P + row * tl.ld;
        for (int c = threadIdx.x; c < tl.nk; c += blockDim.x)
            p[c] = sg_st<T>(c >= r.c0 && c < r.c1 ? exp2f(s[c] * qscale - lse2) : 0.0f);
        if (threadIdx.x == 0)
            lse[((r.bg / tl.Hkv) * tl.Hq + r.h) * (size_t)tl.T + r.t] = sg_st<T>(lse2 * SG_ATT_LN2);
    }
}

/* Backward, fused: from S and dP (fp32) of a row, P = exp(S / sqrt(D) -
 * lse) and dS = P (dP - Dvec) / sqrt(D), both in dt (0 where masked).
 * dvec is in the packed row order (B, Hkv, T, G). One block per row. */
template <typename T>
__global__ void abl_softmax_bwd_kernel(T *P, T *dS, const float *S, const float *dP, const T *lse,
                                       const float *dvec, abl_tile tl, size_t rows, float qscale,
                                       float scale)
{
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const abl_row r = abl_row_of(tl, row);
        const float l2 =
            sg_ld(lse[((r.bg / tl.Hkv) * tl.Hq + r.h) * (size_t)tl.T + r.t]) * SG_ATT_LOG2E;
        const size_t Mq = (size_t)tl.nq * tl.G;
        const float dv = dvec[(r.bg * tl.T + tl.i0) * tl.G + row % Mq];
        const size_t off = row * tl.ld;
        for (int c = threadIdx.x; c < tl.nk; c += blockDim.x) {
            const bool vis = c >= r.c0 && c < r.c1;
            const float p = vis ? exp2f(S[off + c] * qscale - l2) : 0.0f;
            P[off + c] = sg_st<T>(p);
            dS[off + c] = sg_st<T>(vis ? p * (dP[off + c] - dv) * scale : 0.0f);
        }
    }
}

/* ---- cuBLAS ------------------------------------------------------------------ */

/* One operand of a strided batched product: pointer, type, leading
 * dimension (elements) and the stride between the batch's matrices. */
struct abl_mat {
    const void *p;
    cudaDataType t;
    int ld;
    long long stride;
};

/* C = alpha op(A) op(B) + beta C for each of `batch` (b, g), column-major,
 * fp32 accumulation. */
static int abl_gemm(const sg_cu *cu, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, abl_mat A, abl_mat B, float beta, abl_mat C, int batch)
{
    const float alpha = 1.0f;
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        (cublasHandle_t)cu->blas, ta, tb, m, n, k, &alpha, A.p, A.t, A.ld, A.stride, B.p, B.t, B.ld,
        B.stride, &beta, (void *)C.p, C.t, C.ld, C.stride, batch, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? SG_OK : SG_EIO;
}

/* ---- sizes and scratch ---------------------------------------------------------- */

/* The row length (ld) of a tile of `rows` queries at most: the keys it
 * may see, 7 more for jlo rounded down to 8, rounded up to 8. */
static size_t abl_keys(size_t rows, size_t T, size_t window)
{
    const size_t n = window && rows + window + 6 < T ? rows + window + 6 : T;
    return (n + 7) / 8 * 8;
}

/* Bytes per score of the tile buffers: S (fp32) and P (dt) forward; S, dP
 * (fp32), P, dS (dt) backward. */
static size_t abl_score_bytes(int backward, sg_dtype dt)
{
    const size_t es = sg_dtype_size(dt);
    return backward ? 8 + 2 * es : 4 + es;
}

extern "C" size_t sg_cu_attention_blas_tile_rows(size_t tile_rows, size_t scratch_bytes,
                                                 int backward, sg_dtype dt, size_t B, size_t T,
                                                 size_t Hq, size_t Hkv, size_t window)
{
    if (sg_att_check(dt, B, T, Hq, Hkv, 1, &window) || B == 0 || T == 0)
        return 0;
    if (tile_rows)
        return tile_rows < T ? tile_rows : T;
    // the most rows, a multiple of ABL_MIN_ROWS (or T), whose tiles fit: binary search
    const size_t per = B * Hq * abl_score_bytes(backward, dt);
    size_t lo = 1, hi = (T + ABL_MIN_ROWS - 1) / ABL_MIN_ROWS; // in units of ABL_MIN_ROWS
    while (lo < hi) {
        const size_t mid = (lo + hi + 1) / 2, rows = mid * ABL_MIN_ROWS;
        const size_t r = rows < T ? rows : T;
        if (r * abl_keys(r, T, window) * per <= scratch_bytes)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo * ABL_MIN_ROWS < T ? lo * ABL_MIN_ROWS : T;
}

/* Carves consecutive aligned buffers out of one allocation: a first pass
 * with base NULL counts the bytes. */
struct abl_arena {
    char *base;
    size_t used;
    void *take(size_t bytes)
    {
        void *p = base ? base + used : NULL;
        used += (bytes + ABL_ALIGN - 1) / ABL_ALIGN * ABL_ALIGN;
        return p;
    }
};

/* What both directions share: sizes, the packed inputs and the tile loop's
 * fixed values. */
struct abl_plan {
    size_t B, T, Hq, Hkv, G, D, window, rows, keys;
    int batch;
    cudaDataType ty;
    long long sq, skv; // strides of one (b, g) in packed q and k / v (elements)
    size_t tile_elems; // of the largest score tile, all (b, g) together
};

static int abl_plan_init(abl_plan *p, size_t tile_rows, size_t scratch_bytes, int backward,
                         sg_dtype dt, size_t B, size_t T, size_t Hq, size_t Hkv, size_t D,
                         size_t window)
{
    if (sg_att_check(dt, B, T, Hq, Hkv, D, &window))
        return SG_EINVAL;
    p->B = B, p->T = T, p->Hq = Hq, p->Hkv = Hkv, p->G = Hq / Hkv, p->D = D, p->window = window;
    p->rows = sg_cu_attention_blas_tile_rows(tile_rows, scratch_bytes, backward, dt, B, T, Hq, Hkv,
                                             window);
    p->keys = abl_keys(p->rows, T, window);
    // cuBLAS takes ints for sizes and leading dimensions
    if (B * Hkv > INT_MAX || p->rows * p->G > INT_MAX || p->keys > INT_MAX)
        return SG_EINVAL;
    p->batch = (int)(B * Hkv);
    p->ty = sg_cu_blas_type(dt);
    p->sq = (long long)(T * p->G * D);
    p->skv = (long long)(T * D);
    p->tile_elems = (size_t)p->batch * p->rows * p->G * p->keys;
    return SG_OK;
}

/* The tile of queries [i0, i0 + rows) and its keys. */
static abl_tile abl_tile_at(const abl_plan *p, size_t i0)
{
    abl_tile tl;
    const size_t i1 = i0 + p->rows < p->T ? i0 + p->rows : p->T;
    const size_t first = p->window && i0 + 1 > p->window ? i0 + 1 - p->window : 0;
    const size_t jlo = first / 8 * 8;
    tl.T = (int)p->T, tl.Hq = (int)p->Hq, tl.Hkv = (int)p->Hkv, tl.G = (int)p->G;
    tl.i0 = (int)i0, tl.nq = (int)(i1 - i0), tl.jlo = (int)jlo, tl.nk = (int)(i1 - jlo);
    tl.ld = (tl.nk + 7) / 8 * 8;
    tl.window = (int)p->window;
    return tl;
}

/* Elements between two (b, g) in a score tile: Mq rows of ld, so that the
 * row kernels see the rows of all (b, g) one after the other. */
static long long abl_tile_stride(const abl_tile &tl)
{
    return (long long)tl.nq * tl.G * tl.ld;
}

/* A score tile (S, dP: fp32; P, dS: dt) as a cuBLAS operand. */
static abl_mat abl_tile_mat(const abl_tile &tl, const void *p, cudaDataType t)
{
    return abl_mat{p, t, tl.ld, abl_tile_stride(tl)};
}

/* S' (nk, Mq) = K'^T Q' per (b, g): S (Mq, nk) = Q K^T row-major. X is a
 * packed q-shaped operand (q or dout), Y a packed k-shaped one (k or v). */
static int abl_scores(const sg_cu *cu, const abl_plan *p, const abl_tile &tl, float *S,
                      const void *X, const void *Y)
{
    const size_t es = p->ty == CUDA_R_32F ? 4 : 2;
    const int Mq = tl.nq * tl.G, D = (int)p->D;
    abl_mat A = {(const char *)Y + (size_t)tl.jlo * p->D * es, p->ty, D, p->skv};
    abl_mat Bm = {(const char *)X + (size_t)tl.i0 * p->G * p->D * es, p->ty, D, p->sq};
    abl_mat C = abl_tile_mat(tl, S, CUDA_R_32F);
    return abl_gemm(cu, CUBLAS_OP_T, CUBLAS_OP_N, tl.nk, Mq, D, A, Bm, 0.0f, C, p->batch);
}

/* ---- forward -------------------------------------------------------------------- */

/* The forward's buffers in one allocation (abl_arena). */
template <typename T> struct abl_fwd_bufs {
    T *Qp, *Op, *Kp, *Vp, *P;
    float *S;
};

template <typename T>
static void abl_fwd_carve(abl_arena *ar, const abl_plan *p, abl_fwd_bufs<T> *b)
{
    const size_t nq = p->B * p->T * p->Hq * p->D, nk = p->B * p->T * p->Hkv * p->D;
    const size_t ntile = p->tile_elems;
    b->Qp = (T *)ar->take(nq * sizeof(T));
    b->Op = (T *)ar->take(nq * sizeof(T));
    b->Kp = (T *)ar->take(nk * sizeof(T));
    b->Vp = (T *)ar->take(nk * sizeof(T));
    b->S = (float *)ar->take(ntile * sizeof(float));
    b->P = (T *)ar->take(ntile * sizeof(T));
}

/* One query tile of the forward (see the top of the file). */
template <typename T>
static int abl_fwd_tile(const sg_cu *cu, const abl_plan *p, const abl_fwd_bufs<T> &b,
                        const abl_tile &tl, T *lse)
{
    const int D = (int)p->D, Mq = tl.nq * tl.G;
    int rc;
    if ((rc = abl_scores(cu, p, tl, b.S, b.Qp, b.Kp)))
        return rc;
    const size_t rows = (size_t)p->batch * Mq;
    const float qscale = (float)(1.0 / sqrt((double)D)) * SG_ATT_LOG2E;
    void (*sm)(T *, T *, const float *, abl_tile, size_t, float) = abl_softmax_fwd_kernel<T>;
    SG_LAUNCH(sm, sg_cu_row_blocks(rows), ABL_THREADS, cu->stream, b.P, lse, b.S, tl, rows, qscale);
    if ((rc = sg_cu_launch_status()))
        return rc;
    // O' (D, Mq) = V' (D, nk) P' (nk, Mq)
    const abl_mat V = {b.Vp + (size_t)tl.jlo * D, p->ty, D, p->skv};
    const abl_mat P = abl_tile_mat(tl, b.P, p->ty);
    const abl_mat O = {b.Op + (size_t)tl.i0 * p->G * D, p->ty, D, p->sq};
    return abl_gemm(cu, CUBLAS_OP_N, CUBLAS_OP_N, D, Mq, tl.nk, V, P, 0.0f, O, p->batch);
}

template <typename T>
static int abl_forward_t(const sg_cu *cu, const abl_plan *p, T *out, T *lse, const T *q, const T *k,
                         const T *v)
{
    const size_t B = p->B, Tn = p->T, D = p->D;
    abl_arena ar = {NULL, 0};
    abl_fwd_bufs<T> b;
    abl_fwd_carve(&ar, p, &b); // counts
    if (!(ar.base = (char *)sg_cu_malloc_async(cu, ar.used)))
        return SG_ENOMEM;
    ar.used = 0;
    abl_fwd_carve(&ar, p, &b);

    abl_repack(cu, b.Qp, q, B, Tn, p->Hkv, p->G * D, 1);
    abl_repack(cu, b.Kp, k, B, Tn, p->Hkv, D, 1);
    abl_repack(cu, b.Vp, v, B, Tn, p->Hkv, D, 1);
    int rc = sg_cu_launch_status();
    for (size_t i0 = 0; !rc && i0 < Tn; i0 += p->rows)
        rc = abl_fwd_tile<T>(cu, p, b, abl_tile_at(p, i0), lse);
    if (!rc) {
        abl_repack(cu, out, b.Op, B, Tn, p->Hkv, p->G * D, 0);
        rc = sg_cu_launch_status();
    }
    sg_cu_free_async(cu, ar.base);
    return rc;
}

extern "C" int sg_cu_attention_blas_forward(const sg_cu *cu, size_t tile_rows, size_t scratch_bytes,
                                            void *out, void *lse, const void *q, const void *k,
                                            const void *v, sg_dtype dt, size_t B, size_t T,
                                            size_t Hq, size_t Hkv, size_t D, size_t window)
{
    abl_plan p;
    if (!cu || abl_plan_init(&p, tile_rows, scratch_bytes, 0, dt, B, T, Hq, Hkv, D, window))
        return SG_EINVAL;
    if (B == 0 || T == 0)
        return SG_OK;
    if (!out || !lse || !q || !k || !v)
        return SG_EINVAL;
    int rc = SG_EINVAL;
    SG_CU_DISPATCH(dt, E,
                   rc = abl_forward_t<E>(cu, &p, (E *)out, (E *)lse, (const E *)q, (const E *)k,
                                         (const E *)v));
    return rc;
}

/* ---- backward ------------------------------------------------------------------- */

/* The backward's buffers in one allocation (abl_arena). */
template <typename T> struct abl_bwd_bufs {
    T *Qp, *dOp, *dQp, *Kp, *Vp, *P, *dS;
    float *dvec, *dK, *dV, *S, *dP;
};

template <typename T>
static void abl_bwd_carve(abl_arena *ar, const abl_plan *p, abl_bwd_bufs<T> *b)
{
    const size_t nq = p->B * p->T * p->Hq * p->D, nk = p->B * p->T * p->Hkv * p->D;
    const size_t ntile = p->tile_elems;
    b->Qp = (T *)ar->take(nq * sizeof(T));
    b->dOp = (T *)ar->take(nq * sizeof(T));
    b->dQp = (T *)ar->take(nq * sizeof(T));
    b->Kp = (T *)ar->take(nk * sizeof(T));
    b->Vp = (T *)ar->take(nk * sizeof(T));
    b->dvec = (float *)ar->take(p->B * p->T * p->Hq * sizeof(float));
    b->dK = (float *)ar->take(nk * sizeof(float));
    b->dV = (float *)ar->take(nk * sizeof(float));
    b->S = (float *)ar->take(ntile * sizeof(float));
    b->dP = (float *)ar->take(ntile * sizeof(float));
    b->P = (T *)ar->take(ntile * sizeof(T));
    b->dS = (T *)ar->take(ntile * sizeof(T));
}

/* One query tile of the backward (see the top of the file). */
template <typename T>
static int abl_bwd_tile(const sg_cu *cu, const abl_plan *p, const abl_bwd_bufs<T> &b,
                        const abl_tile &tl, const T *lse)
{
    const int D = (int)p->D, Mq = tl.nq * tl.G;
    int rc;
    if ((rc = abl_scores(cu, p, tl, b.S, b.Qp, b.Kp)) ||
        (rc = abl_scores(cu, p, tl, b.dP, b.dOp, b.Vp)))
        return rc;
    const size_t rows = (size_t)p->batch * Mq;
    const float scale = (float)(1.0 / sqrt((double)D)), qscale = scale * SG_ATT_LOG2E;
    void (*sm)(T *, T *, const float *, const float *, const T *, const float *, abl_tile, size_t,
               float, float) = abl_softmax_bwd_kernel<T>;
    SG_LAUNCH(sm, sg_cu_row_blocks(rows), ABL_THREADS, cu->stream, b.P, b.dS, b.S, b.dP, lse,
              b.dvec, tl, rows, qscale, scale);
    if ((rc = sg_cu_launch_status()))
        return rc;
    const size_t qoff = (size_t)tl.i0 * p->G * D, koff = (size_t)tl.jlo * D;
    const abl_mat P = abl_tile_mat(tl, b.P, p->ty), dS = abl_tile_mat(tl, b.dS, p->ty);
    const abl_mat dO = {b.dOp + qoff, p->ty, D, p->sq}, Q = {b.Qp + qoff, p->ty, D, p->sq};
    const abl_mat dV = {b.dV + koff, CUDA_R_32F, D, p->skv};
    const abl_mat dK = {b.dK + koff, CUDA_R_32F, D, p->skv};
    const abl_mat K = {b.Kp + koff, p->ty, D, p->skv};
    const abl_mat dQ = {b.dQp + qoff, p->ty, D, p->sq};
    // dV' (D, nk) += dO' (D, Mq) P'^T; dK' (D, nk) += Q' (D, Mq) dS'^T; dQ' (D, Mq) = K' dS'
    if ((rc = abl_gemm(cu, CUBLAS_OP_N, CUBLAS_OP_T, D, tl.nk, Mq, dO, P, 1.0f, dV, p->batch)) ||
        (rc = abl_gemm(cu, CUBLAS_OP_N, CUBLAS_OP_T, D, tl.nk, Mq, Q, dS, 1.0f, dK, p->batch)))
        return rc;
    return abl_gemm(cu, CUBLAS_OP_N, CUBLAS_OP_N, D, Mq, tl.nk, K, dS, 0.0f, dQ, p->batch);
}

template <typename T>
static int abl_backward_t(const sg_cu *cu, const abl_plan *p, T *dq, T *dk, T *dv, const T *dout,
                          const T *q, const T *k, const T *v, const T *out, const T *lse)
{
    const size_t B = p->B, Tn = p->T, D = p->D, nk = B * Tn * p->Hkv * D;
    abl_arena ar = {NULL, 0};
    abl_bwd_bufs<T> b;
    abl_bwd_carve(&ar, p, &b); // counts
    if (!(ar.base = (char *)sg_cu_malloc_async(cu, ar.used)))
        return SG_ENOMEM;
    ar.used = 0;
    abl_bwd_carve(&ar, p, &b);

    const size_t rows = B * Tn * p->Hq;
    void (*pre)(float *, float *, const T *, const T *, size_t, int, int, int, int, int) =
        sg_att_dvec_kernel<T>;
    SG_LAUNCH(pre, sg_cu_blocks(rows, SG_ATT_PRE_THREADS / SG_ATT_PRE_TPR), SG_ATT_PRE_THREADS,
              cu->stream, b.dvec, (float *)NULL, dout, out, rows, (int)Tn, (int)p->Hq, (int)p->Hkv,
              (int)D, 1);
    abl_repack(cu, b.Qp, q, B, Tn, p->Hkv, p->G * D, 1);
    abl_repack(cu, b.dOp, dout, B, Tn, p->Hkv, p->G * D, 1);
    abl_repack(cu, b.Kp, k, B, Tn, p->Hkv, D, 1);
    abl_repack(cu, b.Vp, v, B, Tn, p->Hkv, D, 1);
    int rc = sg_cu_launch_status();
    if (!rc)
        rc = sg_cu_zero_async(cu, b.dK, nk * sizeof(float));
    if (!rc)
        rc = sg_cu_zero_async(cu, b.dV, nk * sizeof(float));
    for (size_t i0 = 0; !rc && i0 < Tn; i0 += p->rows)
        rc = abl_bwd_tile<T>(cu, p, b, abl_tile_at(p, i0), lse);
    if (!rc) {
        abl_repack(cu, dq, b.dQp, B, Tn, p->Hkv, p->G * D, 0);
        abl_repack(cu, dk, b.dK, B, Tn, p->Hkv, D, 0);
        abl_repack(cu, dv, b.dV, B, Tn, p->Hkv, D, 0);
        rc = sg_cu_launch_status();
    }
    sg_cu_free_async(cu, ar.base);
    return rc;
}

extern "C" int sg_cu_attention_blas_backward(const sg_cu *cu, size_t tile_rows,
                                             size_t scratch_bytes, void *dq, void *dk, void *dv,
                                             const void *dout, const void *q, const void *k,
                                             const void *v, const void *out, const void *lse,
                                             sg_dtype dt, size_t B, size_t T, size_t Hq, size_t Hkv,
                                             size_t D, size_t window)
{
    abl_plan p;
    if (!cu || abl_plan_init(&p, tile_rows, scratch_bytes, 1, dt, B, T, Hq, Hkv, D, window))
        return SG_EINVAL;
    if (B == 0 || T == 0)
        return SG_OK;
    if (!dq || !dk || !dv || !dout || !q || !k || !v || !out || !lse)
        return SG_EINVAL;
    int rc = SG_EINVAL;
    SG_CU_DISPATCH(dt, E,
                   rc = abl_backward_t<E>(cu, &p, (E *)dq, (E *)dk, (E *)dv, (const E *)dout,
                                          (const E *)q, (const E *)k, (const E *)v, (const E *)out,
                                          (const E *)lse));
    return rc;
}
