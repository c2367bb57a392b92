/* sim_cost.c - roofline time of a node on one simulated worker (sim_cost.h). */
#include "runtime/sim/sim_cost.h"

#include <math.h>

#include "runtime/sim/gpu_kernels.h"

/* What a GPU task costs besides its roofline time: the kernel launches of
 * one unit's forward or backward (tens of kernels at a few microseconds). */
#define GPU_TASK_OVERHEAD_S 20e-6
/* A CPU task's fixed cost (StarPU's own per-task cost is 3-9 us here). */
#define CPU_TASK_OVERHEAD_S 5e-6

void sg_sim_costs_init(sg_sim_costs *c, const sg_machine *m, sg_dtype compute, int dp_size,
                       int cpu_streams)
{
    c->machine = m;
    c->compute = compute;
    c->dp_size = dp_size > 0 ? dp_size : 1;
    if (cpu_streams < 1)
        cpu_streams = 1;
    double bw = m->cpu_memory_bw_gbs * 1e9 / cpu_streams;
    if (m->cpu_core_bw_gbs > 0 && bw > m->cpu_core_bw_gbs * 1e9)
        bw = m->cpu_core_bw_gbs * 1e9;
    c->cpu_core_bw = bw;
    c->model = NULL;
    c->tokens = c->seq_len = 0;
    c->rollback_passes = 0;
    c->attention = SG_ATTENTION_FUSED;
}

void sg_sim_costs_set_model(sg_sim_costs *c, const sg_model *model, int64_t micro_batch,
                            int64_t seq_len)
{
    c->model = model;
    c->tokens = micro_batch * seq_len;
    c->seq_len = seq_len;
}

/* The kernel model applies: the file gives gpu.kernels and the model is known. */
static int kernel_model(const sg_sim_costs *c)
{
    return c->model && c->machine->gpu_count > 0 && c->machine->kernels.gemm_tflops > 0;
}

/* A GPU task under the kernel model (gpu_kernels.h): units' forward,
 * recompute and backward from their shapes; MoE experts as products of
 * the tokens one expert gets on average; the rest streams its bytes at the
 * achieved HBM bandwidth (expressed, as the roofline's, in bytes at the raw
 * bandwidth so that the shared-bandwidth model divides the same pool). */
static void gpu_kernel_demand(const sg_sim_costs *c, const sg_node *nd, sg_sim_demand *d)
{
    const sg_machine *m = c->machine;
    const sg_gpu_kernels *k = &m->kernels;
    const sg_model *md = c->model;
    double raw_per_achieved = m->gpu_memory_bw_gbs / k->hbm_gbs;
    d->fixed_s = k->launch_us * 1e-6;
    d->alone_bw = m->gpu_memory_bw_gbs * 1e9;
    d->bytes = (double)(nd->bytes_read + nd->bytes_written) * raw_per_achieved;
    switch (nd->kind) {
    case SG_OP_FORWARD:
    case SG_OP_RECOMPUTE:
    case SG_OP_BACKWARD:
        d->compute_s =
            sg_unit_gpu_seconds(k, md, nd->layer, c->tokens, c->seq_len, nd->kind,
                                nd->flops - nd->attention_flops, nd->attention_flops, c->attention);
        return;
    case SG_OP_MOE_EXPERT:
    case SG_OP_MOE_EXPERT_BWD: {
        /* (T k / E, 2F) gate and up over H: the expert's typical product */
        double rows = (double)c->tokens * (double)md->experts_per_token /
                      (double)(md->num_experts > 0 ? md->num_experts : 1);
        double n = 2.0 * (double)md->moe_intermediate_size, kk = (double)md->hidden_size;
        double t = sg_gemm_seconds(k, rows, n, kk);
        d->compute_s = t > 0 ? nd->flops / (2 * rows * n * kk / t) : 0;
        return;
    }
    default: d->compute_s = nd->flops / (m->gpu_tflops_fp32 * 1e12); return;
    }
}

static double gpu_peak(const sg_sim_costs *c, const sg_node *nd)
{
    const sg_machine *m = c->machine;
    /* GEMM-class nodes run at the compute dtype's tensor peak; the rest is
     * fp32 vector work */
    if (sg_op_kind_class(nd->kind) != SG_CLASS_GEMM)
        return m->gpu_tflops_fp32 * 1e12;
    return (c->compute == SG_BF16  ? m->gpu_tflops_bf16
            : c->compute == SG_F16 ? m->gpu_tflops_fp16
                                   : m->gpu_tflops_fp32) *
           1e12;
}

static double collective_seconds(const sg_sim_costs *c, const sg_node *nd)
{
    const sg_machine *m = c->machine;
    if (c->dp_size <= 1 || nd->link_bytes <= 0)
        return 0;
    double eff = m->efficiency[SG_CLASS_COLLECTIVE];
    return m->latency_us * 1e-6 * (c->dp_size - 1) +
           (double)nd->link_bytes / (m->gpu_gpu_gbs * 1e9 * eff);
}

void sg_sim_node_demand(const sg_sim_costs *c, const sg_node *nd, sg_sim_arch a, sg_sim_demand *d)
{
    const sg_machine *m = c->machine;
    sg_op_class cls = sg_op_kind_class(nd->kind);
    double eff = m->efficiency[cls];
    *d = (sg_sim_demand){0, 0, 0, 1};
    if (cls == SG_CLASS_COPY) {
        d->fixed_s = m->latency_us * 1e-6;
        return;
    }
    /* kinds whose work is not modelled (SuperOffload's validation reads the
     * norm only; a rollback and redo is rare) cost a task's overhead */
    const sg_op_kind_info *info = sg_op_kind_info_of(nd->kind);
    int passes = nd->kind == SG_OP_VALIDATE ? c->rollback_passes : 1;
    if (info && info->cost_rule == SG_COST_OVERHEAD && passes == 0) {
        d->fixed_s = a == SG_SIM_GPU ? GPU_TASK_OVERHEAD_S : CPU_TASK_OVERHEAD_S;
        return;
    }
    /* a rollback and a redo are Adam's passes: the CPU optimizer's efficiency */
    if (nd->kind == SG_OP_VALIDATE)
        eff = m->efficiency[SG_CLASS_OPTIMIZER_CPU];
    if (a == SG_SIM_GPU && kernel_model(c)) {
        gpu_kernel_demand(c, nd, d);
        if (cls == SG_CLASS_COLLECTIVE)
            d->fixed_s += collective_seconds(c, nd);
        return;
    }
    d->bytes = passes * (double)(nd->bytes_read + nd->bytes_written) / eff;
    if (a == SG_SIM_GPU) {
        d->compute_s = nd->flops / (gpu_peak(c, nd) * eff);
        d->alone_bw = m->gpu_memory_bw_gbs * 1e9;
        d->fixed_s = GPU_TASK_OVERHEAD_S;
    } else {
        d->compute_s = passes * nd->flops / (m->cpu_ghz * 1e9 * m->cpu_fp32_flops_per_cycle * eff);
        d->alone_bw = (m->cpu_core_bw_gbs > 0 && m->cpu_core_bw_gbs < m->cpu_memory_bw_gbs
                           ? m->cpu_core_bw_gbs
                           : m->cpu_memory_bw_gbs) *
                      1e9;
        d->fixed_s = CPU_TASK_OVERHEAD_S;
    }
    if (cls == SG_CLASS_COLLECTIVE)
        d->fixed_s += collective_seconds(c, nd);
}

static double kernel_node_seconds(const void *ctx, const sg_node *nd)
{
    return sg_sim_node_seconds(ctx, nd, SG_SIM_GPU);
}

int sg_sim_cost_model_use_kernels(sg_cost_model *cm, const sg_sim_costs *c)
{
    if (!kernel_model(c))
        return 0;
    cm->gpu_seconds = kernel_node_seconds;
    cm->gpu_ctx = c;
    return 1;
}

double sg_sim_node_seconds(const sg_sim_costs *c, const sg_node *nd, sg_sim_arch a)
{
    sg_sim_demand d;
    sg_sim_node_demand(c, nd, a, &d);
    /* a CPU task's bandwidth: the static share of the socket (sg_sim_costs_init) */
    double bw = a == SG_SIM_GPU ? d.alone_bw : c->cpu_core_bw;
    return d.fixed_s + fmax(d.compute_s, d.bytes / bw);
}
