/* test_memory_held.c - graph/memory_held.h on hand-built graphs: what StarPU
 * 1.4's allocator holds, worked out by hand from its rules (32 MiB chunks
 * for buffers up to 4 MiB in 16 KiB blocks, a cache per buffer size and
 * element size, a copy on each side that accesses a value), and the
 * placement rule against the kinds' table. The figures reproduce StarPU's
 * counts on an H100 for tiny-moe and tiny-gpt-oss (docs/gpu.md); this test
 * holds the rules. */
#include <stdio.h>
#include <string.h>

#include "graph/ir.h"
#include "graph/memory_held.h"
#include "tests/tap.h"

#define MiB ((int64_t)1 << 20)
#define CHUNK (32 * MiB)

static int buf(sg_graph *g, const char *name, int64_t bytes, sg_dtype t, sg_mem_space sp,
               int persistent)
{
    return sg_graph_add_buffer(g, name, bytes / (int64_t)sg_dtype_size(t), t, sp, persistent);
}

/* a node of kind k on device d with up to two accesses (mode 0 ends) */
static void node(sg_graph *g, sg_op_kind k, sg_device_class d, int b0, sg_access_mode m0, int b1,
                 sg_access_mode m1)
{
    sg_access a[2] = {{b0, m0}, {b1, m1}};
    sg_graph_add_node(g, k, d, 0, 0, a, m0 ? (m1 ? 2 : 1) : 0, "n%d", g->nnodes);
}

/* a value of b written, then read, by two forward nodes on the GPU */
static void gpu_value(sg_graph *g, int b)
{
    node(g, SG_OP_FORWARD, SG_DEV_GPU, b, SG_W, 0, 0);
    node(g, SG_OP_FORWARD, SG_DEV_GPU, b, SG_R, 0, 0);
}

/* held[] of g, or -1s when it fails */
static void held_of(sg_graph *g, int64_t held[SG_MEM_COUNT])
{
    sg_error err = {0};
    held[0] = held[1] = -1;
    if (sg_graph_finalize(g, &err) == SG_OK && sg_graph_memory_held(g, held) != SG_OK)
        held[0] = held[1] = -1;
}

static void check(sg_graph *g, int64_t gpu, int64_t host, const char *what)
{
    int64_t h[SG_MEM_COUNT];
    held_of(g, h);
    ok(h[SG_MEM_GPU] == gpu && h[SG_MEM_HOST] == host,
       "%s: gpu %lld (expected %lld), host %lld (expected %lld)", what, (long long)h[SG_MEM_GPU],
       (long long)gpu, (long long)h[SG_MEM_HOST], (long long)host);
    sg_graph_free(g);
    sg_graph_init(g);
}

int main(void)
{
    sg_graph g;
    sg_graph_init(&g);
    const sg_op_kind F = SG_OP_FORWARD;

    /* Three 8 MiB values on the GPU, one after the other: the cache hands
     * the first's buffer to the second and third. Two alive at once: 16. */
    int a = buf(&g, "a", 8 * MiB, SG_F32, SG_MEM_GPU, 0);
    int b = buf(&g, "b", 8 * MiB, SG_F32, SG_MEM_GPU, 0);
    int c = buf(&g, "c", 8 * MiB, SG_F32, SG_MEM_GPU, 0);
    node(&g, F, SG_DEV_GPU, a, SG_W, 0, 0);
    node(&g, F, SG_DEV_GPU, a, SG_R, b, SG_W); /* a dies here, b born: both alive */
    node(&g, F, SG_DEV_GPU, b, SG_R, 0, 0);
    node(&g, F, SG_DEV_GPU, c, SG_W, 0, 0);
    node(&g, F, SG_DEV_GPU, c, SG_R, 0, 0);
    check(&g, 16 * MiB, 0, "same size, at most two alive: two buffers");

    /* 8 MiB dies, then a 12 MiB value: live peak 12, but the cache keeps
     * the 8 MiB buffer for a size that never comes again: 20. */
    gpu_value(&g, buf(&g, "a", 8 * MiB, SG_F32, SG_MEM_GPU, 0));
    gpu_value(&g, buf(&g, "b", 12 * MiB, SG_F32, SG_MEM_GPU, 0));
    check(&g, 20 * MiB, 0, "a dead size stays in the cache");

    /* The same 8 MiB as f32 and as bf16 elements: StarPU reuses a buffer
     * for the same element size only. */
    gpu_value(&g, buf(&g, "a", 8 * MiB, SG_F32, SG_MEM_GPU, 0));
    gpu_value(&g, buf(&g, "b", 8 * MiB, SG_BF16, SG_MEM_GPU, 0));
    check(&g, 16 * MiB, 0, "equal bytes, other element size: no reuse");

    /* A 1000-byte value: one 32 MiB chunk. 33 values of 1 MiB alive at
     * once: 33 MiB of blocks, two chunks. Exactly 4 MiB is still small. */
    gpu_value(&g, buf(&g, "a", 1000, SG_F32, SG_MEM_GPU, 0));
    check(&g, CHUNK, 0, "a small buffer takes a whole chunk");
    int first = -1;
    for (int i = 0; i < 33; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        int s = buf(&g, name, MiB, SG_F32, SG_MEM_GPU, 0);
        first = first < 0 ? s : first;
        node(&g, F, SG_DEV_GPU, s, SG_W, 0, 0);
    }
    for (int i = 0; i < 33; i++)
        node(&g, F, SG_DEV_GPU, first + i, SG_R, 0, 0);
    check(&g, 2 * CHUNK, 0, "33 MiB of small buffers alive: two chunks");
    gpu_value(&g, buf(&g, "a", 4 * MiB, SG_F32, SG_MEM_GPU, 0));
    check(&g, CHUNK, 0, "4 MiB is suballocated");

    /* A host-space value written on the CPU and read on the GPU (an
     * optimizer's output going up): a copy on each side. */
    a = buf(&g, "a", 8 * MiB, SG_F32, SG_MEM_HOST, 0);
    node(&g, SG_OP_ADAM_CPU, SG_DEV_CPU, a, SG_W, 0, 0);
    node(&g, F, SG_DEV_GPU, a, SG_R, 0, 0);
    check(&g, 8 * MiB, 8 * MiB, "read across the link: a copy on each side");

    /* Persistent state: its home in main RAM is ours (exact, host), and a
     * GPU task's access keeps a GPU copy; a persistent buffer only the CPU
     * touches has none on the GPU. */
    a = buf(&g, "p", 8 * MiB, SG_F32, SG_MEM_GPU, 1);
    b = buf(&g, "q", 12 * MiB, SG_F32, SG_MEM_HOST, 1);
    node(&g, F, SG_DEV_GPU, a, SG_RW, 0, 0);
    node(&g, SG_OP_ADAM_CPU, SG_DEV_CPU, b, SG_RW, 0, 0);
    check(&g, 8 * MiB, 20 * MiB, "persistent: homes in RAM, a GPU copy where the GPU reads");

    /* The loss, written on the GPU and read by the program after the step:
     * fetched to RAM (a small buffer: a chunk there too). */
    a = buf(&g, "loss", 64, SG_F32, SG_MEM_GPU, 0);
    g.buffers[a].role = SG_BUF_LOSS;
    node(&g, F, SG_DEV_GPU, a, SG_W, 0, 0);
    check(&g, CHUNK, CHUNK, "a loss read after the step: a copy in RAM");

    /* Placement: the kinds' table, a pinned cast, a cast left to the
     * scheduler at its node's device. */
    sg_node nd;
    memset(&nd, 0, sizeof nd);
    nd.kind = SG_OP_D2H;
    nd.device = SG_DEV_LINK;
    ok(!sg_node_runs_on_gpu(&nd), "d2h runs on a CPU worker");
    nd.kind = SG_OP_ALLGATHER;
    ok(sg_node_runs_on_gpu(&nd), "an all-gather runs on the CUDA worker");
    nd.kind = SG_OP_CAST;
    nd.device = SG_DEV_CPU;
    nd.pinned = 1;
    ok(!sg_node_runs_on_gpu(&nd), "a cast pinned to the CPU");
    nd.device = SG_DEV_GPU;
    nd.pinned = 0;
    ok(sg_node_runs_on_gpu(&nd), "a cast left to the scheduler counts at its node's device");
    sg_graph_free(&g);
    return tap_done();
}
