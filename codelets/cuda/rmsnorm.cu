/* rmsnorm.cu - RMSNorm over the last dimension on the GPU, forward and
 * backward (codelets/cuda/cuda_ops.h; the semantics of codelets/cpu/rmsnorm.c):
 *
 *   y  = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps)
 *   dx = rstd * g - x * rstd^3 * mean(g * x),  g = w * dy
 *   dw += sum over rows of dy * x * rstd
 *
 * One block per row (grid-stride over rows), threads striding along the row,
 * row sums with sg_block_sum. The weight gradient is deterministic: each
 * block adds its rows' dy * x * rstd in row order into its own partial row
 * (shared memory, or `work` for very wide rows), stores it in `work`, and a
 * second kernel sums the partials in block order, in double, and adds the
 * result into dw once. No float atomics: the bits do not depend on timing.
 */
#include "codelets/cuda/cuda_compat.h"

#include <math.h>
#include <stdint.h>

#define MAX_THREADS 256
#define MAX_ROW_BLOCKS (65535u * 8u)
/* Widest row whose dw partial (C floats) lives in shared memory: 32 KiB of
 * the 48 KiB a block may have without an opt-in, 7 blocks per H100 SM. */
#define SMEM_MAX_C 8192
/* Column tile and slices of the partial-sum reduction. */
#define DW_COLS 32
#define DW_SLICES 8

static int mul_ok(size_t a, size_t b, size_t *out)
{
    if (b && a > SIZE_MAX / b)
        return 0;
    *out = a * b;
    return 1;
}

/* A whole number of warps, no more than the row needs, at most 256. */
static unsigned row_threads(size_t C)
{
    size_t t = (C + 31) / 32 * 32;
    return t == 0 ? 32u : t > MAX_THREADS ? MAX_THREADS : (unsigned)t;
}

/* Blocks of the backward, hence partial rows of dw: enough blocks to fill a
 * GPU (about 4-8 per SM), fewer for wide rows so `work` stays near 16 MiB.
 * A function of N and C only, never of the device: the summation order, and
 * so the bits of dw, are the same on every GPU. */
static size_t bwd_blocks(size_t N, size_t C)
{
    size_t g = C ? ((size_t)1 << 22) / C : 1024;
    g = g < 256 ? 256 : g > 1024 ? 1024 : g;
    return N < g ? N : g;
}

/* ---- forward ------------------------------------------------------------------ */

template <typename T>
__global__ void k_rmsnorm_fwd(T *out, T *rstd, const T *x, const T *w, size_t N, size_t C,
                              float eps)
{
    __shared__ float red[MAX_THREADS];
    /* n is the same for all threads of the block: all reach sg_block_sum */
    for (size_t n = blockIdx.x; n < N; n += gridDim.x) {
        const T *xr = x + n * C; // (C)
        T *yr = out + n * C;     // (C)
        float ss = 0.0f;
        for (size_t c = threadIdx.x; c < C; c += blockDim.x) {
            float v = sg_ld(xr[c]);
            ss += v * v;
        }
        ss = sg_block_sum(ss, red);
        float r = (float)(1.0 / sqrt((double)ss / (double)C + (double)eps));
        if (rstd && threadIdx.x == 0)
            rstd[n] = sg_st<T>(r);
        for (size_t c = threadIdx.x; c < C; c += blockDim.x)
            yr[c] = sg_st<T>(sg_ld(xr[c]) * r * sg_ld(w[c]));
    }
}

int sg_cu_rmsnorm_forward(const sg_cu *cu, void *out, void *rstd, const void *x, const void *w,
                          sg_dtype dt, size_t N, size_t C, float eps)
{
    size_t nc;
    if (!cu || C == 0 || !(eps >= 0.0f) || !mul_ok(N, C, &nc) ||
        (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16))
        return SG_EINVAL;
    if (N == 0)
        return SG_OK;
    if (!out || !x || !w)
        return SG_EINVAL;
    unsigned blocks = N > MAX_ROW_BLOCKS ? MAX_ROW_BLOCKS : (unsigned)N;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_rmsnorm_fwd<T>, blocks, row_threads(C), cu->stream, (T *)out,
                             (T *)rstd, (const T *)x, (const T *)w, N, C, eps));
    return sg_cu_launch_status();
}

/* ---- backward ----------------------------------------------------------------- */

/* dx of rows blockIdx.x, + gridDim.x, ...; with work != NULL also this
 * block's dw partial (C) into work[blockIdx.x] (gridDim.x, C). Thread j owns
 * columns j, j + blockDim.x, ... of the partial, so its updates need neither
 * atomics nor barriers. acc_in_smem: accumulate in dynamic shared memory of C
 * floats, else directly in the block's row of work. */
template <typename T>
__global__ void k_rmsnorm_bwd(T *dx, float *work, const T *dout, const T *x, const T *w,
                              const T *rstd, size_t N, size_t C, int acc_in_smem)
{
    __shared__ float red[MAX_THREADS];
    SG_DYN_SHARED(float, sacc);
    float *part = work ? work + (size_t)blockIdx.x * C : NULL; // (C)
    float *acc = acc_in_smem ? sacc : part;
    if (acc)
        for (size_t c = threadIdx.x; c < C; c += blockDim.x)
            acc[c] = 0.0f;
    for (size_t n = blockIdx.x; n < N; n += gridDim.x) {
        const T *xr = x + n * C;     // (C)
        const T *dyr = dout + n * C; // (C)
        T *dxr = dx + n * C;         // (C)
        float r = sg_ld(rstd[n]);
        float dot = 0.0f; // sum_c w dy x
        for (size_t c = threadIdx.x; c < C; c += blockDim.x)
            dot += sg_ld(w[c]) * sg_ld(dyr[c]) * sg_ld(xr[c]);
        dot = sg_block_sum(dot, red);
        float k = (float)((double)dot / (double)C * (double)r * (double)r * (double)r);
        for (size_t c = threadIdx.x; c < C; c += blockDim.x) {
            float xv = sg_ld(xr[c]), dy = sg_ld(dyr[c]);
            dxr[c] = sg_st<T>(r * (sg_ld(w[c]) * dy) - k * xv);
            if (acc)
                acc[c] += dy * xv * r;
        }
    }
    if (acc && acc_in_smem)
        for (size_t c = threadIdx.x; c < C; c += blockDim.x)
            part[c] = sacc[c];
}

/* dw (C) += sum over b of work (G, C), b in increasing order, in double.
 * Block: DW_COLS columns x DW_SLICES slices; slice s sums rows s, s + 8, ...
 * (a warp reads 32 consecutive floats of one row), then slice 0 adds the 8
 * slice sums in slice order: a fixed order whatever the timing. */
template <typename T> __global__ void k_rmsnorm_dw(T *dw, const float *work, size_t G, size_t C)
{
    __shared__ double sl[DW_SLICES][DW_COLS];
    unsigned col = threadIdx.x % DW_COLS, s = threadIdx.x / DW_COLS;
    for (size_t c0 = (size_t)blockIdx.x * DW_COLS; c0 < C; c0 += (size_t)gridDim.x * DW_COLS) {
        size_t c = c0 + col;
        double acc = 0.0;
        if (c < C)
            for (size_t b = s; b < G; b += DW_SLICES)
                acc += (double)work[b * C + c];
        sl[s][col] = acc;
        __syncthreads();
        if (s == 0 && c < C) {
            double sum = 0.0;
            for (unsigned j = 0; j < DW_SLICES; j++)
                sum += sl[j][col];
            dw[c] = sg_st<T>(sg_ld(dw[c]) + (float)sum);
        }
        __syncthreads(); // sl is rewritten by the next tile
    }
}

size_t sg_cu_rmsnorm_backward_work_floats(size_t N, size_t C)
{
    size_t n;
    return mul_ok(bwd_blocks(N, C), C, &n) ? n : 0;
}

int sg_cu_rmsnorm_backward(const sg_cu *cu, void *dx, void *dw, const void *dout, const void *x,
                           const void *w, const void *rstd, sg_dtype dt, size_t N, size_t C,
                           float *work)
{
    size_t nc;
    if (!cu || C == 0 || !mul_ok(N, C, &nc) || (dt != SG_F32 && dt != SG_BF16 && dt != SG_F16))
        return SG_EINVAL;
    if (N == 0)
        return SG_OK; // no rows: dx is empty and dw gets + 0
    if (!dx || !dout || !x || !w || !rstd || (dw && !work))
        return SG_EINVAL;
    size_t G = bwd_blocks(N, C);
    int in_smem = dw && C <= SMEM_MAX_C;
    size_t smem = in_smem ? C * sizeof(float) : 0;
    float *part = dw ? work : NULL;
    unsigned tiles = (unsigned)((C + DW_COLS - 1) / DW_COLS);
    if (tiles > MAX_ROW_BLOCKS)
        tiles = MAX_ROW_BLOCKS;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH_SMEM(k_rmsnorm_bwd<T>, (unsigned)G, row_threads(C), smem, cu->stream,
                                  (T *)dx, part, (const T *)dout, (const T *)x, (const T *)w,
                                  (const T *)rstd, N, C, in_smem);
                   if (dw) SG_LAUNCH(k_rmsnorm_dw<T>, tiles, DW_COLS * DW_SLICES, cu->stream,
                                     (T *)dw, (const float *)work, G, C));
    return sg_cu_launch_status();
}
