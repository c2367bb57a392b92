/* exec.h - runs a compiled step graph on StarPU.
 *
 * Lowering: every IR buffer becomes a StarPU vector handle (persistent and
 * host buffers in memory allocated with starpu_malloc, which pins it when
 * CUDA workers exist; the others are allocated by StarPU where a task first
 * writes them and invalidated after each step), and every node becomes one
 * task of its kind's codelet (codelets/starpu/codelets.h), inserted in the
 * IR's program order with the node's accesses, so StarPU infers exactly the
 * graph's edges. Tasks are named after their node and carry its priority.
 *
 * Steps in flight (run option lookahead): the trainer begins a step (its
 * hyper-parameters, its graph), stages its tokens, and submits it without
 * waiting for the steps before it, up to `lookahead` steps at once. Tokens
 * reach their buffers by asynchronous writes that StarPU orders after the
 * previous step's readers; right after a step's tasks, asynchronous reads
 * copy its losses, gradient norm, overflow flag and loss scaler state into
 * the step's own record, ordered before the next step's writers. Finishing
 * a step waits for that step only (its tasks and those copies) and makes
 * its results the ones the read functions below return. There is no global
 * wait between steps.
 */
#ifndef SG_EXEC_H
#define SG_EXEC_H

#include <stdint.h>

#include "codelets/starpu/task_ctx.h"
#include "common/error.h"
#include "runtime/trace/overlap.h"
#include "runtime/exec/disk_node.h"
#include "runtime/exec/lower.h"
#include "runtime/exec/stall.h"
#include "runtime/exec/starpu_setup.h"
#include "runtime/io/weights.h"

typedef struct sg_exec_options {
    const char *sched;            /* StarPU policy name */
    int ncpus, ncuda;             /* -1: StarPU's default */
    int numa_node;                /* bind CPU workers to this node's cores; -1: StarPU's binding */
    int numa_by_rank;             /* bind_cores_to_rank: bind to NUMA node rank mod the node
                                      count (rank: comm's, 0 without) instead of numa_node */
    int numa;                     /* run option numa: StarPU's NUMA memory nodes
                                      (STARPU_USE_NUMA=1), state placed per node */
    int numa_emulate;             /* run option numa_emulate: this many emulated NUMA
                                      nodes (numa_topo.h); 0 = the machine's own */
    double optimizer_cores_share; /* cpuadam_cores_perc: CPU workers reserved for
                                      the optimizer's CPU tasks (0 = none) */
    int lookahead;                /* steps in flight at most; 0 = 1 */
    const struct sg_comm *comm;   /* several ranks (runtime/dist/): the task collectives;
                                      NULL for one rank. Its size must be the spec's dp_size */
    const struct sg_comm *launch; /* the MPI world when mpirun started this process (even
                                      of one rank), else NULL: CUDA workers get their NCCL
                                      communicator's unique id over it (exec_cuda.h) */
    const struct sg_disk_plan *disk; /* NVMe offload (runtime/exec/disk_node.h), or NULL */
} sg_exec_options;

/* A step in flight, as the exec sees it. */
typedef struct sg_exec_step {
    sg_lowering *low;      /* the graph it runs: the main or the waiting one */
    int waited;            /* it is the waiting one */
    double submit_us;      /* StarPU clock when its submission began */
    unsigned char *copy;   /* its read-back buffers' values (sg_exec.readback) */
    int32_t *tokens;       /* its staged tokens, per token buffer */
    struct sg_exec_io *io; /* arguments of its asynchronous reads and writes */
} sg_exec_step;

typedef struct sg_exec {
    sg_exec_shared shared;
    const sg_graph *graph;
    sg_lowering low; /* handles, tasks' cl_args, records, contexts */
    /* SuperOffload's second graph, the step that waits for the gradient norm
     * (sg_exec_add_waiting_graph): its lowering shares low's handles */
    sg_lowering wait_low;
    sg_exec_shared wait_shared;
    int have_wait;
    int waiting; /* the next step runs the waiting graph */
    /* steps in flight: a ring of `lookahead` records, step k in k % lookahead */
    int lookahead;
    sg_exec_step *steps;
    int64_t begun, submitted, finished; /* steps begun, submitted and finished */
    int cur;                            /* record of the last finished step, -1 before one */
    double prev_end_us;                 /* StarPU clock at the end of the last finished step */
    double prev2_end_us;                /* ... and of the one before it */
    /* buffers read back after each step (losses, norm, overflow, scaler
     * state) and token buffers, by IR index of the main graph */
    int nreadback, *readback;
    size_t *readback_off, readback_bytes;
    int ntokens, *token_buf;
    size_t token_elems;               /* int32 per token buffer */
    void *codelets[SG_OP_KIND_COUNT]; /* struct starpu_codelet * per node kind */
    int bound_cores;                  /* cores of the chosen NUMA node, 0 if none chosen */
    int bound_node;                   /* that node, -1 if none */
    char numa_xml[4096];              /* numa_emulate: the topology file, removed at shutdown */
    int numa_xml_slot;                /* its cleanup slot (common/cleanup.h) */
    int started;                      /* starpu_init succeeded */
    int paused;                       /* workers paused until the next step (sg_exec_idle) */
    /* a step that cannot progress (stall.h): then StarPU is left as it is,
     * its workers retrying an allocation, and the process ends */
    sg_stall_watch stall;
    int stalled;
    int have_cuda;        /* CUDA workers exist: GPU nodes run there */
    double step_start_us; /* StarPU clock at the last finished step's submission */
    /* time of the last finished step: from the later of its submission and
     * the previous step's end, to its end (with steps in flight, the
     * interval between consecutive step ends) */
    double step_seconds;
    /* start-up, for the run's header: StarPU's start (with its CUDA set-up)
     * and the lowering with the state's allocation, in seconds */
    double startup_starpu_s, startup_alloc_s;
    sg_disk_node disk; /* NVMe offload: the disk node (disk.node < 0 without) */
    int have_disk;
} sg_exec;

/* Starts StarPU with the options and lowers the graph. */
int sg_exec_init(sg_exec *x, const sg_model *m, const sg_step_spec *spec, const sg_graph *g,
                 const sg_exec_options *opt, sg_error *err);
void sg_exec_shutdown(sg_exec *x);

/* SuperOffload, adaptive speculation: lowers g, the same step compiled
 * with speculation off (spec->super_offload 0), beside the main graph and on
 * the same state. */
int sg_exec_add_waiting_graph(sg_exec *x, const sg_step_spec *spec, const sg_graph *g,
                              sg_error *err);

/* Which graph the next step begun runs: 0 the main one, 1 the waiting
 * one (needs sg_exec_add_waiting_graph). */
void sg_exec_wait_for_norm(sg_exec *x, int wait);

/* The graph the last finished step ran and its task records. */
const sg_graph *sg_exec_last_graph(const sg_exec *x);
const sg_task_record *sg_exec_last_records(const sg_exec *x);

/* Reads the weights and the Adam moments back from the persistent buffers
 * that hold them (parameter pieces, fp32 masters where there are, moments)
 * one tensor at a time, for a save that holds one tensor and not the
 * model: open on shape (names, shapes and units: sg_weights_describe),
 * then sg_state_reader_fill(reader, set, i, out) is an sg_tensor_source's
 * fill (runtime/io/weights.h): tensor i of the weights or of a moment, read
 * from the buffers of its unit alone (zeros for a moment the optimizer does
 * not keep). */
typedef struct sg_state_reader sg_state_reader;
/* And the load, a tensor at a time: src's fill gives tensor i of each set
 * (SG_TENSOR_ABSENT: the buffers' zeros stay), written into the persistent
 * buffers of its unit that hold it (parameter pieces, full copies, fp32
 * masters, moments); and, in an fp16 graph, the loss scaler's state and its
 * scale (scale 1 when scaler is NULL). With several ranks, a tensor none of
 * whose elements this rank's buffers hold is not asked for (the rank that
 * holds them reads and checks it). A fill's failure is returned as is (its
 * message where the source keeps it). */
int sg_exec_load_state_from(sg_exec *x, const sg_weights *shape, const sg_tensor_source *src,
                            const sg_loss_scaler_state *scaler, sg_error *err);
int sg_state_reader_open(sg_exec *x, const sg_weights *shape, sg_state_reader **out, sg_error *err);
int sg_state_reader_fill(void *reader, int set, int i, float *out);
/* Elements [lo, lo + n) of unit u of one set (its tensors concatenated in
 * sg_model_unit_tensors order) into out: with several ranks, a rank reads
 * its own shard of a unit this way (zeros where its buffers hold none). */
int sg_state_reader_fill_unit(sg_state_reader *r, int set, int u, int64_t lo, int64_t n,
                              float *out);
void sg_state_reader_close(sg_state_reader *r);

/* Host access to buffer b: its main-memory copy once the tasks submitted
 * before have finished with it (NULL if StarPU refused), to be released with
 * sg_exec_release. write: 0 to read, 1 to overwrite, 2 to change a part. */
void *sg_exec_acquire(sg_exec *x, int b, int write);
void sg_exec_release(sg_exec *x, int b);
/* No step is in flight, and the main thread works alone until the next
 * sg_exec_submit_step (a checkpoint's save, the run's summary): StarPU's idle
 * workers, which poll for tasks, are paused so as to leave it the cores.
 * Only when every buffer lives in one memory node, where an acquire copies
 * nothing (a CUDA worker, or another NUMA node's, drives the copies back to
 * RAM, and the CUDA state is set up and torn down on the CUDA workers). The
 * next sg_exec_submit_step, or sg_exec_shutdown, resumes them. The load
 * (sg_exec_load_state_from) pauses them itself, CUDA workers included:
 * nothing is on a GPU before the first step. */
void sg_exec_idle(sg_exec *x);

/* Steps in flight. sg_exec_begin_step starts the next step (needs fewer
 * than lookahead in flight: finish the oldest first) on the graph chosen by
 * sg_exec_wait_for_norm and returns its hyper-parameters to fill;
 * sg_exec_set_tokens stages its inputs (B*T) and targets (B*T) of micro-step
 * mb; sg_exec_submit_step submits its tasks and the reads of its results,
 * without waiting. A submission that fails leaves the step in flight (drain
 * with sg_exec_shutdown). */
int sg_exec_in_flight(const sg_exec *x);
sg_step_params *sg_exec_begin_step(sg_exec *x);
int sg_exec_set_tokens(sg_exec *x, int mb, const int32_t *inputs, const int32_t *targets);
int sg_exec_submit_step(sg_exec *x, sg_error *err);

/* Whether the oldest step in flight has ended, without waiting. */
int sg_exec_oldest_done(sg_exec *x);

/* Waits for the oldest step in flight (its tasks and result reads, not the
 * steps after it) and makes its results the ones read below. Fails with the
 * first failing task's message. */
int sg_exec_finish_step(sg_exec *x, sg_error *err);

/* fp16: waits until the last submitted step's overflow check has run and
 * says whether the optimizer skips that step (0 without an overflow flag);
 * SG_EINVAL when StarPU refused the read. The next step's lr and Adam step
 * number depend on it. */
int sg_exec_wait_overflow(sg_exec *x, int *skipped);

/* After sg_exec_finish_step, that step's: loss of each micro-step
 * (grad_accum floats; with batch tiles, the sum of the tiles' shares in tile
 * order) and global norm of the unscaled gradients (inf after
 * an fp16 overflow); its hyper-parameters. */
int sg_exec_losses(sg_exec *x, float *losses);
double sg_exec_grad_norm(sg_exec *x);
const sg_step_params *sg_exec_last_params(const sg_exec *x);

/* After sg_exec_finish_step, read back from that step's buffers: whether an fp16 overflow made
 * the optimizer skip it, how many SuperOffload sub-group steps were rolled
 * back (and redone unless skipped), and whether a speculative step would
 * have been rolled back (clipping fired, or an overflow), whichever graph
 * ran. */
int sg_exec_step_outcome(sg_exec *x, int *skipped, int *rollbacks, int *spec_would_fail);

/* After sg_exec_finish_step: the fp16 loss scaler's state, as that step's
 * loss-scale tasks left it (the scale the step after it uses). 1 with *s filled, 0 when the
 * graph has none (not fp16), SG_EINVAL when StarPU refused the read. */
int sg_exec_loss_scaler(sg_exec *x, sg_loss_scaler_state *s);

/* Name of StarPU worker w ("CPU 0", "CUDA 0"). */
const char *sg_exec_worker_name(int w, char *buf, size_t n);
int sg_exec_worker_count(void);
/* The lowering the last finished step ran (the main or the waiting one). */
const sg_lowering *sg_exec_last_lowering(const sg_exec *x);
/* 1 if StarPU worker w is a CPU worker. */
int sg_exec_worker_is_cpu(int w);
void sg_exec_worker_counts(int *ncpu, int *ncuda);
/* GPU busy share and hidden CPU Adam time of the last step's task records;
 * with steps in flight, of every task of the last `lookahead` steps within
 * the interval between the last two step ends (sg_overlap_window). */
int sg_exec_overlap(const sg_exec *x, sg_overlap *out);

/* The most memory StarPU counted as used at the end of a task, over every
 * step run so far: host (CPU memory nodes: the state we allocate and the
 * step-local buffers StarPU allocates) and GPU (the busiest), in bytes
 * (sg_lower_memory_used). Call when no step is in flight. */
void sg_exec_memory_peak(const sg_exec *x, int64_t *host, int64_t *gpu);
/* What StarPU may use in main memory (its CPU memory nodes together: 90% of
 * RAM, or STARPU_LIMIT_CPU_MEM), in bytes; -1 when it sets no limit. */
int64_t sg_exec_main_memory_limit(void);

#endif /* SG_EXEC_H */
