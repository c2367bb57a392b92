/* starpu_setup.h - StarPU set-up shared by real runs (exec.c) and
 * simulations (sim_exec.c): policy names and the cpuadam_cores_perc split of
 * the CPU workers into scheduling contexts. Compiled once per StarPU flavour. */
#ifndef SG_STARPU_SETUP_H
#define SG_STARPU_SETUP_H

#include "common/error.h"
#include "graph/ir.h"
#include "runtime/trace/overlap.h"

/* SG_EINVAL naming the known policies if `name` is not one of StarPU's. */
int sg_starpu_check_policy(const char *name, sg_error *err);

/* The scheduling contexts of a run: with share > 0 (cpuadam_cores_perc on an
 * offloaded optimizer), the last floor(share * ncpu) CPU workers serve only
 * the optimizer's CPU tasks and the other workers everything else; at least
 * one CPU worker stays for the rest when there is no GPU. */
typedef struct sg_sched_split {
    unsigned compute_ctx, optimizer_ctx;
    int reserved; /* CPU workers only the optimizer uses; 0 = one context */
} sg_sched_split;

int sg_starpu_split_workers(sg_sched_split *s, double share, const char *sched);
void sg_starpu_split_free(sg_sched_split *s);

/* The context node nd's task goes to: the optimizer's for CPU nodes of the
 * kinds graph/op_kinds.h marks optimizer_ctx, when cores are reserved. */
unsigned sg_starpu_ctx_for(const sg_sched_split *s, const sg_node *nd);

/* Where a node's task may run (STARPU_CPU / STARPU_CUDA bits) on a machine
 * with or without CUDA workers: GPU work on the GPU; the optimizer's host
 * side and the host-state updates (overflow check, loss scale) on CPUs;
 * device-to-host copies on the CPU side, host-to-device ones on the GPU
 * side; casts wherever the scheduler prefers (the placement column of
 * graph/op_kinds.h), unless the node is pinned (sg_node.pinned: cast_placement
 * cpu or gpu), then on its device only. Native runs and simulations use the
 * same rule. */
uint32_t sg_starpu_where(const sg_node *nd, int have_cuda);

/* sg_overlap_compute over the running StarPU's workers (CUDA ones count as
 * GPUs): one step's records, real or simulated. */
int sg_starpu_overlap(const sg_graph *g, const sg_task_record *records, sg_overlap *out);
/* sg_overlap_window likewise (steps in flight). */
int sg_starpu_overlap_window(const sg_graph *const *graphs, const sg_task_record *const *records,
                             int nsteps, double a_us, double b_us, sg_overlap *out);

#endif /* SG_STARPU_SETUP_H */
