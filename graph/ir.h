/* ir.h - the step-graph intermediate representation.
 *
 * Built the way StarPU's sequential task flow is: buffers are declared, then
 * ops are appended in program order, each with its accesses (R, W, RW) on
 * named buffers. sg_graph_finalize() derives the edges from the last writer
 * and the readers of every buffer, exactly as StarPU infers dependencies from
 * the same sequence of starpu_task_insert() calls, so the exported DAG is the
 * DAG StarPU runs.
 *
 * Pure C: no StarPU here.
 */
#ifndef SG_IR_H
#define SG_IR_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h" /* sg_dtype, sg_dtype_size, sg_dtype_name */
#include "common/error.h"
#include "graph/op_kinds.h" /* sg_op_kind, sg_device_class: the table of node kinds */

#define SG_IR_NAME_MAX 64

/* Which link a LINK node uses. */
typedef enum sg_link_dir {
    SG_LINK_NONE,
    SG_LINK_H2D, /* host to device */
    SG_LINK_D2H, /* device to host */
    SG_LINK_NET, /* GPU to GPU collectives (NVLink / network) */
    SG_LINK_COUNT
} sg_link_dir;

/* Where a buffer lives. */
typedef enum sg_mem_space { SG_MEM_GPU, SG_MEM_HOST, SG_MEM_COUNT } sg_mem_space;

typedef enum sg_access_mode {
    SG_R = 1,
    SG_W = 2,
    SG_RW = 3,
} sg_access_mode;

/* What a buffer holds: the executor binds a node's buffers to its
 * arguments by role (and unit / micro-step / sub-group), never by name. */
typedef enum sg_buf_role {
    SG_BUF_OTHER,
    SG_BUF_PARAM_PIECE,       /* this rank's part of a unit in one sub-group */
    SG_BUF_GRAD_PIECE,        /* its reduced gradient */
    SG_BUF_GATHERED,          /* stage 3: a unit's gathered parameters */
    SG_BUF_PARAM_SHARD,       /* stage 3, parameters offloaded: this rank's pieces of a
                                    unit copied to the device, end to end, for its all-gather */
    SG_BUF_PARAM_FULL,        /* stage 1/2: a unit's full parameters */
    SG_BUF_GRAD,              /* a unit's full gradient, before reduction */
    SG_BUF_GRAD_NORM,         /* [global norm of the unscaled gradients, 1/loss scale] */
    SG_BUF_OVERFLOW,          /* fp16: 1 if a gradient is not finite */
    SG_BUF_LOSS_SCALE,        /* fp16: the current loss scale */
    SG_BUF_LOSS_SCALER_STATE, /* fp16: the loss scaler's state (codelets/cpu/loss_scale.h) */
    SG_BUF_MASTER,            /* fp32 master parameters of a sub-group */
    SG_BUF_MOMENTS,           /* Adam exp_avg then exp_avg_sq of a sub-group */
    SG_BUF_GRAD_HOST,         /* a CPU sub-group's gradients on the host */
    SG_BUF_GRAD_HOST_F32,     /* the same cast to fp32 */
    SG_BUF_PARAM_HOST,        /* updated parameters cast to the compute dtype (a CPU
                                    sub-group's on the host; parameters offloaded, a GPU
                                    sub-group's on the device, before their copy back) */
    SG_BUF_TOKENS,            /* micro-batch input ids then target ids */
    SG_BUF_ACT,               /* output of a unit */
    SG_BUF_LOSS,              /* mean loss of a micro-step */
    SG_BUF_DACT,              /* gradient of a unit's output */
    SG_BUF_SAVED,             /* activations a unit saves for its backward */
    SG_BUF_GRAD_PART,         /* batch tiles: fp32 weight-gradient partial of a unit's tile */
    SG_BUF_MOE_STATS,         /* MoE: a micro-step's router statistics (models/unit_layout.h
                                    sg_moe_stats_floats) for the load-balancing loss */
    SG_BUF_MOE_ACT,           /* MoE: a group of experts' activations (subgroup = group) */
    SG_BUF_MOE_GRAD,          /* MoE: a group of experts' gradients (subgroup = group) */
    SG_BUF_NORM_PART,         /* per gradient piece of a unit, in piece order, 16 bytes:
                                    [sum of squares (double), non-finite flag (int32), pad]
                                    (SG_NORM_PART_F32 f32 elements per piece) */
    SG_BUF_WINDOW,            /* a dependency only (no codelet reads it): micro-step k's
                                    last backward writes it, micro-step k + W's first forward
                                    reads it (sg_step_spec.micro_window) */
    SG_BUF_COMM_ORDER,        /* several ranks: the token every collective node reads and
                                    writes, so collectives run in program order (no data) */
} sg_buf_role;

/* Elements (int32) of the SG_BUF_LOSS_SCALER_STATE buffer: the bytes of
 * codelets/cpu/loss_scale.h's sg_loss_scaler_state (checked there). */
#define SG_LOSS_SCALER_STATE_I32 8

/* f32 elements of one piece's entry in an SG_BUF_NORM_PART buffer (16 bytes) */
#define SG_NORM_PART_F32 4

typedef struct sg_buffer {
    char name[SG_IR_NAME_MAX]; /* "param.3", "grad_host.7" */
    int64_t bytes;
    int64_t elems;
    sg_dtype dtype;
    sg_mem_space space;
    int persistent;                 /* lives across steps (weights, optimizer state) */
    sg_buf_role role;               /* SG_BUF_OTHER unless the compiler sets it */
    int unit, micro_step, subgroup; /* -1 where not applicable */
    int64_t unit_offset;            /* pieces: first element within the unit's parameters */
    int64_t subgroup_offset;        /* pieces and optimizer tiles: first element within the
                                    sub-group */
    int tile;                       /* tile index (a batch tile of a micro-step, or a chunk of a
                                    CPU sub-group's optimizer chain); -1 when untiled */
} sg_buffer;

typedef struct sg_access {
    int buffer;
    sg_access_mode mode;
    int64_t bytes; /* the part of the buffer the node touches (a chunk's
                                    overlap of a parameter piece); 0 = all of it */
} sg_access;

typedef struct sg_node {
    int id;                    /* index in program order */
    char name[SG_IR_NAME_MAX]; /* "fwd.layer3.mb0" */
    sg_op_kind kind;
    int layer;      /* unit index, or -1 for none */
    int micro_step; /* or -1 */
    int subgroup;   /* optimizer sub-group, or -1 */
    int tile;       /* batch tile or optimizer chunk, -1 when untiled */
    sg_device_class device;
    sg_link_dir link;
    double flops;
    double attention_flops; /* the part of flops in a unit's attention (quadratic
                                    in the sequence length); 0 for other nodes */
    int64_t bytes_read;     /* derived from the accesses */
    int64_t bytes_written;
    int64_t link_bytes; /* bytes that cross the node's link (collectives: per rank) */
    int naccess;
    sg_access *access;
    int64_t priority; /* filled by passes (bottom level); 0 by default */
    int pinned;       /* 1: runs on `device` only, whatever the kind's placement
                                    (cast_placement cpu / gpu); 0 by default */
} sg_node;

typedef struct sg_edge {
    int from, to;
} sg_edge;

typedef struct sg_graph {
    sg_buffer *buffers;
    int nbuffers, cap_buffers;
    sg_node *nodes;
    int nnodes, cap_nodes;
    sg_edge *edges; /* valid after sg_graph_finalize, sorted by (from, to) */
    int nedges, cap_edges;
    int finalized;
} sg_graph;

void sg_graph_init(sg_graph *g);
void sg_graph_free(sg_graph *g);

/* Declares a buffer; returns its index (>= 0) or a negative error code. */
int sg_graph_add_buffer(sg_graph *g, const char *name, int64_t elems, sg_dtype dtype,
                        sg_mem_space space, int persistent);

/* Appends a node in program order with `naccess` accesses; returns its id or
 * a negative error code. The node's name is printf-formatted. */
int sg_graph_add_node(sg_graph *g, sg_op_kind kind, sg_device_class device, int layer, double flops,
                      const sg_access *access, int naccess, const char *name_fmt, ...)
    __attribute__((format(printf, 8, 9)));

/* Derives edges (read-after-write, write-after-read, write-after-write) and
 * byte counts. Fails with SG_EINVAL naming the node and buffer if a buffer is
 * read before anything wrote it, unless it is persistent (persistent buffers
 * hold state from the previous step). */
int sg_graph_finalize(sg_graph *g, sg_error *err);

/* Checks acyclicity (edges must go forward in program order, which also
 * makes the DAG acyclic) and that every non-persistent read has a writer. */
int sg_graph_check(const sg_graph *g, sg_error *err);

/* Successor lists in CSR form, built on demand by passes. */
typedef struct sg_adjacency {
    int *offset; /* nnodes + 1 */
    int *target; /* nedges */
} sg_adjacency;
int sg_graph_successors(const sg_graph *g, sg_adjacency *adj);
void sg_adjacency_free(sg_adjacency *adj);

const char *sg_device_class_name(sg_device_class d);
const char *sg_link_dir_name(sg_link_dir l);
const char *sg_mem_space_name(sg_mem_space m);

/* 1 when node nd runs on a CUDA worker in a run that has them: a pinned node
 * on its device, else by its kind's placement (graph/op_kinds.h), a kind the
 * scheduler may place on either side counted at its node's device.
 * runtime/exec/starpu_setup.c's sg_starpu_where uses it. */
int sg_node_runs_on_gpu(const sg_node *nd);

/* 1 when node nd may run on a CUDA worker in a run that has them: it runs
 * there (sg_node_runs_on_gpu), or its kind lets the scheduler pick a side. */
int sg_node_may_run_on_gpu(const sg_node *nd);

/* touched[b] = 1 for every buffer b of g that a node that may run on a CUDA
 * worker accesses, else 0 (g->nbuffers entries). Only those buffers ever
 * cross the link, so only they need pinned host memory: the lowering pins
 * the state buffers so marked and leaves the rest (the CPU sub-groups'
 * moments, the host gradients CPU Adam reads) in ordinary memory, which
 * costs nothing to pin at start-up. */
void sg_graph_gpu_touched(const sg_graph *g, unsigned char *touched);

/* pin[b] = 1 for every buffer b of g whose host memory the lowering pins:
 * a GPU task may touch it (sg_graph_gpu_touched) and it crosses the link
 * every step. A GPU-space buffer that only nodes running on the GPU access
 * crosses once, the first step's upload of the initial state (and a save's
 * download): it stays in ordinary memory, since pinning is most of a large
 * run's start-up (the 8B SuperOffload config: 32.8 of its 56.8 GiB pinned
 * were such buffers). A GPU-space buffer that a node which may run on the
 * CPU accesses is pinned. */
void sg_graph_host_pinned(const sg_graph *g, unsigned char *pin);

/* Parameters offloaded (ZeRO-3 offload_param): whether nd is a unit's
 * fetch, the host-to-device copy of its pieces before a use (an h2d node
 * with a unit; a sub-group's h2d copy has none). */
int sg_node_is_param_fetch(const sg_node *nd);

/* Human-readable names of units: "embed", "layer3", "head" (the exporters',
 * the folding's and the views' labels). */
void sg_unit_label(const sg_graph *g, int unit, char *buf, size_t size);

#endif /* SG_IR_H */
