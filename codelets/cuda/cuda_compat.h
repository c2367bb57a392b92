/* cuda_compat.h - the one CUDA header the .cu files of codelets/cuda/
 * include, so that each builds two ways:
 *
 * - nvcc (SG_CUDA_EMU undefined): the CUDA runtime, bf16/fp16 types and
 *   cuBLAS, as usual;
 * - a host C++ compiler with -DSG_CUDA_EMU: codelets/cuda/emu/emu.h provides
 *   the same names on the CPU (kernels run as cooperative fibers, one per
 *   thread of a block, blocks one after the other), so CI without a GPU
 *   runs the real kernel code against the CPU kernels.
 *
 * Rules for kernel code, so that both builds mean the same thing:
 * - launch with SG_LAUNCH / SG_LAUNCH_SMEM, never <<< >>> directly; a
 *   template kernel with several arguments (kern<T, 64>) goes through a
 *   typed function pointer, since the macro would split at its commas;
 * - dynamic shared memory through SG_DYN_SHARED; static __shared__ arrays
 *   only inside kernels;
 * - synchronise with __syncthreads() only (no warp shuffles, no
 *   __syncwarp, no cooperative groups, no warp-synchronous tricks): the
 *   block reductions below do it through shared memory;
 * - loads and stores of tensor elements through sg_ld / sg_st, math in float;
 * - atomics: atomicAdd on float, double, int, and sg_atomic_add on a T.
 */
#ifndef SG_CODELETS_CUDA_COMPAT_H
#define SG_CODELETS_CUDA_COMPAT_H

#ifdef SG_CUDA_EMU
#include "codelets/cuda/emu/emu.h"
#else
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include <stdint.h>

#include "codelets/cuda/cuda_ops.h"

typedef __nv_bfloat16 sg_bf16;
typedef __half sg_f16;

/* Whether dt is a storage dtype the kernels take (f32, bf16, f16). */
static inline int sg_cu_dtype_ok(sg_dtype dt)
{
    return dt == SG_F32 || dt == SG_BF16 || dt == SG_F16;
}

/* The cuBLAS data type of a storage dtype (f32, bf16, f16). */
static inline cudaDataType sg_cu_blas_type(sg_dtype dt)
{
    return dt == SG_BF16 ? CUDA_R_16BF : dt == SG_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* ---- launching ------------------------------------------------------------ */

#ifdef SG_CUDA_EMU
#define SG_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...) \
    ((void)(stream),                                           \
     sg_emu_launch_kernel(kernel, dim3(grid), dim3(block), (size_t)(smem), __VA_ARGS__))
#define SG_DYN_SHARED(type, name) type *name = (type *)sg_emu_dyn_shared()
#else
#define SG_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...) \
    kernel<<<(grid), (block), (smem), (cudaStream_t)(stream)>>>(__VA_ARGS__)
#define SG_DYN_SHARED(type, name)                                \
    extern __shared__ __align__(16) unsigned char name##_raw_[]; \
    type *name = (type *)name##_raw_
#endif
#define SG_LAUNCH(kernel, grid, block, stream, ...) \
    SG_LAUNCH_SMEM(kernel, grid, block, 0, stream, __VA_ARGS__)

/* SG_OK, or SG_EIO when the last launch failed. */
static inline int sg_cu_launch_status(void)
{
    return cudaGetLastError() == cudaSuccess ? SG_OK : SG_EIO;
}

/* Blocks of `threads` covering n items, capped for grid-stride loops. */
static inline unsigned sg_cu_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    if (b == 0)
        b = 1;
    return b > 65535u * 8u ? 65535u * 8u : (unsigned)b;
}

/* Grid-stride loop: i = this thread's first flat index, step = all threads
 * of the grid. */
#define SG_GRID_STRIDE(i, n)                                                \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

#define SG_CU_MAX_ROW_BLOCKS (65535u * 8u)

/* a * b without size_t overflow (sizes come from configs, not from us). */
static inline int sg_cu_mul_ok(size_t a, size_t b, size_t *out)
{
    if (b && a > SIZE_MAX / b)
        return 0;
    *out = a * b;
    return 1;
}

/* Threads of a block that strides over a row of C elements: a whole number
 * of warps, no more than the row needs, at most 256. */
static inline unsigned sg_cu_row_threads(size_t C)
{
    size_t t = (C + 31) / 32 * 32;
    return t == 0 ? 32u : t > 256 ? 256u : (unsigned)t;
}

/* Blocks of a kernel with one block per row (grid-stride over N rows). */
static inline unsigned sg_cu_row_blocks(size_t N)
{
    return N == 0 ? 1u : N > SG_CU_MAX_ROW_BLOCKS ? SG_CU_MAX_ROW_BLOCKS : (unsigned)N;
}

/* ---- element access: storage type T, math in float ------------------------ */

__host__ __device__ static inline float sg_ld(float x)
{
    return x;
}
__host__ __device__ static inline float sg_ld(sg_bf16 x)
{
    return __bfloat162float(x);
}
__host__ __device__ static inline float sg_ld(sg_f16 x)
{
    return __half2float(x);
}

template <typename T> __host__ __device__ static inline T sg_st(float x);
template <> __host__ __device__ inline float sg_st<float>(float x)
{
    return x;
}
template <> __host__ __device__ inline sg_bf16 sg_st<sg_bf16>(float x)
{
    return __float2bfloat16(x);
}
template <> __host__ __device__ inline sg_f16 sg_st<sg_f16>(float x)
{
    return __float2half(x);
}

/* *p += x for a stored element (fp32 add, rounded once to T). */
__device__ static inline void sg_atomic_add(float *p, float x)
{
    atomicAdd(p, x);
}
__device__ static inline void sg_atomic_add(sg_bf16 *p, float x)
{
    atomicAdd(p, __float2bfloat16(x));
}
__device__ static inline void sg_atomic_add(sg_f16 *p, float x)
{
    atomicAdd(p, __float2half(x));
}

/* Runs the statements after T with T the storage type of dt; SG_EINVAL for
 * other dtypes. */
#define SG_CU_DISPATCH(dt, T, ...) \
    switch (dt) {                  \
    case SG_F32: {                 \
        typedef float T;           \
        __VA_ARGS__;               \
    } break;                       \
    case SG_BF16: {                \
        typedef sg_bf16 T;         \
        __VA_ARGS__;               \
    } break;                       \
    case SG_F16: {                 \
        typedef sg_f16 T;          \
        __VA_ARGS__;               \
    } break;                       \
    default: return SG_EINVAL;     \
    }

/* ---- block reductions (shared memory and __syncthreads only) -------------- */

/* op over the values of all threads of a 1-D block of at most 1024
 * threads, combined as a pairwise tree in a fixed order (the result does not
 * depend on timing); every thread gets the result. Must be called by all
 * threads of the block (it synchronises); `red` is __shared__ scratch of
 * blockDim.x values, reusable right after the call returns. */
template <typename V, typename Op> __device__ static inline V sg_block_reduce(V v, V *red, Op op)
{
    const unsigned tid = threadIdx.x, n = blockDim.x;
    red[tid] = v;
    __syncthreads();
    for (unsigned s = 1; s < n; s <<= 1) {
        if (tid % (2 * s) == 0 && tid + s < n)
            red[tid] = op(red[tid], red[tid + s]);
        __syncthreads();
    }
    V r = red[0];
    __syncthreads();
    return r;
}

struct sg_op_add {
    template <typename V> __device__ V operator()(V a, V b) const
    {
        return a + b;
    }
};
struct sg_op_max {
    __device__ float operator()(float a, float b) const
    {
        return fmaxf(a, b);
    }
};

/* The block's sum or max (floats), and its sum in double (gradient norms). */
__device__ static inline float sg_block_sum(float v, float *red)
{
    return sg_block_reduce(v, red, sg_op_add());
}

__device__ static inline float sg_block_max(float v, float *red)
{
    return sg_block_reduce(v, red, sg_op_max());
}

__device__ static inline double sg_block_sum_d(double v, double *red)
{
    return sg_block_reduce(v, red, sg_op_add());
}

#endif /* SG_CODELETS_CUDA_COMPAT_H */
