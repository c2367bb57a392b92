/* analysis.h - what a step graph costs: counts, FLOPs, link bytes, peak
 * memory, and the critical path on an ideal machine.
 *
 * "Ideal machine": unlimited workers of each class, every node running at
 * the roofline of a reference device (sg_cost_model) and only dependencies
 * delaying it. The default reference is one GH200 (figures in
 * sg_cost_model_gh200); the simulation issue replaces it by machine models.
 */
#ifndef SG_ANALYSIS_H
#define SG_ANALYSIS_H

#include <stdint.h>

#include "graph/ir.h"

typedef struct sg_cost_model {
    const char *name;
    double gpu_flops;                    /* FLOP/s at the compute dtype, dense */
    double gpu_mem_bw;                   /* B/s */
    double cpu_flops;                    /* FLOP/s of all cores, fp32 vector FMA */
    double cpu_mem_bw;                   /* B/s */
    double link_bw[SG_LINK_COUNT];       /* B/s per direction: h2d, d2h, net */
    double link_latency;                 /* s per transfer */
    double efficiency[SG_OP_KIND_COUNT]; /* share of peak a kind reaches (0, 1] */
    double gpu_mem_bytes;                /* capacity; 0 = unknown */
    double host_mem_bytes;
    int unified_memory;                 /* CPU and GPU share one memory (MI300A) */
    double disk_read_bw, disk_write_bw; /* B/s of the disk ZeRO-Infinity's state lives on;
                                           0 = the machine has none */
    double disk_bytes;                  /* its capacity */
    int no_gpu; /* a CPU-only machine: the GPU-side tasks run on one CPU core
                                each (gpu_flops and gpu_mem_bw are that core's) */
    /* optional: a GPU node's seconds from a finer model than the roofline
     * (the machine's kernel model, runtime/sim/sim_cost.h), used as they are
     * (no efficiency); NULL: the roofline */
    double (*gpu_seconds)(const void *ctx, const sg_node *n);
    const void *gpu_ctx;
    /* SuperOffload's validations: 0 their norm check (next to nothing);
     * N > 0 N passes over their data at the CPU Adam's efficiency, as when
     * every speculative step rolls back (simulate --rollback-passes) */
    int validate_passes;
} sg_cost_model;

/* GH200 figures from public specs (see DESIGN.md): H100 989 TFLOP/s bf16
 * dense and 4 TB/s HBM3; 72 Neoverse V2 cores (4x128-bit FMA pipes, 3.1 GHz:
 * 72 * 3.1e9 * 32 = 7.1 TFLOP/s fp32) with ~500 GB/s LPDDR5X; NVLink-C2C
 * 450 GB/s per direction. */
void sg_cost_model_gh200(sg_cost_model *cm);

/* Seconds node n takes on the reference device (roofline: the larger of
 * compute time and memory time; transfers: latency + bytes / bandwidth),
 * divided by the efficiency of its kind. */
double sg_node_ideal_seconds(const sg_cost_model *cm, const sg_node *n);

typedef struct sg_summary {
    int nnodes, nedges, nbuffers;
    int count[SG_OP_KIND_COUNT];
    double flops_total;
    double flops_by_device[SG_DEV_COUNT];
    int64_t link_bytes[SG_LINK_COUNT];
    int64_t peak_bytes[SG_MEM_COUNT]; /* in program order */
    int64_t persistent_bytes[SG_MEM_COUNT];
    double critical_path_s; /* on the ideal machine */
    int critical_path_nodes;
    double work_s[SG_DEV_COUNT];       /* sum of ideal node times per class */
    double fixed_work_s[SG_DEV_COUNT]; /* the same without the nodes the scheduler may
                                               place on either side (casts unless pinned):
                                               what the lower bound may count */
    const char *cost_model_name;
    double capacity_bytes[SG_MEM_COUNT]; /* of the cost model's machine, 0 = unknown */
    int unified_memory;
    /* the disk tier (graph/disk_tier.h, sg_disk_tier_apply); 0 without one */
    int64_t disk_bytes;                         /* state on disk */
    int64_t disk_ram_bytes;                     /* its working set in RAM (in peak_bytes[HOST]) */
    int64_t disk_read_bytes, disk_write_bytes;  /* per step */
    int64_t disk_buffer_count, disk_tile_bytes; /* optimizer tiles in RAM, the largest's bytes */
    int64_t disk_param_ram_bytes, disk_param_buffer_count; /* the parameters' share of it */
    double disk_capacity_bytes; /* of the cost model's machine, 0 = no disk */
} sg_summary;

int sg_summary_compute(const sg_graph *g, const sg_cost_model *cm, sg_summary *s);

/* A lower bound of the step on the cost model's machine (one GPU, its CPU
 * socket, its links): the largest of the GPU tasks' ideal times summed, the
 * CPU tasks' summed, each link direction's bytes over its bandwidth, and the
 * ideal critical path. *bound_by names which in a phrase, *short_name in a
 * word or two ("GPU compute", "CPU work", "h2d link", "d2h link", "critical
 * path"); either may be NULL. */
double sg_step_lower_bound(const sg_summary *s, const sg_cost_model *cm, const char **bound_by,
                           const char **short_name);

/* Bottom level of every node: the longest path, in seconds on the ideal
 * machine, from the node's start to the end of the step (the node included).
 * out has g->nnodes entries. Returns 0 or SG_ENOMEM. */
int sg_graph_bottom_levels(const sg_graph *g, const sg_cost_model *cm, double *out);

/* Sets every node's priority to its bottom level in microseconds, so that
 * priority-aware policies (dmdas, prio, heteroprio...) run the critical path
 * first. Returns 0 or SG_ENOMEM. */
int sg_graph_set_priorities(sg_graph *g, const sg_cost_model *cm);

/* Peak bytes live per memory space when the nodes run in program order,
 * with the liveness of graph/liveness.h (the rule the execution follows): a
 * persistent buffer is always live; another value lives from the node that
 * starts it to the node it dies after, both included. */
int sg_graph_peak_memory(const sg_graph *g, int64_t peak[SG_MEM_COUNT],
                         int64_t persistent[SG_MEM_COUNT]);

/* The same when one memory holds both spaces (a CPU-only run, where StarPU
 * keeps the GPU-space buffers in main RAM too). */
int sg_graph_peak_memory_one_space(const sg_graph *g, int64_t *peak, int64_t *persistent);

#endif /* SG_ANALYSIS_H */
