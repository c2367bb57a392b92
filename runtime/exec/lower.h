/* lower.h - the one lowering of a step graph to StarPU, used by real runs
 * (exec.h) and by simulations (runtime/sim/sim_exec.h). It is compiled once
 * per StarPU flavour (native into stepgraph, SimGrid into stepgraph-sim), so
 * what is simulated is exactly what runs.
 *
 * Every IR buffer becomes a StarPU vector handle; every node one task of its
 * kind's codelet, inserted in the IR's program order with the node's accesses
 * merged per buffer, its name, its priority, where it may run and its
 * scheduling context, so StarPU infers exactly the graph's edges. After the
 * step's tasks, the step-local buffers the trainer does not read back are
 * invalidated (their memory is freed on every node).
 *
 * What differs between a real and a simulated run is sg_lower_target and
 * nothing else: the codelets (real kernels, or entry points SimGrid never
 * calls with a cost model), where buffers that outlive a step live (pinned
 * host memory, or fake addresses at their home memory node), whether GPU
 * nodes go to CUDA workers, and whether priorities are passed.
 *
 * Steps in flight: the lowering keeps `flights` copies of every node's task
 * context (sg_lower_flight), one per step that may be in flight at once
 * (run option lookahead). A step is submitted into one flight: its tasks
 * read that flight's hyper-parameters and write that flight's task records,
 * and the flight counts the step's unfinished tasks, so the caller can wait
 * for one step without waiting for all (sg_lower_flight_wait). The caller
 * must not submit into a flight whose previous step has not ended.
 *
 * The environment variable STEPGRAPH_TASK_LOG=PATH makes the first step's
 * submission write one line per task to PATH (name, codelet, priority,
 * where, context, buffers with access modes): tests compare the lists of a
 * real run and of a simulation.
 *
 * StarPU must be started before sg_lower_init.
 */
#ifndef SG_LOWER_H
#define SG_LOWER_H

#include <stdint.h>

#include "codelets/starpu/task_ctx.h"
#include "common/error.h"
#include "graph/ir.h"
#include "graph/liveness.h"
#include "runtime/exec/numa_place.h"
#include "runtime/exec/starpu_setup.h"

typedef enum sg_lower_memory {
    /* buffers that outlive a step (persistent and host-side ones) in host
     * memory from starpu_malloc, zeroed, pinned when CUDA workers exist */
    SG_LOWER_MEMORY_REAL,
    /* the same buffers registered at their home memory node (the first GPU
     * for GPU-side persistent ones) at distinct addresses that SimGrid never
     * dereferences */
    SG_LOWER_MEMORY_SIMULATED,
} sg_lower_memory;

typedef struct sg_lower_target {
    void *const *codelets; /* struct starpu_codelet * per sg_op_kind */
    sg_lower_memory memory;
    int have_cuda;             /* GPU nodes run on CUDA workers */
    int priorities;            /* pass the nodes' priorities (else all 0) */
    const char *sched;         /* policy, for the optimizer/compute contexts */
    double optimizer_share;    /* cpuadam_cores_perc of the CPU workers for the
                                  optimizer's CPU tasks; 0 = one context */
    int flights;               /* steps in flight at most (lookahead); 0 = 1 */
    int numa;                  /* several NUMA memory nodes: each CPU sub-group's state and
                                  optimizer tasks on one (numa_place.h) */
    struct sg_disk_node *disk; /* NVMe offload: the disk node the state's home is on
                                  (runtime/exec/disk_node.h), NULL without */
} sg_lower_target;

/* One step in flight: its hyper-parameters, its task records and how many of
 * its tasks (and of the caller's holds) have not finished. */
typedef struct sg_lower_flight {
    sg_step_params params;            /* read by the step's tasks; set before submitting */
    sg_task_record *records;          /* per node, filled by the task callbacks */
    int pending;                      /* unfinished tasks and holds (under lock) */
    double end_us;                    /* StarPU clock when pending last fell to 0 */
    int64_t peak_host, peak_gpu;      /* most StarPU-counted bytes seen at a task's end
                                    (sg_lower_memory_used), under lock */
    void *lock, *cond;                /* starpu_pthread_mutex_t, starpu_pthread_cond_t */
    const struct sg_disk_sched *disk; /* NVMe offload: prefetches at a task's end, or NULL */
} sg_lower_flight;

#define SG_OWNED_PINNED 2
#define SG_OWNED_DISK 4 /* homed on the disk node (NVMe offload) */

typedef struct sg_lowering {
    const sg_graph *graph;
    sg_lower_target target;
    void **handles;   /* starpu_data_handle_t per IR buffer */
    void **memory;    /* real memory behind a handle, or NULL */
    char *owned;      /* non-zero: registered here (SG_OWNED_PINNED set when its
                                  memory is pinned); 0: another lowering's handle */
    int shares;       /* this lowering borrows handles (sg_lower_init_sharing) */
    sg_task_ctx *ctx; /* per flight, per node: the task's cl_arg */
    int *slot_buffer; /* storage behind ctx[].slot_buffer */
    sg_access_mode *slot_mode;
    sg_task_record *records; /* per flight, per node: where and when it ran; flight
                                  0's first (what a one-step caller reads) */
    sg_lower_flight *flight; /* target.flights of them */
    int nflights;
    sg_sched_split split; /* cpuadam_cores_perc scheduling contexts */
    int64_t steps_submitted;
    sg_liveness live;   /* when each step-local value dies (graph/liveness.h) */
    sg_numa_place numa; /* sub-groups' NUMA nodes (target.numa) */
    /* the state's memory allocated here, and of it pinned (bytes; the
     * run's start-up line) */
    int64_t state_bytes, pinned_bytes;
    struct sg_disk_sched *disk; /* NVMe offload: the disk buffers' order, or NULL */
} sg_lowering;

/* Registers the graph's buffers and builds every node's cl_arg, pointing at
 * `shared` (whose records pointer is set to the lowering's). */
int sg_lower_init(sg_lowering *l, const sg_graph *g, sg_exec_shared *shared,
                  const sg_lower_target *t, sg_error *err);

/* The same for a second graph of the same run (SuperOffload's step that
 * waits for the gradient norm instead of speculating): a buffer whose name,
 * size, dtype, memory space and persistence match one of `base`'s uses
 * base's handle, so both graphs work on the same state; the others are
 * registered here; it uses base's scheduling contexts. Free it before base. SG_EINVAL if a same-named buffer
 * differs. */
int sg_lower_init_sharing(sg_lowering *l, const sg_graph *g, sg_exec_shared *shared,
                          const sg_lower_target *t, const sg_lowering *base, sg_error *err);

/* Submits one step into flight f (0 <= f < l->nflights, whose previous step
 * has ended; its params set): every node's task in program order, each
 * followed by the invalidation of the step-local values that die after it
 * (graph/liveness.h), so StarPU frees a buffer right after its last use, as
 * the plan's peak (sg_graph_peak_memory) assumes. STEPGRAPH_LIVENESS=0 in the
 * environment invalidates them all at the end of the step instead. Does not
 * wait. */
int sg_lower_submit_step(sg_lowering *l, int f, sg_error *err);

/* A hold keeps a flight from ending (the caller's own asynchronous work of
 * that step: token writes, result reads); release drops it (callable from a
 * StarPU callback). wait blocks until every task and hold of the flight has
 * finished; done says whether they have, without waiting. */
void sg_lower_flight_hold(sg_lower_flight *f);
void sg_lower_flight_release(sg_lower_flight *f);
void sg_lower_flight_wait(sg_lower_flight *f);
int sg_lower_flight_done(sg_lower_flight *f);
/* Waits as sg_lower_flight_wait, but calls check(arg) each time every_s
 * seconds pass without the flight ending; gives up when check returns
 * nonzero and returns that (0: the flight ended). */
int sg_lower_flight_wait_polling(sg_lower_flight *f, double every_s, int (*check)(void *),
                                 void *arg);

/* Whether buffer b keeps its value after a step: state, and what the trainer
 * reads back (losses, gradient norm, overflow flag): sg_buffer_outlives_step. */
int sg_lower_kept_after_step(const sg_buffer *b);

/* Bytes StarPU counts as used now: summed over the CPU memory nodes (data
 * it allocated, and our buffers, allocated with STARPU_MALLOC_COUNT), and
 * on the busiest GPU. Each flight keeps the most seen at a task's end
 * (peak_host, peak_gpu). */
void sg_lower_memory_used(int64_t *host, int64_t *gpu);

/* Waits for every task, unregisters the handles, frees the memory and the
 * contexts. StarPU stays started. */
void sg_lower_free(sg_lowering *l);

#endif /* SG_LOWER_H */
