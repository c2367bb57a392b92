/* malloc_tune.h - glibc's malloc set so that step-local memory stays mapped
 * from one step to the next. */
#ifndef SG_MALLOC_TUNE_H
#define SG_MALLOC_TUNE_H

/* On a CPU memory node StarPU frees a step-local buffer as soon as its value
 * dies (it caches only pinned memory: datawizard/memalloc.c), so every step
 * mallocs and frees the same buffers again. glibc serves a worker thread from
 * its arena's 64 MiB heaps; a step that needs more than the first heap maps a
 * second one, and when the step's buffers are freed the emptied heap is
 * unmapped whole (heap_trim in glibc's arena.c deletes an empty heap whatever
 * M_TRIM_THRESHOLD says), so the next step faults in and zeroes those pages
 * again: on bench-3m 57 MB, 14,000 page faults, every step. This sets, with
 * mallopt:
 *   M_TOP_PAD 64 MiB, one heap: heap_trim keeps an emptied heap when the room
 *     left in the heap before it is under the pad, which it then always is,
 *     and shrinks a heap only beyond the pad;
 *   M_MMAP_THRESHOLD 32 MiB and M_TRIM_THRESHOLD 64 MiB: setting any of these
 *     turns glibc's dynamic thresholds off, so they are fixed at the values
 *     the dynamic ones climb to (glibc's ceiling for the mmap threshold).
 * Memory freed at a step's end then stays mapped for the next step's buffers.
 * Buffers of 32 MiB or more are still mmap'ed and unmapped one by one.
 * Called once the first step has run: set before it, the fixed thresholds
 * lay that step's buffers out differently and bench-3m's largest resident
 * size grew by 36-50 MiB; set after it, the largest resident size is the
 * same as without. Nothing is done (returns 0) off 64-bit glibc, when
 * STEPGRAPH_MALLOPT=0, or when the environment sets malloc itself
 * (GLIBC_TUNABLES naming a glibc.malloc. tunable, or one of glibc's
 * MALLOC_*_ variables): those win. Returns 1 when set. */
int sg_malloc_tune(void);

#endif
