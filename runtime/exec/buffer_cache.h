/* buffer_cache.h - a step's large CPU buffers kept mapped for the next step.
 *
 * On a CPU memory node StarPU frees a step-local buffer as soon as its value
 * dies (it caches only pinned memory), and glibc serves a buffer of 32 MiB or
 * more (its mmap threshold, malloc_tune.h) with a mapping of its own, unmapped
 * at the free: every step maps those buffers again and the kernel faults in
 * and zeroes every page of them. A Llama with a vocabulary of 131,072 and a
 * hidden size of 512 (tests/data/models/big-head-llama.json: the head's and
 * the embedding's gradients are 256 MiB each, per batch tile, summed and
 * reduced) faulted in about 2.4 GB a step that way (measured on 2 workers:
 * 610,000 page faults a step, 16% of the run's CPU time in the kernel).
 *
 * sg_buffer_cache_install hands StarPU allocation hooks
 * (starpu_malloc_set_hooks) that map a buffer of 32 MiB or more themselves,
 * keep it when StarPU frees it, and give it to a later request it holds with
 * at most a sixteenth to spare (a step asks for the same sizes again, some a
 * page's skew apart). Smaller buffers go to malloc and free as StarPU's own
 * CPU allocator sends them. The tasks' own memory comes through the same
 * hooks (sg_task_mem in codelets/starpu/args.h), so a task's large scratch
 * (a bf16 buffer's fp32 copy, a reduction's buffers) is kept too.
 *
 * The memory never grows for it. The hooks count what is held through them
 * (StarPU's buffers, as its measured peak sg_lower_memory_used counts them,
 * and the tasks' own memory), and the kept buffers plus that count never
 * exceed the highest count reached so far: an allocation that finds no kept
 * buffer to fit first unmaps kept ones, oldest first, until the sum with its
 * own size is back under that mark (or nothing is kept). A kept buffer is also given to the kernel to
 * take back under memory pressure (MADV_FREE): its pages stay resident and
 * are reused with no fault while there is no pressure, and any page not
 * written since is the kernel's to take, also once the buffer is handed out
 * again. StarPU allocates a buffer before the task that writes it runs; a
 * fresh mapping is not resident until written, a kept one is at once. So
 * the largest resident size comes to that mark plus the rest of the process
 * (measured: +0.27 GB, 10%, on the Llama above with one worker), the
 * difference in pages the kernel may take back.
 *
 * Installed only where StarPU's CPU allocator is plain malloc: a native (not
 * SimGrid) StarPU with no CUDA worker (pinned buffers are StarPU's own, and
 * it already caches them) and one NUMA memory node (hwloc places buffers on
 * several). STEPGRAPH_BUFFER_CACHE=0 in the environment leaves StarPU's
 * allocator alone (1, or unset: the default). */
#ifndef SG_BUFFER_CACHE_H
#define SG_BUFFER_CACHE_H

#include <stddef.h>

#include "common/error.h"

/* Buffers of this many bytes or more are kept */
#define SG_BUFFER_CACHE_MIN_BYTES ((size_t)32 << 20)

/* STEPGRAPH_BUFFER_CACHE is unset, empty, 0 or 1; else SG_EINVAL naming it
 * (checked before a run makes any output) */
int sg_buffer_cache_check_env(sg_error *err);

/* Installs the hooks after starpu_init, before any data is registered or
 * allocated, when the conditions above hold. Returns 1 when installed. */
int sg_buffer_cache_install(void);

/* The small buffers (malloc'd) aligned to `align` bytes from now on: StarPU's
 * O_DIRECT disk back-end reads into and writes from whole pages (NVMe
 * offload, runtime/exec/disk_node.h); the large ones are mapped pages. */
void sg_buffer_cache_align_small(size_t align);

/* Unmaps every kept buffer: before work that takes memory StarPU does not
 * count (a checkpoint's save). */
void sg_buffer_cache_trim(void);

/* After starpu_shutdown: unmaps every kept buffer and gives StarPU its own
 * allocator back, so that a later starpu_init starts from its defaults (the
 * hooks stay while StarPU still holds a buffer they mapped: its free must
 * come back to them). */
void sg_buffer_cache_uninstall(void);

/* The counts since the last install, for the run's summary and the tests */
typedef struct sg_buffer_cache_stats {
    int installed;
    long long hits;      /* requests served with a kept buffer */
    long long maps;      /* large buffers mapped */
    long long evictions; /* kept buffers unmapped to stay under the mark */
    size_t kept_bytes;   /* kept now */
    size_t high_water;   /* highest count of StarPU's bytes through the hooks */
} sg_buffer_cache_stats;

sg_buffer_cache_stats sg_buffer_cache_get_stats(void);

#endif
