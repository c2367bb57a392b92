/* disk_tier.h - ZeRO-Infinity's disk tier of a step graph: what lives on
 * disk, what RAM the state on disk still needs, and the disk bytes a step
 * reads and writes.
 *
 * With offload_optimizer.device "nvme" (sg_step_spec.nvme_optimizer) the
 * graph is the one "cpu" compiles: a CPU sub-group's fp32 master and
 * optimizer moments are host-space persistent buffers, cut into tiles by
 * optimizer_tile. Their home is on disk: a tile is read into RAM for its
 * update and written back, and at most buffer_count tiles are in RAM at
 * once (the one being updated and the ones prefetched behind it;
 * DeepSpeed's offload_optimizer.buffer_count, default 4). Per step each
 * tile on disk is read once and written once.
 *
 * With offload_param.device "nvme" (stage 3, sg_step_spec.nvme_param) the
 * host-space parameter pieces live on disk: every task that reads a piece
 * (the fetches before each use of a unit) reads it from disk, every task
 * that writes one (the update's cast or copy back) writes it there, and at
 * most offload_param.buffer_count units' pieces (default 5, DeepSpeed's)
 * are in RAM at once.
 *
 * The RAM the step needs is then its live-bytes plan less the bytes on
 * disk plus that working set, counted as held through the whole step
 * (prefetches may start at any time). Pure C, no StarPU.
 */
#ifndef SG_DISK_TIER_H
#define SG_DISK_TIER_H

#include <stdint.h>
#include <stdio.h>

#include "graph/analysis.h"
#include "graph/compile.h"
#include "graph/ir.h"

#define SG_DISK_BUFFER_COUNT_DEFAULT 4       /* offload_optimizer.buffer_count */
#define SG_DISK_PARAM_BUFFER_COUNT_DEFAULT 5 /* offload_param.buffer_count */

typedef struct sg_disk_tier {
    int active;                 /* the spec puts something on disk */
    int64_t optimizer_bytes;    /* masters and moments on disk */
    int64_t param_bytes;        /* parameter pieces on disk */
    int64_t bytes;              /* both */
    int ntiles;                 /* optimizer tiles on disk (sub-group, tile) */
    int64_t tile_bytes;         /* the largest tile's master and moments */
    int64_t buffer_count;       /* optimizer tiles in RAM at once */
    int64_t optimizer_ram;      /* min(buffer_count, ntiles) x tile_bytes, at most
                                    optimizer_bytes */
    int nunits;                 /* units with pieces on disk */
    int64_t unit_bytes;         /* the largest unit's pieces on disk */
    int64_t param_buffer_count; /* units' pieces in RAM at once */
    int64_t param_ram;          /* min(param_buffer_count, nunits) x unit_bytes, at most
                                    param_bytes */
    int64_t ram_bytes;          /* the working set: optimizer_ram + param_ram */
    int64_t read_bytes;         /* disk bytes read per step */
    int64_t write_bytes;        /* disk bytes written per step */
} sg_disk_tier;

/* The disk tier of g compiled from spec (all zero when nothing is on
 * disk). Returns 0 or SG_ENOMEM. */
int sg_disk_tier_compute(const sg_graph *g, const sg_step_spec *spec, sg_disk_tier *t);

/* 1 when buffer b of g has its home on disk under spec. */
int sg_disk_tier_holds(const sg_step_spec *spec, const sg_buffer *b);

/* Per node of g (arrays of g->nnodes): the disk bytes its task reads
 * before it runs and writes back after it, and prefetch[i] = 1 where the
 * read is an optimizer tile's (whose order the graph knows: the runtime
 * reads it ahead, up to buffer_count tiles). An optimizer buffer on disk
 * is read before its first access of the step and written after the last
 * task that writes it; a parameter piece on disk at every access.
 * Their sums are sg_disk_tier's read_bytes and write_bytes. Returns 0 or
 * SG_ENOMEM. */
int sg_disk_tier_node_bytes(const sg_graph *g, const sg_step_spec *spec, int64_t *read,
                            int64_t *write, int *prefetch);

/* RAM the tier saves: bytes on disk less the working set (>= 0). */
int64_t sg_disk_tier_ram_saved(const sg_disk_tier *t);

/* Moves the summary's host figures to the disk tier: the host peak and
 * persistent bytes lose the state on disk and the peak gains the working
 * set; the disk fields are filled (for the lower bound and the print). */
void sg_disk_tier_apply(sg_summary *s, const sg_disk_tier *t);

/* Seconds the step's disk bytes take at the cost model's disk bandwidths
 * (reads and writes share the device, so they add); 0 without a disk. */
double sg_disk_tier_seconds(const sg_summary *s, const sg_cost_model *cm);

/* The summary's disk lines (nothing when no disk tier). */
int sg_disk_tier_print(const sg_summary *s, FILE *out);

/* The summary JSON's "disk" member and a comma (nothing when no disk tier):
 * bytes, ram_bytes, read_bytes, write_bytes, buffer_count, tile_bytes,
 * param_ram_bytes, capacity_bytes (0: no machine disk known). */
void sg_disk_tier_json(const sg_summary *s, FILE *out);

#endif /* SG_DISK_TIER_H */
