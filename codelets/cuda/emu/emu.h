/* emu.h - the CUDA names that codelets/cuda/ uses, emulated on the CPU.
 *
 * Included by codelets/cuda/cuda_compat.h when SG_CUDA_EMU is defined, so
 * that every .cu file also builds with a host C++17 compiler and CI without
 * a GPU runs the real kernel code. Nothing here depends on CUDA headers.
 *
 * The execution model (emu.cc):
 * - A launch runs synchronously, before sg_emu_launch returns: the blocks
 *   one after the other (x fastest, then y, then z); inside a block one
 *   cooperative fiber per thread. Threads run round-robin in threadIdx
 *   order, each until it calls __syncthreads() or returns; a barrier
 *   releases once every thread still running has reached it. A barrier that
 *   only some threads reach while the others have returned is a kernel bug
 *   (undefined in CUDA): the emulator says so on stderr and aborts.
 * - Device memory is host memory. Fresh allocations and each block's
 *   dynamic shared memory are filled with 0xFF bytes (NaN as float, bf16,
 *   fp16 and double) so that reading what was never written shows in tests;
 *   device allocations and dynamic shared memory end at a guard page, so a
 *   kernel that runs off their end faults.
 * - __shared__ variables are static thread_local: one object shared by all
 *   threads of a block (blocks do not overlap), and one per host thread, so
 *   that two host threads may launch kernels at the same time.
 * - Streams, events and cuBLAS handles exist but everything happens at the
 *   call; cudaGetLastError reports launch and API errors as CUDA does.
 */
#ifndef SG_CODELETS_CUDA_EMU_EMU_H
#define SG_CODELETS_CUDA_EMU_EMU_H

#ifndef __cplusplus
#error "codelets/cuda/emu/emu.h is C++ (build the .cu files with g++ -std=c++17 -DSG_CUDA_EMU)"
#endif

/* <math.h> after <cmath>: libstdc++'s <math.h> puts std::isfinite, isnan,
 * isinf, ... in the global namespace, so kernels can call them unqualified
 * as CUDA device code does. */
#include <cmath>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---- qualifiers ----------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
/* One object per kernel (static) and per host thread (thread_local): every
 * thread of the running block sees the same array, as on the GPU. */
#define __shared__ static thread_local

/* ---- thread and block indices ------------------------------------------------ */

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

/* Set by the emulator for the fiber that runs; thread_local because each
 * host thread runs its own launches. */
inline thread_local uint3 threadIdx = {0, 0, 0};
inline thread_local uint3 blockIdx = {0, 0, 0};
inline thread_local dim3 blockDim = dim3(1, 1, 1);
inline thread_local dim3 gridDim = dim3(1, 1, 1);
static constexpr int warpSize = 32;

struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) int4 { int x, y, z, w; };
struct __align__(8) uint2 { unsigned x, y; };
struct __align__(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

/* ---- launching and block-level primitives ----------------------------------- */

/* Runs body once per thread of a grid x block launch (see the top of this
 * file). A bad configuration (a zero or too large dimension, more than 1024
 * threads, more dynamic shared memory than SG_EMU_MAX_DYN_SHARED) runs
 * nothing and sets the last error to cudaErrorInvalidConfiguration. */
void sg_emu_launch(dim3 grid, dim3 block, size_t dyn_smem_bytes, std::function<void()> body);

/* Launches kernel(args...) as CUDA's <<<grid, block, dyn_smem_bytes>>>
 * does: the arguments are evaluated and converted to the kernel's parameter
 * types once, at the launch, and each thread gets its own copy. (A lambda
 * that names the arguments would evaluate them once per thread, on its
 * captured copies: `&local` would be the address of a copy.) */
template <typename... Params, typename... Args>
inline void sg_emu_launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block,
                                 size_t dyn_smem_bytes, Args &&...args)
{
    static_assert(sizeof...(Params) == sizeof...(Args), "wrong number of kernel arguments");
    std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
    sg_emu_launch(grid, block, dyn_smem_bytes, [&params, kernel]() { std::apply(kernel, params); });
}

/* The running block's dynamic shared memory: dyn_smem_bytes of the launch,
 * 16-byte aligned, all bytes 0xFF when the block starts. */
void *sg_emu_dyn_shared(void);

/* The most dynamic shared memory per block: an H100's opt-in maximum. */
#define SG_EMU_MAX_DYN_SHARED ((size_t)227 * 1024)

/* Out of line on purpose: the compiler must treat it as a call that may
 * change any memory, so that kernels re-read __shared__ data after it. */
void __syncthreads(void);

/* Fibers switch only inside __syncthreads, so memory is always coherent. */
inline void __threadfence(void) {}
inline void __threadfence_block(void) {}

template <typename T> inline T __ldg(const T *p) { return *p; }

/* ---- bfloat16 and binary16 ------------------------------------------------- */

/* The 16 bits, no implicit conversions: kernels convert with sg_ld / sg_st
 * or the functions below. */
struct __align__(2) __nv_bfloat16 {
    unsigned short __x;
};
struct __align__(2) __half {
    unsigned short __x;
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __half half;

namespace sg_emu {

inline uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

inline float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rounds the significand `sig` down by `drop` bits (1..31), to nearest with
 * ties to even. The result may carry one bit further (e.g. 0x3ff -> 0x400),
 * which callers rely on to step into the next exponent or to infinity. */
inline uint32_t round_drop_bits(uint32_t sig, unsigned drop)
{
    uint32_t kept = sig >> drop;
    uint32_t dropped = sig & ((1u << drop) - 1u);
    uint32_t half = 1u << (drop - 1);
    if (dropped > half || (dropped == half && (kept & 1u)))
        kept++;
    return kept;
}

/* bfloat16 is the upper half of a float: round the lower 16 bits away. */
inline unsigned short float_to_bf16_bits(float f)
{
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and payload top, make it quiet */
        return (unsigned short)((u >> 16) | 0x0040u);
    return (unsigned short)round_drop_bits(u, 16);
}

inline float bf16_bits_to_float(unsigned short h) { return bits_float((uint32_t)h << 16); }

/* binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits. */
inline unsigned short float_to_f16_bits(float f)
{
    uint32_t u = float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t magnitude = u & 0x7fffffffu;
    if (magnitude > 0x7f800000u) /* NaN: quiet, top 10 payload bits kept */
        return (unsigned short)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
    int exponent = (int)(magnitude >> 23) - 127; /* of the float, unbiased */
    if (exponent >= 16)                          /* >= 2^16 (infinity included) */
        return (unsigned short)(sign | 0x7c00u);
    if (exponent < -25) /* below 2^-25: rounds to zero (float subnormals too) */
        return (unsigned short)sign;
    uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u; /* 24 bits */
    if (exponent >= -14) {
        /* Normal: keep 11 significant bits. The sum below lets a rounding
         * carry (0x800) raise the exponent, up to 0x7c00 = infinity. */
        uint32_t kept = round_drop_bits(significand, 13); /* 0x400 .. 0x800 */
        return (unsigned short)(sign | (((uint32_t)(exponent + 14) << 10) + kept));
    }
    /* Subnormal: whole units of 2^-24; 0x400 after rounding is the smallest
     * normal, which is also its correct encoding. */
    return (unsigned short)(sign | round_drop_bits(significand, (unsigned)(13 - 14 - exponent)));
}

inline float f16_bits_to_float(unsigned short h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu, fraction = h & 0x3ffu;
    if (exponent == 0x1f) /* infinity, NaN with its payload */
        return bits_float(sign | 0x7f800000u | (fraction << 13));
    if (exponent == 0) { /* zero or subnormal: fraction * 2^-24, exact in float */
        float magnitude = (float)fraction * 0x1p-24f;
        return sign ? -magnitude : magnitude;
    }
    return bits_float(sign | ((exponent + 112u) << 23) | (fraction << 13));
}

} // namespace sg_emu

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16{sg_emu::float_to_bf16_bits(f)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return sg_emu::bf16_bits_to_float(h.__x); }
inline __half __float2half(float f) { return __half{sg_emu::float_to_f16_bits(f)}; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline float __half2float(__half h) { return sg_emu::f16_bits_to_float(h.__x); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }

/* ---- device math that C++ lacks ------------------------------------------- */

/* glibc's <math.h> already declares __expf, __logf, ... (its internal
 * aliases, not exported by libm.so): define them with the same C linkage
 * and exception specification so the declarations agree. rsqrtf is in C23
 * and may appear there too. */
extern "C" {
inline float __expf(float x) noexcept { return expf(x); }
inline float __exp10f(float x) noexcept { return exp10f(x); }
inline float __logf(float x) noexcept { return logf(x); }
inline float __log2f(float x) noexcept { return log2f(x); }
inline float __log10f(float x) noexcept { return log10f(x); }
inline float __powf(float x, float y) noexcept { return powf(x, y); }
inline float __sinf(float x) noexcept { return sinf(x); }
inline float __cosf(float x) noexcept { return cosf(x); }
inline float __tanf(float x) noexcept { return tanf(x); }
inline float rsqrtf(float x) noexcept { return 1.0f / sqrtf(x); }
}

inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
/* Clamp to [0, 1]; NaN gives 0, as on the GPU. */
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
inline float __int_as_float(int i) { return sg_emu::bits_float((uint32_t)i); }
inline int __float_as_int(float f) { return (int)sg_emu::float_bits(f); }
inline float __uint_as_float(unsigned u) { return sg_emu::bits_float(u); }
inline unsigned __float_as_uint(float f) { return sg_emu::float_bits(f); }

/* CUDA's overloads of min and max (not templates: mixed operands convert as
 * CUDA's do, and calls CUDA finds ambiguous are ambiguous here too). Global
 * functions, so std::min / std::max are untouched. */
#define SG_EMU_MINMAX(R, A, B)                                                           \
    inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; }                         \
    inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
SG_EMU_MINMAX(int, int, int)
SG_EMU_MINMAX(unsigned, unsigned, unsigned)
SG_EMU_MINMAX(unsigned, int, unsigned)
SG_EMU_MINMAX(unsigned, unsigned, int)
SG_EMU_MINMAX(long, long, long)
SG_EMU_MINMAX(unsigned long, unsigned long, unsigned long)
SG_EMU_MINMAX(unsigned long, long, unsigned long)
SG_EMU_MINMAX(unsigned long, unsigned long, long)
SG_EMU_MINMAX(long long, long long, long long)
SG_EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
SG_EMU_MINMAX(unsigned long long, long long, unsigned long long)
SG_EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef SG_EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }

/* ---- atomics ------------------------------------------------------------ */

/* Fibers never switch inside an atomic, so within one launch a plain
 * read-modify-write would do; real atomic instructions also keep kernels
 * launched at the same time from several host threads correct. All return
 * the old value. */
namespace sg_emu {

template <typename T, typename Update> inline T atomic_update(T *address, Update update)
{
    T old, desired;
    __atomic_load(address, &old, __ATOMIC_RELAXED);
    do {
        desired = update(old);
    } while (!__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
    return old;
}

} // namespace sg_emu

inline int atomicAdd(int *p, int v)
{
    /* through unsigned: wraps on overflow as the GPU does, without UB */
    return (int)__atomic_fetch_add((unsigned *)p, (unsigned)v, __ATOMIC_RELAXED);
}
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline float atomicAdd(float *p, float v)
{
    return sg_emu::atomic_update(p, [v](float old) { return old + v; });
}
inline double atomicAdd(double *p, double v)
{
    return sg_emu::atomic_update(p, [v](double old) { return old + v; });
}
/* fp32 add, rounded once to the 16-bit type. */
inline __nv_bfloat16 atomicAdd(__nv_bfloat16 *p, __nv_bfloat16 v)
{
    return sg_emu::atomic_update(p, [v](__nv_bfloat16 old) {
        return __float2bfloat16(__bfloat162float(old) + __bfloat162float(v));
    });
}
inline __half atomicAdd(__half *p, __half v)
{
    return sg_emu::atomic_update(p, [v](__half old) {
        return __float2half(__half2float(old) + __half2float(v));
    });
}

inline int atomicSub(int *p, int v)
{
    return (int)__atomic_fetch_sub((unsigned *)p, (unsigned)v, __ATOMIC_RELAXED);
}
inline unsigned atomicSub(unsigned *p, unsigned v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }

#define SG_EMU_ATOMIC_MINMAX(T)                                                         \
    inline T atomicMax(T *p, T v)                                                       \
    {                                                                                   \
        return sg_emu::atomic_update(p, [v](T old) { return old > v ? old : v; });      \
    }                                                                                   \
    inline T atomicMin(T *p, T v)                                                       \
    {                                                                                   \
        return sg_emu::atomic_update(p, [v](T old) { return old < v ? old : v; });      \
    }
SG_EMU_ATOMIC_MINMAX(int)
SG_EMU_ATOMIC_MINMAX(unsigned)
SG_EMU_ATOMIC_MINMAX(long long)
SG_EMU_ATOMIC_MINMAX(unsigned long long)
#undef SG_EMU_ATOMIC_MINMAX

#define SG_EMU_ATOMIC_BITS(T)                                                           \
    inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }  \
    inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); } \
    inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); } \
    inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); } \
    inline T atomicCAS(T *p, T compare, T v)                                            \
    {                                                                                   \
        /* on failure `compare` receives the value found; on success it is it */       \
        __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED,            \
                                    __ATOMIC_RELAXED);                                  \
        return compare;                                                                 \
    }
SG_EMU_ATOMIC_BITS(int)
SG_EMU_ATOMIC_BITS(unsigned)
SG_EMU_ATOMIC_BITS(unsigned long long)
#undef SG_EMU_ATOMIC_BITS

inline float atomicExch(float *p, float v)
{
    float old;
    __atomic_exchange(p, &v, &old, __ATOMIC_RELAXED);
    return old;
}

/* ---- CUDA runtime subset (emu.cc) -------------------------------------------- */

/* The values are CUDA's. */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef struct CUstream_st *cudaStream_t; /* NULL (0) is the default stream */
typedef struct CUevent_st *cudaEvent_t;

#define cudaStreamDefault 0x00u
#define cudaStreamNonBlocking 0x01u
#define cudaEventDefault 0x00u
#define cudaEventDisableTiming 0x02u

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};

/* Errors: every failing call below also becomes the last error of the
 * calling host thread, as in CUDA. */
cudaError_t cudaGetLastError(void);  /* returns and clears it */
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);

/* Devices: one emulated device, 0, with an H100's limits. */
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);

/* Memory. Device allocations are 256-byte aligned, filled with 0xFF and
 * followed by a guard page; copies and fills check that device ranges lie
 * inside one allocation and that the kind matches the pointers
 * (cudaMemcpyDefault accepts any). A NULL pointer with 0 bytes is fine. */
cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocAsync(void **ptr, size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
cudaError_t cudaMemset(void *ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream = 0);

/* The typed overloads of cuda_runtime.h: cudaMalloc(&float_ptr, bytes). */
template <typename T> inline cudaError_t cudaMalloc(T **ptr, size_t bytes)
{
    return cudaMalloc((void **)ptr, bytes);
}
template <typename T> inline cudaError_t cudaMallocAsync(T **ptr, size_t bytes, cudaStream_t stream)
{
    return cudaMallocAsync((void **)ptr, bytes, stream);
}
template <typename T> inline cudaError_t cudaMallocHost(T **ptr, size_t bytes, unsigned flags = 0)
{
    (void)flags;
    return cudaMallocHost((void **)ptr, bytes);
}

/* Kernel attributes: accepted (within the device's limits) and ignored. */
template <typename T> inline cudaError_t cudaFuncSetAttribute(T *kernel, enum cudaFuncAttribute attr, int value)
{
    (void)kernel;
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        (size_t)value > SG_EMU_MAX_DYN_SHARED)
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

/* Streams and events: handles only, the work is already done. */
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
/* Milliseconds between the host times at which the two were recorded. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

/* ---- cuBLAS subset (emu.cc) ----------------------------------------------- */

/* The values are cuBLAS's. */
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef struct cublasContext *cublasHandle_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
} cublasMath_t;

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14,
} cudaDataType;
typedef enum cudaDataType_t cudaDataType_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

typedef enum {
    CUBLAS_GEMM_DEFAULT = -1,
    CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99,
} cublasGemmAlgo_t;

cublasStatus_t cublasCreate(cublasHandle_t *handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode); /* no effect */
const char *cublasGetStatusString(cublasStatus_t status);

/* cuBLAS semantics, column-major: C (m x n) = alpha op(A) op(B) + beta C with
 * op(A) m x k (A itself when transa is N, lda >= m; else A^T, A stored k x m,
 * lda >= k) and op(B) k x n likewise. Only CUBLAS_COMPUTE_32F, with alpha
 * and beta host floats, A and B of one type among 32F, 16F, 16BF and C of
 * that type or 32F. Products are summed in double and each output is
 * rounded once to fp32, then to Ctype; with beta == 0, C is not read; with
 * alpha == 0 or k == 0, A and B are not read (as in the reference BLAS). */
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo);
/* batchCount products; matrix i of A starts strideA elements of Atype after
 * matrix i-1 (likewise B and C; a stride may be 0). */
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long strideB,
                                          const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo);

#endif /* SG_CODELETS_CUDA_EMU_EMU_H */
