/* sim_cost.c - roofline time of a node on one simulated worker (sim_cost.h). */
#include "runtime/sim/sim_cost.h"

#include <math.h>

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
}

static double gpu_peak(const sg_sim_costs *c, const sg_node *nd)
{
    const sg_machine *m = c->machine;
    /* GEMM-class nodes run at the compute dtype's tensor peak; the rest is
     * fp32 vector work */
    if (sg_op_kind_class(nd->kind) != SG_CLASS_GEMM)
        return m->gpu_tflops_fp32 * 1e12;
    return (c->compute == SG_BF16 ? m->gpu_tflops_bf16
            : c->compute == SG_F16 ? m->gpu_tflops_fp16 : m->gpu_tflops_fp32) * 1e12;
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

void sg_sim_node_demand(const sg_sim_costs *c, const sg_node *nd, sg_sim_arch a,
                        sg_sim_demand *d)
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
    if (info && info->cost_rule == SG_COST_OVERHEAD) {
        d->fixed_s = a == SG_SIM_GPU ? GPU_TASK_OVERHEAD_S : CPU_TASK_OVERHEAD_S;
        return;
    }
    d->bytes = (double)(nd->bytes_read + nd->bytes_written) / eff;
    if (a == SG_SIM_GPU) {
        d->compute_s = nd->flops / (gpu_peak(c, nd) * eff);
        d->alone_bw = m->gpu_memory_bw_gbs * 1e9;
        d->fixed_s = GPU_TASK_OVERHEAD_S;
    } else {
        d->compute_s = nd->flops / (m->cpu_ghz * 1e9 * m->cpu_fp32_flops_per_cycle * eff);
        d->alone_bw = (m->cpu_core_bw_gbs > 0 && m->cpu_core_bw_gbs < m->cpu_memory_bw_gbs
                           ? m->cpu_core_bw_gbs : m->cpu_memory_bw_gbs) * 1e9;
        d->fixed_s = CPU_TASK_OVERHEAD_S;
    }
    if (cls == SG_CLASS_COLLECTIVE)
        d->fixed_s += collective_seconds(c, nd);
}

double sg_sim_node_seconds(const sg_sim_costs *c, const sg_node *nd, sg_sim_arch a)
{
    sg_sim_demand d;
    sg_sim_node_demand(c, nd, a, &d);
    /* a CPU task's bandwidth: the static share of the socket (sg_sim_costs_init) */
    double bw = a == SG_SIM_GPU ? d.alone_bw : c->cpu_core_bw;
    return d.fixed_s + fmax(d.compute_s, d.bytes / bw);
}
