/* emu.cc - the runtime of the CUDA emulator (see emu.h): kernel launches on
 * cooperative fibers, the CUDA runtime subset and the cuBLAS GEMMs.
 */

/* With _FORTIFY_SOURCE, glibc's _longjmp checks that it jumps up its own
 * stack and aborts otherwise ("longjmp causes uninitialized stack frame");
 * the fiber switches below jump between stacks on purpose. */
#undef _FORTIFY_SOURCE

#include "codelets/cuda/emu/emu.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace {

/* ---- errors ----------------------------------------------------------------- */

thread_local cudaError_t last_error = cudaSuccess;

/* Records a failure as the calling thread's last error; returns it. */
cudaError_t fail(cudaError_t error)
{
    last_error = error;
    return error;
}

[[noreturn]] void die(const char *what)
{
    fprintf(stderr, "sg_emu: %s\n", what);
    abort();
}

size_t page_size()
{
    static const size_t bytes = (size_t)sysconf(_SC_PAGESIZE);
    return bytes;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* Reserves `usable` bytes followed by one inaccessible page; returns the
 * mapping (guard page included: `usable` must be a multiple of the page
 * size), or NULL. */
unsigned char *map_with_guard_after(size_t usable)
{
    void *p = mmap(nullptr, usable + page_size(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return nullptr;
    unsigned char *base = (unsigned char *)p;
    if (mprotect(base + usable, page_size(), PROT_NONE) != 0) {
        munmap(p, usable + page_size());
        return nullptr;
    }
    return base;
}

/* ---- launches -------------------------------------------------------------- */

constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockZ = 64;
constexpr unsigned kMaxGridX = 0x7fffffffu, kMaxGridYZ = 65535;
/* Kernels keep small per-thread arrays on their stack; 512 KiB is ample and
 * only the pages a fiber touches are ever committed. */
constexpr size_t kFiberStackBytes = 512 * 1024;

/* A suspended fiber or scheduler. Fibers are created with makecontext, but
 * switched with _setjmp / _longjmp: swapcontext also saves and restores the
 * signal mask, a system call each way that made barrier-heavy kernels some
 * 30 times slower. */
struct Context {
    jmp_buf registers;
};

/* Saves the caller in `from` and resumes `to`; returns when something
 * resumes `from`. Not inlined: its frame is what _longjmp comes back to. */
__attribute__((noinline)) void switch_context(Context &from, Context &to)
{
    if (_setjmp(from.registers) == 0)
        _longjmp(to.registers, 1);
}

/* A fiber runs threads of the current block, one at a time: when its thread
 * returns it starts the next thread that has not started yet, so a kernel
 * without barriers runs a whole block on one fiber with no switch at all.
 * A fiber whose thread waits at a barrier keeps it until the barrier opens. */
struct Fiber {
    Context context;
    unsigned char *stack_mapping; /* guard page first, then the stack */
    int thread;                   /* linear index in the block, or -1: idle */
};

/* What this host thread's launch is doing; fibers belong to the host thread
 * that created them and are reused by all its later launches. */
struct Launcher {
    Context scheduler;                          /* the launching code */
    ucontext_t creator;                         /* new_fiber, while it starts one */
    std::vector<std::unique_ptr<Fiber>> fibers; /* all of them, for cleanup */
    std::vector<Fiber *> idle;
    std::vector<Fiber *> waiting, resuming;     /* at the barrier, in thread order */
    Fiber *running = nullptr;                   /* non-NULL while a kernel runs */
    const std::function<void()> *body = nullptr;
    unsigned threads_per_block = 0;
    unsigned next_thread = 0;                   /* first thread not started yet */
    unsigned finished = 0;                      /* threads of the block that returned */
    /* Dynamic shared memory: the block's bytes end where the guard page
     * starts, so reading or writing past them faults. */
    unsigned char *dyn_mapping = nullptr;
    unsigned char *dyn_shared = nullptr;

    ~Launcher()
    {
        for (auto &f : fibers)
            munmap(f->stack_mapping, page_size() + kFiberStackBytes);
        if (dyn_mapping)
            munmap(dyn_mapping, round_up(SG_EMU_MAX_DYN_SHARED, page_size()) + page_size());
    }
};

thread_local Launcher launcher;

void set_thread_index(unsigned linear)
{
    threadIdx.x = linear % blockDim.x;
    threadIdx.y = linear / blockDim.x % blockDim.y;
    threadIdx.z = linear / (blockDim.x * blockDim.y);
}

/* The life of a fiber once started: run the thread it is given, then the
 * next ones not started yet, then park as idle until the scheduler hands it
 * another thread (of this block, a later one or a later launch). */
[[noreturn]] void fiber_main()
{
    Launcher &l = launcher; /* fibers never change host thread */
    Fiber *self = l.running;
    for (;;) {
        (*l.body)();
        l.finished++;
        if (l.next_thread < l.threads_per_block) {
            self->thread = (int)l.next_thread++;
            set_thread_index((unsigned)self->thread);
            continue;
        }
        self->thread = -1;
        switch_context(self->context, l.scheduler);
    }
}

/* Where makecontext starts a fiber (it takes no arguments: the fiber is the
 * thread's Launcher::running, so nothing 64-bit has to pass through int
 * arguments). It records a resume point and goes straight back to new_fiber;
 * the first switch_context to the fiber lands here and runs it. */
void fiber_start()
{
    Launcher &l = launcher;
    if (_setjmp(l.running->context.registers) == 0)
        setcontext(&l.creator);
    fiber_main();
}

Fiber *new_fiber(Launcher &l)
{
    auto f = std::make_unique<Fiber>();
    f->thread = -1;
    /* The guard page goes below the stack, which grows down. */
    void *p = mmap(nullptr, page_size() + kFiberStackBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED || mprotect(p, page_size(), PROT_NONE) != 0)
        die("cannot map a fiber stack");
    f->stack_mapping = (unsigned char *)p;
    ucontext_t start;
    if (getcontext(&start) != 0)
        die("getcontext failed");
    start.uc_stack.ss_sp = f->stack_mapping + page_size();
    start.uc_stack.ss_size = kFiberStackBytes;
    start.uc_link = nullptr;
    makecontext(&start, fiber_start, 0);
    Fiber *raw = f.get();
    l.fibers.push_back(std::move(f));
    Fiber *was_running = l.running;
    l.running = raw;
    swapcontext(&l.creator, &start); /* returns once fiber_start has its resume point */
    l.running = was_running;
    return raw;
}

/* Runs f's thread until it reaches a barrier or returns, then files the
 * fiber as waiting or idle. */
void resume(Launcher &l, Fiber *f)
{
    l.running = f;
    set_thread_index((unsigned)f->thread);
    switch_context(l.scheduler, f->context);
    if (f->thread >= 0)
        l.waiting.push_back(f);
    else
        l.idle.push_back(f);
}

void run_block(Launcher &l, size_t dyn_smem_bytes)
{
    memset(l.dyn_shared, 0xff, round_up(dyn_smem_bytes, 16));
    l.next_thread = 0;
    l.finished = 0;
    l.waiting.clear();
    for (;;) {
        /* One round: the threads at the barrier in threadIdx order, then
         * (first round only) the threads not started yet. */
        l.resuming.swap(l.waiting);
        l.waiting.clear();
        for (Fiber *f : l.resuming)
            resume(l, f);
        while (l.next_thread < l.threads_per_block) {
            Fiber *f;
            if (l.idle.empty()) {
                f = new_fiber(l);
            } else {
                f = l.idle.back();
                l.idle.pop_back();
            }
            f->thread = (int)l.next_thread++;
            resume(l, f);
        }
        if (l.waiting.empty())
            return; /* every thread returned */
        if (l.finished > 0) {
            /* Every thread has run until it waits or returns: the ones that
             * returned will never reach this barrier. */
            fprintf(stderr,
                    "sg_emu: __syncthreads reached by %zu of %u threads of block (%u,%u,%u) "
                    "in a kernel (the others returned): a divergent barrier\n",
                    l.waiting.size(), l.threads_per_block, blockIdx.x, blockIdx.y,
                    blockIdx.z);
            abort();
        }
    }
}

bool valid_launch(dim3 grid, dim3 block, size_t dyn_smem_bytes)
{
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 ||
        block.z == 0)
        return false;
    if (grid.x > kMaxGridX || grid.y > kMaxGridYZ || grid.z > kMaxGridYZ)
        return false;
    if (block.x > kMaxThreadsPerBlock || block.y > kMaxThreadsPerBlock || block.z > kMaxBlockZ)
        return false;
    if ((unsigned long long)block.x * block.y * block.z > kMaxThreadsPerBlock)
        return false;
    return dyn_smem_bytes <= SG_EMU_MAX_DYN_SHARED;
}

/* ---- device memory ---------------------------------------------------------- */

enum class MemoryKind { host, device, pinned };

struct Allocation {
    size_t bytes;
    MemoryKind kind;
    unsigned char *mapping; /* device: the mmap'd region; pinned: NULL */
    size_t mapping_bytes;
};

/* Every live cudaMalloc / cudaMallocHost allocation, by start address. Never
 * destroyed: static destructors of other objects may still free memory. */
struct Registry {
    std::mutex mutex;
    std::map<uintptr_t, Allocation> allocations;
};

Registry &registry()
{
    static Registry *r = new Registry;
    return *r;
}

/* What [p, p + bytes) is: inside one allocation (its kind), plain host
 * memory, or (false) starting inside an allocation and running past its end. */
bool classify(const void *p, size_t bytes, MemoryKind *kind)
{
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    uintptr_t a = (uintptr_t)p;
    *kind = MemoryKind::host;
    auto it = r.allocations.upper_bound(a);
    if (it == r.allocations.begin())
        return true;
    --it;
    size_t offset = a - it->first;
    if (offset >= it->second.bytes)
        return true;
    *kind = it->second.kind;
    return bytes <= it->second.bytes - offset;
}

cudaError_t allocate_device(void **ptr, size_t bytes)
{
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (bytes == 0)
        return cudaSuccess;
    /* The allocation ends as close to the guard page as 256-byte alignment
     * allows, so that kernels writing past it fault. */
    size_t padded = round_up(bytes, 256);
    size_t usable = round_up(padded, page_size());
    if (padded < bytes || usable < padded)
        return fail(cudaErrorMemoryAllocation);
    unsigned char *mapping = map_with_guard_after(usable);
    if (!mapping)
        return fail(cudaErrorMemoryAllocation);
    unsigned char *p = mapping + (usable - padded);
    memset(p, 0xff, padded); /* uninitialised device memory reads as NaN */
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.allocations[(uintptr_t)p] = Allocation{bytes, MemoryKind::device, mapping, usable + page_size()};
    *ptr = p;
    return cudaSuccess;
}

cudaError_t release(void *ptr, MemoryKind expected)
{
    if (!ptr)
        return cudaSuccess;
    Allocation a;
    {
        Registry &r = registry();
        std::lock_guard<std::mutex> lock(r.mutex);
        auto it = r.allocations.find((uintptr_t)ptr);
        if (it == r.allocations.end() || it->second.kind != expected)
            return fail(cudaErrorInvalidValue);
        a = it->second;
        r.allocations.erase(it);
    }
    if (a.kind == MemoryKind::device)
        munmap(a.mapping, a.mapping_bytes);
    else
        free(ptr);
    return cudaSuccess;
}

const char *kind_name(MemoryKind k)
{
    return k == MemoryKind::device ? "device" : k == MemoryKind::pinned ? "pinned host" : "host";
}

cudaError_t copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    if (bytes == 0)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue);
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection);
    MemoryKind d, s;
    if (!classify(dst, bytes, &d) || !classify(src, bytes, &s)) {
        fprintf(stderr, "sg_emu: cudaMemcpy of %zu bytes runs past the end of an allocation\n",
                bytes);
        return fail(cudaErrorInvalidValue);
    }
    bool dst_device = d == MemoryKind::device, src_device = s == MemoryKind::device;
    bool ok = kind == cudaMemcpyDefault ||
              (kind == cudaMemcpyHostToHost && !dst_device && !src_device) ||
              (kind == cudaMemcpyHostToDevice && dst_device && !src_device) ||
              (kind == cudaMemcpyDeviceToHost && !dst_device && src_device) ||
              (kind == cudaMemcpyDeviceToDevice && dst_device && src_device);
    if (!ok) {
        /* Undefined in CUDA, and a crash on a GPU when a host pointer is
         * used as a device one: refuse it here too. */
        fprintf(stderr, "sg_emu: cudaMemcpy kind %d from %s to %s memory\n", (int)kind,
                kind_name(s), kind_name(d));
        return fail(cudaErrorInvalidValue);
    }
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t fill(void *ptr, int value, size_t bytes)
{
    if (bytes == 0)
        return cudaSuccess;
    MemoryKind k;
    if (!ptr || !classify(ptr, bytes, &k) || k == MemoryKind::host) {
        fprintf(stderr, "sg_emu: cudaMemset of %zu bytes outside device memory\n", bytes);
        return fail(cudaErrorInvalidValue);
    }
    memset(ptr, value, bytes);
    return cudaSuccess;
}

} // namespace

/* ---- launches ---------------------------------------------------------------- */

void sg_emu_launch(dim3 grid, dim3 block, size_t dyn_smem_bytes, std::function<void()> body)
{
    Launcher &l = launcher;
    if (l.running)
        die("a kernel launched a kernel (dynamic parallelism is not emulated)");
    if (!valid_launch(grid, block, dyn_smem_bytes)) {
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    if (!l.dyn_mapping) {
        size_t usable = round_up(SG_EMU_MAX_DYN_SHARED, page_size());
        l.dyn_mapping = map_with_guard_after(usable);
        if (!l.dyn_mapping)
            die("cannot map dynamic shared memory");
    }
    l.dyn_shared = l.dyn_mapping + round_up(SG_EMU_MAX_DYN_SHARED, page_size()) -
                   round_up(dyn_smem_bytes, 16);
    l.body = &body;
    l.threads_per_block = block.x * block.y * block.z;
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = uint3{x, y, z};
                run_block(l, dyn_smem_bytes);
            }
    l.running = nullptr;
    l.body = nullptr;
}

void *sg_emu_dyn_shared(void)
{
    if (!launcher.running)
        die("dynamic shared memory used outside a kernel");
    return launcher.dyn_shared;
}

void __syncthreads(void)
{
    Launcher &l = launcher;
    if (!l.running)
        die("__syncthreads called outside a kernel");
    /* Back to the scheduler, which resumes this fiber once every thread of
     * the block waits here. */
    switch_context(l.running->context, l.scheduler);
}

/* ---- runtime: errors and device ----------------------------------------------- */

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    }
    return "unrecognized error code";
}

const char *cudaGetErrorName(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    }
    return "cudaErrorUnknown";
}

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }

cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return fail(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (!value)
        return fail(cudaErrorInvalidValue);
    if (device != 0)
        return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = (int)kMaxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; break;
    case cudaDevAttrWarpSize: *value = warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)SG_EMU_MAX_DYN_SHARED; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

/* ---- runtime: memory --------------------------------------------------------- */

cudaError_t cudaMalloc(void **ptr, size_t bytes) { return allocate_device(ptr, bytes); }
cudaError_t cudaFree(void *ptr) { return release(ptr, MemoryKind::device); }

cudaError_t cudaMallocAsync(void **ptr, size_t bytes, cudaStream_t)
{
    return allocate_device(ptr, bytes);
}

cudaError_t cudaFreeAsync(void *ptr, cudaStream_t) { return release(ptr, MemoryKind::device); }

cudaError_t cudaMallocHost(void **ptr, size_t bytes)
{
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (bytes == 0)
        return cudaSuccess;
    void *p;
    if (posix_memalign(&p, 256, bytes) != 0)
        return fail(cudaErrorMemoryAllocation);
    memset(p, 0xff, bytes);
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.allocations[(uintptr_t)p] = Allocation{bytes, MemoryKind::pinned, nullptr, 0};
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) { return release(ptr, MemoryKind::pinned); }

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    return copy(dst, src, bytes, kind);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t)
{
    return copy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void *ptr, int value, size_t bytes) { return fill(ptr, value, bytes); }

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t)
{
    return fill(ptr, value, bytes);
}

/* ---- runtime: streams and events ---------------------------------------------- */

struct CUstream_st {
    unsigned flags;
};

struct CUevent_st {
    bool recorded;
    std::chrono::steady_clock::time_point when;
};

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags)
{
    if (!stream || (flags & ~cudaStreamNonBlocking))
        return fail(cudaErrorInvalidValue);
    *stream = new (std::nothrow) CUstream_st{flags};
    return *stream ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    if (!stream)
        return fail(cudaErrorInvalidResourceHandle);
    delete stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned)
{
    return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags)
{
    if (!event || (flags & ~(cudaEventDisableTiming | 0x01u | 0x04u)))
        return fail(cudaErrorInvalidValue);
    *event = new (std::nothrow) CUevent_st{false, {}};
    return *event ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t)
{
    if (!event)
        return fail(cudaErrorInvalidResourceHandle);
    event->recorded = true;
    event->when = std::chrono::steady_clock::now();
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms)
        return fail(cudaErrorInvalidValue);
    if (!start || !end || !start->recorded || !end->recorded)
        return fail(cudaErrorInvalidResourceHandle);
    *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    if (!event)
        return fail(cudaErrorInvalidResourceHandle);
    delete event;
    return cudaSuccess;
}

/* ---- cuBLAS ------------------------------------------------------------------ */

struct cublasContext {
    cudaStream_t stream;
};

cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new (std::nothrow) cublasContext{nullptr};
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream)
        return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t)
{
    return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown error";
}

namespace {

size_t element_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

float load_element(const void *base, cudaDataType t, size_t i)
{
    switch (t) {
    case CUDA_R_16F: return __half2float(((const __half *)base)[i]);
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)base)[i]);
    default: return ((const float *)base)[i];
    }
}

void store_element(void *base, cudaDataType t, size_t i, float v)
{
    switch (t) {
    case CUDA_R_16F: ((__half *)base)[i] = __float2half(v); break;
    case CUDA_R_16BF: ((__nv_bfloat16 *)base)[i] = __float2bfloat16(v); break;
    default: ((float *)base)[i] = v; break;
    }
}

bool is_storage_type(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

/* The type combinations cuBLAS accepts with CUBLAS_COMPUTE_32F among ours. */
bool supported_types(cudaDataType a, cudaDataType b, cudaDataType c)
{
    if (!is_storage_type(a) || b != a || !is_storage_type(c))
        return false;
    return c == a || c == CUDA_R_32F;
}

/* sum a[p] b[p] in double (each product is exact), in four interleaved
 * partial sums: independent additions run several times faster. */
double dot(const float *a, const float *b, size_t k)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t p = 0;
    for (; p + 4 <= k; p += 4) {
        s0 += (double)a[p] * b[p];
        s1 += (double)a[p + 1] * b[p + 1];
        s2 += (double)a[p + 2] * b[p + 2];
        s3 += (double)a[p + 3] * b[p + 3];
    }
    for (; p < k; p++)
        s0 += (double)a[p] * b[p];
    return (s0 + s1) + (s2 + s3);
}

/* One product C = alpha op(A) op(B) + beta C (arguments already checked). */
void gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha, const void *A,
          cudaDataType a_type, size_t lda, const void *B, cudaDataType b_type, size_t ldb,
          float beta, void *C, cudaDataType c_type, size_t ldc, std::vector<float> &a_rows,
          std::vector<float> &b_column)
{
    /* C = beta C alone; beta == 0 writes zeros without reading C (NaN there
     * must not survive). */
    auto epilogue = [&](size_t i, size_t j, double product) {
        double r = product;
        if (beta != 0.0f)
            r += (double)beta * load_element(C, c_type, i + j * ldc);
        store_element(C, c_type, i + j * ldc, (float)r);
    };
    if (k == 0 || alpha == 0.0f) {
        for (size_t j = 0; j < n; j++)
            for (size_t i = 0; i < m; i++)
                epilogue(i, j, 0.0);
        return;
    }
    /* op(A) row by row and op(B) one column at a time, as contiguous floats,
     * so the dot products below read memory in order. */
    a_rows.resize(m * k);
    for (size_t i = 0; i < m; i++)
        for (size_t p = 0; p < k; p++)
            a_rows[i * k + p] = load_element(A, a_type, trans_a ? p + i * lda : i + p * lda);
    b_column.resize(k);
    for (size_t j = 0; j < n; j++) {
        for (size_t p = 0; p < k; p++)
            b_column[p] = load_element(B, b_type, trans_b ? j + p * ldb : p + j * ldb);
        for (size_t i = 0; i < m; i++) {
            epilogue(i, j, (double)alpha * dot(&a_rows[i * k], b_column.data(), k));
        }
    }
}

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

} // namespace

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long strideB,
                                          const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (computeType != CUBLAS_COMPUTE_32F || !supported_types(Atype, Btype, Ctype))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* CUBLAS_OP_C is CUBLAS_OP_T for real types. */
    bool trans_a = transa != CUBLAS_OP_N, trans_b = transb != CUBLAS_OP_N;
    if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 || batchCount < 0 ||
        !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    int a_rows_stored = trans_a ? k : m, b_rows_stored = trans_b ? n : k;
    if (lda < (a_rows_stored > 1 ? a_rows_stored : 1) ||
        ldb < (b_rows_stored > 1 ? b_rows_stored : 1) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batchCount == 0)
        return CUBLAS_STATUS_SUCCESS;
    float alpha_value = *(const float *)alpha, beta_value = *(const float *)beta;
    try {
        std::vector<float> a_rows, b_column;
        for (int i = 0; i < batchCount; i++)
            gemm(trans_a, trans_b, (size_t)m, (size_t)n, (size_t)k, alpha_value,
                 (const unsigned char *)A + i * strideA * (long long)element_bytes(Atype), Atype,
                 (size_t)lda,
                 (const unsigned char *)B + i * strideB * (long long)element_bytes(Btype), Btype,
                 (size_t)ldb, beta_value,
                 (unsigned char *)C + i * strideC * (long long)element_bytes(Ctype), Ctype,
                 (size_t)ldc, a_rows, b_column);
    } catch (const std::bad_alloc &) {
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo)
{
    return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B,
                                      Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType, algo);
}
