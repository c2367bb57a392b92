/* memory_held.h - the memory StarPU holds in each space when the step runs
 * with CUDA workers, which is more than the live bytes sg_graph_peak_memory
 * plans, because of how StarPU 1.4's allocator works (its
 * src/datawizard/malloc.c and memalloc.c) on the GPU and, once CUDA workers
 * exist, in main RAM (pinned there):
 * - a buffer of at most 4 MiB is carved (in 16 KiB blocks) from 32 MiB
 *   chunks, and a chunk counts whole;
 * - a larger buffer whose value dies is not freed but kept for the next
 *   buffer of the same size and element size (its allocation cache: with no
 *   memory pressure nothing leaves it), so a size holds as many buffers as
 *   ever were alive at once;
 * - a task on one side that accesses a buffer makes StarPU keep a copy of
 *   the value on that side until the value dies, whatever the buffer's
 *   planned space (a CPU Adam's read of a GPU gradient: a host copy; a
 *   host-to-device task's read of host parameters: a GPU copy).
 * Our own allocations (persistent buffers: starpu_malloc in main RAM, the
 * GPU-space ones too) are exact. Measured on an H100 (docs/gpu.md) this
 * accounts for StarPU's GPU count to 1-2%, where the live-bytes plan was
 * 24-380% short.
 * Pure C: no StarPU here. */
#ifndef SG_MEMORY_HELD_H
#define SG_MEMORY_HELD_H

#include "graph/ir.h"

#define SG_STARPU_CHUNK_BYTES ((int64_t)32 << 20)    /* a suballocator chunk */
#define SG_STARPU_SUBALLOC_MAX ((int64_t)4 << 20)    /* the largest suballocated buffer */
#define SG_STARPU_SUBALLOC_BLOCK ((int64_t)16 << 10) /* its unit */

/* held[s]: the bytes StarPU counts in space s at its peak over one step run
 * in program order with CUDA workers, by the rules above. Returns 0 or
 * SG_ENOMEM. */
int sg_graph_memory_held(const sg_graph *g, int64_t held[SG_MEM_COUNT]);

#endif /* SG_MEMORY_HELD_H */
