/* sim_exec.h - the step graph on StarPU's SimGrid flavour (stepgraph-sim).
 *
 * The lowering is a real run's own (runtime/exec/lower.h, the same source
 * compiled against this flavour): one handle per IR buffer, one task per
 * node, inserted in program order with the node's accesses, name and
 * priority, under the same policy and cpuadam_cores_perc contexts. What
 * differs is the lowering's target: nothing executes. Each kind's codelet has CPU and CUDA entry
 * points that SimGrid never calls, and a performance model that says how
 * long a task takes: the roofline cost (sim_cost.h) for modelled machines,
 * or the history StarPU recorded on a calibrated one. Buffers that live
 * across steps are registered at their home memory (host or GPU) without
 * data; StarPU moves data between memories over the simulated links exactly
 * as it would for real, so transfers, their contention and the GPU memory
 * size are StarPU's and SimGrid's, not ours.
 *
 * Built only against StarPU configured with --enable-simgrid.
 */
#ifndef SG_SIM_EXEC_H
#define SG_SIM_EXEC_H

#include <stdint.h>

#include "graph/compile.h"
#include "models/model.h"
#include "common/error.h"
#include "runtime/config/machine.h"
#include "runtime/trace/overlap.h"

typedef struct sg_sim_options {
    const char *sched;
    int priorities;               /* pass bottom levels as StarPU priorities */
    int steps;                    /* simulated steps; the last one is reported */
    int lookahead;                /* steps in flight at once, as run's option; 0 or 1 =
                                     wait for each step before submitting the next */
    double optimizer_cores_share; /* cpuadam_cores_perc (0 = one context) */
    const char *trace_path;       /* Chrome trace of the last step, or NULL */
    int static_bandwidth;         /* 1: a CPU task's bandwidth is a fixed share of the
                                     socket (sim_cost.h); 0: shared among the tasks
                                     streaming at the moment (sim_share.h) */
    int fitted_costs;             /* calibrated machine: CPU task times from the fit of
                                     its history (sim_costfit.h), not the history */
    const sg_model *model;        /* the GPU kernel model's shapes (sim_cost.h); NULL:
                                     GPU tasks keep the roofline */
    int rollback_passes;          /* SuperOffload's validations (sim_cost.h) */
    int eager_attention;          /* 1: layers' attention as Hugging Face's eager ops
                                     (eager_attention.h); 0: fused */
} sg_sim_options;

typedef struct sg_sim_result {
    double step_s; /* the last step, simulated seconds: with lookahead 1
                                     from its submission to its end; with steps in
                                     flight from the previous step's end to its end */
    sg_overlap stats;
    int ncpu, ncuda; /* simulated workers */
    int64_t link_bytes[SG_LINK_COUNT];
    int64_t link_transfers[SG_LINK_COUNT];
    double link_s[SG_LINK_COUNT]; /* bytes at the link's bandwidth + latency per transfer */
    /* ZeRO-Infinity's disk (sim_disk.h), the last step's: bytes read and
     * written, seconds the disk was busy */
    int64_t disk_read_bytes, disk_write_bytes;
    double disk_s;
} sg_sim_result;

/* StarPU must not be started. Starts it (SimGrid reads the platform of
 * $STARPU_HOSTNAME under $STARPU_PERF_MODEL_DIR, set by the caller), runs
 * the steps and shuts it down. */
int sg_sim_run(const sg_machine *m, const sg_step_spec *spec, const sg_graph *g,
               const sg_sim_options *opt, sg_sim_result *res, sg_error *err);

#endif /* SG_SIM_EXEC_H */
