/* moe.cu - the mixture-of-experts MLPs of Qwen3-MoE and GPT-OSS on the GPU,
 * forward and backward (cuda_ops.h): per-expert slot lists, experts and
 * combine; the router and the load-balancing statistics and loss are
 * moe_router.cu's. The semantics are those
 * of codelets/cpu/moe.c and codelets/cpu/gpt_oss.c, which state the Hugging
 * Face formulas; this file only says how they run on the device.
 *
 * - Router state is fp32 whatever the storage dtype: logits and probs (N,
 *   E), sel (N, K: expert indices held as floats, as on the CPU), topw (N,
 *   K), dtopw, the statistics (2 E). The logits' gradient is in dt.
 *   One thread per token row does the softmax, the top-k (by (value desc,
 *   index asc): the same picks as the CPU's repeated selection, ties to the
 *   lowest index) and the renormalisation, in the CPU's order of operations.
 * - Slot lists: an expert's slots (s = n K + j with sel[s] == e) in token
 *   order, one thread per expert of a group, each writing at the offset of
 *   the counts of the experts before it: a group's rows expert by expert,
 *   as codelets/starpu/moe.c lays them out. The counts are device int32; the
 *   caller copies them to the host to size an expert's GEMMs (cuBLAS takes
 *   its sizes from the host), which is one small synchronisation per group.
 * - Experts: gather the expert's rows of x, GEMMs through cuBLAS (fp32
 *   accumulation), the activation element-wise, GEMM, scatter to the rows
 *   (or contiguous rows when `rows` is NULL). No atomics anywhere: every
 *   output element has one writer and every sum a fixed order, so results do
 *   not depend on timing.
 * - Combine and the slot sum read one row pointer per slot (device array
 *   built by sg_cu_moe_slot_rows from each group's slot list) and add in slot
 *   order, as the CPU does.
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

/* ---- helpers ------------------------------------------------------------------ */

/* C (m, n) = op(A) op(B) + beta C, column-major, all in dt, fp32 accumulation. */
static int gemm(const sg_cu *cu, cublasOperation_t ta, cublasOperation_t tb, size_t m, size_t n,
                size_t k, const void *A, size_t lda, const void *B, size_t ldb, float beta, void *C,
                size_t ldc, sg_dtype dt)
{
    if (m == 0 || n == 0)
        return SG_OK;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
        ldc > INT_MAX)
        return SG_EINVAL;
    const float alpha = 1.0f;
    cudaDataType t = sg_cu_blas_type(dt);
    cublasStatus_t st = cublasGemmEx((cublasHandle_t)cu->blas, ta, tb, (int)m, (int)n, (int)k,
                                     &alpha, A, t, (int)lda, B, t, (int)ldb, &beta, C, t, (int)ldc,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? SG_OK : SG_EIO;
}

/* The fused GPT-OSS tensors are (in, out) row-major: y (n, out) = x (n, in) W
 * is, column-major, y' (out, n) = W' (out, in) x' (in, n). */
static int mm_in_out(const sg_cu *cu, void *y, const void *x, const void *W, size_t n, size_t in,
                     size_t out, float beta, sg_dtype dt)
{
    return gemm(cu, CUBLAS_OP_N, CUBLAS_OP_N, out, n, in, W, out, x, in, beta, y, out, dt);
}

/* ---- slot lists ----------------------------------------------------------------- */

__global__ void k_slot_counts(int32_t *counts, const float *sel, size_t NK, size_t e0, size_t ne)
{
    SG_GRID_STRIDE(i, ne)
    {
        int32_t c = 0;
        for (size_t s = 0; s < NK; s++)
            c += (size_t)sel[s] == e0 + i;
        counts[i] = c;
    }
}

__global__ void k_slot_fill(int32_t *slots, const int32_t *counts, const float *sel, size_t NK,
                            size_t e0, size_t ne)
{
    SG_GRID_STRIDE(i, ne)
    {
        size_t off = 0;
        for (size_t j = 0; j < i; j++)
            off += (size_t)counts[j];
        for (size_t s = 0; s < NK; s++)
            if ((size_t)sel[s] == e0 + i)
                slots[off++] = (int32_t)s;
    }
}

int sg_cu_moe_expert_slots(const sg_cu *cu, int32_t *slots, int32_t *counts, const float *sel,
                           size_t N, size_t K, size_t e0, size_t e1)
{
    if (!cu || !slots || !counts || !sel || e1 < e0 || N * K > INT32_MAX)
        return SG_EINVAL;
    const size_t ne = e1 - e0;
    if (ne == 0)
        return SG_OK;
    SG_LAUNCH(k_slot_counts, sg_cu_blocks(ne, 64), 64, cu->stream, counts, sel, N * K, e0, ne);
    SG_LAUNCH(k_slot_fill, sg_cu_blocks(ne, 64), 64, cu->stream, slots, (const int32_t *)counts,
              sel, N * K, e0, ne);
    return sg_cu_launch_status();
}

/* ---- gathers and scatters -------------------------------------------------------- */

/* dst row r (C) = src row idx[r] / div (idx NULL: row r). */
template <typename T>
__global__ void k_gather(T *dst, const T *src, const int32_t *idx, size_t n, size_t C, size_t div)
{
    SG_GRID_STRIDE(i, n * C)
    {
        const size_t r = i / C, c = i % C;
        const size_t from = idx ? (size_t)idx[r] / div : r;
        dst[i] = src[from * C + c];
    }
}

/* dst row idx[r] (C) = src row r (idx NULL: row r). */
template <typename T>
__global__ void k_scatter(T *dst, const T *src, const int32_t *idx, size_t n, size_t C)
{
    SG_GRID_STRIDE(i, n * C)
    {
        const size_t r = i / C, c = i % C;
        dst[(idx ? (size_t)idx[r] : r) * C + c] = src[i];
    }
}

template <typename T>
static void gather(const sg_cu *cu, T *dst, const T *src, const int32_t *idx, size_t n, size_t C,
                   size_t div)
{
    if (n && C)
        SG_LAUNCH(k_gather<T>, sg_cu_blocks(n * C, THREADS), THREADS, cu->stream, dst, src, idx, n,
                  C, div);
}

template <typename T>
static void scatter(const sg_cu *cu, T *dst, const T *src, const int32_t *idx, size_t n, size_t C)
{
    if (n && C)
        SG_LAUNCH(k_scatter<T>, sg_cu_blocks(n * C, THREADS), THREADS, cu->stream, dst, src, idx, n,
                  C);
}

/* GPT-OSS: gu (n, 2F) interleaved -> gate, up rows idx[r] (or r). */
template <typename T>
__global__ void k_deinterleave(T *gate, T *up, const T *gu, const int32_t *rows, size_t n, size_t F)
{
    SG_GRID_STRIDE(i, n * F)
    {
        const size_t r = i / F, c = i % F, row = rows ? (size_t)rows[r] : r;
        gate[row * F + c] = gu[r * 2 * F + 2 * c];
        up[row * F + c] = gu[r * 2 * F + 2 * c + 1];
    }
}

/* ---- activations ---------------------------------------------------------------- */

__device__ static inline float sigmoid_f(float z)
{
    return 1.0f / (1.0f + expf(-z));
}

/* GPT-OSS's clamped GLU (gpt_oss.c: sg_oss_glu_forward). */
template <typename T> __global__ void k_oss_glu_fwd(T *h, const T *gate, const T *up, size_t n)
{
    const float lim = SG_OSS_SWIGLU_LIMIT, a = SG_OSS_SWIGLU_ALPHA;
    SG_GRID_STRIDE(i, n)
    {
        float g = sg_ld(gate[i]), u = sg_ld(up[i]);
        g = g > lim ? lim : g;
        u = u > lim ? lim : u < -lim ? -lim : u;
        h[i] = sg_st<T>((u + 1.0f) * (g * sigmoid_f(a * g)));
    }
}

/* Its backward: no gradient where a clamp cut. dgate may equal gate, dup up. */
template <typename T>
__global__ void k_oss_glu_bwd(T *dgate, T *dup, const T *dh, const T *gate, const T *up, size_t n)
{
    const float lim = SG_OSS_SWIGLU_LIMIT, a = SG_OSS_SWIGLU_ALPHA;
    SG_GRID_STRIDE(i, n)
    {
        const float g0 = sg_ld(gate[i]), u0 = sg_ld(up[i]), d = sg_ld(dh[i]);
        const int gcut = g0 > lim, ucut = u0 > lim || u0 < -lim;
        const float g = gcut ? lim : g0, u = ucut ? (u0 > 0 ? lim : -lim) : u0;
        const float sg = sigmoid_f(a * g);
        dgate[i] = sg_st<T>(gcut ? 0.0f : d * (u + 1.0f) * (sg + a * g * sg * (1.0f - sg)));
        dup[i] = sg_st<T>(ucut ? 0.0f : d * (g * sg));
    }
}

/* GPT-OSS: dgu (n, 2F) interleaved from dgate, dup (n, F). */
template <typename T>
__global__ void k_interleave(T *dgu, const T *dgate, const T *dup, size_t n, size_t F)
{
    SG_GRID_STRIDE(i, n * F)
    {
        const size_t r = i / F, c = i % F;
        dgu[r * 2 * F + 2 * c] = dgate[i];
        dgu[r * 2 * F + 2 * c + 1] = dup[i];
    }
}

int sg_cu_oss_glu_forward(const sg_cu *cu, void *h, const void *gate, const void *up, sg_dtype dt,
                          size_t N, size_t F)
{
    size_t n;
    if (!cu || !sg_cu_mul_ok(N, F, &n) || !sg_cu_dtype_ok(dt))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    if (!h || !gate || !up)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_oss_glu_fwd<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream,
                             (T *)h, (const T *)gate, (const T *)up, n));
    return sg_cu_launch_status();
}

int sg_cu_oss_glu_backward(const sg_cu *cu, void *dgate, void *dup, const void *dh,
                           const void *gate, const void *up, sg_dtype dt, size_t N, size_t F)
{
    size_t n;
    if (!cu || !sg_cu_mul_ok(N, F, &n) || !sg_cu_dtype_ok(dt))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    if (!dgate || !dup || !dh || !gate || !up)
        return SG_EINVAL;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_oss_glu_bwd<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream,
                             (T *)dgate, (T *)dup, (const T *)dh, (const T *)gate, (const T *)up,
                             n));
    return sg_cu_launch_status();
}

/* ---- experts: the weighting of dy --------------------------------------------------- */

/* One block per expert row r (slot s = slots[r]): dtopw[row] = dy[s / K] .
 * o[r] (a block sum in a fixed order), dout[r] = topw[s] dy[s / K]. */
template <typename T>
__global__ void k_expert_dy(float *dtopw, T *dout, const T *dy, const T *o, const float *topw,
                            const int32_t *slots, const int32_t *rows, size_t n, size_t H, size_t K)
{
    __shared__ float red[THREADS];
    for (size_t r = blockIdx.x; r < n; r += gridDim.x) {
        const size_t s = (size_t)slots[r];
        const T *dyr = dy + s / K * H, *orow = o + r * H;
        const float w = topw[s];
        float d = 0.0f;
        for (size_t i = threadIdx.x; i < H; i += blockDim.x) {
            const float v = sg_ld(dyr[i]);
            d += v * sg_ld(orow[i]);
            dout[r * H + i] = sg_st<T>(w * v);
        }
        d = sg_block_sum(d, red);
        if (threadIdx.x == 0)
            dtopw[rows ? (size_t)rows[r] : r] = d;
    }
}

template <typename T>
static int expert_dy(const sg_cu *cu, float *dtopw, T *dout, const T *dy, const T *o,
                     const float *topw, const int32_t *slots, const int32_t *rows, size_t n,
                     size_t H, size_t K)
{
    SG_LAUNCH(k_expert_dy<T>, sg_cu_row_blocks(n), THREADS, cu->stream, dtopw, dout, dy, o, topw,
              slots, rows, n, H, K);
    return sg_cu_launch_status();
}

/* ---- Qwen3-MoE experts -------------------------------------------------------------- */

/* The dt part of an expert's work, then (16-byte aligned) the float bias sums. */
static size_t work_dt_bytes(size_t n, size_t H, size_t F, sg_dtype dt)
{
    return (n * (5 * H + 5 * F) * sg_dtype_size(dt) + 15) / 16 * 16;
}

size_t sg_cu_moe_expert_work_bytes(size_t n, size_t H, size_t F, sg_dtype dt)
{
    size_t a = sg_cu_linear_backward_work_floats(n, 2 * F);
    size_t b = sg_cu_linear_backward_work_floats(n, H);
    return work_dt_bytes(n, H, F, dt) + (a > b ? a : b) * sizeof(float);
}

template <typename T>
static int qwen_expert_forward(const sg_cu *cu, T *gate_s, T *up_s, T *out_s, const T *x,
                               const int32_t *slots, const int32_t *rows, size_t n, const T *Wg,
                               const T *Wu, const T *Wd, sg_dtype dt, size_t H, size_t F, size_t K,
                               T *w)
{
    T *xe = w, *g = xe + n * H, *u = g + n * F, *act = u + n * F, *o = act + n * F;
    gather(cu, xe, x, slots, n, H, K);
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    SG_CU_TRY_OR_RETURN(sg_cu_linear_forward(cu, g, xe, Wg, NULL, dt, n, H, F));
    SG_CU_TRY_OR_RETURN(sg_cu_linear_forward(cu, u, xe, Wu, NULL, dt, n, H, F));
    scatter(cu, gate_s, (const T *)g, rows, n, F);
    scatter(cu, up_s, (const T *)u, rows, n, F);
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    if (!out_s)
        return SG_OK;
    SG_CU_TRY_OR_RETURN(sg_cu_swiglu_forward(cu, act, g, u, dt, n, F));
    SG_CU_TRY_OR_RETURN(sg_cu_linear_forward(cu, o, act, Wd, NULL, dt, n, F, H));
    scatter(cu, out_s, (const T *)o, rows, n, H);
    return sg_cu_launch_status();
}

int sg_cu_moe_expert_forward(const sg_cu *cu, void *gate_s, void *up_s, void *out_s, const void *x,
                             const int32_t *slots, const int32_t *rows, size_t n, const void *Wg,
                             const void *Wu, const void *Wd, sg_dtype dt, size_t H, size_t F,
                             size_t K, void *work)
{
    if (!cu || !gate_s || !up_s || !x || !slots || !Wg || !Wu || (out_s && !Wd) || !work ||
        K == 0 || H == 0 || F == 0 || !sg_cu_dtype_ok(dt) || n > INT_MAX)
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    SG_CU_DISPATCH(dt, T,
                   return qwen_expert_forward<T>(
                       cu, (T *)gate_s, (T *)up_s, (T *)out_s, (const T *)x, slots, rows, n,
                       (const T *)Wg, (const T *)Wu, (const T *)Wd, dt, H, F, K, (T *)work));
    return SG_EINVAL;
}

template <typename T>
static int qwen_expert_backward(const sg_cu *cu, T *dx_s, float *dtopw, T *dWg, T *dWu, T *dWd,
                                const T *dy, const T *x, const T *gate_s, const T *up_s,
                                const float *topw, const int32_t *slots, const int32_t *rows,
                                size_t n, const T *Wg, const T *Wu, const T *Wd, sg_dtype dt,
                                size_t H, size_t F, size_t K, T *w)
{
    T *xe = w, *o = xe + n * H, *dout = o + n * H, *dxe = dout + n * H, *tmp = dxe + n * H;
    T *g = tmp + n * H, *u = g + n * F, *act = u + n * F, *dact = act + n * F, *dup = dact + n * F;
    gather(cu, xe, x, slots, n, H, K);
    gather(cu, g, gate_s, rows, n, F, 1);
    gather(cu, u, up_s, rows, n, F, 1);
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    SG_CU_TRY_OR_RETURN(sg_cu_swiglu_forward(cu, act, g, u, dt, n, F)); // recomputed
    SG_CU_TRY_OR_RETURN(
        sg_cu_linear_forward(cu, o, act, Wd, NULL, dt, n, F, H)); // the output, recomputed
    SG_CU_TRY_OR_RETURN(expert_dy<T>(cu, dtopw, dout, dy, o, topw, slots, rows, n, H, K));
    SG_CU_TRY_OR_RETURN(
        sg_cu_linear_backward(cu, dact, dWd, NULL, dout, act, Wd, dt, n, F, H, NULL));
    T *dgate = act; // act is dead
    SG_CU_TRY_OR_RETURN(sg_cu_swiglu_backward(cu, dgate, dup, dact, g, u, dt, n, F));
    SG_CU_TRY_OR_RETURN(
        sg_cu_linear_backward(cu, dxe, dWg, NULL, dgate, xe, Wg, dt, n, H, F, NULL));
    SG_CU_TRY_OR_RETURN(sg_cu_linear_backward(cu, tmp, dWu, NULL, dup, xe, Wu, dt, n, H, F, NULL));
    SG_CU_TRY_OR_RETURN(sg_cu_add_into(cu, dxe, tmp, dt, n * H));
    scatter(cu, dx_s, (const T *)dxe, rows, n, H);
    return sg_cu_launch_status();
}

int sg_cu_moe_expert_backward(const sg_cu *cu, void *dx_s, float *dtopw, void *dWg, void *dWu,
                              void *dWd, const void *dy, const void *x, const void *gate_s,
                              const void *up_s, const float *topw, const int32_t *slots,
                              const int32_t *rows, size_t n, const void *Wg, const void *Wu,
                              const void *Wd, sg_dtype dt, size_t H, size_t F, size_t K, void *work)
{
    if (!cu || !dx_s || !dtopw || !dy || !x || !gate_s || !up_s || !topw || !slots || !Wg || !Wu ||
        !Wd || !work || K == 0 || H == 0 || F == 0 || !sg_cu_dtype_ok(dt) || n > INT_MAX)
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    SG_CU_DISPATCH(dt, T,
                   return qwen_expert_backward<T>(
                       cu, (T *)dx_s, dtopw, (T *)dWg, (T *)dWu, (T *)dWd, (const T *)dy,
                       (const T *)x, (const T *)gate_s, (const T *)up_s, topw, slots, rows, n,
                       (const T *)Wg, (const T *)Wu, (const T *)Wd, dt, H, F, K, (T *)work));
    return SG_EINVAL;
}

/* ---- GPT-OSS experts ------------------------------------------------------------------ */

/* y (n, C) = b (C) on every row. */
template <typename T> __global__ void k_bias_rows(T *y, const T *b, size_t n, size_t C)
{
    SG_GRID_STRIDE(i, n * C)
    y[i] = b[i % C];
}

/* The float scratch (bias sums) after the dt part of the work, 16-byte aligned. */
static float *bias_work(void *work, size_t n, size_t H, size_t F, sg_dtype dt)
{
    return (float *)((char *)work + work_dt_bytes(n, H, F, dt));
}

template <typename T>
static int oss_expert_forward(const sg_cu *cu, T *gate_s, T *up_s, T *out_s, const T *x,
                              const int32_t *slots, const int32_t *rows, size_t n, const T *Wgu,
                              const T *bgu, const T *Wd, const T *bd, sg_dtype dt, size_t H,
                              size_t F, size_t K, T *w)
{
    T *xe = w, *gu = xe + n * H, *g = gu + 2 * n * F, *u = g + n * F, *act = u + n * F;
    T *o = act + n * F; // n (2H + 5F) of the n (5H + 5F)
    gather(cu, xe, x, slots, n, H, K);
    SG_LAUNCH(k_bias_rows<T>, sg_cu_blocks(2 * n * F, THREADS), THREADS, cu->stream, gu, bgu, n,
              2 * F);
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    SG_CU_TRY_OR_RETURN(mm_in_out(cu, gu, xe, Wgu, n, H, 2 * F, 1.0f, dt)); // (n, 2F) + bias
    SG_LAUNCH(k_deinterleave<T>, sg_cu_blocks(n * F, THREADS), THREADS, cu->stream, gate_s, up_s,
              (const T *)gu, rows, n, F);
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    if (!out_s)
        return SG_OK;
    SG_LAUNCH(k_deinterleave<T>, sg_cu_blocks(n * F, THREADS), THREADS, cu->stream, g, u,
              (const T *)gu, (const int32_t *)NULL, n, F);
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    SG_CU_TRY_OR_RETURN(sg_cu_oss_glu_forward(cu, act, g, u, dt, n, F));
    SG_LAUNCH(k_bias_rows<T>, sg_cu_blocks(n * H, THREADS), THREADS, cu->stream, o, bd, n, H);
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    SG_CU_TRY_OR_RETURN(mm_in_out(cu, o, act, Wd, n, F, H, 1.0f, dt)); // (n, H) + bias
    scatter(cu, out_s, (const T *)o, rows, n, H);
    return sg_cu_launch_status();
}

int sg_cu_moe_oss_expert_forward(const sg_cu *cu, void *gate_s, void *up_s, void *out_s,
                                 const void *x, const int32_t *slots, const int32_t *rows, size_t n,
                                 const void *Wgu, const void *bgu, const void *Wd, const void *bd,
                                 sg_dtype dt, size_t H, size_t F, size_t K, void *work)
{
    if (!cu || !gate_s || !up_s || !x || !slots || !Wgu || !bgu || (out_s && (!Wd || !bd)) ||
        !work || K == 0 || H == 0 || F == 0 || !sg_cu_dtype_ok(dt) || n > INT_MAX)
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    SG_CU_DISPATCH(dt, T,
                   return oss_expert_forward<T>(cu, (T *)gate_s, (T *)up_s, (T *)out_s,
                                                (const T *)x, slots, rows, n, (const T *)Wgu,
                                                (const T *)bgu, (const T *)Wd, (const T *)bd, dt, H,
                                                F, K, (T *)work));
    return SG_EINVAL;
}

template <typename T>
static int oss_expert_backward(const sg_cu *cu, T *dx_s, float *dtopw, T *dWgu, T *dbgu, T *dWd,
                               T *dbd, const T *dy, const T *x, const T *gate_s, const T *up_s,
                               const float *topw, const int32_t *slots, const int32_t *rows,
                               size_t n, const T *Wgu, const T *Wd, const T *bd, sg_dtype dt,
                               size_t H, size_t F, size_t K, T *w, float *bw)
{
    T *xe = w, *o = xe + n * H, *dout = o + n * H, *dxe = dout + n * H;
    T *g = dxe + 2 * n * H, *u = g + n * F, *act = u + n * F, *dact = act + n * F;
    // dgu (n, 2F) reuses act and dact once they are dead
    gather(cu, xe, x, slots, n, H, K);
    gather(cu, g, gate_s, rows, n, F, 1);
    gather(cu, u, up_s, rows, n, F, 1);
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    SG_CU_TRY_OR_RETURN(sg_cu_oss_glu_forward(cu, act, g, u, dt, n, F)); // recomputed
    SG_LAUNCH(k_bias_rows<T>, sg_cu_blocks(n * H, THREADS), THREADS, cu->stream, o, bd, n, H);
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    SG_CU_TRY_OR_RETURN(mm_in_out(cu, o, act, Wd, n, F, H, 1.0f, dt)); // the output, recomputed
    SG_CU_TRY_OR_RETURN(expert_dy<T>(cu, dtopw, dout, dy, o, topw, slots, rows, n, H, K));
    if (dWd) // dWd (F, H) += act^T dout: dWd' (H, F) += dout' (H, n) act'^T
        SG_CU_TRY_OR_RETURN(
            gemm(cu, CUBLAS_OP_N, CUBLAS_OP_T, H, F, n, dout, H, act, F, 1.0f, dWd, H, dt));
    if (dbd)
        SG_CU_TRY_OR_RETURN(
            sg_cu_linear_backward(cu, NULL, NULL, dbd, dout, NULL, NULL, dt, n, 1, H, bw));
    // dact (n, F) = dout Wd^T: dact' (F, n) = Wd'^T (F, H) dout' (H, n), Wd' (H, F)
    SG_CU_TRY_OR_RETURN(
        gemm(cu, CUBLAS_OP_T, CUBLAS_OP_N, F, n, H, Wd, H, dout, H, 0.0f, dact, F, dt));
    SG_CU_TRY_OR_RETURN(
        sg_cu_oss_glu_backward(cu, g, u, dact, g, u, dt, n, F)); // dgate, dup in place
    T *dgu = act;                                                // act, dact dead: (n, 2F)
    SG_LAUNCH(k_interleave<T>, sg_cu_blocks(n * F, THREADS), THREADS, cu->stream, dgu, (const T *)g,
              (const T *)u, n, F);
    SG_CU_TRY_OR_RETURN(sg_cu_launch_status());
    // dxe (n, H) = dgu Wgu^T: dxe' (H, n) = Wgu'^T (H, 2F) dgu' (2F, n), Wgu' (2F, H)
    SG_CU_TRY_OR_RETURN(
        gemm(cu, CUBLAS_OP_T, CUBLAS_OP_N, H, n, 2 * F, Wgu, 2 * F, dgu, 2 * F, 0.0f, dxe, H, dt));
    if (dWgu) // dWgu (H, 2F) += xe^T dgu: dWgu' (2F, H) += dgu' (2F, n) xe'^T
        SG_CU_TRY_OR_RETURN(gemm(cu, CUBLAS_OP_N, CUBLAS_OP_T, 2 * F, H, n, dgu, 2 * F, xe, H, 1.0f,
                                 dWgu, 2 * F, dt));
    if (dbgu)
        SG_CU_TRY_OR_RETURN(
            sg_cu_linear_backward(cu, NULL, NULL, dbgu, dgu, NULL, NULL, dt, n, 1, 2 * F, bw));
    scatter(cu, dx_s, (const T *)dxe, rows, n, H);
    return sg_cu_launch_status();
}

int sg_cu_moe_oss_expert_backward(const sg_cu *cu, void *dx_s, float *dtopw, void *dWgu, void *dbgu,
                                  void *dWd, void *dbd, const void *dy, const void *x,
                                  const void *gate_s, const void *up_s, const float *topw,
                                  const int32_t *slots, const int32_t *rows, size_t n,
                                  const void *Wgu, const void *Wd, const void *bd, sg_dtype dt,
                                  size_t H, size_t F, size_t K, void *work)
{
    if (!cu || !dx_s || !dtopw || !dy || !x || !gate_s || !up_s || !topw || !slots || !Wgu || !Wd ||
        !bd || !work || K == 0 || H == 0 || F == 0 || !sg_cu_dtype_ok(dt) || n > INT_MAX)
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    float *bw = bias_work(work, n, H, F, dt);
    SG_CU_DISPATCH(dt, T,
                   return oss_expert_backward<T>(cu, (T *)dx_s, dtopw, (T *)dWgu, (T *)dbgu,
                                                 (T *)dWd, (T *)dbd, (const T *)dy, (const T *)x,
                                                 (const T *)gate_s, (const T *)up_s, topw, slots,
                                                 rows, n, (const T *)Wgu, (const T *)Wd,
                                                 (const T *)bd, dt, H, F, K, (T *)work, bw));
    return SG_EINVAL;
}

/* ---- combine and slot sums ------------------------------------------------------------ */

__global__ void k_slot_rows(const void **ptrs, const int32_t *slots, size_t n, const char *base,
                            size_t row_bytes)
{
    SG_GRID_STRIDE(r, n)
    ptrs[(size_t)slots[r]] = base + r * row_bytes;
}

int sg_cu_moe_slot_rows(const sg_cu *cu, const void **ptrs, const int32_t *slots, size_t n,
                        const void *base, size_t row_bytes)
{
    if (!cu || !ptrs || !slots || !base)
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    SG_LAUNCH(k_slot_rows, sg_cu_blocks(n, THREADS), THREADS, cu->stream, ptrs, slots, n,
              (const char *)base, row_bytes);
    return sg_cu_launch_status();
}

/* y[t] = h[t] + sum_j topw[t K + j] outs[t K + j] (slot order), or with topw
 * NULL the plain sum of the K rows (the slot sum). */
template <typename T>
__global__ void k_combine(T *y, const T *h, const void *const *outs, const float *topw, size_t N,
                          size_t H, size_t K)
{
    SG_GRID_STRIDE(i, N * H)
    {
        const size_t t = i / H, c = i % H;
        float acc = h ? sg_ld(h[i]) : 0.0f;
        for (size_t j = 0; j < K; j++) {
            const T *o = (const T *)outs[t * K + j];
            const float v = sg_ld(o[c]);
            if (!h && j == 0)
                acc = v;
            else
                acc += topw ? topw[t * K + j] * v : v;
        }
        y[i] = sg_st<T>(acc);
    }
}

int sg_cu_moe_combine_forward(const sg_cu *cu, void *y, const void *h, const void *const *outs,
                              const float *topw, sg_dtype dt, size_t N, size_t H, size_t K)
{
    size_t n;
    if (!cu || !y || !h || !outs || !topw || !sg_cu_dtype_ok(dt) || !sg_cu_mul_ok(N, H, &n))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_combine<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream, (T *)y,
                             (const T *)h, outs, topw, N, H, K));
    return sg_cu_launch_status();
}

int sg_cu_moe_slots_sum(const sg_cu *cu, void *dx, const void *const *dx_s, sg_dtype dt, size_t N,
                        size_t H, size_t K)
{
    size_t n;
    if (!cu || !dx || !dx_s || K == 0 || !sg_cu_dtype_ok(dt) || !sg_cu_mul_ok(N, H, &n))
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    SG_CU_DISPATCH(dt, T,
                   SG_LAUNCH(k_combine<T>, sg_cu_blocks(n, THREADS), THREADS, cu->stream, (T *)dx,
                             (const T *)NULL, dx_s, (const float *)NULL, N, H, K));
    return sg_cu_launch_status();
}

/* dst[slots[r]] = src[r] for n floats (a group's dtopw back into slot order). */
__global__ void k_scatter_f32(float *dst, const float *src, const int32_t *slots, size_t n)
{
    SG_GRID_STRIDE(r, n)
    dst[(size_t)slots[r]] = src[r];
}

int sg_cu_moe_scatter_slots(const sg_cu *cu, float *dst, const float *src, const int32_t *slots,
                            size_t n)
{
    if (!cu || !dst || !src || !slots)
        return SG_EINVAL;
    if (n == 0)
        return SG_OK;
    SG_LAUNCH(k_scatter_f32, sg_cu_blocks(n, THREADS), THREADS, cu->stream, dst, src, slots, n);
    return sg_cu_launch_status();
}
