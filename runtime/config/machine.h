/* machine.h - machine models, one JSON file each under configs/machines/.
 *
 * A machine model states a node's CPU, GPU, memories and links with their
 * public figures (each file cites its sources) and the efficiency each op
 * class reaches. It becomes an sg_cost_model for the graph analysis (ideal
 * machine critical path) and, later, the SimGrid platform and cost
 * functions.
 */
#ifndef SG_MACHINE_H
#define SG_MACHINE_H

#include "graph/analysis.h"
#include "common/error.h"
#include "graph/ir.h"

/* sg_op_class, sg_op_kind_class() and sg_op_class_name(): graph/op_kinds.h */

/* One published attention throughput: FlashAttention-style kernels, causal,
 * at one head dimension and sequence length, each direction in TFLOP/s as
 * the kernels' authors count them (backward = 2.5x the forward's FLOPs). */
typedef struct sg_attn_point {
    double head_dim, seq, fwd_tflops, bwd_tflops;
} sg_attn_point;
#define SG_ATTN_POINTS_MAX 16

/* gpu.kernels: how the GPU's kernels behave, from measurements the file
 * cites (runtime/sim/gpu_kernels.h uses them); gemm_tflops 0 = not given,
 * the GPU then takes the flat roofline of "efficiency". */
typedef struct sg_gpu_kernels {
    double gemm_tflops; /* best measured dense GEMM, compute dtype (bf16) */
    int sms;            /* SMs / CUs: the GEMM's wave quantization */
    double hbm_gbs;     /* achieved device-to-device copy bandwidth */
    double launch_us;   /* fixed cost of one GPU task (its kernel launches) */
    int nattn;
    sg_attn_point attn[SG_ATTN_POINTS_MAX];
} sg_gpu_kernels;

typedef struct sg_machine {
    char name[64];
    int nodes; /* superchips / ranks */
    int cpu_cores;
    double cpu_ghz;
    double cpu_fp32_flops_per_cycle;
    double cpu_memory_gb;
    double cpu_memory_bw_gbs;
    double cpu_core_bw_gbs; /* one core streaming alone; 0 = not given */
    int numa_nodes;
    int gpu_count; /* per node */
    char gpu_name[64];
    double gpu_memory_gb;
    double gpu_memory_bw_gbs;
    double gpu_tflops_bf16, gpu_tflops_fp16, gpu_tflops_fp32;
    sg_gpu_kernels kernels; /* gpu.kernels, optional */
    double h2d_gbs, d2h_gbs, gpu_gpu_gbs, latency_us;
    char interconnect[128]; /* links.interconnect: the fabric between devices;
                                      * required when nodes x gpu.count > 1 */
    int unified_memory;
    double shared_memory_bw_gbs; /* unified memory: the one pool's bandwidth (GB/s),
                                      * shared by CPU and GPU; 0 otherwise */
    double efficiency[SG_CLASS_COUNT];
    /* set for machines `stepgraph calibrate` measured: the StarPU sampling
     * directory (history models of the sg_<kind> codelets) and the
     * STARPU_HOSTNAME they were saved under; "" otherwise */
    char calibration_dir[4096];
    char calibration_host[64];
    double calibration_step_ms; /* mean step measured while calibrating, 0 = unknown */
    /* "disk" (optional): the drive ZeRO-Infinity's "nvme" state lives on;
     * capacity 0 = the file gives none (such a machine cannot offload to nvme) */
    char disk_name[128];
    double disk_capacity_gb, disk_read_gbs, disk_write_gbs;
} sg_machine;

/* Loads a machine model; errors name the file, the JSON path and value. */
int sg_machine_load(const char *path, sg_machine *m, sg_error *err);

/* A name ("gh200") or a path: names resolve to <machines dir>/<name>.json,
 * the machines dir being $STEPGRAPH_MACHINES_DIR, the source tree's
 * configs/machines, or the installed $(pkgdatadir)/machines. */
int sg_machine_resolve(const char *name_or_path, char *out, size_t size, sg_error *err);

/* One GPU's dense peak for the compute dtype in TFLOP/s (MFU's denominator,
 * docs/flops.md); 0 on a machine without GPU. */
double sg_machine_gpu_peak_tflops(const sg_machine *m, sg_dtype compute);

/* SG_EINVAL naming the machine and the key when the step puts state on disk
 * (offload_optimizer or offload_param device "nvme": what, e.g.
 * "zero_optimization.offload_optimizer.device") and the file gives no disk. */
int sg_machine_check_disk(const sg_machine *m, const char *what, sg_error *err);

/* Cost model for one rank of the machine, with GPU peak for the compute dtype. */
void sg_machine_cost_model(const sg_machine *m, sg_dtype compute, sg_cost_model *cm);

#endif /* SG_MACHINE_H */
