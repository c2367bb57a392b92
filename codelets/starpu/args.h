/* args.h - binding a task's StarPU buffers to a codelet's arguments.
 *
 * Slots are found by buffer role (graph/ir.h) and unit; data in the compute
 * dtype (bf16/fp16) is seen through fp32 views: the CPU math is fp32, the
 * storage is what the config asks for.
 */
#ifndef SG_CODELET_ARGS_H
#define SG_CODELET_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "codelets/starpu/task_ctx.h"

/* First slot holding a buffer of `role` for `unit` (unit < -1: any unit), or -1. */
int sg_arg_find(const sg_task_ctx *c, sg_buf_role role, int unit);

/* Slots whose buffer has one of the roles (nroles of them) and `unit` (any
 * unit when unit < -1), sorted by offset (unit_offset, or subgroup_offset
 * when by_subgroup). Returns how many (at most cap). */
int sg_arg_collect(const sg_task_ctx *c, const sg_buf_role *roles, int nroles, int unit,
                   int by_subgroup, int *out, int cap);

/* The slot binding of the data-movement nodes, shared by their CPU and CUDA
 * entry points. Each returns how many piece slots it wrote to `pieces`
 * (sorted by unit offset, at most cap), or 0 after marking the task failed
 * when a buffer is missing:
 * - an all-gather: the unit's parameter pieces (or, parameters offloaded,
 *   its shard buffer), *dst the gathered or full buffer;
 * - a parameter fetch (parameters offloaded): the unit's pieces, *dst its
 *   shard buffer or, for a unit every rank holds whole, its gathered buffer;
 * - a reduction: the unit's gradient pieces, *src the unit's gradient. */
int sg_arg_gather_slots(const sg_task_ctx *c, int *pieces, int cap, int *dst);
int sg_arg_fetch_slots(const sg_task_ctx *c, int *pieces, int cap, int *dst);
int sg_arg_reduce_slots(const sg_task_ctx *c, int *pieces, int cap, int *src);
/* A host-to-device node's source: the compute-dtype host copy, else the
 * fp32 master; -1 (task marked failed) without either. */
int sg_arg_param_source(const sg_task_ctx *c);
/* The slots holding a unit's parameters: one gathered / full buffer, or
 * its pieces by unit offset. Returns how many (0: none). */
int sg_arg_unit_param_slots(const sg_task_ctx *c, int unit, int *slots, int cap);

/* Where piece slot `piece` starts inside the sub-group-wide buffer in slot
 * src (its subgroup_offset, in src's elements). */
void *sg_arg_subgroup_at(const sg_task_ctx *c, void *buffers[], int src, int piece);

#define SG_ARG_MAX_SLOTS 4096

/* Copies the slots' contents end to end (in the order given) into dst. */
void sg_arg_concat(const sg_task_ctx *c, void *buffers[], const int *slots, int n, char *dst);
/* Elements shared by the sub-group ranges of slots `range` (a host buffer
 * of a sub-group or of one of its optimizer chunks) and `piece` (a
 * parameter or gradient piece): their count (0: disjoint) and where they
 * start in each (*range_at, *piece_at), by subgroup_offset. */
int64_t sg_arg_overlap(const sg_task_ctx *c, int range, int piece, int64_t *range_at,
                       int64_t *piece_at);
/* Copies the task's gradient pieces' parts that fall in slot dst's range
 * into it (device-to-host copy of a sub-group or an optimizer chunk). */
void sg_arg_gather_grads(const sg_task_ctx *c, void *buffers[], int dst);
/* Scatters a sub-group's parameters (slot src: the fp32 master or the
 * compute-dtype host copy) into its parameter pieces, converting to the
 * pieces' dtype; marks the task failed on a conversion it cannot do. */
void sg_arg_scatter_params(const sg_task_ctx *c, void *buffers[], int src);

/* The first float of slot `slot`, or dflt when slot < 0. */
float sg_arg_scalar(void *buffers[], int slot, float dflt);
/* The data of the first slot holding `role` (any unit), or NULL. */
void *sg_arg_role_ptr(const sg_task_ctx *c, void *buffers[], sg_buf_role role);

/* Whether the optimizer must skip the step (fp16 overflow: 1); else 0 and
 * *mult = the gradient multiplier (1 / loss scale, times the clipping
 * coefficient). */
int sg_arg_step_checks(const sg_task_ctx *c, void *buffers[], float *mult);

/* A CPU sub-group (offloaded optimizer): the gradients on the host, the
 * fp32 master and the moments, n elements each. With fused casts
 * (cast_placement "fused") the gradients are the 16-bit host copy and the
 * task also writes the 16-bit host parameters (pout). */
typedef struct sg_host_group {
    const void *g; /* the gradients, stored as gdt */
    sg_dtype gdt;  /* SG_F32, or the compute dtype when the casts are fused */
    void *pout;    /* the 16-bit host parameters the task writes, or NULL */
    sg_dtype pdt;  /* their dtype (the compute dtype) */
    float *p, *m, *v;
    size_t n;
} sg_host_group;

/* Binds a CPU sub-group; SG_EINVAL when a buffer is missing (the task is
 * not marked failed). */
int sg_arg_host_group(const sg_task_ctx *c, void *buffers[], sg_host_group *h);

/* A sub-group whose Adam state stays with the compute (no offload, or
 * SuperOffload's ratio < 1), bound by sg_arg_adam_group. */
typedef struct sg_adam_group {
    int n;                       /* gradient pieces */
    int grad[SG_ARG_MAX_SLOTS];  /* their slots, by sub-group offset */
    int param[SG_ARG_MAX_SLOTS]; /* without a master: the fp32 parameter piece of each */
    int master;                  /* the fp32 master's slot, or -1 */
    float *m, *v;                /* exp_avg, exp_avg_sq of the whole sub-group */
} sg_adam_group;

/* Binds a device sub-group's Adam; SG_EINVAL (task marked failed) when a
 * buffer is missing or parameters without a master are not fp32. */
int sg_arg_adam_group(const sg_task_ctx *c, void *buffers[], sg_adam_group *a);
/* The fp32 parameters gradient piece i updates: the master at the piece's
 * offset, or its own parameter piece. */
float *sg_adam_group_params(const sg_adam_group *a, const sg_task_ctx *c, void *buffers[], int i);
/* The step's Adam hyper-parameters; fp16 gradients can overflow, so a step
 * then leaves non-finite elements alone (and stays undoable). */
sg_adam_params sg_arg_adam_params(const sg_task_ctx *c);

const sg_buffer *sg_arg_buffer(const sg_task_ctx *c, int slot);
void *sg_arg_ptr(void *buffers[], int slot);
/* 1 if the task writes the slot without reading it (the content is to be replaced). */
int sg_arg_write_only(const sg_task_ctx *c, int slot);

/* Memory a task takes for its own use and gives back before it ends, from
 * StarPU's allocator on the calling CPU worker's memory node (flags 0: not
 * pinned, not counted by StarPU), so that where the run keeps large buffers
 * from one step to the next (runtime/exec/buffer_cache.h) a task's large
 * ones are kept too, not faulted in again every step. */
typedef struct sg_task_mem {
    void *p;
    size_t bytes;
    unsigned node;
} sg_task_mem;

/* SG_OK, or SG_ENOMEM (s->p NULL) */
int sg_task_mem_alloc(sg_task_mem *s, size_t bytes);
/* Frees s->p (NULL allowed) and clears s */
void sg_task_mem_free(sg_task_mem *s);

/* An fp32 view of n elements stored as dtype dt. */
typedef struct sg_f32_view {
    float *p; /* the data itself (fp32 storage) or a converted copy */
    void *raw;
    sg_dtype dt;
    size_t n;
    int owned;
    sg_task_mem copy; /* the converted copy's memory, when owned */
} sg_f32_view;

/* Opens a view; load = 1 converts the current contents (reads), 0 leaves the
 * copy uninitialised (write-only). SG_ENOMEM on allocation failure. */
int sg_f32_view_open(sg_f32_view *v, void *raw, sg_dtype dt, size_t n, int load);
/* store = 1 converts the copy back into the storage (writes). Frees the copy. */
void sg_f32_view_close(sg_f32_view *v, int store);
/* Converts n floats to dtype dt into raw (or copies when dt is fp32). */
void sg_f32_store(void *raw, sg_dtype dt, const float *src, size_t n);
/* Converts n elements of dtype dt at raw into dst (fp32). */
void sg_f32_load(float *dst, const void *raw, sg_dtype dt, size_t n);

/* A unit's flat fp32 parameters from the slots holding them (pieces, the
 * gathered or the full buffer): the storage itself when it is one fp32
 * buffer, else a converted, concatenated copy in *copy (sg_task_mem_free it).
 * NULL when the task has no parameter slot for the unit. */
const float *sg_arg_unit_params(const sg_task_ctx *c, void *buffers[], int unit, sg_task_mem *copy);

/* Per-thread scratch of at least n floats (reused across tasks; a worker
 * runs one task at a time). NULL on allocation failure. */
float *sg_scratch(size_t n);

/* Marks the task as failed: the trainer reports msg after the step. */
void sg_task_fail(const sg_task_ctx *c, int code, const char *what);

#endif /* SG_CODELET_ARGS_H */
