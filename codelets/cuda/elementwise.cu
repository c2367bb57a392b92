/* elementwise.cu - casts, accumulation, token embedding, rotary embedding and
 * SwiGLU on the GPU (codelets/cuda/cuda_ops.h): the semantics of the CPU
 * kernels of codelets/cpu/{cast,embedding,rope,swiglu}.c, on tensors stored
 * in f32, bf16 or f16 with the math in fp32.
 *
 * Every kernel is a grid-stride loop (or one block per row, striding over
 * the row): any size runs with a grid capped by sg_cu_blocks, and indices
 * are size_t because tensors such as the logits exceed 2^31 elements.
 */
#include "codelets/cuda/cuda_compat.h"

#include <math.h>
#include <stdint.h>

#define THREADS 256 /* threads per block of the flat element-wise kernels */
#define MAX_ROW_BLOCKS (65535u * 8u)

/* i = this thread's first flat index, step = all threads of the grid. */
#define GRID_STRIDE(i, n)                                                            \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);         \
         i += (size_t)gridDim.x * blockDim.x)

/* a * b without size_t overflow (sizes come from configs, not from us). */
static int mul_ok(size_t a, size_t b, size_t *out)
{
    if (b && a > SIZE_MAX / b)
        return 0;
    *out = a * b;
    return 1;
}

/* Threads of a block that strides over a row of C elements: a whole number
 * of warps, no more than the row needs, at most 256. */
static unsigned row_threads(size_t C)
{
    size_t t = (C + 31) / 32 * 32;
    return t == 0 ? 32u : t > 256 ? 256u : (unsigned)t;
}

static unsigned row_blocks(size_t N)
{
    return N == 0 ? 1u : N > MAX_ROW_BLOCKS ? MAX_ROW_BLOCKS : (unsigned)N;
}

/* ---- casts ----------------------------------------------------------------- */

/* One template argument per kernel: a kernel name passed to SG_LAUNCH must
 * not contain a comma (it is a macro argument), so the two storage types
 * travel in one struct. */
template <typename TI, typename TO> struct cast_pair {
    typedef TI in;
    typedef TO out;
};

template <typename P>
__global__ void k_cast(typename P::out *out, const typename P::in *in, size_t n)
{
    /* through float: exact for bf16/f16 -> f32, one RNE rounding otherwise */
    GRID_STRIDE(i, n)
        out[i] = sg_st<typename P::out>(sg_ld(in[i]));
}

int sg_cu_cast(const sg_cu *cu, void *out, sg_dtype out_dt, const void *in, sg_dtype in_dt,
               size_t n)
{
    if (!cu || (n && (!out || !in)))
        return SG_EINVAL;
    if ((out_dt != SG_F32 && out_dt != SG_BF16 && out_dt != SG_F16) ||
        (in_dt != SG_F32 && in_dt != SG_BF16 && in_dt != SG_F16))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    SG_CU_DISPATCH(in_dt, TI, SG_CU_DISPATCH(out_dt, TO, typedef cast_pair<TI, TO> P;
                                             SG_LAUNCH(k_cast<P>, sg_cu_blocks(n, THREADS),
                                                       THREADS, cu->stream, (TO *)out,
                                                       (const TI *)in, n)));
    return sg_cu_launch_status();
}

/* ---- acc += x ----------------------------------------------------------------- */

template <typename T> __global__ void k_add_into(T *acc, const T *x, size_t n)
{
    GRID_STRIDE(i, n)
        acc[i] = sg_st<T>(sg_ld(acc[i]) + sg_ld(x[i]));
}

int sg_cu_add_into(const sg_cu *cu, void *acc, const void *x, sg_dtype dt, size_t n)
{
    if (!cu || (n && (!acc || !x)))
        return SG_EINVAL;
    if (n == 0)
        return dt == SG_F32 || dt == SG_BF16 || dt == SG_F16 ? SG_OK : SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_add_into<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream,
                             (T *)acc, (const T *)x, n));
    return sg_cu_launch_status();
}

/* ---- embedding ---------------------------------------------------------------- */

/* One block per token (grid-stride over tokens), threads along the row:
 * both the table row and the output row are read / written contiguously. */
template <typename T>
__global__ void k_embedding_fwd(T *out, const int32_t *tokens, const T *table, size_t N,
                                size_t V, size_t C)
{
    for (size_t n = blockIdx.x; n < N; n += gridDim.x) {
        int32_t id = tokens[n];
        if (id < 0 || (size_t)id >= V) // the caller checks ids; never read out of bounds
            continue;
        const T *row = table + (size_t)id * C; // (C)
        T *o = out + n * C;                    // (C)
        for (size_t c = threadIdx.x; c < C; c += blockDim.x)
            o[c] = row[c]; // a copy: no conversion, bit-exact
    }
}

/* Repeated ids add into the same row from different blocks: atomics. */
template <typename T>
__global__ void k_embedding_bwd(T *dtable, const int32_t *tokens, const T *dout, size_t N,
                                size_t V, size_t C)
{
    for (size_t n = blockIdx.x; n < N; n += gridDim.x) {
        int32_t id = tokens[n];
        if (id < 0 || (size_t)id >= V)
            continue;
        T *drow = dtable + (size_t)id * C; // (C)
        const T *g = dout + n * C;         // (C)
        for (size_t c = threadIdx.x; c < C; c += blockDim.x)
            sg_atomic_add(&drow[c], sg_ld(g[c]));
    }
}

/* Shared checks of both directions: SG_OK to launch, 1 for nothing to do,
 * or an error. */
static int embedding_check(const sg_cu *cu, const void *a, const int32_t *tokens,
                           const void *b, sg_dtype dt, size_t N, size_t V, size_t C)
{
    size_t nc, vc;
    if (!cu || (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16) || !mul_ok(N, C, &nc) ||
        !mul_ok(V, C, &vc))
        return SG_EINVAL;
    if (N == 0 || C == 0)
        return 1;
    if (V == 0 || !a || !tokens || !b) // V = 0: no id can be valid (the CPU refuses too)
        return SG_EINVAL;
    return SG_OK;
}

int sg_cu_embedding_forward(const sg_cu *cu, void *out, const int32_t *tokens, const void *table,
                            sg_dtype dt, size_t N, size_t V, size_t C)
{
    int rc = embedding_check(cu, out, tokens, table, dt, N, V, C);
    if (rc)
        return rc < 0 ? rc : SG_OK;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_embedding_fwd<T>, row_blocks(N), row_threads(C), cu->stream,
                             (T *)out, tokens, (const T *)table, N, V, C));
    return sg_cu_launch_status();
}

int sg_cu_embedding_backward(const sg_cu *cu, void *dtable, const int32_t *tokens,
                             const void *dout, sg_dtype dt, size_t N, size_t V, size_t C)
{
    int rc = embedding_check(cu, dtable, tokens, dout, dt, N, V, C);
    if (rc)
        return rc < 0 ? rc : SG_OK;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_embedding_bwd<T>, row_blocks(N), row_threads(C), cu->stream,
                             (T *)dtable, tokens, (const T *)dout, N, V, C));
    return sg_cu_launch_status();
}

/* ---- rotary embedding ----------------------------------------------------- */

/* One block per token (b, t) (grid-stride over tokens), its threads over the
 * H * D/2 pairs (i, i + D/2) of the token's heads: consecutive threads take
 * consecutive i, so both halves are read and written contiguously, the
 * token's cos / sin row is shared by its heads, and the index arithmetic
 * inside the loop is 32-bit (a 64-bit division per element would cost more
 * than the memory traffic). Each pair is read before it is written by the
 * same thread: out may equal x. sign = +1 rotates by the angle (forward),
 * -1 by its opposite (backward). */
template <typename T>
__global__ void k_rope(T *out, const T *x, const float *cos_tab, const float *sin_tab,
                       size_t tokens, size_t seq, unsigned H, unsigned half, float sign)
{
    const unsigned pairs = H * half; // per token; checked to fit on the host
    for (size_t bt = blockIdx.x; bt < tokens; bt += gridDim.x) {
        const float *cr = cos_tab + (bt % seq) * half; // (D/2) of position t
        const float *sr = sin_tab + (bt % seq) * half; // (D/2)
        size_t tok = bt * pairs * 2;                    // x[b, t] (H, D)
        for (unsigned j = threadIdx.x; j < pairs; j += blockDim.x) {
            unsigned h = j / half, i = j - h * half;
            size_t o = tok + (size_t)h * 2 * half + i;
            float x1 = sg_ld(x[o]), x2 = sg_ld(x[o + half]);
            float c = cr[i], s = sign * sr[i];
            out[o] = sg_st<T>(x1 * c - x2 * s);
            out[o + half] = sg_st<T>(x2 * c + x1 * s);
        }
    }
}

static int rope(const sg_cu *cu, void *out, const void *x, const float *cos_tab,
                const float *sin_tab, sg_dtype dt, size_t B, size_t T, size_t H, size_t D,
                float sign)
{
    size_t tokens, per, n;
    if (!cu || D == 0 || D % 2 || !mul_ok(B, T, &tokens) || !mul_ok(H, D, &per) ||
        !mul_ok(tokens, per, &n) || per / 2 > 0xffffffffu)
        return SG_EINVAL;
    if (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16)
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    if (!out || !x || !cos_tab || !sin_tab)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, S,
                   SG_LAUNCH(k_rope<S>, row_blocks(tokens), row_threads(per / 2), cu->stream,
                             (S *)out, (const S *)x, cos_tab, sin_tab, tokens, T,
                             (unsigned)H, (unsigned)(D / 2), sign));
    return sg_cu_launch_status();
}

int sg_cu_rope_forward(const sg_cu *cu, void *out, const void *x, const float *cos_tab,
                       const float *sin_tab, sg_dtype dt, size_t B, size_t T, size_t H, size_t D)
{
    return rope(cu, out, x, cos_tab, sin_tab, dt, B, T, H, D, 1.0f);
}

/* The inverse of a rotation is the rotation by the opposite angle. */
int sg_cu_rope_backward(const sg_cu *cu, void *dx, const void *dout, const float *cos_tab,
                        const float *sin_tab, sg_dtype dt, size_t B, size_t T, size_t H,
                        size_t D)
{
    return rope(cu, dx, dout, cos_tab, sin_tab, dt, B, T, H, D, -1.0f);
}

/* ---- SwiGLU ------------------------------------------------------------------- */

/* 1 / (1 + e^-g): for g -> -inf, e^-g overflows to inf and s to 0, no NaN
 * (as swiglu.c). */
__device__ static inline float sigmoid_f(float g)
{
    return 1.0f / (1.0f + expf(-g));
}

template <typename T> __global__ void k_swiglu_fwd(T *h, const T *gate, const T *up, size_t n)
{
    GRID_STRIDE(i, n) {
        float g = sg_ld(gate[i]);
        h[i] = sg_st<T>(g * sigmoid_f(g) * sg_ld(up[i]));
    }
}

/* With s = sigmoid(g): dsilu/dg = s (1 + g (1 - s)). */
template <typename T>
__global__ void k_swiglu_bwd(T *dgate, T *dup, const T *dh, const T *gate, const T *up, size_t n)
{
    GRID_STRIDE(i, n) {
        float g = sg_ld(gate[i]), s = sigmoid_f(g), d = sg_ld(dh[i]), u = sg_ld(up[i]);
        dup[i] = sg_st<T>(d * (g * s));
        dgate[i] = sg_st<T>(d * u * s * (1.0f + g * (1.0f - s)));
    }
}

int sg_cu_swiglu_forward(const sg_cu *cu, void *h, const void *gate, const void *up, sg_dtype dt,
                         size_t N, size_t F)
{
    size_t n;
    if (!cu || !mul_ok(N, F, &n) || (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    if (!h || !gate || !up)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_swiglu_fwd<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream,
                             (T *)h, (const T *)gate, (const T *)up, n));
    return sg_cu_launch_status();
}

int sg_cu_swiglu_backward(const sg_cu *cu, void *dgate, void *dup, const void *dh,
                          const void *gate, const void *up, sg_dtype dt, size_t N, size_t F)
{
    size_t n;
    if (!cu || !mul_ok(N, F, &n) || (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    if (!dgate || !dup || !dh || !gate || !up)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_swiglu_bwd<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream,
                             (T *)dgate, (T *)dup, (const T *)dh, (const T *)gate,
                             (const T *)up, n));
    return sg_cu_launch_status();
}
