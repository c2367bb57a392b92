/* op_kinds.h - the node kinds of the step graph, in one table.
 *
 * Every fact that depends on a node's kind alone is a column of
 * SG_OP_KINDS: its name, the step phase its time counts in, the devices the
 * compiler may give its nodes, where StarPU may run it, whether it belongs to
 * the optimizer's scheduling context, the cost class the machine models'
 * efficiencies and the roofline use, and its own colour. The
 * IR, the exporters, placement (runtime/exec/starpu_setup.c), the cost models
 * (runtime/config/machine.c, runtime/sim/sim_cost.c), the timeline phases and
 * the codelet table (codelets/starpu/codelets.c) read it. Adding a kind is a
 * row here, its kernels and codelet, and its tests.
 *
 * The order of the rows is the order of sg_op_kind, in which exporters list
 * kinds. Per-node FLOP and byte counts are not here: graph/compile.c derives
 * them from shapes.
 *
 * Pure C data, no StarPU; also compiles as C++ (the CUDA kernels include
 * graph/ir.h).
 */
#ifndef SG_OP_KINDS_H
#define SG_OP_KINDS_H

/* Where a node runs. */
typedef enum sg_device_class {
    SG_DEV_GPU,
    SG_DEV_CPU,
    SG_DEV_LINK, /* a transfer or collective: occupies a link, not a core */
    SG_DEV_COUNT
} sg_device_class;

/* The phase of the step a node's time counts in (wall_clock_breakdown). */
typedef enum sg_phase {
    SG_PHASE_FORWARD,
    SG_PHASE_BACKWARD,  /* recomputation included */
    SG_PHASE_OPTIMIZER, /* everything after the backward that is not a transfer */
    SG_PHASE_TRANSFER,  /* copies and collectives */
    SG_PHASE_COUNT
} sg_phase;

/* Where StarPU may run a node on a machine with CUDA workers; without any,
 * every node runs on CPU workers. */
typedef enum sg_placement {
    SG_PLACE_NODE,   /* by the node's device: CPU nodes on CPUs, the rest on CUDA */
    SG_PLACE_CPU,    /* CPU only (host-side bookkeeping, copies the CPU drives) */
    SG_PLACE_CUDA,   /* CUDA side */
    SG_PLACE_EITHER, /* CPU or CUDA: the scheduler picks */
    SG_PLACE_COUNT
} sg_placement;

/* Cost classes: machine models state one efficiency per class (their JSON
 * keys are sg_op_class_name()), and the roofline runs GEMM-class nodes at
 * the compute dtype's tensor peak, the rest at fp32 vector peak. */
typedef enum sg_op_class {
    SG_CLASS_GEMM,        /* forward / recompute / backward */
    SG_CLASS_ELEMENTWISE, /* casts, norms, checks, validation */
    SG_CLASS_OPTIMIZER_CPU,
    SG_CLASS_OPTIMIZER_GPU,
    SG_CLASS_COPY, /* host <-> device */
    SG_CLASS_COLLECTIVE,
    SG_CLASS_COUNT
} sg_op_class;

/* How the simulator costs a node beyond its class. */
typedef enum sg_cost_rule {
    SG_COST_ROOFLINE, /* the class's rule: roofline, link latency for copies */
    SG_COST_OVERHEAD, /* a task's fixed overhead only (work not modelled) */
} sg_cost_rule;

/* A mask of sg_device_class values: the devices the compiler may give a
 * kind's nodes. */
#define SG_ON(dev) (1u << SG_DEV_##dev)

/* X(ID, name, devices, phase, placement, optimizer_ctx, cost_class, cost_rule, colour)
 *   ID             SG_OP_<ID>
 *   name           sg_op_kind_name(); the codelet and its performance model
 *                  are sg_<name> (the symbol calibrated models are saved under)
 *   devices        SG_ON(...) mask of the devices its nodes may have
 *   phase          SG_PHASE_<phase>
 *   placement      SG_PLACE_<placement> on a machine with CUDA workers
 *   optimizer_ctx  1: its CPU nodes go to the optimizer's scheduling context
 *                  when cores are reserved for it
 *   cost_class     SG_CLASS_<cost_class>
 *   cost_rule      SG_COST_<cost_rule>
 *   colour         the kind's colour (sg_op_kind_color); pictures fill nodes
 *                  by where they run instead (graph/phase_layout.h)
 */
#define SG_OP_KINDS(X)                                                                             \
    /* gather a unit's parameter shards (stage 3; stage 1/2 after the step) */                     \
    X(ALLGATHER, allgather, SG_ON(LINK), TRANSFER, NODE, 0, COLLECTIVE, ROOFLINE, "#9ecae1")       \
    /* forward of one unit (embedding, layer, head + loss) */                                      \
    X(FORWARD, forward, SG_ON(GPU) | SG_ON(CPU), FORWARD, NODE, 0, GEMM, ROOFLINE, "#a1d99b")      \
    /* activation checkpointing: forward again before backward */                                  \
    X(RECOMPUTE, recompute, SG_ON(GPU) | SG_ON(CPU), BACKWARD, NODE, 0, GEMM, ROOFLINE, "#d9f0a3") \
    /* backward of one unit: input gradient and weight gradients */                                \
    X(BACKWARD, backward, SG_ON(GPU) | SG_ON(CPU), BACKWARD, NODE, 0, GEMM, ROOFLINE, "#fdae6b")   \
    /* MoE: one group of a layer's experts on the tokens that picked them */                       \
    X(MOE_EXPERT, moe_expert, SG_ON(GPU) | SG_ON(CPU), FORWARD, NODE, 0, GEMM, ROOFLINE,           \
      "#74c476")                                                                                   \
    /* MoE: a layer's output = input + the experts' outputs, weighted */                           \
    X(MOE_COMBINE, moe_combine, SG_ON(GPU) | SG_ON(CPU), FORWARD, NODE, 0, ELEMENTWISE, ROOFLINE,  \
      "#c7e9c0")                                                                                   \
    /* MoE: backward of one group of experts (and of its share of the combine) */                  \
    X(MOE_EXPERT_BWD, moe_expert_bwd, SG_ON(GPU) | SG_ON(CPU), BACKWARD, NODE, 0, GEMM, ROOFLINE,  \
      "#fd8d3c")                                                                                   \
    /* batch tiles: a unit's weight gradient = its tiles' partials, added in */                    \
    /* tile order (into the accumulated gradient after the first micro-step) */                    \
    X(GRAD_SUM, grad_sum, SG_ON(GPU) | SG_ON(CPU), BACKWARD, NODE, 0, ELEMENTWISE, ROOFLINE,       \
      "#fdd49e")                                                                                   \
    /* stage >= 2: average gradients, keep this rank's shard */                                    \
    X(REDUCE_SCATTER, reduce_scatter, SG_ON(LINK), TRANSFER, NODE, 0, COLLECTIVE, ROOFLINE,        \
      "#6baed6")                                                                                   \
    /* stage 0/1: average gradients everywhere */                                                  \
    X(ALLREDUCE, allreduce, SG_ON(LINK), TRANSFER, NODE, 0, COLLECTIVE, ROOFLINE, "#4292c6")       \
    /* device-to-host gradient copy of one optimizer sub-group */                                  \
    X(D2H, d2h, SG_ON(LINK), TRANSFER, CPU, 0, COPY, ROOFLINE, "#c6dbef")                          \
    /* precision conversion (gradients to fp32, master to bf16/fp16) */                            \
    X(CAST, cast, SG_ON(GPU) | SG_ON(CPU), OPTIMIZER, EITHER, 1, ELEMENTWISE, ROOFLINE, "#dadaeb") \
    /* global gradient norm (clipping, logging, validation) */                                     \
    X(GRAD_NORM, grad_norm, SG_ON(GPU), OPTIMIZER, NODE, 0, ELEMENTWISE, ROOFLINE, "#fc9272")      \
    /* fp16: inf/nan in gradients? */                                                              \
    X(OVERFLOW_CHECK, overflow_check, SG_ON(GPU), OPTIMIZER, CPU, 0, ELEMENTWISE, ROOFLINE,        \
      "#fb6a4a")                                                                                   \
    /* fp16: dynamic loss-scale update */                                                          \
    X(LOSS_SCALE, loss_scale, SG_ON(GPU), OPTIMIZER, CPU, 0, ELEMENTWISE, ROOFLINE, "#ef3b2c")     \
    /* Adam on one sub-group on the CPU */                                                         \
    X(ADAM_CPU, adam_cpu, SG_ON(CPU), OPTIMIZER, NODE, 1, OPTIMIZER_CPU, ROOFLINE, "#bcbddc")      \
    /* Adam on one sub-group that stays on the GPU */                                              \
    X(ADAM_GPU, adam_gpu, SG_ON(GPU), OPTIMIZER, NODE, 0, OPTIMIZER_GPU, ROOFLINE, "#807dba")      \
    /* SuperOffload: keep, roll back and redo, or skip a speculative step; it */                   \
    /* reads the norm only, a rollback and redo (rare) is not modelled */                          \
    X(VALIDATE, validate, SG_ON(CPU), OPTIMIZER, NODE, 1, ELEMENTWISE, OVERHEAD, "#fdd0a2")        \
    /* host-to-device parameter copy of one sub-group */                                           \
    X(H2D, h2d, SG_ON(LINK), TRANSFER, CUDA, 0, COPY, ROOFLINE, "#deebf7")

typedef enum sg_op_kind {
#define SG_OP_KIND_ENUM_(id, ...) SG_OP_##id,
    SG_OP_KINDS(SG_OP_KIND_ENUM_)
#undef SG_OP_KIND_ENUM_
        SG_OP_KIND_COUNT
} sg_op_kind;

/* One row of the table. */
typedef struct sg_op_kind_info {
    sg_op_kind kind;
    const char *name;   /* "allgather" */
    const char *symbol; /* "sg_allgather": codelet and performance model */
    unsigned devices;   /* SG_ON(...) mask */
    sg_phase phase;
    sg_placement placement;
    int optimizer_ctx;
    sg_op_class cost_class;
    sg_cost_rule cost_rule;
    const char *color; /* "#9ecae1" */
} sg_op_kind_info;

/* The row of a kind, or NULL for a value outside sg_op_kind. */
const sg_op_kind_info *sg_op_kind_info_of(sg_op_kind k);

const char *sg_op_kind_name(sg_op_kind k); /* "allgather", "forward", ...; "?" if unknown */

/* The kind named `name` (as sg_op_kind_name() writes it): 0, or SG_EINVAL
 * and *out unchanged. */
int sg_op_kind_parse(const char *name, sg_op_kind *out);

/* The cost class of a kind (SG_CLASS_ELEMENTWISE for an unknown value). */
sg_op_class sg_op_kind_class(sg_op_kind k);
const char *sg_op_class_name(sg_op_class c); /* "gemm", ...: machine-model JSON keys */
const char *sg_phase_name(sg_phase p);       /* "forward", "backward", "optimizer", "transfer" */

#endif /* SG_OP_KINDS_H */
