/* numa_place.h - where a CPU sub-group's optimizer state lives and where its
 * optimizer tasks run when StarPU has several NUMA memory nodes
 * (STARPU_USE_NUMA=1: run options numa and numa_emulate, docs/training.md, "NUMA nodes").
 *
 * The memory nodes that hold CPU workers of this process (those the
 * optimizer may use) are the active nodes; sub-group s belongs to active
 * node s mod their count. Its
 * persistent host buffers (fp32 master, moments, parameter pieces) are
 * allocated on that node and registered there as their home, and its CPU
 * tasks (the casts, Adam, the validation) may run only on that node's
 * workers (StarPU's task->workerids), so the update reads and writes local
 * memory. Everything else is StarPU's choice: data moves between the nodes
 * as the tasks that read it need it. With one NUMA memory node (a machine
 * of one node, or a rank bound to one: StarPU makes memory nodes for the
 * NUMA nodes of its workers only) that node holds everything, as without
 * placement.
 *
 * Compiled into both StarPU flavours (lower.c uses it); a simulation has one
 * memory node per host and never places anything. */
#ifndef SG_NUMA_PLACE_H
#define SG_NUMA_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "graph/ir.h"
#include "runtime/exec/starpu_setup.h"

typedef struct sg_numa_place {
    int nactive;      /* memory nodes with usable CPU workers; 0: no placement */
    unsigned *active; /* their StarPU memory node ids, ascending */
    int *buffer_node; /* per IR buffer: memory node it is placed on, or -1 */
    uint32_t *masks;  /* per active node: mask_len words, bit w = worker w */
    unsigned mask_len;
    int nsubgroups; /* sub-groups with placed state (highest index + 1) */
} sg_numa_place;

/* Decides the placement of g's buffers (enable 0: none). The active nodes
 * are those with CPU workers in the scheduling context the placed tasks go
 * to (split: cpuadam_cores_perc's optimizer context where it reserves
 * workers), so a sub-group's state lives where the workers that update it
 * are. StarPU must be started. */
int sg_numa_place_init(sg_numa_place *p, const sg_graph *g, int enable, const sg_sched_split *split,
                       sg_error *err);

/* The workers node nd may run on (*len words), or NULL with *len 0: any. */
const uint32_t *sg_numa_place_task(const sg_numa_place *p, const sg_node *nd, uint32_t where,
                                   unsigned *len);

/* The operating system's index of the NUMA node of memory node `mem`, or of
 * CPU worker w's memory (-1 for other workers); -1 outside the NUMA nodes. */
int sg_numa_os_index(int mem);
int sg_numa_worker_os_index(int w);

/* The run header's line (no newline): the NUMA memory nodes, the
 * optimizer's CPU workers on each active one, and how the sub-groups are
 * placed; emulated: the nodes come from numa_emulate. Returns 0 (nothing
 * written) when nothing is placed. */
int sg_numa_place_describe(const sg_numa_place *p, int emulated, char *buf, size_t cap);

void sg_numa_place_free(sg_numa_place *p);

#endif /* SG_NUMA_PLACE_H */
