/* sim_cost.h - how long a graph node takes on one simulated worker.
 *
 * The roofline estimate for machines that were never measured: a node's time
 * on one worker is the larger of its FLOPs over the worker's peak and its
 * bytes over the worker's memory bandwidth, each derated by the efficiency
 * the machine model states for the node's op class. A GPU worker is the
 * whole GPU; a CPU worker is one core, whose bandwidth is the machine's
 * memory bandwidth shared by the CPU tasks expected to stream at once
 * (capped by what one core can draw alone, cpu.core_bw_gbs). Where the
 * machine file gives gpu.kernels and the model is set
 * (sg_sim_costs_set_model), GPU tasks are costed from their kernels
 * instead (gpu_kernels.h): products by shape, attention at published
 * FlashAttention rates (or as Hugging Face's eager ops: the attention
 * field), element-wise and other memory-bound work at the achieved HBM
 * bandwidth.
 *
 * Host/device copy nodes run where their destination is and StarPU moves
 * their source over the modelled link (sim_platform.h), so their own time is
 * only the link latency. Collectives at data-parallel size 1 are local
 * copies; above, they add the ring traffic over the GPU-GPU link.
 * SuperOffload's validation costs its keep path (it reads the norm); the
 * rare rollback and redo is not modelled.
 */
#ifndef SG_SIM_COST_H
#define SG_SIM_COST_H

#include "graph/ir.h"
#include "models/model.h"
#include "runtime/config/machine.h"
#include "runtime/sim/gpu_kernels.h"

typedef enum sg_sim_arch { SG_SIM_CPU, SG_SIM_GPU } sg_sim_arch;

typedef struct sg_sim_costs {
    const sg_machine *machine;
    sg_dtype compute; /* the GPU peak used for GEMM-class nodes */
    int dp_size;
    double cpu_core_bw; /* B/s one CPU worker gets (see above) */
    /* set by sg_sim_costs_set_model: with the machine's gpu.kernels, GPU
     * tasks take the kernel model (gpu_kernels.h) instead of the roofline */
    const sg_model *model;
    int64_t tokens; /* rows of a GPU unit task: micro-batch x sequence */
    int64_t seq_len;
    /* SuperOffload's validation of a speculative sub-group step: 0 its norm
     * check alone (a task's overhead); N > 0: N passes over the data it
     * declares (the gradient, the fp32 master, the moments: one Adam pass),
     * as when every speculative step rolls back (a rollback and redo: one
     * pass with sg_adam_redo, two before it) */
    int rollback_passes;
    /* how a layer's attention is costed under the kernel model: fused
     * (FlashAttention-class, the default) or Hugging Face's eager ops */
    sg_attention_impl attention;
} sg_sim_costs;

/* cpu_streams: how many CPU tasks are expected to stream memory at once
 * (the caller passes min(CPU optimizer tasks of a step, CPU workers)). */
void sg_sim_costs_init(sg_sim_costs *c, const sg_machine *m, sg_dtype compute, int dp_size,
                       int cpu_streams);

/* The model and shapes the GPU kernel model needs (a GPU unit task covers
 * micro_batch sequences of seq_len tokens). Without it, or without the
 * machine's gpu.kernels, GPU tasks keep the roofline. */
void sg_sim_costs_set_model(sg_sim_costs *c, const sg_model *model, int64_t micro_batch,
                            int64_t seq_len);

/* Makes cm cost GPU nodes as c does (cm->gpu_seconds) where the kernel
 * model applies; c must outlive cm's use. Returns 1 if it applies, else 0
 * (cm unchanged: the roofline). */
int sg_sim_cost_model_use_kernels(sg_cost_model *cm, const sg_sim_costs *c);

/* Seconds node nd takes on one worker of architecture a. */
double sg_sim_node_seconds(const sg_sim_costs *c, const sg_node *nd, sg_sim_arch a);

/* What a node asks of its worker, for the dynamic bandwidth share
 * (sim_share.h): its time is fixed_s + max(compute_s, bytes / rate) when it
 * streams at a constant rate. bytes are derated by the op class's
 * efficiency (bytes / efficiency at the memory's raw bandwidth), so at
 * rate = alone_bw the time is sg_sim_node_seconds's with one stream. Copy
 * and overhead-only kinds have bytes = compute_s = 0. */
typedef struct sg_sim_demand {
    double fixed_s;   /* launch overhead, latency, collective traffic */
    double compute_s; /* FLOPs at the worker's peak x efficiency */
    double bytes;     /* bytes streamed / efficiency */
    double alone_bw;  /* bytes/s the worker draws alone: a CPU core's
                          core_bw_gbs (or the socket's), the GPU's HBM */
} sg_sim_demand;

void sg_sim_node_demand(const sg_sim_costs *c, const sg_node *nd, sg_sim_arch a, sg_sim_demand *d);

#endif /* SG_SIM_COST_H */
