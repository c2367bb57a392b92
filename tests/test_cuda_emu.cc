/* test_cuda_emu.cc - the CUDA emulator of codelets/cuda/emu/ (emu.h) on its
 * own: launch geometry and order, __syncthreads and block reductions, shared
 * memory, atomics, the aborts on kernel bugs, launch errors, the bf16 / fp16
 * conversions against codelets/cpu/cast.c, the runtime API and the cuBLAS
 * GEMMs against a naive reference.
 *
 * Built as C++ with -DSG_CUDA_EMU; the kernels are written the CUDA way
 * (__global__ functions launched with SG_LAUNCH / SG_LAUNCH_SMEM).
 */
#include "codelets/cuda/cuda_compat.h"

extern "C" {
#include "codelets/cpu/ops.h" /* sg_f32_to_bf16 and friends (cast.c) */
}
#include "tests/tap.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

/* ---- helpers ---------------------------------------------------------------- */

/* Deterministic test inputs (splitmix64; tests/test_util.h is C only). */
static uint64_t g_rng = 0x5eedc0ffee123457ull;

static uint64_t rng_u64(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(void) { return (double)(rng_u64() >> 11) * 0x1p-53; }

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Device copies of host vectors and back (exercising the runtime API). */
template <typename T> static T *to_device(const std::vector<T> &host)
{
    T *p = nullptr;
    if (cudaMalloc(&p, host.size() * sizeof(T)) != cudaSuccess)
        abort();
    if (cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
        abort();
    return p;
}

template <typename T> static std::vector<T> to_host(const T *device, size_t n)
{
    std::vector<T> host(n);
    if (cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
        abort();
    return host;
}

/* Runs fn in a forked child with stderr captured; reports how it ended. */
struct ChildEnd {
    int signal;    /* the signal that killed it, or 0 */
    int exit_code; /* when it exited */
    std::string err;
};

static ChildEnd run_in_child(void (*fn)(void))
{
    ChildEnd end = {0, -1, ""};
    int fds[2];
    if (pipe(fds) != 0)
        return end;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        /* no core file for the expected crash */
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        prctl(PR_SET_DUMPABLE, 0);
        fn();
        _exit(0);
    }
    close(fds[1]);
    char buf[512];
    ssize_t got;
    while ((got = read(fds[0], buf, sizeof buf)) > 0)
        end.err.append(buf, (size_t)got);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status))
        end.signal = WTERMSIG(status);
    else if (WIFEXITED(status))
        end.exit_code = WEXITSTATUS(status);
    return end;
}

/* ---- launch geometry and order ---------------------------------------------- */

struct Geometry {
    dim3 grid, block;
};

/* Each thread counts itself at its global linear index and records in which
 * order it ran; with `sync`, it also checks across two barriers that its
 * indices are restored after every switch. */
__global__ void k_cover(unsigned *hits, unsigned *order, unsigned *counter, unsigned *bad,
                        dim3 g, dim3 b, int sync)
{
    if (gridDim.x != g.x || gridDim.y != g.y || gridDim.z != g.z || blockDim.x != b.x ||
        blockDim.y != b.y || blockDim.z != b.z)
        atomicAdd(bad, 1u);
    if (blockIdx.x >= g.x || blockIdx.y >= g.y || blockIdx.z >= g.z || threadIdx.x >= b.x ||
        threadIdx.y >= b.y || threadIdx.z >= b.z)
        atomicAdd(bad, 1u);
    if (sync) {
        uint3 t = threadIdx, bl = blockIdx;
        __syncthreads();
        if (threadIdx.x != t.x || threadIdx.y != t.y || threadIdx.z != t.z || blockIdx.x != bl.x ||
            blockIdx.y != bl.y || blockIdx.z != bl.z)
            atomicAdd(bad, 1u);
        __syncthreads();
    }
    unsigned block = blockIdx.x + g.x * (blockIdx.y + g.y * blockIdx.z);
    unsigned thread = threadIdx.x + b.x * (threadIdx.y + b.y * threadIdx.z);
    unsigned linear = block * (b.x * b.y * b.z) + thread;
    atomicAdd(&hits[linear], 1u);
    order[linear] = atomicAdd(counter, 1u);
}

static void test_geometry(void)
{
    const Geometry cases[] = {
        {dim3(5), dim3(7)},
        {dim3(3, 2, 2), dim3(4, 3, 2)},
        {dim3(2, 3), dim3(16, 4)},
        {dim3(1, 1, 3), dim3(2, 2, 8)},
        {dim3(2), dim3(1024)},
        {dim3(1, 2, 1), dim3(8, 8, 16)},
    };
    for (int sync = 0; sync <= 1; sync++)
        for (const Geometry &c : cases) {
            size_t total = (size_t)c.grid.x * c.grid.y * c.grid.z * c.block.x * c.block.y * c.block.z;
            unsigned *hits = to_device(std::vector<unsigned>(total, 0));
            unsigned *order = to_device(std::vector<unsigned>(total, 0));
            unsigned *counters = to_device(std::vector<unsigned>(2, 0)); /* counter, bad */
            SG_LAUNCH(k_cover, c.grid, c.block, 0, hits, order, counters, counters + 1, c.grid,
                      c.block, sync);
            cudaError_t launch = cudaGetLastError();
            std::vector<unsigned> h = to_host(hits, total), o = to_host(order, total),
                                  k = to_host(counters, 2);
            size_t once = 0, in_order = 0;
            for (size_t i = 0; i < total; i++) {
                once += h[i] == 1;
                in_order += o[i] == i;
            }
            ok(launch == cudaSuccess && once == total && k[1] == 0 && k[0] == total,
               "grid (%u,%u,%u) x block (%u,%u,%u)%s: every thread runs once with its indices",
               c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z,
               sync ? " across barriers" : "");
            /* Not a CUDA guarantee, the emulator's documented order. */
            ok(in_order == total, "  ... blocks x fastest, threads in threadIdx order");
            cudaFree(hits);
            cudaFree(order);
            cudaFree(counters);
        }
}

/* ---- block reductions --------------------------------------------------------- */

__global__ void k_block_reduce(const float *x, float *sums, float *maxes, double *dsums)
{
    __shared__ float red[1024];
    __shared__ double red_d[1024];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    /* every thread keeps what it got, the host checks they all agree */
    sums[i] = sg_block_sum(v, red);
    maxes[i] = sg_block_max(v, red);
    dsums[i] = sg_block_sum_d((double)v * 0.25, red_d);
}

static void test_block_reductions(void)
{
    const unsigned sizes[] = {1, 7, 32, 256, 1024};
    const unsigned blocks = 3;
    for (unsigned n : sizes) {
        size_t total = (size_t)n * blocks;
        std::vector<float> x(total);
        for (size_t i = 0; i < total; i++)
            x[i] = (float)((i * 7) % 11) - 5.0f; /* integers: exact sums */
        float *dx = to_device(x), *dsum = to_device(std::vector<float>(total)),
              *dmax = to_device(std::vector<float>(total));
        double *ddsum = to_device(std::vector<double>(total));
        SG_LAUNCH(k_block_reduce, blocks, n, 0, dx, dsum, dmax, ddsum);
        cudaError_t launch = cudaGetLastError();
        std::vector<float> s = to_host(dsum, total), m = to_host(dmax, total);
        std::vector<double> d = to_host(ddsum, total);
        size_t wrong = 0;
        for (unsigned b = 0; b < blocks; b++) {
            double want_sum = 0;
            float want_max = -INFINITY;
            for (unsigned t = 0; t < n; t++) {
                want_sum += x[b * n + t];
                want_max = fmaxf(want_max, x[b * n + t]);
            }
            for (unsigned t = 0; t < n; t++) {
                size_t i = (size_t)b * n + t;
                wrong += s[i] != (float)want_sum || m[i] != want_max || d[i] != want_sum * 0.25;
            }
        }
        ok(launch == cudaSuccess && wrong == 0,
           "sg_block_sum / _max / _sum_d with blockDim %u: every thread gets the exact result", n);
        cudaFree(dx);
        cudaFree(dsum);
        cudaFree(dmax);
        cudaFree(ddsum);
    }
}

/* ---- shared memory ------------------------------------------------------------- */

/* Each block finds its dynamic shared memory all 0xFF (although the block
 * before wrote it), then writes and reads back its own pattern. */
__global__ void k_dyn_shared(unsigned words, unsigned *counts, unsigned long long *addresses)
{
    SG_DYN_SHARED(unsigned, buf);
    SG_DYN_SHARED(float, as_float);
    for (unsigned i = threadIdx.x; i < words; i += blockDim.x) {
        if (buf[i] != 0xffffffffu)
            atomicAdd(&counts[0], 1u);
        if (!isnan(as_float[i]))
            atomicAdd(&counts[1], 1u);
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < words; i += blockDim.x)
        buf[i] = blockIdx.x * 100000u + i;
    __syncthreads();
    for (unsigned i = words - 1 - threadIdx.x; i < words; i -= blockDim.x) /* others' words */
        if (buf[i] != blockIdx.x * 100000u + i)
            atomicAdd(&counts[2], 1u);
    if (threadIdx.x == 0)
        addresses[blockIdx.x] = (unsigned long long)(uintptr_t)buf;
}

/* A static __shared__ array is one object for the whole block. */
__global__ void k_static_shared(int *out)
{
    __shared__ int tile[64];
    tile[threadIdx.x] = (int)(threadIdx.x * threadIdx.x);
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}

static void test_shared_memory(void)
{
    const size_t sizes[] = {100, 48 * 1024, SG_EMU_MAX_DYN_SHARED};
    for (size_t bytes : sizes) {
        unsigned words = (unsigned)(bytes / 4), blocks = 4;
        unsigned *counts = to_device(std::vector<unsigned>(3, 0));
        unsigned long long *addresses = to_device(std::vector<unsigned long long>(blocks, 1));
        SG_LAUNCH_SMEM(k_dyn_shared, blocks, 96, bytes, 0, words, counts, addresses);
        cudaError_t launch = cudaGetLastError();
        std::vector<unsigned> c = to_host(counts, 3);
        std::vector<unsigned long long> a = to_host(addresses, blocks);
        bool aligned = true;
        for (unsigned long long p : a)
            aligned = aligned && p % 16 == 0;
        ok(launch == cudaSuccess && c[0] == 0 && c[1] == 0 && c[2] == 0 && aligned,
           "dynamic shared memory of %zu bytes: 0xFF (NaN) at each block start, per block, "
           "16-byte aligned",
           bytes);
        if (c[0] || c[1] || c[2])
            tap_diag("  %u words not 0xFF, %u not NaN, %u wrong after writing", c[0], c[1], c[2]);
        cudaFree(counts);
        cudaFree(addresses);
    }

    int *out = to_device(std::vector<int>(3 * 64, -1));
    SG_LAUNCH(k_static_shared, 3, 64, 0, out);
    std::vector<int> o = to_host(out, 3 * 64);
    size_t wrong = 0;
    for (unsigned b = 0; b < 3; b++)
        for (unsigned t = 0; t < 64; t++)
            wrong += o[b * 64 + t] != (int)((63 - t) * (63 - t));
    ok(cudaGetLastError() == cudaSuccess && wrong == 0,
       "a static __shared__ array is shared by the threads of a block");
    cudaFree(out);
}

/* ---- atomics -------------------------------------------------------------- */

struct AtomicCells {
    float f;
    double d;
    int i;
    unsigned u;
    unsigned long long ull;
    __nv_bfloat16 bf;
    __half h;
    int imax, imin;
    unsigned umax, umin;
    unsigned or_bits, and_bits;
    int cas_i;
    unsigned cas_u;
    unsigned long long cas_ull;
};

static unsigned scramble(unsigned t) { return t * 2654435761u; }

__global__ void k_atomics(AtomicCells *c, float *old_f, int *old_i)
{
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    old_f[t] = atomicAdd(&c->f, 1.0f);
    atomicAdd(&c->d, 0.5);
    old_i[t] = atomicAdd(&c->i, -3);
    atomicAdd(&c->u, 2u);
    atomicAdd(&c->ull, 1ull << 33);
    if (t < 200)
        atomicAdd(&c->bf, __float2bfloat16(1.0f));
    atomicAdd(&c->h, __float2half(0.5f));
    int v = (int)((t * 37) % 101) - 50;
    atomicMax(&c->imax, v);
    atomicMin(&c->imin, v);
    atomicMax(&c->umax, scramble(t));
    atomicMin(&c->umin, scramble(t));
    atomicOr(&c->or_bits, 1u << (t % 32));
    atomicAnd(&c->and_bits, ~(1u << (t % 32)));
    for (;;) { /* the CAS-loop idiom */
        int seen = c->cas_i;
        if (atomicCAS(&c->cas_i, seen, seen + 1) == seen)
            break;
    }
    for (;;) {
        unsigned seen = c->cas_u;
        if (atomicCAS(&c->cas_u, seen, seen + 2) == seen)
            break;
    }
    for (;;) {
        unsigned long long seen = c->cas_ull;
        if (atomicCAS(&c->cas_ull, seen, seen + (1ull << 40)) == seen)
            break;
    }
}

static void test_atomics(void)
{
    const unsigned blocks = 2, threads = 256, n = blocks * threads;
    AtomicCells init;
    memset(&init, 0, sizeof init);
    init.imax = INT32_MIN;
    init.imin = INT32_MAX;
    init.umax = 0;
    init.umin = UINT32_MAX;
    init.and_bits = 0xffffffffu;
    AtomicCells *c = to_device(std::vector<AtomicCells>(1, init));
    float *old_f = to_device(std::vector<float>(n, -1));
    int *old_i = to_device(std::vector<int>(n, 1));
    SG_LAUNCH(k_atomics, blocks, threads, 0, c, old_f, old_i);
    AtomicCells r = to_host(c, 1)[0];
    std::vector<float> of = to_host(old_f, n);
    std::vector<int> oi = to_host(old_i, n);

    std::vector<int> seen_f(n, 0), seen_i(n, 0);
    bool olds_ok = true;
    for (unsigned t = 0; t < n; t++) {
        long fi = (long)of[t], ii = -(long)oi[t] / 3;
        if (of[t] != (float)fi || fi < 0 || fi >= (long)n || oi[t] % 3 != 0 || ii < 0 ||
            ii >= (long)n) {
            olds_ok = false;
            break;
        }
        seen_f[fi]++;
        seen_i[ii]++;
    }
    for (unsigned t = 0; olds_ok && t < n; t++)
        olds_ok = seen_f[t] == 1 && seen_i[t] == 1;
    ok(r.f == (float)n && r.d == n * 0.5 && r.i == -3 * (int)n && r.u == 2 * n &&
           r.ull == (unsigned long long)n << 33,
       "atomicAdd on float, double, int, unsigned, unsigned long long");
    ok(olds_ok, "atomicAdd returns each old value once");
    ok(__bfloat162float(r.bf) == 200.0f && __half2float(r.h) == n * 0.5f,
       "atomicAdd on __nv_bfloat16 and __half");

    int imax = INT32_MIN, imin = INT32_MAX;
    unsigned umax = 0, umin = UINT32_MAX;
    for (unsigned t = 0; t < n; t++) {
        int v = (int)((t * 37) % 101) - 50;
        imax = v > imax ? v : imax;
        imin = v < imin ? v : imin;
        umax = scramble(t) > umax ? scramble(t) : umax;
        umin = scramble(t) < umin ? scramble(t) : umin;
    }
    ok(r.imax == imax && r.imin == imin && r.umax == umax && r.umin == umin,
       "atomicMax / atomicMin on int and unsigned");
    ok(r.or_bits == 0xffffffffu && r.and_bits == 0, "atomicOr / atomicAnd");
    ok(r.cas_i == (int)n && r.cas_u == 2 * n && r.cas_ull == (unsigned long long)n << 40,
       "atomicCAS loops on int, unsigned, unsigned long long");

    /* One at a time (device functions are callable on the host here). */
    int xi = 5;
    unsigned xu = 7;
    unsigned long long xl = 9;
    float xf = 1.5f;
    bool single = atomicExch(&xi, 11) == 5 && xi == 11 && atomicExch(&xu, 12u) == 7 && xu == 12 &&
                  atomicExch(&xf, 2.5f) == 1.5f && xf == 2.5f &&
                  atomicCAS(&xi, 10, 99) == 11 && xi == 11 &&   /* fails: unchanged */
                  atomicCAS(&xi, 11, 99) == 11 && xi == 99 &&   /* succeeds */
                  atomicCAS(&xu, 0u, 1u) == 12 && xu == 12 && atomicCAS(&xl, 9ull, 3ull) == 9 &&
                  xl == 3 && atomicMax(&xi, 100) == 99 && xi == 100 &&
                  atomicMin(&xu, 3u) == 12 && xu == 3 && atomicOr(&xu, 8u) == 3 && xu == 11 &&
                  atomicAnd(&xi, 0x0f) == 100 && xi == 4 && atomicAdd(&xf, 1.0f) == 2.5f;
    ok(single, "atomicExch / atomicCAS / atomicMax / atomicOr / atomicAnd return the old value");

    /* fp32 add rounded once to the type: ties to even. */
    __nv_bfloat16 b = __float2bfloat16(256.0f);
    __half h = __float2half(2048.0f);
    bool r1 = __bfloat162float(atomicAdd(&b, __float2bfloat16(1.0f))) == 256.0f &&
              __bfloat162float(b) == 256.0f; /* 257: tie, to 256 */
    bool r2 = __bfloat162float(atomicAdd(&b, __float2bfloat16(3.0f))) == 256.0f &&
              __bfloat162float(b) == 260.0f; /* 259: tie, to 260 */
    bool r3 = __half2float(atomicAdd(&h, __float2half(1.0f))) == 2048.0f &&
              __half2float(h) == 2048.0f &&
              __half2float(atomicAdd(&h, __float2half(3.0f))) == 2048.0f &&
              __half2float(h) == 2052.0f;
    ok(r1 && r2 && r3, "16-bit atomicAdd rounds the fp32 sum to nearest even");
    cudaFree(c);
    cudaFree(old_f);
    cudaFree(old_i);
}

/* ---- kernel bugs the emulator stops on -------------------------------------- */

__global__ void k_early_return(int *sink)
{
    if (threadIdx.x == 0)
        return;
    __syncthreads();
    sink[threadIdx.x] = 1;
}

__global__ void k_extra_barrier(int *sink)
{
    __syncthreads();
    if (blockIdx.x == 1 && threadIdx.x == 5 && threadIdx.y == 0)
        __syncthreads();
    sink[threadIdx.x] = 1;
}

/* A whole block leaving before the barrier is fine: no thread waits. */
__global__ void k_uniform_return(int *sink)
{
    if (blockIdx.x == 1)
        return;
    __syncthreads();
    sink[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

__global__ void k_write_at(float *p, size_t i) { p[i] = 1.0f; }

static int g_sink[4096];

static void child_early_return(void) { SG_LAUNCH(k_early_return, 2, 32, 0, g_sink); }
static void child_extra_barrier(void) { SG_LAUNCH(k_extra_barrier, dim3(2), dim3(8, 4), 0, g_sink); }

/* Past the end of an allocation of 64 floats (256 bytes, no padding). */
static void child_device_overrun(void)
{
    float *p;
    cudaMalloc(&p, 64 * sizeof(float));
    SG_LAUNCH(k_write_at, 1, 1, 0, p, (size_t)63);
    SG_LAUNCH(k_write_at, 1, 1, 0, p, (size_t)64);
}

__global__ void k_dyn_overrun(unsigned n)
{
    SG_DYN_SHARED(float, s);
    s[threadIdx.x] = 0.0f;
    if (threadIdx.x == 0)
        s[n] = 1.0f;
}

static void child_shared_overrun(void) { SG_LAUNCH_SMEM(k_dyn_overrun, 1, 32, 32 * sizeof(float), 0, 32u); }

static void test_kernel_bugs(void)
{
    ChildEnd e = run_in_child(child_early_return);
    ok(e.signal == SIGABRT &&
           e.err.find("__syncthreads reached by 31 of 32 threads of block (0,0,0)") !=
               std::string::npos,
       "a thread returning before __syncthreads aborts with a message");
    if (e.signal != SIGABRT)
        tap_diag("  signal %d, exit %d, stderr: %s", e.signal, e.exit_code, e.err.c_str());

    e = run_in_child(child_extra_barrier);
    ok(e.signal == SIGABRT &&
           e.err.find("__syncthreads reached by 1 of 32 threads of block (1,0,0)") !=
               std::string::npos,
       "one thread calling __syncthreads once more than the others aborts");
    if (e.signal != SIGABRT)
        tap_diag("  signal %d, exit %d, stderr: %s", e.signal, e.exit_code, e.err.c_str());

    int *sink = to_device(std::vector<int>(3 * 16, 0));
    SG_LAUNCH(k_uniform_return, 3, 16, 0, sink);
    std::vector<int> s = to_host(sink, 3 * 16);
    int written = 0;
    for (int v : s)
        written += v;
    ok(cudaGetLastError() == cudaSuccess && written == 2 * 16,
       "a whole block returning before __syncthreads is not divergent");
    cudaFree(sink);

    e = run_in_child(child_device_overrun);
    ok(e.signal == SIGSEGV, "a kernel writing past a cudaMalloc allocation faults");
    e = run_in_child(child_shared_overrun);
    ok(e.signal == SIGSEGV, "a kernel writing past its dynamic shared memory faults");
}

/* ---- launch errors ------------------------------------------------------------ */

__global__ void k_mark(int *ran) { ran[0] = 1; }

static void test_launch_errors(void)
{
    struct Bad {
        dim3 grid, block;
        size_t smem;
        const char *what;
    };
    const Bad cases[] = {
        {dim3(1), dim3(1025), 0, "1025 threads"},
        {dim3(1), dim3(32, 32, 2), 0, "32x32x2 threads"},
        {dim3(1), dim3(1, 1, 65), 0, "blockDim.z 65"},
        {dim3(1), dim3(0), 0, "blockDim.x 0"},
        {dim3(0), dim3(32), 0, "gridDim.x 0"},
        {dim3(1, 0), dim3(32), 0, "gridDim.y 0"},
        {dim3(1, 65536), dim3(32), 0, "gridDim.y 65536"},
        {dim3(1), dim3(32), SG_EMU_MAX_DYN_SHARED + 1, "too much dynamic shared memory"},
    };
    /* A pointer variable, not &ran: SG_LAUNCH evaluates its arguments
     * inside a [=] lambda, where &ran would be the address of a copy. */
    int ran = 0, *ran_p = &ran;
    for (const Bad &c : cases) {
        ran = 0;
        SG_LAUNCH_SMEM(k_mark, c.grid, c.block, c.smem, 0, ran_p);
        cudaError_t peek = cudaPeekAtLastError();
        cudaError_t got = cudaGetLastError();
        cudaError_t after = cudaGetLastError();
        ok(ran == 0 && peek == cudaErrorInvalidConfiguration &&
               got == cudaErrorInvalidConfiguration && after == cudaSuccess,
           "launch with %s: refused, cudaErrorInvalidConfiguration until read", c.what);
    }
    SG_LAUNCH(k_mark, dim3(1), dim3(1025), 0, ran_p);
    int failed = sg_cu_launch_status();
    SG_LAUNCH(k_mark, dim3(1), dim3(1024), 0, ran_p);
    int passed = sg_cu_launch_status();
    ok(failed == SG_EIO && passed == SG_OK && ran == 1,
       "sg_cu_launch_status: SG_EIO after a refused launch, SG_OK after a good one");
    like(cudaGetErrorString(cudaErrorInvalidConfiguration), "invalid configuration",
         "cudaGetErrorString names the error");
}

/* ---- sg_emu_launch_kernel: arguments evaluated once, like <<< >>> ---------- */

static int g_evaluations;

static int counted(int v)
{
    g_evaluations++;
    return v;
}

__global__ void k_args(int *out, size_t n, float scale)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = (int)((float)i * scale);
    n = 0; /* each thread's own copy */
}

static void test_launch_kernel(void)
{
    std::vector<int> out(100, -1);
    int first = -1;
    g_evaluations = 0;
    sg_emu_launch_kernel(k_args, dim3(4), dim3(32), 0, out.data(), counted(100), 2);
    sg_emu_launch_kernel(k_args, dim3(1), dim3(1), 0, &first, 1, 3.0f); /* &local is fine */
    bool right = first == 0;
    for (int i = 0; i < 100; i++)
        right = right && out[i] == 2 * i;
    ok(right && g_evaluations == 1,
       "sg_emu_launch_kernel evaluates the arguments once, converted to the parameter types");
}

/* ---- sg_ld / sg_st / SG_CU_DISPATCH / sg_atomic_add from cuda_compat.h ---- */

template <typename T> __global__ void k_scale_add(T *x, T *sum, size_t n, float s)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = sg_ld(x[i]) * s;
        x[i] = sg_st<T>(v);
        sg_atomic_add(sum, v);
    }
}

static int scale_add(void *x, void *sum, sg_dtype dt, size_t n, float s)
{
    SG_CU_DISPATCH(dt, T, SG_LAUNCH(k_scale_add<T>, sg_cu_blocks(n, 128), 128, 0, (T *)x,
                                    (T *)sum, n, s));
    return sg_cu_launch_status();
}

static void test_compat_helpers(void)
{
    const size_t n = 1000;
    std::vector<float> xf(n);
    std::vector<uint16_t> xb(n), xh(n);
    for (size_t i = 0; i < n; i++) {
        xf[i] = (float)(i % 9);
        xb[i] = sg_f32_to_bf16(xf[i]);
        xh[i] = sg_f32_to_f16(xf[i]);
    }
    float *df = to_device(xf), *sf = to_device(std::vector<float>(1, 0.0f));
    uint16_t *db = to_device(xb), *sb = to_device(std::vector<uint16_t>(1, 0));
    uint16_t *dh = to_device(xh), *sh = to_device(std::vector<uint16_t>(1, 0));
    int rf = scale_add(df, sf, SG_F32, n, 0.5f), rb = scale_add(db, sb, SG_BF16, n, 0.5f),
        rh = scale_add(dh, sh, SG_F16, n, 0.5f);
    std::vector<float> of = to_host(df, n);
    std::vector<uint16_t> ob = to_host(db, n), oh = to_host(dh, n);
    double want_sum = 0;
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        float v = xf[i] * 0.5f;
        want_sum += v;
        wrong += of[i] != v || ob[i] != sg_f32_to_bf16(v) || oh[i] != sg_f32_to_f16(v);
    }
    ok(rf == SG_OK && rb == SG_OK && rh == SG_OK && wrong == 0 &&
           to_host(sf, 1)[0] == (float)want_sum,
       "SG_CU_DISPATCH, sg_ld, sg_st and sg_atomic_add in a kernel, f32 / bf16 / f16");
    ok(scale_add(df, sf, SG_I32, n, 1.0f) == SG_EINVAL,
       "SG_CU_DISPATCH refuses other dtypes");
    cudaFree(df);
    cudaFree(sf);
    cudaFree(db);
    cudaFree(sb);
    cudaFree(dh);
    cudaFree(sh);
}

/* ---- device math ---------------------------------------------------------------- */

/* The CUDA math names kernels use unqualified, in a kernel. */
__global__ void k_math(float *r, size_t *z)
{
    float x = 4.0f;
    r[0] = rsqrtf(x);                                   /* 0.5 */
    r[1] = __expf(0.0f) + __logf(1.0f);                 /* 1 */
    r[2] = __fdividef(1.0f, x) + __frcp_rn(x);          /* 0.5 */
    r[3] = __int_as_float(__float_as_int(1.5f));        /* 1.5 */
    r[4] = __saturatef(2.0f) + __saturatef(-1.0f) + __saturatef(NAN); /* 1 */
    r[5] = (float)(isfinite(x) && !isfinite(INFINITY) && isnan(NAN) && isinf(-INFINITY));
    r[6] = fmaxf(x, 5.0f) + fminf(x, 5.0f) + fabsf(-1.0f) + sqrtf(x) + expf(0.0f) + logf(1.0f);
    r[7] = max(1.0f, 2.0f) + (float)max(3, 4) + (float)min(5u, 6u) + (float)min(-1, 7);
    size_t n = 10;
    z[0] = min(n, (size_t)3) + max((size_t)threadIdx.x, n); /* 13 */
    z[1] = (size_t)max(-2L, 3L) + (size_t)min(9ULL, 8ULL) + (size_t)max(1u, -1); /* 3+8+UINT_MAX */
}

static void test_math(void)
{
    std::vector<float> r(8, -1);
    std::vector<size_t> z(2, 0);
    float *rp = r.data();
    size_t *zp = z.data();
    SG_LAUNCH(k_math, 1, 1, 0, rp, zp);
    ok(r[0] == 0.5f && r[1] == 1.0f && r[2] == 0.5f && r[3] == 1.5f && r[4] == 1.0f && r[5] == 1.0f &&
           r[6] == 4 + 5 + 1 + 2 + 1 + 0 && r[7] == 2 + 4 + 5 - 1 && z[0] == 13 &&
           z[1] == 3 + 8 + (size_t)UINT32_MAX,
       "device math: rsqrtf, __expf, __fdividef, __saturatef, isfinite, min / max, ...");
}

/* ---- conversions against cast.c ----------------------------------------------- */

/* Floats that exercise every rounding path: all exponents with both signs
 * and mantissas at, around and between the rounding points of bf16 and of
 * fp16 normals and subnormals, plus a sweep of the whole bit space. */
static std::vector<float> conversion_inputs(void)
{
    std::vector<uint32_t> mantissas = {0, 1, 2, 3, 0x7fffff, 0x7ffffe, 0x400000, 0x400001, 0x3fffff};
    for (unsigned drop = 13; drop <= 24; drop++) { /* fp16: 13 (normal) .. 24 */
        uint32_t half = 1u << (drop - 1);
        for (uint32_t above : {0u, 1u, 2u, 3u, 0x155u})
            for (int32_t delta : {-1, 0, 1}) {
                uint32_t m = ((above << drop) | half) + (uint32_t)delta;
                mantissas.push_back(m & 0x7fffffu);
            }
    }
    for (uint32_t above : {0u, 1u, 2u, 0x7eu, 0x7fu}) /* bf16 drops 16 bits */
        for (int32_t delta : {-1, 0, 1})
            mantissas.push_back((((above << 16) | 0x8000u) + (uint32_t)delta) & 0x7fffffu);
    std::vector<float> v;
    g_rng = 0xc0ffee;
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t e = 0; e < 256; e++) {
            for (uint32_t m : mantissas)
                v.push_back(float_of(sign << 31 | e << 23 | m));
            for (int r = 0; r < 32; r++)
                v.push_back(float_of(sign << 31 | e << 23 | ((uint32_t)rng_u64() & 0x7fffffu)));
        }
    for (uint64_t u = 0; u < (1ull << 32); u += 4099)
        v.push_back(float_of((uint32_t)u));
    /* values named in the IEEE rules */
    for (float f : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f,
                    0x1p-14f, 0x1.ff8p-15f, 0x1.ffcp-15f, INFINITY, -INFINITY, NAN, -NAN})
        v.push_back(f);
    return v;
}

static void test_conversions(void)
{
    std::vector<float> inputs = conversion_inputs();
    size_t bad_bf = 0, bad_h = 0;
    float first_bf = 0, first_h = 0;
    for (float f : inputs) {
        uint16_t want_bf = sg_f32_to_bf16(f), want_h = sg_f32_to_f16(f);
        if (__float2bfloat16(f).__x != want_bf || __float2bfloat16_rn(f).__x != want_bf) {
            if (!bad_bf++)
                first_bf = f;
        }
        if (__float2half(f).__x != want_h || __float2half_rn(f).__x != want_h) {
            if (!bad_h++)
                first_h = f;
        }
    }
    ok(bad_bf == 0, "__float2bfloat16 matches sg_f32_to_bf16 bit for bit (%zu inputs)", inputs.size());
    if (bad_bf)
        tap_diag("  %zu differ, first 0x%08x: 0x%04x, cast.c 0x%04x", bad_bf, bits_of(first_bf),
                 __float2bfloat16(first_bf).__x, sg_f32_to_bf16(first_bf));
    ok(bad_h == 0, "__float2half matches sg_f32_to_f16 bit for bit (%zu inputs)", inputs.size());
    if (bad_h)
        tap_diag("  %zu differ, first 0x%08x: 0x%04x, cast.c 0x%04x", bad_h, bits_of(first_h),
                 __float2half(first_h).__x, sg_f32_to_f16(first_h));

    size_t back_bf = 0, back_h = 0;
    for (uint32_t u = 0; u < 0x10000u; u++) {
        back_bf += bits_of(__bfloat162float(__ushort_as_bfloat16((unsigned short)u))) !=
                   bits_of(sg_bf16_to_f32((uint16_t)u));
        back_h += bits_of(__half2float(__ushort_as_half((unsigned short)u))) !=
                  bits_of(sg_f16_to_f32((uint16_t)u));
    }
    ok(back_bf == 0 && back_h == 0,
       "__bfloat162float and __half2float match cast.c on all 65536 patterns");

    /* A few values checked against IEEE directly (not only against cast.c). */
    ok(__float2half(65504.0f).__x == 0x7bff && __float2half(65519.0f).__x == 0x7bff &&
           __float2half(65520.0f).__x == 0x7c00 && __float2half(-1e9f).__x == 0xfc00 &&
           __float2half(0x1p-24f).__x == 0x0001 && __float2half(0x1p-25f).__x == 0x0000 &&
           __float2half(0x1.8p-24f).__x == 0x0002 && __float2half(0x1.ffcp-15f).__x == 0x0400 &&
           __float2half(1.0f / 3).__x == 0x3555 && (__float2half(NAN).__x & 0x7e00) == 0x7e00 &&
           __float2bfloat16(1.0f / 3).__x == 0x3eab && __float2bfloat16(0x1.01p0f).__x == 0x3f80 &&
           __float2bfloat16(0x1.03p0f).__x == 0x3f82 && __float2bfloat16(3.4e38f).__x == 0x7f80 &&
           (__float2bfloat16(-NAN).__x & 0xffc0) == 0xffc0,
       "known fp16 / bf16 encodings (max, overflow, subnormals, ties, NaN)");
}

/* ---- runtime API ---------------------------------------------------------------- */

static void test_runtime(void)
{
    int count = 0, dev = -1;
    ok(cudaGetDeviceCount(&count) == cudaSuccess && count == 1 && cudaSetDevice(0) == cudaSuccess &&
           cudaGetDevice(&dev) == cudaSuccess && dev == 0 &&
           cudaSetDevice(1) == cudaErrorInvalidDevice && cudaGetLastError() == cudaErrorInvalidDevice,
       "one device, 0");

    float *d = nullptr;
    cudaError_t e = cudaMalloc(&d, 1000 * sizeof(float));
    std::vector<float> fresh = to_host(d, 1000);
    bool all_nan = true;
    for (float f : fresh)
        all_nan = all_nan && bits_of(f) == 0xffffffffu;
    ok(e == cudaSuccess && d && (uintptr_t)d % 256 == 0 && all_nan,
       "cudaMalloc: 256-byte aligned, filled with 0xFF");

    std::vector<float> h(1000), back(1000, 0);
    for (size_t i = 0; i < h.size(); i++)
        h[i] = (float)i;
    float *d2;
    cudaMalloc(&d2, 1000 * sizeof(float));
    bool copies = cudaMemcpy(d, h.data(), 4000, cudaMemcpyHostToDevice) == cudaSuccess &&
                  cudaMemcpyAsync(d2, d, 4000, cudaMemcpyDeviceToDevice, 0) == cudaSuccess &&
                  cudaMemcpy(back.data(), d2, 4000, cudaMemcpyDefault) == cudaSuccess &&
                  back == h && cudaMemsetAsync(d2 + 10, 0, 8, 0) == cudaSuccess &&
                  cudaMemcpy(back.data(), d2, 4000, cudaMemcpyDeviceToHost) == cudaSuccess &&
                  back[9] == 9 && back[10] == 0 && back[11] == 0 && back[12] == 12;
    ok(copies, "cudaMemcpy / cudaMemcpyAsync / cudaMemsetAsync move the bytes");

    float host_buf[4];
    bool refused =
        cudaMemcpy(host_buf, d, 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue && /* dst is host */
        cudaMemcpy(d, host_buf, 16, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue &&
        cudaMemcpy(d, d2, 16, cudaMemcpyHostToHost) == cudaErrorInvalidValue &&
        cudaMemcpy(d + 999, h.data(), 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue && /* overrun */
        cudaMemset(host_buf, 0, 16) == cudaErrorInvalidValue &&
        cudaMemset(d + 1, 0, 4000) == cudaErrorInvalidValue &&
        cudaMemcpy(d, h.data(), 0, cudaMemcpyDeviceToHost) == cudaSuccess && /* 0 bytes */
        cudaGetLastError() == cudaErrorInvalidValue && cudaGetLastError() == cudaSuccess;
    ok(refused, "copies and fills with the wrong kind or past an allocation are refused");

    void *async = nullptr, *pinned = nullptr, *none = (void *)1;
    bool memory = cudaMallocAsync(&async, 64, 0) == cudaSuccess && async &&
                  cudaFreeAsync(async, 0) == cudaSuccess && cudaMallocHost(&pinned, 64) == cudaSuccess &&
                  cudaMemcpy(d, pinned, 64, cudaMemcpyHostToDevice) == cudaSuccess &&
                  cudaFree(pinned) == cudaErrorInvalidValue && cudaFreeHost(pinned) == cudaSuccess &&
                  cudaFree(h.data()) == cudaErrorInvalidValue && cudaFree(nullptr) == cudaSuccess &&
                  cudaMalloc(&none, 0) == cudaSuccess && none == nullptr &&
                  cudaFree(d) == cudaSuccess && cudaFree(d) == cudaErrorInvalidValue &&
                  cudaFree(d2) == cudaSuccess;
    cudaGetLastError();
    ok(memory, "cudaMallocAsync / cudaFreeAsync / cudaMallocHost / cudaFreeHost / cudaFree checks");

    cudaStream_t s = nullptr;
    cudaEvent_t start, stop;
    float ms = -1;
    bool streams = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess && s &&
                   cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess &&
                   cudaEventRecord(start, s) == cudaSuccess && cudaEventRecord(stop, s) == cudaSuccess &&
                   cudaEventSynchronize(stop) == cudaSuccess &&
                   cudaEventElapsedTime(&ms, start, stop) == cudaSuccess && ms >= 0 &&
                   cudaStreamSynchronize(s) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
                   cudaEventDestroy(start) == cudaSuccess && cudaEventDestroy(stop) == cudaSuccess &&
                   cudaStreamDestroy(s) == cudaSuccess;
    cudaStream_t s2 = nullptr;
    streams = streams && cudaStreamCreate(&s2) == cudaSuccess && cudaStreamDestroy(s2) == cudaSuccess;
    ok(streams, "streams and events");

    cublasHandle_t handle = nullptr;
    cudaStream_t got = (cudaStream_t)1;
    cudaStreamCreate(&s);
    ok(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS && cublasSetStream(handle, s) == CUBLAS_STATUS_SUCCESS &&
           cublasGetStream(handle, &got) == CUBLAS_STATUS_SUCCESS && got == s &&
           cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS &&
           cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH) == CUBLAS_STATUS_SUCCESS &&
           cublasDestroy(handle) == CUBLAS_STATUS_SUCCESS,
       "cuBLAS handle: create, stream, math mode, destroy");
    cudaStreamDestroy(s);
}

/* ---- GEMM ---------------------------------------------------------------------- */

/* A matrix stored column-major in a cuBLAS storage type, as raw bits. */
static size_t type_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static void put(std::vector<unsigned char> &m, cudaDataType t, size_t i, float v)
{
    if (t == CUDA_R_32F)
        memcpy(&m[i * 4], &v, 4);
    else {
        uint16_t b = t == CUDA_R_16BF ? sg_f32_to_bf16(v) : sg_f32_to_f16(v);
        memcpy(&m[i * 2], &b, 2);
    }
}

static float get(const std::vector<unsigned char> &m, cudaDataType t, size_t i)
{
    if (t == CUDA_R_32F) {
        float v;
        memcpy(&v, &m[i * 4], 4);
        return v;
    }
    uint16_t b;
    memcpy(&b, &m[i * 2], 2);
    return t == CUDA_R_16BF ? sg_bf16_to_f32(b) : sg_f16_to_f32(b);
}

/* Bits of v rounded to t, as cast.c rounds. */
static uint32_t rounded_bits(cudaDataType t, float v)
{
    return t == CUDA_R_32F ? bits_of(v) : t == CUDA_R_16BF ? sg_f32_to_bf16(v) : sg_f32_to_f16(v);
}

static uint32_t stored_bits(const std::vector<unsigned char> &m, cudaDataType t, size_t i)
{
    if (t == CUDA_R_32F) {
        uint32_t u;
        memcpy(&u, &m[i * 4], 4);
        return u;
    }
    uint16_t b;
    memcpy(&b, &m[i * 2], 2);
    return b;
}

struct GemmCase {
    cublasOperation_t ta, tb;
    int m, n, k, pad, batch;
    cudaDataType ab_type, c_type;
    float alpha, beta;
    bool integers; /* small integers: exact sums, outputs compared bit for bit */
};

/* Runs one case through cuBLAS (batched when batch > 1) and compares every
 * element of C, padding included (must stay as it was), with a double
 * reference. Matrix storage outside the operands is NaN, so reading it
 * shows. Returns the number of wrong elements. */
static size_t run_gemm_case(cublasHandle_t handle, const GemmCase &c)
{
    const bool na = c.ta == CUBLAS_OP_N, nb = c.tb == CUBLAS_OP_N;
    const int a_rows = na ? c.m : c.k, a_cols = na ? c.k : c.m;
    const int b_rows = nb ? c.k : c.n, b_cols = nb ? c.n : c.k;
    const int lda = a_rows + c.pad, ldb = b_rows + c.pad, ldc = c.m + c.pad;
    /* gaps between the batch's matrices too */
    const long long sa = (long long)lda * a_cols + 3, sb = (long long)ldb * b_cols + 5,
                    sc = (long long)ldc * c.n + 7;
    const size_t na_el = (size_t)(sa * c.batch), nb_el = (size_t)(sb * c.batch),
                 nc_el = (size_t)(sc * c.batch);
    std::vector<unsigned char> A(na_el * type_bytes(c.ab_type)), B(nb_el * type_bytes(c.ab_type)),
        C(nc_el * type_bytes(c.c_type));
    for (size_t i = 0; i < na_el; i++)
        put(A, c.ab_type, i, NAN);
    for (size_t i = 0; i < nb_el; i++)
        put(B, c.ab_type, i, NAN);
    for (size_t i = 0; i < nc_el; i++)
        put(C, c.c_type, i, NAN);
    auto value = [&]() {
        return c.integers ? (float)((int)(rng_u64() % 9) - 4) : (float)(2.0 * rng_unit() - 1.0);
    };
    for (int b = 0; b < c.batch; b++) {
        for (int j = 0; j < a_cols; j++)
            for (int i = 0; i < a_rows; i++)
                put(A, c.ab_type, (size_t)(b * sa + i + (long long)j * lda), value());
        for (int j = 0; j < b_cols; j++)
            for (int i = 0; i < b_rows; i++)
                put(B, c.ab_type, (size_t)(b * sb + i + (long long)j * ldb), value());
        if (c.beta != 0)
            for (int j = 0; j < c.n; j++)
                for (int i = 0; i < c.m; i++)
                    put(C, c.c_type, (size_t)(b * sc + i + (long long)j * ldc), value());
    }
    void *dA = to_device(A), *dB = to_device(B), *dC = to_device(C);
    cublasStatus_t st;
    if (c.batch == 1)
        st = cublasGemmEx(handle, c.ta, c.tb, c.m, c.n, c.k, &c.alpha, dA, c.ab_type, lda, dB,
                          c.ab_type, ldb, &c.beta, dC, c.c_type, ldc, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
    else
        st = cublasGemmStridedBatchedEx(handle, c.ta, c.tb, c.m, c.n, c.k, &c.alpha, dA, c.ab_type,
                                        lda, sa, dB, c.ab_type, ldb, sb, &c.beta, dC, c.c_type, ldc,
                                        sc, c.batch, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT_TENSOR_OP);
    std::vector<unsigned char> out = to_host((unsigned char *)dC, C.size());
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    if (st != CUBLAS_STATUS_SUCCESS)
        return (size_t)-1;

    size_t wrong = 0;
    std::vector<bool> is_output(nc_el, false);
    for (int b = 0; b < c.batch; b++)
        for (int j = 0; j < c.n; j++)
            for (int i = 0; i < c.m; i++) {
                double dot = 0, magnitude = 0;
                for (int p = 0; p < c.k; p++) {
                    size_t ia = (size_t)(b * sa + (na ? i + (long long)p * lda : p + (long long)i * lda));
                    size_t ib = (size_t)(b * sb + (nb ? p + (long long)j * ldb : j + (long long)p * ldb));
                    double prod = (double)get(A, c.ab_type, ia) * get(B, c.ab_type, ib);
                    dot += prod;
                    magnitude += fabs(prod);
                }
                size_t ic = (size_t)(b * sc + i + (long long)j * ldc);
                is_output[ic] = true;
                /* beta 0: alpha * dot alone, so that -0.5 * 0 stays -0 */
                double want = c.alpha * dot;
                if (c.beta != 0)
                    want += c.beta * get(C, c.c_type, ic);
                if (c.integers) {
                    wrong += stored_bits(out, c.c_type, ic) != rounded_bits(c.c_type, (float)want);
                } else {
                    double got = get(out, c.c_type, ic);
                    double tol = 1e-6 * (fabs(c.alpha) * magnitude +
                                         (c.beta != 0 ? fabs(c.beta * get(C, c.c_type, ic)) : 0));
                    wrong += !(fabs(got - want) <= tol);
                }
            }
    for (size_t i = 0; i < nc_el; i++) /* padding and gaps untouched */
        if (!is_output[i])
            wrong += stored_bits(out, c.c_type, i) != stored_bits(C, c.c_type, i);
    return wrong;
}

static const char *type_name(cudaDataType t)
{
    return t == CUDA_R_32F ? "f32" : t == CUDA_R_16BF ? "bf16" : "f16";
}

static void test_gemm(void)
{
    cublasHandle_t handle;
    cublasCreate(&handle);
    g_rng = 12345;
    const cudaDataType types[][2] = {{CUDA_R_32F, CUDA_R_32F},
                                      {CUDA_R_16BF, CUDA_R_16BF},
                                      {CUDA_R_16BF, CUDA_R_32F},
                                      {CUDA_R_16F, CUDA_R_16F}};
    const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T};
    for (const auto &t : types)
        for (cublasOperation_t ta : ops)
            for (cublasOperation_t tb : ops) {
                size_t wrong = 0;
                for (float beta : {0.0f, 1.0f, -2.0f}) {
                    GemmCase c = {ta, tb, 5, 7, 3, 2, 1, t[0], t[1], 1.5f, beta, true};
                    wrong += run_gemm_case(handle, c);
                    c.m = 13, c.n = 4, c.k = 17, c.pad = 0;
                    wrong += run_gemm_case(handle, c);
                }
                ok(wrong == 0, "cublasGemmEx %s x %s -> %s, op %c%c, beta 0 / 1 / -2, ld > min",
                   type_name(t[0]), type_name(t[0]), type_name(t[1]), ta == CUBLAS_OP_N ? 'N' : 'T',
                   tb == CUBLAS_OP_N ? 'N' : 'T');
            }
    for (const auto &t : types) {
        size_t wrong = 0;
        for (cublasOperation_t ta : ops)
            for (cublasOperation_t tb : ops)
                for (float beta : {0.0f, 1.0f}) {
                    GemmCase c = {ta, tb, 4, 6, 9, 1, 3, t[0], t[1], -0.5f, beta, true};
                    wrong += run_gemm_case(handle, c);
                }
        ok(wrong == 0, "cublasGemmStridedBatchedEx %s -> %s, 3 batches, all ops, beta 0 / 1",
           type_name(t[0]), type_name(t[1]));
    }
    size_t wrong = 0;
    for (cublasOperation_t ta : ops)
        for (cublasOperation_t tb : ops) {
            GemmCase c = {ta, tb, 33, 17, 65, 3, 1, CUDA_R_32F, CUDA_R_32F, 0.75f, 0.5f, false};
            wrong += run_gemm_case(handle, c);
        }
    ok(wrong == 0, "cublasGemmEx f32 with random reals: within 1e-6 of a double reference");

    /* argument checking and the edge cases */
    float alpha = 1, beta = 0;
    float A[64], B[64], C[64];
    for (int i = 0; i < 64; i++)
        A[i] = B[i] = 1.0f;
    auto gemm = [&](cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda,
                    int ldb, int ldc, cudaDataType at, cudaDataType bt, cudaDataType ct,
                    cublasComputeType_t ctype) {
        return cublasGemmEx(handle, ta, tb, m, n, k, &alpha, A, at, lda, B, bt, ldb, &beta, C, ct,
                            ldc, ctype, CUBLAS_GEMM_DEFAULT);
    };
    const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    const cudaDataType F = CUDA_R_32F;
    const cublasComputeType_t C32 = CUBLAS_COMPUTE_32F;
    ok(gemm(N, N, -1, 2, 2, 2, 2, 2, F, F, F, C32) == CUBLAS_STATUS_INVALID_VALUE &&
           gemm(N, N, 2, -1, 2, 2, 2, 2, F, F, F, C32) == CUBLAS_STATUS_INVALID_VALUE &&
           gemm(N, N, 2, 2, -1, 2, 2, 2, F, F, F, C32) == CUBLAS_STATUS_INVALID_VALUE &&
           gemm(N, N, 4, 2, 3, 3, 3, 4, F, F, F, C32) == CUBLAS_STATUS_INVALID_VALUE && /* lda < m */
           gemm(T, N, 4, 2, 3, 2, 3, 4, F, F, F, C32) == CUBLAS_STATUS_INVALID_VALUE && /* lda < k */
           gemm(T, N, 4, 2, 3, 3, 3, 4, F, F, F, C32) == CUBLAS_STATUS_SUCCESS &&
           gemm(N, N, 4, 2, 3, 4, 2, 4, F, F, F, C32) == CUBLAS_STATUS_INVALID_VALUE && /* ldb < k */
           gemm(N, T, 4, 2, 3, 4, 1, 4, F, F, F, C32) == CUBLAS_STATUS_INVALID_VALUE && /* ldb < n */
           gemm(N, N, 4, 2, 3, 4, 3, 3, F, F, F, C32) == CUBLAS_STATUS_INVALID_VALUE && /* ldc < m */
           gemm(N, N, 0, 0, 0, 0, 0, 0, F, F, F, C32) == CUBLAS_STATUS_INVALID_VALUE && /* ld >= 1 */
           gemm((cublasOperation_t)7, N, 2, 2, 2, 2, 2, 2, F, F, F, C32) == CUBLAS_STATUS_INVALID_VALUE,
       "cublasGemmEx refuses negative sizes and short leading dimensions");
    ok(gemm(N, N, 2, 2, 2, 2, 2, 2, F, F, F, CUBLAS_COMPUTE_16F) == CUBLAS_STATUS_NOT_SUPPORTED &&
           gemm(N, N, 2, 2, 2, 2, 2, 2, F, F, F, CUBLAS_COMPUTE_32F_FAST_TF32) == CUBLAS_STATUS_NOT_SUPPORTED &&
           gemm(N, N, 2, 2, 2, 2, 2, 2, CUDA_R_16BF, F, F, C32) == CUBLAS_STATUS_NOT_SUPPORTED &&
           gemm(N, N, 2, 2, 2, 2, 2, 2, F, F, CUDA_R_16BF, C32) == CUBLAS_STATUS_NOT_SUPPORTED &&
           gemm(N, N, 2, 2, 2, 2, 2, 2, CUDA_R_16F, CUDA_R_16F, CUDA_R_16BF, C32) == CUBLAS_STATUS_NOT_SUPPORTED &&
           gemm(N, N, 2, 2, 2, 2, 2, 2, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, C32) == CUBLAS_STATUS_NOT_SUPPORTED &&
           cublasGemmEx(nullptr, N, N, 2, 2, 2, &alpha, A, F, 2, B, F, 2, &beta, C, F, 2, C32,
                        CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_INITIALIZED &&
           cublasGemmStridedBatchedEx(handle, N, N, 2, 2, 2, &alpha, A, F, 2, 4, B, F, 2, 4, &beta,
                                      C, F, 2, 4, -1, C32, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE,
       "cublasGemmEx: other compute types and type mixes are not supported");

    for (int i = 0; i < 64; i++)
        C[i] = NAN;
    bool quick = gemm(N, N, 0, 4, 4, 1, 4, 1, F, F, F, C32) == CUBLAS_STATUS_SUCCESS &&
                 gemm(N, N, 4, 0, 4, 4, 4, 4, F, F, F, C32) == CUBLAS_STATUS_SUCCESS && isnan(C[0]);
    beta = 0;
    bool k0 = gemm(N, N, 4, 4, 0, 4, 1, 4, F, F, F, C32) == CUBLAS_STATUS_SUCCESS && C[0] == 0 && C[15] == 0;
    for (int i = 0; i < 16; i++)
        C[i] = (float)i;
    beta = 2;
    k0 = k0 && gemm(N, N, 4, 4, 0, 4, 1, 4, F, F, F, C32) == CUBLAS_STATUS_SUCCESS && C[3] == 6 && C[15] == 30;
    A[0] = NAN;
    alpha = 0;
    beta = 1;
    bool alpha0 = gemm(N, N, 4, 4, 4, 4, 4, 4, F, F, F, C32) == CUBLAS_STATUS_SUCCESS && C[0] == 0 &&
                  C[3] == 6;
    ok(quick && k0 && alpha0,
       "m or n 0: C untouched; k 0 or alpha 0: C = beta C without reading A and B");
    cublasDestroy(handle);
}

/* ---- speed and host threads ------------------------------------------------------ */

__global__ void k_barriers(const float *x, float *out)
{
    __shared__ float red[256];
    float v = x[blockIdx.x * blockDim.x + threadIdx.x];
    float s = sg_block_sum(v, red); /* 8 tree levels plus 2: 10 barriers */
    float m = sg_block_max(v, red);
    if (threadIdx.x == 0)
        out[blockIdx.x] = s + m;
}

static bool barrier_kernel_ok(unsigned blocks)
{
    std::vector<float> x((size_t)blocks * 256);
    for (size_t i = 0; i < x.size(); i++)
        x[i] = (float)(i % 5);
    std::vector<float> out(blocks, -1);
    const float *x_p = x.data();
    float *out_p = out.data();
    SG_LAUNCH(k_barriers, blocks, 256, 0, x_p, out_p);
    for (unsigned b = 0; b < blocks; b++) {
        float s = 0, m = 0;
        for (unsigned t = 0; t < 256; t++) {
            s += x[b * 256 + t];
            m = fmaxf(m, x[b * 256 + t]);
        }
        if (out[b] != s + m)
            return false;
    }
    return cudaGetLastError() == cudaSuccess;
}

static void test_speed_and_threads(void)
{
    auto t0 = std::chrono::steady_clock::now();
    bool right = barrier_kernel_ok(64);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tap_diag("64 blocks x 256 threads x 20 barriers: %.1f ms", seconds * 1e3);
    ok(right && seconds < 2.0, "64 blocks of 256 threads with barriers run right and fast");

    /* Two host threads launching at once each get their own shared memory
     * and fibers. */
    bool results[4] = {false, false, false, false};
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; i++)
        threads.emplace_back([&results, i]() { results[i] = barrier_kernel_ok(40 + i); });
    for (auto &t : threads)
        t.join();
    ok(results[0] && results[1] && results[2] && results[3],
       "kernels launched from 4 host threads at once");
}

int main(void)
{
    test_geometry();
    test_block_reductions();
    test_shared_memory();
    test_atomics();
    test_kernel_bugs();
    test_launch_errors();
    test_launch_kernel();
    test_compat_helpers();
    test_math();
    test_conversions();
    test_runtime();
    test_gemm();
    test_speed_and_threads();
    return tap_done();
}
