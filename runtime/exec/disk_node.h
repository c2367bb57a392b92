/* disk_node.h - ZeRO-Infinity's NVMe offload on a StarPU disk memory node.
 *
 * With offload_optimizer (or offload_param) device "nvme", the home copy of
 * the CPU sub-groups' optimizer state (fp32 master, moments: one buffer of
 * each per sub-group tile) or of the parameter pieces is a file of a StarPU
 * disk node in a per-run directory under nvme_path. A task that reads one
 * makes StarPU fetch it to RAM; StarPU writes it back when it evicts it. The
 * RAM working set is bounded by StarPU's memory limit for the CPU node
 * (STARPU_LIMIT_CPU_MEM, set before starpu_init: the step's plan without the
 * state on disk, plus buffer_count disk buffers), each buffer is marked
 * first to evict once its last task of the step is submitted
 * (starpu_data_wont_use), and the next group in the graph's order (a
 * tile's master and moments, or a unit's pieces) is prefetched when the
 * last task of a group ends. The space of every file is reserved before
 * the first step (posix_fallocate), so a disk that fills up fails the start,
 * naming nvme_path, never a step. docs/memory.md, "NVMe offload".
 */
#ifndef SG_DISK_NODE_H
#define SG_DISK_NODE_H

#include <stdint.h>

#include "common/error.h"
#include "graph/ir.h"

/* What the config asks for (the trainer fills it from ds_nvme.h). */
typedef struct sg_disk_plan {
    const char *dir;      /* nvme_path */
    const char *key;      /* the JSON key that named it, for errors */
    int optimizer;        /* the CPU sub-groups' masters and moments on disk */
    int params;           /* the parameter pieces on disk (stage 3) */
    int64_t buffer_count; /* disk buffers in RAM at most (the largest's size each) */
    int ncpus;            /* CPU workers asked for (-1: every core) */
} sg_disk_plan;

typedef struct sg_disk_node {
    int node;      /* StarPU memory node, -1 before registration */
    char dir[640]; /* the per-run directory under nvme_path */
    char key[96];
    int o_direct;               /* StarPU's unistd_o_direct back-end, else unistd */
    const char *why_not_direct; /* why unistd, for the run's header */
    int cleanup_slot;
    int optimizer, params;
    int64_t disk_bytes;  /* bytes of the buffers homed on disk */
    int64_t working_set; /* the RAM bound for them (bytes) */
    int64_t ram_limit;   /* STARPU_LIMIT_CPU_MEM set, bytes (0: the user's own) */
    int depth;           /* groups prefetched ahead */
} sg_disk_node;

/* Whether buffer b's home is the disk node under these settings. */
int sg_disk_homes(int optimizer, int params, const sg_buffer *b);

/* Bytes of g's buffers homed on disk. */
int64_t sg_disk_bytes(int optimizer, int params, const sg_graph *g);

/* Before starpu_init: checks nvme_path (an error naming the key), makes the
 * per-run directory (removing those of dead processes), picks the back-end
 * and sets StarPU's RAM limit from g's plan. */
int sg_disk_prepare(sg_disk_node *d, const sg_disk_plan *p, const sg_graph *g, sg_error *err);

/* After starpu_init: registers the disk node. */
int sg_disk_register(sg_disk_node *d, sg_error *err);

/* Registers a vector of n elements of esize bytes homed on the disk node. */
int sg_disk_register_vector(sg_disk_node *d, void **handle, uint32_t n, size_t esize,
                            const char *name, sg_error *err);

/* After every buffer is registered: reserves their files' space. */
int sg_disk_reserve(sg_disk_node *d, sg_error *err);

/* After starpu_shutdown: removes the per-run directory. */
void sg_disk_remove(sg_disk_node *d);

/* One line saying where the state lives, the back-end and the bound. */
void sg_disk_describe(const sg_disk_node *d, char *buf, size_t size);

/* ---- prefetch in the graph's order (the lowering's hooks) ---- */

typedef struct sg_disk_sched {
    const sg_disk_node *d;
    int depth;            /* groups prefetched ahead (d->depth) */
    void *const *handles; /* starpu_data_handle_t per IR buffer */
    int ngroups;
    int *group_start, *group_buf; /* group j's buffers: group_buf[group_start[j]..[j+1]) */
    int *group_end;               /* group j's last node in the step */
    char *is_end;                 /* per node: some group's last node */
    int *last_access;             /* per buffer on disk: its last node in the step, else -1 */
} sg_disk_sched;

int sg_disk_sched_init(sg_disk_sched *s, sg_disk_node *d, const sg_graph *g, void *const *handles);
void sg_disk_sched_free(sg_disk_sched *s);
/* At a step's submission: prefetch the first groups. */
void sg_disk_step_begins(const sg_disk_sched *s);
/* After node i's task is submitted: its disk buffers whose last use it is
 * become the first to evict (written back to disk first). */
void sg_disk_node_submitted(const sg_disk_sched *s, const sg_graph *g, int i);
/* Node i's task ended (its callback): prefetch the group depth places on. */
void sg_disk_task_done(const sg_disk_sched *s, int i);

#endif
