/* binding.h - which cores StarPU's CPU workers are bound to.
 *
 * StarPU binds each worker to one core through hwloc by itself. With a NUMA
 * node chosen (the run option numa_node, or bind_cores_to_rank, DeepSpeed's
 * launcher flag: rank r of a node takes NUMA node r mod the node count), the
 * CPU workers are bound to the cores of that node only, one worker per
 * physical core, so their memory traffic stays local.
 */
#ifndef SG_BINDING_H
#define SG_BINDING_H

#include "common/error.h"

/* hwloc logical indexes of the first PU of every core of NUMA node `node`
 * (at most cap); *nnodes receives the machine's NUMA node count. Returns the
 * number of cores, or a negative SG_E* code (node out of range: SG_EINVAL
 * with a message giving the count). */
int sg_numa_cores(int node, unsigned *pus, int cap, int *nnodes, sg_error *err);

#endif /* SG_BINDING_H */
