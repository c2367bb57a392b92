/* compile.h - the step compiler: (model, step settings) -> sg_graph.
 *
 * sg_step_spec holds what the compiler needs from a DeepSpeed config and the
 * run options (runtime/config/step_spec.c fills it from an sg_config); the graph
 * module does not know about JSON.
 *
 * Semantics (DeepSpeed's, see docs/graph.md):
 * - each rank's parameters are packed in unit order into optimizer sub-groups
 *   of sub_group_size elements (0: one sub-group per parameter tensor, as
 *   in DeepSpeed); with offload ratio r over N sub-groups,
 *   sub-group i is stepped on the CPU iff i >= floor((1 - r) * N);
 * - gradient accumulation repeats forward/backward per micro-step and steps
 *   the optimizer once; stage >= 2 reduce-scatters every micro-step, stage
 *   0/1 all-reduce once at the accumulation boundary;
 * - stage 3 all-gathers a unit's parameters before its forward and again
 *   before its backward unless kept (reuse distance <= stage3_max_reuse_distance);
 *   units smaller than stage3_param_persistence_threshold are never gathered;
 * - stage 1/2 all-gather the updated parameters after the optimizer;
 * - stage 3 with parameter offload: the pieces live in host memory, the CPU
 *   sub-groups' casts write them there (no host-to-device copy), a GPU
 *   sub-group's update is copied back to them (device-to-host), and each use
 *   of a unit fetches them to the device first;
 * - SuperOffload: the CPU Adam of a sub-group starts as soon as its gradients
 *   are on the host (speculation); a validation node per CPU sub-group keeps,
 *   redoes (clipping) or rolls back (overflow) the step once the global
 *   gradient norm is known.
 */
#ifndef SG_COMPILE_H
#define SG_COMPILE_H

#include <stdint.h>

#include "common/error.h"
#include "graph/ir.h"
#include "models/model.h"

/* Where the casts of mixed precision run (gradients to fp32 before a CPU
 * Adam, the fp32 master back to the compute dtype). */
typedef enum sg_cast_placement {
    SG_CAST_AUTO, /* decided from the graph: link bytes against compute */
    SG_CAST_CPU,
    SG_CAST_GPU,
    SG_CAST_SCHEDULER, /* the scheduling policy picks per task */
    SG_CAST_FUSED,     /* no cast nodes: the CPU Adam (and SuperOffload's
                                           validation) reads the 16-bit host gradients and
                                           writes the 16-bit host parameters in its pass
                                           (codelets/cpu/adam_lowp.h); with parameter
                                           offload the parameter cast stays a node */
} sg_cast_placement;

/* What cast_placement "auto" weighs (bytes per second; 0 = unknown, then
 * the casts stay on the CPU): the host-device link one way, one CPU
 * worker's memory bandwidth, the GPU's memory bandwidth. */
typedef struct sg_cast_costs {
    double link_bw, cpu_worker_bw, gpu_bw;
} sg_cast_costs;

/* The fp32 optimizer state a sub-group keeps per parameter, in its
 * SG_BUF_MOMENTS buffer (the update rules: codelets/cpu/adam.h). */
typedef enum sg_optimizer_state {
    SG_STATE_ADAM = 0, /* Adam: exp_avg then exp_avg_sq, two arrays */
    SG_STATE_MOMENTUM, /* Lion: exp_avg only */
    SG_STATE_SQUARES,  /* Adagrad: exp_avg_sq (its sum of squares) only */
} sg_optimizer_state;

/* Arrays of the sub-group's length in its state buffer: 2 for Adam, else 1. */
static inline int sg_optimizer_state_arrays(sg_optimizer_state s)
{
    return s == SG_STATE_ADAM ? 2 : 1;
}

typedef struct sg_step_spec {
    int zero_stage;         /* 0..3 */
    int64_t dp_size;        /* data-parallel ranks (>= 1) */
    int64_t micro_batch;    /* sequences per micro-step per rank */
    int64_t grad_accum;     /* micro-steps per optimizer step */
    int64_t seq_len;        /* tokens per sequence */
    sg_dtype compute_dtype; /* SG_F32, SG_BF16 or SG_F16 */
    int activation_checkpointing;
    int offload_optimizer; /* optimizer state on the CPU */
    double offload_ratio;  /* share of sub-groups stepped on the CPU */
    int super_offload;     /* speculation-then-validation */
    int offload_param;     /* stage 3: this rank's parameter pieces live on the
                                           host */
    /* ZeRO-Infinity (device "nvme"): the offloaded state compiles as with "cpu"
     * (host-space buffers); its home is on disk (graph/disk_tier.h counts it) */
    int nvme_optimizer;              /* the CPU sub-groups' masters and moments on disk */
    int nvme_param;                  /* the offloaded parameter pieces on disk */
    int64_t nvme_buffer_count;       /* optimizer tiles in RAM at once (1 updated + prefetched) */
    int64_t nvme_param_buffer_count; /* units' parameter pieces in RAM at once */
    sg_optimizer_state optimizer_state;  /* SG_STATE_ADAM unless set */
    int64_t sub_group_size;              /* elements per optimizer sub-group;
                                           0 = one per parameter tensor */
    double gradient_clipping;            /* 0 = off */
    int64_t param_persistence_threshold; /* stage 3: units below are never gathered */
    int64_t max_reuse_distance;          /* stage 3: keep gathered params if reused within */
    /* tiles: 0 = untiled (one task per sub-group / per unit and micro-step) */
    int64_t optimizer_tile;           /* elements per chunk of a CPU sub-group's optimizer
                                           chain; SG_OPTIMIZER_TILE_AUTO: from the workers */
    int64_t optimizer_workers;        /* CPU workers that run the optimizer (auto tiles) */
    int64_t micro_window;             /* > 0: micro-step k + W's forward waits for micro-step
                                           k's backward (at most W micro-steps' activations
                                           live however the workers run them); 0: unbounded */
    int64_t batch_tile;               /* sequences per forward/backward tile of a micro-step */
    int batch_tile_auto;              /* batch_tile was chosen automatically: a model that
                                           cannot be tiled (MoE) compiles untiled instead of
                                           being refused */
    sg_cast_placement cast_placement; /* SG_CAST_SCHEDULER unless set */
    sg_cast_costs cast_costs;         /* for SG_CAST_AUTO */
} sg_step_spec;

/* optimizer_tile "auto": ceil(n / optimizer_workers) elements per chunk of an
 * n-element CPU sub-group, at least SG_OPTIMIZER_TILE_MIN, rounded up to an
 * odd multiple of 512 (a multiple of 1024 lets the m and v streams of Adam
 * alias in the caches, measured slower); where that leaves one chunk of n, a
 * multiple of 1024 with n >= 2 SG_OPTIMIZER_TILE_MIN, two chunks instead
 * (a 64M sub-group on one worker: 45% of the bandwidth bound whole, 88% in
 * two chunks, bench/bench_adam_starpu.c). */
#define SG_OPTIMIZER_TILE_AUTO (-1)
#define SG_OPTIMIZER_TILE_MIN 262144
int64_t sg_optimizer_tile_auto(int64_t n, int64_t workers);
/* The chunk size the compiler uses for an n-element CPU sub-group: 0 when
 * the sub-group stays one chunk (untiled, or a tile >= n). */
int64_t sg_optimizer_tile_for(const sg_step_spec *spec, int64_t n);

/* Fills the DeepSpeed defaults (stage 0, f32, micro batch 1, sub-group 1e9...). */
void sg_step_spec_defaults(sg_step_spec *spec);

/* Sub-group layout of one rank's parameters. */
typedef struct sg_subgroup_layout {
    int nsubgroups;      /* N */
    int first_cpu;       /* floor((1 - r) * N), or N without offload */
    int64_t rank_params; /* elements in this rank's partition */
} sg_subgroup_layout;

int sg_subgroup_layout_compute(const sg_model *model, const sg_step_spec *spec,
                               sg_subgroup_layout *layout, sg_error *err);

/* Elements of unit `unit` that this rank owns (its partition). */
int64_t sg_unit_shard_elems(const sg_model *model, const sg_step_spec *spec, int unit);

/* Where rank `rank`'s partition of unit `unit` starts in the unit: rank x
 * its shard for a sharded unit (the last rank's may run past the unit's
 * end: padding), 0 for a unit every rank holds whole. */
int64_t sg_unit_shard_offset(const sg_model *model, const sg_step_spec *spec, int unit, int rank);

/* Compiles one training step into g (initialised by the caller with
 * sg_graph_init, finalized on success). */
int sg_compile_step(const sg_model *model, const sg_step_spec *spec, sg_graph *g, sg_error *err);

#endif /* SG_COMPILE_H */
